// The same static unwinder as the core (`preload/build.rs`, which says why).
include!("../build.rs");
