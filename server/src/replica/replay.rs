//! The replay cache (docs/redundancy.md, "Retries and the replay cache"): a change that must
//! not be applied twice comes as `Request::Once` with a request id; the set's primary writes
//! a **replay record** of it in the same RocksDB write batch as the change itself, so the
//! record is exactly as durable as the change and reaches the secondaries with it (a copy is
//! the batch). A client that fails over sends the same id to the new primary, which finds the
//! record and answers from it instead of applying the change again (an exclusive create
//! answers the file it made, not EEXIST; an unlink the file it removed, not ENOENT; an
//! append the place it reserved, not a second one).
//!
//! Key (`madfs_store::rocks::replay_key`): `Y`, the replica set (u32), the client's clock
//! when it first sent the request (ms, u64), the client and the sequence number (u64 each)
//! and the user whose connection sent it (u32), all big-endian: so the records of a set sort
//! by time and the primary drops those older than [`KEEP`] with one range deletion
//! ([`sweep`]), and a request id sent by another user finds nothing. Value: what the answer
//! needs ([`Note`]).

use super::forward::Replication;
use crate::peer::Peers;
use madfs_proto::{Attr, Errno, FsResult};
use madfs_store::rocks::{replay_key, RocksMeta};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

/// How long replay records are kept (by the clients' clocks: a retry comes within seconds;
/// the margin covers clocks that disagree).
pub const KEEP: Duration = Duration::from_secs(600);
/// How often a primary drops its set's old replay records.
pub const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// What a replay answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Note {
    /// Nothing noted: the request is applied again (an idempotent one).
    Again,
    /// `Attr` (mkdir, unlink, rmdir) of this entry.
    Attr(Attr),
    /// `Created` (exclusive create, mknod, symlink) of this entry.
    Created(Attr),
    /// `Offset` (append).
    Offset(u64),
    /// `Replaced` (rename of a file: done, or its move to another server pending).
    Renamed,
}

impl Note {
    fn encode(&self) -> Vec<u8> {
        match self {
            Note::Again => vec![0],
            Note::Attr(a) => [&[1u8][..], &a.to_bytes()].concat(),
            Note::Created(a) => [&[2u8][..], &a.to_bytes()].concat(),
            Note::Offset(o) => [&[3u8][..], &o.to_le_bytes()].concat(),
            Note::Renamed => vec![4],
        }
    }

    fn decode(v: &[u8]) -> Option<Note> {
        let (k, rest) = v.split_first()?;
        Some(match k {
            0 => Note::Again,
            1 => Note::Attr(Attr::from_bytes(rest)?),
            2 => Note::Created(Attr::from_bytes(rest)?),
            3 => Note::Offset(u64::from_le_bytes(rest.try_into().ok()?)),
            4 => Note::Renamed,
            _ => return None,
        })
    }
}

thread_local! {
    /// The replay record of the request being served on this thread: its key, and what the
    /// request noted so far. Every batch committed while it is set carries it.
    static PENDING: RefCell<Option<(Vec<u8>, Note)>> = const { RefCell::new(None) };
}

/// The replay record to write with the batch being committed on this thread, if any.
pub fn pending() -> Option<(Vec<u8>, Vec<u8>)> {
    PENDING.with(|p| p.borrow().as_ref().map(|(k, n)| (k.clone(), n.encode())))
}

/// The request being served answers `n` if it is sent again: noted before its change is
/// committed. Nothing outside a `Request::Once`.
pub fn note(n: Note) {
    PENDING.with(|p| {
        if let Some((_, note)) = p.borrow_mut().as_mut() {
            *note = n;
        }
    });
}

/// Serves request (`client`, `seq`, first sent at `at`) of user `uid` to replica set `set`:
/// `serve(None)` applies it, or, when it was applied already, `serve(Some(note))` answers it
/// from its record. `took()`: the sets of removed servers whose slots `set` took (a request
/// first served there and sent again after the removal has its record under that set).
pub fn once<T>(
    meta: &RocksMeta,
    set: u32,
    took: impl FnOnce() -> Vec<u32>,
    uid: u32,
    (client, seq, at): (u64, u64, u64),
    serve: impl FnOnce(Option<Note>) -> FsResult<T>,
) -> FsResult<T> {
    let k = replay_key(set, at, client, seq, uid);
    let mut found = meta.raw_get(&k)?;
    if found.is_none() {
        for old in took() {
            found = meta.raw_get(&replay_key(old, at, client, seq, uid))?;
            if found.is_some() {
                break;
            }
        }
    }
    if let Some(v) = found {
        let n = Note::decode(&v).ok_or(Errno::EIO)?;
        tracing::debug!("request {client:x}/{seq} answered from its replay record");
        return serve(Some(n));
    }
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            PENDING.with(|p| p.borrow_mut().take());
        }
    }
    PENDING.with(|p| *p.borrow_mut() = Some((k, Note::Again)));
    let _reset = Reset;
    serve(None)
}

/// Drops the replay records of server `me`'s own replica set older than [`KEEP`] (as its
/// primary only: the deletion is copied to the secondaries like any change).
pub fn sweep(meta: &RocksMeta, rep: Option<&Arc<Replication>>, peers: &Arc<Peers>, me: u32) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let Some(before) = now.checked_sub(KEEP) else {
        return;
    };
    // (and those of removed servers whose slots this set took)
    let took = rep.map_or(vec![], |r| r.took_from(me));
    super::forward::as_set(rep, peers, me, me, || {
        for set in std::iter::once(me).chain(took) {
            let (from, to) = (
                replay_key(set, 0, 0, 0, 0),
                replay_key(set, before.as_millis() as u64, 0, 0, 0),
            );
            if let Err(e) = meta.drop_range(&from, &to) {
                tracing::warn!("replay records not dropped: {e}");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_and_keys_round_trip() {
        let a = Attr {
            id: 7,
            size: 3,
            ..Default::default()
        };
        for n in [
            Note::Again,
            Note::Attr(a),
            Note::Created(a),
            Note::Offset(99),
            Note::Renamed,
        ] {
            assert_eq!(Note::decode(&n.encode()), Some(n));
        }
        assert_eq!(Note::decode(&[9]), None);
        let k = replay_key(3, 1000, 5, 6, 7);
        assert_eq!(madfs_store::rocks::replay_key_set(&k), Some(3));
        assert!(replay_key(3, 999, u64::MAX, u64::MAX, 9) < k && k < replay_key(3, 1001, 0, 0, 0));
        assert_ne!(
            replay_key(3, 1000, 5, 6, 8),
            k,
            "another user's id is another request"
        );
    }
}
