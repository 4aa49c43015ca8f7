// Links GCC's unwinder into libmadfs.so and libmadfs_core.so statically (hidden by the
// cdylibs' version scripts) instead of depending on `libgcc_s.so.1`: loading that library
// costs every process started under the preload its constructor, which runs `cpuid` several
// times, and each `cpuid` traps to the hypervisor in a virtual machine
// (docs/performance.md). Panics inside the hooks still unwind to their `catch_unwind` (test
// `panics_unwind_inside_the_library`). `preload/front/build.rs` includes this file.
pub fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for arg in [
        "-Wl,--whole-archive",
        "-l:libgcc_eh.a",
        "-Wl,--no-whole-archive",
    ] {
        println!("cargo:rustc-cdylib-link-arg={arg}");
    }
}
