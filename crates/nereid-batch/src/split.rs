//! A request of several records cut back into one per record: its answer,
//! so that each record gets the result it would have had alone, and the
//! request itself, for rows retried one by one after it failed as a whole.

use nereid_core::{InferRequest, InferResponse, InputTensor, Tensor};
use nereid_engine::split_rows;

/// The response of each of the `rows` rows that `response` answers, every
/// output cut along its first dimension, in order.
pub fn response(response: InferResponse, rows: usize) -> Result<Vec<InferResponse>, String> {
    Ok(cut(&response.outputs, rows)?
        .into_iter()
        .map(|outputs| InferResponse {
            model_name: response.model_name.clone(),
            model_version: response.model_version,
            id: response.id.clone(),
            outputs,
            parameters: response.parameters.clone(),
            in_shared_memory: Vec::new(),
        })
        .collect())
}

/// The request of each of the `rows` rows that `request` holds, every
/// input cut along its first dimension, in order.
pub fn request(request: InferRequest, rows: usize) -> Result<Vec<InferRequest>, String> {
    let wholes: Vec<Tensor> = request
        .inputs
        .iter()
        .map(|input| Tensor {
            name: input.name.clone(),
            datatype: input.datatype,
            shape: input.shape.clone(),
            data: input.data.clone(),
        })
        .collect();
    Ok(cut(&wholes, rows)?
        .into_iter()
        .map(|pieces| InferRequest {
            inputs: pieces
                .into_iter()
                .zip(&request.inputs)
                .map(|(piece, input)| InputTensor {
                    name: piece.name,
                    datatype: piece.datatype,
                    shape: piece.shape,
                    data: piece.data,
                    parameters: input.parameters.clone(),
                })
                .collect(),
            ..request.clone()
        })
        .collect())
}

/// Each of the `rows` rows' piece of every tensor of `tensors`, in order:
/// `pieces[row][tensor]`.
fn cut(tensors: &[Tensor], rows: usize) -> Result<Vec<Vec<Tensor>>, String> {
    let ones = vec![1u64; rows];
    let mut pieces: Vec<Vec<Tensor>> = (0..rows)
        .map(|_| Vec::with_capacity(tensors.len()))
        .collect();
    for tensor in tensors {
        let cut = split_rows(tensor, &ones).map_err(|e| e.message().to_string())?;
        for (row, piece) in pieces.iter_mut().zip(cut) {
            row.push(piece);
        }
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use nereid_core::{DataType, Parameters};

    use super::*;
    use crate::testing;
    use nereid_core::testing::int32s as values;

    fn ints(name: &str, shape: &[i64], values: &[i32]) -> Tensor {
        Tensor {
            name: name.into(),
            datatype: DataType::Int32,
            shape: shape.to_vec(),
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    #[test]
    fn each_row_gets_its_slice_of_every_output() {
        let mut strings = Vec::new();
        for word in [&b"a"[..], b"bc", b"", b"def"] {
            nereid_core::tensor::push_bytes_element(&mut strings, word);
        }
        let response = InferResponse {
            model_version: 3,
            id: "x".into(),
            ..testing::response(vec![
                ints("A", &[2, 3], &[1, 2, 3, 4, 5, 6]),
                Tensor {
                    name: "S".into(),
                    datatype: DataType::Bytes,
                    shape: vec![2, 2],
                    data: Bytes::from(strings),
                },
            ])
        };
        let rows = super::response(response, 2).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[1].model_version, rows[1].id.as_str()), (3, "x"));
        assert_eq!(rows[1].outputs[0].shape, [1, 3]);
        assert_eq!(values(&rows[1].outputs[0].data), [4, 5, 6]);
        assert_eq!(rows[0].outputs[1].shape, [1, 2]);
        assert_eq!(&rows[1].outputs[1].data[..], b"\0\0\0\0\x03\0\0\0def");
    }

    #[test]
    fn an_answer_without_a_row_per_record_is_an_error() {
        let response = testing::response(vec![ints("A", &[1, 2], &[1, 2])]);
        let e = super::response(response, 2).unwrap_err();
        assert!(e.contains("output 'A' has 1 rows for a batch of 2"), "{e}");
    }

    #[test]
    fn a_request_cuts_into_one_per_row() {
        let whole = ints("X", &[3, 2], &[1, 2, 3, 4, 5, 6]);
        let request = InferRequest {
            model_name: "m".into(),
            routing: nereid_core::Routing {
                version: nereid_core::ModelVersion::Number(2),
                ..Default::default()
            },
            inputs: vec![InputTensor {
                name: whole.name,
                datatype: whole.datatype,
                shape: whole.shape,
                data: whole.data,
                parameters: Parameters::new(),
            }],
            ..Default::default()
        };
        let rows = super::request(request, 3).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows[2].routing.version,
            nereid_core::ModelVersion::Number(2)
        );
        assert_eq!(rows[2].inputs[0].shape, [1, 2]);
        assert_eq!(values(&rows[2].inputs[0].data), [5, 6]);
    }
}
