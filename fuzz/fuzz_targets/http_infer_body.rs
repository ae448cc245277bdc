#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nereid_fuzz::http_infer_body::check(data));
