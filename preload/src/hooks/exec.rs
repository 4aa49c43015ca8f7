//! The end of a process image: `execve`/`execveat` (carrying a madfs working directory and
//! fds into the new image, running programs stored on the mount from a copy) and, before
//! the image goes away (exec, exit), publishing sizes ([`flush_all`]) and releasing the
//! files held open ([`release_all`]).

use super::common::{cstr, neg, raw_res, raw_unit, slice_mut, Ret};
use super::cwd::{cwd, cwd_in};
use super::desc::publish;
use super::follow::stat_links_with;
use super::paths::{empty_path, mount, target, Target};
use crate::conn;
use crate::fdtable;
use crate::path::external;
use madfs_client::FileSystem;
use madfs_hookabi::raw;
use madfs_hookabi::{CWD_ENV, FDS_ENV};
use madfs_proto::{Attr, Errno, FsResult};
use std::ffi::CStr;

/// Publishes every dirty description before the process image goes away.
pub(crate) fn flush_all() {
    for d in fdtable::all() {
        let _ = publish(&d);
    }
}

/// The process is exiting: the files it holds open are released at once (rather than when
/// its lease runs out), so that one unlinked meanwhile is dropped now.
pub(crate) fn release_all() {
    if !madfs_client::hold::ever() || conn::in_vfork_child() {
        return;
    }
    let _ = conn::with(|c| {
        c.goodbye();
        Ok(())
    });
}

/// `execve`: carries a madfs working directory into the new image (`MADFS_CWD`), removing a
/// stale one. Leaves the call alone when neither applies.
pub(super) fn sys_execve(path: isize, argv: isize, envp: isize, extra: Option<(i64, i64)>) -> Ret {
    let (dirfd, at_flags) = extra.unwrap_or((libc::AT_FDCWD as i64, 0));
    // a program stored on the mount: the kernel cannot open it, we run a copy
    let exe = if empty_path(path, at_flags) && fdtable::is_ours(dirfd) {
        match fdtable::get(dirfd) {
            Some(d) => Some(d.path().to_owned()),
            None => return Some(neg(Errno::EBADF)),
        }
    } else {
        match target(dirfd, path) {
            Target::External => None,
            Target::Fail(e) => return Some(neg(e)),
            Target::Ours(p) => Some(p),
        }
    };
    // a vfork/posix_spawn child shares our memory: it changes nothing shared and talks to no
    // server (what it allocates here stays behind in the parent's heap, a few hundred bytes)
    let vfork = conn::in_vfork_child();
    if !vfork {
        // the new image finds the state of inherited fds in their memfds
        fdtable::share_all();
    }
    let is = |s: &[u8], key: &str| {
        let key = key.as_bytes();
        s.len() > key.len() && s.starts_with(key) && s[key.len()] == b'='
    };
    let (mut has_cwd, mut has_fds) = (false, false);
    let mut n = 0usize;
    if envp != 0 {
        // SAFETY: envp is a NULL-terminated array of C strings.
        unsafe {
            let mut p = envp as *const *const libc::c_char;
            while !(*p).is_null() {
                let s = CStr::from_ptr(*p).to_bytes();
                has_cwd |= is(s, CWD_ENV);
                has_fds |= is(s, FDS_ENV);
                n += 1;
                p = p.add(1);
            }
        }
    }
    let cwd_in = cwd_in();
    // a vfork child's madfs fds are its parent's (posix_spawn's dup2s happen in the kernel
    // only): any fd of the process may be one the new image inherits
    let fds = !fdtable::is_empty();
    if exe.is_none() && !cwd_in && !has_cwd && fds == has_fds {
        return None;
    }
    if !vfork {
        flush_all();
    }
    let mut owned: Vec<std::ffi::CString> = Vec::new();
    let mut ptrs: Vec<*const libc::c_char> = Vec::with_capacity(n + 3);
    if envp != 0 {
        // SAFETY: as above.
        unsafe {
            let mut p = envp as *const *const libc::c_char;
            while !(*p).is_null() {
                let s = CStr::from_ptr(*p).to_bytes();
                if !is(s, CWD_ENV) && !is(s, FDS_ENV) {
                    ptrs.push(*p);
                }
                p = p.add(1);
            }
        }
    }
    if cwd_in {
        if let Some(c) = cwd() {
            if let Ok(s) = std::ffi::CString::new(format!("{CWD_ENV}={c}")) {
                owned.push(s);
            }
        }
    }
    if fds {
        // the new image goes on as this process's client (its open references are ours);
        // a vfork child's image is a client of its own (the parent keeps its fds too)
        let token = if vfork {
            "1".to_string()
        } else {
            madfs_client::hold::exec_token()
        };
        if let Ok(s) = std::ffi::CString::new(format!("{FDS_ENV}={token}")) {
            owned.push(s);
        }
    }
    ptrs.extend(owned.iter().map(|s| s.as_ptr()));
    ptrs.push(std::ptr::null());
    let env = if envp == 0 { 0 } else { ptrs.as_ptr() as isize };
    if let Some(exe) = exe {
        if vfork {
            // no client may be made or used here: a shell, a normal process, runs it for us
            return Some(exec_through_shell(&exe, argv, env));
        }
        // SAFETY: a C string (the target resolved it).
        let given = unsafe { cstr(path) }.unwrap_or_default();
        // SAFETY: the caller's argv; `env` is NULL-terminated and outlives the call.
        return Some(unsafe { exec_file(&exe, given, argv, env, 0) });
    }
    // SAFETY: execve with the caller's path/argv and our NULL-terminated envp.
    let r = crate::entry::exec_outside_hook(|| unsafe {
        match extra {
            None => raw!(
                libc::SYS_execve as isize,
                path,
                argv,
                ptrs.as_ptr() as isize,
            ),
            Some((dirfd, flags)) => raw!(
                libc::SYS_execveat as isize,
                dirfd as isize,
                path,
                argv,
                ptrs.as_ptr() as isize,
                flags as isize,
            ),
        }
    });
    Some(r)
}

/// The caller's NULL-terminated argv from `skip` on.
///
/// # Safety
/// `argv` is null or a NULL-terminated array of C strings.
unsafe fn args_from(argv: isize, skip: usize) -> Vec<*const libc::c_char> {
    let mut v = vec![];
    if argv != 0 {
        let mut p = argv as *const *const libc::c_char;
        // SAFETY: per the contract.
        unsafe {
            while !(*p).is_null() {
                v.push(*p);
                p = p.add(1);
            }
        }
    }
    v.drain(..skip.min(v.len()));
    v
}

/// Runs the program `exe` (a madfs path; `given` is the path as the caller named it) with
/// `argv` and `envp`, as `execve` would: a script (`#!interpreter [arg]`) runs its
/// interpreter with the script's path, anything else runs from a copy in a memfd
/// (`execveat(memfd, "", AT_EMPTY_PATH)`), which the kernel reads in full before the copy
/// is dropped at exec. Returns only on failure (`-errno`). The copy means `/proc/self/exe`
/// names the memfd, not the madfs path.
///
/// # Safety
/// `argv` and `envp` are null or NULL-terminated arrays of C strings.
unsafe fn exec_file(exe: &str, given: &[u8], argv: isize, envp: isize, depth: u32) -> isize {
    if depth > 4 {
        return neg(Errno::ELOOP);
    }
    let (exe, attr) = match stat_links_with(exe, true, |p, a| (p.to_owned(), a)) {
        Ok(Ok(found)) => found,
        Ok(Err(host)) => {
            // a link out of the mount: the kernel runs that file
            // SAFETY: per the contract.
            return unsafe { raw!(libc::SYS_execve as isize, host.as_ptr(), argv, envp) };
        }
        Err(e) => return neg(e),
    };
    if !attr.is_file() || attr.mode & 0o111 == 0 {
        return neg(Errno::EACCES);
    }
    let mut head = [0u8; 256];
    let n = match conn::with(|c| {
        let (a, cap) = c.open_read(&exe)?;
        c.read(&c.handle(exe.clone(), a, cap), 0, &mut head)
    }) {
        Ok(n) => n,
        Err(e) => return neg(e),
    };
    if head[..n].starts_with(b"#!") {
        // SAFETY: per the contract.
        return unsafe { exec_script(&head[2..n], given, argv, envp, depth) };
    }
    // SAFETY: per the contract.
    unsafe { exec_copy(&exe, &attr, argv, envp) }
}

/// The `#!` line of a script: runs `interpreter [arg] given argv[1..]`.
///
/// # Safety
/// As [`exec_file`].
unsafe fn exec_script(line: &[u8], given: &[u8], argv: isize, envp: isize, depth: u32) -> isize {
    let Some(end) = line.iter().position(|&c| c == b'\n') else {
        return neg(Errno::ENOEXEC);
    };
    let blank = |c: &u8| *c == b' ' || *c == b'\t';
    let line = &line[..end];
    let start = line.iter().position(|c| !blank(c)).unwrap_or(line.len());
    let line = &line[start..];
    let split = line.iter().position(blank).unwrap_or(line.len());
    let (interp, rest) = line.split_at(split);
    let rest = rest.trim_ascii();
    if interp.is_empty() {
        return neg(Errno::ENOEXEC);
    }
    let (Ok(interp_c), Ok(arg_c), Ok(given_c)) = (
        std::ffi::CString::new(interp),
        std::ffi::CString::new(rest),
        std::ffi::CString::new(given),
    ) else {
        return neg(Errno::ENOEXEC);
    };
    let mut args = vec![interp_c.as_ptr()];
    if !rest.is_empty() {
        args.push(arg_c.as_ptr());
    }
    args.push(given_c.as_ptr());
    // SAFETY: per the contract.
    args.extend(unsafe { args_from(argv, 1) });
    args.push(std::ptr::null());
    let new_argv = args.as_ptr() as isize;
    match target(libc::AT_FDCWD as i64, interp_c.as_ptr() as isize) {
        // SAFETY: per the contract; `args` and the strings outlive the call.
        Target::Ours(p) => unsafe { exec_file(&p, interp, new_argv, envp, depth + 1) },
        Target::Fail(e) => neg(e),
        // SAFETY: as above.
        Target::External => unsafe {
            raw!(libc::SYS_execve as isize, interp_c.as_ptr(), new_argv, envp)
        },
    }
}

/// Copies the program into a memfd and runs it from there.
///
/// # Safety
/// As [`exec_file`].
unsafe fn exec_copy(exe: &str, attr: &Attr, argv: isize, envp: isize) -> isize {
    const MFD_EXEC: isize = 0x10;
    let name = c"madfs-exec";
    let flags = libc::MFD_CLOEXEC as isize;
    // SAFETY: memfd_create with a C string name; MFD_EXEC (Linux ≥ 6.3) where vm.memfd_noexec
    // makes memfds non-executable by default, plain on older kernels.
    let mut fd = unsafe {
        raw!(
            libc::SYS_memfd_create as isize,
            name.as_ptr(),
            flags | MFD_EXEC
        )
    };
    if fd == -(libc::EINVAL as isize) {
        // SAFETY: as above.
        fd = unsafe { raw!(libc::SYS_memfd_create as isize, name.as_ptr(), flags) };
    }
    if fd < 0 {
        return fd;
    }
    let r = fill_copy(fd, exe, attr).and_then(|()| {
        // SAFETY: per the contract; our memfd with an empty path.
        raw_res(unsafe {
            raw!(
                libc::SYS_execveat as isize,
                fd,
                c"".as_ptr(),
                argv,
                envp,
                libc::AT_EMPTY_PATH
            )
        })
    });
    // SAFETY: our own fd (still here: exec failed).
    unsafe { raw!(libc::SYS_close as isize, fd) };
    match r {
        Ok(_) => neg(Errno::EIO),
        Err(e) => neg(e),
    }
}

/// Reads the whole file `exe` into the memfd `fd` (sized, mapped, filled, unmapped).
fn fill_copy(fd: isize, exe: &str, attr: &Attr) -> FsResult<()> {
    let len = attr.size as usize;
    // SAFETY: our own memfd.
    raw_unit(unsafe { raw!(libc::SYS_ftruncate as isize, fd, len) })?;
    if len == 0 {
        return Ok(());
    }
    let rw = (libc::PROT_READ | libc::PROT_WRITE) as isize;
    // SAFETY: a new shared mapping of our memfd, `len` bytes long.
    let m = raw_res(unsafe { raw!(libc::SYS_mmap as isize, 0, len, rw, libc::MAP_SHARED, fd, 0) })?;
    // SAFETY: the `len` bytes just mapped.
    let buf = unsafe { slice_mut(m, len) };
    let read = conn::with(|c| {
        let (a, cap) = c.open_read(exe)?;
        let f = c.handle(
            exe.to_owned(),
            Attr {
                size: attr.size,
                ..a
            },
            cap,
        );
        let mut done = 0;
        while done < len {
            match c.read(&f, done as u64, &mut buf[done..])? {
                0 => break,
                n => done += n,
            }
        }
        Ok(())
    });
    // SAFETY: our own mapping.
    unsafe { raw!(libc::SYS_munmap as isize, m, len) };
    read
}

/// In a `vfork`/`posix_spawn` child, which may not talk to the servers: `/bin/sh -c 'exec
/// "$0" "$@"' exe argv[1..]`, so a normal process (under the preload, which `envp` carries)
/// runs the program. Returns only on failure.
fn exec_through_shell(exe: &str, argv: isize, envp: isize) -> isize {
    let Ok(exe_c) = std::ffi::CString::new(external(mount(), exe)) else {
        return neg(Errno::ENOENT);
    };
    let mut args = vec![
        c"/bin/sh".as_ptr(),
        c"-c".as_ptr(),
        c"exec \"$0\" \"$@\"".as_ptr(),
    ];
    args.push(exe_c.as_ptr());
    // SAFETY: the caller's argv (a NULL-terminated array of C strings).
    args.extend(unsafe { args_from(argv, 1) });
    args.push(std::ptr::null());
    crate::entry::exec_outside_hook(|| {
        // SAFETY: NULL-terminated argv of C strings that outlive the call; the caller's envp.
        unsafe {
            raw!(
                libc::SYS_execve as isize,
                c"/bin/sh".as_ptr(),
                args.as_ptr(),
                envp
            )
        }
    })
}
