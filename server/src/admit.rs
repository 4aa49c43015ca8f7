//! Admission (docs/security.md, "One door"): a request is served only by the server that
//! holds what it names — a path's metadata server, a file's home server, a chunk's server —
//! or, on a replicated cluster, by the primary of that key's replica set. A request sent to
//! any other server is refused with `EREMCHG` before anything else looks at it: a server that
//! served it would act on a copy of the namespace that is not its own (a second `/alice`
//! owned by someone else, whose directory-table update replaced the real one everywhere).

use crate::state::frozen::Slots;
pub use madfs_placement::keys::Key;
use madfs_placement::{home_slot, path_slot, slot_of_chunk, Layout};
use madfs_proto::{Errno, FsResult};

/// Is every key in `keys` placed on `set` (a server, or a replica set named by its first
/// member) by layout `l`? `EREMCHG` if one is not. Their slots are noted in `slots` (a slot
/// frozen for its move keeps the request out: [`crate::state::frozen`]).
pub fn check(keys: &[Key<'_>], set: u32, l: &Layout, slots: &mut Slots) -> FsResult<()> {
    let mut ours = |slot: u32| {
        slots.push(slot);
        if l.owner(slot) == set {
            Ok(())
        } else {
            Err(Errno::EREMCHG)
        }
    };
    for key in keys {
        match *key {
            // (a path not in normal form is no key of any server's)
            Key::Path(p) => {
                madfs_placement::check_normalized(p)?;
                ours(path_slot(p))?
            }
            Key::Id(id) => ours(home_slot(id))?,
            Key::Chunk(id, c) => ours(slot_of_chunk(id, c))?,
            Key::Ids(v) => v.iter().try_for_each(|id| ours(home_slot(*id)))?,
            Key::Caps(v) => v.iter().try_for_each(|c| ours(home_slot(c.id)))?,
            Key::Every | Key::Any => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use madfs_placement::{chunk_server, meta_server};

    fn check(keys: &[Key<'_>], set: u32, l: &Layout) -> FsResult<()> {
        super::check(keys, set, l, &mut Slots::default())
    }

    #[test]
    fn a_key_is_served_by_its_server_only() {
        let n = 5;
        let l = &Layout::initial(n);
        let p = "/a/b";
        let home = meta_server(p, l);
        for s in 0..n {
            assert_eq!(
                check(&[Key::Path(p)], s, l).is_ok(),
                s == home,
                "server {s}"
            );
            assert!(check(&[Key::Any, Key::Every], s, l).is_ok());
        }
        // a file's home (the owner of the slot its id names), a chunk's server
        let id = madfs_placement::make_id(2, 7);
        assert!(check(&[Key::Id(id)], 2, l).is_ok());
        assert!(check(&[Key::Chunk(id, 0)], 1, l).is_err());
        let c3 = chunk_server(id, 3, l);
        assert!(check(&[Key::Chunk(id, 3)], c3, l).is_ok());
        assert!(check(&[Key::Chunk(id, 3)], (c3 + 1) % n, l).is_err());
        // every one of several
        let ids = [id, madfs_placement::make_id(3, 1)];
        assert!(check(&[Key::Ids(&ids)], 2, l).is_err() && check(&[Key::Ids(&ids)], 3, l).is_err());
    }
}
