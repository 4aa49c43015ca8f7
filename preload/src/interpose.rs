//! Process-wide state that madfs's own code (UCX's, really) may change from inside a syscall
//! of the program — signal dispositions, the alternate signal stack: the program's state
//! must survive the syscall. (`strtok`'s position, the other such state, is kept by the
//! front, `preload/front`: only the preloaded library can define `strtok` for the process.)

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
