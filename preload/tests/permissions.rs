//! Permissions as the kernel enforces them: the same steps run by root (set-up) and by user
//! `nobody` (the checks) on a local ext4 directory and on madfs (3 servers, MUNGE mode, real
//! programs under the preload), and the answers must be the same (docs/security.md).

mod common;

use madfs_cluster::{find_bin, LocalCluster, Munged, Options};
use std::process::Command;

const SETUP: &str = r#"
mkdir "$B/pub" "$B/priv" "$B/sticky" "$B/ro" "$B/ro/sub" "$B/grp"
chmod 0777 "$B/pub"; chmod 0700 "$B/priv"; chmod 1777 "$B/sticky"; chmod 0755 "$B/ro"
echo secret > "$B/priv/secret"; chmod 0600 "$B/priv/secret"
echo hello > "$B/ro/rootfile"; chmod 0644 "$B/ro/rootfile"
echo hidden > "$B/ro/root600"; chmod 0600 "$B/ro/root600"
echo shared > "$B/sticky/rootowned"; chmod 0666 "$B/sticky/rootowned"
chgrp 65534 "$B/grp"; chmod 0570 "$B/grp"
echo g > "$B/grp/file"; chmod 0604 "$B/grp/file"
echo s > "$B/pub/setid"; chmod 6777 "$B/pub/setid"
ln -s target "$B/ro/rlink"
mkdir "$B/sg"; chgrp 4321 "$B/sg"; chmod 2777 "$B/sg"
echo setup-done
"#;

/// Each step prints its number, its exit status and whether it said EACCES or EPERM.
const CHECKS: &str = r#"
step() { n=$1; shift; out=$("$@" 2>&1); rc=$?
  case "$out" in *"Permission denied"*) why=EACCES;; *"Operation not permitted"*) why=EPERM;; *) why=-;; esac
  echo "$n rc=$rc $why"; }
step 1 cat "$B/priv/secret"
step 2 ls "$B/priv"
step 3 stat -c %s "$B/priv/secret"
step 4 cat "$B/ro/root600"
step 5 cat "$B/ro/rootfile"
step 6 touch "$B/ro/new"
step 7 mkdir "$B/ro/d"
step 8 rm -f "$B/ro/rootfile"
step 9 mv "$B/ro/rootfile" "$B/pub/moved"
step 10 sh -c "echo mine > '$B/pub/mine'"
step 11 stat -c %u:%g "$B/pub/mine"
step 12 chmod 600 "$B/ro/rootfile"
step 13 chown 0 "$B/pub/mine"
step 14 chmod 640 "$B/pub/mine"
step 15 rm -f "$B/sticky/rootowned"
step 16 sh -c "echo more >> '$B/sticky/rootowned'"
step 17 ln -s x "$B/ro/link"
step 18 rmdir "$B/ro/sub"
step 19 test -r "$B/ro/root600"
step 20 test -w "$B/ro/rootfile"
step 21 test -r "$B/ro/rootfile"
step 22 touch -d 2000-01-01 "$B/ro/rootfile"
step 23 touch "$B/sticky/rootowned"
step 24 truncate -s 0 "$B/ro/rootfile"
step 25 mkdir "$B/pub/mydir"
step 26 chmod 0700 "$B/pub/mydir"
step 27 sh -c "echo deep > '$B/pub/mydir/f'"
step 28 mv "$B/pub/mine" "$B/pub/mydir/mine"
step 29 cat "$B/grp/file"
step 30 ls "$B/grp"
step 31 touch "$B/grp/new"
step 32 rm -f "$B/pub/mydir/mine"
step 33 sh -c "echo x > '$B/sticky/by-nobody'"
step 34 rm -f "$B/sticky/by-nobody"
step 35 test -x "$B/ro"
step 36 chgrp 0 "$B/pub/mydir/f"
step 37 sh -c "echo w >> '$B/pub/setid'"
echo "setid after a write: $(stat -c %a "$B/pub/setid")"
step 39 ln "$B/pub/setid" "$B/pub/hl2"
# madfs always applies Linux's protected_hardlinks; the kernel only where it is on
if [ "$(cat /proc/sys/fs/protected_hardlinks 2>/dev/null)" = 1 ]; then
  step 38 ln "$B/ro/rootfile" "$B/pub/hl"
  step 40 ln "$B/ro/rootfile" "$B/ro/hl"
fi
step 41 python3 -c 'import os, sys; os.open(sys.argv[1], os.O_RDONLY | os.O_TRUNC)' "$B/ro/rootfile"
echo "after O_RDONLY|O_TRUNC: $(stat -c %s "$B/ro/rootfile")"
step 42 ln -sfn elsewhere "$B/ro/rlink"
echo "root's link: $(readlink "$B/ro/rlink")"
step 43 touch "$(dirname "$B")/top-by-nobody"
step 44 mkdir "$(dirname "$B")/top-dir-by-nobody"
echo "the root directory: $(stat -c %a:%u:%g "$(dirname "$B")")"
step 45 sh -c "echo g > '$B/sg/f'"
step 46 mkdir "$B/sg/d"
echo "in a set-gid directory: $(stat -c %g "$B/sg/f") $(stat -c %g:%a "$B/sg/d")"
"#;

/// Runs `script` with `B` = `base`, as root or as nobody, with or without the preload.
fn run(cl: Option<(&LocalCluster, &str)>, base: &str, script: &str, nobody: bool) -> String {
    let mut cmd = if nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        c.arg("/bin/bash");
        c
    } else {
        Command::new("/bin/bash")
    };
    cmd.args(["-c", script]).env("B", base).current_dir("/");
    if let Some((cl, sock)) = cl {
        cmd.env("LD_PRELOAD", find_bin("libmadfs.so"))
            .env("MADFS_CLUSTER", cl.cluster_file())
            .env("MADFS_MOUNT", common::MOUNT)
            .env("MADFS_MUNGE_SOCKET", sock)
            .env("MADFS_TIMEOUT_MS", "20000")
            .env("UCX_NET_DEVICES", "lo");
    }
    let out = cmd.output().expect("spawn");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn nobody_gets_what_the_kernel_gives() {
    let _ = std::fs::create_dir_all(common::MOUNT);
    let munged = Munged::start().expect("munged (apt install munge)");
    let sock = munged.socket().display().to_string();
    let cl = LocalCluster::start(Options {
        servers: 3,
        args: vec!["--auth".into(), "munge".into()],
        env: vec![("MADFS_MUNGE_SOCKET".into(), sock.clone())],
        ..Default::default()
    })
    .expect("start servers");
    // the local side: a directory everyone may reach
    let local = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        local.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let lbase = local.path().join("t");
    std::fs::create_dir(&lbase).unwrap();
    std::fs::set_permissions(&lbase, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let lbase = lbase.display().to_string();
    let mbase = format!("{}/perm", common::MOUNT);
    let setup = format!("mkdir -p {mbase} && chmod 755 {mbase}\n{SETUP}");
    assert!(run(None, &lbase, SETUP, false).contains("setup-done"));
    let out = run(Some((&cl, &sock)), &mbase, &setup, false);
    assert!(out.contains("setup-done"), "{out}");

    let want = run(None, &lbase, CHECKS, true);
    let got = run(Some((&cl, &sock)), &mbase, CHECKS, true);
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let mut differ = Vec::new();
    for (a, b) in w.iter().zip(&g) {
        if a != b {
            differ.push(format!("ext4: {a:<16} madfs: {b}"));
        }
    }
    assert_eq!(w.len(), g.len(), "ext4:\n{want}\nmadfs:\n{got}");
    assert!(
        differ.is_empty(),
        "answers differ:\n{}\n\nmadfs output:\n{got}",
        differ.join("\n")
    );
    eprintln!("madfs answers:\n{got}");
    // the servers' find shows nobody only what it could reach listing its way down (as GNU
    // find on ext4 does): nothing inside the 0700 directory
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(find_bin("madfs-find"))
        .arg(&mbase)
        .env("MADFS_CLUSTER", cl.cluster_file())
        .env("MADFS_MUNGE_SOCKET", &sock)
        .env("UCX_NET_DEVICES", "lo")
        .output()
        .unwrap();
    let found = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{found}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        found.contains("ro/rootfile") && found.contains("priv"),
        "{found}"
    );
    assert!(!found.contains("secret"), "{found}");
    let ext4 = run(None, &lbase, r#"find "$B" 2>/dev/null"#, true);
    assert!(
        ext4.contains("ro/rootfile") && !ext4.contains("secret"),
        "{ext4}"
    );
    // and what nobody made belongs to nobody
    assert!(got.contains("11 rc=0 -"), "{got}");
    let owner = run(
        Some((&cl, &sock)),
        &mbase,
        r#"stat -c %u:%g "$B/pub/mydir/f""#,
        false,
    );
    assert_eq!(owner.trim(), "65534:65534");
}
