//! The two sides of `madfs cp`: local paths (the kernel's file systems, through `std::fs`) and
//! madfs paths (through a [`Client`]), behind one small set of operations, so the copy itself
//! does not care which way it goes.

use madfs_client::{Attr, Client, Errno, FileSystem, OpenFile, OpenFlags, TimeSpec};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

/// Result with an errno (local errors are mapped to theirs).
pub type R<T> = Result<T, Errno>;

/// A path on one side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loc {
    /// A path of the local file systems.
    Local(PathBuf),
    /// A madfs path (absolute, as the client takes it).
    Madfs(String),
}

impl Loc {
    /// `self/name`. A madfs name must be UTF-8 (EILSEQ otherwise).
    pub fn join(&self, name: &OsStr) -> R<Loc> {
        match self {
            Loc::Local(p) => Ok(Loc::Local(p.join(name))),
            Loc::Madfs(p) => {
                let n = name.to_str().ok_or(Errno::new(libc::EILSEQ))?;
                Ok(Loc::Madfs(if p.ends_with('/') {
                    format!("{p}{n}")
                } else {
                    format!("{p}/{n}")
                }))
            }
        }
    }

    /// Is it on madfs?
    pub fn is_madfs(&self) -> bool {
        matches!(self, Loc::Madfs(_))
    }

    /// The directory holding `self` (`.` for a bare local name, `/` on madfs's top).
    pub fn parent(&self) -> Loc {
        match self {
            Loc::Local(p) => Loc::Local(match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                _ if p.is_absolute() => PathBuf::from("/"),
                _ => PathBuf::from("."),
            }),
            Loc::Madfs(p) => match p.trim_end_matches('/').rsplit_once('/') {
                Some((d, _)) if !d.is_empty() => Loc::Madfs(d.to_string()),
                _ => Loc::Madfs("/".into()),
            },
        }
    }

    /// The last name of the path (None for a root, `.` or `..`).
    pub fn name(&self) -> Option<OsString> {
        match self {
            Loc::Local(p) => p.file_name().map(OsStr::to_os_string),
            Loc::Madfs(p) => p
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .filter(|n| !n.is_empty() && *n != "." && *n != "..")
                .map(OsString::from),
        }
    }

    /// The path as bytes (for hashing and comparing).
    pub fn bytes(&self) -> &[u8] {
        match self {
            Loc::Local(p) => p.as_os_str().as_bytes(),
            Loc::Madfs(p) => p.as_bytes(),
        }
    }
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loc::Local(p) => write!(f, "{}", p.display()),
            Loc::Madfs(p) => write!(f, "madfs:{p}"),
        }
    }
}

/// What an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Link,
    /// A device, FIFO or socket (not copied).
    Other,
}

impl Kind {
    fn of_mode(mode: u32) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Link,
            _ => Kind::Other,
        }
    }
}

/// Attributes of an entry, as `lstat` gives them.
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    pub kind: Kind,
    /// Permission bits with set-id and sticky bits (`mode & 07777`).
    pub perm: u32,
    pub size: u64,
    pub uid: u32,
    pub gid: u32,
    /// ns since the epoch.
    pub atime: i64,
    pub mtime: i64,
    /// The madfs stripe unit (0 on the local side).
    pub chunk: u64,
}

impl Meta {
    fn of_attr(a: &Attr) -> Meta {
        Meta {
            kind: Kind::of_mode(a.mode),
            perm: a.mode & 0o7777,
            size: a.size,
            uid: a.uid,
            gid: a.gid,
            atime: a.atime,
            mtime: a.mtime,
            chunk: a.chunk_size as u64,
        }
    }

    fn of_local(m: &std::fs::Metadata) -> Meta {
        Meta {
            kind: Kind::of_mode(m.mode()),
            perm: m.mode() & 0o7777,
            size: m.size(),
            uid: m.uid(),
            gid: m.gid(),
            atime: m.atime() * 1_000_000_000 + m.atime_nsec(),
            mtime: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            chunk: 0,
        }
    }
}

/// An open regular file.
pub enum Handle {
    Local(std::fs::File),
    Madfs(OpenFile),
}

impl Handle {
    /// The madfs stripe unit of the file (0 on the local side).
    pub fn chunk(&self) -> u64 {
        match self {
            Handle::Local(_) => 0,
            Handle::Madfs(f) => f.attr.chunk_size as u64,
        }
    }

    /// The mode the file has now (madfs: as created or opened).
    pub fn perm(&self) -> Option<u32> {
        match self {
            Handle::Local(_) => None,
            Handle::Madfs(f) => Some(f.attr.mode & 0o7777),
        }
    }
}

/// One thread's access to both sides: the local file systems and, where a madfs path is
/// involved, its own madfs client.
pub struct Fs {
    pub client: Option<Client>,
}

fn io(e: std::io::Error) -> Errno {
    Errno::from_io(&e)
}

impl Fs {
    fn c(&self) -> R<&Client> {
        self.client.as_ref().ok_or(Errno::ENOTCONN)
    }

    /// `lstat`.
    pub fn lstat(&self, l: &Loc) -> R<Meta> {
        match l {
            Loc::Local(p) => std::fs::symlink_metadata(p)
                .map(|m| Meta::of_local(&m))
                .map_err(io),
            Loc::Madfs(p) => self.c()?.stat(p).map(|a| Meta::of_attr(&a)),
        }
    }

    /// The entries of a directory (`.` and `..` left out) with their kinds.
    pub fn list(&self, l: &Loc) -> R<Vec<(OsString, Kind)>> {
        match l {
            Loc::Local(p) => {
                let mut out = Vec::new();
                for e in std::fs::read_dir(p).map_err(io)? {
                    let e = e.map_err(io)?;
                    let t = e.file_type().map_err(io)?;
                    let kind = if t.is_symlink() {
                        Kind::Link
                    } else if t.is_dir() {
                        Kind::Dir
                    } else if t.is_file() {
                        Kind::File
                    } else {
                        Kind::Other
                    };
                    out.push((e.file_name(), kind));
                }
                Ok(out)
            }
            Loc::Madfs(p) => Ok(self
                .c()?
                .readdir(p)?
                .into_iter()
                .filter(|e| e.name != "." && e.name != "..")
                .map(|e| (OsString::from(e.name), Kind::of_mode(e.kind)))
                .collect()),
        }
    }

    /// `mkdir` (EEXIST when something is there).
    pub fn mkdir(&self, l: &Loc, mode: u32) -> R<()> {
        match l {
            Loc::Local(p) => {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new().mode(mode).create(p).map_err(io)
            }
            Loc::Madfs(p) => self.c()?.mkdir(p, mode),
        }
    }

    /// The target of a symbolic link.
    pub fn readlink(&self, l: &Loc) -> R<OsString> {
        match l {
            Loc::Local(p) => std::fs::read_link(p)
                .map(PathBuf::into_os_string)
                .map_err(io),
            Loc::Madfs(p) => self.c()?.readlink(p).map(OsString::from),
        }
    }

    /// Makes a symbolic link at `l` pointing to `target`.
    pub fn symlink(&self, target: &OsStr, l: &Loc) -> R<()> {
        match l {
            Loc::Local(p) => std::os::unix::fs::symlink(target, p).map_err(io),
            Loc::Madfs(p) => {
                let t = target.to_str().ok_or(Errno::new(libc::EILSEQ))?;
                self.c()?.symlink(t, p)
            }
        }
    }

    /// Removes a non-directory.
    pub fn unlink(&self, l: &Loc) -> R<()> {
        match l {
            Loc::Local(p) => std::fs::remove_file(p).map_err(io),
            Loc::Madfs(p) => self.c()?.unlink(p),
        }
    }

    /// Changes permission bits (follows a symbolic link).
    pub fn chmod(&self, l: &Loc, perm: u32) -> R<()> {
        match l {
            Loc::Local(p) => {
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(perm)).map_err(io)
            }
            Loc::Madfs(p) => self.c()?.chmod(p, perm),
        }
    }

    /// Creates an empty regular file that must not exist yet (EEXIST otherwise).
    pub fn create_new(&self, l: &Loc) -> R<()> {
        let h = match l {
            Loc::Local(p) => std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(p)
                .map(Handle::Local)
                .map_err(io)?,
            Loc::Madfs(p) => self
                .c()?
                .open(
                    p,
                    OpenFlags {
                        create: true,
                        excl: true,
                        trunc: false,
                        mode: 0o600,
                    },
                )
                .map(Handle::Madfs)?,
        };
        self.close(h, false)
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, l: &Loc) -> R<()> {
        match l {
            Loc::Local(p) => std::fs::remove_dir(p).map_err(io),
            Loc::Madfs(p) => self.c()?.rmdir(p),
        }
    }

    /// Opens a regular file for reading (a symbolic link is not followed).
    pub fn open_read(&self, l: &Loc) -> R<Handle> {
        match l {
            Loc::Local(p) => std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(p)
                .map(Handle::Local)
                .map_err(io),
            Loc::Madfs(p) => self.c()?.open(p, OpenFlags::default()).map(Handle::Madfs),
        }
    }

    /// Opens a regular file for reading and writing: with `create`, made if missing (with
    /// `mode`) and truncated; without, it must exist.
    pub fn open_write(&self, l: &Loc, create: bool, mode: u32) -> R<Handle> {
        match l {
            Loc::Local(p) => std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .truncate(create)
                .mode(mode)
                .custom_flags(libc::O_NOFOLLOW)
                .open(p)
                .map(Handle::Local)
                .map_err(io),
            Loc::Madfs(p) => self
                .c()?
                .open(
                    p,
                    OpenFlags {
                        create,
                        excl: false,
                        trunc: create,
                        mode,
                    },
                )
                .map(Handle::Madfs),
        }
    }

    /// Reads at `off` until `buf` is full or the file ends; returns the bytes read.
    pub fn read_full(&self, h: &Handle, off: u64, buf: &mut [u8]) -> R<usize> {
        let mut got = 0;
        while got < buf.len() {
            let n = match h {
                Handle::Local(f) => match f.read_at(&mut buf[got..], off + got as u64) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    r => r.map_err(io)?,
                },
                Handle::Madfs(f) => self.c()?.read(f, off + got as u64, &mut buf[got..])?,
            };
            if n == 0 {
                break;
            }
            got += n;
        }
        Ok(got)
    }

    /// Writes all of `data` at `off`.
    pub fn write_all(&self, h: &mut Handle, off: u64, data: &[u8]) -> R<()> {
        match h {
            Handle::Local(f) => f.write_all_at(data, off).map_err(io),
            Handle::Madfs(f) => {
                let c = self.c()?;
                let mut done = 0;
                while done < data.len() {
                    let n = c.write(f, off + done as u64, &data[done..])?;
                    if n == 0 {
                        return Err(Errno::EIO);
                    }
                    done += n;
                }
                Ok(())
            }
        }
    }

    /// Closes a file (madfs: publishes its size); with `sync`, makes its data durable first.
    pub fn close(&self, h: Handle, sync: bool) -> R<()> {
        match h {
            Handle::Local(f) => {
                if sync {
                    f.sync_all().map_err(io)?;
                }
                Ok(())
            }
            Handle::Madfs(mut f) => {
                let c = self.c()?;
                if sync {
                    if let Err(e) = c.fsync(&mut f) {
                        let _ = c.close(f);
                        return Err(e);
                    }
                }
                c.close(f)
            }
        }
    }

    /// Gives `l` the attributes of `m`: owner (with `owner`), mode (not of a symbolic link)
    /// unless `perm_now` says it has it already, then access and modification times (of a
    /// symbolic link itself). Times go last: a file whose times match its source's is
    /// complete (the resume check relies on it).
    pub fn set_attrs(&self, l: &Loc, m: &Meta, owner: bool, perm_now: Option<u32>) -> R<()> {
        let link = m.kind == Kind::Link;
        match l {
            Loc::Local(p) => {
                if owner {
                    std::os::unix::fs::lchown(p, Some(m.uid), Some(m.gid)).map_err(io)?;
                }
                if !link && perm_now != Some(m.perm) {
                    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m.perm))
                        .map_err(io)?;
                }
                local_utimens(p, m.atime, m.mtime)
            }
            Loc::Madfs(p) => {
                let c = self.c()?;
                if owner {
                    c.chown_at(p, m.uid, m.gid, link)?;
                }
                if !link && perm_now != Some(m.perm) {
                    c.chmod(p, m.perm)?;
                }
                c.utimens_at(p, TimeSpec::At(m.atime), TimeSpec::At(m.mtime), link)
            }
        }
    }
}

/// `utimensat(AT_SYMLINK_NOFOLLOW)`: std sets times only through an open file, which a
/// symbolic link cannot be.
fn local_utimens(p: &std::path::Path, atime: i64, mtime: i64) -> R<()> {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
    let ts = |ns: i64| libc::timespec {
        tv_sec: ns.div_euclid(1_000_000_000),
        tv_nsec: ns.rem_euclid(1_000_000_000),
    };
    let times = [ts(atime), ts(mtime)];
    // SAFETY: `c` is a NUL-terminated path and `times` two initialised timespecs, both alive
    // for the call; utimensat reads them and keeps no reference.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io(std::io::Error::last_os_error()))
    }
}
