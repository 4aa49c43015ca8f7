//! Sealed cursors: where a paged scan (`Find`) goes on is a key of the server's store, which
//! names a path (perhaps inside a directory the user may not list). A client gets it sealed:
//! encrypted (HMAC-SHA256 in counter mode under the servers' key) and authenticated for the
//! user it was given to, so it tells nothing and only a cursor this cluster made for that
//! user is taken back (`EINVAL` otherwise).

use madfs_auth::Key;
use madfs_proto::{Errno, FsResult};

const NONCE: usize = 16;
const TAG: usize = 16;

fn keystream(key: &Key, nonce: &[u8], len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 32);
    let mut block = 0u64;
    while out.len() < len {
        let mut m = b"madfs-cursor-ks\0".to_vec();
        m.extend_from_slice(nonce);
        m.extend_from_slice(&block.to_le_bytes());
        out.extend_from_slice(&key.sign(&m));
        block += 1;
    }
    out.truncate(len);
    out
}

fn tag(key: &Key, uid: u32, nonce: &[u8], sealed: &[u8]) -> [u8; 32] {
    let mut m = b"madfs-cursor-tag".to_vec();
    m.extend_from_slice(&uid.to_le_bytes());
    m.extend_from_slice(nonce);
    m.extend_from_slice(sealed);
    key.sign(&m)
}

/// `cursor` sealed for user `uid`: nonce, encrypted cursor, tag.
pub fn seal(key: &Key, uid: u32, cursor: &[u8]) -> FsResult<Vec<u8>> {
    let nonce = madfs_auth::random::<NONCE>().map_err(|_| Errno::EIO)?;
    let mut out = nonce.to_vec();
    out.extend(
        cursor
            .iter()
            .zip(keystream(key, &nonce, cursor.len()))
            .map(|(a, b)| a ^ b),
    );
    let t = tag(key, uid, &nonce, &out[NONCE..]);
    out.extend_from_slice(&t[..TAG]);
    Ok(out)
}

/// The cursor `sealed` holds, if this cluster sealed it for user `uid` (`EINVAL` otherwise);
/// an empty one is the start.
pub fn open(key: &Key, uid: u32, sealed: &[u8]) -> FsResult<Vec<u8>> {
    if sealed.is_empty() {
        return Ok(vec![]);
    }
    if sealed.len() < NONCE + TAG {
        return Err(Errno::EINVAL);
    }
    let (nonce, rest) = sealed.split_at(NONCE);
    let (body, t) = rest.split_at(rest.len() - TAG);
    let want = tag(key, uid, nonce, body);
    // (constant time: the tag is compared by HMAC verification of its own)
    let mut diff = 0u8;
    for (a, b) in want[..TAG].iter().zip(t) {
        diff |= a ^ b;
    }
    if diff != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(body
        .iter()
        .zip(keystream(key, nonce, body.len()))
        .map(|(a, b)| a ^ b)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_cursor_opens_for_its_user_only() {
        let k = Key::generate().unwrap();
        let c = b"E/alice\0secret-name-1234567890-and-more".to_vec();
        let s = seal(&k, 7, &c).unwrap();
        assert!(!s.windows(6).any(|w| w == b"secret"));
        assert_eq!(open(&k, 7, &s).unwrap(), c);
        assert_eq!(open(&k, 8, &s), Err(Errno::EINVAL));
        assert_eq!(open(&Key::generate().unwrap(), 7, &s), Err(Errno::EINVAL));
        let mut bent = s.clone();
        bent[NONCE + 2] ^= 1;
        assert_eq!(open(&k, 7, &bent), Err(Errno::EINVAL));
        assert_eq!(open(&k, 7, &c), Err(Errno::EINVAL), "a raw key");
        assert_eq!(open(&k, 7, &[]).unwrap(), Vec::<u8>::new());
        assert_ne!(seal(&k, 7, &c).unwrap(), s, "a fresh nonce each time");
    }
}
