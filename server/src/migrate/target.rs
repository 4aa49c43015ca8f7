//! A slot move's receiving side: the pages of the copy (`MoveIn`, `MoveData`), and the end
//! of a move received (switched, or given up). See [`crate::migrate`].

use crate::server::{Answer, Server};
use crate::state::dirs::DirPerm;
use madfs_placement::{slot_of_chunk, SLOTS};
use madfs_proto::{Errno, FsResult};

/// The slots a move names (u16 LE each).
fn slots_of(bytes: &[u8]) -> FsResult<Vec<u16>> {
    if !bytes.len().is_multiple_of(2) || bytes.is_empty() {
        return Err(Errno::EINVAL);
    }
    let v: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    if v.iter().any(|s| *s as u32 >= SLOTS) {
        return Err(Errno::EINVAL);
    }
    Ok(v)
}

/// `MoveIn`: a page of the records of `slots` from `from`, their owner now, for this server,
/// their owner in the map's target layout (`ESTALE` otherwise: the map moved on).
/// `first` and `epoch`: the move's first page, sent with the sender's map epoch.
pub fn move_in(
    s: &Server,
    from: u32,
    slots: &[u8],
    (first, epoch): (bool, u64),
    ids: u64,
    records: &[(&[u8], &[u8])],
) -> FsResult<Answer> {
    let slots = slots_of(slots)?;
    let map = s.node.get().ok_or(Errno::EAGAIN)?.map();
    if first && map.epoch < epoch {
        // the sender's map may have switched a batch to this server that this one does not
        // know of yet: what it holds of it would count as another move's leftovers
        return Err(Errno::EAGAIN);
    }
    let (now, target) = (map.layout(), map.target().ok_or(Errno::ESTALE)?);
    if slots
        .iter()
        .any(|x| now.owner(*x as u32) != from || target.owner(*x as u32) != s.id)
    {
        return Err(Errno::ESTALE);
    }
    let mut before = s.strays.incoming();
    if let Some(i) = before.as_ref() {
        if i.slots.iter().all(|x| now.owner(*x as u32) == s.id) {
            // the move received until now was switched (the mover would notice soon)
            switched(s);
            before = None;
        } else if i.from != from && i.last.elapsed() < super::GIVE_UP {
            // one move at a time (several servers give a joining one its share): the others
            // wait their turn
            return Err(Errno::EBUSY);
        }
    }
    if s.strays.incoming().is_none() && !s.strays.may_begin() {
        // (the throttle: see `Strays::may_begin`)
        return Err(Errno::EBUSY);
    }
    if s.strays.received(from, &slots) {
        // another move than the one received until now (given up by its sender): what it
        // left goes; then no lease of this server may cover what the switch will change
        match before {
            Some(_) => drop_unowned(s)?,
            None => {
                s.strays.begin();
                if s.strays.mark(true) {
                    s.meta.set_marker(super::STRAYS, true)?;
                }
                if let Some(mut r) = s.leases.pause() {
                    r.wait();
                }
            }
        }
    }
    if first {
        // what an earlier try of this move left
        let mut mine = vec![false; SLOTS as usize];
        slots.iter().for_each(|x| mine[*x as usize] = true);
        super::source::clean(s, &|x| mine[x as usize])?;
    }
    // (every page: ids made in the slots until the freeze raised the sender's mark)
    s.meta.raise_ids(ids)?;
    s.meta.put_moved(records)?;
    // the directories among them: this server may have learnt its directory table from
    // their old owner after they left it (it joins), never from here before they came
    for (path, a) in madfs_store::rocks::moved_dirs(records) {
        s.dirs.apply(&path, Some(DirPerm::of(&a)), a.ctime);
    }
    Ok(Answer::Unit)
}

/// `MoveData`: bytes of file `id`'s chunk file at `pos` from `from`, all in chunks of the
/// move this server receives from it.
pub fn move_data(s: &Server, from: u32, id: u64, pos: u64, data: &[u8]) -> FsResult<Answer> {
    let inc = s.strays.incoming().ok_or(Errno::ESTALE)?;
    let cs = s.chunk_size as u64;
    let end = pos + data.len() as u64;
    if inc.from != from || cs == 0 || data.is_empty() {
        return Err(Errno::ESTALE);
    }
    let ours =
        (pos / cs..end.div_ceil(cs)).all(|c| inc.slots.contains(&(slot_of_chunk(id, c) as u16)));
    if !ours {
        return Err(Errno::ESTALE);
    }
    s.chunks.write_copied(id, pos, data)?;
    s.strays.received_bytes(data.len() as u64);
    Ok(Answer::Unit)
}

/// The move received was switched: this server owns its slots and grants leases again.
pub fn switched(s: &Server) {
    if s.strays.take_incoming().is_some() {
        s.strays.paced_end();
        s.leases.resume();
        s.strays.settled();
    }
}

/// The move received was never switched: its copy goes.
pub fn give_up(s: &Server) -> FsResult<()> {
    if s.strays.take_incoming().is_some() {
        s.strays.paced_end();
        let r = drop_unowned(s);
        s.leases.resume();
        s.strays.settled();
        r?;
    }
    Ok(())
}

/// Drops the records and chunk data of every slot this server does not own.
fn drop_unowned(s: &Server) -> FsResult<()> {
    let l = s.peers.layout();
    super::source::clean(s, &|x| l.owner(x) != s.id).map(drop)
}
