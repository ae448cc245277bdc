#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nereid_fuzz::bytes_framing::check(data));
