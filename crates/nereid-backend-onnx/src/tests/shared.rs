//! The instances of a version share one CPU session: what shares, what
//! does not, that they run at once, and that the session goes with them.

use std::path::PathBuf;
use std::sync::Arc;

use nereid_core::{BackendError, DataType, ModelInstance, ModelSource};

use super::{backend, batch, example_model, f32_bytes, f32_values, source, tensor};
use crate::{OnnxBackend, OnnxInstance};

fn instance(backend: &OnnxBackend, source: &ModelSource) -> OnnxInstance {
    backend.load_instance(source).expect("model loads")
}

/// `source` as instance `index` of its version.
fn nth(mut source: ModelSource, index: usize) -> ModelSource {
    source.instance_index = index;
    source.instance_name = format!("test_0_{index}");
    source
}

#[test]
fn instances_of_a_version_share_a_session_until_the_last_goes() {
    let Some(backend) = backend() else { return };
    let mlp = source(example_model("mlp", 1), &[]);
    let instances: Vec<_> = (0..4)
        .map(|i| instance(&backend, &nth(mlp.clone(), i)))
        .collect();
    let first = instances[0].session();
    assert!(instances.iter().all(|i| Arc::ptr_eq(i.session(), first)));
    assert_eq!(Arc::strong_count(first), 4);

    let mut one_thread = mlp.clone();
    one_thread.config = super::config_with("test", &[("intra_op_thread_count", "1")]);
    let other = instance(&backend, &one_thread);
    assert!(!Arc::ptr_eq(other.session(), first), "other settings");
    let pooled = source(example_model("mlp", 1), &[("intra_op_thread_count", "2")]);
    let a = instance(&backend, &pooled);
    let b = instance(&backend, &nth(pooled, 1));
    assert!(!Arc::ptr_eq(a.session(), b.session()), "a pool each");
    let mut version_2 = mlp.clone();
    version_2.version = 2;
    assert!(!Arc::ptr_eq(
        instance(&backend, &version_2).session(),
        first
    ));

    let session = Arc::downgrade(first);
    drop(instances);
    assert!(
        session.upgrade().is_none(),
        "released with the last instance"
    );
}

/// The MLP's logits for `rows` rows of a pattern starting at `seed`.
fn mlp_run(
    instance: &mut OnnxInstance,
    seed: usize,
    rows: usize,
) -> Result<Vec<f32>, BackendError> {
    let input: Vec<f32> = (0..rows * 256)
        .map(|i| ((i * 7919 + seed) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let input = tensor(
        "INPUT",
        DataType::Fp32,
        &[rows as i64, 256],
        f32_bytes(input),
    );
    let out = instance.execute(&batch(vec![input], &["OUTPUT"]))?;
    Ok(f32_values(&out[0].data))
}

#[test]
fn instances_run_their_shared_session_at_once() {
    let Some(backend) = backend() else { return };
    let mlp = source(example_model("mlp", 1), &[]);
    let mut alone = instance(&backend, &nth(mlp.clone(), 9));
    let expected: Vec<_> = (0..4)
        .map(|seed| mlp_run(&mut alone, seed, 3).unwrap())
        .collect();
    std::thread::scope(|s| {
        for index in 0..4 {
            let mut instance = instance(&backend, &nth(mlp.clone(), index));
            let expected = &expected[index];
            s.spawn(move || {
                for _ in 0..50 {
                    assert_eq!(&mlp_run(&mut instance, index, 3).unwrap(), expected);
                }
            });
        }
    });
}

#[test]
fn a_changed_model_file_is_loaded_afresh() {
    let Some(backend) = backend() else { return };
    let dir = std::env::temp_dir().join(format!("nereid-onnx-shared-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file: PathBuf = dir.join("model.onnx");
    let inputs = vec![
        tensor(
            "INPUT0",
            DataType::Fp32,
            &[4],
            f32_bytes([1.0, 2.0, 3.0, 4.0]),
        ),
        tensor("INPUT1", DataType::Fp32, &[4], f32_bytes([2.0; 4])),
    ];
    let run = |instance: &mut OnnxInstance| {
        f32_values(
            &instance
                .execute(&batch(inputs.clone(), &["OUTPUT0"]))
                .unwrap()[0]
                .data,
        )
    };
    std::fs::copy(example_model("add_sub_versions", 1), &file).unwrap();
    let mut old = instance(&backend, &source(file.clone(), &[]));
    assert_eq!(run(&mut old), vec![3.0, 4.0, 5.0, 6.0]);
    // Replaced as a repository update replaces it, while the old
    // instance still serves.
    let new_file = dir.join("new.onnx");
    std::fs::copy(example_model("add_sub_versions", 2), &new_file).unwrap();
    std::fs::rename(&new_file, &file).unwrap();
    let mut new = instance(&backend, &nth(source(file, &[]), 1));
    assert!(!Arc::ptr_eq(old.session(), new.session()));
    assert_eq!(run(&mut new), vec![2.0, 4.0, 6.0, 8.0]);
    std::fs::remove_dir_all(&dir).unwrap();
}
