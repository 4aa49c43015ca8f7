//! Directories an rmdir is removing (docs/consistency.md, "rmdir"): creates in them wait.

use std::collections::HashSet;
use std::sync::RwLock;

/// Directories being removed on some server, sealed here.
#[derive(Default)]
pub struct Sealed {
    pub(crate) set: RwLock<HashSet<String>>,
}
