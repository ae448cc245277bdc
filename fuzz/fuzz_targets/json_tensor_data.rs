#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nereid_fuzz::json_tensor_data::check(data));
