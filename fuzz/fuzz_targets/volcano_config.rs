#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rust_batch_fuzz::volcano_config(data));
