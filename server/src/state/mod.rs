//! What a server keeps in memory besides its stores, each apart from the code that uses it:
//! the directory table, moves in flight, open references, sealed directories, directory
//! times waiting to be sent, the leases of client caches.

pub mod dir_times;
pub mod dirs;
pub mod leases;
pub mod moving;
pub mod opens;
pub mod sealed;
