#![no_main]
//! cargo-fuzz target `index_decode`: see the harness in `fuzz/src/lib.rs`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = zrecord_fuzz::index_decode(data);
});
