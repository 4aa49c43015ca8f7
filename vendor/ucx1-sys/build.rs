//! madfs fork: link the system UCX (Debian `libucx-dev`) found through pkg-config
//! instead of building the bundled UCX sources with autotools.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let ucx = pkg_config::Config::new()
        .atleast_version("1.10")
        .probe("ucx")
        .expect("UCX not found by pkg-config: install libucx-dev (Debian) or set PKG_CONFIG_PATH");

    let mut builder = bindgen::Builder::default().header("wrapper.h");
    for dir in &ucx.include_paths {
        builder = builder.clang_arg(format!("-I{}", dir.display()));
    }
    let bindings = builder
        .parse_callbacks(Box::new(bindgen::CargoCallbacks))
        .allowlist_function("uc[tsmp]_.*")
        .allowlist_var("uc[tsmp]_.*")
        .allowlist_var("UC[TSMP]_.*")
        .allowlist_type("uc[tsmp]_.*")
        .rustified_enum(".*")
        .bitfield_enum("ucp_feature")
        .bitfield_enum(".*_field")
        .bitfield_enum(".*_flags(_t)?")
        .generate()
        .expect("Unable to generate UCX bindings");
    let out_path = PathBuf::from(env::var("OUT_DIR").unwrap());
    bindings
        .write_to_file(out_path.join("bindings.rs"))
        .expect("Couldn't write bindings!");
}
