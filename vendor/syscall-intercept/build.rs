fn main() {
    let dst = cmake::build("syscall_intercept");

    println!("cargo:rustc-link-search=native={}/lib", dst.display());
    println!("cargo:rustc-link-lib=static=syscall_intercept");
    // madfs: capstone is dlopen'ed on a patch-site cache miss (see vendor/PATCHES.md)
    println!("cargo:rustc-link-lib=dl");
}
