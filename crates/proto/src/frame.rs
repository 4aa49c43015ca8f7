//! Frames: what one UCX tag message carries.
//!
//! ```text
//! request:  u64 LE secret | u32 LE header length | u32 LE MAGIC | flexbuffers(Request) | bulk
//! data
//! reply:    i32 LE status (0 or errno) | u32 LE header length | flexbuffers(Reply) | bulk
//! ```
//! The prefix, the header and the bulk data are three slices of one vectored send, so bulk data
//! (a write's payload, a read's result) is never copied into a frame buffer. A read reply has
//! an empty header, so a client can receive its data straight into the caller's buffer with a
//! two-element scatter list (prefix, buffer).
//!
//! The first word of a request, the *connection word*, is the secret the server gave the
//! connection when it admitted it ([`crate::Admission`]); the transport puts it in front of
//! what [`Encoder::request`] makes, and the server takes it off ([`split_conn_word`]) and
//! drops, unanswered, a request whose word is not its connection's.

use crate::{Errno, Reply, Request};
use flexbuffers::FlexbufferSerializer;
use serde::Serialize;

/// Size of both prefixes.
pub const PREFIX: usize = 8;
/// Second word of a request prefix ("mdfs"): catches frames that are not ours.
pub const MAGIC: u32 = u32::from_le_bytes(*b"mdfs");

/// Bytes of the connection word that starts every request message.
pub const CONN_WORD: usize = 8;

/// Splits a request message into its connection word and the frame that follows.
pub fn split_conn_word(msg: &[u8]) -> Option<(u64, &[u8])> {
    let (w, rest) = msg.split_at_checked(CONN_WORD)?;
    Some((u64::from_le_bytes(w.try_into().ok()?), rest))
}

/// A reusable encoder (keeps its flexbuffers buffer between calls).
pub struct Encoder {
    ser: FlexbufferSerializer,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder {
            ser: FlexbufferSerializer::new(),
        }
    }
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Encoder")
    }
}

impl Encoder {
    fn header<T: Serialize>(&mut self, v: &T) -> &[u8] {
        self.ser.reset();
        // Serialising our own plain types into flexbuffers cannot fail.
        v.serialize(&mut self.ser)
            .expect("flexbuffers serialisation of a protocol type");
        self.ser.view()
    }

    /// Prefix and header of a request frame.
    pub fn request(&mut self, req: &Request<'_>) -> ([u8; PREFIX], &[u8]) {
        let hdr = self.header(req);
        let mut prefix = [0u8; PREFIX];
        prefix[..4].copy_from_slice(&(hdr.len() as u32).to_le_bytes());
        prefix[4..].copy_from_slice(&MAGIC.to_le_bytes());
        (prefix, hdr)
    }

    /// Prefix and header of an error reply that carries a [`crate::Refusal`].
    pub fn refusal(&mut self, e: crate::Errno, r: &crate::Refusal) -> ([u8; PREFIX], &[u8]) {
        let hdr = self.header(r);
        let mut prefix = [0u8; PREFIX];
        prefix[..4].copy_from_slice(&e.raw().to_le_bytes());
        prefix[4..].copy_from_slice(&(hdr.len() as u32).to_le_bytes());
        (prefix, hdr)
    }

    /// Prefix and header of a successful reply frame.
    pub fn reply(&mut self, rep: &Reply<'_>) -> ([u8; PREFIX], &[u8]) {
        let hdr = self.header(rep);
        let mut prefix = [0u8; PREFIX];
        prefix[4..].copy_from_slice(&(hdr.len() as u32).to_le_bytes());
        (prefix, hdr)
    }
}

/// A `Read` of at least this many bytes is answered, when it succeeds, by the raw data alone
/// on `tag::reply_data(seq)`: one contiguous message, which UCX can move with a zero-copy
/// rendezvous (cross-memory attach on one host, RDMA across hosts) from the server's buffer
/// into the reader's. A framed reply (prefix + data) is vectored, and UCX moves vectored
/// messages by copying them through bounce buffers on both sides. Errors, and smaller reads,
/// come as framed replies on `tag::reply(seq)`. Over the plain-TCP transport every reply is
/// framed.
pub const RAW_READ_MIN: u32 = 64 << 10;

/// A write of at least this many bytes into one chunk goes as `Request::WriteData` and a
/// separate contiguous data message (zero-copy rendezvous), for the reason given at
/// [`RAW_READ_MIN`].
pub const RAW_WRITE_MIN: usize = 64 << 10;

/// Prefix of a reply that carries only bulk data (a read): status 0, empty header.
pub fn bulk_reply_prefix() -> [u8; PREFIX] {
    [0u8; PREFIX]
}

/// Prefix of an error reply.
pub fn error_prefix(e: Errno) -> [u8; PREFIX] {
    let mut prefix = [0u8; PREFIX];
    prefix[..4].copy_from_slice(&e.raw().to_le_bytes());
    prefix
}

fn split_prefix(frame: &[u8]) -> Result<(u32, u32, &[u8]), Errno> {
    if frame.len() < PREFIX {
        return Err(Errno::EPROTO);
    }
    let a = u32::from_le_bytes(frame[..4].try_into().unwrap());
    let b = u32::from_le_bytes(frame[4..8].try_into().unwrap());
    Ok((a, b, &frame[PREFIX..]))
}

/// Decodes a request frame (zero-copy: strings borrow from `frame`). Returns the request and
/// its bulk data. Any malformed frame gives `EPROTO` or `EINVAL`, never a panic.
pub fn decode_request(frame: &[u8]) -> Result<(Request<'_>, &[u8]), Errno> {
    let (hlen, magic, rest) = split_prefix(frame)?;
    if magic != MAGIC || hlen as usize > rest.len() {
        return Err(Errno::EPROTO);
    }
    let (hdr, bulk) = rest.split_at(hlen as usize);
    // flexbuffers' reader has panicked on malformed input (upstream reports): a panic of
    // the reader is a malformed frame too, never a dead handler
    let req = std::panic::catch_unwind(|| flexbuffers::from_slice(hdr))
        .map_err(|_| Errno::EPROTO)?
        .map_err(|_| Errno::EPROTO)?;
    Ok((req, bulk))
}

/// The [`crate::Refusal`] an error reply carries, if any.
pub fn refusal(frame: &[u8]) -> Option<crate::Refusal> {
    let (status, hlen, rest) = split_prefix(frame).ok()?;
    if status == 0 || hlen == 0 {
        return None;
    }
    let hdr = rest.get(..hlen as usize)?;
    std::panic::catch_unwind(|| flexbuffers::from_slice(hdr))
        .ok()?
        .ok()
}

/// Decodes a reply frame: `Err` for an error reply, else the reply and its bulk data.
pub fn decode_reply(frame: &[u8]) -> Result<(Reply<'_>, &[u8]), Errno> {
    let (status, hlen, rest) = split_prefix(frame)?;
    if status != 0 {
        return Err(Errno::new(status as i32));
    }
    if hlen as usize > rest.len() {
        return Err(Errno::EPROTO);
    }
    let (hdr, bulk) = rest.split_at(hlen as usize);
    if hdr.is_empty() {
        return Ok((Reply::Unit, bulk));
    }
    let rep = flexbuffers::from_slice(hdr).map_err(|_| Errno::EPROTO)?;
    Ok((rep, bulk))
}

/// Status of a reply prefix: `Ok(header length)` or the error it carries.
pub fn reply_status(prefix: &[u8; PREFIX]) -> Result<u32, Errno> {
    let status = i32::from_le_bytes(prefix[..4].try_into().unwrap());
    if status != 0 {
        return Err(Errno::new(status));
    }
    Ok(u32::from_le_bytes(prefix[4..].try_into().unwrap()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Attr, Dirent, SizeMode};

    fn frame(prefix: [u8; 8], hdr: &[u8], bulk: &[u8]) -> Vec<u8> {
        [&prefix[..], hdr, bulk].concat()
    }

    #[test]
    fn request_round_trip_borrows() {
        let mut enc = Encoder::default();
        let reqs = [
            Request::Ping,
            Request::Stat("/a/b"),
            Request::Create {
                path: "/x",
                mode: 0o644,
                uid: 1,
                gid: 2,
                excl: true,
                trunc: false,
                access: 0,
                holder: 7,
            },
            Request::Hold {
                client: 7,
                add: vec![crate::Cap {
                    id: 1,
                    ..Default::default()
                }],
                release: vec![2, 3],
                held: vec![Default::default(); 2],
                gone: false,
            },
            Request::Write {
                id: 42,
                chunk: 0,
                offset: 17,
                chunk_size: 4096,
                size_of: Some("/f"),
                cap: Default::default(),
            },
            Request::SetSize {
                path: "/x",
                size: 99,
                mode: SizeMode::Max,
                id: 5,
            },
            Request::Readdir {
                dir: "/",
                start: u64::MAX,
                max_bytes: 100,
                servers: 0,
            },
        ];
        for req in reqs {
            let (p, h) = enc.request(&req);
            let f = frame(p, h, b"bulk!");
            let (back, bulk) = decode_request(&f).unwrap();
            assert_eq!(back, req);
            assert_eq!(bulk, b"bulk!");
            if let Request::Stat(path) = back {
                // zero-copy: the path points into the frame
                let range = f.as_ptr_range();
                assert!(range.contains(&path.as_ptr()));
            }
        }
    }

    #[test]
    fn reply_round_trip() {
        let mut enc = Encoder::default();
        let rep = Reply::Dirents {
            entries: vec![Dirent {
                hash: 5,
                id: 6,
                kind: crate::S_IFREG,
                name: "f",
            }],
            next: Some(9),
        };
        let (p, h) = enc.reply(&rep);
        let f = frame(p, h, b"");
        assert_eq!(decode_reply(&f).unwrap().0, rep);
        // every field of an attribute blob survives, in every reply that carries one
        let a = Attr {
            id: u64::MAX - 1,
            mode: crate::S_IFREG | 0o640,
            nlink: 3,
            uid: 1000,
            gid: 1001,
            size: 1 << 40,
            chunk_size: 752_128,
            rdev: 0x0f00_0103,
            atime: -5,
            mtime: 1_700_000_000_123_456_789,
            ctime: i64::MIN,
        };
        for rep in [
            Reply::Attr(a),
            Reply::Created {
                attr: a,
                existed: true,
                old_size: 9,
                cap: Default::default(),
            },
            Reply::Replaced(Some(a)),
        ] {
            let (p, h) = enc.reply(&rep);
            let f = frame(p, h, b"");
            assert_eq!(decode_reply(&f).unwrap().0, rep);
        }
        assert_eq!(Attr::from_bytes(&a.to_bytes()), Some(a));
        assert_eq!(Attr::from_bytes(&[0u8; 63]), None);
        // a blob of the wrong length is a protocol error, not a short attribute
        #[derive(serde::Serialize)]
        enum Fake<'a> {
            #[serde(with = "serde_bytes")]
            Attr(&'a [u8]),
        }
        let mut ser = flexbuffers::FlexbufferSerializer::new();
        serde::Serialize::serialize(&Fake::Attr(&[1u8; 63]), &mut ser).unwrap();
        let mut f = frame([0; PREFIX], ser.view(), b"");
        f[4..8].copy_from_slice(&(ser.view().len() as u32).to_le_bytes());
        assert_eq!(decode_reply(&f), Err(Errno::EPROTO));
        let f = frame(error_prefix(Errno::ENOTEMPTY), b"", b"");
        assert_eq!(decode_reply(&f), Err(Errno::ENOTEMPTY));
        let f = frame(bulk_reply_prefix(), b"", b"data");
        assert_eq!(decode_reply(&f).unwrap(), (Reply::Unit, &b"data"[..]));
    }

    #[test]
    fn malformed_frames_are_errors() {
        assert_eq!(decode_request(b"").unwrap_err(), Errno::EPROTO);
        assert_eq!(decode_request(b"\x01\x00").unwrap_err(), Errno::EPROTO);
        let mut huge = u32::MAX.to_le_bytes().to_vec();
        huge.extend_from_slice(&MAGIC.to_le_bytes());
        assert_eq!(decode_request(&huge).unwrap_err(), Errno::EPROTO);
        let mut garbage = 4u32.to_le_bytes().to_vec();
        garbage.extend_from_slice(&MAGIC.to_le_bytes());
        garbage.extend_from_slice(&[0xff, 0x13, 0x77, 0x01]);
        assert_eq!(decode_request(&garbage).unwrap_err(), Errno::EPROTO);
        // every truncation of a valid frame is rejected or decodes, never panics
        let mut enc = Encoder::default();
        let (p, h) = enc.request(&Request::Stat("/some/path"));
        let f = frame(p, h, b"");
        for n in 0..f.len() {
            let _ = decode_request(&f[..n]);
        }
    }
}
