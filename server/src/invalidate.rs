//! The pipeline's invalidate step (docs/consistency.md, "The client cache"): what a request
//! makes stale in client caches ([`invalidates`]), the same step for a server's own work
//! ([`invalidate_own`]), and what the request path must know of the thread it runs on (the
//! net thread never waits for callbacks: [`rerun`]) and of the client it serves
//! ([`caller`]). Used by `crate::pipeline` and by `Server::execute` (`crate::table`); it
//! uses neither.

use crate::server::Server;
use crate::state::leases::{Change, Holder};
use crate::touches::Touches;
use madfs_proto::Request;

/// What a request makes stale in client caches: the entries it touches, and everything
/// below those whose mode, owner, name or existence as a directory it may change (also
/// what another server tells of a directory: `DirSet`).
pub(crate) fn invalidates<'r>(req: &Request<'r>, touches: &Touches<'r>) -> Changes<'r> {
    let change = |path, below, attrs| Change { path, below, attrs };
    let entry = |path| change(path, false, false);
    let dir = |path| change(path, true, false);
    let attrs = |path| change(path, false, true);
    let mut out = Changes::default();
    match (*touches, req) {
        (Touches::Nothing | Touches::Looks(_), Request::DirSet { path, .. }) => out.push(dir(path)),
        // a directory's times (its entries changed on other servers)
        (Touches::Nothing, Request::Touch { dir: d, .. }) => out.push(attrs(d)),
        (Touches::Nothing | Touches::Looks(_), _) => {}
        // a mode or owner: the entry's attributes, and what was answered below it
        (Touches::Changes(p), Request::Chmod { .. } | Request::Chown { .. }) => {
            out.push(change(p, true, true))
        }
        // a size, times, set-id bits dropped: attributes only
        (
            Touches::Changes(p),
            Request::SetSize { .. }
            | Request::Append { .. }
            | Request::Utimens { .. }
            | Request::DropPrivs { .. }
            | Request::Write { .. }
            | Request::WriteData { .. }
            | Request::Fsync { .. },
        ) => out.push(attrs(p)),
        (Touches::Changes(p), _) => out.push(entry(p)),
        (Touches::Removes(p), Request::Unlink { .. }) => out.push(entry(p)),
        (Touches::Removes(p), _) => out.push(dir(p)),
        (Touches::Moves { from, to }, _) => {
            out.push(dir(from));
            out.push(dir(to));
        }
        (Touches::Arrives { path, .. }, _) => out.push(dir(path)),
        (Touches::Links { from, to }, _) => {
            out.push(entry(from));
            out.push(entry(to));
        }
    }
    out
}

/// At most two paths (a rename's, a link's), no allocation.
pub(crate) struct Changes<'r> {
    v: [Change<'r>; 2],
    n: usize,
}

impl Default for Changes<'_> {
    fn default() -> Self {
        let none = Change {
            path: "",
            below: false,
            attrs: false,
        };
        Changes { v: [none; 2], n: 0 }
    }
}

impl<'r> Changes<'r> {
    fn push(&mut self, c: Change<'r>) {
        if self.n < 2 && !c.path.is_empty() {
            self.v[self.n] = c;
            self.n += 1;
        }
    }

    pub(crate) fn as_slice(&self) -> &[Change<'r>] {
        &self.v[..self.n]
    }
}

/// The invalidate step of work a server does on its own behalf (`Server::execute`: a step
/// of a rename, a move finished after a restart): leases on what it changes are called back
/// and waited for, as for a client's change (on the net thread, which takes the
/// acknowledgements, it cannot wait: the leases are only taken out).
pub(crate) fn invalidate_own<'s>(
    s: &'s Server,
    req: &Request<'_>,
    touches: &Touches<'_>,
) -> Option<crate::state::leases::Revocation<'s>> {
    take_leases(s, invalidates(req, touches).as_slice(), None, req.name())
}

/// Takes the leases on `changes` out, calls their holders but `by` back and waits for them
/// (counted in the server's stats); on the net thread, which takes the acknowledgements and
/// must not wait, they are only taken out (the pipeline sends its requests that must wait
/// to an IO thread first). What `name` changes is then under way until the revocation goes.
pub(crate) fn take_leases<'s>(
    s: &'s Server,
    changes: &[Change<'_>],
    by: Option<Holder>,
    name: &str,
) -> Option<crate::state::leases::Revocation<'s>> {
    let mut r = s.leases.revoke(changes, by);
    if let Some(r) = r.as_mut().filter(|r| r.must_wait()) {
        if on_net_thread() {
            tracing::debug!("{name}: callbacks not waited for on the net thread");
        } else {
            s.stats.revoked(r.wait());
        }
    }
    r
}

/// The client process whose request this thread serves now (what a server's own requests
/// on its behalf name: `DirSet`'s `by`).
pub(crate) fn caller() -> Option<Holder> {
    CALLER.with(|c| c.get())
}

/// Sets [`caller`] while it lives.
pub(crate) struct Caller(Option<Holder>);

impl Caller {
    pub(crate) fn set(h: Option<Holder>) -> Caller {
        Caller(CALLER.with(|c| c.replace(h)))
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        CALLER.with(|c| c.set(self.0));
    }
}

thread_local! {
    /// The client process of the request being served ([`caller`]).
    static CALLER: std::cell::Cell<Option<Holder>> = const { std::cell::Cell::new(None) };
    /// This thread is the net thread (it must not wait for callbacks).
    static ON_NET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The last request served on this thread must run again on an IO thread.
    static RERUN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as the net thread.
pub fn mark_net_thread() {
    ON_NET.with(|c| c.set(true));
}

pub(crate) fn on_net_thread() -> bool {
    ON_NET.with(|c| c.get())
}

/// Must the request just served on this thread (answered `EAGAIN`) run again on an IO
/// thread, where it may wait for callbacks? Clears the mark.
pub fn take_rerun() -> bool {
    RERUN.with(|r| r.replace(false))
}

/// The request just served on this thread must run again on an IO thread ([`take_rerun`]).
pub(crate) fn rerun() {
    RERUN.with(|r| r.set(true));
}
