#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nereid_fuzz::grpc_infer_request::check(data));
