//! Layout of the 64-bit UCX tags.
//!
//! ```text
//!  63..60  kind      REQUEST | FSYNC | REPLY | WELCOME | REQUEST_DATA | HELLO | ADMIT | REPLICATE
//!  59..32  conn      connection id the server gave the client (requests)
//!  31..0   seq       per-client call number; the reply comes back with the same seq
//! ```
//! A tag proves nothing: every request frame starts with the connection's secret (see
//! [`crate::frame::CONN_WORD`]), and the tag of a write's data message hides its sequence
//! number under that secret ([`request_data`]), so another peer can neither make the server
//! act or answer for a connection nor slip bytes into its writes.
//! Servers post receives on `kind` only (mask [`KIND_MASK`]); the connection id in the tag
//! tells the handler which endpoint to answer on. Clients post one exact-tag receive per call
//! (`reply(seq)`), so replies never need a lookup. `fsync` has its own kind so that durable
//! writes never queue behind data requests. `welcome(server)` carries [`crate::Welcome`].

/// Bits that hold the kind.
pub const KIND_MASK: u64 = 0xF << 60;
/// A data/metadata request.
pub const REQUEST: u64 = 1 << 60;
/// An fsync request.
pub const FSYNC: u64 = 2 << 60;
/// A reply.
pub const REPLY: u64 = 3 << 60;
/// A server's welcome message.
pub const WELCOME: u64 = 4 << 60;
/// The data of a `Request::WriteData`, sent after it with the same connection and sequence.
pub const REQUEST_DATA: u64 = 5 << 60;
/// A reply that is the raw data of a large read (see [`crate::frame::RAW_READ_MIN`]): kind
/// `REPLY` plus [`REPLY_DATA_BIT`], so one receive with [`REPLY_ANY_MASK`] takes either.
pub const REPLY_DATA: u64 = 7 << 60;
/// The bit that tells a raw-data reply from a framed one.
pub const REPLY_DATA_BIT: u64 = 4 << 60;
/// Receive mask matching `reply(seq)` and `reply_data(seq)`.
pub const REPLY_ANY_MASK: u64 = !REPLY_DATA_BIT;
/// A client's [`crate::Hello`] (its proof of who it is), on `hello(conn)`.
pub const HELLO: u64 = 6 << 60;
/// A server's [`crate::Admission`], on `admit(server)`.
pub const ADMIT: u64 = 8 << 60;
/// A replicated cluster's copy from a primary to a secondary (`Request::Replicate`): a
/// kind of its own, received by handlers of its own, so that copies are taken even while
/// every request handler waits for copies of its own (servers copying to each other).
pub const REPLICATE: u64 = 9 << 60;
/// A server's call back of leases ([`crate::Callback`]) to a client, on the connection that
/// took them: `callback(server, id)`.
pub const CALLBACK: u64 = 10 << 60;
/// A client's acknowledgement of a callback: `request(RELEASED, conn, 0)`, the frame the
/// connection's secret and the callback's id (two little-endian u64).
pub const RELEASED: u64 = 11 << 60;
/// A server's stall probe to its own worker (taken and dropped by its drain; see
/// `madfs_rpc::probe`).
pub const PROBE: u64 = 15 << 60;
/// Largest connection id.
pub const MAX_CONN: u32 = (1 << 28) - 1;

/// Tag of a callback from `server` (low bits of its id in the sequence field).
pub fn callback(server: u32, id: u64) -> u64 {
    CALLBACK | ((server as u64 & MAX_CONN as u64) << 32) | (id & 0xFFFF_FFFF)
}

/// Tag of a request (`kind` is [`REQUEST`] or [`FSYNC`]).
pub fn request(kind: u64, conn: u32, seq: u32) -> u64 {
    kind | ((conn as u64 & MAX_CONN as u64) << 32) | seq as u64
}

/// Tag of the reply to call `seq`.
pub fn reply(seq: u32) -> u64 {
    REPLY | seq as u64
}

/// Tag of the raw-data reply to request `seq`.
pub fn reply_data(seq: u32) -> u64 {
    REPLY_DATA | seq as u64
}

/// Tag of the welcome message from server `server`.
pub fn welcome(server: u32) -> u64 {
    WELCOME | server as u64
}

/// Tag of the data message of `Request::WriteData` call `seq` on connection `conn` whose
/// secret is `secret`: the sequence number is masked with the secret's high half, so only
/// the connection's owner can make a tag the server will take data from.
pub fn request_data(conn: u32, seq: u32, secret: u64) -> u64 {
    request(REQUEST_DATA, conn, seq ^ (secret >> 32) as u32)
}

/// Tag of a client's hello on connection `conn`.
pub fn hello(conn: u32) -> u64 {
    request(HELLO, conn, 0)
}

/// Tag of server `server`'s answer to the hello of connection `conn` (the connection in the
/// tag: a late answer to a connect given up on is never taken for another's).
pub fn admit(server: u32, conn: u32) -> u64 {
    ADMIT | ((conn as u64 & MAX_CONN as u64) << 32) | server as u64
}

/// Splits a request tag into (kind, conn, seq).
pub fn split(tag: u64) -> (u64, u32, u32) {
    (tag & KIND_MASK, ((tag >> 32) as u32) & MAX_CONN, tag as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let t = request(FSYNC, 12345, 0xdead_beef);
        assert_eq!(split(t), (FSYNC, 12345, 0xdead_beef));
        assert_eq!(reply(7) & KIND_MASK, REPLY);
        assert_eq!(welcome(3), 0x4000_0000_0000_0003);
        assert_eq!(request(REQUEST, 1, 2), 0x1000_0001_0000_0002);
        // one receive for both reply forms, and for nothing else
        let recv = reply(9);
        for (t, hit) in [
            (reply(9), true),
            (reply_data(9), true),
            (reply(8), false),
            (welcome(9), false),
            (request(REQUEST, 0, 9), false),
            (request(FSYNC, 0, 9), false),
            (request(REQUEST_DATA, 0, 9), false),
        ] {
            assert_eq!(t & REPLY_ANY_MASK == recv & REPLY_ANY_MASK, hit, "{t:#x}");
        }
    }
}
