#![no_main]
//! cargo-fuzz target `open_container`: see the harness in `fuzz/src/lib.rs`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = zrecord_fuzz::open_container(data);
});
