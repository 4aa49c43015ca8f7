// The same static unwinder as the core (`preload/build.rs`, which says why).
mod core_build {
    include!("../build.rs");
}

fn main() {
    core_build::main();
    println!("cargo:rerun-if-changed=../build.rs");
    // x86_64 (rust-lld, this target's linker since Rust 1.90, the workspace's rust-version):
    // read-only data in the text segment instead of a segment of its own. Every process
    // started under the preload maps this library, and one segment fewer is one mmap, one
    // mapping and the page faults at its edges fewer: /bin/true 22 µs of CPU less
    // (docs/performance.md). The core is loaded only by processes that use madfs: unchanged.
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,--no-rosegment");
    }
}
