//! madfs fork: bindings to the system UCX (Debian `libucx-dev`) found through pkg-config
//! instead of building the bundled UCX sources with autotools; UCX is not linked but loaded
//! on first use (see `src/lazy.rs`): this build script also writes one jump stub per UCX
//! function of the bindings.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let ucx = pkg_config::Config::new()
        .atleast_version("1.10")
        .cargo_metadata(false)
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
    let text = bindings.to_string();
    std::fs::write(out_path.join("bindings.rs"), &text).expect("Couldn't write bindings!");

    // The functions the bindings declare, in order: one stub and one slot each.
    let mut names: Vec<String> = Vec::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("pub fn ") {
        rest = &rest[i + 7..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let is_ucx = ["ucp_", "ucs_", "uct_", "ucm_"].iter().any(|p| name.starts_with(p));
        if is_ucx && !names.contains(&name) {
            names.push(name);
        }
    }
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    let mut asm = String::from(".data\n.balign 8\n.globl madfs_ucx_slots\n.hidden madfs_ucx_slots\nmadfs_ucx_slots:\n");
    for i in 0..names.len() {
        asm += &format!("    .quad madfs_ucx_lazy_{i}\n");
    }
    asm += ".text\n";
    for (i, n) in names.iter().enumerate() {
        asm += &format!(".globl {n}\n.hidden {n}\n.type {n},@function\n{n}:\n");
        match arch.as_str() {
            "x86_64" => {
                asm += &format!("    jmp qword ptr [rip + madfs_ucx_slots + {}]\n", 8 * i);
                asm += &format!("madfs_ucx_lazy_{i}:\n    mov r11d, {i}\n    jmp madfs_ucx_resolve_common\n");
            }
            "aarch64" => {
                asm += &format!(
                    "    adrp x16, madfs_ucx_slots+{o}\n    ldr x16, [x16, :lo12:madfs_ucx_slots+{o}]\n    br x16\n",
                    o = 8 * i
                );
                asm += &format!("madfs_ucx_lazy_{i}:\n    mov x16, #{i}\n    b madfs_ucx_resolve_common\n");
            }
            a => panic!("ucx1-sys: no lazy stubs for {a}"),
        }
    }
    std::fs::write(out_path.join("stubs.s"), asm).expect("stubs");
    let list: Vec<String> = names.iter().map(|n| format!("c\"{n}\"")).collect();
    std::fs::write(
        out_path.join("names.rs"),
        format!("pub(crate) static NAMES: [&std::ffi::CStr; {}] = [{}];\n", names.len(), list.join(", ")),
    )
    .expect("names");
}
