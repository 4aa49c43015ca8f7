//! Process-wide state that madfs's own code (UCX's, really) may change from inside a syscall
//! of the program — `strtok`'s position, signal dispositions, the alternate signal stack: the
//! program's state must survive the syscall.
//!
//! UCX is loaded on first use (a `dlopen` inside the first intercepted syscall on a madfs
//! path), and its library constructor (`ucs_init`) tokenises its configuration and the host
//! name with `strtok`. glibc's `strtok` keeps one position for the whole process, so a
//! program in the middle of a `strtok` loop whose first madfs access sits inside that loop
//! lost its position: io500 builds its data directories by `strtok`-ing the path and
//! `stat`-ing each prefix, and stopped after `/madfs/` (no `ior-easy` directory, then
//! `ENOENT` on every rank's file). libmadfs.so, preloaded, defines `strtok` for the whole
//! process: calls made while a madfs hook runs on the calling thread use a position of
//! their own, every other call the program's, exactly as glibc's `strtok` would.

use std::sync::atomic::{AtomicPtr, Ordering::Relaxed};

/// The program's `strtok` position.
static PROGRAM: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
/// The position of `strtok` calls made inside madfs (UCX's).
static OURS: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

/// `strtok(3)`.
///
/// # Safety
/// As for C's `strtok`: `s` is null or a NUL-terminated string the caller may modify (null:
/// go on in the string of the last call on the same position), `delim` a NUL-terminated
/// string; like glibc's, not for concurrent use by several threads.
#[no_mangle]
pub unsafe extern "C" fn strtok(
    s: *mut libc::c_char,
    delim: *const libc::c_char,
) -> *mut libc::c_char {
    let slot = if crate::entry::in_hook() {
        &OURS
    } else {
        &PROGRAM
    };
    let mut save = slot.load(Relaxed);
    // SAFETY: forwarded contract; `save` is this position's last value (or null, which
    // strtok_r only reads when `s` is null, as strtok would).
    let r = unsafe { libc::strtok_r(s, delim, &mut save) };
    slot.store(save, Relaxed);
    r
}

/// Runs `f` (which may load and start UCX) and then puts back every signal disposition and
/// this thread's alternate signal stack that `f` changed.
///
/// UCX's constructor (`ucs_debug_init`, with its default `UCX_HANDLE_ERRORS=bt`) installs its
/// own handlers for SIGSEGV, SIGBUS, SIGILL and SIGFPE and an alternate signal stack on the
/// loading thread, to print a backtrace when UCX crashes. In a host program that is not ours
/// to do: a program's own SIGSEGV handler (a JVM's null checks, Python's faulthandler, a
/// garbage collector's write barrier) was replaced at its first madfs access, every fault then
/// printed a UCX backtrace before reaching it, and `sigaction` showed UCX's handler. A
/// disposition the program changes on another thread while `f` runs is kept: only signals
/// whose disposition `f` left different from what it found are restored.
pub fn keeping_signal_state<R>(f: impl FnOnce() -> R) -> R {
    let mut before: [Option<libc::sigaction>; 65] = [None; 65];
    for (sig, slot) in before.iter_mut().enumerate().skip(1) {
        *slot = disposition(sig as i32);
    }
    let stack = alt_stack();
    let r = f();
    for (sig, old) in before.iter().enumerate() {
        if let (Some(old), Some(now)) = (old, disposition(sig as i32)) {
            if now.sa_sigaction != old.sa_sigaction || now.sa_flags != old.sa_flags {
                // SAFETY: puts back a disposition the kernel handed out for this signal.
                unsafe { libc::sigaction(sig as i32, old, std::ptr::null_mut()) };
            }
        }
    }
    if let (Some(old), Some(now)) = (stack, alt_stack()) {
        if now.ss_sp != old.ss_sp || now.ss_flags != old.ss_flags {
            // SAFETY: the stack this thread had (its memory, if any, is the program's and
            // still there); fails harmlessly while running on the current one.
            unsafe { libc::sigaltstack(&old, std::ptr::null_mut()) };
        }
    }
    r
}

/// The current disposition of `sig`, or `None` for a number that is not a signal.
fn disposition(sig: i32) -> Option<libc::sigaction> {
    // SAFETY: a null new action only reads the current one into a zeroed struct.
    unsafe {
        let mut a: libc::sigaction = std::mem::zeroed();
        (libc::sigaction(sig, std::ptr::null(), &mut a) == 0).then_some(a)
    }
}

/// This thread's alternate signal stack.
fn alt_stack() -> Option<libc::stack_t> {
    // SAFETY: a null new stack only reads the current one into a zeroed struct.
    unsafe {
        let mut s: libc::stack_t = std::mem::zeroed();
        (libc::sigaltstack(std::ptr::null(), &mut s) == 0).then_some(s)
    }
}
