//! The working directory when it is on the mount: the process's (with the `cwd_host` flag the
//! front's engine reads) and the one a `vfork`/`posix_spawn` child chose for itself before
//! its exec; and the reset of the latter before a new process is cloned.

use crate::conn;
use crate::fdtable;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Mutex;

static CWD: Mutex<Option<String>> = Mutex::new(None);
static CWD_IN: AtomicBool = AtomicBool::new(false);
/// `cwd_host` of [`crate::shared`] is true while relative paths from the working directory
/// are surely host paths: the process is in a host directory and no `vfork` child ever chose
/// one of its own (such a child runs on its parent's memory: from then on the hook judges
/// relative paths, in every thread). The front's interception engine reads it for its fast
/// pass-through.
fn cwd_host() -> &'static AtomicBool {
    &crate::shared().cwd_host
}
/// A `vfork` child chose its own working directory (sticky; see [`cwd_host`]).
static CHILD_CHOSE_CWD: AtomicBool = AtomicBool::new(false);

pub(super) fn set_cwd(p: Option<String>) {
    let mut c = CWD.lock().unwrap_or_else(|e| e.into_inner());
    CWD_IN.store(p.is_some(), Release);
    // SeqCst: a vfork child's `set_child_cwd` in between leaves `false` either way
    cwd_host().store(p.is_none(), SeqCst);
    if CHILD_CHOSE_CWD.load(SeqCst) {
        cwd_host().store(false, SeqCst);
    }
    *c = p;
}

thread_local! {
    /// The working directory a `vfork`/`posix_spawn` child chose for itself (`Some(None)`: a
    /// host directory) before it execs, boxed (null: none). The child runs on its parent
    /// thread's memory, so the process-wide one must stay the parent's; the parent frees this
    /// when it resumes. A raw pointer in a `Cell`: no destructor, so touching it never
    /// registers one, which allocates (the clone hook runs inside `fork`, which holds
    /// malloc's locks: a first touch there deadlocked).
    static CHILD_CWD: Cell<*mut Option<String>> = const { Cell::new(std::ptr::null_mut()) };
}

/// Sets the `vfork` child's own working directory.
pub(super) fn set_child_cwd(dir: Option<String>) {
    CHILD_CHOSE_CWD.store(true, SeqCst);
    cwd_host().store(false, SeqCst);
    let old = CHILD_CWD.with(|c| c.replace(Box::into_raw(Box::new(dir))));
    if !old.is_null() {
        // SAFETY: made by Box::into_raw above and owned by this slot.
        drop(unsafe { Box::from_raw(old) });
    }
}

/// Before a new process (not a thread) is cloned from this thread. Allocates and frees
/// nothing: it runs inside `fork`, with malloc's locks held.
pub(super) fn before_process_clone(flags: u64) {
    // an earlier vfork child's directory must not become the next child's (left behind,
    // not freed)
    CHILD_CWD.with(|c| c.set(std::ptr::null_mut()));
    conn::before_process_clone(flags);
    // the child must share the state of the fds it inherits
    fdtable::share_all();
}

/// The working directory a `vfork` child set for itself, if we are that child.
fn child_cwd() -> Option<Option<String>> {
    let p = CHILD_CWD.with(Cell::get);
    if p.is_null() {
        return None;
    }
    if conn::in_vfork_child() {
        // SAFETY: a live box owned by the slot.
        Some(unsafe { (*p).clone() })
    } else {
        // the parent, resumed after its child's exec or exit
        CHILD_CWD.with(|c| c.set(std::ptr::null_mut()));
        // SAFETY: as above; no longer reachable from the slot.
        drop(unsafe { Box::from_raw(p) });
        None
    }
}

pub(super) fn cwd() -> Option<String> {
    if let Some(c) = child_cwd() {
        return c;
    }
    CWD.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Is the working directory on the mount?
pub(super) fn cwd_in() -> bool {
    if let Some(c) = child_cwd() {
        return c.is_some();
    }
    CWD_IN.load(Acquire)
}
