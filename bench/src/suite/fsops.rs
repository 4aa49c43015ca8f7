//! The two ways a rank reaches the file system under test: POSIX calls on a path (plain, or
//! through `libmadfs.so` when the process runs under `LD_PRELOAD`), or the madfs client library
//! directly. The phases are written once, against [`Target`].

use madfs_client::{Client, FileSystem, OpenFile, OpenFlags};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};

/// What a phase needs from a file system.
pub trait Target {
    /// An open file.
    type F;
    /// `mkdir`; `AlreadyExists` when it exists.
    fn mkdir(&self, p: &str) -> io::Result<()>;
    /// Creates `p` for writing: `excl` = `O_EXCL`, otherwise `O_TRUNC`.
    fn create(&self, p: &str, excl: bool) -> io::Result<Self::F>;
    /// Opens an existing file for writing (no truncation).
    fn open_write(&self, p: &str) -> io::Result<Self::F>;
    /// Opens an existing file for reading.
    fn open_read(&self, p: &str) -> io::Result<Self::F>;
    /// Writes all of `b` at `off`.
    fn pwrite(&self, f: &mut Self::F, off: u64, b: &[u8]) -> io::Result<()>;
    /// Reads up to `b.len()` bytes at `off` (short only at end of file).
    fn pread(&self, f: &Self::F, off: u64, b: &mut [u8]) -> io::Result<usize>;
    /// `fsync`.
    fn fsync(&self, f: &mut Self::F) -> io::Result<()>;
    /// `close`.
    fn close(&self, f: Self::F) -> io::Result<()>;
    /// (size, mtime in ns, is a directory).
    fn stat(&self, p: &str) -> io::Result<(u64, i64, bool)>;
    /// `unlink`.
    fn unlink(&self, p: &str) -> io::Result<()>;
    /// `rmdir`.
    fn rmdir(&self, p: &str) -> io::Result<()>;
    /// Names and whether each is a directory.
    fn readdir(&self, p: &str) -> io::Result<Vec<(String, bool)>>;
    /// `rename` (replacing).
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;

    /// `mkdir -p`.
    fn mkdir_p(&self, p: &str) -> io::Result<()> {
        let mut cur = String::new();
        for part in p.split('/').filter(|s| !s.is_empty()) {
            cur.push('/');
            cur.push_str(part);
            match self.mkdir(&cur) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Whole-file write, made visible atomically (write to a temporary name, then rename).
    fn put(&self, p: &str, data: &[u8]) -> io::Result<()> {
        let tmp = format!("{p}.tmp");
        let mut f = self.create(&tmp, false)?;
        self.pwrite(&mut f, 0, data)?;
        self.close(f)?;
        self.rename(&tmp, p)
    }

    /// Whole-file read.
    fn get(&self, p: &str) -> io::Result<Vec<u8>> {
        let f = self.open_read(p)?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = self.pread(&f, out.len() as u64, &mut buf)?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        self.close(f)?;
        Ok(out)
    }

    /// `rm -rf`: an entry that went meanwhile is no error, and a directory that is not
    /// empty yet is listed again for a while. Another rank's last `put` (a rename from a
    /// temporary name) may still be removing its source name on that name's server when its
    /// target is already seen (docs/consistency.md, "rename"): under load the barrier's
    /// directory was then found not empty, or an entry listed just before was gone.
    fn remove_tree(&self, p: &str) -> io::Result<()> {
        let t0 = std::time::Instant::now();
        loop {
            for (name, dir) in self.readdir(p)? {
                let child = format!("{p}/{name}");
                let r = if dir {
                    self.remove_tree(&child)
                } else {
                    self.unlink(&child)
                };
                match r {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    r => {
                        r.map_err(|e| io::Error::new(e.kind(), format!("removing {child}: {e}")))?
                    }
                }
            }
            match self.rmdir(p) {
                Err(e)
                    if e.raw_os_error() == Some(libc::ENOTEMPTY)
                        && t0.elapsed() < std::time::Duration::from_secs(10) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                r => return r.map_err(|e| io::Error::new(e.kind(), format!("removing {p}: {e}"))),
            }
        }
    }
}

/// POSIX calls (`std::fs`); under `LD_PRELOAD=libmadfs.so` these are served by madfs.
pub struct Posix;

impl Target for Posix {
    type F = std::fs::File;

    fn mkdir(&self, p: &str) -> io::Result<()> {
        std::fs::create_dir(p)
    }
    fn create(&self, p: &str, excl: bool) -> io::Result<Self::F> {
        let mut o = std::fs::OpenOptions::new();
        o.write(true).mode(0o644);
        if excl {
            o.create_new(true);
        } else {
            o.create(true).truncate(true);
        }
        o.open(p)
    }
    fn open_write(&self, p: &str) -> io::Result<Self::F> {
        std::fs::OpenOptions::new().write(true).open(p)
    }
    fn open_read(&self, p: &str) -> io::Result<Self::F> {
        std::fs::File::open(p)
    }
    fn pwrite(&self, f: &mut Self::F, off: u64, b: &[u8]) -> io::Result<()> {
        f.write_all_at(b, off)
    }
    fn pread(&self, f: &Self::F, off: u64, b: &mut [u8]) -> io::Result<usize> {
        let mut done = 0;
        while done < b.len() {
            match f.read_at(&mut b[done..], off + done as u64)? {
                0 => break,
                n => done += n,
            }
        }
        Ok(done)
    }
    fn fsync(&self, f: &mut Self::F) -> io::Result<()> {
        f.sync_all()
    }
    fn close(&self, f: Self::F) -> io::Result<()> {
        drop(f);
        Ok(())
    }
    fn stat(&self, p: &str) -> io::Result<(u64, i64, bool)> {
        let m = std::fs::metadata(p)?;
        Ok((
            m.len(),
            m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            m.is_dir(),
        ))
    }
    fn unlink(&self, p: &str) -> io::Result<()> {
        std::fs::remove_file(p)
    }
    fn rmdir(&self, p: &str) -> io::Result<()> {
        std::fs::remove_dir(p)
    }
    fn readdir(&self, p: &str) -> io::Result<Vec<(String, bool)>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(p)? {
            let e = e?;
            let dir = e.file_type()?.is_dir();
            out.push((e.file_name().to_string_lossy().into_owned(), dir));
        }
        Ok(out)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        std::fs::rename(from, to)
    }
}

/// The client library, no POSIX layer in between.
pub struct Lib(pub Client);

impl Target for Lib {
    type F = OpenFile;

    fn mkdir(&self, p: &str) -> io::Result<()> {
        Ok(self.0.mkdir(p, 0o755)?)
    }
    fn create(&self, p: &str, excl: bool) -> io::Result<Self::F> {
        let flags = OpenFlags {
            create: true,
            excl,
            trunc: !excl,
            mode: 0o644,
        };
        Ok(self.0.open(p, flags)?)
    }
    fn open_write(&self, p: &str) -> io::Result<Self::F> {
        Ok(self.0.open(p, OpenFlags::default())?)
    }
    fn open_read(&self, p: &str) -> io::Result<Self::F> {
        Ok(self.0.open(p, OpenFlags::default())?)
    }
    fn pwrite(&self, f: &mut Self::F, off: u64, b: &[u8]) -> io::Result<()> {
        let n = self.0.write(f, off, b)?;
        if n != b.len() {
            return Err(io::Error::other("short write"));
        }
        Ok(())
    }
    fn pread(&self, f: &Self::F, off: u64, b: &mut [u8]) -> io::Result<usize> {
        Ok(self.0.read(f, off, b)?)
    }
    fn fsync(&self, f: &mut Self::F) -> io::Result<()> {
        Ok(self.0.fsync(f)?)
    }
    fn close(&self, f: Self::F) -> io::Result<()> {
        Ok(self.0.close(f)?)
    }
    fn stat(&self, p: &str) -> io::Result<(u64, i64, bool)> {
        let a = self.0.stat(p)?;
        Ok((a.size, a.mtime, a.is_dir()))
    }
    fn unlink(&self, p: &str) -> io::Result<()> {
        Ok(self.0.unlink(p)?)
    }
    fn rmdir(&self, p: &str) -> io::Result<()> {
        Ok(self.0.rmdir(p)?)
    }
    fn readdir(&self, p: &str) -> io::Result<Vec<(String, bool)>> {
        Ok(self
            .0
            .readdir(p)?
            .into_iter()
            .map(|e| (e.name, e.kind == libc::S_IFDIR))
            .collect())
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        Ok(self.0.rename(from, to, false)?)
    }
}
