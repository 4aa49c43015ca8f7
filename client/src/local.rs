//! Local reads: a client on the same host as a server reads the chunk files of that server
//! directly (`pread` out of the page cache they share) instead of sending it a `Read` and
//! receiving the bytes by a cross-memory copy. Writes always go to the server.
//!
//! A server is local when it runs under the same kernel (its `boot_id` is ours) and the
//! client reads, at the chunk directory the server names, the random token that server wrote
//! there at start (`Request::Locate`): same kernel and same view of the file, so the page
//! cache the server's `pwrite`s went into is the one the client reads. Anything else (other
//! host, another mount namespace, no permission, an old server) keeps the server's reads.
//!
//! What a read sees is what the server's own read of the same bytes would return at that
//! moment: the chunk file holds every acknowledged write (the server writes it before it
//! answers), a missing file or a hole reads as zeros, a short file ends with zeros. Chunk 0
//! always goes to the server (its first bytes live in RocksDB).
//!
//! Descriptors are cached per (server, file id), four per client, and checked with `fstat`
//! before each use: the program may have closed the number or put another file there (a
//! shell's `exec 12>log`), and a file removed on the server (`st_nlink` 0) is opened again
//! (a later write through a handle of the removed file makes a new one).

use madfs_proto::{Errno, FsResult};
use std::cell::RefCell;

/// Descriptors kept open at once by one client. The preload library has a client per thread,
/// so this is per thread: a streaming read needs one per local server holding its chunks, and
/// a re-open costs ≈ 2 µs against the copy of a chunk piece.
const CACHED_FDS: usize = 4;
/// Lowest descriptor number used (a program names 0–9 freely in shells and `dup2`).
const FD_MIN: i32 = 10;

enum Where {
    Unknown,
    Remote,
    /// The server's chunk directory.
    Local(String),
}

struct Cached {
    server: u32,
    id: u64,
    fd: i32,
    dev: u64,
    ino: u64,
}

/// What `Locate` answered: boot id, chunk directory, token.
pub(crate) type Located = (String, String, u64);

/// The local-read state of one client.
pub(crate) struct LocalReads {
    boot: Option<String>,
    servers: RefCell<Vec<Where>>,
    fds: RefCell<Vec<Cached>>,
}

/// `fstat` of `fd`: (device, inode, still linked), or `None` if it is not open.
fn identity(fd: i32) -> Option<(u64, u64, bool)> {
    // SAFETY: fstat with a zeroed out-parameter; a bad descriptor only fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino, st.st_nlink > 0))
}

fn close(fd: i32) {
    // SAFETY: `fd` was checked to be the descriptor this module opened.
    unsafe { libc::close(fd) };
}

impl LocalReads {
    /// Local reads for `n` servers; `enabled` false never reads locally.
    pub(crate) fn new(enabled: bool, n: u32) -> LocalReads {
        let boot = enabled
            .then(|| std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok())
            .flatten()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        LocalReads {
            servers: RefCell::new(
                (0..n)
                    .map(|_| {
                        if boot.is_some() {
                            Where::Unknown
                        } else {
                            Where::Remote
                        }
                    })
                    .collect(),
            ),
            boot,
            fds: RefCell::default(),
        }
    }

    /// Is `server` on this host with its chunk files readable? The first time, `locate` asks
    /// the server where its files are.
    pub(crate) fn is_local(&self, server: u32, locate: impl FnOnce() -> FsResult<Located>) -> bool {
        let mut servers = self.servers.borrow_mut();
        let Some(w) = servers.get_mut(server as usize) else {
            return false;
        };
        if let Where::Unknown = w {
            *w = match locate() {
                Ok((boot, dir, token)) if Some(&boot) == self.boot.as_ref() => {
                    let seen =
                        std::fs::read_to_string(format!("{dir}/{}", madfs_placement::TOKEN_FILE))
                            .ok()
                            .and_then(|s| s.trim().parse::<u64>().ok());
                    if seen == Some(token) {
                        Where::Local(dir)
                    } else {
                        Where::Remote
                    }
                }
                // the server did not answer: ask again next time
                Err(Errno::EIO | Errno::ETIMEDOUT | Errno::ENOTCONN) => return false,
                _ => Where::Remote,
            };
        }
        matches!(w, Where::Local(_))
    }

    /// Reads file `id`'s bytes at `pos` from `server`'s chunk file into `out`; the bytes
    /// present (fewer at the end of the local file, 0 if there is none). `None`: read through
    /// the server instead (not local, or the file could not be read here).
    pub(crate) fn read(&self, server: u32, id: u64, pos: u64, out: &mut [u8]) -> Option<usize> {
        let fd = match self.fd(server, id)? {
            Some(fd) => fd,
            None => return Some(0), // no local file: a hole
        };
        let mut done = 0;
        while done < out.len() {
            let rest = &mut out[done..];
            // SAFETY: pread into `rest`, which we own for the call.
            let n = unsafe {
                libc::pread(
                    fd,
                    rest.as_mut_ptr().cast(),
                    rest.len(),
                    (pos + done as u64) as libc::off_t,
                )
            };
            match n {
                0 => break,
                n if n > 0 => done += n as usize,
                _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
                _ => return None,
            }
        }
        Some(done)
    }

    /// An open descriptor of `server`'s file `id` (`Some(None)`: there is no such file).
    fn fd(&self, server: u32, id: u64) -> Option<Option<i32>> {
        let mut fds = self.fds.borrow_mut();
        if let Some(i) = fds.iter().position(|c| c.server == server && c.id == id) {
            let c = &fds[i];
            match identity(c.fd) {
                Some((dev, ino, linked)) if dev == c.dev && ino == c.ino => {
                    if linked {
                        return Some(Some(c.fd));
                    }
                    close(c.fd); // ours, but the file was removed: open the name again
                }
                _ => {} // closed, or another file now: not ours any more
            }
            fds.swap_remove(i);
        }
        let dir = match self.servers.borrow().get(server as usize) {
            Some(Where::Local(d)) => d.clone(),
            _ => return None,
        };
        let path = format!("{dir}/{}\0", madfs_placement::chunk_file(id));
        // SAFETY: a NUL-terminated path; a plain read-only open.
        let low = unsafe {
            libc::open(
                path.as_ptr().cast(),
                libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY,
            )
        };
        if low < 0 {
            let e = std::io::Error::last_os_error().raw_os_error();
            return (e == Some(libc::ENOENT)).then_some(None);
        }
        // SAFETY: dup of the descriptor just opened to a number ≥ FD_MIN, then its close.
        let fd = unsafe { libc::fcntl(low, libc::F_DUPFD_CLOEXEC, FD_MIN) };
        close(low);
        let (dev, ino, _) = identity(fd)?;
        if fds.len() >= CACHED_FDS {
            let old = fds.remove(0);
            if identity(old.fd).map(|(d, i, _)| (d, i)) == Some((old.dev, old.ino)) {
                close(old.fd);
            }
        }
        fds.push(Cached {
            server,
            id,
            fd,
            dev,
            ino,
        });
        Some(Some(fd))
    }
}

impl Drop for LocalReads {
    fn drop(&mut self) {
        for c in self.fds.get_mut().drain(..) {
            if identity(c.fd).map(|(d, i, _)| (d, i)) == Some((c.dev, c.ino)) {
                close(c.fd);
            }
        }
    }
}

/// `Locate`'s reply for [`LocalReads::is_local`].
pub(crate) fn located(r: madfs_proto::Reply<'_>) -> FsResult<Located> {
    match r {
        madfs_proto::Reply::Located { boot, dir, token } => {
            Ok((boot.to_string(), dir.to_string(), token))
        }
        _ => Err(Errno::EPROTO),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boot() -> String {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn a_server_is_local_only_with_our_kernel_and_its_token() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "42\n").unwrap();
        let d = dir.path().display().to_string();
        let l = LocalReads::new(true, 5);
        // no answer: asked again next time
        assert!(!l.is_local(0, || Err(Errno::EIO)));
        assert!(l.is_local(0, || Ok((boot(), d.clone(), 42))));
        assert!(l.is_local(0, || panic!("asked twice")));
        // another token, another kernel, a server that does not know Locate
        assert!(!l.is_local(1, || Ok((boot(), d.clone(), 43))));
        assert!(!l.is_local(2, || Ok(("other".into(), d.clone(), 42))));
        assert!(!l.is_local(3, || Err(Errno::EINVAL)));
        assert!(!l.is_local(3, || Ok((boot(), d.clone(), 42))), "decided");
        assert!(
            !l.is_local(9, || Ok((boot(), d.clone(), 42))),
            "no such server"
        );
        // turned off
        let off = LocalReads::new(false, 1);
        assert!(!off.is_local(0, || Ok((boot(), d.clone(), 42))));
    }

    #[test]
    fn reads_fill_from_the_chunk_file_and_missing_files_are_holes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "7\n").unwrap();
        let id = 0x1234u64;
        let path = dir.path().join(madfs_placement::chunk_file(id));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"0123456789").unwrap();
        let d = dir.path().display().to_string();
        let l = LocalReads::new(true, 1);
        assert!(l.is_local(0, || Ok((boot(), d.clone(), 7))));
        let mut buf = [0xffu8; 8];
        assert_eq!(l.read(0, id, 4, &mut buf), Some(6), "short at the end");
        assert_eq!(&buf[..6], b"456789");
        assert_eq!(l.read(0, id + 1, 0, &mut buf), Some(0), "no file: a hole");
        // the file removed and made again: the new bytes, not the old inode's
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"abcdefghij").unwrap();
        assert_eq!(l.read(0, id, 0, &mut buf), Some(8));
        assert_eq!(&buf, b"abcdefgh");
    }
}
