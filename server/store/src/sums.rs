//! Checksummed chunk IO (docs/architecture.md, "Checksums"): every chunk file has a record
//! file beside it with a crc32c per 4 KiB block (format and verification: the
//! `madfs-checksum` crate). Writes update the records in three steps under a lock of the
//! blocks they touch (`{new, old}`, the data, `{new, new}`), so a server killed at any point
//! leaves bytes that match; reads verify whole blocks and answer EIO, with the file id and
//! the byte position in the log, for a block whose bytes match neither value — a lost chunk
//! file, a cut one, a flipped byte — and never zeros.

use madfs_checksum::{blocks, verify, write_crcs, Record, BLOCK, RECORD};
use madfs_proto::{Errno, FsResult};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Blocks locked together: writes of neighbouring records of one file (ior-hard's ranks)
/// meet on a group only while they update it.
const GROUP_BLOCKS: u64 = 16;
const STRIPES: usize = 1024;

/// Striped locks over (file, group of blocks): held exclusively by writers (and truncation)
/// from their first record update to their last, so that two writes of one block never
/// interleave their steps. A reader takes none, unless its first try met a mismatch (a writer
/// may have been between its steps): it then reads again holding the blocks shared, when a
/// mismatch can only be damage.
pub(super) struct Locks {
    stripes: Box<[RwLock<()>]>,
}

impl Default for Locks {
    fn default() -> Self {
        Locks {
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
        }
    }
}

/// Held stripes.
pub(super) enum Held<'a> {
    Shared(#[allow(dead_code)] Vec<RwLockReadGuard<'a, ()>>),
    Alone(#[allow(dead_code)] Vec<RwLockWriteGuard<'a, ()>>),
}

impl Locks {
    /// Locks the groups of blocks `[first, last]` of file `id`, exclusively (writers) or
    /// shared (readers), in stripe order: no deadlock.
    fn lock(&self, id: u64, first: u64, last: u64) -> Held<'_> {
        self.take(id, first, last, false)
    }

    pub(super) fn take(&self, id: u64, first: u64, last: u64, shared: bool) -> Held<'_> {
        let (g0, g1) = (first / GROUP_BLOCKS, last / GROUP_BLOCKS);
        let mut idx: Vec<usize> = if g1 - g0 >= STRIPES as u64 {
            (0..STRIPES).collect()
        } else {
            let base = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20;
            (g0..=g1)
                .map(|g| (base.wrapping_add(g) % STRIPES as u64) as usize)
                .collect()
        };
        idx.sort_unstable();
        idx.dedup();
        let s = &self.stripes;
        if shared {
            Held::Shared(
                idx.into_iter()
                    .map(|i| s[i].read().unwrap_or_else(|e| e.into_inner()))
                    .collect(),
            )
        } else {
            Held::Alone(
                idx.into_iter()
                    .map(|i| s[i].write().unwrap_or_else(|e| e.into_inner()))
                    .collect(),
            )
        }
    }
}

/// `preadv2` of `bufs` at `pos` until they are full or the file ends (with `nowait`: one
/// call, which may come back short). Returns the bytes read.
fn preadv_all(f: &File, bufs: &mut [&mut [u8]], pos: u64, nowait: bool) -> std::io::Result<usize> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut done = 0usize;
    while done < total {
        let mut iov = Vec::with_capacity(bufs.len());
        let mut skip = done;
        for b in bufs.iter_mut() {
            if skip >= b.len() {
                skip -= b.len();
                continue;
            }
            iov.push(libc::iovec {
                iov_base: b[skip..].as_mut_ptr().cast(),
                iov_len: b.len() - skip,
            });
            skip = 0;
        }
        let flags = if nowait { libc::RWF_NOWAIT } else { 0 };
        // SAFETY: every iovec points into a buffer of `bufs`, borrowed mutably for the call.
        let n = unsafe {
            libc::preadv2(
                f.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                (pos + done as u64) as libc::off_t,
                flags,
            )
        };
        match n {
            0 => break,
            n if n > 0 => {
                done += n as usize;
                if nowait {
                    break;
                }
            }
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(done)
}

/// The records of blocks `[first, first + n)` (a short record file: holes).
fn records(sums: &File, first: u64, n: u64, nowait: bool) -> std::io::Result<Vec<u8>> {
    let mut r = vec![0u8; (n * RECORD) as usize];
    let got = preadv_all(sums, &mut [&mut r[..]], first * RECORD, nowait)?;
    if nowait && got < r.len() {
        // a short record file, or not all of it in memory: tell by a blocking read elsewhere
        return Err(std::io::ErrorKind::WouldBlock.into());
    }
    r.truncate(got);
    Ok(r)
}

fn eio(id: u64, block: u64, what: &str) -> Errno {
    tracing::error!(
        "file {id:016x}: chunk file bytes {}..{} {what}: answering EIO",
        block * BLOCK,
        (block + 1) * BLOCK
    );
    Errno::EIO
}

/// Reads `out.len()` bytes of file `id` at `pos` from `data` and checks the whole blocks
/// they lie in. Returns the bytes present (the file may end before); EIO for a block that
/// does not match its record (with `nowait`: `None` for anything but a verified read that
/// needed no disk).
pub(super) fn read(
    data: &File,
    sums: &File,
    locks: &Locks,
    id: u64,
    pos: u64,
    out: &mut [u8],
    nowait: bool,
) -> FsResult<Option<usize>> {
    if out.is_empty() {
        return Ok(Some(0));
    }
    let (first, last) = blocks(pos, out.len() as u64);
    let head_len = (pos - first * BLOCK) as usize;
    let tail_len = ((last + 1) * BLOCK - pos - out.len() as u64) as usize;
    let mut head = [0u8; BLOCK as usize];
    let mut tail = [0u8; BLOCK as usize];
    let want = head_len + out.len() + tail_len;
    let mut _held = None;
    loop {
        let n = {
            let mut bufs = [&mut head[..head_len], &mut *out, &mut tail[..tail_len]];
            match preadv_all(data, &mut bufs, first * BLOCK, nowait) {
                Ok(n) => n,
                Err(_) if nowait => return Ok(None),
                Err(e) => return Err(Errno::from_io(&e)),
            }
        };
        if nowait && n < want {
            return Ok(None);
        }
        let recs = match records(sums, first, last - first + 1, nowait) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(Errno::from_io(&e)),
        };
        let parts: [&[u8]; 3] = [&head[..head_len], out, &tail[..tail_len]];
        match verify(first, last - first + 1, &parts, n, &recs) {
            Ok(()) => return Ok(Some(n.saturating_sub(head_len).min(out.len()))),
            Err(_) if nowait => return Ok(None),
            Err(b) if _held.is_some() => return Err(eio(id, b, "do not match their checksum")),
            Err(_) => _held = Some(locks.take(id, first, last, true)),
        }
    }
}

/// Checks that no block of `[pos, pos + len)` was ever written, for a file whose chunk file
/// is missing: a written block there was lost (EIO), a hole reads as zeros.
pub(super) fn check_lost(sums: Option<&File>, id: u64, pos: u64, len: u64) -> FsResult<()> {
    let Some(sums) = sums else {
        return Ok(());
    };
    let (first, last) = blocks(pos, len);
    let recs = records(sums, first, last - first + 1, false)?;
    for i in 0..=(last - first) {
        if !Record::at(&recs, i as usize).is_hole() {
            return Err(eio(
                id,
                first + i,
                "were written but the chunk file is gone",
            ));
        }
    }
    Ok(())
}

/// Checks mapped bytes (`bytes`, from block `first`, all present in the file) against their
/// records: false for any mismatch (the caller then reads through [`read`], which retries and
/// answers EIO).
pub(super) fn check_mapped(sums: &File, first: u64, bytes: &[u8]) -> bool {
    let n = (bytes.len() as u64).div_ceil(BLOCK);
    match records(sums, first, n, false) {
        Ok(recs) => verify(first, n, &[bytes], bytes.len(), &recs).is_ok(),
        Err(_) => false,
    }
}

/// Bytes of block `b` present in `data` (a short block at the end of the file).
fn block_bytes(data: &File, b: u64, out: &mut [u8; BLOCK as usize]) -> std::io::Result<usize> {
    preadv_all(data, &mut [&mut out[..]], b * BLOCK, false)
}

/// Updates the records of blocks `[first, first + new.len())` around `apply` (which changes
/// the data): `{new, old}` before, `settled(new)` after (or a hole where `holes` says).
fn around(
    sums: &File,
    first: u64,
    new: &[u32],
    holes: impl Fn(u64) -> bool,
    apply: impl FnOnce() -> FsResult<()>,
) -> FsResult<()> {
    let n = new.len() as u64;
    let old = records(sums, first, n, false)?;
    let mut r = Vec::with_capacity((n * RECORD) as usize);
    for (i, c) in new.iter().enumerate() {
        Record {
            cur: *c,
            prev: Record::at(&old, i).current(),
        }
        .put(&mut r);
    }
    sums.write_all_at(&r, first * RECORD)?;
    apply()?;
    r.clear();
    for (i, c) in new.iter().enumerate() {
        if holes(first + i as u64) {
            Record::HOLE.put(&mut r);
        } else {
            Record::settled(*c).put(&mut r);
        }
    }
    sums.write_all_at(&r, first * RECORD)?;
    Ok(())
}

/// Writes `buf` into `data` at `pos`, keeping the records right.
pub(super) fn write(
    data: &File,
    sums: &File,
    locks: &Locks,
    id: u64,
    pos: u64,
    buf: &[u8],
) -> FsResult<()> {
    if buf.is_empty() {
        return Ok(());
    }
    let (first, last) = blocks(pos, buf.len() as u64);
    let _g = locks.lock(id, first, last);
    let end = pos + buf.len() as u64;
    let mut head = [0u8; BLOCK as usize];
    let mut tail = [0u8; BLOCK as usize];
    let head_len = (pos - first * BLOCK) as usize;
    let tail_len = ((last + 1) * BLOCK - end) as usize;
    let hn = if head_len > 0 {
        preadv_all(data, &mut [&mut head[..head_len]], first * BLOCK, false)?
    } else {
        0
    };
    let tn = if tail_len > 0 {
        preadv_all(data, &mut [&mut tail[..tail_len]], end, false)?
    } else {
        0
    };
    let crcs = write_crcs(pos, buf, &head[..hn], &tail[..tn]);
    around(
        sums,
        first,
        &crcs,
        |_| false,
        || Ok(data.write_all_at(buf, pos)?),
    )
}

/// Cuts `data` to `size` bytes (`shrink` does it), keeping the records right: the block
/// holding the new end gets the crc of its remaining bytes, records past it go.
pub(super) fn cut(
    data: &File,
    sums: &File,
    locks: &Locks,
    id: u64,
    size: u64,
    shrink: impl FnOnce() -> FsResult<()>,
) -> FsResult<()> {
    let b = size / BLOCK;
    let keep = size - b * BLOCK;
    // every block from the cut to the end (records included) stays locked until the records
    // are cut too: a write past the cut either comes before (and is cut) or after (and keeps
    // its records)
    let end = (sums.metadata()?.len() / RECORD).max(data.metadata()?.len().div_ceil(BLOCK));
    let _g = locks.lock(id, b, end.max(b));
    if keep == 0 {
        shrink()?;
    } else {
        let mut blk = [0u8; BLOCK as usize];
        let n = block_bytes(data, b, &mut blk)?.min(keep as usize);
        let c = madfs_checksum::block_crc(&blk[..n]);
        let was_hole = Record::at(&records(sums, b, 1, false)?, 0).is_hole();
        let hole = was_hole && c == madfs_checksum::zero_crc();
        around(sums, b, &[c], |_| hole, shrink)?;
    }
    let rec_len = size.div_ceil(BLOCK) * RECORD;
    if sums.metadata()?.len() > rec_len {
        sums.set_len(rec_len)?;
    }
    Ok(())
}

/// Punches `[pos, pos + len)` (inside the file: its size stays) with `punch`, keeping the
/// records right: blocks wholly inside become holes, the partly covered ones get the crc of
/// their remaining bytes.
pub(super) fn punch(
    data: &File,
    sums: &File,
    locks: &Locks,
    id: u64,
    pos: u64,
    len: u64,
    punch: impl FnOnce() -> FsResult<()>,
) -> FsResult<()> {
    if len == 0 {
        return Ok(());
    }
    let (first, last) = blocks(pos, len);
    let end = pos + len;
    let _g = locks.lock(id, first, last);
    let inside = |b: u64| b * BLOCK >= pos && (b + 1) * BLOCK <= end;
    let mut crcs = Vec::with_capacity((last - first + 1) as usize);
    for b in first..=last {
        if inside(b) {
            crcs.push(madfs_checksum::zero_crc());
            continue;
        }
        let mut blk = [0u8; BLOCK as usize];
        let n = block_bytes(data, b, &mut blk)?;
        let s = pos.saturating_sub(b * BLOCK).min(BLOCK) as usize;
        let e = (end - b * BLOCK).min(BLOCK) as usize;
        if s < n {
            blk[s..e.min(n)].fill(0);
        }
        crcs.push(madfs_checksum::block_crc(&blk[..n]));
    }
    around(sums, first, &crcs, inside, punch)
}

/// Blocks checked per read by [`check`].
const CHECK_BLOCKS: u64 = 256;

/// Checks every block of a chunk file (`data`; `None`: missing) against its record file:
/// returns the damaged blocks as (block, what): `missing` (written, past the end of the data
/// or no data), `corrupt` (does not match), `unrecorded` (non-zero data where no write was
/// recorded). A range that shows damage is read again under the block locks, so a write in
/// progress is never reported.
pub(super) fn check(
    data: Option<&File>,
    sums: &File,
    locks: &Locks,
    id: u64,
) -> FsResult<Vec<(u64, &'static str)>> {
    let data_len = match data {
        Some(d) => d.metadata()?.len(),
        None => 0,
    };
    let blocks_n = (sums.metadata()?.len() / RECORD).max(data_len.div_ceil(BLOCK));
    let mut bad = Vec::new();
    let mut buf = vec![0u8; (CHECK_BLOCKS * BLOCK) as usize];
    let mut first = 0;
    while first < blocks_n {
        let n = CHECK_BLOCKS.min(blocks_n - first);
        let mut found = Vec::new();
        for locked in [false, true] {
            let _held = locked.then(|| locks.take(id, first, first + n - 1, true));
            found.clear();
            let got = match data {
                Some(d) => preadv_all(
                    d,
                    &mut [&mut buf[..(n * BLOCK) as usize]],
                    first * BLOCK,
                    false,
                )?,
                None => 0,
            };
            let recs = records(sums, first, n, false)?;
            for i in 0..n {
                let s = (i * BLOCK) as usize;
                let present = got.saturating_sub(s).min(BLOCK as usize);
                let crc = madfs_checksum::block_crc(&buf[s..s + present]);
                let r = Record::at(&recs, i as usize);
                if r.accepts(crc) {
                    continue;
                }
                found.push((
                    first + i,
                    if r.is_hole() {
                        "unrecorded"
                    } else if present == 0 {
                        "missing"
                    } else {
                        "corrupt"
                    },
                ));
            }
            if found.is_empty() {
                break;
            }
        }
        bad.append(&mut found);
        first += n;
    }
    Ok(bad)
}
