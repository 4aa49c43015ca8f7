//! What a server keeps in memory besides its stores, each apart from the code that uses it:
//! the directory table, moves in flight, slots frozen for their move, open references, sealed directories, directory
//! times waiting to be sent, the leases of client caches.

pub mod dir_times;
pub mod dirs;
pub mod frozen;
pub mod leases;
pub mod moving;
pub mod opens;
pub mod sealed;
pub mod strays;
