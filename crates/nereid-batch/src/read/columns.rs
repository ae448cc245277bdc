//! Arrow record batches to records: a column per model input, each cell a
//! row of that input. A column of scalars gives one element per row; a
//! list or fixed-size list column gives a flat, row-major row whose shape
//! comes from the input's dims. Consecutive rows of numbers with the same
//! shape and no null go in one request; a row of strings, and a row that
//! fails, go alone. Numbers are not copied: a request's tensor is a slice
//! of the column's buffer, rows being contiguous in it.

use std::ops::Range;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType as ArrowType, Schema};
use bytes::Bytes;
use nereid_core::tensor::push_bytes_element;
use nereid_core::{DataType, InputTensor};

use super::Group;
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

    /// The rows of `batch` as requests of up to `most` rows each.
    pub fn groups(&self, batch: &RecordBatch, model: &ModelSpec, most: usize) -> Vec<Group> {
        let columns: Vec<Column<'_>> = self
            .columns
            .iter()
            .map(|(i, spec)| Column::new(spec, batch.column(*i)))
            .collect();
        let rows = batch.num_rows();
        let mut groups = Vec::with_capacity(rows.div_ceil(most.max(1)));
        let mut first = 0;
        while first < rows {
            let end = group_end(&columns, first, rows.min(first + most));
            let inputs = columns
                .iter()
                .map(|c| c.tensor(first..end, model))
                .collect::<Result<Vec<_>, _>>();
            groups.push(Group {
                rows: end - first,
                request: inputs.map(|inputs| super::request(model, inputs)),
            });
            first = end;
        }
        groups
    }
}

/// Where the request that starts at row `first` ends: after the rows that
/// follow it, up to `limit`, and can share it. A row that cannot start one
/// goes alone, as does every row of a model given no input column (a
/// request without tensors has no first dimension to count rows on).
fn group_end(columns: &[Column<'_>], first: usize, limit: usize) -> usize {
    let shares =
        limit > first + 1 && !columns.is_empty() && columns.iter().all(|c| c.groups_from(first));
    if !shares {
        return first + 1;
    }
    (first + 1..limit)
        .find(|&row| !columns.iter().all(|c| c.joins(first, row)))
        .unwrap_or(limit)
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

    /// Elements in `row`.
    fn len(&self, row: usize) -> usize {
        let (start, end) = self.range(row);
        end - start
    }

    /// Why `row` cannot be read: a null cell, or a null among its elements.
    fn missing(&self, row: usize) -> Option<String> {
        let name = &self.spec.name;
        if self.array.is_null(row) {
            return Some(format!("column '{name}' is null in this record"));
        }
        let (start, end) = self.range(row);
        if self.values.null_count() > 0 && (start..end).any(|i| self.values.is_null(i)) {
            return Some(format!("column '{name}' has a null element in this record"));
        }
        None
    }

    /// Whether a request of several rows can start at `row`: fixed-size
    /// elements (a row of strings has its own length in bytes), present,
    /// and of a shape the input takes.
    fn groups_from(&self, row: usize) -> bool {
        matches!(self.elements, Values::Raw { .. })
            && self.missing(row).is_none()
            && self.spec.row_shape(self.len(row)).is_ok()
    }

    /// Whether `row` can join the request that `first` starts: present and
    /// as long (so of the same shape).
    fn joins(&self, first: usize, row: usize) -> bool {
        self.len(row) == self.len(first) && self.missing(row).is_none()
    }

    /// The tensor of `rows`, which are one row or rows that
    /// [`Column::joins`] put together.
    fn tensor(&self, rows: Range<usize>, model: &ModelSpec) -> Result<InputTensor, String> {
        if let Some(why) = rows.clone().find_map(|row| self.missing(row)) {
            return Err(why);
        }
        let (start, first_end) = self.range(rows.start);
        let (_, end) = self.range(rows.end - 1);
        let row_shape = self.spec.row_shape(first_end - start)?;
        let data = match &self.elements {
            Values::Raw { data, size } => data.slice(start * size..end * size),
            Values::Bytes(values) => framed(values, start, end),
        };
        Ok(InputTensor {
            name: self.spec.name.clone(),
            datatype: self.spec.datatype,
            shape: model.request_shape(rows.len(), &row_shape),
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
#[path = "columns_tests.rs"]
mod tests;
