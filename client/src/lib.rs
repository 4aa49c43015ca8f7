//! madfs client library.
//!
//! * [`FileSystem`] — the one FS trait (methods default to `ENOSYS`), used by the preload
//!   library, `madfs-find` and the bench;
//! * [`Client`] — its implementation over UCX: each path goes to its metadata server
//!   ([`madfs_placement::meta_server`]), each data chunk to its data server
//!   ([`madfs_placement::chunk_server`]); multi-chunk reads and writes are issued concurrently
//!   in a bounded window.
//!
//! A `Client` belongs to one thread (UCX workers are `!Send`); every call has a deadline, so a
//! dead server gives `EIO`, never a hang.

mod client;
mod config;
mod fs;
mod local;

pub use client::{dir_pos, mutations, Client, DirCursor, OpenFile, DIR_POS_END};
pub use config::ClientConfig;
pub use fs::{DirEntry, FileSystem, OpenFlags};
pub use madfs_proto::{Attr, Errno, FindFilter, FsResult, StatFs, TimeSpec};
