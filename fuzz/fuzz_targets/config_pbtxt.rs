#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nereid_fuzz::config_pbtxt::check(data));
