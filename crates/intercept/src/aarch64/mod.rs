//! The aarch64 engine: patches every `svc #0` of libc into a branch to a per-site trampoline.
//!
//! 1. **Find** — libc's executable segments come from `dl_iterate_phdr`; every aligned word
//!    equal to `svc #0` is a candidate and capstone confirms it decodes as `svc` (AArch64
//!    instructions are all 4 bytes and aligned, so a linear disassembly of the segment yields
//!    exactly these words; asking capstone only about them keeps start-up cheap under qemu).
//! 2. **Place** — one block of trampoline memory is mapped within ±128 MiB of libc's text (the
//!    reach of `b`), nearest free address first. If none is within reach, nothing is patched
//!    and [`install`] returns [`Error::OutOfReach`]: the program runs uninstrumented.
//! 3. **Write** — the block starts with the shared handler (`common`, copied from
//!    [`COMMON`]'s template below, with the address of [`hook_entry`] in its literal slot),
//!    followed by one 7-instruction trampoline per site ([`plan::site_trampoline`]).
//! 4. **Patch** — each site's `svc #0` becomes `b trampoline` (one aligned 32-bit store, so a
//!    thread never sees half an instruction), with the text made writable only meanwhile and
//!    the instruction cache cleaned for the written words.
//!
//! The handler saves x0–x18, x30, NZCV, FPSR and q0–q31 (everything the AAPCS lets a Rust
//! function clobber, plus what the kernel would have preserved), calls the hook with a pointer
//! to the saved registers, restores them and returns either to the "answered" or to the
//! "forward" half of the site's trampoline. A forwarded syscall runs from the trampoline with
//! every register and the stack exactly as at the original site, so `clone`/`clone3`/`vfork`
//! children (which start on the instruction after `svc`, perhaps on a new stack) simply branch
//! back into libc. `rt_sigreturn` and restarted syscalls work for the same reason.

mod capstone;

use crate::{call_hook, plan, Error, Installed};
use std::arch::{asm, global_asm};

// The shared handler, position independent; copied into each trampoline block. Frame layout:
// x0..x17 at 0..144, x18/x30 at 144, NZCV/FPSR at 160, q0..q31 at 176..688.
global_asm!(
    ".text",
    ".balign 16",
    ".globl madfs_intercept_common",
    ".hidden madfs_intercept_common",
    ".globl madfs_intercept_common_end",
    ".hidden madfs_intercept_common_end",
    "madfs_intercept_common:",
    "sub sp, sp, #688",
    "stp x0, x1, [sp, #0]",
    "stp x2, x3, [sp, #16]",
    "stp x4, x5, [sp, #32]",
    "stp x6, x7, [sp, #48]",
    "stp x8, x9, [sp, #64]",
    "stp x10, x11, [sp, #80]",
    "stp x12, x13, [sp, #96]",
    "stp x14, x15, [sp, #112]",
    "stp x16, x17, [sp, #128]",
    "stp x18, x30, [sp, #144]",
    "mrs x9, nzcv",
    "mrs x10, fpsr",
    "stp x9, x10, [sp, #160]",
    "add x9, sp, #176",
    "stp q0, q1, [x9, #0]",
    "stp q2, q3, [x9, #32]",
    "stp q4, q5, [x9, #64]",
    "stp q6, q7, [x9, #96]",
    "stp q8, q9, [x9, #128]",
    "stp q10, q11, [x9, #160]",
    "stp q12, q13, [x9, #192]",
    "stp q14, q15, [x9, #224]",
    "stp q16, q17, [x9, #256]",
    "stp q18, q19, [x9, #288]",
    "stp q20, q21, [x9, #320]",
    "stp q22, q23, [x9, #352]",
    "stp q24, q25, [x9, #384]",
    "stp q26, q27, [x9, #416]",
    "stp q28, q29, [x9, #448]",
    "stp q30, q31, [x9, #480]",
    "mov x0, sp",
    "ldr x16, 2f",
    "blr x16",
    "mov x16, x0",
    "add x9, sp, #176",
    "ldp q0, q1, [x9, #0]",
    "ldp q2, q3, [x9, #32]",
    "ldp q4, q5, [x9, #64]",
    "ldp q6, q7, [x9, #96]",
    "ldp q8, q9, [x9, #128]",
    "ldp q10, q11, [x9, #160]",
    "ldp q12, q13, [x9, #192]",
    "ldp q14, q15, [x9, #224]",
    "ldp q16, q17, [x9, #256]",
    "ldp q18, q19, [x9, #288]",
    "ldp q20, q21, [x9, #320]",
    "ldp q22, q23, [x9, #352]",
    "ldp q24, q25, [x9, #384]",
    "ldp q26, q27, [x9, #416]",
    "ldp q28, q29, [x9, #448]",
    "ldp q30, q31, [x9, #480]",
    "ldp x9, x10, [sp, #160]",
    "msr nzcv, x9",
    "msr fpsr, x10",
    "ldp x0, x1, [sp, #0]",
    "ldp x2, x3, [sp, #16]",
    "ldp x4, x5, [sp, #32]",
    "ldp x6, x7, [sp, #48]",
    "ldp x8, x9, [sp, #64]",
    "ldp x10, x11, [sp, #80]",
    "ldp x12, x13, [sp, #96]",
    "ldp x14, x15, [sp, #112]",
    "ldp x18, x30, [sp, #144]",
    "cbnz x16, 1f",
    "ldp x16, x17, [sp, #128]",
    "add sp, sp, #688",
    "ret",
    "1:",
    "ldp x16, x17, [sp, #128]",
    "add sp, sp, #688",
    "add x30, x30, #8",
    "ret",
    ".balign 8",
    "2:",
    ".quad 0",
    "madfs_intercept_common_end:",
);

extern "C" {
    static madfs_intercept_common: u8;
    static madfs_intercept_common_end: u8;
}

/// The handler template as bytes (its last 8 bytes are the literal slot for the hook address).
fn common_template() -> &'static [u8] {
    // SAFETY: two labels of the same global_asm block, start before end, in mapped text.
    unsafe {
        let start = &raw const madfs_intercept_common;
        let end = &raw const madfs_intercept_common_end;
        std::slice::from_raw_parts(start, end as usize - start as usize)
    }
}

/// Called by the shared handler with the saved registers: x0..x5 are the arguments, x8 the
/// syscall number. Returns 0 with the result stored into x0's slot, or 1 to forward.
///
/// # Safety
/// `frame` points to the handler's saved-register frame.
unsafe extern "C" fn hook_entry(frame: *mut u64) -> u64 {
    // SAFETY: the frame holds at least x0..x8.
    let regs = unsafe { &mut *(frame as *mut [u64; 9]) };
    let args = [0, 1, 2, 3, 4, 5].map(|i| regs[i] as isize);
    match call_hook(regs[8] as i64, &args) {
        Some(v) => {
            regs[0] = v as u64;
            0
        }
        None => 1,
    }
}

/// A raw syscall by our own `svc`, which the engine never patches.
///
/// # Safety
/// As for [`crate::raw`].
#[inline]
pub unsafe fn svc(nr: i64, a: [isize; 6]) -> isize {
    // SAFETY: forwarded contract.
    unsafe { madfs_hookabi::raw6(nr, a) }
}

fn errno_of(r: isize) -> i32 {
    if (-4095..0).contains(&r) {
        -r as i32
    } else {
        0
    }
}

/// Makes the instruction cache see the words written to `[start, end)`.
///
/// # Safety
/// The range must be mapped.
unsafe fn sync_icache(start: usize, end: usize) {
    let ctr: u64;
    // SAFETY: CTR_EL0 is readable at EL0 on Linux.
    unsafe { asm!("mrs {}, ctr_el0", out(reg) ctr, options(nomem, nostack)) };
    let dline = 4usize << ((ctr >> 16) & 0xf);
    let iline = 4usize << (ctr & 0xf);
    let mut a = start & !(dline - 1);
    while a < end {
        // SAFETY: clean to the point of unification, a mapped address.
        unsafe { asm!("dc cvau, {}", in(reg) a, options(nostack)) };
        a += dline;
    }
    // SAFETY: barriers.
    unsafe { asm!("dsb ish", options(nostack)) };
    let mut a = start & !(iline - 1);
    while a < end {
        // SAFETY: invalidate the instruction cache line, a mapped address.
        unsafe { asm!("ic ivau, {}", in(reg) a, options(nostack)) };
        a += iline;
    }
    // SAFETY: barriers.
    unsafe { asm!("dsb ish", "isb", options(nostack)) };
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}

/// Executable segments of the loaded object whose name ends in `name`.
pub fn text_of(name: &str) -> Vec<(usize, usize)> {
    struct Acc<'a> {
        name: &'a [u8],
        out: Vec<(usize, usize)>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info and our data pointer.
        let (info, acc) = unsafe { (&*info, &mut *(data as *mut Acc)) };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: a NUL-terminated name from the loader.
        let n = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes();
        let base = n.rsplit(|&c| c == b'/').next().unwrap_or(n);
        if base != acc.name {
            return 0;
        }
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: dlpi_phnum entries at dlpi_phdr.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
                let lo = info.dlpi_addr as usize + ph.p_vaddr as usize;
                acc.out.push((lo, lo + ph.p_memsz as usize));
            }
        }
        1
    }
    let mut acc = Acc {
        name: name.as_bytes(),
        out: Vec::new(),
    };
    // SAFETY: the callback only reads loader data and writes `acc`.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut acc as *mut Acc as *mut libc::c_void) };
    acc.out
}

/// The `svc #0` instructions in `[lo, hi)`, each confirmed by capstone.
///
/// # Safety
/// `[lo, hi)` must be mapped readable.
pub unsafe fn find_sites(lo: usize, hi: usize) -> Result<Vec<usize>, Error> {
    let cs = capstone::Disassembler::new().map_err(Error::Disassembler)?;
    // SAFETY: caller guarantees the range is readable.
    let text = unsafe { std::slice::from_raw_parts(lo as *const u8, hi - lo) };
    Ok(plan::svc_words(text, lo)
        .into_iter()
        .filter(|&a| cs.is_svc(plan::SVC0, a))
        .collect())
}

/// A block of trampolines, kept for the life of the process.
#[derive(Debug)]
pub struct Block {
    pub addr: usize,
    pub len: usize,
}

/// Maps `len` bytes read/write at one of `candidates` that lies within reach of `[lo, hi)`
/// and at least `min_distance` away from it (the kernel may place a mapping elsewhere than
/// asked: the result is checked, not the request).
fn map_near(
    lo: usize,
    hi: usize,
    len: usize,
    candidates: &[usize],
    min_distance: usize,
) -> Result<usize, Error> {
    let mut nearest = 0;
    for &want in candidates {
        // SAFETY: anonymous mapping; MAP_FIXED_NOREPLACE never replaces an existing one.
        let p = unsafe {
            libc::mmap(
                want as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            continue;
        }
        let got = p as usize;
        let distance = if got >= hi {
            got - hi
        } else {
            lo.saturating_sub(got + len)
        };
        if distance >= min_distance && plan::reachable(lo, hi, got, got + len) {
            return Ok(got);
        }
        nearest = got;
        // SAFETY: the mapping we just made.
        unsafe { libc::munmap(p, len) };
    }
    Err(Error::OutOfReach {
        code: lo,
        trampolines: nearest.max(candidates.first().copied().unwrap_or(0)),
    })
}

/// Patches `sites` (all inside `[lo, hi)`) to call the hook. Trampolines go to the nearest
/// free memory at least `min_distance` bytes from the code; if that is out of branch reach,
/// nothing is changed and `OutOfReach` is returned.
///
/// # Safety
/// `sites` must be `svc #0` instructions of mapped code in `[lo, hi)` that no other thread is
/// executing at this moment in a way that a changed word could break (see [`crate::install`]).
pub unsafe fn patch(
    lo: usize,
    hi: usize,
    sites: &[usize],
    min_distance: usize,
) -> Result<Block, Error> {
    let page = page_size();
    let common = common_template();
    let head = common.len().div_ceil(16) * 16;
    let len = (head + sites.len() * plan::SITE_BYTES).div_ceil(page) * page;
    let cands = plan::placements(lo, hi, len, page, min_distance);
    let base = map_near(lo, hi, len, &cands, min_distance)?;

    // Trampolines: the handler, its hook literal, then one block per site.
    let mut code: Vec<u32> = Vec::with_capacity(len / 4);
    code.extend(
        common
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])),
    );
    let lit = common.len() / 4 - 2;
    let entry = hook_entry as *const () as usize as u64;
    code[lit] = entry as u32;
    code[lit + 1] = (entry >> 32) as u32;
    code.resize(head / 4, 0xd503_201f); // nop
    for (i, &s) in sites.iter().enumerate() {
        let at = base + head + i * plan::SITE_BYTES;
        let t = plan::site_trampoline(s, at, base).ok_or(Error::OutOfReach {
            code: s,
            trampolines: at,
        })?;
        code.extend_from_slice(&t);
    }
    // SAFETY: `base` is our fresh read/write mapping of `len` ≥ code bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(code.as_ptr(), base as *mut u32, code.len());
        if libc::mprotect(
            base as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_EXEC,
        ) != 0
        {
            return Err(Error::Os("mprotect trampolines", *libc::__errno_location()));
        }
        sync_icache(base, base + len);
    }

    // The sites: writable only while patching (through our own svc: libc is being changed).
    let (p_lo, p_hi) = (lo / page * page, hi.div_ceil(page) * page);
    let rwx = libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC;
    // SAFETY: libc's own text pages.
    let r = unsafe {
        svc(
            libc::SYS_mprotect,
            [p_lo as isize, (p_hi - p_lo) as isize, rwx as isize, 0, 0, 0],
        )
    };
    if r != 0 {
        return Err(Error::Os("mprotect libc text", errno_of(r)));
    }
    for (i, &s) in sites.iter().enumerate() {
        let at = base + head + i * plan::SITE_BYTES;
        let b = plan::branch(s, at, false).expect("checked by site_trampoline");
        // SAFETY: an aligned word of the text made writable above; one store.
        unsafe { std::ptr::write_volatile(s as *mut u32, b) };
    }
    let rx = libc::PROT_READ | libc::PROT_EXEC;
    // SAFETY: as above.
    let r = unsafe {
        svc(
            libc::SYS_mprotect,
            [p_lo as isize, (p_hi - p_lo) as isize, rx as isize, 0, 0, 0],
        )
    };
    // SAFETY: the patched, mapped text.
    unsafe { sync_icache(p_lo, p_hi) };
    if r != 0 {
        return Err(Error::Os("mprotect libc text", errno_of(r)));
    }
    Ok(Block { addr: base, len })
}

/// Finds libc and patches every syscall site in it.
///
/// # Safety
/// See [`crate::install`].
pub(crate) unsafe fn install() -> Result<Installed, Error> {
    let segs = text_of("libc.so.6");
    if segs.is_empty() {
        return Err(Error::NoLibc);
    }
    // Test knob `MADFS_INTERCEPT_FAR`: put trampolines out of reach, as if libc had been
    // loaded far away.
    let min_distance = if std::env::var_os("MADFS_INTERCEPT_FAR").is_some() {
        1 << 32
    } else {
        0
    };
    let mut total = 0;
    for (lo, hi) in segs {
        // SAFETY: an executable (hence readable) segment of libc.
        let sites = unsafe { find_sites(lo, hi)? };
        // SAFETY: forwarded contract; the sites are libc's svc instructions.
        unsafe { patch(lo, hi, &sites, min_distance)? };
        total += sites.len();
    }
    Ok(Installed {
        engine: "svc-trampolines",
        sites: total,
    })
}
