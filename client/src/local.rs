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
//!
//! With checksums (the cluster's identity record) every local read is verified like the
//! server's own: whole 4 KiB blocks against the record file beside the chunk file
//! (`madfs-checksum`); a mismatch, a missing record file or a missing chunk file sends the
//! read to the server, which reads again under its block locks and answers the bytes or EIO.

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
    /// The record file's descriptor (checksums), else -1.
    sums: i32,
    dev: u64,
    ino: u64,
}

/// What `Locate` answered: boot id, chunk directory, token.
pub(crate) type Located = (String, String, u64);

/// The local-read state of one client.
pub(crate) struct LocalReads {
    boot: Option<String>,
    checksums: bool,
    servers: RefCell<Vec<Where>>,
    fds: RefCell<Vec<Cached>>,
    /// Per server, the address of its map-epoch file's mapping ([`LocalReads::published`]).
    epochs: RefCell<Vec<Option<usize>>>,
}

/// `fstat` of `fd`: (device, inode, still linked), or `None` if it is not open.
fn identity(fd: i32) -> Option<(u64, u64, bool)> {
    // SAFETY: fstat with a zeroed out-parameter; a bad descriptor only fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino, st.st_nlink > 0))
}

/// The size of the file open at `fd`, `None` if it cannot be asked.
fn identity_size(fd: i32) -> Option<i64> {
    // SAFETY: fstat with a zeroed out-parameter; a bad descriptor only fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_size)
}

fn close(fd: i32) {
    // SAFETY: `fd` was checked to be the descriptor this module opened.
    unsafe { libc::close(fd) };
}

impl LocalReads {
    /// Local reads for `n` servers; `enabled` false never reads locally.
    pub(crate) fn new(enabled: bool, checksums: bool, n: u32) -> LocalReads {
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
            checksums,
            fds: RefCell::default(),
            epochs: RefCell::new(vec![None; n as usize]),
        }
    }

    /// Room for servers up to id `n - 1` (servers that joined: asked where they are on
    /// first use).
    pub(crate) fn grow(&self, n: u32) {
        let mut servers = self.servers.borrow_mut();
        while servers.len() < n as usize {
            servers.push(if self.boot.is_some() {
                Where::Unknown
            } else {
                Where::Remote
            });
        }
        self.epochs.borrow_mut().resize(servers.len(), None);
    }

    /// The cluster map epoch local server `server` published (`madfs_placement::EPOCH_FILE`),
    /// `None` if it cannot be read. A chunk file is read here only while the client's layout
    /// is at least that new, and only if the epoch did not change meanwhile (a slot's old
    /// owner publishes a switch before it drops the slot's chunks). The file is mapped once:
    /// a check is one load (two per read, which a 4 KiB random read would pay dearly as
    /// system calls).
    pub(crate) fn published(&self, server: u32) -> Option<u64> {
        let mut epochs = self.epochs.borrow_mut();
        let e = epochs.get_mut(server as usize)?;
        if e.is_none() {
            let dir = match self.servers.borrow().get(server as usize) {
                Some(Where::Local(d)) => d.clone(),
                _ => return None,
            };
            let fd = open_high(&format!("{dir}/{}\0", madfs_placement::EPOCH_FILE)).ok()?;
            let size = identity_size(fd);
            // SAFETY: a read-only shared mapping of the first 8 bytes of the file just opened
            // (checked to hold them); the mapping outlives the descriptor, closed here.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    8,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            };
            close(fd);
            if size < Some(8) || p == libc::MAP_FAILED {
                return None;
            }
            *e = Some(p as usize);
        }
        let p = (*e)? as *const std::sync::atomic::AtomicU64;
        // SAFETY: `p` is the page-aligned start of a live mapping of a file of at least 8
        // bytes (the server writes it in place, never shorter); an aligned 8-byte load.
        Some(unsafe { (*p).load(std::sync::atomic::Ordering::Acquire) })
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
        let (fd, sums) = match self.fd(server, id)? {
            Some(fd) => fd,
            // no local file: a hole, or (checksums) maybe lost: the server knows
            None if self.checksums => return None,
            None => return Some(0),
        };
        if self.checksums {
            return verified_read(fd, sums, pos, out);
        }
        preadv_all(fd, &mut [out], pos)
    }

    /// An open descriptor of `server`'s file `id` (`Some(None)`: there is no such file).
    fn fd(&self, server: u32, id: u64) -> Option<Option<(i32, i32)>> {
        let mut fds = self.fds.borrow_mut();
        if let Some(i) = fds.iter().position(|c| c.server == server && c.id == id) {
            let c = &fds[i];
            match identity(c.fd) {
                Some((dev, ino, linked)) if dev == c.dev && ino == c.ino => {
                    if linked {
                        return Some(Some((c.fd, c.sums)));
                    }
                    close(c.fd); // ours, but the file was removed: open the name again
                    close_sums(c.sums);
                }
                _ => {} // closed, or another file now: not ours any more
            }
            fds.swap_remove(i);
        }
        let dir = match self.servers.borrow().get(server as usize) {
            Some(Where::Local(d)) => d.clone(),
            _ => return None,
        };
        let name = madfs_placement::chunk_file(id);
        let fd = match open_high(&format!("{dir}/{name}\0")) {
            Ok(fd) => fd,
            Err(e) => return (e == Some(libc::ENOENT)).then_some(None),
        };
        let (dev, ino, _) = identity(fd)?;
        let sums = if self.checksums {
            let record = madfs_checksum::record_file(&name);
            match open_high(&format!("{dir}/{record}\0")) {
                Ok(s) => s,
                Err(_) => {
                    close(fd);
                    return None; // the server's read
                }
            }
        } else {
            -1
        };
        if fds.len() >= CACHED_FDS {
            let old = fds.remove(0);
            if identity(old.fd).map(|(d, i, _)| (d, i)) == Some((old.dev, old.ino)) {
                close(old.fd);
                close_sums(old.sums);
            }
        }
        fds.push(Cached {
            server,
            id,
            fd,
            sums,
            dev,
            ino,
        });
        Some(Some((fd, sums)))
    }
}

impl Drop for LocalReads {
    fn drop(&mut self) {
        for p in self.epochs.get_mut().drain(..).flatten() {
            // SAFETY: a mapping of 8 bytes this module made and nothing else unmaps.
            unsafe { libc::munmap(p as *mut libc::c_void, 8) };
        }
        for c in self.fds.get_mut().drain(..) {
            if identity(c.fd).map(|(d, i, _)| (d, i)) == Some((c.dev, c.ino)) {
                close(c.fd);
                close_sums(c.sums);
            }
        }
    }
}

/// `Locate`'s reply for [`LocalReads::is_local`].
/// Opens `path` (NUL-terminated) read-only at a descriptor number ≥ [`FD_MIN`]; the errno
/// otherwise.
fn open_high(path: &str) -> Result<i32, Option<i32>> {
    debug_assert!(path.ends_with('\0'));
    // SAFETY: a NUL-terminated path; a plain read-only open.
    let low = unsafe {
        libc::open(
            path.as_ptr().cast(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    };
    if low < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error());
    }
    // SAFETY: dup of the descriptor just opened to a number ≥ FD_MIN, then its close.
    let fd = unsafe { libc::fcntl(low, libc::F_DUPFD_CLOEXEC, FD_MIN) };
    let e = std::io::Error::last_os_error().raw_os_error();
    close(low);
    if fd < 0 {
        Err(e)
    } else {
        Ok(fd)
    }
}

/// Closes a record file's descriptor (-1: none). It is closed only together with its chunk
/// file's, after that one was found to be still ours.
fn close_sums(fd: i32) {
    if fd >= 0 {
        close(fd);
    }
}

/// `preadv` of `bufs` at `pos` until full or the end of the file; `None` on an error.
fn preadv_all(fd: i32, bufs: &mut [&mut [u8]], pos: u64) -> Option<usize> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut done = 0usize;
    while done < total {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 3];
        let (mut k, mut skip) = (0usize, done);
        for b in bufs.iter_mut() {
            if skip >= b.len() {
                skip -= b.len();
                continue;
            }
            iov[k] = libc::iovec {
                iov_base: b[skip..].as_mut_ptr().cast(),
                iov_len: b.len() - skip,
            };
            k += 1;
            skip = 0;
        }
        // SAFETY: the first k iovecs point into buffers of `bufs`, borrowed for the call.
        let n = unsafe {
            libc::preadv(
                fd,
                iov.as_ptr(),
                k as libc::c_int,
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

/// Bytes read and verified at a time: the check runs over bytes the copy just left in the
/// CPU's cache instead of fetching a whole large read from memory again.
const VERIFY_PIECE: u64 = 256 << 10;

/// A read of `out.len()` bytes at `pos` verified against the records (`sums`), in pieces of
/// [`VERIFY_PIECE`]: the bytes present, or `None` (a mismatch or an error: the server's read
/// decides).
fn verified_read(fd: i32, sums: i32, pos: u64, out: &mut [u8]) -> Option<usize> {
    let mut done = 0usize;
    while done < out.len() {
        let at = pos + done as u64;
        let len = ((VERIFY_PIECE - at % VERIFY_PIECE) as usize).min(out.len() - done);
        let n = verified_piece(fd, sums, at, &mut out[done..done + len])?;
        done += n;
        if n < len {
            break; // the end of the file
        }
    }
    Some(done)
}

/// One piece of [`verified_read`].
fn verified_piece(fd: i32, sums: i32, pos: u64, out: &mut [u8]) -> Option<usize> {
    use madfs_checksum::{blocks, verify, BLOCK, RECORD};
    if out.is_empty() {
        return Some(0);
    }
    let (first, last) = blocks(pos, out.len() as u64);
    let head_len = (pos - first * BLOCK) as usize;
    let tail_len = ((last + 1) * BLOCK - pos - out.len() as u64) as usize;
    let mut head = [0u8; BLOCK as usize];
    let mut tail = [0u8; BLOCK as usize];
    let n = preadv_all(
        fd,
        &mut [&mut head[..head_len], &mut *out, &mut tail[..tail_len]],
        first * BLOCK,
    )?;
    let mut recs = vec![0u8; ((last - first + 1) * RECORD) as usize];
    let r = preadv_all(sums, &mut [&mut recs[..]], first * RECORD)?;
    recs.truncate(r);
    let parts: [&[u8]; 3] = [&head[..head_len], out, &tail[..tail_len]];
    verify(first, last - first + 1, &parts, n, &recs).ok()?;
    Some(n.saturating_sub(head_len).min(out.len()))
}

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
        let l = LocalReads::new(true, false, 5);
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
        let off = LocalReads::new(false, false, 1);
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
        let l = LocalReads::new(true, false, 1);
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

    #[test]
    fn checksummed_reads_are_verified_and_a_mismatch_goes_to_the_server() {
        use madfs_checksum::{block_crc, record_file, Record};
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "7\n").unwrap();
        let id = 0x77u64;
        let path = dir.path().join(madfs_placement::chunk_file(id));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 249) as u8 + 1).collect();
        std::fs::write(&path, &data).unwrap();
        let mut recs = Vec::new();
        for b in data.chunks(4096) {
            Record::settled(block_crc(b)).put(&mut recs);
        }
        let sums = dir
            .path()
            .join(record_file(&madfs_placement::chunk_file(id)));
        std::fs::write(&sums, &recs).unwrap();
        let d = dir.path().display().to_string();
        let l = LocalReads::new(true, true, 1);
        assert!(l.is_local(0, || Ok((boot(), d.clone(), 7))));
        let mut buf = vec![0u8; 5000];
        assert_eq!(l.read(0, id, 3000, &mut buf), Some(5000));
        assert_eq!(buf, &data[3000..8000]);
        assert_eq!(
            l.read(0, id, 9000, &mut buf),
            Some(1000),
            "short at the end"
        );
        assert_eq!(
            l.read(0, id + 1, 0, &mut buf),
            None,
            "no file: the server decides"
        );
        let mut bad = data.clone();
        bad[8500] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        assert_eq!(
            l.read(0, id, 0, &mut buf),
            Some(5000),
            "other blocks still read"
        );
        assert_eq!(
            l.read(0, id, 8400, &mut buf[..10]),
            None,
            "the flipped block"
        );
        std::fs::write(&path, &data[..4096]).unwrap();
        assert_eq!(l.read(0, id, 4096, &mut buf[..10]), None, "cut short");
    }
}
