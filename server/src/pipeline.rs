//! The one door (docs/architecture.md, "One door"): every request a server serves, from any
//! transport (UCX, plain TCP, the fsync tag), passes these steps in this order, here and
//! nowhere else:
//!
//! 1. **authenticate**: the connection's identity was proved at its hello
//!    ([`crate::gate`]); the transport hands it over with the request ([`Call::who`]);
//! 2. **admit**: this server holds every key the request names (a path's server, a file's
//!    home, a chunk's server), or, on a replicated cluster, is the primary of their replica
//!    set in a current map ([`crate::admit`]); else `EREMCHG`;
//! 3. **authorize**: who may send it (clients, or servers only) and the permission its row
//!    names, as the kernel decides it ([`crate::authorize`]);
//! 4. **replay**: a request sent again after a failover is answered from its replay record,
//!    kept per replica set, user and client ([`crate::replica::replay`]);
//! 5. **invalidate**: the leases of client caches on what it changes are called back, and
//!    it waits for their holders ([`crate::state::leases`], [`crate::invalidate`]); no lease is
//!    granted there until it is over;
//! 6. **execute**: its handler ([`crate::handlers`]), once no rename moves what it touches;
//! 7. **replicate**: what it writes is copied to the replica set's secondaries as the store
//!    writes it ([`crate::replica::forward`]) before the answer goes;
//! 8. **reply**: with the capability its row grants.
//!
//! What each request needs at each step is its row of the table ([`crate::table`]).

use crate::handlers::Call;
use crate::replica::{forward, history, replay};
use crate::server::{Answer, Server};
use crate::state::frozen::{Inside, Slots};
use crate::state::leases::Holder;
use crate::table::{self, Grant, Row, Senders};
use crate::who::Who;
use madfs_proto::{
    privs_of, Attr, Errno, FsResult, Request, Role, ACCESS_PRIVS, ACCESS_R, ACCESS_W,
};

/// Serves `req` from `c.who` (see the module documentation).
pub fn serve(s: &Server, c: &mut Call<'_>, req: &Request<'_>) -> FsResult<Answer> {
    // a request id matters only where a request may be sent again to another server
    let (req, once) = match req {
        Request::Once {
            client,
            seq,
            at,
            req: inner,
        } => (&**inner, Some((*client, *seq, *at))),
        r => (r, None),
    };
    let row = table::row(req);
    let who = c.who;
    let (target, rewritten, _inside) = checked(s, who, req, &row)?;
    // in flight from here, in the epoch it was admitted in, whatever it waits for below
    let _flight = forward::flight(target.as_ref(), s.replica.as_ref());
    c.no_leases = target.as_ref().is_some_and(|t| t.rejoining());
    let req = rewritten.as_ref().unwrap_or(req);
    if let Some(e) = s.moving.guard(&row.touches) {
        return Err(e);
    }
    let changes = crate::invalidate::invalidates(req, &row.touches);
    let changes = changes.as_slice();
    // whose change it is: the connection's process, or for another server's news of a
    // directory, the process whose change that was (it forgot what it kept itself)
    let by = match req {
        Request::DirSet { by, .. } if *by != 0 && who.role == Role::Peer => Some(Holder {
            holder: *by,
            conn: 0,
        }),
        _ => c.holder,
    };
    // a change that must wait for callbacks never waits on the net thread (which takes the
    // acknowledgements): the transport runs it again on an IO thread
    if crate::invalidate::on_net_thread() && s.leases.would_call_back(changes, by) {
        crate::invalidate::rerun();
        return Err(Errno::EAGAIN);
    }
    let revocation = crate::invalidate::take_leases(s, changes, by, req.name());
    let admitted = history::enabled().then(history::now_ns);
    let logged = target.as_ref().map(|t| (t.set(), t.epoch()));
    let set = logged.map(|(set, _)| set);
    let _caller = crate::invalidate::Caller::set(c.holder);
    let answer = forward::serving(target, s.replica.as_ref(), &s.peers, || match (once, set) {
        (Some(id), Some(set)) => {
            let took = || s.replica.as_ref().map_or(vec![], |r| r.took_from(set));
            replay::once(&s.meta, set, took, who.uid, id, |note| match note {
                None => (row.handler)(s, c, req),
                Some(note) => replayed(s, c, req, &row, note),
            })
        }
        _ => (row.handler)(s, c, req),
    });
    if let (Ok(_), Some(at), Some((set, epoch))) = (&answer, admitted, logged) {
        if forward::wrote() {
            history::accepted(set, epoch, s.id, at);
        }
    }
    drop(revocation);
    let answer = answer?;
    Ok(match who.role {
        Role::Peer => answer,
        _ => grant(s, who, row.grant, answer),
    })
}

/// Steps 1 to 3 alone, for a read a transport answers itself (from the page cache or a
/// mapping of the chunk file, `crate::net::ucx`): may this server serve `req` from `who`?
pub fn check(s: &Server, who: &Who, req: &Request<'_>) -> FsResult<()> {
    // (a read answered so is not counted in flight past this check: a slot's old owner
    // drops its chunks only a while after the switch, `crate::migrate`)
    checked(s, who, req, &table::row(req)).map(drop)
}

/// Who may send it, admission, authorization: the copies' target (replicated), the
/// request to run instead when the permission check rewrote it, and its count in flight in
/// the slots of its keys.
#[allow(clippy::type_complexity)]
fn checked<'r, 's>(
    s: &'s Server,
    who: &Who,
    req: &Request<'r>,
    row: &Row<'r>,
) -> FsResult<(Option<forward::Target>, Option<Request<'r>>, Inside<'s>)> {
    if row.senders == Senders::Servers && who.role != Role::Peer {
        return Err(Errno::EPERM);
    }
    let (target, inside) = admit(s, who, req, row)?;
    let rewritten = match who.role {
        Role::Peer => None,
        _ => s.authorize(who, &row.perm, req)?,
    };
    Ok((target, rewritten, inside))
}

/// Admission: does this server hold every key of `row` (unreplicated: itself; replicated:
/// the connection's replica set, whose primary it must be in a current map), none of them
/// in a slot frozen for its move? The copies' target when it is a replicated request that
/// may write, and its count in flight.
fn admit<'s>(
    s: &'s Server,
    who: &Who,
    req: &Request<'_>,
    row: &Row<'_>,
) -> FsResult<(Option<forward::Target>, Inside<'s>)> {
    let l = &s.peers.layout();
    let mut slots = Slots::default();
    let target = match &s.replica {
        None => {
            // an unreplicated server serves clients once its map was current (a layout
            // that changed while it was away is known), answers the map itself before
            if s.mapped
                && who.role != Role::Peer
                && !s.node.get().is_some_and(|n| n.ready())
                && row.admit.iter().any(|k| *k != crate::admit::Key::Any)
            {
                return Err(Errno::EAGAIN);
            }
            crate::admit::check(&row.admit, s.id, l, &mut slots)?;
            None
        }
        Some(rep) => {
            crate::admit::check(&row.admit, who.set.unwrap_or(s.id), l, &mut slots)?;
            let target = rep.admit(who, req)?;
            // a set taken back from a server still up: its leases are waited out
            if let Some((at, lag)) = rep.took_over() {
                s.leases.wait_out_since(at, lag);
            }
            target
        }
    };
    let inside = s.frozen.enter(slots).ok_or(Errno::EAGAIN)?;
    Ok((target, inside))
}

pub use crate::invalidate::{mark_net_thread, take_rerun};

/// What the answer grants, as the request's row says: a capability for the file it names.
/// A write capability of a set-id file given to anyone but root says so
/// ([`ACCESS_PRIVS`]): its holder clears the bits before it writes (`DropPrivs`), as the
/// kernel does before a write.
fn grant(s: &Server, who: &Who, g: Grant, answer: Answer) -> Answer {
    let key = s.peers.key();
    let cap = |a: &Attr, access: u32| {
        // a symbolic link is never opened for its data (its target: `Readlink`)
        if a.is_link() {
            return madfs_proto::Cap::default();
        }
        let mut access = access;
        if who.uid != 0 && access & ACCESS_W != 0 && privs_of(a.mode) != 0 {
            access |= ACCESS_PRIVS;
        }
        crate::cap::grant(key, a.id, access, who.uid)
    };
    match (g, answer) {
        (Grant::Open(access), Answer::Attr(a)) => Answer::Granted(a, cap(&a, access)),
        (
            Grant::Create(access),
            Answer::Created {
                attr,
                existed,
                old_size,
                ..
            },
        ) => Answer::Created {
            attr,
            existed,
            old_size,
            cap: cap(&attr, if existed { access } else { ACCESS_R | ACCESS_W }),
        },
        // (with its set-id bits cleared, or a truncate's: the bytes past the size on the
        // other servers go with it)
        (Grant::Write, Answer::Attr(a)) => {
            Answer::Granted(a, crate::cap::grant(key, a.id, ACCESS_W, who.uid))
        }
        (_, answer) => answer,
    }
}

/// The answer to `req`, sent again after it was applied (its replay record noted `note`):
/// what it answered then, and the notices to other servers it may not have finished sending.
fn replayed(
    s: &Server,
    c: &mut Call<'_>,
    req: &Request<'_>,
    row: &Row<'_>,
    note: replay::Note,
) -> FsResult<Answer> {
    use replay::Note;
    match (note, req) {
        // the file it made, opened as it was then (a capability, an open reference)
        (Note::Created(_), Request::Create { .. }) => {
            let mut again = req.clone();
            if let Request::Create { excl, trunc, .. } = &mut again {
                (*excl, *trunc) = (false, false);
            }
            match (row.handler)(s, c, &again)? {
                Answer::Created {
                    attr,
                    old_size,
                    cap,
                    ..
                } => Ok(Answer::Created {
                    attr,
                    existed: false,
                    old_size,
                    cap,
                }),
                a => Ok(a),
            }
        }
        (Note::Created(attr), _) => Ok(Answer::Created {
            attr,
            existed: false,
            old_size: 0,
            cap: Default::default(),
        }),
        (Note::Attr(a), Request::Mkdir { path, .. }) => {
            s.dir_changed(path, Some(&a))?;
            Ok(Answer::Attr(a))
        }
        (Note::Attr(a), Request::Rmdir { path }) => {
            let _ = s.dir_changed(path, None);
            Ok(Answer::Attr(a))
        }
        (Note::Attr(a), _) => Ok(Answer::Attr(a)),
        (Note::Offset(o), _) => Ok(Answer::Offset(o)),
        (Note::Renamed, Request::Rename { from, .. }) => s.renamed_again(from),
        (Note::Renamed, _) => Err(Errno::EPROTO),
        (Note::Again, _) => (row.handler)(s, c, req),
    }
}
