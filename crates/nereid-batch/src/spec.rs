//! What a job needs to know of its model: the inputs a record carries and
//! the outputs a result holds, with the shape of one row of each (the
//! config's dims, without the batch dimension).

use nereid_core::model_config::ModelConfig;
use nereid_core::{DataType, ModelVersion};

use crate::BatchError;

/// One input or output of the model, as a column of rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub datatype: DataType,
    /// The shape of one row: the config's dims, `-1` where they vary.
    pub row_dims: Vec<i64>,
    pub optional: bool,
}

impl TensorSpec {
    /// Elements in one row when every dim is fixed.
    pub fn fixed_elements(&self) -> Option<usize> {
        self.row_dims
            .iter()
            .try_fold(1usize, |n, &d| usize::try_from(d).ok().map(|d| n * d))
    }

    /// Whether a row is one element (dims `[]` or `[1]`): a column of
    /// scalars rather than of lists.
    pub fn is_scalar(&self) -> bool {
        self.row_dims.len() <= 1 && self.fixed_elements() == Some(1)
    }

    /// The shape of a row of `elements` elements: the fixed dims, with the
    /// one variable dim (if any) taking what is left.
    pub fn row_shape(&self, elements: usize) -> Result<Vec<i64>, String> {
        let fixed: usize = self
            .row_dims
            .iter()
            .filter(|&&d| d >= 0)
            .map(|&d| d as usize)
            .product();
        let variable = self.row_dims.iter().filter(|&&d| d < 0).count();
        let shape_of = |free: usize| {
            self.row_dims
                .iter()
                .map(|&d| if d < 0 { free as i64 } else { d })
                .collect::<Vec<i64>>()
        };
        match variable {
            0 if elements == fixed => Ok(shape_of(0)),
            1 if fixed > 0 && elements.is_multiple_of(fixed) => Ok(shape_of(elements / fixed)),
            1 if fixed == 0 && elements == 0 => Ok(shape_of(0)),
            0 | 1 => Err(format!(
                "input '{}' takes rows of shape {}, which {elements} elements do not fill",
                self.name,
                dims_text(&self.row_dims)
            )),
            _ => Err(format!(
                "input '{}' has {variable} variable dims {}: a flat row cannot say its shape; \
                 give this model JSON lines",
                self.name,
                dims_text(&self.row_dims)
            )),
        }
    }
}

/// `[4,-1]`, as the engine's messages write shapes.
pub fn dims_text(dims: &[i64]) -> String {
    let dims: Vec<String> = dims.iter().map(i64::to_string).collect();
    format!("[{}]", dims.join(","))
}

/// The model a job runs.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    pub name: String,
    pub version: ModelVersion,
    /// `max_batch_size > 0`: a request's tensors get a batch dimension, the
    /// records it holds.
    pub batching: bool,
    pub max_batch_size: usize,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
}

impl ModelSpec {
    pub fn from_config(
        config: &ModelConfig,
        version: ModelVersion,
    ) -> Result<ModelSpec, BatchError> {
        let datatype = |name: &str, dt| {
            DataType::from_config(dt).ok_or_else(|| {
                BatchError::Model(format!(
                    "model '{}': '{name}' has no data type",
                    config.name
                ))
            })
        };
        let inputs = config
            .input
            .iter()
            .map(|i| {
                Ok(TensorSpec {
                    name: i.name.clone(),
                    datatype: datatype(&i.name, i.data_type())?,
                    row_dims: i.dims.clone(),
                    optional: i.optional,
                })
            })
            .collect::<Result<_, BatchError>>()?;
        let outputs = config
            .output
            .iter()
            .map(|o| {
                Ok(TensorSpec {
                    name: o.name.clone(),
                    datatype: datatype(&o.name, o.data_type())?,
                    row_dims: o.dims.clone(),
                    optional: false,
                })
            })
            .collect::<Result<_, BatchError>>()?;
        Ok(ModelSpec {
            name: config.name.clone(),
            version,
            batching: config.max_batch_size > 0,
            max_batch_size: usize::try_from(config.max_batch_size).unwrap_or(0),
            inputs,
            outputs,
        })
    }

    /// The shape a request gives `rows` rows of `row_shape` (one row when
    /// the model does not batch: it has no batch dimension).
    pub fn request_shape(&self, rows: usize, row_shape: &[i64]) -> Vec<i64> {
        let mut shape = Vec::with_capacity(row_shape.len() + 1);
        if self.batching {
            shape.push(rows as i64);
        }
        shape.extend_from_slice(row_shape);
        shape
    }

    /// The shape of one row of a response's output of `shape`.
    pub fn row_of<'a>(&self, shape: &'a [i64]) -> &'a [i64] {
        if self.batching && !shape.is_empty() {
            &shape[1..]
        } else {
            shape
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dims: &[i64]) -> TensorSpec {
        TensorSpec {
            name: "X".into(),
            datatype: DataType::Fp32,
            row_dims: dims.to_vec(),
            optional: false,
        }
    }

    #[test]
    fn a_row_takes_its_shape_from_the_fixed_dims_and_one_variable_dim() {
        assert_eq!(spec(&[16]).row_shape(16).unwrap(), [16]);
        assert!(spec(&[16]).row_shape(15).is_err());
        assert_eq!(spec(&[-1]).row_shape(7).unwrap(), [7]);
        assert_eq!(spec(&[2, -1]).row_shape(6).unwrap(), [2, 3]);
        assert!(spec(&[2, -1]).row_shape(5).is_err());
        let e = spec(&[-1, -1]).row_shape(4).unwrap_err();
        assert!(e.contains("2 variable dims [-1,-1]"), "{e}");
        assert_eq!(spec(&[]).row_shape(1).unwrap(), Vec::<i64>::new());
    }

    #[test]
    fn scalars_are_rows_of_one_element() {
        assert!(spec(&[1]).is_scalar());
        assert!(spec(&[]).is_scalar());
        assert!(!spec(&[2]).is_scalar());
        assert!(!spec(&[-1]).is_scalar());
        assert!(!spec(&[1, 1]).is_scalar());
        assert_eq!(spec(&[4, 4]).fixed_elements(), Some(16));
        assert_eq!(spec(&[4, -1]).fixed_elements(), None);
    }
}
