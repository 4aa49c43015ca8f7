//! What a request touches: the entries whose state it reads or changes, which decides what
//! it must wait for while a rename moves them (`state::moving`), and which cached state it
//! makes stale (the hook client caches' callbacks will need: `crate::pipeline`). A column of
//! the table of requests (`crate::table`).

/// The entries a request reads or changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touches<'r> {
    /// No entry (data by id, listings, server business).
    Nothing,
    /// Looks the entry up (hidden while it is moved away: ENOENT).
    Looks(&'r str),
    /// Makes or changes the entry (waits while it is moved: EAGAIN).
    Changes(&'r str),
    /// Removes the entry's name (waits while it is moved, or while a file moved in there is
    /// pending).
    Removes(&'r str),
    /// Gives file `from` the name `to` (waits while a file moved in at either is pending).
    Moves { from: &'r str, to: &'r str },
    /// Puts file `id` at `path`, moved in from another server (waits while something else is
    /// pending there, or the path is moved away).
    Arrives { path: &'r str, id: u64 },
    /// A new name `to` of the file at `from`.
    Links { from: &'r str, to: &'r str },
}
