//! Running batches: every data type, BYTES exactness, batching.

use super::*;

#[test]
fn simple_adds_and_subtracts_a_batch() {
    let Some(backend) = backend() else { return };
    let mut instance = load(&backend, example_model("simple", 1));
    let a: Vec<i32> = (0..48).collect();
    let b: Vec<i32> = (0..48).map(|i| 100 - i).collect();
    let inputs = vec![
        tensor("INPUT0", DataType::Int32, &[3, 16], i32_bytes(a.clone())),
        tensor("INPUT1", DataType::Int32, &[3, 16], i32_bytes(b.clone())),
    ];
    let out = instance
        .execute(&batch(inputs.clone(), &["OUTPUT0", "OUTPUT1"]))
        .unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(
        (
            out[0].name.as_str(),
            out[0].datatype,
            out[0].shape.as_slice()
        ),
        ("OUTPUT0", DataType::Int32, &[3, 16][..])
    );
    assert_eq!(
        out[0].data,
        Bytes::from(i32_bytes(a.iter().zip(&b).map(|(x, y)| x + y)))
    );
    assert_eq!(
        out[1].data,
        Bytes::from(i32_bytes(a.iter().zip(&b).map(|(x, y)| x - y)))
    );

    // Only the requested outputs come back.
    let out = instance.execute(&batch(inputs, &["OUTPUT1"])).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].name, "OUTPUT1");
}

/// Input bytes for `shape` elements of `datatype` covering many byte
/// values (valid for BOOL).
fn sample_bytes(datatype: DataType, elements: usize) -> Vec<u8> {
    let size = datatype.element_size().unwrap();
    (0..elements * size)
        .map(|i| {
            if datatype == DataType::Bool {
                (i % 2) as u8
            } else {
                (i * 37 + 11) as u8
            }
        })
        .collect()
}

#[test]
fn identity_round_trips_every_fixed_size_type() {
    let Some(backend) = backend() else { return };
    let types = [
        ("bool", DataType::Bool),
        ("uint8", DataType::Uint8),
        ("uint16", DataType::Uint16),
        ("uint32", DataType::Uint32),
        ("uint64", DataType::Uint64),
        ("int8", DataType::Int8),
        ("int16", DataType::Int16),
        ("int32", DataType::Int32),
        ("int64", DataType::Int64),
        ("fp16", DataType::Fp16),
        ("bf16", DataType::Bf16),
        ("fp32", DataType::Fp32),
        ("fp64", DataType::Fp64),
    ];
    for (suffix, datatype) in types {
        let path = test_model(&format!("identity_{suffix}"));
        let io = backend.inspect(&path).unwrap();
        assert_eq!(
            io.inputs,
            vec![spec("INPUT0", datatype, &[-1, -1])],
            "{suffix}"
        );
        let mut instance = load(&backend, path);
        let data = sample_bytes(datatype, 15);
        let input = tensor("INPUT0", datatype, &[3, 5], data.clone());
        let out = instance.execute(&batch(vec![input], &["OUTPUT0"])).unwrap();
        assert_eq!(out.len(), 1, "{suffix}");
        assert_eq!(
            (out[0].datatype, out[0].shape.as_slice()),
            (datatype, &[3, 5][..]),
            "{suffix}"
        );
        assert_eq!(out[0].data, Bytes::from(data), "{suffix}");
    }
}

#[test]
fn unaligned_input_is_copied_not_rejected() {
    let Some(backend) = backend() else { return };
    let mut instance = load(&backend, test_model("identity_fp64"));
    let values: Vec<u8> = [1.5f64, -2.25, 1e300]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut buffer = vec![0u8];
    buffer.extend_from_slice(&values);
    let unaligned = Bytes::from(buffer).slice(1..);
    let out = instance
        .execute(&batch(
            vec![tensor("INPUT0", DataType::Fp64, &[1, 3], unaligned)],
            &[],
        ))
        .unwrap();
    assert_eq!(out[0].data, Bytes::from(values));
}

#[test]
fn bool_bytes_other_than_0_and_1_are_normalised() {
    let Some(backend) = backend() else { return };
    let mut instance = load(&backend, test_model("identity_bool"));
    let input = tensor("INPUT0", DataType::Bool, &[1, 4], vec![0u8, 1, 2, 255]);
    let out = instance.execute(&batch(vec![input], &["OUTPUT0"])).unwrap();
    assert_eq!(out[0].data, Bytes::from(vec![0u8, 1, 1, 1]));
}

#[test]
fn bytes_round_trip_byte_exact_with_nul_and_0xff() {
    let Some(backend) = backend() else { return };
    let all_bytes: Vec<u8> = (0..=255u8).rev().collect();
    let elements: Vec<&[u8]> = vec![
        b"hello",
        b"",
        b"\0",
        b"a\0b\0",
        &[0xff, 0xfe, 0x00, 0xff],
        "żółw".as_bytes(),
        &all_bytes,
        b"\0\0\0trailing",
    ];
    let data = framed(&elements);
    for path in [
        test_model("identity_string"),
        example_model("string_identity", 1),
    ] {
        let mut instance = load(&backend, path);
        let input = tensor("INPUT0", DataType::Bytes, &[2, 4], data.clone());
        let out = instance.execute(&batch(vec![input], &["OUTPUT0"])).unwrap();
        assert_eq!(
            (out[0].datatype, out[0].shape.as_slice()),
            (DataType::Bytes, &[2, 4][..])
        );
        let back: Vec<&[u8]> = bytes_elements(&out[0].data)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(back, elements);
        assert_eq!(out[0].data, Bytes::from(data.clone()));
    }
}

#[test]
fn empty_batches_work() {
    let Some(backend) = backend() else { return };
    let mut instance = load(&backend, test_model("identity_fp32"));
    let out = instance
        .execute(&batch(
            vec![tensor("INPUT0", DataType::Fp32, &[0, 5], Vec::new())],
            &[],
        ))
        .unwrap();
    assert_eq!(
        (out[0].shape.as_slice(), out[0].data.len()),
        (&[0, 5][..], 0)
    );
    let mut instance = load(&backend, test_model("identity_string"));
    let out = instance
        .execute(&batch(
            vec![tensor("INPUT0", DataType::Bytes, &[2, 0], Vec::new())],
            &[],
        ))
        .unwrap();
    assert_eq!(
        (out[0].shape.as_slice(), out[0].data.len()),
        (&[2, 0][..], 0)
    );
}

#[test]
fn mlp_rows_are_independent_and_finite() {
    let Some(backend) = backend() else { return };
    let params = [
        ("intra_op_thread_count", "1"),
        ("enable_mem_arena", "1"),
        ("memory.enable_memory_arena_shrinkage", "cpu:0"),
        ("unknown_key", "x"),
    ];
    let mut instance = backend
        .load(&source(example_model("mlp", 1), &params))
        .unwrap();
    let rows = 4;
    let input: Vec<f32> = (0..rows * 256)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let out = instance
        .execute(&batch(
            vec![tensor(
                "INPUT",
                DataType::Fp32,
                &[rows as i64, 256],
                f32_bytes(input.clone()),
            )],
            &["OUTPUT"],
        ))
        .unwrap();
    assert_eq!(out[0].shape, vec![rows as i64, 16]);
    let all = f32_values(&out[0].data);
    assert!(all.iter().all(|v| v.is_finite()));
    assert!(
        all[..16].iter().any(|v| *v != all[0]),
        "logits all equal: {:?}",
        &all[..16]
    );

    let single = instance
        .execute(&batch(
            vec![tensor(
                "INPUT",
                DataType::Fp32,
                &[1, 256],
                f32_bytes(input[256..512].to_vec()),
            )],
            &[],
        ))
        .unwrap();
    for (a, b) in f32_values(&single[0].data).iter().zip(&all[16..32]) {
        assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{a} != {b}");
    }
}

#[test]
fn versions_of_add_sub_differ() {
    let Some(backend) = backend() else { return };
    let inputs = vec![
        tensor(
            "INPUT0",
            DataType::Fp32,
            &[4],
            f32_bytes([1.0, 2.0, 3.0, 4.0]),
        ),
        tensor(
            "INPUT1",
            DataType::Fp32,
            &[4],
            f32_bytes([2.0, 2.0, 2.0, 2.0]),
        ),
    ];
    let run = |version| {
        let mut instance = load(&backend, example_model("add_sub_versions", version));
        f32_values(
            &instance
                .execute(&batch(inputs.clone(), &["OUTPUT0"]))
                .unwrap()[0]
                .data,
        )
    };
    assert_eq!(run(1), vec![3.0, 4.0, 5.0, 6.0]);
    assert_eq!(run(2), vec![2.0, 4.0, 6.0, 8.0]);
}
