//! The storage of a madfs server: metadata (RocksDB) and chunk data (local files).
//!
//! The [`MetadataStore`] and [`ChunkStore`] traits are what the server's handlers see;
//! [`rocks::RocksMeta`] and [`chunks::FsChunks`] implement them. The store knows nothing of
//! what is above it: no request, permission, replica set or map. What a replicated server
//! needs to see of its writes it sees through a [`Tap`] it installs.

pub mod chunks;
pub mod files;
pub mod flush;
pub mod rocks;
mod sums;

use madfs_proto::{Attr, FsResult, ReplOp, StatFs};

/// What the layer above the store sees of its writes (a replicated server's copies to its
/// secondaries). The store calls it on the thread that makes the write, inside the store's
/// own locks, so two writes of one key reach it in the order they were made; an error fails
/// the write's caller (the write itself is made).
pub trait Tap: Send + Sync {
    /// Is a write made now on this thread wanted ([`Tap::batch`], [`Tap::chunk`])? A batch's
    /// encoding is copied only then.
    fn active(&self) -> bool;
    /// A record to write in the batch being committed now on this thread, if any (the replay
    /// record of the request being served).
    fn extra(&self) -> Option<(Vec<u8>, Vec<u8>)>;
    /// A metadata write batch (RocksDB's encoding) was committed, durably when `synced`.
    fn batch(&self, data: &[u8], synced: bool) -> FsResult<()>;
    /// A chunk change was made (`bulk`: a write's bytes).
    fn chunk(&self, op: ReplOp, bulk: &[u8]) -> FsResult<()>;
    /// The id space of the file ids made now on this thread: (replica set, map epoch) of a
    /// replicated cluster's request (ids are made per set, from a counter in the set's own
    /// records), or `None` for the server's own counter.
    fn id_scope(&self) -> Option<(u32, u64)>;
}

/// Is `a` (an entry as stored) a name of a file with several names, whose attributes live
/// by id on its home server (docs/consistency.md, "Hard links")? Such an entry keeps the
/// file's id and type and nlink 0; a directory never is one.
pub fn is_stub(a: &Attr) -> bool {
    a.nlink == 0 && !a.is_dir()
}

/// One entry of a directory slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Name hash (directory position).
    pub hash: u64,
    /// Entry name.
    pub name: String,
    /// Its attributes.
    pub attr: Attr,
}

/// What [`MetadataStore::get_or_insert`] found or made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// The entry was there already (its attributes).
    Existed(Attr),
    /// A new entry (its attributes).
    New(Attr),
}

/// A rename in flight from this server to another (docs/consistency.md, "rename"): recorded
/// durably before the entry is sent to `to`'s server, removed with the source entry once that
/// server has it, or alone if it refused; a restarted server finishes what it finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    /// The source path (this server's).
    pub from: String,
    /// The target path (another server's).
    pub to: String,
    /// The entry being moved.
    pub attr: Attr,
    /// `RENAME_NOREPLACE`.
    pub noreplace: bool,
}

/// A file that arrived by a rename from another server and is pending there: its name here
/// is not removed or replaced until the source's server says the move is over
/// (docs/consistency.md, "rename").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// The path here.
    pub path: String,
    /// The source's server.
    pub src: u32,
    /// The source path there.
    pub from: String,
    /// The file.
    pub id: u64,
}

/// Metadata of the entries this server owns, keyed by full path (one lookup per operation).
pub trait MetadataStore: Send + Sync {
    /// Attributes of `path` (None if absent).
    fn get(&self, path: &str) -> FsResult<Option<Attr>>;
    /// The root directory's attributes, once a change of them was stored here (its server:
    /// the metadata server of `/`); until then they are the cluster's default
    /// (`Ops::root_attr`).
    fn root(&self) -> FsResult<Option<Attr>>;
    /// Stores the root directory's attributes (a chmod, chown or utimens of `/`).
    fn put_root(&self, attr: &Attr) -> FsResult<()>;
    /// Replaces the entry of an existing `path` (attribute updates).
    fn put(&self, path: &str, attr: &Attr) -> FsResult<()>;
    /// Creates the entry of `path` (EEXIST if present) with inline chunk 0 `data` (unless
    /// empty), counting it in its parent, atomically.
    fn insert(&self, path: &str, attr: &Attr, data: &[u8]) -> FsResult<()>;
    /// The entry of `path` if there is one; else creates it (as [`MetadataStore::insert`],
    /// no inline data) with the attributes `make` returns. One lookup, atomic against other
    /// creates of `path` (an `open(O_CREAT)` racing another never fails with EEXIST).
    fn get_or_insert(
        &self,
        path: &str,
        make: &mut dyn FnMut() -> FsResult<Attr>,
    ) -> FsResult<Created>;
    /// Removes the entry of `path` and the inline chunk 0 of file `id`, atomically; or, with
    /// `orphan`, keeps chunk 0 and records file `id` as an orphan with those attributes.
    fn remove(&self, path: &str, id: u64, orphan: Option<&Attr>) -> FsResult<()>;
    /// Records file `id` as an orphan (open, no name left) with attributes `orphan`; `None`:
    /// forgets the orphan record and the file's inline chunk 0.
    fn put_orphan(&self, id: u64, orphan: Option<&Attr>) -> FsResult<()>;
    /// The orphan record of file `id`.
    fn orphan(&self, id: u64) -> FsResult<Option<Attr>>;
    /// Every orphan record.
    fn orphans(&self) -> FsResult<Vec<(u64, Attr)>>;
    /// [`MetadataStore::merge_size`] if `path` still names file `id` (ESTALE otherwise).
    fn publish_size(&self, path: &str, id: u64, size: u64, mtime: i64) -> FsResult<()>;
    /// Removes only the entry of `path` (its inline chunk 0 stays).
    fn remove_entry(&self, path: &str) -> FsResult<()>;
    /// Puts the entry of `path` and replaces the inline chunk 0 of `attr.id` with `data`
    /// (unless empty), and records `arrival` (a pending move-in), atomically. (A replaced
    /// file's bytes are its home server's to drop: `Ops::forget`.)
    fn attach(
        &self,
        path: &str,
        attr: &Attr,
        data: &[u8],
        arrival: Option<&Arrival>,
    ) -> FsResult<()>;
    /// Forgets the pending move-in of file `id` at `path` (if that is what is recorded).
    fn settle(&self, path: &str, id: u64) -> FsResult<()>;
    /// Every pending move-in (at start, and for the mover to ask about), of every replica set
    /// this server holds.
    fn arrivals(&self) -> FsResult<Vec<Arrival>>;
    /// Renames `from` to `to`, both this server's, in one write: the target (if any, and if
    /// not `noreplace`) is replaced and its inline chunk 0 dropped. ENOENT without a source,
    /// ENOTSUP for a directory source (the client moves directories), EEXIST / EISDIR for a
    /// target that may not be replaced. Returns the replaced entry (its bytes are its home
    /// server's to drop: `Ops::forget`).
    fn rename_local(
        &self,
        from: &str,
        to: &str,
        noreplace: bool,
        now: i64,
    ) -> FsResult<Option<Attr>>;
    /// Records, durably, that `from` is being moved to `to` on another server; returns the
    /// entry. ENOENT without a source, ENOTSUP for a directory, EAGAIN while an intent for
    /// `from` exists.
    fn begin_move(&self, from: &str, to: &str, noreplace: bool) -> FsResult<Attr>;
    /// Ends the move of `intent`, durably: with `moved`, the source entry (if it still names
    /// the moved file) goes with the intent record; else only the record. (Chunk 0 never
    /// moves: it stays on the file's home server.)
    fn end_move(&self, intent: &Intent, moved: bool) -> FsResult<()>;
    /// Every intent record (moves to finish), of every replica set this server holds.
    fn intents(&self) -> FsResult<Vec<Intent>>;
    /// Records durably that directory `it.from` (this server's) is being renamed to `it.to`
    /// (`noreplace`: no directory was there to replace).
    fn begin_dir_move(&self, it: &Intent) -> FsResult<()>;
    /// The rename of directory `from` is over (durably).
    fn end_dir_move(&self, from: &str) -> FsResult<()>;
    /// Every directory rename in flight or left by a crash, of every replica set this server
    /// holds.
    fn dir_intents(&self) -> FsResult<Vec<Intent>>;
    /// Applies an attribute change to the entry of `path` as a merge (no read-modify-write:
    /// concurrent changes and size publications never undo each other; a change that comes
    /// after the entry's removal leaves it absent). ESTALE if the entry is a name of a file
    /// with several names ([`is_stub`]): its attributes are changed at its home server.
    fn change(&self, path: &str, c: rocks::Change) -> FsResult<()>;
    /// Makes the entry of `path` (file `id`, one name) a name of a file with several names:
    /// under the path's lock (no size publication or change in between), `adopt` gets the
    /// file's attributes (and keeps them by id at its home), then the entry becomes a stub.
    fn to_stub(
        &self,
        path: &str,
        id: u64,
        adopt: &mut dyn FnMut(&Attr) -> FsResult<()>,
    ) -> FsResult<Attr>;
    /// `size = max(size, new)`, `mtime = max(mtime, new)`; no read-modify-write.
    fn merge_size(&self, path: &str, size: u64, mtime: i64) -> FsResult<()>;
    /// Atomically (among appenders) takes the current end of file `path` (which must name
    /// file `id`, unless 0: ESTALE) as the offset of a `len`-byte append and grows the size
    /// past it; `reserved` hears the offset before the growth is written (it may want it
    /// written along: [`Tap::extra`]). Returns the offset.
    fn reserve_append(
        &self,
        path: &str,
        id: u64,
        len: u64,
        mtime: i64,
        reserved: &mut dyn FnMut(u64),
    ) -> FsResult<u64>;
    /// Entries of `dir` with hash ≥ `start`, in hash order, until about `max_bytes` of names;
    /// entries sharing a position (hash >> 1) are never split. Returns the entries and the hash to go on from.
    fn list(&self, dir: &str, start: u64, max_bytes: usize) -> FsResult<(Vec<Entry>, Option<u64>)>;
    /// Every entry under `dir` at any depth, in key order after `after` (exclusive), while
    /// `visit(parent, name, attr)` returns true. Returns the last key visited when stopped
    /// early.
    fn scan_subtree(
        &self,
        dir: &str,
        after: &[u8],
        visit: &mut dyn FnMut(&str, &str, &Attr) -> bool,
    ) -> FsResult<Option<Vec<u8>>>;
    /// Does this server hold any entry directly inside `dir`? (A per-directory count kept
    /// with every insert and removal: one lookup.)
    fn has_children(&self, dir: &str) -> FsResult<bool>;
    /// Reads inline chunk 0 of file `id` at `offset` into `out`; returns bytes present.
    fn read_inline(&self, id: u64, offset: u64, out: &mut [u8]) -> FsResult<usize>;
    /// Writes `data` into inline chunk 0 of file `id` at `offset` (zero-filling a gap) and,
    /// with `size_of = Some((path, size, mtime))`, merges that size into the entry of `path`
    /// in the same atomic write (one WAL record for a small file's write); ESTALE, writing
    /// nothing, if `path` does not name file `id`.
    fn write_inline(
        &self,
        id: u64,
        offset: u64,
        data: &[u8],
        size_of: Option<(&str, u64, i64)>,
    ) -> FsResult<()>;
    /// Cuts inline chunk 0 of file `id` to `size` bytes.
    fn truncate_inline(&self, id: u64, size: u64) -> FsResult<()>;
    /// A new file id of home slot `slot` (the slot of the path it is made for, in the top 16
    /// bits), unique in the cluster.
    fn next_id(&self, slot: u32) -> FsResult<u64>;
    /// A mark of the writes so far (monotonic; 0 before the first): what [`Self::sync`]
    /// must cover.
    fn mark(&self) -> u64;
    /// Makes every write up to `mark` durable (WAL sync), sharing a sync with concurrent
    /// callers where one covers both (group commit, [`flush::SharedFlush`]).
    fn sync(&self, mark: u64) -> FsResult<()>;
    /// One WAL sync of this caller's own, shared with nobody: the benchmark's baseline
    /// (`--no-group-commit`).
    fn sync_unshared(&self) -> FsResult<()> {
        self.sync(self.mark())
    }
}

/// File data held by this server: the chunks of a file that placement puts here (and the
/// part of chunk 0 beyond the inline bytes), addressed by their byte position in the file.
pub trait ChunkStore: Send + Sync {
    /// Reads file `id` at byte `pos`; returns the bytes present (0 for a hole at the end).
    fn read(&self, id: u64, pos: u64, out: &mut [u8]) -> FsResult<usize>;
    /// Writes `data` into file `id` at byte `pos`.
    fn write(&self, id: u64, pos: u64, data: &[u8]) -> FsResult<()>;
    /// Drops every byte of file `id` at or beyond `size`.
    fn truncate(&self, id: u64, size: u64) -> FsResult<()>;
    /// Drops bytes `[pos, pos + len)` of file `id` (they read as zeros).
    fn punch(&self, id: u64, pos: u64, len: u64) -> FsResult<()>;
    /// Makes the data of file `id` written so far durable (fdatasync; concurrent callers
    /// for one file share a flush that covers them).
    fn sync(&self, id: u64) -> FsResult<()>;
    /// One flush of file `id` of this caller's own, shared with nobody: the benchmark's
    /// baseline (`--no-group-commit`).
    fn sync_unshared(&self, id: u64) -> FsResult<()> {
        self.sync(id)
    }
    /// Makes every chunk file (data, checksums, the files' names) durable: `sync(2)`.
    fn sync_all(&self) -> FsResult<()>;
    /// Totals of the local file system holding the chunks.
    fn statfs(&self) -> FsResult<StatFs>;
}
