//! madfs wire protocol.
//!
//! * [`Request`] — one enum for every operation, borrowed fields (`&str`, `&[u8]`) decoded
//!   zero-copy from a flexbuffers header;
//! * [`Reply`] — the answer body; errors travel as a [`Errno`] in the frame prefix;
//! * [`tag`] — how 64-bit UCX tags are laid out;
//! * [`frame`] — request/reply frames: fixed prefix, header, bulk data, sent as one vectored
//!   message.

pub mod errno;
pub mod frame;
pub mod ioctl;
pub mod tag;
mod types;

pub use errno::{Errno, FsResult};
pub use types::*;
