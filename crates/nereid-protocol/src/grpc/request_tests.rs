use nereid_core::tensor::fixed_byte_size;
use nereid_core::{ErrorKind, ModelVersion, Parameter};
use proptest::prelude::*;
use prost::Message;

use super::*;
use crate::inference::InferParameter;
use crate::inference::InferTensorContents;
use crate::inference::infer_parameter::ParameterChoice;

fn input(name: &str, datatype: &str, shape: &[i64]) -> InferInputTensor {
    InferInputTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape: shape.to_vec(),
        ..Default::default()
    }
}

fn request(inputs: Vec<InferInputTensor>, raw: Vec<Bytes>) -> ModelInferRequest {
    ModelInferRequest {
        model_name: "simple".into(),
        inputs,
        raw_input_contents: raw,
        ..Default::default()
    }
}

fn bool_param(b: bool) -> InferParameter {
    InferParameter {
        parameter_choice: Some(ParameterChoice::BoolParam(b)),
    }
}

fn error(r: ModelInferRequest) -> Error {
    decode_infer_request(r).unwrap_err()
}

#[test]
fn raw_contents_for_every_datatype_stay_zero_copy() {
    let shape = [2, 3];
    for dt in DataType::ALL {
        let size = fixed_byte_size(dt, &shape).unwrap_or(6 * 5);
        let raw = Bytes::from(vec![7u8; size]);
        let r = request(vec![input("IN", dt.wire_name(), &shape)], vec![raw.clone()]);
        let decoded = decode_infer_request(r).unwrap();
        let tensor = &decoded.inputs[0];
        assert_eq!(tensor.datatype, dt);
        assert_eq!(tensor.shape, shape);
        assert_eq!(tensor.data, raw);
        assert_eq!(tensor.data.as_ptr(), raw.as_ptr(), "{dt} was copied");
    }
}

#[test]
fn typed_contents_for_every_typed_datatype() {
    let c = |f: fn(&mut InferTensorContents)| {
        let mut c = InferTensorContents::default();
        f(&mut c);
        c
    };
    let cases = [
        ("BOOL", c(|c| c.bool_contents = vec![true, false]), 2),
        ("INT8", c(|c| c.int_contents = vec![-1, 2]), 2),
        ("INT16", c(|c| c.int_contents = vec![-1, 2]), 4),
        ("INT32", c(|c| c.int_contents = vec![-1, 2]), 8),
        ("INT64", c(|c| c.int64_contents = vec![-1, 2]), 16),
        ("UINT8", c(|c| c.uint_contents = vec![1, 2]), 2),
        ("UINT16", c(|c| c.uint_contents = vec![1, 2]), 4),
        ("UINT32", c(|c| c.uint_contents = vec![1, 2]), 8),
        ("UINT64", c(|c| c.uint64_contents = vec![1, 2]), 16),
        ("FP32", c(|c| c.fp32_contents = vec![1.0, 2.0]), 8),
        ("FP64", c(|c| c.fp64_contents = vec![1.0, 2.0]), 16),
        (
            "BYTES",
            c(|c| c.bytes_contents = vec![Bytes::from_static(b"ab"), Bytes::new()]),
            10,
        ),
    ];
    for (dt, contents, size) in cases {
        let mut i = input("IN", dt, &[1, 2]);
        i.contents = Some(contents);
        let decoded = decode_infer_request(request(vec![i], vec![])).unwrap();
        assert_eq!(decoded.inputs[0].data.len(), size, "{dt}");
        assert_eq!(decoded.inputs[0].datatype.wire_name(), dt);
    }
}

#[test]
fn request_fields_are_kept() {
    let mut r = request(
        vec![input("IN", "INT32", &[1])],
        vec![Bytes::from_static(&[1, 0, 0, 0])],
    );
    r.model_version = "2".into();
    r.id = "req-9".into();
    r.parameters.insert(
        "priority".into(),
        InferParameter {
            parameter_choice: Some(ParameterChoice::Int64Param(1)),
        },
    );
    r.parameters
        .insert("binary_data_output".into(), bool_param(true));
    let mut out = InferRequestedOutputTensor {
        name: "OUT".into(),
        ..Default::default()
    };
    out.parameters
        .insert("binary_data".into(), bool_param(false));
    out.parameters.insert("custom".into(), bool_param(true));
    r.outputs.push(out);
    let decoded = decode_infer_request(r).unwrap();
    assert_eq!(decoded.model_name, "simple");
    assert_eq!(decoded.routing.version, ModelVersion::Number(2));
    assert_eq!(decoded.id, "req-9");
    // The priority is a routing fact, typed, not a parameter.
    assert!(decoded.parameters.is_empty());
    assert_eq!(decoded.routing.priority, 1);
    assert_eq!(decoded.outputs[0].name, "OUT");
    assert_eq!(decoded.outputs[0].parameters.len(), 1);
    assert!(decoded.outputs[0].parameters.contains_key("custom"));
}

#[test]
fn bad_version_strings_are_refused() {
    for (v, kind) in [
        ("1abc", ErrorKind::InvalidArgument),
        ("-1", ErrorKind::InvalidArgument),
    ] {
        let mut r = request(vec![], vec![]);
        r.model_version = v.into();
        assert_eq!(error(r).kind(), kind, "{v}");
    }
    let mut r = request(vec![], vec![]);
    r.model_version = "1abc".into();
    assert_eq!(
        error(r).message(),
        "failed to get model version from specified version string '1abc' (details: stol), version should be an integral value > 0"
    );
    // A word is a version label, which the engine resolves (or refuses
    // with the same words, for a model without labels).
    let mut r = request(vec![], vec![]);
    r.model_version = "abc".into();
    assert_eq!(
        decode_infer_request(r).unwrap().routing.version,
        ModelVersion::Label("abc".into())
    );
}

#[test]
fn fewer_raw_contents_than_inputs_names_the_input() {
    let inputs = vec![
        input("INPUT0", "INT32", &[1]),
        input("INPUT1", "INT32", &[1]),
    ];
    let e = error(request(inputs, vec![Bytes::from_static(&[0; 4])]));
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        e.message(),
        "unable to find data for input tensor 'INPUT1' for model 'simple' in request."
    );
    let e = error(request(vec![input("INPUT0", "INT32", &[1])], vec![]));
    assert_eq!(
        e.message(),
        "unable to find data for input tensor 'INPUT0' for model 'simple' in request."
    );
}

#[test]
fn more_raw_contents_than_inputs_are_ignored_like_triton() {
    let raw = vec![Bytes::from_static(&[1; 4]), Bytes::from_static(&[2; 4])];
    let decoded = decode_infer_request(request(vec![input("INPUT0", "INT32", &[1])], raw)).unwrap();
    assert_eq!(decoded.inputs.len(), 1);
    assert_eq!(decoded.inputs[0].data.as_ref(), &[1; 4]);
}

#[test]
fn contents_and_raw_together_are_refused() {
    let mut i = input("INPUT0", "INT32", &[1]);
    i.contents = Some(InferTensorContents {
        int_contents: vec![1],
        ..Default::default()
    });
    let e = error(request(vec![i], vec![Bytes::from_static(&[0; 4])]));
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        e.message(),
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'"
    );
}

#[test]
fn typed_counts_are_left_to_the_engines_byte_size_check() {
    // 15 elements for [1,16]: decoded as 60 bytes, which the engine refuses
    // with Triton's "input byte size mismatch ... Expected 64, got 60".
    let mut i = input("INPUT0", "INT32", &[1, 16]);
    i.contents = Some(InferTensorContents {
        int_contents: vec![1; 15],
        ..Default::default()
    });
    let decoded = decode_infer_request(request(vec![i], vec![])).unwrap();
    assert_eq!(decoded.inputs[0].data.len(), 60);
    assert_ne!(
        fixed_byte_size(DataType::Int32, &decoded.inputs[0].shape),
        Some(60)
    );
}

#[test]
fn bad_datatypes_and_dims_are_refused() {
    let raw = || vec![Bytes::from_static(&[0; 4])];
    let e = error(request(vec![input("INPUT0", "INT33", &[1])], raw()));
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(e.message(), "invalid datatype 'INT33' for input 'INPUT0'");
    let e = error(request(vec![input("INPUT0", "int32", &[1])], raw()));
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = error(request(vec![input("INPUT0", "INT32", &[-1, 1])], raw()));
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        e.message(),
        "input 'INPUT0' has a negative dimension -1 in its shape"
    );
}

#[test]
fn classification_passes_through() {
    let mut r = request(vec![], vec![]);
    let mut out = InferRequestedOutputTensor {
        name: "OUT".into(),
        ..Default::default()
    };
    out.parameters.insert(
        "classification".into(),
        InferParameter {
            parameter_choice: Some(ParameterChoice::Int64Param(3)),
        },
    );
    r.outputs.push(out);
    let decoded = decode_infer_request(r).unwrap();
    assert_eq!(
        decoded.outputs[0].parameters.get("classification"),
        Some(&Parameter::Int64(3))
    );
}

fn in_shared_memory(mut tensor: InferInputTensor) -> InferInputTensor {
    tensor.parameters.insert(
        "shared_memory_region".into(),
        InferParameter {
            parameter_choice: Some(ParameterChoice::StringParam("r".into())),
        },
    );
    tensor
}

#[test]
fn inputs_in_shared_memory_take_no_raw_contents() {
    let raw = Bytes::from(vec![1u8; 4]);
    let r = request(
        vec![
            in_shared_memory(input("INPUT0", "INT32", &[1])),
            input("INPUT1", "INT32", &[1]),
        ],
        vec![raw.clone()],
    );
    let decoded = decode_infer_request(r).unwrap();
    assert!(decoded.inputs[0].data.is_empty());
    assert_eq!(
        decoded.inputs[0].parameters.get("shared_memory_region"),
        Some(&Parameter::String("r".into()))
    );
    assert_eq!(decoded.inputs[1].data, raw);

    let mut both = in_shared_memory(input("INPUT0", "INT32", &[1]));
    both.contents = Some(InferTensorContents {
        int_contents: vec![1],
        ..Default::default()
    });
    assert_eq!(
        error(request(vec![both], vec![])).kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn non_boolean_binary_flags_are_refused() {
    let mut r = request(vec![], vec![]);
    r.parameters.insert(
        "binary_data_output".into(),
        InferParameter {
            parameter_choice: Some(ParameterChoice::Int64Param(1)),
        },
    );
    assert_eq!(error(r).kind(), ErrorKind::InvalidArgument);
}

fn arb_input() -> impl Strategy<Value = InferInputTensor> {
    let datatypes = prop::sample::select(vec![
        "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16",
        "BF16", "FP32", "FP64", "BYTES", "INT33", "",
    ]);
    let contents = prop::option::of((
        prop::collection::vec(any::<i32>(), 0..4),
        prop::collection::vec(any::<u32>(), 0..4),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..6), 0..3),
    ));
    (
        datatypes,
        prop::collection::vec(any::<i64>(), 0..4),
        contents,
    )
        .prop_map(|(dt, shape, contents)| {
            let mut i = input("IN", dt, &shape);
            i.contents = contents.map(|(ints, uints, bytes)| InferTensorContents {
                int_contents: ints,
                uint_contents: uints,
                bytes_contents: bytes.into_iter().map(Bytes::from).collect(),
                ..Default::default()
            });
            i
        })
}

proptest! {
    #[test]
    fn decoding_arbitrary_requests_never_panics(
        inputs in prop::collection::vec(arb_input(), 0..4),
        raw in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..32), 0..5),
        version in prop::sample::select(vec!["", "1", "0", "-3", "x", "18446744073709551616"]),
    ) {
        let mut r = request(inputs, raw.into_iter().map(Bytes::from).collect());
        r.model_version = version.into();
        if let Ok(decoded) = decode_infer_request(r.clone()) {
            prop_assert_eq!(decoded.inputs.len(), r.inputs.len());
        }
    }

    #[test]
    fn decoding_arbitrary_wire_bytes_never_panics(wire in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(r) = ModelInferRequest::decode(Bytes::from(wire)) {
            let _ = decode_infer_request(r);
        }
    }
}
