//! Placement: the one function client and server share to decide where things live.
//!
//! * [`normalize`] / [`check_normalized`]: one spelling per path (absolute, no `.`/`..`, no
//!   empty components, no trailing `/`, no NUL, bounded length). The server refuses anything
//!   [`check_normalized`] rejects.
//! * [`hash64`]: a stable 64-bit hash (xxh3 with fixed seeds — never `std::hash`, which may
//!   change between builds).
//! * [`meta_server`]: the metadata server of a path, by jump consistent hash, so growing the
//!   cluster from N to N+1 servers moves ≈ 1/(N+1) of the paths.
//! * [`data_server`]: the server of data chunk *i ≥ 1* of a file, placed by the file's immutable
//!   id, so chunks do not move when a file is renamed. Chunk 0 lives inline in RocksDB on the
//!   file's *home* server ([`home_server`]: the server that made the id, which is the metadata
//!   server of the name it was created under), so no chunk moves when a file is renamed, and
//!   an open descriptor's I/O never follows a name ([`chunk_server`] encodes both rules).
//! * [`name_hash`]: the directory position of an entry (readdir order and cookie).

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

/// Jump consistent hash (Lamping & Veach 2014): maps `key` to a bucket in `0..n`; changing `n`
/// to `n + 1` moves only the keys that land in the new bucket.
pub fn jump_hash(mut key: u64, n: u32) -> u32 {
    assert!(n > 0, "jump_hash needs at least one bucket");
    let mut b: i64 = -1;
    let mut j: i64 = 0;
    while j < n as i64 {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b as u32
}

/// Metadata server of a normalised path among `n` servers.
pub fn meta_server(path: &str, n: u32) -> u32 {
    jump_hash(hash64(path.as_bytes(), PATH_SEED), n)
}

/// Data server of chunk `chunk` (≥ 1) of file `id` among `n` servers.
pub fn data_server(id: u64, chunk: u64, n: u32) -> u32 {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&id.to_le_bytes());
    key[8..].copy_from_slice(&chunk.to_le_bytes());
    jump_hash(hash64(&key, CHUNK_SEED), n)
}

/// Home server of file `id` among `n` servers: the server that made the id (its top 16 bits,
/// see the server's id allocator). It keeps the file's chunk 0, its open references and, once
/// its last name is gone while it is open, its orphan record (docs/consistency.md, "Open
/// files"). An id naming no server of this cluster falls back to a hash of the id.
pub fn home_server(id: u64, n: u32) -> u32 {
    let s = (id >> 48) as u32;
    if s < n {
        s
    } else {
        data_server(id, 0, n)
    }
}

/// Server of any chunk of file `id`: chunk 0 on its [`home_server`], the others placed by id.
pub fn chunk_server(id: u64, chunk: u64, n: u32) -> u32 {
    if chunk == 0 {
        home_server(id, n)
    } else {
        data_server(id, chunk, n)
    }
}

/// The replica set of a key whose first replica is `first`, among `n` servers keeping `r`
/// copies: `first` and the next `r − 1` servers on the ring (docs/redundancy.md). With
/// `r = 1` it is `first` alone, the placement of an unreplicated cluster.
pub fn replicas(first: u32, n: u32, r: u32) -> impl Iterator<Item = u32> {
    (0..r.min(n)).map(move |k| (first + k) % n)
}

/// Where a server keeps the chunks of file `id` that it holds, relative to its chunk
/// directory: one sparse file, each chunk at its byte position in the madfs file (chunk *c* at
/// *c* × chunk size). Servers write there; clients on the same host read there directly.
pub fn chunk_file(id: u64) -> String {
    format!("{:02x}/{id:016x}", id % 256)
}

/// Name of the file in a server's chunk directory holding the random token it writes at
/// start: a client that reads the server's token there sees the server's chunk files.
pub const TOKEN_FILE: &str = "token";

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
        assert_eq!(jump_hash(0, 1), 0);
        assert_eq!(
            [1u64, 2, 3, 0xdead_beef, u64::MAX].map(|k| jump_hash(k, 10)),
            JUMP_10
        );
        assert_eq!(
            ["/", "/a", "/a/b", "/mdtest/file.123"].map(|p| meta_server(p, 7)),
            META_7
        );
        assert_eq!(
            [(1u64, 1u64), (1, 2), (99, 7), (1 << 48, 3)].map(|(i, c)| data_server(i, c, 5)),
            DATA_5
        );
        // chunk 0 on the server that made the id; an id of no server here falls back to a hash
        assert_eq!(chunk_server((3 << 48) | 17, 0, 5), 3);
        assert_eq!(home_server((3 << 48) | 17, 5), 3);
        assert_eq!(home_server(9 << 48, 5), data_server(9 << 48, 0, 5));
        assert_eq!(chunk_server(99, 7, 5), data_server(99, 7, 5));
    }
    const NAME_HASH_FILE0: u64 = 8_013_791_070_622_528_087;
    const JUMP_10: [u32; 5] = [6, 6, 8, 5, 9];
    const META_7: [u32; 4] = [1, 4, 0, 6];
    const DATA_5: [u32; 4] = [1, 0, 3, 2];

    #[test]
    fn consistent_hashing_moves_few_keys() {
        let n = 10_000u64;
        let moved = (0..n)
            .filter(|i| meta_server(&format!("/d/f{i}"), 8) != meta_server(&format!("/d/f{i}"), 9))
            .count() as f64;
        // expected 1/9 of the keys move
        let frac = moved / n as f64;
        assert!((0.08..0.15).contains(&frac), "moved {frac}");
        // and the spread is even
        let mut counts = [0u32; 8];
        for i in 0..n {
            counts[meta_server(&format!("/d/f{i}"), 8) as usize] += 1;
        }
        for c in counts {
            assert!((1000..1500).contains(&c), "{counts:?}");
        }
    }
}
