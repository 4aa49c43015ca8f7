//! Placement: the one function client and server share to decide where things live.
//!
//! * [`normalize`] / [`check_normalized`]: one spelling per path (absolute, no `.`/`..`, no
//!   empty components, no trailing `/`, no NUL, bounded length). The server refuses anything
//!   [`check_normalized`] rejects.
//! * [`hash64`]: a stable 64-bit hash (xxh3 with fixed seeds — never `std::hash`, which may
//!   change between builds).
//! * [`Layout`] (`layout.rs`): every key hashes to one of [`SLOTS`] slots, and the layout
//!   names each slot's owner; a join, drain or removal is a new layout that moves only the
//!   slots it must.
//! * [`meta_server`]: the metadata server of a path, the owner of its slot ([`path_slot`]).
//! * [`data_server`]: the server of data chunk *i ≥ 1* of a file, placed by the file's immutable
//!   id, so chunks do not move when a file is renamed. Chunk 0 lives inline in RocksDB on the
//!   file's *home* server ([`home_server`]: the owner of the slot its id names, which is the
//!   slot of the name it was created under), so no chunk moves when a file is renamed, and
//!   an open descriptor's I/O never follows a name ([`chunk_server`] encodes both rules).
//! * [`name_hash`]: the directory position of an entry (readdir order and cookie).

pub mod keys;
mod layout;

pub use layout::{
    chunk_slot, home_slot, make_id, path_slot, slot_of_hash, Layout, ID_COUNTER_END, MAX_SERVERS,
    SLOTS, SLOT_BITS,
};
use madfs_proto::Errno;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Longest path accepted (bytes, without the terminating NUL), as Linux's `PATH_MAX - 1`.
pub const PATH_MAX: usize = 4095;
/// Longest madfs path (normal form) anywhere: one path *argument* is at most [`PATH_MAX`]
/// (the preload checks what a program passes), but a relative one below a deep working
/// directory resolves to more, which the kernel allows too.
pub const TREE_PATH_MAX: usize = 4 * (PATH_MAX + 1) - 1;
/// Longest component accepted.
pub const NAME_MAX: usize = 255;

const PATH_SEED: u64 = 0x6d61_6466_735f_7061; // "madfs_pa"
const NAME_SEED: u64 = 0x6d61_6466_735f_6e6d; // "madfs_nm"
const CHUNK_SEED: u64 = 0x6d61_6466_735f_6368; // "madfs_ch"

/// Stable 64-bit hash of bytes with a seed.
pub fn hash64(bytes: &[u8], seed: u64) -> u64 {
    xxh3_64_with_seed(bytes, seed)
}

/// Metadata server of a normalised path: the owner of its slot.
#[inline]
pub fn meta_server(path: &str, l: &Layout) -> u32 {
    l.owner(path_slot(path))
}

/// Data server of chunk `chunk` (≥ 1) of file `id`: the owner of its slot.
#[inline]
pub fn data_server(id: u64, chunk: u64, l: &Layout) -> u32 {
    l.owner(chunk_slot(id, chunk))
}

/// Home server of file `id`: the owner of its home slot ([`home_slot`]: the slot of the name
/// it was created under). It keeps the file's chunk 0, its open references and, once its last
/// name is gone while it is open, its orphan record (docs/consistency.md, "Open files").
#[inline]
pub fn home_server(id: u64, l: &Layout) -> u32 {
    l.owner(home_slot(id))
}

/// Server of any chunk of file `id`: chunk 0 on its [`home_server`], the others placed by id.
#[inline]
pub fn chunk_server(id: u64, chunk: u64, l: &Layout) -> u32 {
    if chunk == 0 {
        home_server(id, l)
    } else {
        data_server(id, chunk, l)
    }
}

/// The parts of `[from, to)` of a file (chunks of `cs` bytes, each at its byte position)
/// whose chunks `keep` says yes to, adjacent parts joined.
pub fn chunk_ranges(from: u64, to: u64, cs: u64, keep: impl Fn(u64) -> bool) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = vec![];
    if cs == 0 || from >= to {
        return out;
    }
    let mut c = from / cs;
    while c * cs < to {
        let (a, b) = ((c * cs).max(from), ((c + 1) * cs).min(to));
        if keep(c) {
            match out.last_mut() {
                Some(last) if last.1 == a => last.1 = b,
                _ => out.push((a, b)),
            }
        }
        c += 1;
    }
    out
}

/// The slot of chunk `chunk` of file `id`: chunk 0's is the file's home slot, the others'
/// their own ([`chunk_server`] is its owner).
#[inline]
pub fn slot_of_chunk(id: u64, chunk: u64) -> u32 {
    if chunk == 0 {
        home_slot(id)
    } else {
        chunk_slot(id, chunk)
    }
}

/// The replica set of a key whose first replica is `first`, among `n` servers keeping `r`
/// copies: `first` and the next `r − 1` servers on the ring (docs/redundancy.md). With
/// `r = 1` it is `first` alone, the placement of an unreplicated cluster.
pub fn replicas(first: u32, n: u32, r: u32) -> impl Iterator<Item = u32> {
    (0..r.min(n)).map(move |k| (first + k) % n)
}

/// The replica set whose first replica is `first` when some of the `n` server ids are no
/// longer members (`member` false: removed, `madfs-ctl remove`): `first` and the next
/// `r − 1` members after it on the ring, skipping the others. With every id a member it is
/// [`replicas`].
pub fn replicas_among(
    first: u32,
    n: u32,
    r: u32,
    member: impl Fn(u32) -> bool,
) -> impl Iterator<Item = u32> {
    let n = n.max(1);
    std::iter::once(first % n)
        .chain(
            (1..n)
                .map(move |k| (first + k) % n)
                .filter(move |s| member(*s)),
        )
        .take(r.min(n) as usize)
}

/// Where a server keeps the chunks of file `id` that it holds, relative to its chunk
/// directory: one sparse file, each chunk at its byte position in the madfs file (chunk *c* at
/// *c* × chunk size). Servers write there; clients on the same host read there directly.
pub fn chunk_file(id: u64) -> String {
    format!("{:02x}/{id:016x}", (id >> SLOT_BITS) % 256)
}

/// Name of the file in a server's chunk directory holding the random token it writes at
/// start: a client that reads the server's token there sees the server's chunk files.
pub const TOKEN_FILE: &str = "token";

/// Name of the file in a server's chunk directory that holds its cluster map's epoch (u64
/// LE): clients reading chunk files themselves check it.
pub const EPOCH_FILE: &str = "epoch";

/// Directory position of an entry name.
pub fn name_hash(name: &str) -> u64 {
    hash64(name.as_bytes(), NAME_SEED)
}

/// Checks that `path` is already in normal form; the server's gate for every path it receives.
pub fn check_normalized(path: &str) -> Result<(), Errno> {
    if path.len() > TREE_PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if !path.starts_with('/') || path.as_bytes().contains(&0) {
        return Err(Errno::EINVAL);
    }
    if path == "/" {
        return Ok(());
    }
    for comp in path[1..].split('/') {
        match comp {
            "" | "." | ".." => return Err(Errno::EINVAL),
            c if c.len() > NAME_MAX => return Err(Errno::ENAMETOOLONG),
            _ => {}
        }
    }
    Ok(())
}

/// Brings an absolute path into normal form: collapses `//`, drops `.` components and a
/// trailing `/`. Rejects relative paths, `..`, NUL (EINVAL) and over-long paths or names
/// (ENAMETOOLONG). Callers that know a working directory resolve relative paths first.
pub fn normalize(path: &str) -> Result<String, Errno> {
    if check_normalized(path).is_ok() {
        // the common case: one scan, one copy
        return Ok(path.to_owned());
    }
    if !path.starts_with('/') || path.as_bytes().contains(&0) {
        return Err(Errno::EINVAL);
    }
    let mut out = String::with_capacity(path.len());
    for comp in path.split('/') {
        match comp {
            "" | "." => {}
            ".." => return Err(Errno::EINVAL),
            c if c.len() > NAME_MAX => return Err(Errno::ENAMETOOLONG),
            c => {
                out.push('/');
                out.push_str(c);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    if out.len() > TREE_PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(out)
}

/// Splits a normalised path into (parent, name). The root has no parent.
pub fn split_parent(path: &str) -> Option<(&str, &str)> {
    if path == "/" {
        return None;
    }
    let i = path.rfind('/')?;
    let parent = if i == 0 { "/" } else { &path[..i] };
    Some((parent, &path[i + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_sets_follow_the_first_on_the_ring() {
        assert_eq!(replicas(3, 4, 1).collect::<Vec<_>>(), [3]);
        assert_eq!(replicas(3, 4, 2).collect::<Vec<_>>(), [3, 0]);
        assert_eq!(replicas(1, 4, 3).collect::<Vec<_>>(), [1, 2, 3]);
        // never more copies than servers, never one server twice
        assert_eq!(replicas(1, 2, 3).collect::<Vec<_>>(), [1, 0]);
        for n in 1..8 {
            for first in 0..n {
                let set: Vec<u32> = replicas(first, n, 3).collect();
                let mut d = set.clone();
                d.sort();
                d.dedup();
                assert_eq!(d.len(), set.len());
                assert_eq!(set[0], first);
            }
        }
    }

    #[test]
    fn replica_sets_skip_servers_that_are_no_members() {
        let all = |_| true;
        for (first, n, r) in [(3, 4, 2), (1, 4, 3), (1, 2, 3), (0, 1, 2)] {
            assert!(replicas_among(first, n, r, all).eq(replicas(first, n, r)));
        }
        // server 1 of 4 removed: set 0 is {0, 2}, set 3 {3, 0}
        let not1 = |s| s != 1;
        assert_eq!(replicas_among(0, 4, 2, not1).collect::<Vec<_>>(), [0, 2]);
        assert_eq!(replicas_among(3, 4, 2, not1).collect::<Vec<_>>(), [3, 0]);
        assert_eq!(replicas_among(0, 4, 3, not1).collect::<Vec<_>>(), [0, 2, 3]);
        // fewer members than copies: each once
        assert_eq!(replicas_among(0, 3, 3, |s| s == 0).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn normalize_cases() {
        assert_eq!(normalize("/").unwrap(), "/");
        assert_eq!(normalize("/a/b c").unwrap(), "/a/b c");
        let name = format!("/{}", "x".repeat(255));
        assert_eq!(normalize(&name).unwrap(), name);
        assert_eq!(normalize("//a//b/./c/").unwrap(), "/a/b/c");
        assert_eq!(normalize("/a/.").unwrap(), "/a");
        assert_eq!(normalize("a/b"), Err(Errno::EINVAL));
        assert_eq!(normalize(""), Err(Errno::EINVAL));
        assert_eq!(normalize("/a/../b"), Err(Errno::EINVAL));
        assert_eq!(normalize("/a\0b"), Err(Errno::EINVAL));
        let long_name = format!("/{}", "x".repeat(256));
        assert_eq!(normalize(&long_name), Err(Errno::ENAMETOOLONG));
        let long_path = "/abcdefgh".repeat(2100);
        assert_eq!(normalize(&long_path), Err(Errno::ENAMETOOLONG));
    }

    #[test]
    fn check_normalized_cases() {
        for ok in ["/", "/a", "/a/b c/d"] {
            assert_eq!(check_normalized(ok), Ok(()), "{ok}");
        }
        for bad in [
            "", "a", "/a/", "//a", "/a//b", "/./a", "/a/..", "/../etc", "/a\0",
        ] {
            assert_eq!(check_normalized(bad), Err(Errno::EINVAL), "{bad:?}");
        }
        assert_eq!(
            check_normalized(&"/abcdefgh".repeat(2100)),
            Err(Errno::ENAMETOOLONG)
        );
        // whatever normalize produces passes the server's check
        for p in ["//x/./y//", "/", "/q/"] {
            assert_eq!(check_normalized(&normalize(p).unwrap()), Ok(()));
        }
    }

    #[test]
    fn split_parent_cases() {
        assert_eq!(split_parent("/"), None);
        assert_eq!(split_parent("/a"), Some(("/", "a")));
        assert_eq!(split_parent("/a/b/c"), Some(("/a/b", "c")));
    }

    /// Fixed vectors: if any of these change, every existing cluster loses its data.
    #[test]
    fn fixed_vectors() {
        assert_eq!(hash64(b"", 0), 0x2d06800538d394c2);
        assert_eq!(name_hash("file.0"), NAME_HASH_FILE0);
        assert_eq!(slot_of_hash(0), 0);
        assert_eq!(slot_of_hash(u64::MAX), SLOTS - 1);
        assert_eq!(
            ["/", "/a", "/a/b", "/mdtest/file.123"].map(path_slot),
            PATH_SLOTS
        );
        assert_eq!(
            [(1u64, 1u64), (1, 2), (99, 7), (1 << 48, 3)].map(|(i, c)| chunk_slot(i, c)),
            CHUNK_SLOTS
        );
        let l = Layout::initial(7);
        assert_eq!(
            ["/", "/a", "/a/b", "/mdtest/file.123"].map(|p| meta_server(p, &l)),
            PATH_SLOTS.map(|s| s % 7)
        );
        // chunk 0 on the owner of the id's home slot
        let l = Layout::initial(5);
        assert_eq!(make_id(13, 17), 17 << 12 | 13);
        assert_eq!(chunk_server(make_id(3, 17), 0, &l), 3);
        assert_eq!(home_server(make_id(13, 17), &l), 3);
        assert_eq!(chunk_server(99, 7, &l), data_server(99, 7, &l));
    }
    const NAME_HASH_FILE0: u64 = 8_013_791_070_622_528_087;
    const PATH_SLOTS: [u32; 4] = [3262, 280, 1475, 3662];
    const CHUNK_SLOTS: [u32; 4] = [2451, 41, 2372, 355];

    #[test]
    fn paths_spread_evenly() {
        let l = Layout::initial(8);
        let mut counts = [0u32; 8];
        for i in 0..10_000u64 {
            counts[meta_server(&format!("/d/f{i}"), &l) as usize] += 1;
        }
        for c in counts {
            assert!((1100..1400).contains(&c), "{counts:?}");
        }
    }
}
