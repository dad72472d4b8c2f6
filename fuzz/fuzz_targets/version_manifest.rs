#![no_main]
//! cargo-fuzz target `version_manifest`: see the harness in `fuzz/src/lib.rs`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = zrecord_fuzz::version_manifest(data);
});
