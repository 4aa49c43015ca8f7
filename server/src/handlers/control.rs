//! What servers say to each other and to anyone about themselves: a ping, a goodbye, the
//! cluster map, and a replicated cluster's copies and catch-ups (`crate::replica`).

use super::Call;
use crate::server::{Answer, Server};
use madfs_proto::{Errno, FsResult, Request};

impl Server {
    /// The cluster map as this server knows it (`Request::Map`).
    fn map_answer(&self) -> Answer {
        let n = self.peers.servers();
        let Some(node) = self.node.get() else {
            // no map (a one-server cluster without a cluster file, or not started yet)
            return Answer::Map(0, vec![0; n as usize], 1, vec![]);
        };
        let m = node.map();
        let states = m.state_codes();
        let owners = if m.layout() == madfs_placement::Layout::initial(n) {
            vec![]
        } else {
            m.layout()
                .owners()
                .iter()
                .flat_map(|o| o.to_le_bytes())
                .collect()
        };
        Answer::Map(m.epoch, states, m.r.max(1), owners)
    }
}

pub(crate) fn ping(_: &Server, _: &mut Call<'_>, _: &Request<'_>) -> FsResult<Answer> {
    Ok(Answer::Unit)
}

/// `Bye` (the transports close the connection; nothing else to do).
pub(crate) fn bye(_: &Server, _: &mut Call<'_>, _: &Request<'_>) -> FsResult<Answer> {
    Ok(Answer::Unit)
}

pub(crate) fn map(s: &Server, _: &mut Call<'_>, _: &Request<'_>) -> FsResult<Answer> {
    Ok(s.map_answer())
}

/// `Once` is unwrapped by the pipeline (one level only).
pub(crate) fn once(_: &Server, _: &mut Call<'_>, _: &Request<'_>) -> FsResult<Answer> {
    Err(Errno::EINVAL)
}

/// A primary's copy, applied on this secondary.
pub(crate) fn replicate(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let (
        Request::Replicate {
            set,
            epoch,
            from,
            op,
        },
        Some(rep),
    ) = (req, &s.replica)
    else {
        return Err(Errno::EINVAL);
    };
    rep.apply(&s.meta, &s.chunks, c.who, *set, *epoch, *from, *op, c.bulk)
        .map(|()| Answer::Unit)
}

/// A rejoining server's page of a replica set this server is the primary of.
pub(crate) fn resync(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let (
        Request::Resync {
            set,
            epoch,
            after,
            max_bytes,
            files,
            after_id,
        },
        Some(rep),
    ) = (req, &s.replica)
    else {
        return Err(Errno::EINVAL);
    };
    let page = crate::replica::forward::Page {
        set: *set,
        epoch: *epoch,
        after,
        max_bytes: *max_bytes,
        files: *files,
        after_id: *after_id,
    };
    let stores = crate::replica::forward::Stores {
        meta: &s.meta,
        chunks: &s.chunks,
        layout: &s.peers.layout(),
        chunk_size: s.chunk_size,
        max_bytes: s.max_list_bytes,
    };
    let (records, next) = rep.resync_page(&stores, c.who, &page)?;
    Ok(Answer::Records(records, next))
}

/// Bytes of a chunk file for a rejoining server's copy (servers only).
pub(crate) fn resync_read(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::ResyncRead { id, pos, len } = *req else {
        return Err(Errno::EINVAL);
    };
    let want = (len as usize).min(c.data.len());
    let n = s.chunks.read_raw(id, pos, &mut c.data[..want])?;
    Ok(Answer::Records(vec![(vec![], c.data[..n].to_vec())], None))
}

/// `MoveIn`: a page of a slot move's records (`crate::migrate::target`).
pub(crate) fn move_in(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::MoveIn {
        from,
        slots,
        first,
        ids,
        epoch,
        records,
    } = req
    else {
        return Err(Errno::EINVAL);
    };
    let records: Vec<(&[u8], &[u8])> = records.iter().map(|(k, v)| (&k[..], &v[..])).collect();
    crate::migrate::target::move_in(s, *from, slots, (*first, *epoch), *ids, &records)
}

/// `MoveData`: a piece of a slot move's chunk data (`crate::migrate::target`).
pub(crate) fn move_data(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::MoveData { from, id, pos } = *req else {
        return Err(Errno::EINVAL);
    };
    crate::migrate::target::move_data(s, from, id, pos, c.bulk)
}
