//! Column plans and the requests they make from record batches.

use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder, ListBuilder, StringBuilder};
use arrow_array::{Int32Array, StringArray};
use arrow_schema::{Field, Schema};

use super::*;
use crate::testing::{self, spec};

fn model(inputs: Vec<TensorSpec>) -> ModelSpec {
    testing::model(inputs, Vec::new())
}

fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    RecordBatch::try_from_iter(columns).unwrap()
}

fn groups(batch: &RecordBatch, m: &ModelSpec, most: usize) -> Vec<Group> {
    ColumnPlan::new(&batch.schema(), m)
        .unwrap()
        .groups(batch, m, most)
}

fn floats(input: &InputTensor) -> Vec<f32> {
    input
        .data
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A list column of FP32 rows, `None` a null cell.
fn lists(rows: &[Option<&[f32]>]) -> ArrayRef {
    let mut lists = ListBuilder::new(Float32Builder::new());
    for row in rows {
        if let Some(values) = row {
            lists.values().append_slice(values);
        }
        lists.append(row.is_some());
    }
    Arc::new(lists.finish())
}

#[test]
fn fixed_size_lists_become_requests_that_share_the_column_buffer() {
    let mut b = FixedSizeListBuilder::new(Float32Builder::new(), 2);
    for row in [[1.0f32, 2.0], [3.0, 4.0], [5.0, 6.0]] {
        b.values().append_slice(&row);
        b.append(true);
    }
    let m = model(vec![spec("X", DataType::Fp32, &[2])]);
    let batch = batch(vec![("X", Arc::new(b.finish()) as ArrayRef)]).slice(1, 2);
    let one = groups(&batch, &m, 1);
    let request = one[1].request.as_ref().unwrap();
    assert_eq!((one.len(), one[1].rows), (2, 1));
    assert_eq!(request.inputs[0].shape, [1, 2]);
    assert_eq!(floats(&request.inputs[0]), [5.0, 6.0]);
    let together = groups(&batch, &m, 8);
    let request = together[0].request.as_ref().unwrap();
    assert_eq!((together.len(), together[0].rows), (1, 2));
    assert_eq!(request.inputs[0].shape, [2, 2]);
    assert_eq!(floats(&request.inputs[0]), [3.0, 4.0, 5.0, 6.0]);
}

#[test]
fn requests_hold_up_to_most_rows_and_break_where_a_row_cannot_join() {
    let (ok, long): (&[f32], &[f32]) = (&[1.0, 2.0], &[1.0, 2.0, 3.0]);
    let rows = [
        Some(ok),
        Some(ok),
        Some(long),
        Some(ok),
        None,
        Some(ok),
        Some(ok),
        Some(ok),
        Some(ok),
        Some(ok),
        Some(ok),
    ];
    let m = model(vec![spec("X", DataType::Fp32, &[2])]);
    let batch = batch(vec![("X", lists(&rows))]);
    let got = groups(&batch, &m, 4);
    let sizes: Vec<usize> = got.iter().map(|g| g.rows).collect();
    assert_eq!(sizes, [2, 1, 1, 1, 4, 2]);
    let e = got[1].request.as_ref().unwrap_err();
    assert!(
        e.contains("takes rows of shape [2], which 3 elements do not fill"),
        "{e}"
    );
    assert_eq!(got[2].request.as_ref().unwrap().inputs[0].shape, [1, 2]);
    assert_eq!(
        got[3].request.as_ref().unwrap_err(),
        "column 'X' is null in this record"
    );
    assert_eq!(got[4].request.as_ref().unwrap().inputs[0].shape, [4, 2]);
    // A model that does not batch takes one row per request.
    let unbatched = ModelSpec {
        batching: false,
        max_batch_size: 0,
        ..m
    };
    let request = groups(&batch, &unbatched, 1)[0].request.clone().unwrap();
    assert_eq!(request.inputs[0].shape, [2]);
}

#[test]
fn rows_of_a_variable_dim_go_together_while_their_length_is_the_same() {
    let rows: [Option<&[f32]>; 4] = [
        Some(&[1.0, 2.0]),
        Some(&[3.0, 4.0]),
        Some(&[5.0]),
        Some(&[6.0]),
    ];
    let m = model(vec![spec("V", DataType::Fp32, &[-1])]);
    let got = groups(&batch(vec![("V", lists(&rows))]), &m, 8);
    let shapes: Vec<&[i64]> = got
        .iter()
        .map(|g| g.request.as_ref().unwrap().inputs[0].shape.as_slice())
        .collect();
    assert_eq!(shapes, [&[2, 2][..], &[2, 1][..]]);
    let second = &got[1].request.as_ref().unwrap().inputs[0];
    assert_eq!(floats(second), [5.0, 6.0]);
}

#[test]
fn strings_and_nulls_go_alone() {
    let words = StringArray::from(vec![Some("ab"), Some("c"), None]);
    let m = model(vec![
        spec("V", DataType::Fp32, &[-1]),
        spec("S", DataType::Bytes, &[1]),
    ]);
    let batch = batch(vec![
        ("V", lists(&[Some(&[1.0, 2.0, 3.0]), None, Some(&[4.0])])),
        ("S", Arc::new(words) as ArrayRef),
        (
            "unused",
            Arc::new(Int32Array::from(vec![0, 0, 0])) as ArrayRef,
        ),
    ]);
    let got = groups(&batch, &m, 8);
    assert!(got.iter().all(|g| g.rows == 1), "{got:?}");
    let first = got[0].request.as_ref().unwrap();
    assert_eq!(first.inputs[0].shape, [1, 3]);
    assert_eq!(first.inputs[1].shape, [1, 1]);
    assert_eq!(&first.inputs[1].data[..], b"\x02\0\0\0ab");
    assert_eq!(
        got[1].request.as_ref().unwrap_err(),
        "column 'V' is null in this record"
    );
    assert_eq!(
        got[2].request.as_ref().unwrap_err(),
        "column 'S' is null in this record"
    );
}

#[test]
fn columns_that_do_not_fit_the_model_are_refused_up_front() {
    let m = model(vec![spec("X", DataType::Fp32, &[4])]);
    let ints = Schema::new(vec![Field::new("X", ArrowType::Int32, false)]);
    let e = ColumnPlan::new(&ints, &m).unwrap_err();
    assert!(
        e.contains("column 'X' holds Int32, but input 'X' is FP32"),
        "{e}"
    );
    let scalars = Schema::new(vec![Field::new("X", ArrowType::Float32, false)]);
    let e = ColumnPlan::new(&scalars, &m).unwrap_err();
    assert!(e.contains("takes rows of shape [4]"), "{e}");
    let other = Schema::new(vec![Field::new("Y", ArrowType::Float32, false)]);
    let e = ColumnPlan::new(&other, &m).unwrap_err();
    assert!(
        e.contains("no column 'X'") && e.contains("columns: Y"),
        "{e}"
    );
    let mut nested = ListBuilder::new(ListBuilder::new(StringBuilder::new()));
    nested.append(true);
    let nested = Schema::new(vec![Field::new(
        "X",
        nested.finish().data_type().clone(),
        true,
    )]);
    assert!(
        ColumnPlan::new(&nested, &m)
            .unwrap_err()
            .contains("flat list")
    );
}
