//! x86_64 engine: the vendored `syscall-intercept` crate. syscall_intercept patches libc in its
//! own constructor; installing only points its hook at [`entry`].

use crate::{call_hook, Error, Installed};
use syscall_intercept::InterceptResult;

/// syscall_intercept's hook: adapts its calling convention to [`crate::Hook`]. Must never
/// unwind (the hook has no panic path, see [`call_hook`]); `C-unwind` only so that no
/// abort-on-unwind shim is generated (see `HookFn`).
#[allow(clippy::too_many_arguments)]
extern "C-unwind" fn entry(
    num: isize,
    a0: isize,
    a1: isize,
    a2: isize,
    a3: isize,
    a4: isize,
    a5: isize,
    result: &mut isize,
) -> InterceptResult {
    let nr = num as i64;
    if nr == libc::SYS_clone3 {
        // syscall_intercept 0.1 cannot follow a clone3 child onto its new stack; glibc falls
        // back to clone, which it handles.
        *result = -(libc::ENOSYS as isize);
        return InterceptResult::Hook;
    }
    match call_hook(nr, &[a0, a1, a2, a3, a4, a5]) {
        Some(v) => {
            *result = v;
            InterceptResult::Hook
        }
        None => InterceptResult::Forward,
    }
}

/// # Safety
/// See [`crate::install`].
pub(crate) unsafe fn install() -> Result<Installed, Error> {
    // SAFETY: a plain extern "C" function with syscall_intercept's hook signature.
    unsafe { syscall_intercept::set_hook_fn(entry) };
    Ok(Installed {
        engine: "syscall_intercept",
        sites: 0,
    })
}
