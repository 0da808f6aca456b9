#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rust_batch_fuzz::crd_specs(data));
