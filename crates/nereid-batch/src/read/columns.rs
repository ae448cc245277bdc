//! Arrow record batches to records: a column per model input, each cell a
//! row of that input. A column of scalars gives one element per row; a
//! list or fixed-size list column gives a flat, row-major row whose shape
//! comes from the input's dims. Numbers are not copied: a record's tensor
//! is a slice of the column's buffer.

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType as ArrowType, Schema};
use bytes::Bytes;
use nereid_core::tensor::push_bytes_element;
use nereid_core::{DataType, InferRequest, InputTensor};

use super::Record;
use crate::spec::{ModelSpec, TensorSpec};

/// Which column feeds which input.
#[derive(Debug, Clone)]
pub struct ColumnPlan {
    columns: Vec<(usize, TensorSpec)>,
}

impl ColumnPlan {
    /// Matches the model's inputs to `schema`'s columns by name; a required
    /// input without a column, or a column of the wrong type, is refused.
    pub fn new(schema: &Schema, model: &ModelSpec) -> Result<ColumnPlan, String> {
        let mut columns = Vec::new();
        for spec in &model.inputs {
            let Ok(index) = schema.index_of(&spec.name) else {
                if spec.optional {
                    continue;
                }
                let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                return Err(format!(
                    "no column '{}' for the model's input of that name (columns: {})",
                    spec.name,
                    names.join(", ")
                ));
            };
            check_column(spec, schema.field(index).data_type())?;
            columns.push((index, spec.clone()));
        }
        Ok(ColumnPlan { columns })
    }

    /// The columns the plan reads, by index in the schema it was made for.
    pub fn indices(&self) -> Vec<usize> {
        self.columns.iter().map(|(i, _)| *i).collect()
    }

    /// The same plan for a batch holding only [`ColumnPlan::indices`], in
    /// that order.
    pub fn projected(&self) -> ColumnPlan {
        let mut sorted = self.indices();
        sorted.sort_unstable();
        let columns = self
            .columns
            .iter()
            .map(|(i, spec)| (sorted.binary_search(i).unwrap_or(0), spec.clone()))
            .collect();
        ColumnPlan { columns }
    }

    /// One record per row of `batch`.
    pub fn records(&self, batch: &RecordBatch, model: &ModelSpec) -> Vec<Record> {
        let columns: Vec<Column<'_>> = self
            .columns
            .iter()
            .map(|(i, spec)| Column::new(spec, batch.column(*i)))
            .collect();
        (0..batch.num_rows())
            .map(|row| {
                let inputs = columns
                    .iter()
                    .map(|c| c.tensor(row, model))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(InferRequest {
                    model_name: model.name.clone(),
                    model_version: model.version,
                    id: String::new(),
                    inputs,
                    outputs: Vec::new(),
                    parameters: Default::default(),
                    trace: None,
                })
            })
            .collect()
    }
}

/// The Arrow type that holds `datatype`'s elements as KServe lays them out.
pub fn arrow_type(datatype: DataType) -> Option<ArrowType> {
    Some(match datatype {
        DataType::Bool => ArrowType::Boolean,
        DataType::Uint8 => ArrowType::UInt8,
        DataType::Uint16 => ArrowType::UInt16,
        DataType::Uint32 => ArrowType::UInt32,
        DataType::Uint64 => ArrowType::UInt64,
        DataType::Int8 => ArrowType::Int8,
        DataType::Int16 => ArrowType::Int16,
        DataType::Int32 => ArrowType::Int32,
        DataType::Int64 => ArrowType::Int64,
        DataType::Fp16 => ArrowType::Float16,
        DataType::Fp32 => ArrowType::Float32,
        DataType::Fp64 => ArrowType::Float64,
        DataType::Bytes => ArrowType::Binary,
        DataType::Bf16 => return None,
    })
}

fn is_bytes(t: &ArrowType) -> bool {
    matches!(
        t,
        ArrowType::Utf8
            | ArrowType::LargeUtf8
            | ArrowType::Binary
            | ArrowType::LargeBinary
            | ArrowType::Utf8View
            | ArrowType::BinaryView
    )
}

/// The element type of a column (a list's items), and whether it is a list.
fn element_type(t: &ArrowType) -> (&ArrowType, bool) {
    match t {
        ArrowType::List(f) | ArrowType::LargeList(f) | ArrowType::FixedSizeList(f, _) => {
            (f.data_type(), true)
        }
        other => (other, false),
    }
}

fn check_column(spec: &TensorSpec, column: &ArrowType) -> Result<(), String> {
    let (element, list) = element_type(column);
    let fits = match spec.datatype {
        DataType::Bytes => is_bytes(element),
        dt => arrow_type(dt).as_ref() == Some(element),
    };
    if !fits {
        let wanted = match spec.datatype {
            DataType::Bytes => "strings or binary".to_string(),
            dt => arrow_type(dt).map_or_else(|| "nothing Arrow has".into(), |t| t.to_string()),
        };
        return Err(format!(
            "column '{}' holds {column}, but input '{}' is {} (items of {wanted} expected){}",
            spec.name,
            spec.name,
            spec.datatype,
            if matches!(
                element,
                ArrowType::List(_) | ArrowType::LargeList(_) | ArrowType::FixedSizeList(..)
            ) {
                "; give each row as one flat list, row-major"
            } else {
                ""
            }
        ));
    }
    if !list && !spec.is_scalar() && spec.fixed_elements() != Some(1) {
        return Err(format!(
            "column '{}' holds one {element} per row, but input '{}' takes rows of shape {}: \
             give each row as a list",
            spec.name,
            spec.name,
            crate::spec::dims_text(&spec.row_dims)
        ));
    }
    Ok(())
}

/// Where a column's elements are.
enum Values {
    /// Fixed-size elements, little-endian, `size` bytes each.
    Raw { data: Bytes, size: usize },
    /// Strings or binary, framed per row.
    Bytes(ArrayRef),
}

struct Column<'a> {
    spec: &'a TensorSpec,
    array: &'a ArrayRef,
    values: ArrayRef,
    elements: Values,
}

impl<'a> Column<'a> {
    fn new(spec: &'a TensorSpec, array: &'a ArrayRef) -> Column<'a> {
        let values = match array.data_type() {
            ArrowType::FixedSizeList(..) => array.as_fixed_size_list().values().clone(),
            ArrowType::List(_) => array.as_list::<i32>().values().clone(),
            ArrowType::LargeList(_) => array.as_list::<i64>().values().clone(),
            _ => array.clone(),
        };
        let elements = raw_values(&values).unwrap_or_else(|| Values::Bytes(values.clone()));
        Column {
            spec,
            array,
            values,
            elements,
        }
    }

    /// The element range of `row` in `values`.
    fn range(&self, row: usize) -> (usize, usize) {
        match self.array.data_type() {
            ArrowType::FixedSizeList(_, n) => {
                let start = self.array.as_fixed_size_list().value_offset_at(row);
                (start, start + *n as usize)
            }
            ArrowType::List(_) => {
                let o = self.array.as_list::<i32>().value_offsets();
                (o[row] as usize, o[row + 1] as usize)
            }
            ArrowType::LargeList(_) => {
                let o = self.array.as_list::<i64>().value_offsets();
                (o[row] as usize, o[row + 1] as usize)
            }
            _ => (row, row + 1),
        }
    }

    fn tensor(&self, row: usize, model: &ModelSpec) -> Result<InputTensor, String> {
        let name = &self.spec.name;
        if self.array.is_null(row) {
            return Err(format!("column '{name}' is null in this record"));
        }
        let (start, end) = self.range(row);
        if self.values.null_count() > 0 && (start..end).any(|i| self.values.is_null(i)) {
            return Err(format!("column '{name}' has a null element in this record"));
        }
        let row_shape = self.spec.row_shape(end - start)?;
        let data = match &self.elements {
            Values::Raw { data, size } => data.slice(start * size..end * size),
            Values::Bytes(values) => framed(values, start, end),
        };
        Ok(InputTensor {
            name: name.clone(),
            datatype: self.spec.datatype,
            shape: model.request_shape(&row_shape),
            data,
            parameters: Default::default(),
        })
    }
}

/// The elements of a numeric or boolean array as KServe's raw bytes: the
/// array's own buffer for numbers, a byte per element for booleans.
fn raw_values(values: &ArrayRef) -> Option<Values> {
    use arrow_array::types::*;
    let buffer = |data: arrow_buffer::Buffer, size| {
        Some(Values::Raw {
            data: Bytes::from_owner(data),
            size,
        })
    };
    match values.data_type() {
        ArrowType::Boolean => {
            let bools = values.as_boolean();
            let bytes: Vec<u8> = (0..bools.len()).map(|i| u8::from(bools.value(i))).collect();
            Some(Values::Raw {
                data: Bytes::from(bytes),
                size: 1,
            })
        }
        ArrowType::Int8 => buffer(
            values.as_primitive::<Int8Type>().values().inner().clone(),
            1,
        ),
        ArrowType::Int16 => buffer(
            values.as_primitive::<Int16Type>().values().inner().clone(),
            2,
        ),
        ArrowType::Int32 => buffer(
            values.as_primitive::<Int32Type>().values().inner().clone(),
            4,
        ),
        ArrowType::Int64 => buffer(
            values.as_primitive::<Int64Type>().values().inner().clone(),
            8,
        ),
        ArrowType::UInt8 => buffer(
            values.as_primitive::<UInt8Type>().values().inner().clone(),
            1,
        ),
        ArrowType::UInt16 => buffer(
            values.as_primitive::<UInt16Type>().values().inner().clone(),
            2,
        ),
        ArrowType::UInt32 => buffer(
            values.as_primitive::<UInt32Type>().values().inner().clone(),
            4,
        ),
        ArrowType::UInt64 => buffer(
            values.as_primitive::<UInt64Type>().values().inner().clone(),
            8,
        ),
        ArrowType::Float16 => buffer(
            values
                .as_primitive::<Float16Type>()
                .values()
                .inner()
                .clone(),
            2,
        ),
        ArrowType::Float32 => buffer(
            values
                .as_primitive::<Float32Type>()
                .values()
                .inner()
                .clone(),
            4,
        ),
        ArrowType::Float64 => buffer(
            values
                .as_primitive::<Float64Type>()
                .values()
                .inner()
                .clone(),
            8,
        ),
        _ => None,
    }
}

/// Elements `start..end` of a string or binary array in KServe's BYTES
/// framing (a 4-byte length before each).
fn framed(values: &ArrayRef, start: usize, end: usize) -> Bytes {
    let mut out = Vec::new();
    for i in start..end {
        let element: &[u8] = match values.data_type() {
            ArrowType::Utf8 => values.as_string::<i32>().value(i).as_bytes(),
            ArrowType::LargeUtf8 => values.as_string::<i64>().value(i).as_bytes(),
            ArrowType::Binary => values.as_binary::<i32>().value(i),
            ArrowType::LargeBinary => values.as_binary::<i64>().value(i),
            ArrowType::Utf8View => values.as_string_view().value(i).as_bytes(),
            ArrowType::BinaryView => values.as_binary_view().value(i),
            _ => &[],
        };
        push_bytes_element(&mut out, element);
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{FixedSizeListBuilder, Float32Builder, ListBuilder, StringBuilder};
    use arrow_array::{Int32Array, StringArray};
    use arrow_schema::{Field, Schema};

    use super::*;

    fn model(inputs: Vec<TensorSpec>) -> ModelSpec {
        ModelSpec {
            name: "m".into(),
            version: None,
            batching: true,
            max_batch_size: 8,
            inputs,
            outputs: Vec::new(),
        }
    }

    fn spec(name: &str, datatype: DataType, dims: &[i64]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            datatype,
            row_dims: dims.to_vec(),
            optional: false,
        }
    }

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).unwrap()
    }

    #[test]
    fn fixed_size_lists_become_rows_that_share_the_column_buffer() {
        let mut b = FixedSizeListBuilder::new(Float32Builder::new(), 2);
        for row in [[1.0f32, 2.0], [3.0, 4.0], [5.0, 6.0]] {
            b.values().append_slice(&row);
            b.append(true);
        }
        let m = model(vec![spec("X", DataType::Fp32, &[2])]);
        let batch = batch(vec![("X", Arc::new(b.finish()) as ArrayRef)]).slice(1, 2);
        let plan = ColumnPlan::new(&batch.schema(), &m).unwrap();
        let records = plan.records(&batch, &m);
        let request = records[1].as_ref().unwrap();
        assert_eq!(request.inputs[0].shape, [1, 2]);
        let floats: Vec<f32> = request.inputs[0]
            .data
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(floats, [5.0, 6.0]);
    }

    #[test]
    fn variable_lists_strings_and_nulls() {
        let mut lists = ListBuilder::new(Float32Builder::new());
        lists.values().append_slice(&[1.0, 2.0, 3.0]);
        lists.append(true);
        lists.append(false);
        lists.values().append_slice(&[4.0]);
        lists.append(true);
        let words = StringArray::from(vec![Some("ab"), Some("c"), None]);
        let m = model(vec![
            spec("V", DataType::Fp32, &[-1]),
            spec("S", DataType::Bytes, &[1]),
        ]);
        let batch = batch(vec![
            ("V", Arc::new(lists.finish()) as ArrayRef),
            ("S", Arc::new(words) as ArrayRef),
            (
                "unused",
                Arc::new(Int32Array::from(vec![0, 0, 0])) as ArrayRef,
            ),
        ]);
        let records = ColumnPlan::new(&batch.schema(), &m)
            .unwrap()
            .records(&batch, &m);
        let first = records[0].as_ref().unwrap();
        assert_eq!(first.inputs[0].shape, [1, 3]);
        assert_eq!(first.inputs[1].shape, [1, 1]);
        assert_eq!(&first.inputs[1].data[..], b"\x02\0\0\0ab");
        assert_eq!(
            records[1].as_ref().unwrap_err(),
            "column 'V' is null in this record"
        );
        assert_eq!(
            records[2].as_ref().unwrap_err(),
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

    #[test]
    fn a_row_of_the_wrong_length_fails_alone() {
        let mut lists = ListBuilder::new(Float32Builder::new());
        lists.values().append_slice(&[1.0, 2.0]);
        lists.append(true);
        lists.values().append_slice(&[1.0, 2.0, 3.0]);
        lists.append(true);
        let m = model(vec![spec("X", DataType::Fp32, &[2])]);
        let batch = batch(vec![("X", Arc::new(lists.finish()) as ArrayRef)]);
        let records = ColumnPlan::new(&batch.schema(), &m)
            .unwrap()
            .records(&batch, &m);
        assert!(records[0].is_ok());
        let e = records[1].as_ref().unwrap_err();
        assert!(
            e.contains("takes rows of shape [2], which 3 elements do not fill"),
            "{e}"
        );
    }
}
