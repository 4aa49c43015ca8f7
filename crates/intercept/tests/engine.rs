//! The aarch64 engine on real code: libc patched in this test process, synthetic code pages
//! patched near and far. (x86_64 is covered by the preload's integration tests.)
#![cfg(target_arch = "aarch64")]

use madfs_intercept::{aarch64, install, plan};
use std::arch::asm;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

/// A syscall number the kernel does not have: answered by the hook with `a0 + 1`.
const ANSWERED: i64 = 4000;
/// Another unknown number the hook forwards: the kernel says ENOSYS.
const FORWARDED: i64 = 4001;

static CALLS: AtomicUsize = AtomicUsize::new(0);

fn hook(nr: i64, a: &[isize; 6]) -> Option<isize> {
    if nr == ANSWERED {
        CALLS.fetch_add(1, Relaxed);
        Some(a[0] + 1)
    } else {
        None
    }
}

fn installed() -> usize {
    static SITES: OnceLock<usize> = OnceLock::new();
    // SAFETY: the hook is re-entrant and does not unwind. Test threads may be running libc
    // code while it is patched: each word changes in one store.
    *SITES.get_or_init(|| unsafe { install(hook) }.expect("install").sites)
}

#[test]
fn patched_libc_call_returns_the_hooks_value() {
    let sites = installed();
    assert!(sites > 100, "only {sites} svc sites in libc");
    let before = CALLS.load(Relaxed);
    // SAFETY: syscall() with an unknown number and no pointers.
    let r = unsafe { libc::syscall(ANSWERED as libc::c_long, 41) };
    assert_eq!(r, 42);
    assert!(CALLS.load(Relaxed) > before);
    println!("{sites} sites patched in libc");
}

#[test]
fn other_syscalls_pass_through() {
    installed();
    // SAFETY: unknown syscall number, no pointers.
    let r = unsafe { libc::syscall(FORWARDED as libc::c_long, 1) };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENOSYS)
    );
    // SAFETY: getpid has no arguments.
    assert_eq!(unsafe { libc::getpid() } as isize, unsafe {
        madfs_intercept::raw!(libc::SYS_getpid)
    });
    let dir = std::env::temp_dir().join(format!("madfs-intercept-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("f");
    std::fs::write(&f, b"hello through the trampolines").unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), b"hello through the trampolines");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn threads_are_created_and_use_the_hook() {
    installed();
    let handles: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..2000 {
                    // SAFETY: as above.
                    let r = unsafe { libc::syscall(ANSWERED as libc::c_long, t * 10_000 + i) };
                    assert_eq!(r, t * 10_000 + i + 1);
                }
                // a thread started from a thread: clone through the trampolines again
                std::thread::spawn(move || t).join().unwrap()
            })
        })
        .collect();
    let sum: i64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(sum, (0..8).sum());
}

#[test]
fn fork_child_runs_the_hook_and_exits() {
    installed();
    // SAFETY: the child only makes syscalls and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: unknown syscall; then _exit with what the hook answered.
        let r = unsafe { libc::syscall(ANSWERED as libc::c_long, 6) };
        unsafe { libc::_exit(r as i32) };
    }
    let mut status = 0;
    // SAFETY: our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status));
    assert_eq!(libc::WEXITSTATUS(status), 7);
}

/// A page of code at `want` (or wherever the kernel puts it): `movz x8, #nr; svc #0; ret`.
fn code_page(nr: i64, want: usize) -> usize {
    // SAFETY: a fresh anonymous mapping.
    let p = unsafe {
        libc::mmap(
            want as *mut libc::c_void,
            4096,
            libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let code = [0xd280_0008 | ((nr as u32) << 5), plan::SVC0, 0xd65f_03c0];
    // SAFETY: our page.
    unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), p as *mut u32, 3) };
    p as usize
}

/// Calls the code at `f` with x0 = `a0`, other registers set to known values, and returns
/// x0 after the call, checking that every other register the code does not own came back.
fn call_checked(f: usize, a0: isize) -> isize {
    let r: isize;
    let (mut x1, mut x9, mut x15, mut x17) = (0x1111usize, 0x9999usize, 0x1515usize, 0x1717usize);
    let mut v20 = 2.5f64;
    let (mut v0, mut v7) = (0.25f64, 7.75f64);
    let nzcv: u64;
    // SAFETY: `f` is code ending in `ret`; x8 and x30 are declared clobbered.
    unsafe {
        asm!(
            "mov x10, #0x60000000",
            "msr nzcv, x10",
            "blr {f}",
            "mrs {nzcv}, nzcv",
            f = in(reg) f,
            nzcv = out(reg) nzcv,
            inout("x0") a0 => r,
            inout("x1") x1,
            inout("x9") x9,
            inout("x15") x15,
            inout("x17") x17,
            inout("v0") v0,
            inout("v7") v7,
            inout("v20") v20,
            out("x8") _,
            out("x10") _,
            out("x30") _,
        )
    };
    assert_eq!((x1, x9, x15, x17), (0x1111, 0x9999, 0x1515, 0x1717));
    assert_eq!((v0, v7, v20), (0.25, 7.75, 2.5));
    assert_eq!(nzcv, 0x6000_0000, "condition flags changed");
    r
}

#[test]
fn synthetic_site_near_is_patched_registers_survive() {
    installed();
    let near = code_page(ANSWERED, 0);
    let fwd = code_page(FORWARDED, 0);
    for &p in &[near, fwd] {
        // SAFETY: the svc word of our own code page, which no other thread runs.
        unsafe { aarch64::patch(p, p + 12, &[p + 4], 0) }.expect("patch near");
        // SAFETY: reading our page.
        let w = unsafe { std::ptr::read_volatile((p + 4) as *const u32) };
        assert_eq!(w >> 26, 0b000101, "svc became b");
    }
    assert_eq!(call_checked(near, 99), 100);
    assert_eq!(call_checked(fwd, 99), -(libc::ENOSYS as isize));
}

#[test]
fn code_out_of_branch_reach_is_refused_and_left_alone() {
    installed();
    // Trampolines are forced ≥ 4 GiB away: as if libc had been loaded far from any free
    // memory the engine could get.
    let p = code_page(ANSWERED, 0);
    // SAFETY: our own code page.
    let e = unsafe { aarch64::patch(p, p + 12, &[p + 4], 1 << 32) }.unwrap_err();
    assert!(
        matches!(e, madfs_intercept::Error::OutOfReach { .. }),
        "{e}"
    );
    println!("refused: {e}");
    // SAFETY: reading our page.
    assert_eq!(
        unsafe { std::ptr::read_volatile((p + 4) as *const u32) },
        plan::SVC0
    );
    // untouched: the kernel answers the unknown syscall itself
    assert_eq!(call_checked(p, 1), -(libc::ENOSYS as isize));
}

#[test]
fn libc_text_is_found_and_its_sites_confirmed_by_capstone() {
    let segs = aarch64::text_of("libc.so.6");
    assert!(!segs.is_empty());
    let (lo, hi) = segs[0];
    // SAFETY: libc's mapped text.
    let sites = unsafe { aarch64::find_sites(lo, hi) }.unwrap();
    assert!(sites.iter().all(|&s| (lo..hi).contains(&s) && s % 4 == 0));
}
