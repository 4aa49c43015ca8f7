//! Layout of the 64-bit UCX tags.
//!
//! ```text
//!  63..60  kind      REQUEST | FSYNC | REPLY | WELCOME
//!  59..32  conn      connection id the server gave the client (requests)
//!  31..0   seq       per-client call number; the reply comes back with the same seq
//! ```
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
/// Largest connection id.
pub const MAX_CONN: u32 = (1 << 28) - 1;

/// Tag of a request (`kind` is [`REQUEST`] or [`FSYNC`]).
pub fn request(kind: u64, conn: u32, seq: u32) -> u64 {
    kind | ((conn as u64 & MAX_CONN as u64) << 32) | seq as u64
}

/// Tag of the reply to call `seq`.
pub fn reply(seq: u32) -> u64 {
    REPLY | seq as u64
}

/// Tag of the welcome message from server `server`.
pub fn welcome(server: u32) -> u64 {
    WELCOME | server as u64
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
    }
}
