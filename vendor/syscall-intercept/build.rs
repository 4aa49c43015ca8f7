fn main() {
    // madfs: upstream's tests and examples are not built: the tests link against engine
    // internals that our patches changed (the wrapper region replaced the trampoline table),
    // and neither is run by this crate (see vendor/PATCHES.md)
    let dst = cmake::Config::new("syscall_intercept")
        .define("BUILD_TESTS", "OFF")
        .define("BUILD_EXAMPLES", "OFF")
        .build();

    println!("cargo:rustc-link-search=native={}/lib", dst.display());
    println!("cargo:rustc-link-lib=static=syscall_intercept");
    // madfs: capstone is dlopen'ed on a patch-site cache miss (see vendor/PATCHES.md)
    println!("cargo:rustc-link-lib=dl");
}
