//! The UCX connections of a server: welcomed and waiting for their hello, or admitted.

use crate::state::leases::Holder;
use crate::who::Who;
use madfs_proto::tag;
use madfs_rpc::Endpoint;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// An admitted connection.
pub struct Conn {
    /// Its id (the tag's connection field).
    pub id: u32,
    pub ep: Rc<Endpoint>,
    /// The word every request of this connection starts with.
    pub secret: u64,
    /// Who it is served as.
    pub who: Arc<Who>,
    /// The lease tick ([`Conns::tick`]) of its last request.
    pub seen: Cell<u32>,
    /// The number ([`Conns::served`]) of its last request.
    pub last: Cell<u64>,
    /// Its requests parked now, and the bytes they hold.
    pub parked: Cell<u32>,
    pub parked_bytes: Cell<usize>,
    /// Closed (said goodbye, lease ran out, stalled, over its limits): nothing more is sent.
    pub dead: Cell<bool>,
    /// The client process it serves, when its hello named one: its leases' callbacks come
    /// here (`crate::state::leases`).
    pub holder: Option<Holder>,
    /// It takes every callback of its holder (`madfs_proto::Hello::listens`).
    pub listens: bool,
}

/// A connection welcomed but not admitted yet.
pub struct Waiting {
    pub ep: Rc<Endpoint>,
    pub nonce: [u8; 32],
    /// What its hello must echo (sent in the welcome, to its endpoint only).
    pub ticket: u64,
}

/// Connections by id. Endpoints are shared through `Rc`: async-ucx closes an endpoint when
/// any `Endpoint` value of it is dropped.
pub struct Conns {
    /// Lease clock: advanced by [`lease_loop`] every quarter lease.
    pub tick: Cell<u32>,
    /// Requests received (numbers each connection's last, [`Conn::last`]).
    pub served: Cell<u64>,
    pub map: RefCell<HashMap<u32, Rc<Conn>>>,
    pub waiting: RefCell<HashMap<u32, Waiting>>,
    pub stats: Arc<crate::stats::ServerStats>,
}

impl Conns {
    /// A new connection, waiting for its hello (which must echo `ticket`): its id, a random
    /// one (ids are not handed out in order: a process cannot guess whose comes next).
    /// `None` if no free id was found (a table near `tag::MAX_CONN` entries).
    pub fn insert(&self, ep: Rc<Endpoint>, nonce: [u8; 32], ticket: u64) -> Option<u32> {
        for _ in 0..64 {
            let r = madfs_auth::random_u64().ok()? as u32;
            let id = r % tag::MAX_CONN + 1;
            if self.map.borrow().contains_key(&id) {
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(v) =
                self.waiting.borrow_mut().entry(id)
            {
                v.insert(Waiting { ep, nonce, ticket });
                return Some(id);
            }
        }
        None
    }

    /// The waiting connection `id`, taken out of the table if `hello` (its encoded hello)
    /// names it and echoes its ticket; else it stays (that hello was not its own).
    pub fn take_waiting(&self, id: u32, hello: &[u8]) -> Option<Waiting> {
        let h: madfs_proto::Hello<'_> = std::panic::catch_unwind(|| flexbuffers::from_slice(hello))
            .ok()?
            .ok()?;
        let mut waiting = self.waiting.borrow_mut();
        let w = waiting.get(&id)?;
        if h.conn != id || h.ticket != w.ticket {
            return None;
        }
        waiting.remove(&id)
    }

    /// Admits waiting connection `id`.
    pub fn admit(
        &self,
        id: u32,
        ep: Rc<Endpoint>,
        secret: u64,
        who: Who,
        (holder, listens): (u64, bool),
    ) {
        // (a server's connection keeps nothing)
        let holder = (holder != 0 && who.role != madfs_proto::Role::Peer)
            .then_some(Holder { holder, conn: id });
        let mut map = self.map.borrow_mut();
        map.insert(
            id,
            Rc::new(Conn {
                id,
                ep,
                secret,
                who: Arc::new(who),
                seen: Cell::new(self.tick.get()),
                last: Cell::new(0),
                parked: Cell::new(0),
                parked_bytes: Cell::new(0),
                dead: Cell::new(false),
                listens: listens && holder.is_some(),
                holder,
            }),
        );
        self.stats.live_connections.store(map.len() as u64, Relaxed);
    }

    /// Where a callback of holder `holder` for a lease connection `took` took goes: the
    /// holder's listening connection when it has one (of the same user as `took`; for a
    /// proxy's `took`, root's or a proxy's: docs/security.md); else the connection that took the
    /// lease and the holder's connection that sent a request last (a thread of that process
    /// that is calling now) — no more, so that an idle thread's queue does not fill with
    /// copies.
    pub fn callback_route(&self, holder: u64, took: u32) -> Vec<Rc<Conn>> {
        let map = self.map.borrow();
        let live = |c: &&Rc<Conn>| c.holder.is_some_and(|h| h.holder == holder) && !c.dead.get();
        let took = map.get(&took).filter(|c| !c.dead.get()).cloned();
        let proxy = |c: &Conn| c.who.role == madfs_proto::Role::Proxy;
        let may_listen = |l: &&Rc<Conn>| {
            took.as_ref().is_some_and(|t| {
                t.who.uid == l.who.uid && proxy(t) == proxy(l)
                    || proxy(t) && (proxy(l) || l.who.uid == 0)
            })
        };
        let listener = map
            .values()
            .filter(live)
            .filter(|c| c.listens)
            .filter(may_listen)
            .max_by_key(|c| c.last.get());
        if let Some(l) = listener {
            return vec![l.clone()];
        }
        let latest = map.values().filter(live).max_by_key(|c| c.last.get());
        let mut v: Vec<Rc<Conn>> = took.iter().cloned().collect();
        if let Some(l) = latest.filter(|l| took.as_ref().is_none_or(|t| t.id != l.id)) {
            v.push(l.clone());
        }
        v
    }

    /// Notes a request of connection `c` (its lease tick, its number).
    pub fn heard(&self, c: &Conn) {
        c.seen.set(self.tick.get());
        let n = self.served.get() + 1;
        self.served.set(n);
        c.last.set(n);
    }

    /// Admitted connection `id`, if `secret` is its secret (else counted as forged).
    pub fn check(&self, id: u32, secret: u64) -> Option<Rc<Conn>> {
        match self.map.borrow().get(&id) {
            Some(c) if c.secret == secret => Some(c.clone()),
            _ => {
                self.stats.forged.fetch_add(1, Relaxed);
                None
            }
        }
    }

    pub fn new(stats: Arc<crate::stats::ServerStats>) -> Conns {
        Conns {
            tick: Cell::new(0),
            served: Cell::new(0),
            map: RefCell::default(),
            waiting: RefCell::default(),
            stats,
        }
    }

    pub fn remove(&self, id: u32) -> Option<Rc<Endpoint>> {
        let mut map = self.map.borrow_mut();
        let c = map.remove(&id);
        self.stats.live_connections.store(map.len() as u64, Relaxed);
        c.map(|c| {
            c.dead.set(true);
            c.ep.clone()
        })
    }

    /// Closes connection `c` at once (a stalled or dead peer, or one over its limits): out of
    /// the table, nothing more sent, its endpoint closed with force, which ends the sends and
    /// receives still posted on it (so their buffers may be reused).
    pub fn kill(&self, c: &Rc<Conn>) {
        if c.dead.replace(true) {
            return;
        }
        {
            let mut map = self.map.borrow_mut();
            if map.get(&c.id).is_some_and(|m| Rc::ptr_eq(m, c)) {
                map.remove(&c.id);
            }
            self.stats.live_connections.store(map.len() as u64, Relaxed);
        }
        self.stats.killed.fetch_add(1, Relaxed);
        force_close(c.ep.clone());
    }

    /// A client said goodbye: forget it and close the endpoint with a flush (a forced close
    /// is undefined behaviour for a peer in error mode `none`); a close that does not finish
    /// in time is forced when the endpoint is dropped.
    pub fn close(&self, id: u32, timeout: Duration) {
        if let Some(ep) = self.remove(id) {
            tokio::task::spawn_local(async move {
                let _ = tokio::time::timeout(timeout, ep.close(false)).await;
            });
        }
    }
}

/// Starts closing `ep` with force now (the close is begun before this returns: sends and
/// receives still posted on it end), and finishes it in a task if it does not complete at
/// once.
pub fn force_close(ep: Rc<Endpoint>) {
    let mut close = Box::pin(async move {
        let _ = ep.close(true).await;
    });
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    if close.as_mut().poll(&mut cx).is_pending() {
        tokio::task::spawn_local(close);
    }
}
