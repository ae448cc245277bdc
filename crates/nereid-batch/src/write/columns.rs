//! Results to Arrow columns: a column per model output and an `error`
//! column. A row of one element is a scalar cell, a row of a fixed number
//! of elements a fixed-size list, any other a list; a failed record is
//! null in every output column (zeros underneath, so that a fixed-size
//! row keeps its place) and carries its message in `error`.

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, FixedSizeListArray, ListArray, RecordBatch,
};
use arrow_buffer::{BooleanBuffer, MutableBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType as ArrowType, Field, Schema, SchemaRef};
use nereid_core::tensor::bytes_elements;
use nereid_core::{DataType, InferResponse, Tensor};

use crate::read::arrow_type;
use crate::spec::{ModelSpec, TensorSpec, dims_text};

/// The name of the column that holds a failed record's message.
pub const ERROR_COLUMN: &str = "error";

/// How an output's rows are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Scalar,
    Fixed(usize),
    List,
}

impl Layout {
    pub fn of(spec: &TensorSpec) -> Layout {
        match spec.fixed_elements() {
            Some(1) if spec.is_scalar() => Layout::Scalar,
            Some(n) => Layout::Fixed(n),
            None => Layout::List,
        }
    }
}

/// The schema of a job's columnar output; refused for outputs Arrow
/// cannot hold.
pub fn output_schema(model: &ModelSpec) -> Result<SchemaRef, String> {
    let mut fields = Vec::with_capacity(model.outputs.len() + 1);
    for spec in &model.outputs {
        if spec.name == ERROR_COLUMN {
            return Err(format!(
                "model '{}' has an output named '{ERROR_COLUMN}', the column that holds failed \
                 records' messages: write JSON lines instead",
                model.name
            ));
        }
        let item = arrow_type(spec.datatype).ok_or_else(|| {
            format!(
                "output '{}' is {}, which Arrow and Parquet have no type for: write JSON lines",
                spec.name, spec.datatype
            )
        })?;
        let item_field = Arc::new(Field::new("item", item.clone(), false));
        let column = match Layout::of(spec) {
            Layout::Scalar => item,
            Layout::Fixed(n) => ArrowType::FixedSizeList(item_field, n as i32),
            Layout::List => ArrowType::List(item_field),
        };
        fields.push(Field::new(&spec.name, column, true));
    }
    fields.push(Field::new(ERROR_COLUMN, ArrowType::Utf8, true));
    Ok(Arc::new(Schema::new(fields)))
}

/// One output's rows so far.
#[derive(Debug)]
struct Column {
    spec: TensorSpec,
    layout: Layout,
    /// Little-endian elements (numbers and booleans, a byte each), in a
    /// buffer aligned as Arrow wants it.
    raw: MutableBuffer,
    /// BYTES elements.
    strings: Vec<Vec<u8>>,
    /// List offsets, in elements.
    offsets: Vec<i32>,
    valid: Vec<bool>,
}

/// Rows of results, not yet written.
#[derive(Debug)]
pub struct OutputColumns {
    schema: SchemaRef,
    model: ModelSpec,
    columns: Vec<Column>,
    errors: StringBuilder,
    rows: usize,
}

impl OutputColumns {
    pub fn new(model: &ModelSpec, schema: SchemaRef) -> OutputColumns {
        let columns = model
            .outputs
            .iter()
            .map(|spec| Column {
                spec: spec.clone(),
                layout: Layout::of(spec),
                raw: MutableBuffer::new(0),
                strings: Vec::new(),
                offsets: vec![0],
                valid: Vec::new(),
            })
            .collect();
        OutputColumns {
            schema,
            model: model.clone(),
            columns,
            errors: StringBuilder::new(),
            rows: 0,
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes held, roughly.
    pub fn bytes(&self) -> usize {
        self.columns
            .iter()
            .map(|c| c.raw.len() + c.strings.iter().map(Vec::len).sum::<usize>())
            .sum()
    }

    /// Appends one record's result; a response whose outputs do not fit
    /// the columns becomes a failed record. Returns whether it failed.
    pub fn push(&mut self, result: Result<InferResponse, String>) -> bool {
        let outputs = result.and_then(|response| self.match_outputs(response));
        self.rows += 1;
        match outputs {
            Ok(tensors) => {
                for (column, tensor) in self.columns.iter_mut().zip(tensors) {
                    column.push(Some(&tensor));
                }
                self.errors.append_null();
                false
            }
            Err(message) => {
                for column in &mut self.columns {
                    column.push(None);
                }
                self.errors.append_value(message);
                true
            }
        }
    }

    /// The response's tensors in column order, each checked against its
    /// column's layout.
    fn match_outputs(&self, mut response: InferResponse) -> Result<Vec<Tensor>, String> {
        self.columns
            .iter()
            .map(|column| {
                let at = response
                    .outputs
                    .iter()
                    .position(|t| t.name == column.spec.name)
                    .ok_or_else(|| format!("the response has no output '{}'", column.spec.name))?;
                let tensor = response.outputs.swap_remove(at);
                column.check(&tensor, &self.model)?;
                Ok(tensor)
            })
            .collect()
    }

    /// The rows so far as a record batch; the columns start empty again.
    pub fn take_batch(&mut self) -> Result<RecordBatch, ArrowError> {
        let mut arrays = self
            .columns
            .iter_mut()
            .map(Column::take)
            .collect::<Result<Vec<ArrayRef>, _>>()?;
        arrays.push(Arc::new(self.errors.finish()));
        self.rows = 0;
        RecordBatch::try_new(Arc::clone(&self.schema), arrays)
    }
}

impl Column {
    fn check(&self, tensor: &Tensor, model: &ModelSpec) -> Result<(), String> {
        let name = &self.spec.name;
        if tensor.datatype != self.spec.datatype {
            return Err(format!(
                "output '{name}' is {}, the model config says {}",
                tensor.datatype, self.spec.datatype
            ));
        }
        let row = model.row_of(&tensor.shape);
        let elements: i64 = row.iter().product();
        if let Layout::Fixed(n) = self.layout
            && elements != n as i64
        {
            return Err(format!(
                "output '{name}' has a row of shape {}, the model config says {}",
                dims_text(row),
                dims_text(&self.spec.row_dims)
            ));
        }
        if self.layout == Layout::Scalar && elements != 1 {
            return Err(format!("output '{name}' has {elements} elements, not one"));
        }
        Ok(())
    }

    fn push(&mut self, tensor: Option<&Tensor>) {
        self.valid.push(tensor.is_some());
        let size = self.spec.datatype.element_size().unwrap_or(0);
        match (tensor, self.layout) {
            (Some(t), _) if self.spec.datatype == DataType::Bytes => {
                self.strings.extend(
                    bytes_elements(&t.data)
                        .map_while(Result::ok)
                        .map(<[u8]>::to_vec),
                );
            }
            (Some(t), _) => self.raw.extend_from_slice(&t.data),
            (None, Layout::Scalar) if size > 0 => self.raw.extend_zeros(size),
            (None, Layout::Scalar) => self.strings.push(Vec::new()),
            (None, Layout::Fixed(n)) if size > 0 => self.raw.extend_zeros(n * size),
            (None, Layout::Fixed(n)) => self.strings.extend((0..n).map(|_| Vec::new())),
            (None, Layout::List) => {}
        }
        let elements = match size {
            0 => self.strings.len(),
            size => self.raw.len() / size,
        };
        self.offsets.push(elements as i32);
    }

    fn take(&mut self) -> Result<ArrayRef, ArrowError> {
        let valid = std::mem::take(&mut self.valid);
        let offsets = std::mem::replace(&mut self.offsets, vec![0]);
        let values = self.values()?;
        let nulls = Some(NullBuffer::from(valid));
        let item = || Arc::new(Field::new("item", values.data_type().clone(), false));
        Ok(match self.layout {
            Layout::Scalar => {
                let data = values.to_data().into_builder().nulls(nulls).build()?;
                arrow_array::make_array(data)
            }
            Layout::Fixed(n) => Arc::new(FixedSizeListArray::try_new(
                item(),
                n as i32,
                values,
                nulls,
            )?),
            Layout::List => Arc::new(ListArray::try_new(
                item(),
                OffsetBuffer::new(ScalarBuffer::from(offsets)),
                values,
                nulls,
            )?),
        })
    }

    /// Every element so far as one array; the column's buffers start empty.
    fn values(&mut self) -> Result<ArrayRef, ArrowError> {
        let raw = std::mem::replace(&mut self.raw, MutableBuffer::new(0));
        Ok(match self.spec.datatype {
            DataType::Bytes => Arc::new(BinaryArray::from_iter_values(std::mem::take(
                &mut self.strings,
            ))),
            DataType::Bool => Arc::new(BooleanArray::new(
                BooleanBuffer::from_iter(raw.as_slice().iter().map(|&b| b != 0)),
                None,
            )),
            dt => {
                let size = dt.element_size().unwrap_or(1);
                let len = raw.len() / size;
                let item = arrow_type(dt).unwrap_or(ArrowType::UInt8);
                let data = arrow_data::ArrayData::builder(item)
                    .len(len)
                    .add_buffer(raw.into())
                    .build()?;
                arrow_array::make_array(data)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Float32Type;
    use bytes::Bytes;

    use super::*;
    use crate::testing::{self, response, spec};

    fn model(outputs: Vec<TensorSpec>) -> ModelSpec {
        testing::model(Vec::new(), outputs)
    }

    fn floats(name: &str, values: &[f32]) -> Tensor {
        Tensor {
            name: name.into(),
            datatype: DataType::Fp32,
            shape: vec![1, values.len() as i64],
            data: Bytes::from(
                values
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect::<Vec<_>>(),
            ),
        }
    }

    #[test]
    fn rows_failures_and_mismatched_responses() {
        let m = model(vec![
            spec("F", DataType::Fp32, &[2]),
            spec("V", DataType::Fp32, &[-1]),
        ]);
        let schema = output_schema(&m).unwrap();
        let mut columns = OutputColumns::new(&m, schema);
        assert!(!columns.push(Ok(response(vec![
            floats("V", &[9.0]),
            floats("F", &[1.0, 2.0])
        ]))));
        assert!(columns.push(Err("bad row".into())));
        assert!(columns.push(Ok(response(vec![floats("F", &[1.0]), floats("V", &[])]))));
        assert!(!columns.push(Ok(response(vec![
            floats("F", &[3.0, 4.0]),
            floats("V", &[5.0, 6.0])
        ]))));
        let batch = columns.take_batch().unwrap();
        assert_eq!(batch.num_rows(), 4);
        let fixed = batch.column(0).as_fixed_size_list();
        assert_eq!(fixed.null_count(), 2);
        assert_eq!(
            fixed
                .value(3)
                .as_primitive::<Float32Type>()
                .values()
                .to_vec(),
            [3.0, 4.0]
        );
        let lists = batch.column(1).as_list::<i32>();
        assert_eq!(
            lists
                .value(0)
                .as_primitive::<Float32Type>()
                .values()
                .to_vec(),
            [9.0]
        );
        assert_eq!(lists.value(3).len(), 2);
        let errors = batch.column(2).as_string::<i32>();
        assert!(errors.is_null(0) && errors.is_null(3));
        assert_eq!(errors.value(1), "bad row");
        assert!(
            errors
                .value(2)
                .contains("output 'F' has a row of shape [1]"),
            "{}",
            errors.value(2)
        );
        assert_eq!(columns.take_batch().unwrap().num_rows(), 0);
    }

    #[test]
    fn scalars_strings_and_booleans() {
        let m = model(vec![
            spec("S", DataType::Bytes, &[1]),
            spec("B", DataType::Bool, &[2]),
        ]);
        let mut columns = OutputColumns::new(&m, output_schema(&m).unwrap());
        let mut framed = Vec::new();
        nereid_core::tensor::push_bytes_element(&mut framed, b"hi");
        let s = Tensor {
            name: "S".into(),
            datatype: DataType::Bytes,
            shape: vec![1, 1],
            data: Bytes::from(framed),
        };
        let b = Tensor {
            name: "B".into(),
            datatype: DataType::Bool,
            shape: vec![1, 2],
            data: Bytes::from_static(&[1, 0]),
        };
        columns.push(Ok(response(vec![s, b])));
        columns.push(Err("x".into()));
        let batch = columns.take_batch().unwrap();
        let s = batch.column(0).as_binary::<i32>();
        assert_eq!((s.value(0), s.is_null(1)), (&b"hi"[..], true));
        let b = batch.column(1).as_fixed_size_list();
        assert_eq!(
            b.value(0).as_boolean().values().iter().collect::<Vec<_>>(),
            [true, false]
        );
    }

    #[test]
    fn outputs_arrow_cannot_hold_are_refused() {
        let e = output_schema(&model(vec![spec("H", DataType::Bf16, &[2])])).unwrap_err();
        assert!(e.contains("BF16"), "{e}");
        let e = output_schema(&model(vec![spec("error", DataType::Fp32, &[2])])).unwrap_err();
        assert!(e.contains("named 'error'"), "{e}");
    }
}
