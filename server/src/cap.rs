//! Capabilities (docs/security.md): a request that names a file by id (`Read`, `Write`,
//! `WriteData`, `TruncateChunks`, `Fsync`) carries the [`Cap`] that an `Open`, `Create`,
//! `Unlink` or exact `SetSize` granted — file id, access, user, expiry, and a MAC under the
//! peer key every server holds — so a data server checks it without a round trip. A bare,
//! forged, expired or borrowed one (another user's, another file's, too little access) is
//! `EACCES`. Servers moving data for each other (role `Peer`) need none.

use crate::auth::Who;
use crate::ops::Ops;
use madfs_auth::Key;
use madfs_proto::{Cap, Errno, FsResult, Request, Role, ACCESS_R, ACCESS_W};
use std::cell::RefCell;
use std::collections::HashSet;

/// How long a capability is good for (an open file needs no renewal within a day).
pub const LIFETIME_S: i64 = 24 * 3600;

const DOMAIN: &[u8; 16] = b"madfs-cap-v1\0\0\0\0";

fn now_s() -> i64 {
    crate::ops::now_ns() / 1_000_000_000
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
        access: access & (ACCESS_R | ACCESS_W),
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
    if c.expires < now_s() {
        return false;
    }
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

impl Ops {
    /// Checks the capability of a request that names a file by id (other requests pass).
    pub fn cap_check(&self, who: &Who, req: &Request<'_>) -> FsResult<()> {
        if who.role == Role::Peer {
            return Ok(());
        }
        let (id, need, cap, size_of) = match *req {
            Request::Read { id, cap, .. } => (id, ACCESS_R, cap, None),
            Request::Write {
                id, cap, size_of, ..
            }
            | Request::WriteData {
                id, cap, size_of, ..
            } => (id, ACCESS_W, cap, size_of),
            Request::TruncateChunks { id, cap, .. } => (id, ACCESS_W, cap, None),
            // an fsync that publishes a size is a writer's
            Request::Fsync {
                id, cap, size_of, ..
            } => (id, size_of.map_or(0, |_| ACCESS_W), cap, size_of),
            _ => return Ok(()),
        };
        if cap.id != id
            || cap.access & need != need
            || cap.uid != who.uid
            || !valid(self.peers.key(), &cap)
        {
            self.stats
                .refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(Errno::EACCES);
        }
        // a size published with the data must be that file's (root may set any file's size)
        if let Some(path) = size_of.filter(|_| who.uid != 0) {
            crate::ops::path_ok(path)?;
            match self.get(path) {
                Ok(a) if a.id == id => {}
                Ok(_) => return Err(Errno::EACCES),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
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
