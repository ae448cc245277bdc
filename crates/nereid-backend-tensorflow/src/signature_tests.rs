use super::*;

fn info(name: &str, dtype: i32, dims: Option<&[i64]>) -> TensorInfoProto {
    TensorInfoProto {
        name: name.into(),
        dtype,
        tensor_shape: dims.map(|d| ShapeProto {
            dim: d.iter().map(|&size| DimProto { size }).collect(),
            unknown_rank: false,
        }),
    }
}

fn signature_proto(
    inputs: &[(&str, TensorInfoProto)],
    outputs: &[(&str, TensorInfoProto)],
) -> SignatureProto {
    let map = |entries: &[(&str, TensorInfoProto)]| {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    };
    SignatureProto {
        inputs: map(inputs),
        outputs: map(outputs),
    }
}

/// A SavedModel folder holding one graph tagged `tags` with `signatures`.
fn saved_model(tags: &[&str], signatures: &[(&str, SignatureProto)]) -> tempfile::TempDir {
    let graph = MetaGraphProto {
        meta_info_def: Some(MetaInfoProto {
            tags: tags.iter().map(|t| t.to_string()).collect(),
        }),
        signature_def: signatures
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    };
    let dir = tempfile::tempdir().unwrap();
    let proto = SavedModelProto {
        meta_graphs: vec![graph],
    };
    std::fs::write(dir.path().join(SAVED_MODEL_FILE), proto.encode_to_vec()).unwrap();
    dir
}

fn dense() -> SignatureProto {
    signature_proto(
        &[("x", info("serving_default_x:0", 1, Some(&[-1, 4])))],
        &[("y", info("StatefulPartitionedCall:0", 1, Some(&[-1, 3])))],
    )
}

#[test]
fn reads_serving_default_with_keys_types_and_shapes() {
    let other = signature_proto(&[("s", info("s:0", 7, None))], &[]);
    let dir = saved_model(
        &["serve"],
        &[("serving_default", dense()), ("other", other)],
    );
    let signature = read_signature(dir.path(), "serve", None).unwrap();
    assert_eq!(signature.key, "serving_default");
    assert_eq!(
        signature.model_io(),
        ModelIo {
            inputs: vec![IoSpec::new("x", DataType::Fp32, vec![-1, 4])],
            outputs: vec![IoSpec::new("y", DataType::Fp32, vec![-1, 3])],
        }
    );
    assert_eq!(signature.inputs[0].tensor, "serving_default_x:0");
}

#[test]
fn a_named_signature_is_served_and_strings_are_bytes() {
    let words = signature_proto(
        &[("s", info("s:0", 7, None))],
        &[("n", info("n:0", 3, Some(&[])))],
    );
    let dir = saved_model(
        &["serve"],
        &[("serving_default", dense()), ("words", words)],
    );
    let signature = read_signature(dir.path(), "serve", Some("words")).unwrap();
    assert_eq!(signature.inputs[0].datatype, DataType::Bytes);
    assert_eq!(signature.inputs[0].dims, None, "unknown rank");
    assert_eq!(signature.outputs[0].dims, Some(vec![]), "a scalar");
    let err = read_signature(dir.path(), "serve", Some("nope")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the SavedModel has no signature 'nope' (it has 'serving_default', 'words')"
    );
}

#[test]
fn without_serving_default_the_first_serving_signature_is_taken() {
    let init = signature_proto(&[], &[]);
    let dir = saved_model(
        &["serve"],
        &[
            ("__saved_model_init_op", init.clone()),
            ("predict", dense()),
        ],
    );
    assert_eq!(
        read_signature(dir.path(), "serve", None).unwrap().key,
        "predict"
    );
    let dir = saved_model(&["serve"], &[("__saved_model_init_op", init)]);
    assert_eq!(
        read_signature(dir.path(), "serve", None).unwrap_err(),
        SignatureError::NoServingSignature
    );
}

#[test]
fn the_graph_must_carry_the_tag() {
    let dir = saved_model(&["train"], &[("serving_default", dense())]);
    let err = read_signature(dir.path(), "serve", None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the SavedModel has no graph tagged 'serve' (it has 'train')"
    );
}

#[test]
fn unsupported_types_and_sparse_tensors_are_named() {
    let complex = signature_proto(&[("c", info("c:0", 8, Some(&[2])))], &[]);
    let dir = saved_model(&["serve"], &[("serving_default", complex)]);
    let err = read_signature(dir.path(), "serve", None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "input 'c' of signature 'serving_default' is of unsupported datatype 'DT_COMPLEX64'"
    );
    let sparse = signature_proto(&[("s", info("", 1, None))], &[]);
    let dir = saved_model(&["serve"], &[("serving_default", sparse)]);
    let err = read_signature(dir.path(), "serve", None).unwrap_err();
    assert!(err.to_string().contains("not a dense tensor"), "{err}");
}

#[test]
fn a_folder_without_saved_model_pb_or_with_garbage_says_so() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        read_signature(dir.path(), "serve", None),
        Err(SignatureError::Read { .. })
    ));
    std::fs::write(dir.path().join(SAVED_MODEL_FILE), b"\xff\xff\xff").unwrap();
    assert!(matches!(
        read_signature(dir.path(), "serve", None),
        Err(SignatureError::Decode { .. })
    ));
}

#[test]
fn every_shared_type_round_trips() {
    for (value, datatype, _) in DTYPES {
        assert_eq!(super::datatype(value), Some(datatype));
        assert_eq!(dtype(datatype), value);
    }
}
