//! Bad batches, configs and devices give errors that name the culprit.

use super::*;

#[test]
fn bad_batches_are_errors_not_panics() {
    let Some(backend) = backend() else { return };
    let mut instance = load(&backend, example_model("simple", 1));
    let good = || tensor("INPUT1", DataType::Int32, &[1, 16], i32_bytes(0..16));
    let cases = [
        (
            vec![
                tensor("INPUT0", DataType::Fp32, &[1, 16], f32_bytes([0.0; 16])),
                good(),
            ],
            "is FP32, model expects INT32",
        ),
        (
            vec![
                tensor("INPUT0", DataType::Int32, &[1, 16], vec![0u8; 60]),
                good(),
            ],
            "needs 64 bytes",
        ),
        (vec![good()], "input 'INPUT0' is missing"),
        (
            vec![
                tensor("INPUT0", DataType::Int32, &[1, 8], i32_bytes(0..8)),
                good(),
            ],
            "model '",
        ),
        (
            vec![
                tensor("EXTRA", DataType::Int32, &[1], i32_bytes([0])),
                tensor("INPUT0", DataType::Int32, &[1, 16], i32_bytes(0..16)),
                good(),
            ],
            "no input 'EXTRA'",
        ),
    ];
    for (inputs, expected) in cases {
        let err = instance.execute(&batch(inputs, &["OUTPUT0"])).unwrap_err();
        assert!(
            matches!(&err, BackendError::Execute(m) if m.contains(expected)),
            "{err:?} lacks {expected:?}"
        );
    }
    let inputs = vec![
        tensor("INPUT0", DataType::Int32, &[1, 16], i32_bytes(0..16)),
        good(),
    ];
    let err = instance.execute(&batch(inputs, &["OUTPUT9"])).unwrap_err();
    assert!(
        matches!(&err, BackendError::Execute(m) if m.contains("no output 'OUTPUT9'")),
        "{err:?}"
    );

    let mut strings = load(&backend, test_model("identity_string"));
    let mut truncated = framed(&[b"abc"]);
    truncated.pop();
    let err = strings
        .execute(&batch(
            vec![tensor("INPUT0", DataType::Bytes, &[1, 1], truncated)],
            &[],
        ))
        .unwrap_err();
    assert!(
        matches!(&err, BackendError::Execute(m) if m.contains("declares 3 bytes")),
        "{err:?}"
    );
}

#[test]
fn bad_parameters_are_refused() {
    let Some(backend) = backend() else { return };
    let err = backend
        .load(&source(
            example_model("simple", 1),
            &[("inter_op_thread_count", "many")],
        ))
        .err()
        .unwrap();
    assert!(
        matches!(&err, BackendError::Load(m) if m.contains("inter_op_thread_count")),
        "{err:?}"
    );
}

#[test]
fn a_second_library_path_is_refused() {
    let Some(_backend) = backend() else { return };
    let err = OnnxBackend::new(Some("/elsewhere/libonnxruntime.so".into())).unwrap_err();
    assert!(
        matches!(&err, BackendError::Runtime(m) if m.contains("/elsewhere/libonnxruntime.so")),
        "{err:?}"
    );
}

#[test]
fn run_config_entries_reach_onnx_runtime() {
    let Some(backend) = backend() else { return };
    // Shrinking an arena that was disabled is ONNX Runtime's own error, as
    // in Triton: proof that the run option is passed on every run.
    let params = [
        ("enable_mem_arena", "0"),
        ("memory.enable_memory_arena_shrinkage", "cpu:0"),
    ];
    let mut instance = backend
        .load(&source(test_model("identity_int8"), &params))
        .unwrap();
    let input = tensor("INPUT0", DataType::Int8, &[1, 2], vec![1u8, 2]);
    let err = instance.execute(&batch(vec![input], &[])).unwrap_err();
    assert!(
        matches!(&err, BackendError::Execute(m) if m.contains("arena")),
        "{err:?}"
    );
}
