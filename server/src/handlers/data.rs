//! Data: reads and writes of chunks (chunk 0 starts inline in RocksDB on the file's home
//! server, the rest of it and every other chunk live in the server's chunk files), truncation
//! of the chunks a server holds, fsync and sync, the server's totals and where its chunk
//! files are. A request here names its file by id, with the capability an open granted
//! (checked by `crate::authorize`).

use super::Call;
use crate::clock::now_ns;
use crate::replica::forward;
use crate::server::{path_ok, Answer, Server};
use madfs_proto::{Errno, FsResult, ReplOp, Request, SizeMode};
use madfs_store::{ChunkStore, MetadataStore};

/// Largest offset + length accepted inside one chunk (bounds memory a request can make the
/// server allocate for inline chunk 0).
pub const MAX_CHUNK: u64 = 64 << 20;

/// Where `len` bytes at `offset` of chunk `chunk` (chunk size `cs`) are in the file, or
/// `err` if they are not all in that chunk.
pub fn chunk_pos(chunk: u64, offset: u32, len: u64, cs: u32, err: Errno) -> FsResult<u64> {
    if cs == 0 || cs as u64 > MAX_CHUNK || offset as u64 + len > cs as u64 {
        return Err(err);
    }
    let pos = chunk
        .checked_mul(cs as u64)
        .and_then(|p| p.checked_add(offset as u64))
        .ok_or(Errno::EFBIG)?;
    if pos.saturating_add(len) > i64::MAX as u64 {
        return Err(Errno::EFBIG);
    }
    Ok(pos)
}

/// Where a read of `len` bytes at `offset` of chunk `chunk` (chunk size `cs`) starts in the
/// file, and its length cut at the end of the chunk.
pub fn read_span(chunk: u64, offset: u32, len: u32, cs: u32) -> FsResult<(u64, usize)> {
    let len = len.min(cs.saturating_sub(offset));
    Ok((
        chunk_pos(chunk, offset, len as u64, cs, Errno::EINVAL)?,
        len as usize,
    ))
}

impl Server {
    /// Writes into chunk 0: the first `inline_max` bytes in RocksDB, the rest in a chunk file;
    /// then, with `size_of`, publishes the new end in the entry of that path — in the same
    /// RocksDB write when everything went inline (a small file's write: one WAL record).
    pub(crate) fn write_chunk0(
        &self,
        id: u64,
        off: u64,
        data: &[u8],
        size_of: Option<&str>,
    ) -> FsResult<()> {
        let t = self.inline_max;
        let end = off + data.len() as u64;
        let mut publish = size_of.map(|p| (p, end, now_ns()));
        if off < t {
            let n = (end.min(t) - off) as usize;
            // the size goes with the bytes only if they are all of them
            let with = if end <= t { publish.take() } else { None };
            self.meta.write_inline(id, off, &data[..n], with)?;
        }
        if end > t {
            let from = off.max(t);
            self.chunks
                .write(id, from, &data[(from - off) as usize..])?;
        }
        if let Some((p, size, mtime)) = publish {
            self.meta.publish_size(p, id, size, mtime)?;
        }
        Ok(())
    }

    /// Reads chunk 0 (inline part, then the chunk-file part); returns the bytes present.
    pub(crate) fn read_chunk0(&self, id: u64, off: u64, out: &mut [u8]) -> FsResult<usize> {
        let t = self.inline_max;
        let end = off + out.len() as u64;
        let mut n = 0;
        if off < t {
            let k = (end.min(t) - off) as usize;
            n = self.meta.read_inline(id, off, &mut out[..k])?;
            if end <= t {
                return Ok(n);
            }
            // the inline part may be short (a hole) while the file part has data
            out[n..k].fill(0);
        }
        let from = off.max(t);
        let skip = (from - off) as usize;
        let m = self.chunks.read(id, from, &mut out[skip..])?;
        Ok(if m > 0 { skip + m } else { n })
    }

    /// Drops the bytes of file `id` at or beyond `size` kept on this server.
    pub(crate) fn drop_local_chunks(&self, id: u64, size: u64) -> FsResult<()> {
        self.chunks.truncate(id, size)
    }

    /// What an fsync request does before its flush: publish the size it carries.
    pub fn fsync_publish(&self, req: &Request<'_>) -> FsResult<()> {
        if let Request::Fsync {
            id,
            size_of: Some(path),
            size,
            ..
        } = *req
        {
            // (the request's capability was checked for writing: `Ops::cap_check`)
            self.set_size(path, size, SizeMode::Max, id)?;
        }
        Ok(())
    }
}

pub(crate) fn read(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Read {
        id,
        chunk,
        offset,
        len,
        chunk_size,
        ..
    } = *req
    else {
        return Err(Errno::EINVAL);
    };
    // a read past the end of the chunk is cut there
    let (pos, len) = read_span(chunk, offset, len, chunk_size)?;
    let len = len.min(c.data.len());
    let out = &mut c.data[..len];
    let n = if chunk == 0 {
        s.read_chunk0(id, pos, out)
    } else {
        s.chunks.read(id, pos, out)
    };
    if n == Err(Errno::EIO) {
        tracing::error!("file {id:016x}: chunk {chunk} unreadable (EIO)");
    }
    Ok(Answer::Data(n?))
}

pub(crate) fn write(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Write {
        id,
        chunk,
        offset,
        chunk_size,
        size_of,
        ..
    } = *req
    else {
        return Err(Errno::EINVAL);
    };
    let pos = chunk_pos(chunk, offset, c.bulk.len() as u64, chunk_size, Errno::EFBIG)?;
    s.chunks.admit(c.bulk.len() as u64)?;
    if chunk == 0 {
        if let Some(p) = size_of {
            path_ok(p)?;
        }
        s.write_chunk0(id, offset as u64, c.bulk, size_of)?;
    } else {
        s.chunks.write(id, pos, c.bulk)?;
    }
    Ok(Answer::Written(c.bulk.len() as u32))
}

pub(crate) fn write_data(_: &Server, _: &mut Call<'_>, _: &Request<'_>) -> FsResult<Answer> {
    // its data comes as a separate message: the transport turns it into `Write`
    Err(Errno::EINVAL)
}

pub(crate) fn truncate_chunks(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::TruncateChunks {
        id,
        size,
        chunk_size,
        ..
    } = *req
    else {
        return Err(Errno::EINVAL);
    };
    if chunk_size == 0 {
        return Err(Errno::EINVAL);
    }
    if size < chunk_size as u64 && madfs_placement::home_server(id, &s.peers.layout()) == s.here() {
        s.meta.truncate_inline(id, size)?; // chunk 0 lives here
    }
    s.chunks.truncate(id, size)?;
    Ok(Answer::Unit)
}

pub(crate) fn fsync(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Fsync { id, .. } = *req else {
        return Err(Errno::EINVAL);
    };
    s.fsync_publish(req)?;
    // unreplicated: the group-commit sync threads flush it with what else is queued
    if let (None, Some(q)) = (&s.replica, c.sync) {
        return Ok(Answer::Queued(q.queue(id)));
    }
    let wal = s.meta.mark();
    s.chunks.sync(id)?;
    s.meta.sync(wal)?;
    // durable on every live replica (a replicated cluster's secondaries)
    forward::chunk(ReplOp::Sync { id: Some(id) }, &[])?;
    Ok(Answer::Unit)
}

pub(crate) fn sync(s: &Server, _: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    let Request::Sync { data } = *req else {
        return Err(Errno::EINVAL);
    };
    let wal = s.meta.mark();
    if data {
        s.chunks.sync_all()?;
    }
    s.meta.sync(wal)?;
    forward::chunk(ReplOp::Sync { id: None }, &[])?;
    Ok(Answer::Unit)
}

pub(crate) fn statfs(s: &Server, _: &mut Call<'_>, _: &Request<'_>) -> FsResult<Answer> {
    s.chunks.statfs().map(Answer::StatFs)
}

pub(crate) fn locate(s: &Server, _: &mut Call<'_>, _: &Request<'_>) -> FsResult<Answer> {
    Ok(Answer::Located(s.chunks.location().clone()))
}

#[cfg(test)]
mod tests {
    use madfs_proto::{Attr, S_IFREG};
    use madfs_store::MetadataStore;

    #[test]
    fn chunk0_split_between_rocksdb_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let o = crate::fixture::server(dir.path());
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        o.write_chunk0(7, 100, &data, None).unwrap(); // spans the inline part and the file part
        let mut out = vec![0xffu8; 3200];
        assert_eq!(o.read_chunk0(7, 0, &mut out).unwrap(), 3100);
        assert!(out[..100].iter().all(|b| *b == 0));
        assert_eq!(&out[100..3100], &data[..]);
        // a write only past the inline part leaves a hole that reads as zeros
        o.write_chunk0(8, 2000, b"tail", None).unwrap();
        let mut out = vec![0xffu8; 2004];
        assert_eq!(o.read_chunk0(8, 0, &mut out).unwrap(), 2004);
        assert!(out[..2000].iter().all(|b| *b == 0));
        assert_eq!(&out[2000..], b"tail");
        // small reads inside the inline part stay short at its end
        let mut out = vec![0u8; 10];
        assert_eq!(o.read_chunk0(8, 0, &mut out).unwrap(), 0);
        o.drop_local_chunks(7, 0).unwrap();
        let mut out = vec![0u8; 100];
        assert_eq!(o.read_chunk0(7, 2000, &mut out).unwrap(), 0);
        // the size is published with a small write (one batch) and after a split one
        let a = Attr {
            id: 9,
            mode: S_IFREG | 0o644,
            nlink: 1,
            chunk_size: 4096,
            ..Default::default()
        };
        o.meta.insert("/s", &a, b"").unwrap();
        o.write_chunk0(9, 0, b"small", Some("/s")).unwrap();
        assert_eq!(o.meta.get("/s").unwrap().unwrap().size, 5);
        o.write_chunk0(9, 500, &data, Some("/s")).unwrap();
        assert_eq!(o.meta.get("/s").unwrap().unwrap().size, 3500);
        o.write_chunk0(9, 1, b"m", Some("/s")).unwrap(); // never shrinks
        let mut out = vec![0u8; 3500];
        assert_eq!(o.read_chunk0(9, 0, &mut out).unwrap(), 3500);
        assert_eq!(&out[..5], b"small");
        assert_eq!(o.meta.get("/s").unwrap().unwrap().size, 3500);
    }
}
