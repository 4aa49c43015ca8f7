//! Directories at scale under `LD_PRELOAD=libmadfs.so`, 3 real servers on loopback: 100,000
//! entries in one directory listed by `ls -f`, python's `os.scandir` and the parallel listing
//! API (k = 1, 4, 16); `telldir`/`seekdir` cookies; entries created and removed during a
//! listing; `MADFS_IOC_DIR_RANGE` and the find ioctls; the rename matrix; `mv`/`cp -a` of a
//! tree and back.

mod common;

use common::cluster;
use madfs_client::{Client, ClientConfig, FileSystem, OpenFlags};
use madfs_cluster::LocalCluster;
use std::collections::BTreeSet;

/// Call deadline of the programs here (listings of 100,000 entries).
const TIMEOUT_MS: u32 = 60_000;

fn client(cl: &LocalCluster) -> Client {
    let mut cfg = ClientConfig::from_cluster_file(cl.cluster_file()).unwrap();
    cfg.close_sync = false;
    Client::new(&cfg).unwrap()
}

fn bash(cl: &LocalCluster, script: &str) -> String {
    common::bash(cl, script, TIMEOUT_MS)
}

fn syscalls(cl: &LocalCluster, steps: &[&str]) -> String {
    common::syscalls(cl, steps, TIMEOUT_MS)
}

#[test]
fn hundred_thousand_entries_in_one_directory() {
    let cl = cluster();
    let c = client(&cl);
    let n = 100_000usize;
    c.mkdir("/big", 0o755).unwrap();
    for i in 0..n {
        let f = c
            .open(&format!("/big/f.{i}"), OpenFlags::create_trunc())
            .unwrap();
        c.close(f).unwrap();
    }
    let want: BTreeSet<String> = (0..n).map(|i| format!("f.{i}")).collect();

    // the client library: whole listing, and k ranges at once
    let plain = c.readdir("/big").unwrap();
    assert_eq!(plain.len(), n);
    for k in [1, 4, 16] {
        let par = c.readdir_parallel("/big", k).unwrap();
        assert_eq!(par, plain, "parallel listing with k = {k}");
    }
    let names: BTreeSet<String> = plain.iter().map(|e| e.name.clone()).collect();
    assert_eq!(names, want);

    // programs under the preload
    let out = bash(
        &cl,
        r#"
        echo "ls $(ls -f /madfs/big | wc -l)"
        echo "ls-sorted $(ls /madfs/big | sort -u | wc -l)"
        python3 -c 'import os; print("scandir", sum(1 for e in os.scandir("/madfs/big")))'
        python3 -c 'import os; print("listdir-unique", len(set(os.listdir("/madfs/big"))))'
        "#,
    );
    assert!(out.contains(&format!("ls {}\n", n + 2)), "{out}");
    assert!(out.contains(&format!("ls-sorted {n}\n")), "{out}");
    assert!(out.contains(&format!("scandir {n}\n")), "{out}");
    assert!(out.contains(&format!("listdir-unique {n}\n")), "{out}");

    // seekdir to every 1,000th cookie resumes exactly; 16 ranged fds list the same set
    let out = syscalls(
        &cl,
        &["seekcheck,/madfs/big,1000", "rangelist,/madfs/big,16"],
    );
    assert!(out.contains(&format!("seekcheck OK {n}")), "{out}");
    assert!(out.contains("101 marks, 0 wrong"), "{out}");
    assert!(out.contains(&format!("rangelist OK {n}")), "{out}");

    // entries removed and added half-way through a listing: the others exactly once
    let out = syscalls(&cl, &["listmut,/madfs/big,1000"]);
    assert!(out.contains("0 repeated, 0 skipped"), "{out}");
    assert!(out.contains("listmut OK"), "{out}");
}

#[test]
fn small_buffers_cookies_and_find_ioctls() {
    let cl = cluster();
    let c = client(&cl);
    c.mkdir("/d", 0o755).unwrap();
    for i in 0..300 {
        let mut f = c
            .open(&format!("/d/x{i:03}"), OpenFlags::create_trunc())
            .unwrap();
        if i % 3 == 0 {
            c.write(&mut f, 0, &[7u8; 3901]).unwrap();
        }
        c.close(f).unwrap();
    }
    c.mkdir("/d/sub", 0o755).unwrap();
    let f = c.open("/d/sub/x010", OpenFlags::create_trunc()).unwrap();
    c.close(f).unwrap();
    // telldir after every entry; 7 ranged fds; getdents64 with room for one or two entries
    let out = syscalls(
        &cl,
        &[
            "seekcheck,/madfs/d,1",
            "rangelist,/madfs/d,7",
            "smallbuf,/madfs/d,40",
            "smallbuf,/madfs/d,100",
        ],
    );
    assert!(out.contains("seekcheck OK 301"), "{out}");
    assert!(out.contains("rangelist OK 301"), "{out}");
    assert!(
        out.contains("smallbuf 40 bytes: 301 entries, same order: true"),
        "{out}"
    );
    assert!(
        out.contains("smallbuf 100 bytes: 301 entries, same order: true"),
        "{out}"
    );
    // server-side find through the ioctls: *01* of size 3901 → x010 (not x010 in sub: size 0),
    // x012? no: names with "01" are x001, x010..x019, x201, x210..x219, sub/x010
    let out = syscalls(&cl, &["findioctl,/madfs/d,*01*,3901"]);
    let want: Vec<String> = (0..300)
        .filter(|i| i % 3 == 0 && format!("x{i:03}").contains("01"))
        .map(|i| format!("x{i:03}"))
        .collect();
    assert!(
        out.contains(&format!(
            "findioctl matched {} scanned 302 listed {}",
            want.len(),
            want.join(" ")
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("findioctl OK {}", want.len())),
        "{out}"
    );
    // a regular file answers ENOTTY, as before
    let out = syscalls(&cl, &["open,/madfs/d/x000", "ioctl,#0"]);
    assert!(out.contains("ioctl ERR ENOTTY"), "{out}");
}

#[test]
fn rename_matrix_and_trees() {
    let cl = cluster();
    let out = syscalls(
        &cl,
        &[
            "mkdir,/madfs/r",
            "mkdir,/madfs/r/a",
            "mkdir,/madfs/r/b",
            "open,/madfs/r/a/f,creat+w",
            "write,#0,hello",
            "close,#0",
            "open,/madfs/r/a/g,creat+w",
            "close,#1",
            // file → new name, across directories
            "rename,/madfs/r/a/f,/madfs/r/b/f2",
            "stat,/madfs/r/b/f2",
            "stat,/madfs/r/a/f",
            // file → existing file (replaced)
            "rename,/madfs/r/b/f2,/madfs/r/a/g",
            "stat,/madfs/r/a/g",
            // file → directory, directory → file
            "rename,/madfs/r/a/g,/madfs/r/b",
            "rename,/madfs/r/b,/madfs/r/a/g",
            // directory into its own subtree
            "rename,/madfs/r/a,/madfs/r/a/sub",
            // directory → new name, then over an empty directory, then over a non-empty one
            "mkdir,/madfs/r/a/deep",
            "mkdir,/madfs/r/a/deep/er",
            "rename,/madfs/r/a,/madfs/r/c",
            "stat,/madfs/r/c/deep/er",
            "stat,/madfs/r/c/g",
            "stat,/madfs/r/a",
            "rename,/madfs/r/c,/madfs/r/b",
            "stat,/madfs/r/b/g",
            "mkdir,/madfs/r/e",
            "open,/madfs/r/e/x,creat+w",
            "close,#2",
            "rename,/madfs/r/b,/madfs/r/e",
            "open,/madfs/r/b/g,r",
            "read,#3,5",
        ],
    );
    let expect = [
        "rename OK 0",
        "size 5 ",
        "stat ERR ENOENT",
        "rename OK 0",
        "size 5 ",
        "rename ERR EISDIR",
        "rename ERR ENOTDIR",
        "rename ERR EINVAL",
        "rename OK 0",
        "stat OK",
        "size 5 ",
        "stat ERR ENOENT",
        "rename OK 0",
        "size 5 ",
        "rename ERR ENOTEMPTY",
        "data hello",
        "read OK 5",
    ];
    let mut rest = out.as_str();
    for e in expect {
        let at = rest
            .find(e)
            .unwrap_or_else(|| panic!("expected {e:?} in order in:\n{out}"));
        rest = &rest[at + e.len()..];
    }

    // a real tree: cp -a in, mv (directory rename across servers), cp -a back, identical
    let out = bash(
        &cl,
        r#"
        cp -a /usr/include/linux /madfs/r/linux
        mv /madfs/r/linux /madfs/r/e/linux2
        [ ! -e /madfs/r/linux ] && echo "old name gone"
        mv /madfs/r/e /madfs/r/moved
        cp -a /madfs/r/moved/linux2 "$T/back"
        diff -r /usr/include/linux "$T/back" && echo "tree identical"
        find /madfs/r/moved/linux2 | wc -l
        find /usr/include/linux | wc -l
        rm -rf /madfs/r && [ ! -e /madfs/r ] && echo "removed"
        "#,
    );
    assert!(out.contains("old name gone"), "{out}");
    assert!(out.contains("tree identical"), "{out}");
    assert!(out.contains("removed"), "{out}");
    let counts: Vec<&str> = out
        .lines()
        .filter(|l| l.trim().parse::<u64>().is_ok())
        .collect();
    assert_eq!(counts.len(), 2, "{out}");
    assert_eq!(counts[0].trim(), counts[1].trim(), "{out}");
}

#[test]
fn symbolic_links() {
    let cl = cluster();
    let out = bash(
        &cl,
        r#"
        mkdir -p /madfs/s/d
        echo hi > /madfs/s/file
        ln -s file /madfs/s/rel
        ln -s /madfs/s/file /madfs/s/abs
        ln -s /etc/services /madfs/s/out
        ln -s /madfs/s /madfs/s2
        ln -s ../file /madfs/s/d/up
        ln -s nowhere /madfs/s/dangling
        echo "readlink $(readlink /madfs/s/rel) $(readlink /madfs/s/abs) $(readlink /madfs/s2)"
        echo "cat $(cat /madfs/s/rel) $(cat /madfs/s/abs) $(cat /madfs/s/d/up) $(cat /madfs/s2/file) $(cat /madfs/s2/d/up)"
        cmp /madfs/s/out /etc/services && echo "outside ok"
        echo "types $(stat -c %F /madfs/s/rel) / $(stat -L -c %F /madfs/s/rel) / $(stat -L -c %F /madfs/s2)"
        [ -L /madfs/s/dangling ] && [ ! -e /madfs/s/dangling ] && echo "dangling ok"
        echo "ls $(ls -l /madfs/s | grep -c ' -> ')"
        echo "find-l $(find /madfs/s -type l | wc -l)"
        echo more > /madfs/s2/new && cat /madfs/s/new
        echo append >> /madfs/s/rel && echo "size $(stat -L -c %s /madfs/s/rel) $(stat -c %s /madfs/s/file)"
        cd /madfs/s2/d && cat up && cd /
        mv /madfs/s/rel /madfs/s/d/rel2 && echo "moved $(readlink /madfs/s/d/rel2)"
        chmod 600 /madfs/s/abs && echo "mode $(stat -c %a /madfs/s/file)"
        python3 - <<'PY'
import os
print("py", os.readlink("/madfs/s/abs"), os.path.islink("/madfs/s/abs"), os.path.islink("/madfs/s/file"),
      os.stat("/madfs/s/abs").st_size, os.lstat("/madfs/s/abs").st_size,
      sorted(e.name for e in os.scandir("/madfs/s") if e.is_symlink()))
os.symlink("d", "/madfs/s/dlink")
print("pydir", sorted(os.listdir("/madfs/s/dlink")))
PY
        cp -a /madfs/s "$T/s-back" && readlink "$T/s-back/abs" && cat "$T/s-back/file" | head -1
        rm -rf /madfs/s /madfs/s2 && [ ! -e /madfs/s ] && echo "root-entries $(ls /madfs | wc -l)"
        "#,
    );
    for e in [
        "readlink file /madfs/s/file /madfs/s\n",
        "cat hi hi hi hi hi\n",
        "outside ok\n",
        "types symbolic link / regular file / directory\n",
        "dangling ok\n",
        "ls 4\n",
        "find-l 5\n",
        "more\n",
        "size 10 10\n",
        "hi\n",
        "moved file\n",
        "mode 600\n",
        "py /madfs/s/file True False 10 13 ['abs', 'dangling', 'out']\n",
        "pydir ['rel2', 'up']\n",
        "/madfs/s/file\n",
        "root-entries 0\n",
    ] {
        assert!(out.contains(e), "missing {e:?} in:\n{out}");
    }
    let out = syscalls(
        &cl,
        &[
            "mkdir,/madfs/n",
            "open,/madfs/n/f,creat+w",
            "symlink,f,/madfs/n/l",
            "open,/madfs/n/l,r+nofollow",
            "open,/madfs/n/l,r",
            "lstat,/madfs/n/l",
            "symlink,f,/madfs/n/l",
            "symlink,x,/madfs/n/f",
            "symlink,l2,/madfs/n/l1",
            "symlink,l1,/madfs/n/l2",
            "open,/madfs/n/l1,r",
            "link,/madfs/n/f,/madfs/n/h",
        ],
    );
    let want =
        "mkdir OK 0\nopen OK *\nsymlink OK 0\nopen ERR ELOOP\nopen OK *\nsize 1 mode 120777\n\
lstat OK 0\nsymlink ERR EEXIST\nsymlink ERR EEXIST\nsymlink OK 0\nsymlink OK 0\nopen ERR ELOOP\n\
link OK 0\n";
    let got: Vec<&str> = out.lines().collect();
    let exp: Vec<&str> = want.lines().collect();
    assert_eq!(got.len(), exp.len(), "{out}");
    for (g, e) in got.iter().zip(&exp) {
        match e.strip_suffix('*') {
            Some(prefix) => assert!(g.starts_with(prefix), "{g} vs {e}\n{out}"),
            None => assert_eq!(g, e, "{out}"),
        }
    }
}
