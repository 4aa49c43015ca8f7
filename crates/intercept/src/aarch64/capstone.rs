//! The few capstone 4 calls the engine needs (Debian's `libcapstone-dev`, the same version on
//! both architectures). Only the leading fields of `cs_insn` are read, and only of the first
//! instruction returned, so the binding does not depend on the rest of the struct's layout.

use std::ffi::{c_char, c_int, c_uint, c_void};

const CS_ARCH_ARM64: c_int = 1;
const CS_MODE_ARM: c_int = 0;
/// `ARM64_INS_SVC` in capstone 4's `arm64.h`.
const ARM64_INS_SVC: c_uint = 342;

#[repr(C)]
struct CsInsn {
    id: c_uint,
    address: u64,
    size: u16,
    bytes: [u8; 16],
    mnemonic: [c_char; 32],
    op_str: [c_char; 160],
    detail: *mut c_void,
}

#[link(name = "capstone")]
extern "C" {
    fn cs_version(major: *mut c_int, minor: *mut c_int) -> c_uint;
    fn cs_open(arch: c_int, mode: c_int, handle: *mut usize) -> c_int;
    fn cs_close(handle: *mut usize) -> c_int;
    fn cs_disasm(
        handle: usize,
        code: *const u8,
        size: usize,
        address: u64,
        count: usize,
        insn: *mut *mut CsInsn,
    ) -> usize;
    fn cs_free(insn: *mut CsInsn, count: usize);
}

/// An open capstone handle for AArch64.
pub struct Disassembler(usize);

impl Disassembler {
    pub fn new() -> Result<Self, String> {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: plain out-parameters.
        unsafe { cs_version(&mut major, &mut minor) };
        if major != 4 {
            return Err(format!("capstone {major}.{minor} found, 4.x expected"));
        }
        let mut h = 0usize;
        // SAFETY: valid out-parameter.
        let e = unsafe { cs_open(CS_ARCH_ARM64, CS_MODE_ARM, &mut h) };
        if e != 0 {
            return Err(format!("cs_open failed ({e})"));
        }
        Ok(Disassembler(h))
    }

    /// Whether the instruction word `word`, at `address`, disassembles as `svc`.
    pub fn is_svc(&self, word: u32, address: usize) -> bool {
        let bytes = word.to_le_bytes();
        let mut insn: *mut CsInsn = std::ptr::null_mut();
        // SAFETY: 4 readable bytes; capstone allocates `insn`, freed below.
        let n = unsafe { cs_disasm(self.0, bytes.as_ptr(), 4, address as u64, 1, &mut insn) };
        if n == 0 || insn.is_null() {
            return false;
        }
        // SAFETY: capstone returned `n` ≥ 1 instructions at `insn`.
        let ok = unsafe {
            let i = &*insn;
            i.id == ARM64_INS_SVC && i.size == 4 && i.address == address as u64
        };
        // SAFETY: as returned by cs_disasm.
        unsafe { cs_free(insn, n) };
        ok
    }
}

impl Drop for Disassembler {
    fn drop(&mut self) {
        // SAFETY: a handle from cs_open.
        unsafe { cs_close(&mut self.0) };
    }
}
