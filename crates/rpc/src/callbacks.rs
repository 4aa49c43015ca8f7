//! The client side of the cache's callbacks (docs/consistency.md, "The client cache"): a
//! server that granted this process a lease calls it back (tag kind [`tag::CALLBACK`]) on the
//! connection that took it before it acknowledges a change that makes the answer stale. The
//! process has no thread of its own for them: they are taken on the way of its calls (a
//! probe of the worker, no receive posted) and while a call waits, handed to the cache's
//! handler, and acknowledged (tag kind [`tag::RELEASED`]).

use async_ucx::ucp::{Endpoint, Worker};
use madfs_proto::{tag, Callback};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;

/// What forgets what a callback of a server of cluster (id) names (the client cache's).
pub type Handler = fn(u64, &Callback<'_>);

/// An acknowledgement whose send did not complete at once.
type Ack = Pin<Box<dyn Future<Output = ()>>>;

/// The callbacks of one transport.
#[derive(Default)]
pub struct Callbacks {
    /// The process's holder number, told in each hello (0: it keeps nothing).
    holder: Cell<u64>,
    /// The cluster the transport's servers belong to.
    cluster: Cell<u64>,
    handler: Cell<Option<Handler>>,
    /// This transport takes all the holder's callbacks (told in each hello).
    listens: Cell<bool>,
    acks: RefCell<Vec<Ack>>,
}

/// Where an acknowledgement to a server goes: its endpoint, the connection id and secret.
pub struct Route {
    pub ep: Rc<Endpoint>,
    pub conn: u32,
    pub secret: u64,
}

impl Callbacks {
    /// This process keeps answers of cluster `cluster` as holder `holder`; `handler`
    /// forgets what a callback names.
    pub fn set(&self, holder: u64, cluster: u64, handler: Handler) {
        self.holder.set(holder);
        self.cluster.set(cluster);
        self.handler.set(Some(handler));
    }

    /// From the next hello on, this transport asks for every callback of its holder (the
    /// holder's thread that takes them; see `madfs_proto::Hello::listens`).
    pub fn listen(&self) {
        self.listens.set(true);
    }

    /// The holder number to tell in a hello (0: none), and whether the connection listens.
    pub fn holder(&self) -> (u64, bool) {
        if self.handler.get().is_some() {
            (self.holder.get(), self.listens.get())
        } else {
            (0, false)
        }
    }

    /// Takes every callback waiting on `worker` (progressed once first when `progress`),
    /// hands it to the handler and acknowledges it on the route `route` gives for the
    /// server that sent it. Returns how many were taken.
    pub fn take(
        &self,
        worker: &Worker,
        progress: bool,
        route: impl Fn(u32) -> Option<Route>,
    ) -> usize {
        let Some(handler) = self.handler.get() else {
            return 0;
        };
        self.poll_acks();
        if progress {
            worker.progress();
        }
        let mut n = 0;
        while let Some((t, len)) = worker.tag_probe(tag::CALLBACK, tag::KIND_MASK) {
            let mut buf = vec![MaybeUninit::<u8>::uninit(); len.max(1)];
            let got = {
                let mut recv = std::pin::pin!(worker.tag_recv(t, &mut buf));
                let waker = futures::task::noop_waker();
                let mut cx = std::task::Context::from_waker(&waker);
                match recv.as_mut().poll(&mut cx) {
                    Poll::Ready(Ok(got)) => Some(got),
                    // (a probed message is taken at once; anything else is dropped)
                    _ => None,
                }
            };
            let Some(got) = got else {
                break;
            };
            n += 1;
            // SAFETY: UCX wrote `got` bytes (at most the buffer's length).
            let bytes: &[u8] =
                unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), got.min(len)) };
            let cb = std::panic::catch_unwind(|| flexbuffers::from_slice::<Callback<'_>>(bytes));
            let Ok(Ok(cb)) = cb else {
                continue;
            };
            handler(self.cluster.get(), &cb);
            let server = ((t >> 32) & tag::MAX_CONN as u64) as u32;
            if let Some(r) = route(server) {
                self.ack(r, cb.id);
            }
        }
        n
    }

    fn ack(&self, r: Route, id: u64) {
        let mut body = [0u8; 16];
        body[..8].copy_from_slice(&r.secret.to_le_bytes());
        body[8..].copy_from_slice(&id.to_le_bytes());
        let t = tag::request(tag::RELEASED, r.conn, 0);
        let mut send: Ack = Box::pin(async move {
            let _ = r.ep.tag_send(t, &body).await;
        });
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        if send.as_mut().poll(&mut cx).is_pending() {
            self.acks.borrow_mut().push(send);
        }
    }

    /// Polls acknowledgements still being sent.
    fn poll_acks(&self) {
        let mut acks = self.acks.borrow_mut();
        if acks.is_empty() {
            return;
        }
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        acks.retain_mut(|a| a.as_mut().poll(&mut cx).is_pending());
    }
}
