//! POSIX semantics (issue 32) through the preload, each script run on a local directory and
//! on madfs (3 servers) with the same answers expected: special files, names reusable after
//! unlink-while-writing, attribute changes racing size publications, directory fsync and
//! `sync`.

mod common;

use common::{cluster, run_env, MOUNT};
use madfs_cluster::LocalCluster;

/// Runs `script` (bash, `-eu`) in `dir`, under the preload; its stdout (asserting success).
fn in_dir(cl: &LocalCluster, dir: &str, script: &str) -> String {
    let s = format!("mkdir -p '{dir}' && cd '{dir}'\n{script}");
    let argv = ["/bin/bash", "-eu", "-c", &s];
    common::ok(run_env(cl, &argv, 20_000, &[]), script)
}

/// The same script on a local directory (the kernel's answers) and on madfs: equal output.
fn same_as_local(cl: &LocalCluster, name: &str, script: &str) -> String {
    let local = tempfile::tempdir().unwrap();
    let want = in_dir(cl, &format!("{}/{name}", local.path().display()), script);
    let got = in_dir(cl, &format!("{MOUNT}/{name}"), script);
    assert_eq!(
        got, want,
        "madfs (left) and the local file system (right) differ"
    );
    got
}

const SPECIAL: &str = r#"
mkfifo f1
mknod c1 c 1 3
mknod b1 b 7 200
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("s1")'
stat -c '%n %F %a %t:%T %h %s' f1 c1 b1 s1
ls -1F | sort | tr '\n' ' '; echo
echo "fifo: $(find . -type p) socket: $(find . -type s) char: $(find . -type c) block: $(find . -type b)"
# the FIFO carries bytes between two processes
(echo through-the-fifo > f1) & cat f1; wait
# names in use
mkfifo f1 2>&1 | sed 's/.*: //' || true
mknod c1 p 2>&1 | sed 's/.*: //' || true
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("s1")' 2>&1 | tail -1 | sed 's/.*] //' || true
# they rename, change and go like any entry
mv f1 f2; chmod 600 f2; stat -c '%n %F %a' f2
truncate -s 0 f2 2>&1 | sed 's/.*: //' || true
cat c1 | wc -c
# a unix socket bound at a path takes connections there
python3 - <<'EOF'
import socket
s = socket.socket(socket.AF_UNIX); s.bind("sock"); s.listen(1)
c = socket.socket(socket.AF_UNIX); c.connect("sock"); a, _ = s.accept()
c.send(b"hi over a madfs socket"); print(a.recv(64).decode())
try:
    socket.socket(socket.AF_UNIX).connect("f2")
except OSError as e:
    print("connect to a fifo:", e.strerror)
EOF
rm f2 c1 b1 s1 sock
ls | wc -l
"#;

#[test]
fn special_files_are_entries_with_a_type() {
    let cl = cluster();
    let out = same_as_local(&cl, "special", SPECIAL);
    assert!(out.contains("f1 fifo 644 0:0 1 0"), "{out}");
    assert!(out.contains("c1 character special file 644 1:3"), "{out}");
    assert!(out.contains("through-the-fifo"), "{out}");
    assert!(out.contains("hi over a madfs socket"), "{out}");
}

const REUSE: &str = r#"
# a name is free again after an unlink while a writer still writes (and publishes sizes)
exec 3>f
rm f
head -c 100000 /dev/zero >&3
echo small >&3
exec 3>&-
mkdir f && rmdir f
set -o noclobber
echo again > f
cat f
stat -c '%s' f
ls
"#;

#[test]
fn names_are_free_after_unlink_while_writing() {
    let cl = cluster();
    let out = same_as_local(&cl, "reuse", REUSE);
    assert!(out.starts_with("again\n6\nf\n"), "{out}");
}

const RACE: &str = r#"
# chmod, touch and size publications (every dd publishes the size it wrote at close) racing on
# one file: nothing rolls another back
: > f
( for i in $(seq 0 59); do dd if=/dev/zero of=f bs=64k count=1 seek=$i conv=notrunc status=none; done ) &
( for m in 600 640 604 644 664 666 660 606 646 642 624 622 620 602 610 612 600 640 604 751; do
    chmod $m f; done ) &
( for i in $(seq 1 20); do touch -m -d "@$((1000000000 + i))" f; done ) &
wait
stat -c '%s %a' f
"#;

#[test]
fn attribute_changes_never_roll_back_a_size() {
    let cl = cluster();
    for _ in 0..3 {
        let out = same_as_local(&cl, "race", RACE);
        assert_eq!(out.trim(), format!("{} 751", 60 * 65536), "{out}");
        in_dir(&cl, &format!("{MOUNT}/race"), "rm -f f");
    }
}

const DURABLE: &str = r#"
echo data > f
python3 -c 'import os; fd = os.open(".", os.O_RDONLY); os.fsync(fd); os.close(fd); print("dir fsync ok")'
sync
sync -f f && echo syncfs ok
"#;

#[test]
fn directory_fsync_sync_and_syncfs_answer() {
    let cl = cluster();
    let out = same_as_local(&cl, "durable", DURABLE);
    assert_eq!(out, "dir fsync ok\nsyncfs ok\n");
}

const DIR_TIMES: &str = r#"
mkdir -p a b
t() { stat -c '%.9Y %.9Z' "$1"; }
chk() { [ "$1" != "$(t "$2")" ] && echo "$3: changed" || echo "$3: same"; }
step() { sleep 0.05; "$@"; sleep 0.05; }
x=$(t a); step touch a/f; chk "$x" a create
x=$(t a); step mkdir a/d; chk "$x" a mkdir
x=$(t a); step mkfifo a/p; chk "$x" a mkfifo
x=$(t a); step ln -s f a/l; chk "$x" a symlink
x=$(t a); y=$(t b); step mv a/f b/f; chk "$x" a rename-out; chk "$y" b rename-in
x=$(t a); step rm a/p a/l; chk "$x" a unlink
x=$(t a); step rmdir a/d; chk "$x" a rmdir
x=$(t b); step sh -c 'echo data >> b/f'; chk "$x" b write-to-an-entry
x=$(t b); step chmod 600 b/f; chk "$x" b chmod-of-an-entry
"#;

#[test]
fn adding_or_removing_an_entry_changes_its_directory_times() {
    let cl = cluster();
    let out = same_as_local(&cl, "times", DIR_TIMES);
    assert!(
        out.contains("create: changed") && out.contains("rename-in: changed"),
        "{out}"
    );
    assert!(out.contains("write-to-an-entry: same"), "{out}");
}

const RENAME_THROUGH_LINKS: &str = r#"
mkdir real
ln -s real via
echo data > real/f
mv via/f via/g
ls real
mv real/g via/h && cat real/h
ln -s loop1 loop2
ln -s loop2 loop1
python3 -c 'import os
try:
    os.rename("loop1/x", "y")
except OSError as e:
    print(e.strerror)'
"#;

#[test]
fn renames_follow_symbolic_links_among_ancestors() {
    let cl = cluster();
    let out = same_as_local(&cl, "relinks", RENAME_THROUGH_LINKS);
    assert_eq!(out, "g\ndata\nToo many levels of symbolic links\n");
}

const TEMPFILE: &str = r#"
# the tempfile pattern: open, unlink (another process), go on using the descriptor; a child
# process reads and writes through the inherited descriptor too
yes 'some line of text' | head -c 3000000 > data
sum=$(md5sum < data)
exec 3<>tmp
cat data >&3
rm tmp
ls | tr '\n' ' '; echo
echo more >&3
python3 - <<'PY'
import hashlib, os
st = os.fstat(3)
print("nlink", st.st_nlink, "size", st.st_size)
os.lseek(3, 0, 0)
body = b""
while True:
    b = os.read(3, 1 << 20)
    if not b:
        break
    body += b
print(hashlib.md5(body[:3000000]).hexdigest(), body[3000000:].decode().strip())
os.pwrite(3, b"patched", 10)
os.ftruncate(3, 3000005)
print("after ftruncate", os.fstat(3).st_size, os.pread(3, 7, 10).decode())
PY
echo "$sum" | cut -c1-32
exec 3>&-
# the name was free all along
echo new > tmp; cat tmp
"#;

#[test]
fn open_unlinked_files_keep_their_data_until_closed() {
    let cl = cluster();
    let out = same_as_local(&cl, "tempfile", TEMPFILE);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0].trim(), "data", "{out}");
    assert_eq!(lines[1], "nlink 0 size 3000005", "{out}");
    let (md5, more) = lines[2].split_once(' ').unwrap();
    assert_eq!(md5, lines[4], "{out}");
    assert_eq!(more, "more");
    assert_eq!(lines[3], "after ftruncate 3000005 patched", "{out}");
    assert_eq!(lines[5], "new");
}

const LOG_ROTATION: &str = r#"
# a writer appends to log; another process renames it (into another directory, so most
# likely to another server) and the writer goes on: every line ends up in the renamed file
mkdir -p old
exec 3>>log
for i in $(seq 1 50); do echo "before $i" >&3; done
mv log old/log.1
for i in $(seq 1 50); do echo "after $i" >&3; done
python3 -c 'import os; print("fstat size", os.fstat(3).st_size)'
mv old/log.1 log.2
for i in $(seq 1 50); do echo "after again $i" >&3; done
exec 3>&-
# a writer that seeks (not O_APPEND), renamed under it too
exec 4<>w
printf 0123456789 >&4
mv w w.1
printf abcdef >&4
exec 4>&-
wc -l < log.2; grep -c '^after ' log.2; tail -1 log.2; cat w.1; echo
ls -R | tr '\n' ' '; echo
"#;

#[test]
fn writes_follow_a_file_renamed_while_open() {
    let cl = cluster();
    let out = same_as_local(&cl, "logrotate", LOG_ROTATION);
    assert!(
        out.contains("150\n100\nafter again 50\n0123456789abcdef\n"),
        "{out}"
    );
}

const RENAME_OVER_OPEN: &str = r#"
# a file renamed over another that is open: the open one keeps its data for its readers and
# writers, the name shows the new file
printf 'old content\n' > target
exec 4<target
exec 5<>target
echo new > src
mv src target
cat <&4
python3 - <<'PY'
import os
os.pwrite(5, b"written-after\n", 12)
print(os.pread(5, 100, 0).decode(), end="")
st = os.fstat(5)
print("nlink", st.st_nlink, "size", st.st_size)
PY
exec 4<&- 5>&-
cat target
"#;

#[test]
fn renaming_over_an_open_file_keeps_its_data() {
    let cl = cluster();
    let out = same_as_local(&cl, "overopen", RENAME_OVER_OPEN);
    assert_eq!(
        out, "old content\nold content\nwritten-after\nnlink 0 size 26\nnew\n",
        "{out}"
    );
}

const HARD_LINKS: &str = r#"
# names of one file in several directories (most likely on several servers)
printf 'one\n' > a
ln a b
mkdir -p d1 d2
ln a d1/c
ln b d2/e
stat -c '%n %h %s %a %F' a b d1/c d2/e
[ "$(stat -c %i a)" = "$(stat -c %i d2/e)" ] && echo same file
# data and attributes are the file's, whichever name shows them
printf 'two\n' >> d1/c
cat b
chmod 600 d2/e; stat -c '%a' a
touch -m -d @1000000000 b; stat -c '%Y' d1/c
truncate -s 2 a; cat d2/e; echo
python3 -c 'import os; fd = os.open("b", os.O_WRONLY | os.O_APPEND); os.write(fd, b"-appended"); os.close(fd)'
cat d1/c; echo
# what link refuses
ln a b 2>&1 | sed 's/.*: //' || true
ln d1 d3 2>&1 | sed 's/.*: //' || true
ln nope x 2>&1 | sed 's/.*: //' || true
ln a nodir/x 2>&1 | sed 's/.*: //' || true
# names go one by one; the others keep the file
rm a; stat -c '%h %s' b
mv d1/c d2/c2; stat -c '%h %s' d2/c2
# a rename between two names of one file does nothing
python3 -c 'import os; os.rename("b", "d2/e")'; ls b d2/e
# the last names gone while open: still read through the descriptor
exec 3<b
rm b d2/e d2/c2
cat <&3; echo
exec 3<&-
# a symbolic link gets a second name itself; link -L follows it
printf 'target data\n' > t
ln -s t sl
ln sl sl2; readlink sl2; stat -c '%h' sl
ln -L sl hard; stat -c '%h' t; cat hard
rm t sl sl2 hard
ls -R | tr '\n' ' '; echo
"#;

#[test]
fn hard_links_share_data_and_attributes() {
    let cl = cluster();
    let out = same_as_local(&cl, "hardlinks", HARD_LINKS);
    assert!(out.contains("a 4 4 644 regular file\n"), "{out}");
    assert!(
        out.contains("same file\none\ntwo\n600\n1000000000\non\non-appended\n"),
        "{out}"
    );
    assert!(out.contains("File exists\n"), "{out}");
    assert!(out.contains("3 11\n3 11\n"), "{out}");
}
