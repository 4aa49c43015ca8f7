//! Request and reply bodies.

use serde::{Deserialize, Serialize};

/// Kind of a file-system entry.
pub const S_IFMT: u32 = libc::S_IFMT;
/// Directory mode bit.
pub const S_IFDIR: u32 = libc::S_IFDIR;
/// Regular file mode bit.
pub const S_IFREG: u32 = libc::S_IFREG;
/// Symbolic link mode bit.
pub const S_IFLNK: u32 = libc::S_IFLNK;

/// Attributes of an entry, as stored on its metadata server and returned by `stat`.
/// On the wire a 64-byte flexbuffers blob in the layout of [`Attr::to_bytes`]: writing and
/// reading it is one copy, where a vector of ten numbers cost ≈ 0.5 µs each way (the stat
/// reply is the hottest one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attr {
    /// File id (immutable, assigned at creation); also the inode number.
    pub id: u64,
    /// Type and permission bits (`S_IFREG | 0644`, …).
    pub mode: u32,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes (published size: see `docs/consistency.md`).
    pub size: u64,
    /// Stripe unit of the file's data, fixed at creation.
    pub chunk_size: u32,
    /// Device number of a character or block device (`mknod`), in the kernel's 32-bit
    /// encoding ([`encode_dev`]); 0 for anything else.
    pub rdev: u32,
    /// Access time, ns since the epoch.
    pub atime: i64,
    /// Modification time, ns since the epoch.
    pub mtime: i64,
    /// Status change time, ns since the epoch.
    pub ctime: i64,
}

/// Size of [`Attr::to_bytes`].
pub const ATTR_BYTES: usize = 64;

impl Attr {
    /// Fixed little-endian layout: id, mode, nlink, uid, gid, size, chunk_size, rdev, atime,
    /// mtime, ctime. The wire form, and (after a version byte) the
    /// metadata record in RocksDB.
    pub fn to_bytes(&self) -> [u8; ATTR_BYTES] {
        let mut b = [0u8; ATTR_BYTES];
        b[0..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..12].copy_from_slice(&self.mode.to_le_bytes());
        b[12..16].copy_from_slice(&self.nlink.to_le_bytes());
        b[16..20].copy_from_slice(&self.uid.to_le_bytes());
        b[20..24].copy_from_slice(&self.gid.to_le_bytes());
        b[24..32].copy_from_slice(&self.size.to_le_bytes());
        b[32..36].copy_from_slice(&self.chunk_size.to_le_bytes());
        b[36..40].copy_from_slice(&self.rdev.to_le_bytes());
        b[40..48].copy_from_slice(&self.atime.to_le_bytes());
        b[48..56].copy_from_slice(&self.mtime.to_le_bytes());
        b[56..64].copy_from_slice(&self.ctime.to_le_bytes());
        b
    }

    /// The inverse of [`Attr::to_bytes`]; `None` unless `b` is exactly that long.
    pub fn from_bytes(b: &[u8]) -> Option<Attr> {
        let b: &[u8; ATTR_BYTES] = b.try_into().ok()?;
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        Some(Attr {
            id: u64_at(0),
            mode: u32_at(8),
            nlink: u32_at(12),
            uid: u32_at(16),
            gid: u32_at(20),
            size: u64_at(24),
            chunk_size: u32_at(32),
            rdev: u32_at(36),
            atime: u64_at(40) as i64,
            mtime: u64_at(48) as i64,
            ctime: u64_at(56) as i64,
        })
    }
}

impl Serialize for Attr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.to_bytes())
    }
}

impl<'de> Deserialize<'de> for Attr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Attr, D::Error> {
        struct Blob;
        impl serde::de::Visitor<'_> for Blob {
            type Value = Attr;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{ATTR_BYTES} bytes of attributes")
            }
            fn visit_bytes<E: serde::de::Error>(self, b: &[u8]) -> Result<Attr, E> {
                Attr::from_bytes(b).ok_or_else(|| E::invalid_length(b.len(), &self))
            }
        }
        d.deserialize_bytes(Blob)
    }
}

/// A capability: what an open (or create, unlink, truncate) of file `id` granted the
/// connection's user `uid` — `access` ([`ACCESS_R`] | [`ACCESS_W`]) until `expires` (seconds
/// since the epoch) — with a MAC under the servers' shared key. Every request that names a
/// file by id carries one, which the data server checks without asking anyone
/// (docs/security.md). 40 bytes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Cap {
    /// File id.
    pub id: u64,
    /// What it allows.
    pub access: u32,
    /// Whom (the connection's user when granted).
    pub uid: u32,
    /// Until when, seconds since the epoch.
    pub expires: i64,
    /// HMAC-SHA256 (first 16 bytes) of the other fields under the servers' key.
    pub mac: [u8; 16],
}

/// Size of [`Cap::to_bytes`].
pub const CAP_BYTES: usize = 40;

impl Cap {
    /// The fields the MAC covers, in wire order.
    pub fn signed(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[0..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..12].copy_from_slice(&self.access.to_le_bytes());
        b[12..16].copy_from_slice(&self.uid.to_le_bytes());
        b[16..24].copy_from_slice(&self.expires.to_le_bytes());
        b
    }

    /// Wire form: the signed fields, then the MAC.
    pub fn to_bytes(&self) -> [u8; CAP_BYTES] {
        let mut b = [0u8; CAP_BYTES];
        b[..24].copy_from_slice(&self.signed());
        b[24..].copy_from_slice(&self.mac);
        b
    }

    /// The inverse of [`Cap::to_bytes`]; `None` unless `b` is exactly that long.
    pub fn from_bytes(b: &[u8]) -> Option<Cap> {
        let b: &[u8; CAP_BYTES] = b.try_into().ok()?;
        Some(Cap {
            id: u64::from_le_bytes(b[0..8].try_into().ok()?),
            access: u32::from_le_bytes(b[8..12].try_into().ok()?),
            uid: u32::from_le_bytes(b[12..16].try_into().ok()?),
            expires: i64::from_le_bytes(b[16..24].try_into().ok()?),
            mac: b[24..].try_into().ok()?,
        })
    }
}

impl Serialize for Cap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.to_bytes())
    }
}

impl<'de> Deserialize<'de> for Cap {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Cap, D::Error> {
        struct Blob;
        impl serde::de::Visitor<'_> for Blob {
            type Value = Cap;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{CAP_BYTES} bytes of capability")
            }
            fn visit_bytes<E: serde::de::Error>(self, b: &[u8]) -> Result<Cap, E> {
                Cap::from_bytes(b).ok_or_else(|| E::invalid_length(b.len(), &self))
            }
        }
        d.deserialize_bytes(Blob)
    }
}

impl Attr {
    /// Is this a directory?
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
    /// Is this a regular file?
    pub fn is_file(&self) -> bool {
        self.mode & S_IFMT == S_IFREG
    }
    /// Is this a symbolic link (its target is its data, inline in chunk 0)?
    pub fn is_link(&self) -> bool {
        self.mode & S_IFMT == libc::S_IFLNK
    }
    /// Is this a special file (FIFO, socket, character or block device): an entry with a
    /// type and no data?
    pub fn is_special(&self) -> bool {
        is_special(self.mode)
    }
}

/// Is `mode`'s type a FIFO, socket, character or block device?
pub fn is_special(mode: u32) -> bool {
    matches!(
        mode & S_IFMT,
        libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFCHR | libc::S_IFBLK
    )
}

/// A `dev_t` in the kernel's 32-bit encoding (`new_encode_dev`: major up to 4095, minor up
/// to 2^20 - 1); `None` for a device number that does not fit.
pub fn encode_dev(dev: u64) -> Option<u32> {
    let (major, minor) = (libc::major(dev) as u64, libc::minor(dev) as u64);
    if major >= 1 << 12 || minor >= 1 << 20 {
        return None;
    }
    Some(((minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)) as u32)
}

/// The inverse of [`encode_dev`].
pub fn decode_dev(v: u32) -> u64 {
    let v = v as u64;
    let major = (v & 0xfff00) >> 8;
    let minor = (v & 0xff) | ((v >> 12) & 0xfff00);
    libc::makedev(major as u32, minor as u32)
}

/// How `SetSize` changes a size.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeMode {
    /// `size = max(size, new)`: a writer publishing its high-water mark (merge operator).
    /// Needs write permission on the file.
    Max,
    /// `Max` by the holder of an open for writing: the capability of that open stands for
    /// the write permission (which the kernel checks at open, not at each write).
    MaxWith(Cap),
    /// `size = new`: truncate.
    Exact,
    /// `size = new` through a descriptor opened for writing (`ftruncate`): the capability of
    /// that open stands for the write permission, which the kernel checks at open, not at
    /// `ftruncate` (a file created with mode 0 is still truncated through its descriptor).
    ExactWith(Cap),
}

impl FindFilter<'_> {
    /// Does the entry `name` with attributes `a` pass every condition?
    pub fn matches(&self, name: &str, a: &Attr) -> bool {
        self.matcher().matches(name, a)
    }

    /// The filter prepared for many entries (the pattern converted once; no allocation per
    /// entry).
    pub fn matcher(&self) -> Matcher {
        Matcher {
            kind: self.kind,
            size: self.size,
            newer_than: self.newer_than,
            pattern: self.name.map(|p| std::ffi::CString::new(p).map_err(|_| ())),
            // `*literal*` (IO500's `*01*`): a substring search, the same answer as fnmatch
            infix: self.name.and_then(|p| {
                let lit = p.strip_prefix('*')?.strip_suffix('*')?;
                let plain = !lit.is_empty() && !lit.contains(['*', '?', '[', '\\', '\0']);
                plain.then(|| lit.to_string())
            }),
        }
    }
}

/// A [`FindFilter`] ready to test many entries.
pub struct Matcher {
    kind: Option<u32>,
    size: Option<(u64, u64)>,
    newer_than: Option<i64>,
    /// The name pattern; `Err` when it holds a NUL (matches nothing).
    pattern: Option<Result<std::ffi::CString, ()>>,
    /// The literal of a `*literal*` pattern.
    infix: Option<String>,
}

/// Does `hay` contain `needle` (non-empty)?
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

impl Matcher {
    /// Does the entry `name` with attributes `a` pass? Cheap tests first, the name last.
    pub fn matches(&self, name: &str, a: &Attr) -> bool {
        let f = self;
        f.kind.is_none_or(|k| a.mode & S_IFMT == k)
            && f.size
                .is_none_or(|(n, unit)| a.size.div_ceil(unit.max(1)) == n)
            && f.newer_than.is_none_or(|t| a.mtime > t)
            && match (&self.pattern, &self.infix) {
                (None, _) => true,
                (Some(Err(())), _) => false,
                (Some(Ok(_)), Some(lit)) => contains(name.as_bytes(), lit.as_bytes()),
                (Some(Ok(p)), None) => fnmatch_c(p, name),
            }
    }
}

/// fnmatch(3) of a prepared pattern; names up to 255 bytes are NUL-terminated on the stack.
fn fnmatch_c(pattern: &std::ffi::CStr, name: &str) -> bool {
    let b = name.as_bytes();
    if b.contains(&0) {
        return false;
    }
    let mut buf = [0u8; 256];
    let heap;
    let ptr = if b.len() < buf.len() {
        buf[..b.len()].copy_from_slice(b);
        buf.as_ptr()
    } else {
        heap = [b, &[0]].concat();
        heap.as_ptr()
    };
    // SAFETY: two NUL-terminated strings.
    unsafe { libc::fnmatch(pattern.as_ptr(), ptr.cast(), 0) == 0 }
}

/// fnmatch(3) without flags.
pub fn fnmatch(pattern: &str, name: &str) -> bool {
    match (
        std::ffi::CString::new(pattern),
        std::ffi::CString::new(name),
    ) {
        // SAFETY: two valid NUL-terminated strings.
        (Ok(p), Ok(n)) => unsafe { libc::fnmatch(p.as_ptr(), n.as_ptr(), 0) == 0 },
        _ => false,
    }
}

/// A time change for `Utimens`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSpec {
    /// Leave unchanged (`UTIME_OMIT`).
    Omit,
    /// The server's current time (`UTIME_NOW`).
    Now,
    /// This time, ns since the epoch.
    At(i64),
}

/// One request. Strings and byte slices borrow from the received frame.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    /// Empty request (latency probe).
    Ping,
    /// `stat` of a normalised absolute path: one point lookup (a newtype variant: no field
    /// name to write and look up on the hottest request).
    Stat(&'a str),
    /// Create a regular file (`open(O_CREAT)`).
    Create {
        path: &'a str,
        mode: u32,
        uid: u32,
        gid: u32,
        /// `O_EXCL`: fail with EEXIST if it exists.
        excl: bool,
        /// `O_TRUNC`: size becomes 0 if it exists.
        trunc: bool,
        /// What the open wants of an existing file ([`ACCESS_R`] | [`ACCESS_W`]), checked
        /// against its mode bits.
        access: u32,
        /// The opening client process ([`Request::Hold`]): the file's home server counts an
        /// open reference of it, so that the file outlives its names until closed. 0: none.
        holder: u64,
    },
    /// Look up `path` to open it (or for `access(2)`) wanting `access` ([`ACCESS_R`],
    /// [`ACCESS_W`], [`ACCESS_X`]; 0: exists). Reply: `Attr`; EACCES when the connection's
    /// user may not. A symbolic link answers its own attributes, unchecked (the client
    /// follows it). `holder`: as in `Create` (0 for `access(2)` and other lookups).
    Open {
        path: &'a str,
        access: u32,
        holder: u64,
    },
    /// Another server's directory changed (made, its mode or owner changed, or gone when
    /// `gone`): every server keeps every directory's mode and owner to check search
    /// permission on a path's ancestors locally. Servers only. `version`: the directory's
    /// ctime at its server (an older update never overwrites a newer one).
    DirSet {
        path: &'a str,
        mode: u32,
        uid: u32,
        gid: u32,
        version: i64,
        gone: bool,
        /// The lease holder (client process) whose change this is: it forgot what it kept
        /// itself, and is not called back (0: none).
        #[serde(default)]
        by: u64,
    },
    /// The directories this server holds, in key order after `after` (empty: from the
    /// start): what a starting server learns its table from. `from` is that server and
    /// `started` when it started (ns): a server told a new start drops its connections to
    /// the previous run (a call on one would wait out its deadline). Servers only. Reply:
    /// `Dirs`.
    DirList {
        #[serde(with = "serde_bytes")]
        after: &'a [u8],
        from: u32,
        started: i64,
    },
    /// Create a symbolic link at `path` to `target` (stored as the link's data); EEXIST if
    /// `path` exists. Reply: `Created`.
    Symlink {
        path: &'a str,
        target: &'a str,
        uid: u32,
        gid: u32,
    },
    /// Create a special file (`mknod`: FIFO, socket, character or block device, with its
    /// `rdev` in [`encode_dev`] form); EEXIST if `path` exists. A device needs a connection
    /// served as root (EPERM). Reply: `Created`.
    Mknod {
        path: &'a str,
        mode: u32,
        rdev: u32,
        uid: u32,
        gid: u32,
    },
    /// Create a directory.
    Mkdir {
        path: &'a str,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    /// Remove a file's entry (and its inline chunk 0); returns its old attributes.
    Unlink { path: &'a str },
    /// Remove a directory entry; fails with ENOTEMPTY if this server holds children.
    Rmdir { path: &'a str },
    /// Does this server hold any entry inside `dir`?
    HasChildren { dir: &'a str },
    /// This server's slice of a directory, entries whose name hash ≥ `start`, in hash order;
    /// a page ends only between directory positions (`hash >> 1`, see `madfs_client::dir_pos`).
    Readdir {
        dir: &'a str,
        start: u64,
        max_bytes: u32,
        /// The server ids the sender asks this of (its layout's count; 0: not checked): a
        /// server whose layout has more answers `EREMCHG` (servers joined: the sender learns
        /// the layout and asks them too), fewer `EAGAIN` (it has not applied the join yet).
        servers: u32,
    },
    /// Change the size recorded in the inode. `id` ≠ 0: only if `path` still names file `id`
    /// (ESTALE otherwise: the descriptor's file was renamed or unlinked; the client asks its
    /// home server [`Request::Where`]); `path` empty: the open-unlinked file `id` itself, at
    /// its home server.
    SetSize {
        path: &'a str,
        size: u64,
        mode: SizeMode,
        id: u64,
    },
    /// `O_APPEND`: reserve `len` bytes at the end of the file atomically (the size grows by
    /// `len` at once); the reply `Written(offset)`-like `Offset` says where to write. `id` and
    /// an empty `path` as in `SetSize`.
    Append { path: &'a str, len: u64, id: u64 },
    /// Change permission bits.
    Chmod { path: &'a str, mode: u32 },
    /// Change times. `link`: of a symbolic link itself (`AT_SYMLINK_NOFOLLOW`); otherwise a
    /// link answers ELOOP and the client follows it.
    Utimens {
        path: &'a str,
        atime: TimeSpec,
        mtime: TimeSpec,
        link: bool,
    },
    /// Change owner and/or group (`u32::MAX`: leave unchanged, as `-1` in chown(2)). `link`:
    /// of a symbolic link itself (`lchown`).
    Chown {
        path: &'a str,
        uid: u32,
        gid: u32,
        link: bool,
    },
    /// Put an existing entry at `path` (rename's second half; no bulk: chunk 0 stays on the
    /// file's home server). Replaces what is at `path` unless `replace` is false (EEXIST): a
    /// file replaces a file
    /// (a directory: EISDIR), a directory replaces a directory the client found empty (a
    /// file: ENOTDIR).
    Attach {
        path: &'a str,
        attr: Attr,
        replace: bool,
        /// Make the entry durable (WAL sync) before answering: a server moving a file for
        /// `Rename` asks it, so that its intent record can be dropped.
        durable: bool,
        /// A file moved by a rename: its path on the sending server `src`. The entry arrives
        /// *pending*: visible, but its name is not removed or replaced (EAGAIN) until the
        /// sender, having removed the source, says [`Request::Settle`] (or, asked
        /// [`Request::MoveState`], that the move is over), so that a retried move can never
        /// bring the name back after it was renamed on.
        from: Option<&'a str>,
        /// The sending server's index (with `from`).
        src: u32,
    },
    /// Directory `dir` is being removed by its server (`sealed`): creates in it wait (EAGAIN)
    /// on this server from now on; the reply `Bool` says whether this server holds entries
    /// in it. Or the removal failed (`!sealed`): creates go on. Servers only
    /// (`server/src/rmdir.rs`).
    Seal { dir: &'a str, sealed: bool },
    /// An entry of directory `dir` (this server's) was added or removed at `time`: its mtime
    /// and ctime move forward to it. Servers only (coalesced, see `server/src/dirtimes.rs`).
    /// Reply: `Unit`.
    Touch { dir: &'a str, time: i64 },
    /// The move of file `id` to `path` (this server's) is over on its source's server: the
    /// pending entry there becomes an ordinary one. Servers only. Reply: `Unit`.
    Settle { path: &'a str, id: u64 },
    /// Is the move of file `id` from `from` (this server's) still pending here (its intent
    /// record left)? Servers only. Reply: `Bool`.
    MoveState { from: &'a str, id: u64 },
    /// Rename anything but a directory: `from` → `to`, sent to `from`'s metadata server,
    /// which moves the entry itself, atomically when `to` is its own, else with an intent
    /// record (docs/consistency.md, "rename"). A directory source answers `ENOTSUP` (the
    /// client moves directories). `noreplace`: `RENAME_NOREPLACE`. Reply: `Replaced`.
    Rename {
        from: &'a str,
        to: &'a str,
        noreplace: bool,
    },
    /// Remove the entry at `path` if it still names file `id` (a directory rename's last
    /// step).
    Detach { path: &'a str, id: u64 },

    /// Read `len` bytes of chunk `chunk` of a file at `offset` within the chunk. Reply bulk:
    /// the bytes that exist (short at the end of the stored data). `chunk_size`: the file's
    /// (a server keeps a file's chunks at their byte positions in one local file).
    Read {
        id: u64,
        chunk: u64,
        offset: u32,
        len: u32,
        chunk_size: u32,
        cap: Cap,
    },
    /// Write the request's bulk data into chunk `chunk` at `offset`. For chunk 0 (inline on
    /// the home server) `size_of` may name the file's path when that server holds its entry:
    /// the end of the write is then published as its size in the same request (a small file
    /// costs no extra size RPC); ESTALE, writing nothing, if the path no longer names `id`.
    Write {
        id: u64,
        chunk: u64,
        offset: u32,
        chunk_size: u32,
        size_of: Option<&'a str>,
        cap: Cap,
    },
    /// Drop every byte at or past `size` of file `id` held by this server.
    TruncateChunks {
        id: u64,
        size: u64,
        chunk_size: u32,
        cap: Cap,
    },
    /// Make every acknowledged write of file `id` on this server durable (WAL + chunk files).
    /// Sent on the fsync tag. With `size_of` (to the metadata server), `size` is first
    /// published as a lower bound of that path's size, as `SetSize` `Max` does: a writer's
    /// fsync and its size publication are one request (ESTALE as `SetSize` with an `id`).
    Fsync {
        id: u64,
        size_of: Option<&'a str>,
        size: u64,
        cap: Cap,
    },
    /// Make everything this server acknowledged durable: its metadata (WAL sync) and, with
    /// `data`, every chunk file (`syncfs`). `sync(2)`/`syncfs(2)` send it with `data` to
    /// every server; an fsync of a directory without (its entries are spread over all
    /// servers). Runs on an IO thread. Reply: `Unit`.
    Sync { data: bool },
    /// File-system totals of this server.
    Statfs,
    /// The client is going away: the server forgets its connection (no reply). With endpoint
    /// error mode `none` UCX never reports a dead client, so this keeps the connection table
    /// from growing with every short-lived client process.
    Bye,
    /// Server-side find: every entry under `dir` (any depth) held by this server that passes
    /// `filter`, in key order from `after` (exclusive; empty = from the start), until about
    /// `max_bytes` of paths. Reply: `Found`.
    Find {
        dir: &'a str,
        filter: FindFilter<'a>,
        /// Raw bytes (serde_bytes: a flexbuffers blob, borrowed on decode).
        #[serde(with = "serde_bytes")]
        after: &'a [u8],
        max_bytes: u32,
        /// The server ids the sender asks this of (its layout's count; 0: not checked): a
        /// server whose layout has more answers `EREMCHG` (servers joined: the sender learns
        /// the layout and asks them too), fewer `EAGAIN` (it has not applied the join yet).
        servers: u32,
    },
    /// Open references of client process `client` (a random number it chose, sent by each of
    /// its connections; the server keeps it per user) to files whose home server this is:
    /// `add` and `release` one each; `held` is every file it holds here afterwards (one per
    /// open description), taken instead when this server does not know the client (it
    /// restarted, or the client's lease ran out). A file added or held is named by the
    /// capability its open was granted (EACCES otherwise): a process holds only what it
    /// opened. Also the client's lease renewal (every [`HOLD_EVERY_MS`]): a client silent for
    /// the server's open lease loses its references (docs/consistency.md, "Open files").
    /// EMFILE past what one user may hold. Reply: `Unit`.
    Hold {
        client: u64,
        add: Vec<Cap>,
        release: Vec<u64>,
        held: Vec<Cap>,
        /// The client process is exiting: every reference it has here goes.
        gone: bool,
    },
    /// Where is file `id` (this server is its home), which client `client` holds open, now?
    /// Reply `Named(path)` after a rename, `Attr` (nlink 0) when its last name is gone, EAGAIN
    /// while a rename or removal of it is finishing, ENOENT if `client` does not hold it.
    Where { id: u64, client: u64 },
    /// The last name of file `id` (this server is its home) was removed by its metadata
    /// server, `attr` as it was: kept as an orphan while open, else its bytes are dropped on
    /// every server. Servers only. Reply: `Bool(orphaned)`.
    Forget { id: u64, attr: Attr },
    /// File `id` (this server is its home) was renamed to `to`: descriptors of it find it
    /// there. Servers only. Reply: `Unit`.
    Moved { id: u64, to: &'a str },
    /// Where this server keeps its chunk files, for clients on the same host that read them
    /// directly (docs/architecture.md, "Local reads"). Reply: `Located`.
    Locate,
    /// `Write` of `len` bytes that do not follow in this frame but come as their own message,
    /// the raw data alone, on `tag::request(tag::REQUEST_DATA, conn, seq)` (same connection
    /// and sequence number): one contiguous message that UCX can move with a zero-copy
    /// rendezvous. Clients use it from `frame::RAW_WRITE_MIN` bytes. Reply: `Written`.
    WriteData {
        id: u64,
        chunk: u64,
        offset: u32,
        len: u32,
        chunk_size: u32,
        size_of: Option<&'a str>,
        cap: Cap,
    },
    /// Give the file at `from` (not followed: a symbolic link gets a second name itself) the
    /// new name `to`: link(2). Sent to `from`'s server. EEXIST if `to` exists, EPERM for a
    /// directory. Reply: `Attr` (the file's, with its names counted).
    Link { from: &'a str, to: &'a str },
    /// A write by someone other than root clears the file's set-user-ID bit (and its
    /// set-group-ID bit when group-executable), as the kernel does: the writer's open file
    /// `id` at `path` (empty: its orphan record at its home server; ESTALE when `path` names
    /// another file), `cap` its open's capability. Reply: `Attr` after.
    DropPrivs { path: &'a str, id: u64, cap: Cap },
    /// The target of the symbolic link at `path` (`readlink`): a link is never opened for its
    /// data. With an empty `path` (servers only), of link `id` at its home server, which
    /// keeps its target when its entry moved elsewhere. EINVAL for anything but a link.
    /// Reply: `Named(target)`.
    Readlink { path: &'a str, id: u64 },
    /// Servers only: `op` on the attributes of file `id`, which has (had) several names and
    /// is kept by id on its home server (docs/consistency.md, "Hard links"). Reply: `Attr`
    /// after the change.
    Linked { id: u64, op: LinkOp },
    /// Servers only: what primary `from` of replica set `set` changed in cluster-map epoch
    /// `epoch`, for this secondary to apply (docs/redundancy.md, "Primaries and fencing");
    /// the bytes `op` needs come as the request's bulk. EREMCHG when this server's map has a
    /// newer epoch or another primary for `set` (the sender is stale), EAGAIN while its map
    /// is older than `epoch`. Reply: `Unit`.
    Replicate {
        set: u32,
        epoch: u64,
        from: u32,
        op: ReplOp,
    },
    /// The cluster map as this server knows it (replicated clusters). Reply: `Map`.
    Map,
    /// Servers only: a rejoining server catching up replica set `set` from its primary
    /// (docs/redundancy.md, "Rejoin"): the metadata records of the set in key order after
    /// `after` (empty: from the start), about `max_bytes` of them, once every request the
    /// primary admitted before map epoch `epoch` is over. With `files`, the set's server
    /// lists instead its chunk files with their data extents (about 32 KiB of extents per
    /// page, which may end inside a file), from `after` (16 bytes: a file id and a byte
    /// position in it, the page before's `next`) or, when it is empty, after file id
    /// `after_id`. Reply: `Records`.
    Resync {
        set: u32,
        epoch: u64,
        #[serde(with = "serde_bytes")]
        after: &'a [u8],
        max_bytes: u32,
        files: bool,
        after_id: u64,
    },
    /// Servers only: `len` bytes of this server's chunk file of file `id` at byte `pos`
    /// (a rejoining server's copy). Reply: `Records` with one record, the bytes.
    ResyncRead { id: u64, pos: u64, len: u32 },
    /// Servers only: a page of a slot move's copy (docs/architecture.md, "Membership
    /// changes") from `from`, the owner of `slots` (u16 LE each), to this server, their owner
    /// in the map's target layout: metadata records as they are. `first`: the move's first
    /// page (the receiver drops what it holds of those slots, stops granting leases until
    /// the switch, and raises its id counter to `ids`), sent with the sender's map `epoch`:
    /// a receiver that has not applied that map yet answers `EAGAIN` (it may not know yet
    /// that the sender's previous batch is its own now). Reply: `Unit`.
    MoveIn {
        from: u32,
        #[serde(with = "serde_bytes")]
        slots: &'a [u8],
        first: bool,
        ids: u64,
        epoch: u64,
        #[serde(borrow)]
        records: Vec<(&'a serde_bytes::Bytes, &'a serde_bytes::Bytes)>,
    },
    /// Servers only: the request's bulk is the bytes of file `id`'s chunk file at byte
    /// `pos` on `from`, for a slot move's receiver (every byte in chunks of the move's
    /// slots). Reply: `Unit`.
    MoveData { from: u32, id: u64, pos: u64 },
    /// Replicated clusters: `req` (a change that must not be applied twice: an exclusive
    /// create, mkdir, mknod, symlink, unlink, rmdir, append) under request id (`client`,
    /// `seq`), `at` the client's clock (ms since the epoch) when it was first sent. A client
    /// that fails over sends the same id again; the set's primary answers a request it (or
    /// the primary before it) already applied from its replay record instead of applying it
    /// twice (docs/redundancy.md, "Retries and the replay cache"). Reply: `req`'s.
    Once {
        client: u64,
        seq: u64,
        at: u64,
        #[serde(borrow)]
        req: Box<Request<'a>>,
    },
    /// `stat` of a normalised path that asks to keep the answer (docs/consistency.md, "The
    /// client cache"): a positive or negative entry, under a lease of the connection's holder
    /// (its hello's `holder`) that the server calls back before it acknowledges a change
    /// that makes the answer stale. A server that grants none (no holder, a TCP connection,
    /// a replicated cluster, its table full) answers with a lease of 0 ms. Reply: `Looked`.
    Look(&'a str),
    /// Statahead: this server's slice of directory `dir` from position `start` (as
    /// `Readdir`), with every entry's attributes, about `max_bytes` of them, under a lease
    /// of the connection's holder on the whole slice (called back on any change of an entry
    /// of `dir` on this server). Needs search permission on `dir` (what a stat of its
    /// entries needs). Reply: `Looks`.
    LookDir {
        dir: &'a str,
        start: u64,
        max_bytes: u32,
        /// The server ids the sender asks this of (its layout's count; 0: not checked): a
        /// server whose layout has more answers `EREMCHG` (servers joined: the sender learns
        /// the layout and asks them too), fewer `EAGAIN` (it has not applied the join yet).
        servers: u32,
    },
}

/// One entry of a [`Reply::Looks`] page, packed: `[u16 LE name length][name][kind]`, then,
/// for kind [`LOOKS_ATTR`], the attributes ([`Attr::to_bytes`]); kind [`LOOKS_ASK`]: the
/// entry exists, but its attributes must be asked for (a file with several names).
pub const LOOKS_ATTR: u8 = 1;
/// See [`LOOKS_ATTR`].
pub const LOOKS_ASK: u8 = 2;

/// Appends one entry to a packed [`Reply::Looks`] page.
pub fn looks_push(page: &mut Vec<u8>, name: &str, attr: Option<&Attr>) {
    let n = name.len().min(u16::MAX as usize);
    page.extend_from_slice(&(n as u16).to_le_bytes());
    page.extend_from_slice(&name.as_bytes()[..n]);
    match attr {
        Some(a) => {
            page.push(LOOKS_ATTR);
            page.extend_from_slice(&a.to_bytes());
        }
        None => page.push(LOOKS_ASK),
    }
}

/// The entries of a packed [`Reply::Looks`] page (a malformed tail ends it).
pub fn looks_entries(page: &[u8]) -> impl Iterator<Item = (&str, Option<Attr>)> {
    let mut rest = page;
    std::iter::from_fn(move || {
        let n = u16::from_le_bytes(rest.get(..2)?.try_into().ok()?) as usize;
        let name = std::str::from_utf8(rest.get(2..2 + n)?).ok()?;
        let kind = *rest.get(2 + n)?;
        let (attr, used) = match kind {
            LOOKS_ATTR => (
                Some(Attr::from_bytes(rest.get(3 + n..3 + n + ATTR_BYTES)?)?),
                3 + n + ATTR_BYTES,
            ),
            LOOKS_ASK => (None, 3 + n),
            _ => return None,
        };
        rest = &rest[used..];
        Some((name, attr))
    })
}

/// A server's call back of leases it granted (tag kind [`crate::tag::CALLBACK`], on the
/// connection that took them): the holder forgets `paths` (every entry it holds, when
/// `all`) and `attrs`, and acknowledges `id` (tag kind [`crate::tag::RELEASED`]) before the
/// change waits no more. A path in `paths` may have changed its name, existence or file (or,
/// a directory's page `dir/`, any name of the directory); one in `attrs` only its
/// attributes (its lease stays held: a later change of its name is called back too).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Callback<'a> {
    pub id: u64,
    #[serde(borrow)]
    pub paths: Vec<&'a str>,
    pub all: bool,
    #[serde(borrow, default)]
    pub attrs: Vec<&'a str>,
}

impl Request<'_> {
    /// Does this change need a request id in a replicated cluster (is it not idempotent)?
    pub fn needs_once(&self) -> bool {
        matches!(
            self,
            Request::Create { excl: true, .. }
                | Request::Mkdir { .. }
                | Request::Mknod { .. }
                | Request::Symlink { .. }
                | Request::Unlink { .. }
                | Request::Rmdir { .. }
                | Request::Append { .. }
                | Request::Rename { .. }
        )
    }
}

/// What a [`Request::Replicate`] applies.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplOp {
    /// A metadata write batch (RocksDB's encoding, the bulk), made durable at once when
    /// `synced`.
    Batch { synced: bool },
    /// The bulk written into file `id` at byte `pos`.
    Write { id: u64, pos: u64 },
    /// Every byte of file `id` at or beyond `size` dropped.
    Truncate { id: u64, size: u64 },
    /// Bytes `[pos, pos + len)` of file `id` dropped.
    Punch { id: u64, pos: u64, len: u64 },
    /// Every chunk of file `id` dropped.
    Remove { id: u64 },
    /// File `id`'s data (`Some`), or every chunk file and the metadata (`None`), durable.
    Sync { id: Option<u64> },
}

/// What [`Request::Linked`] does to a file's attributes kept by id.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkOp {
    /// Nothing (a lookup).
    Stat,
    /// One name more. `Some(attr)`: the file's attributes when it gets its second name
    /// (from then on kept by id).
    Add(Option<Attr>),
    /// One name fewer; at none the file is forgotten (kept while open, else dropped).
    Drop,
    /// Permission bits.
    Mode(u32),
    /// Owner and/or group (`u32::MAX`: unchanged), mode bits cleared.
    Owner { uid: u32, gid: u32, clear: u32 },
    /// Access and/or modification time (`None`: unchanged).
    Times {
        atime: Option<i64>,
        mtime: Option<i64>,
    },
    /// The size exactly (truncate).
    Size(u64),
    /// The size at least (a publication).
    Grow(u64),
    /// An `O_APPEND` reservation of `len` bytes: the reply's size is the new end.
    Append(u64),
}

/// The set-id bits of `mode` a write by anyone but root clears (the kernel's
/// `file_remove_privs`): S_ISUID, and S_ISGID when the file is group-executable (else it
/// marks mandatory locking and stays). Directories keep theirs.
pub fn privs_of(mode: u32) -> u32 {
    if mode & S_IFMT == S_IFDIR {
        return 0;
    }
    let mut bits = mode & 0o4000;
    if mode & 0o2010 == 0o2010 {
        bits |= 0o2000;
    }
    bits
}

/// How often a client process holding files open renews its references ([`Request::Hold`]),
/// milliseconds, on the way of its calls; servers keep them for a lease many times longer
/// (10 minutes by default).
pub const HOLD_EVERY_MS: u64 = 10_000;

/// Read permission (`R_OK`).
pub const ACCESS_R: u32 = 4;
/// Write permission (`W_OK`).
pub const ACCESS_W: u32 = 2;
/// Execute / search permission (`X_OK`).
pub const ACCESS_X: u32 = 1;
/// In a capability's access: a write capability of a set-user-ID (or set-group-ID,
/// group-executable) file granted to someone other than root. Data servers refuse writes
/// with it (`EPERM`) until its holder clears the file's set-id bits (`DropPrivs`, which
/// grants a capability without it), as the kernel clears them before a write.
pub const ACCESS_PRIVS: u32 = 8;

/// One directory of a `Dirs` reply: path, mode, uid, gid, version (ctime).
pub type DirInfo<'a> = (&'a str, u32, u32, u32, i64);

/// What `Find` keeps (all conditions must hold).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FindFilter<'a> {
    /// fnmatch(3) pattern on the entry name.
    pub name: Option<&'a str>,
    /// find's `-size N<unit>`: (N, unit bytes); matches when ⌈size / unit⌉ = N.
    pub size: Option<(u64, u64)>,
    /// Modification time strictly after this (ns; find's `-newer FILE`).
    pub newer_than: Option<i64>,
    /// `S_IFREG` or `S_IFDIR` (find's `-type f|d`).
    pub kind: Option<u32>,
    /// Also entries whose move to another server is pending (hidden from lookups and from
    /// other finds): what a directory rename must move too. Servers only look at it.
    #[serde(default)]
    pub pending: bool,
}

impl Request<'_> {
    /// Does this request change what the servers hold (an entry, attributes, data)?
    pub fn mutates(&self) -> bool {
        !matches!(
            self,
            Request::Ping
                | Request::Stat(_)
                | Request::HasChildren { .. }
                | Request::Readdir { .. }
                | Request::Read { .. }
                | Request::Fsync { .. }
                | Request::Sync { .. }
                | Request::Statfs
                | Request::Bye
                | Request::Find { .. }
                | Request::Locate
                | Request::Open { .. }
                | Request::DirList { .. }
                | Request::MoveState { .. }
                | Request::Readlink { .. }
                | Request::Look(_)
                | Request::LookDir { .. }
        )
    }

    /// The paths whose entries a change names (what a client that keeps entries forgets,
    /// with everything below them, before it sends the change): empty for reads and for
    /// changes by file id only.
    pub fn paths_changed(&self) -> [&str; 2] {
        if !self.mutates() {
            return ["", ""];
        }
        match self {
            Request::Create { path, .. }
            | Request::Mkdir { path, .. }
            | Request::Mknod { path, .. }
            | Request::Symlink { path, .. }
            | Request::Unlink { path }
            | Request::Rmdir { path }
            | Request::SetSize { path, .. }
            | Request::Append { path, .. }
            | Request::Chmod { path, .. }
            | Request::Utimens { path, .. }
            | Request::Chown { path, .. }
            | Request::DropPrivs { path, .. } => [path, ""],
            Request::Rename { from, to, .. } | Request::Link { from, to } => [from, to],
            Request::Write { size_of, .. } | Request::WriteData { size_of, .. } => {
                [size_of.unwrap_or(""), ""]
            }
            Request::Once { req, .. } => req.paths_changed(),
            _ => ["", ""],
        }
    }

    /// Short name for stats and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Ping => "ping",
            Request::Stat(_) => "stat",
            Request::Create { .. } => "create",
            Request::Mkdir { .. } => "mkdir",
            Request::Mknod { .. } => "mknod",
            Request::Symlink { .. } => "symlink",
            Request::Unlink { .. } => "unlink",
            Request::Rmdir { .. } => "rmdir",
            Request::HasChildren { .. } => "has_children",
            Request::Readdir { .. } => "readdir",
            Request::SetSize { .. } => "set_size",
            Request::Append { .. } => "append",
            Request::Chmod { .. } => "chmod",
            Request::Utimens { .. } => "utimens",
            Request::Chown { .. } => "chown",
            Request::Attach { .. } => "attach",
            Request::Settle { .. } => "settle",
            Request::Touch { .. } => "touch",
            Request::Seal { .. } => "seal",
            Request::MoveState { .. } => "move_state",
            Request::Detach { .. } => "detach",
            Request::Rename { .. } => "rename",
            Request::Read { .. } => "read",
            Request::Write { .. } => "write",
            Request::TruncateChunks { .. } => "truncate_chunks",
            Request::Fsync { .. } => "fsync",
            Request::Sync { .. } => "sync",
            Request::Statfs => "statfs",
            Request::Bye => "bye",
            Request::Find { .. } => "find",
            Request::WriteData { .. } => "write",
            Request::Locate => "locate",
            Request::Open { .. } => "open",
            Request::DirSet { .. } => "dir_set",
            Request::DirList { .. } => "dir_list",
            Request::Hold { .. } => "hold",
            Request::Where { .. } => "where",
            Request::Forget { .. } => "forget",
            Request::Moved { .. } => "moved",
            Request::Link { .. } => "link",
            Request::Readlink { .. } => "readlink",
            Request::Linked { .. } => "linked",
            Request::DropPrivs { .. } => "drop_privs",
            Request::Replicate { .. } => "replicate",
            Request::Map => "map",
            Request::Resync { .. } => "resync",
            Request::MoveIn { .. } => "move_in",
            Request::MoveData { .. } => "move_data",
            Request::ResyncRead { .. } => "resync_read",
            Request::Once { req, .. } => req.name(),
            Request::Look(_) => "look",
            Request::LookDir { .. } => "look_dir",
        }
    }
}

/// One directory entry of a `Readdir` reply.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Dirent<'a> {
    /// Hash of the name (the directory position of the entry).
    pub hash: u64,
    /// File id / inode number.
    pub id: u64,
    /// `mode & S_IFMT`.
    pub kind: u32,
    /// Entry name.
    pub name: &'a str,
}

/// File-system totals.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatFs {
    /// Block size.
    pub bsize: u64,
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Blocks available to unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Maximum name length.
    pub namelen: u64,
}

/// What a refusal by admission (`EREMCHG`: this server does not hold what the request
/// names, or is not its replica set's primary) says besides its errno, as the header of the
/// error reply (`frame::Encoder::refusal`, `frame::refusal`): the cluster map epoch the server
/// knows, so that a client can tell whether its own map is the stale one.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The server's map epoch (0: unreplicated, no map).
    pub epoch: u64,
}

/// Version of the wire protocol: bumped whenever a request, reply, frame or tag changes
/// meaning. A client refuses a server whose welcome names another version.
pub const PROTOCOL_VERSION: u32 = 14;

/// What a server says to a client right after accepting its connection.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Welcome {
    /// The server's [`PROTOCOL_VERSION`].
    pub protocol: u32,
    /// The id of the server's cluster (its identity record): a client of another cluster
    /// refuses the connection.
    pub cluster: u64,
    /// Number of servers of that cluster.
    pub servers: u32,
    /// The connection id the client puts in its request tags.
    pub conn: u32,
    /// The server's index in the cluster.
    pub server: u32,
    /// Largest request frame the server accepts (prefix + header + bulk).
    pub max_frame: u32,
    /// The server's default chunk size for new files.
    pub chunk_size: u32,
    /// A fresh random challenge: the client's [`Hello`] proves who it is for this one
    /// connection (docs/security.md).
    pub nonce: [u8; 32],
    /// The connection's lease, ms: the server closes it after this long without a request,
    /// so a client idle for half of it reconnects before its next one (0: no lease).
    #[serde(default)]
    pub lease_ms: u32,
    /// The cluster's replication factor (0 or 1: one copy; from 2 a client routes each
    /// replica set to its primary in the cluster map, [`Request::Map`]).
    #[serde(default)]
    pub replication: u32,
    /// A random number the connection's [`Hello`] echoes: sent to this connection's endpoint
    /// only, so that a hello sent by another process for a guessed connection id is dropped
    /// (0: none, a plain-TCP stream).
    #[serde(default)]
    pub ticket: u64,
}

/// What a connection claims to be.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A client process: served as the user its proof names.
    Client,
    /// Another server of the cluster (proved with the peer key): may move entries between
    /// servers (`Attach` of files, `Detach` of moved files).
    Peer,
    /// A trusted proxy serving many users (a root-run FUSE mount), proved with a MUNGE
    /// credential of root or the peer key: served as the `uid`/`gid` its hello states, one
    /// connection per user it serves. No other role may state who it acts for.
    Proxy,
}

impl Role {
    /// The role's number in what a proof covers (`madfs_auth::stated`).
    pub fn code(self) -> u8 {
        match self {
            Role::Client => 1,
            Role::Peer => 2,
            Role::Proxy => 3,
        }
    }
}

/// How a [`Hello`] proves its identity.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Proof<'a> {
    /// None: only an `--insecure` cluster accepts it (and believes `uid`/`gid`).
    Insecure,
    /// HMAC-SHA256 of the challenge under the client key (role `Client`) or the peer key
    /// (role `Peer`).
    Key(#[serde(with = "serde_bytes")] &'a [u8]),
    /// A MUNGE credential whose payload is the challenge.
    Munge(&'a str),
}

/// A client's answer to a [`Welcome`], on `tag::hello(conn)`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Hello<'a> {
    /// The connection id from the welcome.
    pub conn: u32,
    /// What the peer claims to be.
    pub role: Role,
    /// The client's fresh nonce (part of the challenge both proofs cover).
    #[serde(with = "serde_bytes")]
    pub nonce: &'a [u8],
    /// The proof.
    #[serde(borrow)]
    pub proof: Proof<'a>,
    /// The user and group the process runs as: believed only on an insecure cluster;
    /// elsewhere the proof decides.
    pub uid: u32,
    /// See `uid`.
    pub gid: u32,
    /// The process's supplementary groups: believed only on an insecure cluster (elsewhere
    /// the server's group database decides).
    #[serde(default)]
    pub groups: Vec<u32>,
    /// The replica set the connection's requests are for (replicated clusters: the set
    /// whose first member is that server; `None`: the server's own). A server that is not
    /// that set's primary answers EREMCHG.
    #[serde(default)]
    pub set: Option<u32>,
    /// The welcome's ticket, echoed.
    #[serde(default)]
    pub ticket: u64,
    /// The client process's holder number (its leases and open references); 0: it keeps
    /// nothing and gets no callbacks.
    #[serde(default)]
    pub holder: u64,
    /// This connection takes every callback of its holder (a process with a thread of its
    /// own for them: `madfs-fuse`); the holder's other connections then get none. A callback
    /// of a lease taken by a connection of another user goes to it only when that
    /// connection is a proxy's.
    #[serde(default)]
    pub listens: bool,
}

/// The server's answer to a [`Hello`], on `tag::admit(server)`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Served from now on.
    Admitted {
        /// The connection word of every request of this connection (`frame::CONN_WORD`).
        secret: u64,
        /// The user and group the connection is served as.
        uid: u32,
        /// See `uid`.
        gid: u32,
        /// Key modes: the server's proof that it holds the key too (empty otherwise).
        #[serde(with = "serde_bytes")]
        proof: Vec<u8>,
    },
    /// Refused; the connection is closed.
    Refused {
        /// Why, in words (also in the server's log).
        reason: String,
    },
}

/// Successful reply body.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Reply<'a> {
    /// Nothing to say (also the answer to `Ping`).
    Unit,
    /// Attributes (`Stat`, `Mkdir`, `Unlink`, `SetSize`, …).
    Attr(Attr),
    /// Answer to `Create`: the file's attributes, whether it existed before, and its size
    /// before an `O_TRUNC` (the client then drops chunks held by other servers).
    Created {
        attr: Attr,
        existed: bool,
        old_size: u64,
        /// The capability of the open.
        cap: Cap,
    },
    /// Attributes and a capability for the file they describe (`Open`, and `Unlink` and an
    /// exact `SetSize`, whose client then drops the file's bytes on other servers).
    Granted { attr: Attr, cap: Cap },
    /// A directory slice; `next` is the hash to continue from, `None` at the end.
    Dirents {
        #[serde(borrow)]
        entries: Vec<Dirent<'a>>,
        next: Option<u64>,
    },
    /// Yes/no (`HasChildren`).
    Bool(bool),
    /// The entry an `Attach` replaced, if any.
    Replaced(Option<Attr>),
    /// Bytes written.
    Written(u32),
    /// The path that names an open file now (`Where`).
    Named(&'a str),
    /// Offset reserved by `Append`.
    Offset(u64),
    /// `Find` results: paths relative to the directory searched, entries examined, and the
    /// key to continue after (`None`:
    /// done).
    Found {
        scanned: u64,
        #[serde(borrow)]
        paths: Vec<&'a str>,
        #[serde(borrow, with = "serde_bytes")]
        next: Option<&'a [u8]>,
    },
    /// File-system totals.
    StatFs(StatFs),
    /// Answer to `DirList`: directories and the key to go on after (`None`: done).
    Dirs {
        #[serde(borrow)]
        entries: Vec<DirInfo<'a>>,
        #[serde(borrow, with = "serde_bytes")]
        next: Option<&'a [u8]>,
    },
    /// Answer to `Locate`: the kernel the server runs on (`/proc/sys/kernel/random/boot_id`),
    /// the absolute path of its chunk-file directory, and the random number it wrote into
    /// `token` there at start (a client that reads the same number from that path sees the
    /// same files).
    Located {
        boot: &'a str,
        dir: &'a str,
        token: u64,
    },
    /// Answer to `Resync`: (key, value) records (metadata), or (file id as 8 bytes LE,
    /// its data extents as (position, length) pairs of u64 LE) with `files`, and where to go
    /// on after (`None`: done).
    Records {
        #[serde(borrow)]
        records: Vec<(&'a serde_bytes::Bytes, &'a serde_bytes::Bytes)>,
        #[serde(borrow, with = "serde_bytes")]
        next: Option<&'a [u8]>,
    },
    /// Answer to `Map`: the epoch, each server's state (0 up, 1 down, 2 rejoining, 3 removed), the
    /// replication factor and the layout: each slot's owner, u16 LE (empty: the initial
    /// layout of the servers, `Layout::initial`).
    Map {
        epoch: u64,
        states: Vec<u8>,
        replication: u32,
        #[serde(with = "serde_bytes")]
        owners: Vec<u8>,
    },
    /// Answer to `Look`: the entry's attributes (`None`: no such entry, its parent a
    /// directory) and how long the answer may be kept, counted from when the request was
    /// sent (0: not at all).
    Looked { attr: Option<Attr>, lease_ms: u32 },
    /// Answer to `LookDir`: the entries (packed, [`looks_entries`]), the position to go on
    /// from (`None`: the slice is complete), and how long the page may be kept (as
    /// `Looked`).
    Looks {
        #[serde(borrow, with = "serde_bytes")]
        entries: &'a [u8],
        next: Option<u64>,
        lease_ms: u32,
    },
}

#[cfg(test)]
mod dev_tests {
    use super::*;

    #[test]
    fn device_numbers_round_trip_in_the_kernel_encoding() {
        for (major, minor) in [
            (0, 0),
            (1, 3),
            (7, 200),
            (8, 1 << 19),
            (4095, (1 << 20) - 1),
        ] {
            let dev = libc::makedev(major, minor);
            let v = encode_dev(dev).unwrap();
            assert_eq!(decode_dev(v), dev, "{major}:{minor}");
        }
        // as Linux's new_encode_dev: 1:3 is 0x103, minor bits above 8 move up by 12
        assert_eq!(encode_dev(libc::makedev(1, 3)), Some(0x103));
        assert_eq!(encode_dev(libc::makedev(1, 0x1234)), Some(0x0120_0134));
        assert_eq!(encode_dev(libc::makedev(4096, 0)), None);
    }
}

#[cfg(test)]
mod matcher_tests {
    use super::*;

    #[test]
    fn matcher_agrees_with_fnmatch() {
        let a = Attr {
            id: 2,
            mode: S_IFREG | 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            size: 3901,
            chunk_size: 4096,
            rdev: 0,
            atime: 0,
            mtime: 10,
            ctime: 0,
        };
        let names = ["file.0.101", "file.1.2", "01", "x0y1", "", "a*01*b", "é01"];
        for pat in [
            "*01*", "*1*", "file*", "*[0-9]*", "*?*", "**", "*\\*01*", "*01", "01*",
        ] {
            let f = FindFilter {
                name: Some(pat),
                ..Default::default()
            };
            let m = f.matcher();
            for n in names {
                assert_eq!(m.matches(n, &a), fnmatch(pat, n), "{pat} on {n:?}");
            }
        }
        let f = FindFilter {
            name: Some("*01*"),
            size: Some((3901, 1)),
            newer_than: Some(10),
            kind: None,
            pending: false,
        };
        assert!(
            !f.matcher().matches("file.0.101", &a),
            "mtime must be newer"
        );
    }
}
