//! `madfs-syscall`: runs one syscall per argument and prints its result, for errno-exact tests
//! of the preload library (GekkoFS's `gkfs.io` idea). Run it under `LD_PRELOAD=libmadfs.so`.
//!
//! Each argument is `op,arg,arg…`; fds opened by `open` are named `#0`, `#1`, … in order.
//! Output: one line per step, `op OK <value>` or `op ERR <ERRNO NAME>`.
//!
//! ```text
//! madfs-syscall mkdir,/madfs/d open,/madfs/d/f,creat+excl+w write,#0,hello lseek,#0,0,set \
//!               read,#0,5 close,#0 rmdir,/madfs/d unlink,/madfs/nope
//! ```

use std::ffi::CString;

fn cs(s: &str) -> CString {
    CString::new(s).expect("no NUL in arguments")
}

fn errno_name(e: i32) -> String {
    let names = [
        (libc::ENOENT, "ENOENT"),
        (libc::EEXIST, "EEXIST"),
        (libc::ENOTDIR, "ENOTDIR"),
        (libc::EISDIR, "EISDIR"),
        (libc::ENOTEMPTY, "ENOTEMPTY"),
        (libc::EBADF, "EBADF"),
        (libc::EINVAL, "EINVAL"),
        (libc::EPERM, "EPERM"),
        (libc::EXDEV, "EXDEV"),
        (libc::ENOLCK, "ENOLCK"),
        (libc::ENODEV, "ENODEV"),
        (libc::ENOTTY, "ENOTTY"),
        (libc::ESPIPE, "ESPIPE"),
        (libc::EBUSY, "EBUSY"),
        (libc::EIO, "EIO"),
        (libc::ENOTCONN, "ENOTCONN"),
        (libc::ENAMETOOLONG, "ENAMETOOLONG"),
        (libc::ENOTSUP, "ENOTSUP"),
        (libc::ERANGE, "ERANGE"),
        (libc::ENXIO, "ENXIO"),
    ];
    names
        .iter()
        .find(|(n, _)| *n == e)
        .map(|(_, s)| s.to_string())
        .unwrap_or_else(|| format!("errno{e}"))
}

fn flags(spec: &str) -> i32 {
    let mut f = 0;
    let mut acc = libc::O_RDONLY;
    for p in spec.split('+') {
        match p {
            "r" => acc = libc::O_RDONLY,
            "w" => acc = libc::O_WRONLY,
            "rw" => acc = libc::O_RDWR,
            "creat" => f |= libc::O_CREAT,
            "excl" => f |= libc::O_EXCL,
            "trunc" => f |= libc::O_TRUNC,
            "append" => f |= libc::O_APPEND,
            "dir" => f |= libc::O_DIRECTORY,
            "cloexec" => f |= libc::O_CLOEXEC,
            "nofollow" => f |= libc::O_NOFOLLOW,
            other => panic!("unknown open flag {other}"),
        }
    }
    f | acc
}

fn main() {
    let mut fds: Vec<i32> = Vec::new();
    let mut code = 0;
    for step in std::env::args().skip(1) {
        let a: Vec<&str> = step.split(',').collect();
        let fd = |s: &str| -> i32 {
            match s.strip_prefix('#') {
                Some(n) => fds[n.parse::<usize>().expect("fd index")],
                None => s.parse().expect("fd number"),
            }
        };
        let num = |i: usize| -> i64 { a.get(i).map(|s| s.parse().expect("number")).unwrap_or(0) };
        // SAFETY: plain libc calls with valid C strings and buffers we own.
        let r: i64 = unsafe {
            match a[0] {
                "open" => {
                    let r = libc::open(
                        cs(a[1]).as_ptr(),
                        flags(a.get(2).copied().unwrap_or("r")),
                        0o644,
                    ) as i64;
                    if r >= 0 {
                        fds.push(r as i32);
                    }
                    r
                }
                "close" => libc::close(fd(a[1])) as i64,
                "write" => libc::write(fd(a[1]), a[2].as_ptr().cast(), a[2].len()) as i64,
                "pwrite" => libc::pwrite(fd(a[1]), a[2].as_ptr().cast(), a[2].len(), num(3)) as i64,
                "read" | "pread" => {
                    let mut buf = vec![0u8; num(2) as usize];
                    let r = if a[0] == "read" {
                        libc::read(fd(a[1]), buf.as_mut_ptr().cast(), buf.len())
                    } else {
                        libc::pread(fd(a[1]), buf.as_mut_ptr().cast(), buf.len(), num(3))
                    } as i64;
                    if r >= 0 {
                        println!("data {}", String::from_utf8_lossy(&buf[..r as usize]));
                    }
                    r
                }
                "lseek" => {
                    let whence = match a.get(3).copied().unwrap_or("set") {
                        "set" => libc::SEEK_SET,
                        "cur" => libc::SEEK_CUR,
                        "end" => libc::SEEK_END,
                        "data" => libc::SEEK_DATA,
                        "hole" => libc::SEEK_HOLE,
                        "bad" => 77,
                        w => panic!("whence {w}"),
                    };
                    libc::lseek(fd(a[1]), num(2), whence)
                }
                "stat" | "lstat" => {
                    let mut st: libc::stat = std::mem::zeroed();
                    let r = if a[0] == "stat" {
                        libc::stat(cs(a[1]).as_ptr(), &mut st)
                    } else {
                        libc::lstat(cs(a[1]).as_ptr(), &mut st)
                    } as i64;
                    if r == 0 {
                        println!("size {} mode {:o}", st.st_size, st.st_mode);
                    }
                    r
                }
                "fstat" => {
                    let mut st: libc::stat = std::mem::zeroed();
                    let r = libc::fstat(fd(a[1]), &mut st) as i64;
                    if r == 0 {
                        println!("size {} mode {:o}", st.st_size, st.st_mode);
                    }
                    r
                }
                "mkdir" => libc::mkdir(cs(a[1]).as_ptr(), 0o755) as i64,
                "rmdir" => libc::rmdir(cs(a[1]).as_ptr()) as i64,
                "unlink" => libc::unlink(cs(a[1]).as_ptr()) as i64,
                "rename" => libc::rename(cs(a[1]).as_ptr(), cs(a[2]).as_ptr()) as i64,
                "truncate" => libc::truncate(cs(a[1]).as_ptr(), num(2)) as i64,
                "ftruncate" => libc::ftruncate(fd(a[1]), num(2)) as i64,
                "dup" => {
                    let r = libc::dup(fd(a[1])) as i64;
                    if r >= 0 {
                        fds.push(r as i32);
                    }
                    r
                }
                "dup2" => libc::dup2(fd(a[1]), num(2) as i32) as i64,
                "fcntl-getfl" => libc::fcntl(fd(a[1]), libc::F_GETFL) as i64,
                "fcntl-lock" => {
                    let mut fl: libc::flock = std::mem::zeroed();
                    fl.l_type = libc::F_WRLCK as i16;
                    libc::fcntl(fd(a[1]), libc::F_SETLK, &fl) as i64
                }
                "fsync" => libc::fsync(fd(a[1])) as i64,
                "access" => libc::access(cs(a[1]).as_ptr(), libc::F_OK) as i64,
                "chdir" => libc::chdir(cs(a[1]).as_ptr()) as i64,
                "getcwd" => {
                    let mut buf = [0u8; 4096];
                    let p = libc::getcwd(buf.as_mut_ptr().cast(), buf.len());
                    if p.is_null() {
                        -1
                    } else {
                        println!("cwd {}", std::ffi::CStr::from_ptr(p).to_string_lossy());
                        0
                    }
                }
                "symlink" => libc::symlink(cs(a[1]).as_ptr(), cs(a[2]).as_ptr()) as i64,
                "link" => libc::link(cs(a[1]).as_ptr(), cs(a[2]).as_ptr()) as i64,
                "mmap" => {
                    let p = libc::mmap(
                        std::ptr::null_mut(),
                        4096,
                        libc::PROT_READ,
                        libc::MAP_SHARED,
                        fd(a[1]),
                        0,
                    );
                    if p == libc::MAP_FAILED {
                        -1
                    } else {
                        0
                    }
                }
                "copy-range" => libc::copy_file_range(
                    fd(a[1]),
                    std::ptr::null_mut(),
                    fd(a[2]),
                    std::ptr::null_mut(),
                    10,
                    0,
                ) as i64,
                "ioctl" => libc::ioctl(fd(a[1]), libc::FIONREAD, &mut 0i32) as i64,
                "readdir" => {
                    let d = libc::opendir(cs(a[1]).as_ptr());
                    if d.is_null() {
                        -1
                    } else {
                        let mut names = vec![];
                        loop {
                            let e = libc::readdir(d);
                            if e.is_null() {
                                break;
                            }
                            names.push(
                                std::ffi::CStr::from_ptr((*e).d_name.as_ptr())
                                    .to_string_lossy()
                                    .into_owned(),
                            );
                        }
                        libc::closedir(d);
                        names.sort();
                        println!("names {}", names.join(" "));
                        names.len() as i64
                    }
                }
                op => panic!("unknown op {op}"),
            }
        };
        if r < 0 {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            println!("{} ERR {}", a[0], errno_name(e));
            code = 1;
        } else {
            println!("{} OK {r}", a[0]);
        }
    }
    std::process::exit(code);
}
