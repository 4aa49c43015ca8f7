//! What each request does, by family: every handler takes the server, the call (who sent it,
//! its bulk data, the buffer a read fills, the group-commit queue) and the request, and
//! answers it with the errnos the kernel would give. Which handler serves a request, and what
//! must hold before it runs, is the table's (`crate::table`); handlers never decide a
//! permission or an admission again.

pub mod attributes;
pub mod control;
pub mod data;
pub mod directories;
pub mod entries;
pub mod links;
pub mod open_files;
pub mod rename;

use crate::sync::SyncSender;
use crate::who::Who;

/// One request's call: who sent it and what came with it.
pub struct Call<'a> {
    /// Who the connection is served as.
    pub who: &'a Who,
    /// The request's data (a write's bytes).
    pub bulk: &'a [u8],
    /// Where a read puts its bytes.
    pub data: &'a mut [u8],
    /// The group-commit sync threads (an fsync on an unreplicated cluster queues there).
    pub sync: Option<&'a SyncSender>,
    /// The client process the connection serves, if it may be given leases (a UCX
    /// connection whose hello named a holder): `crate::state::leases`.
    pub holder: Option<crate::state::leases::Holder>,
    /// No lease is granted with this request's answer (a replicated set with a rejoining
    /// member: `crate::replica::forward::Target::rejoining`).
    pub no_leases: bool,
}

impl<'a> Call<'a> {
    /// Whom a lease may be granted to with this request's answer.
    pub fn lease_holder(&self) -> Option<crate::state::leases::Holder> {
        self.holder.filter(|_| !self.no_leases)
    }

    /// A call the server makes of itself (its own identity, no data).
    pub fn own(who: &'a Who) -> Call<'a> {
        Call {
            who,
            bulk: &[],
            data: &mut [],
            sync: None,
            holder: None,
            no_leases: false,
        }
    }
}
