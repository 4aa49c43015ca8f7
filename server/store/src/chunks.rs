//! Chunk store on a local directory: the chunks of file *id* that live on this server are
//! kept in one sparse local file, `data/<(id >> 12) % 256 as 2 hex>/<id as 16 hex>`
//! (`madfs_placement::chunk_file`), each at its byte
//! position in the madfs file (chunk *c* at *c* × chunk size); the chunks placed on other
//! servers are holes. One file per madfs file and server, not one per chunk: creating and
//! deleting a local file per 752 KiB chunk cost more than the writes (ext4 inode allocation
//! after many deletions), and an fsync then syncs one file. Truncation is one `set_len`.
//! Names are built from numbers only, so no request can name a path outside the data
//! directory. Plain `std::fs` on IO threads.
//!
//! With checksums (the cluster's identity record), each chunk file has a record file beside
//! it (`<id>.crc`, the `madfs-checksum` format) and every read is verified (`sums.rs`).

use super::flush::SharedFlush;
use super::sums;
use super::{ChunkStore, Tap};
use madfs_placement::TOKEN_FILE;
use madfs_proto::{Errno, FsResult, ReplOp, StatFs};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

/// A write of at least this many bytes starts the write-out of its range at once
/// (`sync_file_range`), so that the disk works while the client streams instead of all at
/// its fsync; a write that small rather belongs to a record rewritten soon.
const EARLY_WRITEBACK_MIN: usize = 256 << 10;

/// Descriptors kept open for reads and writes (the cache is emptied when full).
const OPEN_CACHE: usize = 256;

/// Where the chunk files are, for clients on the same host that read them directly
/// (`Request::Locate`).
#[derive(Debug, Clone)]
pub struct Location {
    /// `/proc/sys/kernel/random/boot_id`: the kernel (and page cache) the files live under.
    pub boot: String,
    /// Absolute path of the chunk directory.
    pub dir: String,
    /// The random number written into `dir/token` at open.
    pub token: u64,
}

/// Write count and shared flush of a file written since its last flush.
#[derive(Default)]
struct Dirty {
    writes: std::sync::atomic::AtomicU64,
    flush: SharedFlush,
}

/// The open descriptors of a chunk file: its data and, with checksums, its record file.
struct Open {
    data: File,
    sums: Option<File>,
}

/// The map epoch a server publishes in its chunk directory (8 bytes LE, written in place):
/// a client reading chunk files itself reads them only while its own layout is at least as
/// new (docs/architecture.md, "Membership changes"): a slot's old owner publishes the switch
/// before it drops the slot's chunks.
pub struct EpochFile(File);

impl EpochFile {
    /// Publishes `epoch`.
    pub fn publish(&self, epoch: u64) -> std::io::Result<()> {
        self.0.write_all_at(&epoch.to_le_bytes(), 0)
    }
}

/// Local-file chunk store.
pub struct FsChunks {
    root: PathBuf,
    /// Keep and verify per-block checksums.
    checksums: bool,
    locks: sums::Locks,
    location: Location,
    /// Files written since their last flush (or being flushed).
    dirty: Mutex<HashMap<u64, Arc<Dirty>>>,
    pins: Arc<Pins>,
    open: Mutex<OpenCache>,
    space: Space,
    /// What sees every chunk change (a replicated cluster's copies): [`Tap`].
    tap: std::sync::OnceLock<Arc<dyn Tap>>,
}

/// Free space kept for metadata (docs/operations.md, "Full disks"): writes of file data are
/// refused with ENOSPC while the file system holding the data directory has less than
/// `reserve` bytes free, so that RocksDB (entries, renames, removals that give space back)
/// never meets a full disk; new entries (creates, directories, links) are refused below a
/// quarter of the reserve, which stays for removals, renames and attribute changes (they give
/// space back or need little). Free space is asked of the kernel again whenever the writes
/// since the last look could have used half of what was above the floor.
struct Space {
    reserve: std::sync::atomic::AtomicU64,
    /// Bytes data writes may still take before the next look (negative: look now).
    budget: std::sync::atomic::AtomicI64,
    /// The same for new entries (counted as [`ENTRY_BYTES`] each).
    meta_budget: std::sync::atomic::AtomicI64,
}

/// What a new entry is counted as against the free space.
const ENTRY_BYTES: u64 = 4096;

/// Descriptors (read and write) of recently used files, so that the net thread can map the
/// pieces of a streaming read, answer small reads from the page cache and take small writes
/// without an `open` (which may wait for the disk), and IO threads need no `open` per call.
/// `gen` counts removals: a descriptor opened before one is not cached (it may be the removed
/// file).
#[derive(Default)]
struct OpenCache {
    gen: u64,
    files: HashMap<u64, Arc<Open>>,
}

const PIN_SHARDS: usize = 64;

/// Keeps chunk files from shrinking while a reply is sent straight out of a mapping of them
/// (a mapped page beyond the end of the file cannot be read, and UCX would fail the transfer
/// half-way). Sharded by file id; a read that finds a shrink under way takes the copying path.
struct Pins {
    readers: [AtomicU32; PIN_SHARDS],
    shrinking: [AtomicU32; PIN_SHARDS],
}

impl Pins {
    fn pin(self: &Arc<Self>, id: u64) -> Option<Pin> {
        let s = (id % PIN_SHARDS as u64) as usize;
        if self.shrinking[s].load(SeqCst) > 0 {
            return None;
        }
        self.readers[s].fetch_add(1, SeqCst);
        if self.shrinking[s].load(SeqCst) > 0 {
            self.readers[s].fetch_sub(1, SeqCst);
            return None;
        }
        Some(Pin {
            pins: self.clone(),
            s,
        })
    }

    /// Waits until no reply maps a file of `id`'s shard; new mappings wait for the guard.
    fn shrink(&self, id: u64) -> Shrink<'_> {
        let s = (id % PIN_SHARDS as u64) as usize;
        self.shrinking[s].fetch_add(1, SeqCst);
        // bounded: a mapped reply is dropped after the server's send timeout
        while self.readers[s].load(SeqCst) > 0 {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        Shrink { pins: self, s }
    }
}

struct Pin {
    pins: Arc<Pins>,
    s: usize,
}

impl Drop for Pin {
    fn drop(&mut self) {
        self.pins.readers[self.s].fetch_sub(1, SeqCst);
    }
}

struct Shrink<'a> {
    pins: &'a Pins,
    s: usize,
}

impl Drop for Shrink<'_> {
    fn drop(&mut self) {
        self.pins.shrinking[self.s].fetch_sub(1, SeqCst);
    }
}

/// Bytes of a chunk file, mapped read-only, for a reply sent without copying them (UCX reads
/// them from the page cache into the client's buffer). The file cannot shrink meanwhile.
pub struct Mapped {
    base: *mut libc::c_void,
    map_len: usize,
    /// Bytes of the reply (from `skip`; the mapping may reach further, to a block's end).
    len: usize,
    skip: usize,
    _pin: Option<Pin>,
}

// SAFETY: a read-only private view of file pages; the mapping is owned by this value.
unsafe impl Send for Mapped {}

impl Mapped {
    fn empty() -> Mapped {
        Mapped {
            base: std::ptr::null_mut(),
            map_len: 0,
            len: 0,
            skip: 0,
            _pin: None,
        }
    }

    /// The mapped bytes (possibly none: a hole at the end, or no chunk file).
    pub fn bytes(&self) -> &[u8] {
        if self.base.is_null() {
            return &[];
        }
        // SAFETY: we mapped map_len readable bytes at base; the file cannot shrink while the
        // pin is held.
        unsafe { std::slice::from_raw_parts((self.base as *const u8).add(self.skip), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if !self.base.is_null() {
            // SAFETY: our own mapping.
            unsafe { libc::munmap(self.base, self.map_len) };
        }
    }
}

impl FsChunks {
    /// Opens (creating) the chunk directory `root`; with `checksums`, chunk files carry
    /// per-block checksums.
    pub fn open(root: &Path, checksums: bool) -> std::io::Result<Self> {
        crate::files::make_dir(root, 0o700)?;
        let location = publish_location(root)?;
        Ok(FsChunks {
            location,
            root: root.to_owned(),
            checksums,
            locks: sums::Locks::default(),
            dirty: Mutex::default(),
            pins: Arc::new(Pins {
                readers: [const { AtomicU32::new(0) }; PIN_SHARDS],
                shrinking: [const { AtomicU32::new(0) }; PIN_SHARDS],
            }),
            open: Mutex::default(),
            space: Space {
                reserve: std::sync::atomic::AtomicU64::new(0),
                budget: std::sync::atomic::AtomicI64::new(-1),
                meta_budget: std::sync::atomic::AtomicI64::new(-1),
            },
            tap: std::sync::OnceLock::new(),
        })
    }

    /// Keeps `bytes` free for metadata: data writes get ENOSPC below that ([`Space`]).
    /// `None`: 1 % of the file system, at least 16 MiB and at most 1 GiB.
    pub fn set_reserve(&self, bytes: Option<u64>) -> FsResult<u64> {
        let r = match bytes {
            Some(b) => b,
            None => {
                let s = self.statfs()?;
                (s.blocks * s.bsize / 100).clamp(16 << 20, 1 << 30)
            }
        };
        self.space.reserve.store(r, SeqCst);
        self.space.budget.store(-1, SeqCst);
        self.space.meta_budget.store(-1, SeqCst);
        Ok(r)
    }

    /// May a write of `len` bytes of file data go ahead? ENOSPC when the free space would
    /// fall below the reserve.
    pub fn admit(&self, len: u64) -> FsResult<()> {
        let floor = self.space.reserve.load(SeqCst);
        self.admit_above(&self.space.budget, floor, len)
    }

    /// May a new entry be made? ENOSPC below a quarter of the reserve.
    pub fn admit_entry(&self) -> FsResult<()> {
        let floor = self.space.reserve.load(SeqCst) / 4;
        self.admit_above(&self.space.meta_budget, floor, ENTRY_BYTES)
    }

    fn admit_above(
        &self,
        budget: &std::sync::atomic::AtomicI64,
        floor: u64,
        len: u64,
    ) -> FsResult<()> {
        let left = budget.fetch_sub(len as i64, SeqCst) - len as i64;
        if left >= 0 {
            return Ok(());
        }
        let s = self.statfs()?;
        let free = s.bavail.saturating_mul(s.bsize);
        let above = free.saturating_sub(floor);
        if above < len {
            budget.store(-1, SeqCst);
            return Err(Errno::ENOSPC);
        }
        budget.store(((above - len) / 2).min(i64::MAX as u64) as i64, SeqCst);
        Ok(())
    }

    fn file_path(&self, id: u64) -> PathBuf {
        self.root.join(madfs_placement::chunk_file(id))
    }

    fn sums_path(&self, id: u64) -> PathBuf {
        self.root
            .join(madfs_checksum::record_file(&madfs_placement::chunk_file(
                id,
            )))
    }

    /// Does this store keep checksums?
    pub fn checksums(&self) -> bool {
        self.checksums
    }

    /// Where the chunk files are ([`Location`]).
    pub fn location(&self) -> &Location {
        &self.location
    }

    fn open_cache(&self) -> std::sync::MutexGuard<'_, OpenCache> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Maps `len` bytes of file `id` at byte `pos` (fewer at the end of the local file) for a
    /// zero-copy reply, opening the file if needed (blocking: an IO thread's work). `None`:
    /// use [`ChunkStore::read`] instead (a shrink of a file of this shard is under way, or
    /// the mapping failed).
    pub fn map_read(&self, id: u64, pos: u64, len: usize) -> FsResult<Option<Mapped>> {
        match self.open_file(id, false)? {
            Some(f) => self.map_file(&f, id, pos, len),
            None => {
                self.check_lost(id, pos, len as u64)?;
                Ok(Some(Mapped::empty()))
            }
        }
    }

    /// [`FsChunks::map_read`] if the file is open already (no blocking call: the net thread
    /// may use it), else `None`.
    pub fn map_cached(&self, id: u64, pos: u64, len: usize) -> Option<FsResult<Option<Mapped>>> {
        if self.checksums {
            return None; // verifying faults the pages in: an IO thread's work
        }
        let f = self.cached(id)?;
        Some(self.map_file(&f, id, pos, len))
    }

    /// Reads `out.len()` bytes of file `id` at `pos` only if that needs neither an `open` nor
    /// the disk (`preadv2(RWF_NOWAIT)` on a cached descriptor: the page cache has them all),
    /// so the net thread may answer a small read itself instead of handing it to an IO
    /// thread. `None`: take the IO-thread path (not open, not cached, short, or an error).
    pub fn read_nowait(&self, id: u64, pos: u64, out: &mut [u8]) -> Option<usize> {
        let o = self.cached(id)?;
        if let Some(s) = &o.sums {
            return sums::read(&o.data, s, &self.locks, id, pos, out, true)
                .ok()
                .flatten()
                .filter(|n| *n == out.len());
        }
        let f = &o.data;
        let iov = libc::iovec {
            iov_base: out.as_mut_ptr().cast(),
            iov_len: out.len(),
        };
        // SAFETY: one iovec over `out`, which outlives the call; a plain read of our own fd.
        let n = unsafe {
            libc::preadv2(
                std::os::fd::AsRawFd::as_raw_fd(f),
                &iov,
                1,
                pos as libc::off_t,
                libc::RWF_NOWAIT,
            )
        };
        (n >= 0 && n as usize == out.len()).then_some(n as usize)
    }

    fn cached(&self, id: u64) -> Option<Arc<Open>> {
        self.open_cache().files.get(&id).cloned()
    }

    /// Is file `id` open (in the descriptor cache)? Then a small write needs no `open`.
    pub fn is_open(&self, id: u64) -> bool {
        self.open_cache().files.contains_key(&id)
    }

    /// A descriptor (read and write) of file `id`, from the cache or opened (blocking) and
    /// cached; with `create` a missing file is made, else `None` if there is no local file.
    fn open_file(&self, id: u64, create: bool) -> FsResult<Option<Arc<Open>>> {
        if let Some(f) = self.cached(id) {
            return Ok(Some(f));
        }
        let gen = self.open_cache().gen;
        let path = self.file_path(id);
        // (never through a link: names are made of numbers, and the directory is the
        // server's alone, but nothing planted is followed all the same)
        let open = |path: &Path, create: bool| {
            use std::os::unix::fs::OpenOptionsExt;
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
        };
        let open_or_mkdir = |path: &Path| match open(path, create) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                if let Some(dir) = path.parent() {
                    crate::files::make_dir(dir, 0o700)?;
                }
                open(path, create)
            }
            r => r,
        };
        // the record file first: a chunk file never exists without one (a missing one, as
        // after a loss, is made empty: every block a hole, so written data fails to verify)
        let sums = if self.checksums && create {
            Some(open_or_mkdir(&self.sums_path(id))?)
        } else {
            None
        };
        let data = match open_or_mkdir(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Errno::from_io(&e)),
        };
        let sums = match sums {
            Some(s) => Some(s),
            None if self.checksums => Some(open(&self.sums_path(id), true)?),
            None => None,
        };
        let f = Arc::new(Open { data, sums });
        let mut c = self.open_cache();
        if c.gen == gen {
            if c.files.len() >= OPEN_CACHE {
                c.files.clear();
            }
            c.files.insert(id, f.clone());
        }
        Ok(Some(f))
    }

    fn map_file(&self, o: &Open, id: u64, pos: u64, len: usize) -> FsResult<Option<Mapped>> {
        let f = &o.data;
        let Some(pin) = self.pins.pin(id) else {
            return Ok(None);
        };
        let size = f.metadata()?.len();
        if o.sums.is_some() && pos + len as u64 > size {
            // a read past the end of the local file: the copying path checks that no block
            // there was written (records past the end: a cut or lost file)
            return Ok(None);
        }
        if pos >= size || len == 0 {
            return Ok(Some(Mapped::empty()));
        }
        let n = (size - pos).min(len as u64) as usize;
        // with checksums, whole blocks are mapped and checked (the reply is the asked part)
        let whole = match &o.sums {
            Some(_) => {
                (pos + n as u64)
                    .next_multiple_of(madfs_checksum::BLOCK)
                    .min(size) as usize
                    - pos as usize
            }
            None => n,
        };
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
        let start = pos - pos % page;
        let skip = (pos - start) as usize;
        // SAFETY: a new read-only shared mapping of an open file. Not populated: the reader's
        // cross-memory copy faults the pages in (the work MAP_POPULATE would do here, without
        // a second pass over the page tables on this thread).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                skip + whole,
                libc::PROT_READ,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(f),
                start as libc::off_t,
            )
        };
        if base == libc::MAP_FAILED {
            return Ok(None);
        }
        let m = Mapped {
            base,
            map_len: skip + whole,
            len: n,
            skip,
            _pin: Some(pin),
        };
        if let Some(s) = &o.sums {
            // SAFETY: the mapping holds map_len readable bytes; the pin keeps the file long.
            let all = unsafe { std::slice::from_raw_parts(base as *const u8, m.map_len) };
            if !sums::check_mapped(s, start / madfs_checksum::BLOCK, all) {
                return Ok(None); // the copying path retries and answers EIO
            }
            // the check faulted the pages into this process: let them go again (they stay in
            // the page cache; the reader's copy faults them back), so that replies waiting
            // for stalled readers do not count in the server's resident set
            // SAFETY: our own shared file mapping; dropping its page-table entries only.
            unsafe { libc::madvise(base, m.map_len, libc::MADV_DONTNEED) };
        }
        Ok(Some(m))
    }

    /// `fdatasync` of file `id`, through its cached descriptor when there is one (no open by
    /// name per fsync); a file that is gone has nothing to flush.
    fn flush_file(&self, id: u64) -> FsResult<()> {
        match self.cached(id) {
            Some(o) => {
                o.data.sync_data()?;
                if let Some(s) = &o.sums {
                    s.sync_data()?;
                }
            }
            None => {
                match File::open(self.file_path(id)) {
                    Ok(f) => f.sync_data()?,
                    Err(e) => not_found_is_ok(e)?,
                }
                if self.checksums {
                    match File::open(self.sums_path(id)) {
                        Ok(f) => f.sync_data()?,
                        Err(e) => not_found_is_ok(e)?,
                    }
                }
            }
        }
        Ok(())
    }

    /// The data extents (position, length) of file `id`'s chunk file here (holes left out):
    /// what a rejoining server copies.
    pub fn extents(&self, id: u64) -> FsResult<Vec<(u64, u64)>> {
        let f = match File::open(self.file_path(id)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(Errno::from_io(&e)),
        };
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let size = f.metadata()?.len() as i64;
        let mut out = vec![];
        let mut pos = 0i64;
        while pos < size {
            // SAFETY: lseek on our open file.
            let data = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
            if data < 0 {
                break; // ENXIO: no data after pos
            }
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
            let end = if hole < 0 { size } else { hole.min(size) };
            if end > data {
                out.push((data as u64, (end - data) as u64));
            }
            pos = end.max(data + 1);
        }
        Ok(out)
    }

    /// Reads file `id`'s chunk file at `pos` into `out` as it is (no checksum check: a
    /// rejoining server's copy, which checksums what it writes); returns the bytes read.
    pub fn read_raw(&self, id: u64, pos: u64, out: &mut [u8]) -> FsResult<usize> {
        let f = match File::open(self.file_path(id)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(Errno::from_io(&e)),
        };
        let mut done = 0;
        while done < out.len() {
            match f.read_at(&mut out[done..], pos + done as u64) {
                Ok(0) => break,
                Ok(k) => done += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Errno::from_io(&e)),
            }
        }
        Ok(done)
    }

    /// Writes copied bytes into file `id` here (a rejoining server's copy; nothing
    /// forwarded).
    pub fn write_copied(&self, id: u64, pos: u64, data: &[u8]) -> FsResult<()> {
        ChunkStore::write(self, id, pos, data)
    }

    /// The file in the chunk directory where the server publishes its cluster map's epoch
    /// for the clients that read chunk files themselves ([`EpochFile`]).
    pub fn open_epoch_file(&self) -> std::io::Result<EpochFile> {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(self.root.join(madfs_placement::EPOCH_FILE))?;
        Ok(EpochFile(f))
    }

    /// File ids with a chunk file or a record file here, with their bytes on disk (fsck).
    pub fn ids(&self) -> std::io::Result<Vec<(u64, u64)>> {
        use std::os::unix::fs::MetadataExt;
        let mut ids: std::collections::BTreeMap<u64, u64> = Default::default();
        for d in std::fs::read_dir(&self.root)? {
            let d = d?;
            if !d.file_type()?.is_dir() {
                continue;
            }
            for f in std::fs::read_dir(d.path())? {
                let f = f?;
                let name = f.file_name();
                let name = name.to_string_lossy();
                let hex = name.strip_suffix(".crc").unwrap_or(&name);
                let Ok(id) = u64::from_str_radix(hex, 16) else {
                    continue;
                };
                if hex.len() != 16 {
                    continue;
                }
                let bytes = match f.metadata() {
                    Ok(m) => m.blocks() * 512,
                    Err(_) => 0, // removed meanwhile
                };
                *ids.entry(id).or_default() += bytes;
            }
        }
        Ok(ids.into_iter().collect())
    }

    /// Installs the tap that sees every chunk change ([`Tap`]); once.
    pub fn set_tap(&self, tap: Arc<dyn Tap>) {
        let _ = self.tap.set(tap);
    }

    /// Tells the tap, if one is installed and wants it, of change `op` just made.
    fn tapped(&self, op: ReplOp, bulk: &[u8]) -> FsResult<()> {
        match self.tap.get() {
            Some(t) if t.active() => t.chunk(op, bulk),
            _ => Ok(()),
        }
    }

    /// Checks every block of file `id`'s chunk file against its checksum (fsck): the
    /// damaged blocks as (byte position, what). Nothing without checksums.
    pub fn check(&self, id: u64) -> FsResult<Vec<(u64, &'static str)>> {
        if !self.checksums {
            return Ok(vec![]);
        }
        let sums = match File::open(self.sums_path(id)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // a chunk file without records: every non-zero block is unrecorded; make
                // the check read an empty record file
                tempfile_empty()?
            }
            Err(e) => return Err(Errno::from_io(&e)),
        };
        let data = match File::open(self.file_path(id)) {
            Ok(f) => Some(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Errno::from_io(&e)),
        };
        Ok(sums::check(data.as_ref(), &sums, &self.locks, id)?
            .into_iter()
            .map(|(b, w)| (b * madfs_checksum::BLOCK, w))
            .collect())
    }

    /// Removes the chunk file and record file of `id` (fsck repair of an orphan); returns
    /// the bytes they held.
    pub fn remove(&self, id: u64) -> FsResult<u64> {
        use std::os::unix::fs::MetadataExt;
        let mut bytes = 0;
        for p in [self.file_path(id), self.sums_path(id)] {
            if let Ok(m) = std::fs::metadata(&p) {
                bytes += m.blocks() * 512;
            }
        }
        self.truncate_here(id, 0)?;
        self.tapped(ReplOp::Remove { id }, &[])?;
        // a record file alone (its chunk file lost) goes too
        std::fs::remove_file(self.sums_path(id)).or_else(not_found_is_ok)?;
        Ok(bytes)
    }

    /// With checksums, for a file without a chunk file: EIO if a block of `[pos, pos + len)`
    /// was written (the chunk file was lost).
    fn check_lost(&self, id: u64, pos: u64, len: u64) -> FsResult<()> {
        if !self.checksums || len == 0 {
            return Ok(());
        }
        match File::open(self.sums_path(id)) {
            Ok(s) => sums::check_lost(Some(&s), id, pos, len),
            Err(e) => not_found_is_ok(e),
        }
    }

    fn dirty_files(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Dirty>>> {
        self.dirty.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a write of file `id` (after it reached the file): the next sync must cover it.
    fn mark_dirty(&self, id: u64) {
        let mut d = self.dirty_files();
        d.entry(id).or_default().writes.fetch_add(1, SeqCst);
    }
    /// Truncates file `id` to `size` here (no copy: [`ChunkStore::truncate`] makes those).
    fn truncate_here(&self, id: u64, size: u64) -> FsResult<()> {
        let path = self.file_path(id);
        if size == 0 {
            // nothing kept: the file goes (a mapped reply keeps reading the unlinked pages),
            // then its record file (only if there was a chunk file: most files have none on
            // most servers; a record file left by a lost chunk file is an orphan for fsck)
            let removed = match std::fs::remove_file(&path) {
                Ok(()) if self.checksums => {
                    std::fs::remove_file(self.sums_path(id)).or_else(not_found_is_ok)
                }
                Ok(()) => Ok(()),
                Err(e) => not_found_is_ok(e),
            };
            {
                // after the removal: a descriptor opened before it was opened before this
                let mut c = self.open_cache();
                c.gen += 1;
                c.files.remove(&id);
            }
            removed?;
            self.dirty_files().remove(&id);
            return Ok(());
        }
        let Some(o) = self.open_file(id, false)? else {
            return Ok(());
        };
        let f = &o.data;
        let shrink = || -> FsResult<()> {
            if f.metadata()?.len() > size {
                let _no_mapped_replies = self.pins.shrink(id);
                f.set_len(size)?;
                self.mark_dirty(id);
            }
            Ok(())
        };
        match &o.sums {
            Some(s) => sums::cut(f, s, &self.locks, id, size, shrink),
            None => shrink(),
        }
    }

    /// Punches a hole in file `id` here (no copy).
    fn punch_here(&self, id: u64, pos: u64, len: u64) -> FsResult<()> {
        let Some(o) = self.open_file(id, false)? else {
            return Ok(());
        };
        let f = &o.data;
        let size = f.metadata()?.len();
        if pos >= size || len == 0 {
            return Ok(());
        }
        if pos + len >= size {
            // the end of the file: cut it
            return self.truncate_here(id, pos);
        }
        let hole = || -> FsResult<()> {
            // SAFETY: fallocate on our open file; the range reads as zeros afterwards.
            let r = unsafe {
                libc::fallocate(
                    std::os::fd::AsRawFd::as_raw_fd(f),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    pos as libc::off_t,
                    len as libc::off_t,
                )
            };
            if r != 0 {
                return Err(Errno::from_io(&std::io::Error::last_os_error()));
            }
            self.mark_dirty(id);
            Ok(())
        };
        match &o.sums {
            Some(s) => sums::punch(f, s, &self.locks, id, pos, len, hole),
            None => hole(),
        }
    }
}

/// Writes a fresh random token into `root/token` (by rename: a reader sees the old or the new
/// one whole) and returns the store's [`Location`].
fn publish_location(root: &Path) -> std::io::Result<Location> {
    let mut raw = [0u8; 8];
    // SAFETY: getrandom fills the 8 bytes of `raw`, which it may write.
    let n = unsafe { libc::getrandom(raw.as_mut_ptr().cast(), raw.len(), 0) };
    if n != raw.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    let token = u64::from_le_bytes(raw);
    crate::files::replace(
        &root.join(TOKEN_FILE),
        format!("{token}\n").as_bytes(),
        0o644,
        false,
    )?;
    // (the map's epoch, for clients reading chunk files here: 0 until a map says more)
    let epoch = root.join(madfs_placement::EPOCH_FILE);
    if !epoch.exists() {
        crate::files::replace(&epoch, &0u64.to_le_bytes(), 0o644, false)?;
    }
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    Ok(Location {
        boot,
        dir: std::fs::canonicalize(root)?.display().to_string(),
        token,
    })
}

/// An empty anonymous file (a missing record file, read as all holes).
fn tempfile_empty() -> FsResult<File> {
    let name = c"madfs-empty";
    // SAFETY: a valid C string; memfd_create makes a new anonymous file we own.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(Errno::from_io(&std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

fn not_found_is_ok(e: std::io::Error) -> FsResult<()> {
    if e.kind() == std::io::ErrorKind::NotFound {
        Ok(())
    } else {
        Err(Errno::from_io(&e))
    }
}

impl ChunkStore for FsChunks {
    fn read(&self, id: u64, pos: u64, out: &mut [u8]) -> FsResult<usize> {
        let Some(o) = self.open_file(id, false)? else {
            self.check_lost(id, pos, out.len() as u64)?;
            return Ok(0);
        };
        if let Some(s) = &o.sums {
            return Ok(sums::read(&o.data, s, &self.locks, id, pos, out, false)?.unwrap_or(0));
        }
        let f = &o.data;
        let mut done = 0;
        while done < out.len() {
            match f.read_at(&mut out[done..], pos + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Errno::from_io(&e)),
            }
        }
        Ok(done)
    }

    fn write(&self, id: u64, pos: u64, data: &[u8]) -> FsResult<()> {
        let Some(o) = self.open_file(id, true)? else {
            return Err(Errno::EIO);
        };
        let f = &o.data;
        match &o.sums {
            Some(s) => sums::write(f, s, &self.locks, id, pos, data)?,
            None => f.write_all_at(data, pos)?,
        }
        if data.len() >= EARLY_WRITEBACK_MIN {
            // SAFETY: sync_file_range on our open file; it only starts write-out.
            unsafe {
                libc::sync_file_range(
                    std::os::fd::AsRawFd::as_raw_fd(f),
                    pos as libc::off64_t,
                    data.len() as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                )
            };
        }
        self.mark_dirty(id);
        self.tapped(ReplOp::Write { id, pos }, data)
    }

    fn truncate(&self, id: u64, size: u64) -> FsResult<()> {
        self.truncate_here(id, size)?;
        self.tapped(ReplOp::Truncate { id, size }, &[])
    }

    fn punch(&self, id: u64, pos: u64, len: u64) -> FsResult<()> {
        self.punch_here(id, pos, len)?;
        self.tapped(ReplOp::Punch { id, pos, len }, &[])
    }

    fn sync(&self, id: u64) -> FsResult<()> {
        let Some(d) = self.dirty_files().get(&id).cloned() else {
            return Ok(()); // every write of the file was covered by a finished flush
        };
        // One flush at a time per file, shared by the callers it covers: clearing a dirty
        // flag before the flush let a second caller answer while the first's `fdatasync`
        // was still running (ior-hard: many ranks fsync one shared file).
        let need = d.writes.load(SeqCst);
        d.flush
            .cover(need, || d.writes.load(SeqCst), || self.flush_file(id))?;
        // forget a file with nothing left to flush that nobody else is syncing (a write
        // counts under the same lock, so none can slip in between)
        let mut all = self.dirty_files();
        if Arc::strong_count(&d) == 2 && d.flush.flushed() >= d.writes.load(SeqCst) {
            all.remove(&id);
        }
        Ok(())
    }

    fn sync_unshared(&self, id: u64) -> FsResult<()> {
        if self.dirty_files().contains_key(&id) {
            self.flush_file(id)?;
        }
        Ok(())
    }

    fn sync_all(&self) -> FsResult<()> {
        let dir = std::fs::File::open(&self.root).map_err(|e| Errno::from_io(&e))?;
        // SAFETY: an open descriptor of the chunk directory.
        if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&dir)) } != 0 {
            let e = std::io::Error::last_os_error();
            tracing::error!("syncfs of {}: {e}", self.root.display());
            return Err(Errno::from_io(&e));
        }
        Ok(())
    }

    fn statfs(&self) -> FsResult<StatFs> {
        let c = std::ffi::CString::new(self.root.as_os_str().as_encoded_bytes())
            .map_err(|_| Errno::EINVAL)?;
        // SAFETY: valid C string and a zeroed out-parameter.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
            return Err(Errno::from_io(&std::io::Error::last_os_error()));
        }
        Ok(StatFs {
            bsize: s.f_frsize,
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            namelen: madfs_placement::NAME_MAX as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_truncate_punch() {
        write_read_truncate_punch_with(false);
        write_read_truncate_punch_with(true);
    }

    fn write_read_truncate_punch_with(checksums: bool) {
        let dir = tempfile::tempdir().unwrap();
        let c = FsChunks::open(dir.path(), checksums).unwrap();
        let mut out = [0u8; 8];
        assert_eq!(c.read(1, 10, &mut out).unwrap(), 0);
        // "chunk 1" at 10.. and "chunk 3" at 30.. (chunk size 10): one sparse file
        c.write(1, 12, b"hello").unwrap();
        c.write(1, 30, b"x").unwrap();
        assert_eq!(c.read(1, 10, &mut out).unwrap(), 8);
        assert_eq!(&out, b"\0\0hello\0");
        c.sync(1).unwrap();
        c.truncate(1, 14).unwrap(); // keeps 4 bytes of chunk 1, drops chunk 3
        assert_eq!(c.read(1, 10, &mut out).unwrap(), 4);
        assert_eq!(c.read(1, 30, &mut out).unwrap(), 0);
        // a mapped read sees the same bytes (with checksums, one reaching past the end of
        // the local file takes the copying path); past the end, nothing
        match c.map_read(1, 10, 8).unwrap() {
            Some(m) => assert_eq!(m.bytes(), b"\0\0he"),
            None => assert!(checksums),
        }
        assert_eq!(c.map_read(1, 10, 4).unwrap().unwrap().bytes(), b"\0\0he");
        if let Some(m) = c.map_read(1, 30, 8).unwrap() {
            assert!(m.bytes().is_empty());
        }
        // punching a hole in the middle keeps the size, at the end it cuts
        c.write(1, 100, &[7u8; 8192]).unwrap();
        c.punch(1, 0, 20).unwrap();
        assert_eq!(c.read(1, 10, &mut out).unwrap(), 8);
        assert_eq!(out, [0u8; 8]);
        c.punch(1, 100, 1 << 20).unwrap();
        assert_eq!(c.read(1, 99, &mut out).unwrap(), 1);
        c.truncate(1, 0).unwrap();
        assert!(!c.file_path(1).exists());
        assert!(c.statfs().unwrap().blocks > 0);
    }

    #[test]
    fn mapped_reads_never_see_a_removed_file() {
        let dir = tempfile::tempdir().unwrap();
        let c = FsChunks::open(dir.path(), false).unwrap();
        assert!(c.map_cached(2, 0, 4).is_none()); // not open: the IO-thread path
        assert!(c.map_read(2, 0, 4).unwrap().unwrap().bytes().is_empty()); // no file yet
        c.write(2, 0, b"old!").unwrap();
        assert_eq!(c.map_read(2, 0, 4).unwrap().unwrap().bytes(), b"old!");
        // now open: the net thread maps it, and sees later writes and growth
        c.write(2, 4, b"more").unwrap();
        let m = c.map_cached(2, 0, 8).unwrap().unwrap().unwrap();
        assert_eq!(m.bytes(), b"old!more");
        drop(m);
        // small reads from the page cache, without blocking: only whole and only when open
        // (qemu-user refuses RWF_NOWAIT: there every such read takes the IO-thread path)
        let mut out = [0u8; 8];
        let nowait = c.read_nowait(2, 0, &mut out);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(nowait, Some(8));
        if nowait.is_some() {
            assert_eq!(&out, b"old!more");
        }
        assert_eq!(
            c.read_nowait(2, 4, &mut out),
            None,
            "short: the IO thread's job"
        );
        assert_eq!(c.read_nowait(3, 0, &mut out), None, "not open");
        // truncated to nothing (the file goes) and written again: only the new bytes
        c.truncate(2, 0).unwrap();
        assert_eq!(c.read_nowait(2, 0, &mut out[..3]), None);
        assert!(c.map_cached(2, 0, 4).is_none());
        c.write(2, 0, b"new").unwrap();
        assert_eq!(c.map_read(2, 0, 8).unwrap().unwrap().bytes(), b"new");
        assert_eq!(
            c.map_cached(2, 0, 8).unwrap().unwrap().unwrap().bytes(),
            b"new"
        );
        if nowait.is_some() {
            assert_eq!(c.read_nowait(2, 0, &mut out[..3]), Some(3));
            assert_eq!(&out[..3], b"new");
        }
    }

    /// A checksummed store and a pattern: `len` bytes at `pos`.
    fn pattern(pos: u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| ((pos as usize + i) * 31 % 251) as u8 + 1)
            .collect()
    }

    fn read_all(c: &FsChunks, id: u64, pos: u64, len: usize) -> FsResult<Vec<u8>> {
        let mut out = vec![0u8; len];
        let n = c.read(id, pos, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    #[test]
    fn checksums_catch_flipped_lost_and_cut_data_but_not_holes() {
        let dir = tempfile::tempdir().unwrap();
        let c = FsChunks::open(dir.path(), true).unwrap();
        // unaligned records (ior-hard's 47,008 bytes), a gap, an overwrite across blocks
        for k in [0u64, 1, 2, 5] {
            c.write(1, k * 47008, &pattern(k * 47008, 47008)).unwrap();
        }
        c.write(1, 50_000, &pattern(7, 9000)).unwrap();
        let mut image = vec![0u8; 6 * 47008];
        for k in [0u64, 1, 2, 5] {
            let p = (k * 47008) as usize;
            image[p..p + 47008].copy_from_slice(&pattern(k * 47008, 47008));
        }
        image[50_000..59_000].copy_from_slice(&pattern(7, 9000));
        assert_eq!(read_all(&c, 1, 0, image.len()).unwrap(), image);
        for (p, l) in [
            (3u64, 10usize),
            (4095, 2),
            (141_024, 47008),
            (150_000, 5000),
        ] {
            assert_eq!(
                read_all(&c, 1, p, l).unwrap(),
                &image[p as usize..p as usize + l],
                "{p}+{l}"
            );
        }
        // a hole (never written) reads as zeros
        assert_eq!(read_all(&c, 1, 150_000, 4096).unwrap(), vec![0u8; 4096]);
        // the mapped path agrees
        let m = c.map_read(1, 4000, 100_000).unwrap().unwrap();
        assert_eq!(m.bytes(), &image[4000..104_000]);
        drop(m);
        // a byte flipped on disk: EIO for reads of its block, on every path
        let path = c.file_path(1);
        let mut disk = std::fs::read(&path).unwrap();
        disk[60_001] ^= 0x40;
        std::fs::write(&path, &disk).unwrap();
        assert_eq!(read_all(&c, 1, 60_001, 1), Err(Errno::EIO));
        assert_eq!(read_all(&c, 1, 57_344, 8192), Err(Errno::EIO));
        assert!(c.map_read(1, 57_344, 8192).unwrap().is_none(), "not mapped");
        assert_eq!(c.read_nowait(1, 60_000, &mut [0u8; 8]), None);
        // the blocks beside it still read
        assert_eq!(read_all(&c, 1, 0, 57_344).unwrap(), &image[..57_344]);
        // data cut short: the written blocks past the cut are EIO, not zeros
        std::fs::write(&path, &image[..98_304]).unwrap();
        assert_eq!(read_all(&c, 1, 0, 98_304).unwrap(), &image[..98_304]);
        assert_eq!(read_all(&c, 1, 98_000, 400), Err(Errno::EIO));
        assert_eq!(read_all(&c, 1, 240_000, 100), Err(Errno::EIO));
        // the chunk file lost: EIO (the open descriptor is dropped by a truncate of another
        // file id? no: by clearing the cache like a restart would)
        std::fs::remove_file(&path).unwrap();
        c.open_cache().files.clear();
        assert_eq!(read_all(&c, 1, 0, 10), Err(Errno::EIO));
        assert!(c.map_read(1, 0, 100).is_err());
        assert_eq!(
            read_all(&c, 1, 1 << 30, 10).unwrap(),
            Vec::<u8>::new(),
            "a hole"
        );
    }

    #[test]
    fn checksums_follow_truncate_punch_and_rewrites() {
        let dir = tempfile::tempdir().unwrap();
        let c = FsChunks::open(dir.path(), true).unwrap();
        c.write(2, 0, &pattern(0, 20_000)).unwrap();
        c.truncate(2, 10_001).unwrap();
        assert_eq!(
            read_all(&c, 2, 0, 20_000).unwrap(),
            &pattern(0, 20_000)[..10_001]
        );
        // growing again: the cut block's tail reads as zeros and verifies
        c.write(2, 12_000, b"xyz").unwrap();
        let got = read_all(&c, 2, 0, 12_003).unwrap();
        assert_eq!(&got[..10_001], &pattern(0, 20_000)[..10_001]);
        assert!(got[10_001..12_000].iter().all(|b| *b == 0));
        assert_eq!(&got[12_000..], b"xyz");
        // a punched range in the middle
        c.write(2, 0, &pattern(1, 40_000)).unwrap();
        c.punch(2, 5000, 20_000).unwrap();
        let got = read_all(&c, 2, 0, 40_000).unwrap();
        assert_eq!(&got[..5000], &pattern(1, 5000)[..]);
        assert!(got[5000..25_000].iter().all(|b| *b == 0));
        assert_eq!(&got[25_000..], &pattern(1, 40_000)[25_000..]);
        // truncated to nothing: both files go
        c.truncate(2, 0).unwrap();
        assert!(!c.file_path(2).exists() && !c.sums_path(2).exists());
        assert_eq!(read_all(&c, 2, 0, 10).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn a_write_killed_between_its_steps_reads_old_or_new_never_eio() {
        // the state a SIGKILL leaves after the first record update: records {new, old}, the
        // data old (not yet written) or new (written, the final update not made)
        let dir = tempfile::tempdir().unwrap();
        let c = FsChunks::open(dir.path(), true).unwrap();
        c.write(3, 0, &[1u8; 8192]).unwrap();
        let sums_before = std::fs::read(c.sums_path(3)).unwrap();
        c.write(3, 100, &[2u8; 5000]).unwrap();
        let mut mid = Vec::new();
        for i in 0..2 {
            let new = madfs_checksum::Record::at(&std::fs::read(c.sums_path(3)).unwrap(), i);
            let old = madfs_checksum::Record::at(&sums_before, i);
            madfs_checksum::Record {
                cur: new.cur,
                prev: old.cur,
            }
            .put(&mut mid);
        }
        std::fs::write(c.sums_path(3), &mid).unwrap();
        let new_data = read_all(&c, 3, 0, 8192).unwrap();
        assert_eq!(&new_data[100..5100], &[2u8; 5000][..]);
        std::fs::write(c.file_path(3), [1u8; 8192]).unwrap();
        assert_eq!(read_all(&c, 3, 0, 8192).unwrap(), vec![1u8; 8192]);
        // a first write killed before its data: the block still reads as the hole it was
        c.write(4, 4096, b"abc").unwrap();
        let rec = std::fs::read(c.sums_path(4)).unwrap();
        let new = madfs_checksum::Record::at(&rec, 1);
        let mut mid = vec![0u8; 8];
        madfs_checksum::Record {
            cur: new.cur,
            prev: madfs_checksum::zero_crc(),
        }
        .put(&mut mid);
        std::fs::write(c.sums_path(4), &mid).unwrap();
        std::fs::write(c.file_path(4), b"").unwrap();
        assert_eq!(read_all(&c, 4, 4096, 3).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn concurrent_unaligned_writers_keep_every_block_verifiable() {
        let dir = tempfile::tempdir().unwrap();
        let c = Arc::new(FsChunks::open(dir.path(), true).unwrap());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for k in 0..64u64 {
                        let pos = (k * 4 + t) * 3001;
                        c.write(5, pos, &pattern(pos, 3001)).unwrap();
                    }
                })
            })
            .collect();
        let reader = {
            let c = c.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    read_all(&c, 5, 0, 256 * 3001).unwrap();
                }
            })
        };
        for t in threads {
            t.join().unwrap();
        }
        reader.join().unwrap();
        assert_eq!(
            read_all(&c, 5, 0, 256 * 3001).unwrap(),
            pattern(0, 256 * 3001)
        );
    }
}
