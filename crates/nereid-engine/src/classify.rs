//! Triton's classification extension: an output requested with the
//! `classification` parameter is answered as the top-N of its values, each a
//! BYTES element `"<value>:<index>[:<label>]"`, instead of the raw tensor.
//! Labels come from the output's `label_filename` in the model's folder.

use std::collections::HashMap;
use std::path::Path;

use bytes::{BufMut, Bytes, BytesMut};
use nereid_core::model_config::ModelConfig;
use nereid_core::{DataType, Error, InferRequest, InferResponse, Parameter, Tensor};

/// The output parameter that asks for classification.
const CLASSIFICATION: &str = "classification";

/// Each output's class labels, by output name (line `i` of the file is the
/// label of index `i`).
#[derive(Debug, Default)]
pub struct Labels(HashMap<String, Vec<String>>);

impl Labels {
    /// Reads the `label_filename` of every output that names one, relative
    /// to `model_dir`. A file that cannot be read fails the load, as in
    /// Triton.
    pub fn load(config: &ModelConfig, model_dir: &Path) -> Result<Labels, Error> {
        let mut labels = HashMap::new();
        for output in config
            .output
            .iter()
            .filter(|o| !o.label_filename.is_empty())
        {
            let path =
                nereid_repository::inside(model_dir, &output.label_filename).map_err(|e| {
                    Error::invalid_argument(format!(
                        "label file of output '{}' of model '{}': {e}",
                        output.name, config.name
                    ))
                })?;
            let text = std::fs::read_to_string(&path).map_err(|e| {
                Error::invalid_argument(format!(
                    "unable to read label file '{}' of output '{}' of model '{}': {e}",
                    output.label_filename, output.name, config.name
                ))
            })?;
            labels.insert(
                output.name.clone(),
                text.lines().map(str::to_string).collect(),
            );
        }
        Ok(Labels(labels))
    }

    fn label(&self, output: &str, index: usize) -> Option<&str> {
        let label = self.0.get(output)?.get(index)?;
        (!label.is_empty()).then_some(label.as_str())
    }
}

/// The outputs `request` asks to classify, with their class counts.
/// Checked before the request runs, so a bad count costs no execution.
pub fn requested(request: &InferRequest) -> Result<Vec<(String, usize)>, Error> {
    let mut wanted = Vec::new();
    for output in &request.outputs {
        let Some(value) = output.parameters.get(CLASSIFICATION) else {
            continue;
        };
        let count = match value {
            Parameter::Int64(n) => usize::try_from(*n).ok(),
            Parameter::Uint64(n) => usize::try_from(*n).ok(),
            _ => None,
        }
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "the 'classification' parameter of output '{}' must be a non-negative integer",
                output.name
            ))
        })?;
        if count > 0 {
            wanted.push((output.name.clone(), count));
        }
    }
    Ok(wanted)
}

/// Replaces each classified output of `response` by its top classes.
/// `batching`: the model's first dimension is the batch, classified per
/// batch entry.
pub fn apply(
    response: &mut InferResponse,
    wanted: &[(String, usize)],
    labels: &Labels,
    batching: bool,
) -> Result<(), Error> {
    for (name, count) in wanted {
        if let Some(tensor) = response.outputs.iter_mut().find(|t| &t.name == name) {
            *tensor = classify(tensor, *count, labels, batching)?;
        }
    }
    Ok(())
}

fn classify(
    tensor: &Tensor,
    count: usize,
    labels: &Labels,
    batching: bool,
) -> Result<Tensor, Error> {
    let values = Values::new(tensor)?;
    let batch = match tensor.shape.first() {
        Some(&b) if batching => Some(usize::try_from(b).unwrap_or(0)),
        _ => None,
    };
    let rows = batch.unwrap_or(1);
    let per_row = values.len().checked_div(rows).unwrap_or(0);
    let kept = count.min(per_row);
    let mut data = BytesMut::new();
    for row in 0..rows {
        let start = row * per_row;
        for index in top(&values, start, per_row, kept) {
            let mut class = format!("{}:{index}", values.format(start + index));
            if let Some(label) = labels.label(&tensor.name, index) {
                class.push(':');
                class.push_str(label);
            }
            data.put_u32_le(class.len() as u32);
            data.put_slice(class.as_bytes());
        }
    }
    let mut shape: Vec<i64> = batch.map(|b| b as i64).into_iter().collect();
    shape.push(kept as i64);
    Ok(Tensor {
        name: tensor.name.clone(),
        datatype: DataType::Bytes,
        shape,
        data: data.freeze(),
    })
}

/// The indices (within the row) of the `kept` largest values of a row,
/// largest first; equal values keep their order.
fn top(values: &Values<'_>, start: usize, len: usize, kept: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    order.sort_by(|&a, &b| values.compare(start + b, start + a));
    order.truncate(kept);
    order
}

/// An output's elements, read as its datatype.
struct Values<'a> {
    datatype: DataType,
    data: &'a Bytes,
    size: usize,
}

impl<'a> Values<'a> {
    fn new(tensor: &'a Tensor) -> Result<Values<'a>, Error> {
        use DataType::*;
        let size = match tensor.datatype {
            Uint8 | Uint16 | Uint32 | Uint64 | Int8 | Int16 | Int32 | Int64 | Fp32 | Fp64 => {
                tensor.datatype.element_size()
            }
            _ => None,
        }
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "class result not available for output due to unsupported type '{}'",
                tensor.datatype.wire_name()
            ))
        })?;
        Ok(Values {
            datatype: tensor.datatype,
            data: &tensor.data,
            size,
        })
    }

    fn len(&self) -> usize {
        self.data.len() / self.size
    }

    fn raw<const N: usize>(&self, i: usize) -> [u8; N] {
        let mut bytes = [0u8; N];
        bytes.copy_from_slice(&self.data[i * N..(i + 1) * N]);
        bytes
    }

    /// Element `i` as a float for comparison (exact for every integer type
    /// up to 2^53; beyond, comparison is by the integer itself).
    fn compare(&self, a: usize, b: usize) -> std::cmp::Ordering {
        use DataType::*;
        match self.datatype {
            Uint64 => u64::from_le_bytes(self.raw(a)).cmp(&u64::from_le_bytes(self.raw(b))),
            Int64 => i64::from_le_bytes(self.raw(a)).cmp(&i64::from_le_bytes(self.raw(b))),
            // NaN sorts below every number.
            _ => self
                .float(a)
                .partial_cmp(&self.float(b))
                .unwrap_or_else(|| {
                    self.float(a)
                        .is_nan()
                        .cmp(&self.float(b).is_nan())
                        .reverse()
                }),
        }
    }

    fn float(&self, i: usize) -> f64 {
        use DataType::*;
        match self.datatype {
            Uint8 => f64::from(self.data[i]),
            Int8 => f64::from(self.data[i] as i8),
            Uint16 => f64::from(u16::from_le_bytes(self.raw(i))),
            Int16 => f64::from(i16::from_le_bytes(self.raw(i))),
            Uint32 => f64::from(u32::from_le_bytes(self.raw(i))),
            Int32 => f64::from(i32::from_le_bytes(self.raw(i))),
            Fp32 => f64::from(f32::from_le_bytes(self.raw(i))),
            Fp64 => f64::from_le_bytes(self.raw(i)),
            _ => 0.0,
        }
    }

    /// Element `i` as Triton writes it (C++ `std::to_string`: integers in
    /// full, floating point with six decimals).
    fn format(&self, i: usize) -> String {
        use DataType::*;
        match self.datatype {
            Uint64 => u64::from_le_bytes(self.raw(i)).to_string(),
            Int64 => i64::from_le_bytes(self.raw(i)).to_string(),
            Fp32 | Fp64 => format_float(self.float(i)),
            _ => (self.float(i) as i64).to_string(),
        }
    }
}

/// `printf("%f")`: six decimals, and C's spellings of the non-finite values.
fn format_float(v: f64) -> String {
    if v.is_nan() {
        if v.is_sign_negative() { "-nan" } else { "nan" }.to_string()
    } else if v.is_infinite() {
        if v < 0.0 { "-inf" } else { "inf" }.to_string()
    } else {
        format!("{v:.6}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_core::RequestedOutput;

    fn tensor(datatype: DataType, shape: &[i64], data: Vec<u8>) -> Tensor {
        Tensor {
            name: "OUT".into(),
            datatype,
            shape: shape.to_vec(),
            data: data.into(),
        }
    }

    fn strings(t: &Tensor) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = &t.data[..];
        while rest.len() >= 4 {
            let n = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
            out.push(String::from_utf8(rest[4..4 + n].to_vec()).unwrap());
            rest = &rest[4 + n..];
        }
        out
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn labels(names: &[&str]) -> Labels {
        Labels(HashMap::from([(
            "OUT".to_string(),
            names.iter().map(|s| s.to_string()).collect(),
        )]))
    }

    #[test]
    fn the_highest_values_come_first_with_their_labels() {
        let t = tensor(DataType::Fp32, &[4], f32s(&[1.0, 5.0, 10.0, 4.0]));
        let got = classify(&t, 2, &labels(&["a", "b", "c", "d"]), false).unwrap();
        assert_eq!(got.datatype, DataType::Bytes);
        assert_eq!(&got.shape[..], &[2]);
        assert_eq!(strings(&got), ["10.000000:2:c", "5.000000:1:b"]);
    }

    #[test]
    fn each_batch_entry_is_classified_and_missing_labels_are_left_out() {
        let data: Vec<u8> = [3i32, 1, 2, 7, 9, 8]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let t = tensor(DataType::Int32, &[2, 3], data);
        let got = classify(&t, 1, &labels(&["zero", ""]), true).unwrap();
        assert_eq!(&got.shape[..], &[2, 1]);
        assert_eq!(strings(&got), ["3:0:zero", "9:1"]);
    }

    #[test]
    fn a_count_beyond_the_output_is_clamped() {
        let t = tensor(DataType::Uint8, &[1, 3], vec![2, 9, 4]);
        let got = classify(&t, 10, &Labels::default(), true).unwrap();
        assert_eq!(&got.shape[..], &[1, 3]);
        assert_eq!(strings(&got), ["9:1", "4:2", "2:0"]);
    }

    #[test]
    fn types_without_an_order_are_refused() {
        for datatype in [DataType::Bytes, DataType::Bool, DataType::Fp16] {
            let t = tensor(datatype, &[2], vec![0; 4]);
            let e = classify(&t, 1, &Labels::default(), false).unwrap_err();
            assert!(e.message().contains("unsupported type"), "{}", e.message());
        }
    }

    #[test]
    fn a_count_must_be_a_non_negative_integer() {
        let mut request = InferRequest::default();
        request.outputs.push(RequestedOutput {
            name: "OUT".into(),
            parameters: [(CLASSIFICATION.to_string(), Parameter::String("3".into()))].into(),
        });
        assert!(requested(&request).is_err());
        request.outputs[0].parameters = [(CLASSIFICATION.to_string(), Parameter::Int64(0))].into();
        assert!(requested(&request).unwrap().is_empty());
        request.outputs[0].parameters = [(CLASSIFICATION.to_string(), Parameter::Int64(3))].into();
        assert_eq!(requested(&request).unwrap(), [("OUT".to_string(), 3)]);
    }
}
