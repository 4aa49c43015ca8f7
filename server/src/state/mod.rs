//! What a server keeps in memory besides its stores, each apart from the code that uses it:
//! the directory table, moves in flight, open references, sealed directories, directory
//! times waiting to be sent.

pub mod dir_times;
pub mod dirs;
pub mod moving;
pub mod opens;
pub mod sealed;
