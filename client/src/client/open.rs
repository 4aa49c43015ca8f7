//! open(2) in one place for every user of the library (the preload's `open`,
//! [`Client::open_as`] for `madfs`, `madfs-fuse` and programs): what its flags ask the
//! servers for, what each kind of entry answers, what a truncating open does, and the open
//! reference a regular file's open takes (given back when the open fails after it).

use super::{granted, home_server, Client};
use crate::fs::{FileSystem, OpenFlags};
use madfs_placement::normalize;
use madfs_proto::{Attr, Cap, Errno, FsResult, Reply, Request};

/// What an open asks for: the flags of open(2) madfs acts on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenSpec {
    /// Create if missing (`O_CREAT`) ...
    pub create: bool,
    /// ... and fail if it exists (`O_EXCL`).
    pub excl: bool,
    /// Truncate a regular file to 0 (`O_TRUNC`, not with `O_PATH`).
    pub trunc: bool,
    /// Permission bits of a new file (the umask applied).
    pub mode: u32,
    /// What the server checks against the file's mode bits (`ACCESS_R` | `ACCESS_W`; 0 for
    /// `O_PATH`).
    pub access: u32,
    /// For writing (`O_WRONLY`, `O_RDWR`): a directory refuses.
    pub writes: bool,
    /// Only a directory (`O_DIRECTORY`).
    pub directory: bool,
    /// A symbolic link itself (`O_PATH | O_NOFOLLOW`), not `ELOOP`.
    pub link_itself: bool,
}

impl OpenSpec {
    /// From open(2)'s `flags` and `mode`, with `umask`.
    pub fn from_flags(flags: i32, mode: u32, umask: u32) -> OpenSpec {
        let path_only = flags & libc::O_PATH != 0;
        let accmode = flags & libc::O_ACCMODE;
        // as the kernel: O_TRUNC truncates (and needs write permission) with O_RDONLY too
        let trunc = flags & libc::O_TRUNC != 0 && !path_only;
        let (r, w) = (madfs_proto::ACCESS_R, madfs_proto::ACCESS_W);
        let access = match accmode {
            _ if path_only => 0,
            libc::O_WRONLY => w,
            libc::O_RDWR => r | w,
            _ if trunc => r | w,
            _ => r,
        };
        OpenSpec {
            create: flags & libc::O_CREAT != 0,
            excl: flags & libc::O_EXCL != 0,
            trunc,
            mode: mode & !umask & 0o7777,
            access,
            writes: accmode != libc::O_RDONLY,
            directory: flags & libc::O_DIRECTORY != 0,
            link_itself: path_only && flags & libc::O_NOFOLLOW != 0,
        }
    }
}

/// What an open found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenKind {
    /// A regular file (or, with [`OpenSpec::link_itself`], a symbolic link).
    File,
    Dir,
    /// A device, FIFO or socket: node-local, no data on madfs (`docs/consistency.md`).
    Special,
}

/// A successful open: what it found, its attributes (size 0 after a truncation) and the
/// capability it was granted. A regular file's open reference (`crate::hold`) is given back
/// when this is dropped, unless [`Opening::keep`] took it.
#[derive(Debug)]
pub struct Opening {
    pub kind: OpenKind,
    pub attr: Attr,
    pub cap: Cap,
    held: Option<u64>,
}

impl Opening {
    fn new(attr: Attr, cap: Cap) -> Opening {
        let kind = if attr.is_dir() {
            OpenKind::Dir
        } else if attr.is_special() {
            OpenKind::Special
        } else {
            OpenKind::File
        };
        Opening {
            kind,
            attr,
            cap,
            held: attr.is_file().then_some(attr.id),
        }
    }

    /// The open ends with a handle that gives its open reference back when it closes.
    pub fn keep(mut self) -> (OpenKind, Attr, Cap) {
        self.held = None;
        (self.kind, self.attr, self.cap)
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if let Some(id) = self.held.take() {
            crate::hold::closed(id);
        }
    }
}

impl Client {
    /// open(2) of `path` (in normal form) as `spec` asks. `meanwhile` runs while the lookup of an open
    /// without `O_CREAT` is on its way (the preload makes its kernel fd there); its error
    /// fails the open before it changes anything (`O_TRUNC`), as the kernel's `EMFILE`
    /// does. A symbolic link answers `ELOOP` (the caller follows links), unless
    /// [`OpenSpec::link_itself`].
    pub fn open_with<R>(
        &self,
        path: &str,
        spec: &OpenSpec,
        meanwhile: impl FnOnce() -> FsResult<R>,
    ) -> FsResult<(Opening, Option<R>)> {
        if spec.create {
            if spec.directory {
                return Err(Errno::EINVAL);
            }
            let o = self.create_file(path, spec)?;
            if o.attr.is_link() {
                return Err(Errno::ELOOP);
            }
            return Ok((o, None));
        }
        let (found, early) = self.open_normalized_overlapped(path, spec.access, meanwhile);
        let found = found.map(|(a, cap)| Opening::new(a, cap));
        let early = early?;
        let mut o = found?;
        if o.attr.is_link() {
            if !spec.link_itself {
                return Err(Errno::ELOOP);
            }
            if spec.directory {
                // (coreutils' `ln -n` asks so whether its destination is a directory)
                return Err(Errno::ENOTDIR);
            }
            // the link itself, for fstat and *at(fd, "", AT_EMPTY_PATH) (glibc's
            // fchmodat(AT_SYMLINK_NOFOLLOW) opens it so to answer EOPNOTSUPP)
            return Ok((o, Some(early)));
        }
        match o.kind {
            OpenKind::Dir if spec.writes => return Err(Errno::EISDIR),
            OpenKind::Dir => return Ok((o, Some(early))),
            _ if spec.directory => return Err(Errno::ENOTDIR),
            OpenKind::Special => return Ok((o, Some(early))),
            OpenKind::File => {}
        }
        if spec.trunc && o.attr.size > 0 {
            self.truncate(path, 0)?;
            o.attr.size = 0;
        }
        Ok((o, Some(early)))
    }

    /// `O_CREAT`: the file made (or found, without `O_EXCL`; truncated with `O_TRUNC`).
    fn create_file(&self, path: &str, spec: &OpenSpec) -> FsResult<Opening> {
        if path == "/" {
            return Err(Errno::EISDIR);
        }
        self.check_parent(path)?;
        let meta = self.meta_of(path);
        let req = Request::Create {
            path,
            mode: spec.mode,
            uid: self.uid,
            gid: self.gid,
            excl: spec.excl,
            trunc: spec.trunc,
            access: spec.access,
            holder: crate::hold::holder(),
        };
        let Reply::Created {
            attr,
            existed,
            old_size,
            cap,
        } = self.call(meta, &req)?
        else {
            return Err(Errno::EPROTO);
        };
        self.held(meta, &attr, cap)?;
        let o = Opening::new(attr, cap);
        // the server truncated what it holds: chunk 0 too unless that lives on the file's
        // home server elsewhere (renamed across servers)
        let elsewhere = home_server(attr.id, &self.layout()) != meta;
        if existed
            && spec.trunc
            && (old_size > attr.chunk_size as u64 || (elsewhere && old_size > 0))
        {
            self.drop_chunks(attr.id, 0, attr.chunk_size, cap)?;
        }
        Ok(o)
    }

    /// An open for reading of a path in normal form, for a handle ([`Client::handle`]): its
    /// attributes and capability (no open reference).
    pub fn open_read(&self, path: &str) -> FsResult<(Attr, Cap)> {
        granted(self.call_on(
            path,
            &Request::Open {
                path,
                access: madfs_proto::ACCESS_R,
                holder: 0,
            },
        )?)
    }

    /// `open` of a regular file wanting `access` (`ACCESS_R` | `ACCESS_W`): the server
    /// checks it against the file's mode for this connection's user (`EACCES`). A
    /// directory answers `EISDIR`, a device, FIFO or socket `ENXIO` (no data on madfs).
    pub fn open_as(&self, path: &str, flags: OpenFlags, access: u32) -> FsResult<super::OpenFile> {
        let spec = OpenSpec {
            create: flags.create,
            excl: flags.excl,
            trunc: flags.trunc,
            mode: flags.mode,
            access,
            writes: access & madfs_proto::ACCESS_W != 0,
            directory: false,
            link_itself: false,
        };
        let path = normalize(path)?;
        let (o, _) = self.open_with(&path, &spec, || Ok(()))?;
        match o.kind {
            OpenKind::Dir => Err(Errno::EISDIR),
            OpenKind::Special => Err(Errno::ENXIO),
            OpenKind::File => {
                let meta = self.meta_of(&path);
                let (_, attr, cap) = o.keep();
                Ok(super::OpenFile::opened(path, attr, cap, meta))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::OpenSpec;
    use madfs_proto::{ACCESS_R, ACCESS_W};

    #[test]
    fn open_flags_ask_what_the_kernel_checks() {
        let s = |flags| OpenSpec::from_flags(flags, 0o666, 0o022);
        assert_eq!(s(libc::O_RDONLY).access, ACCESS_R);
        assert_eq!(s(libc::O_WRONLY).access, ACCESS_W);
        assert_eq!(s(libc::O_RDWR).access, ACCESS_R | ACCESS_W);
        // O_TRUNC needs write permission with O_RDONLY too, and does nothing with O_PATH
        let t = s(libc::O_RDONLY | libc::O_TRUNC);
        assert!(t.trunc && !t.writes);
        assert_eq!(t.access, ACCESS_R | ACCESS_W);
        let p = s(libc::O_PATH | libc::O_TRUNC | libc::O_NOFOLLOW);
        assert!(!p.trunc && p.link_itself);
        assert_eq!(p.access, 0);
        let c = s(libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY);
        assert!(c.create && c.excl && c.writes);
        assert_eq!(c.mode, 0o644);
        assert!(s(libc::O_DIRECTORY).directory);
    }
}
