//! The open references of this process (docs/consistency.md, "Open files"): which files it
//! holds open, counted per open description, so that their home servers keep a file whose
//! last name is removed until the last description anywhere is closed.
//!
//! The process picks a random client number ([`holder`]); opens and creates carry it, and the
//! home server counts the reference as it answers (a client opening a file whose entry lives on
//! another server tells the home server itself, see `Client::open_as`). Closes are told lazily:
//! queued here and sent in one `Hold` per server when [`RELEASE_BATCH`] gather, before this
//! process removes or renames a name (so that its own `rm` after `close` frees at once), and
//! with the renewal every [`madfs_proto::HOLD_EVERY_MS`] ([`Client::renew_holds`], which the
//! preload makes on the way of a call when it is due). A forked or exec'd process is a new
//! client: its first flush tells each server everything it holds.

use crate::Client;
use madfs_placement::{home_server, home_slot, Layout};
use madfs_proto::{Cap, FsResult, Request};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// Closes queued before they are sent.
pub const RELEASE_BATCH: usize = 256;

#[derive(Default)]
struct Registry {
    /// The process these counts belong to (a fork child starts over with a new number).
    pid: i32,
    client: u64,
    /// File id → open descriptions of this process naming it, and the capability an open of
    /// it was granted (what names the file to its home server in a `Hold`: a process holds
    /// only what it opened).
    held: HashMap<u64, (u32, Cap)>,
    /// Closes not told yet.
    released: Vec<u64>,
    /// The servers know this client with what it holds (false: a fork child holding what it
    /// inherited, told with its first flush).
    announced: bool,
    /// The home slots ([`home_slot`]) of the files this client opened:
    /// their owners counted its opens.
    homes: std::collections::HashSet<u32>,
    /// The process is exiting: its next flush says so to every server in `homes`.
    gone: bool,
}

static REG: Mutex<Option<Registry>> = Mutex::new(None);

fn random() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom into a local buffer of its length.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    let v = u64::from_le_bytes(b);
    if n == 8 && v != 0 {
        return v;
    }
    // never 0 (no holder): fall back to time and pid
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    // SAFETY: getpid cannot fail.
    (t ^ ((unsafe { libc::getpid() } as u64) << 32)) | 1
}

fn reg() -> MutexGuard<'static, Option<Registry>> {
    let mut g = REG.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() };
    match g.as_mut() {
        Some(r) if r.pid == pid => {}
        Some(r) => {
            // a fork child: the descriptions it inherited are its own now, under a new number
            r.pid = pid;
            r.client = random();
            r.released.clear();
            r.homes.clear();
            r.announced = r.held.is_empty();
        }
        None => {
            *g = Some(Registry {
                pid,
                client: random(),
                announced: true,
                ..Default::default()
            })
        }
    }
    g
}

/// This process's client number (what `holder` fields carry).
pub fn holder() -> u64 {
    reg().as_ref().map_or(0, |r| r.client)
}

/// One more open description of file `id` in this process, whose open was granted `cap`.
pub fn opened(id: u64, cap: Cap) {
    if let Some(r) = reg().as_mut() {
        r.held.entry(id).or_insert((0, cap)).0 += 1;
        r.homes.insert(home_slot(id));
    }
}

/// What a new program image of this process needs to go on as the same client (`exec`):
/// carried in the environment, read by [`continue_image`].
pub fn exec_token() -> String {
    match reg().as_ref() {
        Some(r) => format!("{:x}:{}", r.client, r.announced as u8),
        None => "1".into(),
    }
}

/// A program image started by `exec` with open descriptions: it goes on as the client named
/// by `token` ([`exec_token`]; anything else: a new client, which tells the servers what it
/// holds with its first flush).
pub fn continue_image(token: &str) {
    let mut g = reg();
    let Some(r) = g.as_mut() else {
        return;
    };
    let parsed = token
        .split_once(':')
        .and_then(|(c, a)| Some((u64::from_str_radix(c, 16).ok()?, a == "1")));
    match parsed {
        Some((client, announced)) if client != 0 => {
            r.client = client;
            r.announced = announced;
        }
        _ => r.announced = false,
    }
}

/// An open description of file `id` (granted `cap`) inherited from another program image
/// (`exec`): held from now on.
pub fn inherited(id: u64, cap: Cap) {
    opened(id, cap)
}

/// An open description of file `id` was closed for good in this process. Returns whether the
/// queued closes should be sent now ([`Client::flush_releases`]).
pub fn closed(id: u64) -> bool {
    let mut g = reg();
    let Some(r) = g.as_mut() else {
        return false;
    };
    match r.held.get_mut(&id) {
        Some((n, _)) if *n > 1 => *n -= 1,
        Some(_) => {
            r.held.remove(&id);
        }
        None => return false,
    }
    r.released.push(id);
    r.released.len() >= RELEASE_BATCH
}

/// The process is exiting: every file it holds is released (its next flush tells every
/// server that counted an open of it that it is gone).
pub fn exiting() {
    if let Some(r) = reg().as_mut() {
        for id in std::mem::take(&mut r.held).into_keys() {
            r.homes.insert(home_slot(id));
        }
        for id in std::mem::take(&mut r.released) {
            r.homes.insert(home_slot(id));
        }
        r.gone = true;
    }
}

/// Has this process (a fork child, an exec'd image with inherited descriptions) not told the
/// servers yet what it holds?
pub fn unannounced() -> bool {
    reg().as_ref().is_some_and(|r| !r.announced)
}

/// Does this process hold anything, or owe a server something?
pub fn any() -> bool {
    reg().as_ref().is_some_and(|r| {
        !r.held.is_empty() || !r.released.is_empty() || (r.gone && !r.homes.is_empty())
    })
}

/// Did this process ever hold a file open (so that servers know it)?
pub fn ever() -> bool {
    reg().as_ref().is_some_and(|r| !r.homes.is_empty())
}

/// The `Hold` of each server that needs one: with queued closes, or (`all`) every server
/// holding something of ours, or not yet told of us.
fn due(l: &Layout, all: bool) -> Vec<(u32, u64, Vec<u64>, Vec<Cap>)> {
    let mut g = reg();
    let Some(r) = g.as_mut() else {
        return vec![];
    };
    if r.gone {
        let mut servers: Vec<u32> = r.homes.drain().map(|h| l.owner(h)).collect();
        servers.sort_unstable();
        servers.dedup();
        return servers
            .into_iter()
            .map(|s| (s, r.client, vec![], vec![]))
            .collect();
    }
    let all = all || !r.announced;
    r.announced = true;
    let mut per: HashMap<u32, Vec<u64>> = HashMap::new();
    for id in r.released.drain(..) {
        per.entry(home_server(id, l)).or_default().push(id);
    }
    if all {
        for id in r.held.keys() {
            per.entry(home_server(*id, l)).or_default();
        }
    }
    // every server written to gets the whole list of what we hold there (and is told when
    // this process goes: `homes` has the home slot of every id `opened` counted)
    per.into_iter()
        .map(|(s, release)| (s, r.client, release, held_on(r, s, l)))
        .collect()
}

/// `release` and `held` of one `Hold`, split by their home servers in layout `l`.
fn split(
    l: &Layout,
    client: u64,
    release: Vec<u64>,
    held: Vec<Cap>,
) -> Vec<(u32, u64, Vec<u64>, Vec<Cap>)> {
    let mut per: HashMap<u32, (Vec<u64>, Vec<Cap>)> = HashMap::new();
    for id in release {
        per.entry(home_server(id, l)).or_default().0.push(id);
    }
    for cap in held {
        per.entry(home_server(cap.id, l)).or_default().1.push(cap);
    }
    per.into_iter()
        .map(|(s, (release, held))| (s, client, release, held))
        .collect()
}

/// What `r` holds on server `s` in layout `l`: one capability per open description.
fn held_on(r: &Registry, s: u32, l: &Layout) -> Vec<Cap> {
    let mut list = Vec::new();
    for (id, (k, cap)) in &r.held {
        if home_server(*id, l) == s {
            list.extend(std::iter::repeat_n(*cap, *k as usize));
        }
    }
    list
}

impl Client {
    /// Sends the queued closes (before a removal or rename by this process, and when a batch
    /// is full).
    pub fn flush_releases(&self) -> FsResult<()> {
        self.send_holds(false)
    }

    /// The process is ending: every server that counted an open of it forgets all its
    /// references now (what the preload does at exit; a program using the library calls it
    /// last).
    pub fn goodbye(&self) {
        if ever() {
            exiting();
            self.flush_releases_quietly();
        }
    }

    /// Renews this process's references on every server holding some (every
    /// [`madfs_proto::HOLD_EVERY_MS`]), with the queued closes.
    pub fn renew_holds(&self) -> FsResult<()> {
        self.send_holds(true)
    }

    fn send_holds(&self, all: bool) -> FsResult<()> {
        let mut first = Ok(());
        let gone = reg().as_ref().is_some_and(|r| r.gone);
        let mut todo = due(&self.layout(), all);
        let mut moved = 0;
        while let Some((s, client, release, held)) = todo.pop() {
            let req = Request::Hold {
                client,
                add: vec![],
                release,
                held,
                gone,
            };
            match self.call_server(s, &req) {
                Ok(_) => {}
                // files of it live on other servers now (slots moved): to each its part
                Err(madfs_proto::Errno::EREMCHG) if moved < 4 => {
                    moved += 1;
                    let Request::Hold { release, held, .. } = req else {
                        continue;
                    };
                    todo.extend(split(&self.layout(), client, release, held));
                }
                Err(e) => {
                    tracing::debug!("hold on server {s}: {e}");
                    if first.is_ok() {
                        first = Err(e);
                    }
                }
            }
        }
        first
    }

    /// Tells file `id`'s home server of an open it did not serve itself (the file's entry
    /// lives on another server since a rename), granted `cap`.
    pub(crate) fn hold_elsewhere(&self, id: u64, cap: Cap) -> FsResult<()> {
        let s = home_server(id, &self.layout());
        let (client, held) = {
            let g = reg();
            let Some(r) = g.as_ref() else {
                return Ok(());
            };
            (r.client, held_on(r, s, &self.layout()))
        };
        let req = Request::Hold {
            client,
            add: vec![cap],
            release: vec![],
            held,
            gone: false,
        };
        self.call_server(s, &req).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_batches() {
        let me = holder();
        assert_ne!(me, 0);
        let cap = Cap {
            id: 7,
            ..Default::default()
        };
        opened(7, cap);
        opened(7, cap);
        assert!(any());
        assert!(!closed(7));
        assert!(!closed(99), "never held: nothing to tell");
        let d = due(&Layout::initial(1), false);
        assert_eq!(d, vec![(0, me, vec![7], vec![cap])]);
        assert!(due(&Layout::initial(1), false).is_empty());
        assert_eq!(
            due(&Layout::initial(1), true),
            vec![(0, me, vec![], vec![cap])]
        );
        let mut full = false;
        for _ in 0..RELEASE_BATCH {
            opened(8, cap);
        }
        for _ in 0..RELEASE_BATCH {
            full = closed(8);
        }
        assert!(full);
        let _ = closed(7);
        let _ = due(&Layout::initial(1), false);
        assert!(!any());
    }
}
