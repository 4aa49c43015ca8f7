//! The one errno type of madfs, used on the wire, in the client and in the preload.

use std::fmt;
use std::num::NonZeroI32;

/// A POSIX error number. Never zero, so `Result<T, Errno>` cannot carry "error 0".
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(NonZeroI32);

macro_rules! errnos {
    ($($name:ident),* $(,)?) => {
        impl Errno {
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                pub const $name: Errno = Errno(match NonZeroI32::new(libc::$name) {
                    Some(v) => v,
                    None => panic!("errno constant is zero"),
                });
            )*
        }
    };
}

errnos!(
    EPERM,
    EREMCHG,
    ENXIO,
    EMFILE,
    ENOTTY,
    ENOENT,
    EIO,
    EBADF,
    ENOMEM,
    EACCES,
    EEXIST,
    EXDEV,
    ENOTDIR,
    EISDIR,
    EINVAL,
    EFBIG,
    ENOSPC,
    ESPIPE,
    EROFS,
    EMLINK,
    ERANGE,
    ENAMETOOLONG,
    ENOLCK,
    ENOSYS,
    ENOTEMPTY,
    ELOOP,
    ENOTSUP,
    ENOTCONN,
    ETIMEDOUT,
    EPROTO,
    EOVERFLOW,
    ENODEV,
    EMSGSIZE,
    EAGAIN,
    EFAULT,
    EBUSY,
    ENOEXEC,
    EADDRINUSE,
    ECONNREFUSED,
    ESTALE,
);

impl Errno {
    /// Builds an errno from a raw value; zero or negative values become `EIO`.
    pub fn new(raw: i32) -> Errno {
        match NonZeroI32::new(raw) {
            Some(v) if raw > 0 => Errno(v),
            _ => Errno::EIO,
        }
    }

    /// The positive errno value.
    pub fn raw(self) -> i32 {
        self.0.get()
    }

    /// The value syscall_intercept hooks return: `-errno`.
    pub fn as_neg(self) -> i64 {
        -(self.0.get() as i64)
    }

    /// Maps an I/O error to its errno (EIO when the OS gave none).
    pub fn from_io(err: &std::io::Error) -> Errno {
        err.raw_os_error().map(Errno::new).unwrap_or(Errno::EIO)
    }
}

impl From<std::io::Error> for Errno {
    fn from(err: std::io::Error) -> Errno {
        Errno::from_io(&err)
    }
}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.raw())
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Errno({}: {})",
            self.raw(),
            std::io::Error::from_raw_os_error(self.raw())
        )
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.raw()))
    }
}

impl std::error::Error for Errno {}

/// Result with the madfs errno.
pub type FsResult<T> = Result<T, Errno>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_libc() {
        assert_eq!(Errno::ENOENT.raw(), libc::ENOENT);
        assert_eq!(Errno::ENOENT.as_neg(), -(libc::ENOENT as i64));
        assert_eq!(Errno::new(0), Errno::EIO);
        assert_eq!(Errno::new(-3), Errno::EIO);
        let io: std::io::Error = Errno::EEXIST.into();
        assert_eq!(Errno::from(io), Errno::EEXIST);
    }
}
