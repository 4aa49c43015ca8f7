//! MUNGE credentials (https://dun.github.io/munge/) through the system's `libmunge.so.2`,
//! loaded with dlopen(3) the first time it is needed: key-mode clusters, and builds for
//! machines without MUNGE, need no libmunge at all.
//!
//! A client encodes a credential whose payload is the server's challenge; the server decodes
//! it with its own munged, which checks the MAC, the time to live and that the credential was
//! not used before (`EMUNGE_CRED_REPLAYED`), and learns the uid and gid of the process that
//! made it. `MADFS_MUNGE_SOCKET` names a munged socket other than the default one (tests run
//! their own daemon).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

type Ctx = *mut c_void;

/// The entry points of libmunge we use.
struct Lib {
    ctx_create: unsafe extern "C" fn() -> Ctx,
    ctx_destroy: unsafe extern "C" fn(Ctx),
    ctx_set: unsafe extern "C" fn(Ctx, c_int, ...) -> c_int,
    encode: unsafe extern "C" fn(*mut *mut c_char, Ctx, *const c_void, c_int) -> c_int,
    decode: unsafe extern "C" fn(
        *const c_char,
        Ctx,
        *mut *mut c_void,
        *mut c_int,
        *mut libc::uid_t,
        *mut libc::gid_t,
    ) -> c_int,
    strerror: unsafe extern "C" fn(c_int) -> *const c_char,
}

// SAFETY: the struct holds plain function pointers into a library that is never unloaded.
unsafe impl Send for Lib {}
// SAFETY: as above; libmunge's functions are thread-safe given one context per call.
unsafe impl Sync for Lib {}

/// `MUNGE_OPT_SOCKET` of munge.h.
const OPT_SOCKET: c_int = 8;
/// `EMUNGE_CRED_REPLAYED` of munge.h.
const CRED_REPLAYED: c_int = 17;

fn lib() -> Result<&'static Lib, String> {
    static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Lib, String> {
    let name = c"libmunge.so.2";
    // SAFETY: dlopen with a NUL-terminated name; the handle is kept for the process's life.
    let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err("MUNGE: libmunge.so.2 not found (install the munge package)".into());
    }
    let sym = |s: &CStr| -> Result<*mut c_void, String> {
        // SAFETY: `h` is a live handle and `s` NUL-terminated.
        let p = unsafe { libc::dlsym(h, s.as_ptr()) };
        if p.is_null() {
            Err(format!("MUNGE: libmunge.so.2 lacks {s:?}"))
        } else {
            Ok(p)
        }
    };
    // SAFETY: each symbol is the libmunge function of that name, whose C signature (munge.h,
    // libmunge 0.5) is the pointer type it is transmuted to.
    unsafe {
        Ok(Lib {
            ctx_create: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> Ctx>(sym(
                c"munge_ctx_create",
            )?),
            ctx_destroy: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Ctx)>(sym(
                c"munge_ctx_destroy",
            )?),
            ctx_set: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(Ctx, c_int, ...) -> c_int,
            >(sym(c"munge_ctx_set")?),
            encode: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut *mut c_char, Ctx, *const c_void, c_int) -> c_int,
            >(sym(c"munge_encode")?),
            decode: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(
                    *const c_char,
                    Ctx,
                    *mut *mut c_void,
                    *mut c_int,
                    *mut libc::uid_t,
                    *mut libc::gid_t,
                ) -> c_int,
            >(sym(c"munge_decode")?),
            strerror: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(c_int) -> *const c_char,
            >(sym(c"munge_strerror")?),
        })
    }
}

/// A munge context, destroyed when dropped.
struct Context<'a> {
    lib: &'a Lib,
    ctx: Ctx,
}

impl<'a> Context<'a> {
    fn new(lib: &'a Lib) -> Result<Context<'a>, String> {
        // SAFETY: plain constructor; NULL means out of memory.
        let ctx = unsafe { (lib.ctx_create)() };
        if ctx.is_null() {
            return Err("MUNGE: cannot create a context".into());
        }
        let c = Context { lib, ctx };
        if let Some(path) = std::env::var_os("MADFS_MUNGE_SOCKET") {
            use std::os::unix::ffi::OsStrExt;
            let path = CString::new(path.as_bytes()).map_err(|_| "MADFS_MUNGE_SOCKET: NUL")?;
            // SAFETY: MUNGE_OPT_SOCKET takes one `const char *`, which libmunge copies.
            let rc = unsafe { (lib.ctx_set)(c.ctx, OPT_SOCKET, path.as_ptr()) };
            if rc != 0 {
                return Err(c.error(rc));
            }
        }
        Ok(c)
    }

    fn error(&self, rc: c_int) -> String {
        // SAFETY: munge_strerror returns a static NUL-terminated string (or NULL).
        let s = unsafe { (self.lib.strerror)(rc) };
        if s.is_null() {
            return format!("MUNGE error {rc}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        format!("MUNGE: {}", unsafe { CStr::from_ptr(s) }.to_string_lossy())
    }
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from munge_ctx_create and is destroyed once.
        unsafe { (self.lib.ctx_destroy)(self.ctx) }
    }
}

/// A credential of this process (its uid and gid) carrying `payload`.
pub fn encode(payload: &[u8]) -> Result<String, String> {
    let lib = lib()?;
    let ctx = Context::new(lib)?;
    let mut cred: *mut c_char = std::ptr::null_mut();
    // SAFETY: `payload` is valid for its length; libmunge allocates `cred` with malloc.
    let rc = unsafe {
        (lib.encode)(
            &mut cred,
            ctx.ctx,
            payload.as_ptr().cast(),
            payload.len() as c_int,
        )
    };
    if rc != 0 || cred.is_null() {
        return Err(ctx.error(rc));
    }
    // SAFETY: a NUL-terminated string from libmunge, freed once after copying.
    let s = unsafe { CStr::from_ptr(cred) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: allocated by libmunge with malloc.
    unsafe { libc::free(cred.cast()) };
    Ok(s)
}

/// What a valid credential says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// User id of the process that made it.
    pub uid: u32,
    /// Its group id.
    pub gid: u32,
    /// The payload it carries.
    pub payload: Vec<u8>,
}

/// Why a credential was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// It was decoded before.
    Replayed,
    /// Anything else (forged, expired, another realm's key, munged unreachable).
    Invalid(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Replayed => f.write_str("MUNGE: replayed credential"),
            Refused::Invalid(s) => f.write_str(s),
        }
    }
}

/// Checks a credential with munged.
pub fn decode(cred: &str) -> Result<Decoded, Refused> {
    let lib = lib().map_err(Refused::Invalid)?;
    let ctx = Context::new(lib).map_err(Refused::Invalid)?;
    let cred =
        CString::new(cred).map_err(|_| Refused::Invalid("MUNGE: NUL in credential".into()))?;
    let mut buf: *mut c_void = std::ptr::null_mut();
    let mut len: c_int = 0;
    let (mut uid, mut gid): (libc::uid_t, libc::gid_t) = (u32::MAX, u32::MAX);
    // SAFETY: every out-pointer is valid; libmunge mallocs `buf` (also on some errors).
    let rc = unsafe {
        (lib.decode)(
            cred.as_ptr(),
            ctx.ctx,
            &mut buf,
            &mut len,
            &mut uid,
            &mut gid,
        )
    };
    let payload = if buf.is_null() {
        Vec::new()
    } else {
        // SAFETY: libmunge wrote `len` bytes at `buf`; freed once after copying.
        let v =
            unsafe { std::slice::from_raw_parts(buf as *const u8, len.max(0) as usize) }.to_vec();
        // SAFETY: allocated by libmunge with malloc.
        unsafe { libc::free(buf) };
        v
    };
    match rc {
        0 => Ok(Decoded { uid, gid, payload }),
        CRED_REPLAYED => Err(Refused::Replayed),
        e => Err(Refused::Invalid(ctx.error(e))),
    }
}

/// Is libmunge installed here?
pub fn available() -> bool {
    lib().is_ok()
}
