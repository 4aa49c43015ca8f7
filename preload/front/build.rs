// How libmadfs.so (the front) is linked. Every process started under the preload maps this
// library, so it is kept small (docs/performance.md, "the front without std's panic code"):
//
// * x86_64: GNU ld (`-fuse-ld=bfd`) instead of rust-lld, this target's default linker since
//   Rust 1.90. rust-lld keeps every personality routine that an input's `.eh_frame` names,
//   so std's `rust_eh_personality`, and through it std's whole panic machinery and
//   backtrace printer (≈ 250 KB of the library's ≈ 290 KB of text), stayed in a front that
//   has no panic path; GNU ld keeps a personality only for the live functions that use it.
//   `-z noseparate-code`: read-only data in the text segment (one mapping, and the page
//   faults at its edges, fewer in every process), as rust-lld's `--no-rosegment` did.
// * No unwinder: nothing in the front unwinds (test `front_has_no_panic_path`), so neither
//   GCC's unwinder (the core links it, `preload/build.rs`) nor `libgcc_s.so.1` is linked.
//   On aarch64 the front keeps the core's static unwinder (its engine is Rust with panic
//   paths, caught in `madfs-intercept`).
mod core_build {
    include!("../build.rs");
}

fn main() {
    println!("cargo:rerun-if-changed=../build.rs");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("x86_64") {
        core_build::main();
        return;
    }
    for arg in ["-fuse-ld=bfd", "-Wl,-z,noseparate-code"] {
        println!("cargo:rustc-cdylib-link-arg={arg}");
    }
    // GCC's unwinder, statically and before std's `-lgcc_s`: GNU ld counts references from
    // sections it later removes when it decides which shared libraries are needed, and
    // std's dead unwinding code would otherwise make every preloaded process load
    // libgcc_s.so.1 (whose constructor runs `cpuid`, see `preload/build.rs`). Nothing of it
    // stays in the library: nothing live refers to it.
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = std::process::Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .expect("cc -print-file-name=libgcc_eh.a");
    let path = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let dir = path.parent().expect("libgcc_eh.a's directory");
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=static:+whole-archive,-bundle=gcc_eh");
}
