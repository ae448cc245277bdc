use proptest::prelude::*;

use super::*;
use crate::tests::request;

fn key_of(model: &str, version: i64, data: &[u8]) -> String {
    redis_key(model, version, &CacheKey::new(7, &request(data)))
}

#[test]
fn a_key_is_the_documented_digest_whatever_the_process_or_scope() {
    // The digest as the module documents it, worked out apart (hashlib).
    assert_eq!(
        key_of("m", 1, b"abc"),
        "nereid:cache:v1:4849248035840efed4579b7263438c29a4262acf2176cdd8174c55798da1afae"
    );
    let other_scope = redis_key("m", 1, &CacheKey::new(8, &request(b"abc")));
    assert_eq!(other_scope, key_of("m", 1, b"abc"));
}

#[test]
fn the_model_the_version_and_the_data_each_change_the_key() {
    let base = key_of("m", 1, b"abc");
    assert_ne!(base, key_of("n", 1, b"abc"));
    assert_ne!(base, key_of("m", 2, b"abc"));
    assert_ne!(base, key_of("m", 1, b"abd"));
    // Lengths keep fields apart: "m" + "abc" is not "ma" + "bc".
    assert_ne!(key_of("ma", 1, b"bc"), base);
}

fn parameter() -> impl Strategy<Value = Parameter> {
    prop_oneof![
        any::<bool>().prop_map(Parameter::Bool),
        any::<i64>().prop_map(Parameter::Int64),
        any::<u64>().prop_map(Parameter::Uint64),
        any::<f64>()
            .prop_filter("NaN has no equality", |d| !d.is_nan())
            .prop_map(Parameter::Double),
        ".{0,12}".prop_map(Parameter::String),
    ]
}

fn tensor() -> impl Strategy<Value = Tensor> {
    (
        "[A-Z_0-9]{1,8}",
        prop::sample::select(DataType::ALL.to_vec()),
        prop::collection::vec(-1i64..1000, 0..4),
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(name, datatype, shape, data)| Tensor {
            name,
            datatype,
            shape,
            data: Bytes::from(data),
        })
}

fn response() -> impl Strategy<Value = InferResponse> {
    (
        ".{0,10}",
        any::<i64>(),
        prop::collection::btree_map("[a-z_]{1,8}", parameter(), 0..4),
        prop::collection::vec(tensor(), 0..4),
        prop::collection::vec("[A-Z]{1,6}", 0..2),
    )
        .prop_map(
            |(model_name, model_version, parameters, outputs, in_shared_memory)| InferResponse {
                model_name,
                model_version,
                id: String::new(),
                outputs,
                parameters,
                in_shared_memory,
            },
        )
}

proptest! {
    #[test]
    fn a_response_comes_back_as_it_went_in(response in response()) {
        let value = Bytes::from(encode_response(&response));
        prop_assert_eq!(decode_response(value), Some(response));
    }

    #[test]
    fn a_cut_or_lengthened_value_is_no_answer(response in response(), cut in any::<prop::sample::Index>()) {
        let value = encode_response(&response);
        let short = Bytes::copy_from_slice(&value[..cut.index(value.len())]);
        prop_assert_eq!(decode_response(short), None);
        let mut long = value;
        long.push(0);
        prop_assert_eq!(decode_response(Bytes::from(long)), None);
    }

    #[test]
    fn any_bytes_decode_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut value = MAGIC.to_vec();
        value.extend(bytes);
        let _ = decode_response(Bytes::from(value));
    }
}

#[test]
fn a_value_of_another_layout_is_no_answer() {
    let mut value = encode_response(&crate::tests::uint8_response(vec![1, 2]));
    value[3] = b'2';
    assert_eq!(decode_response(Bytes::from(value)), None);
}
