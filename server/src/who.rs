//! Who a connection is served as: fixed when its hello is admitted ([`crate::gate`]), never
//! taken from a request.

use madfs_proto::Role;

/// The identity a connection is served as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Every group (primary first), from this server's group database.
    pub groups: Vec<u32>,
    /// A client, or another server of the cluster.
    pub role: Role,
    /// The replica set the connection's requests are for (its hello's; `None`: this
    /// server's own). See docs/redundancy.md.
    pub set: Option<u32>,
}

impl Who {
    /// This server itself (its own user, role `Peer`): work a server does on its own behalf.
    pub fn server() -> &'static Who {
        static ME: std::sync::OnceLock<Who> = std::sync::OnceLock::new();
        ME.get_or_init(|| {
            // SAFETY: plain getters.
            let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
            Who {
                uid,
                gid,
                groups: vec![gid],
                role: Role::Peer,
                set: None,
            }
        })
    }
}

/// Who a squashed root is served as.
pub const SQUASHED: u32 = 65534;
