//! With `ROCKSDB_STATIC` set (`.cargo/config.toml`), librocksdb-sys links Debian's
//! `librocksdb.a` but not the libraries that archive was built against: name them here.
fn main() {
    println!("cargo:rerun-if-env-changed=ROCKSDB_STATIC");
    if std::env::var_os("ROCKSDB_STATIC").is_some() {
        for lib in ["snappy", "lz4", "zstd", "z", "bz2", "gflags"] {
            println!("cargo:rustc-link-lib=dylib={lib}");
        }
    }
}
