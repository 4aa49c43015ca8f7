//! Capabilities (docs/security.md): a request that names a file by id (`Read`, `Write`,
//! `WriteData`, `TruncateChunks`, `Fsync`) carries the [`Cap`] that an `Open`, `Create`,
//! `Unlink` or exact `SetSize` granted — file id, access, user, expiry, and a MAC under the
//! peer key every server holds — so a data server checks it without a round trip. A bare,
//! forged, expired or borrowed one (another user's, another file's, too little access) is
//! `EACCES` (`crate::authorize`). Servers moving data for each other (role `Peer`) need
//! none.

use madfs_auth::Key;
use madfs_proto::{Cap, ACCESS_PRIVS, ACCESS_R, ACCESS_W};
use std::cell::RefCell;
use std::collections::HashSet;

/// How long a capability is good for (an open file needs no renewal within a day).
pub const LIFETIME_S: i64 = 24 * 3600;

const DOMAIN: &[u8; 16] = b"madfs-cap-v1\0\0\0\0";

fn now_s() -> i64 {
    crate::clock::now_ns() / 1_000_000_000
}

fn message(c: &Cap) -> [u8; 40] {
    let mut m = [0u8; 40];
    m[..16].copy_from_slice(DOMAIN);
    m[16..].copy_from_slice(&c.signed());
    m
}

/// A capability for `uid` to do `access` to file `id`.
pub fn grant(key: &Key, id: u64, access: u32, uid: u32) -> Cap {
    let mut c = Cap {
        id,
        access: access & (ACCESS_R | ACCESS_W | ACCESS_PRIVS),
        uid,
        expires: now_s() + LIFETIME_S,
        mac: [0; 16],
    };
    let mac = key.sign(&message(&c));
    c.mac.copy_from_slice(&mac[..16]);
    c
}

thread_local! {
    /// Capabilities this thread has verified (a file's requests carry the same one): a MAC
    /// is computed once per open, not once per request.
    static SEEN: RefCell<HashSet<Cap>> = RefCell::new(HashSet::new());
}

/// Most capabilities remembered per thread.
const SEEN_MAX: usize = 4096;

/// Is `c` genuine and not expired?
pub fn valid(key: &Key, c: &Cap) -> bool {
    c.expires >= now_s() && genuine(key, c)
}

/// Was `c` granted by a server of this cluster (expired or not)?
pub fn genuine(key: &Key, c: &Cap) -> bool {
    if SEEN.with(|s| s.borrow().contains(c)) {
        return true;
    }
    if !key.verify_signed(&message(c), &c.mac) {
        return false;
    }
    SEEN.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() >= SEEN_MAX {
            s.clear();
        }
        s.insert(*c);
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forged_expired_and_other_keys_fail() {
        let k = Key::generate().unwrap();
        let c = grant(&k, 7, ACCESS_R | ACCESS_W | 1, 1000);
        assert_eq!(c.access, ACCESS_R | ACCESS_W);
        assert!(valid(&k, &c));
        assert!(valid(&k, &c)); // remembered
        for bad in [
            Cap { id: 8, ..c },
            Cap { uid: 0, ..c },
            Cap {
                access: ACCESS_R,
                ..c
            },
            Cap {
                expires: c.expires + 1,
                ..c
            },
            Cap { mac: [0; 16], ..c },
            Cap {
                expires: now_s() - 1,
                ..c
            },
        ] {
            assert!(!valid(&k, &bad), "{bad:?}");
        }
        let other = Key::generate().unwrap();
        assert!(!valid(&other, &grant(&k, 10, 4, 1)));
    }
}
