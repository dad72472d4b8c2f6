#![no_main]
//! cargo-fuzz target `record_decode`: see the harness in `fuzz/src/lib.rs`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = zrecord_fuzz::record_decode(data);
});
