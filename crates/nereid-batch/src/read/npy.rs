//! `.npy` inputs: an array per model input, rows along the first axis,
//! every array with as many rows. The files are mapped, not read: a
//! request's tensor is a slice of the mapping, several rows of numbers
//! at a time (rows of strings are framed one request each).

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use nereid_core::tensor::push_bytes_element;
use nereid_core::{DataType, InputTensor};

use super::{Group, InputFiles, Reading, Source, no_file};
use crate::BatchError;
use crate::npy::{self, Element, Header};
use crate::spec::ModelSpec;

struct Array {
    name: String,
    datatype: DataType,
    header: Header,
    data: Bytes,
}

pub struct NpyArrays {
    arrays: Vec<Array>,
    model: ModelSpec,
    next: usize,
    rows: usize,
    chunk_rows: usize,
    /// Rows per request: one when an array holds strings.
    group_rows: usize,
}

impl NpyArrays {
    pub fn open(
        files: &InputFiles,
        model: &ModelSpec,
        reading: Reading,
    ) -> Result<NpyArrays, BatchError> {
        let named = named_files(files, model)?;
        let arrays = named
            .into_iter()
            .map(|(name, path)| array(&name, &path, model))
            .collect::<Result<Vec<_>, _>>()?;
        let rows = arrays.first().map_or(0, |a| a.header.rows());
        if let Some(a) = arrays.iter().find(|a| a.header.rows() != rows) {
            return Err(BatchError::Usage(format!(
                "the .npy inputs have different row counts: '{}' has {}, '{}' has {rows}",
                a.name,
                a.header.rows(),
                arrays[0].name
            )));
        }
        let strings = arrays
            .iter()
            .any(|a| !matches!(a.header.element, Element::Fixed(_)));
        Ok(NpyArrays {
            arrays,
            model: model.clone(),
            next: (reading.start as usize).min(rows),
            rows,
            chunk_rows: reading.chunk_rows,
            group_rows: if strings { 1 } else { reading.group_rows },
        })
    }

    /// The request for `rows`, several only when every array holds
    /// numbers.
    fn group(&self, rows: Range<usize>) -> Group {
        let inputs = self
            .arrays
            .iter()
            .map(|a| {
                let size = a.header.row_bytes();
                let start = a.header.data_offset + rows.start * size;
                let bytes = a.data.slice(start..start + rows.len() * size);
                let row_shape: Vec<i64> = a.header.shape[1..].iter().map(|&d| d as i64).collect();
                let data = match a.header.element {
                    Element::Fixed(_) => bytes,
                    element => {
                        let mut framed = Vec::new();
                        for s in npy::strings(element, &bytes)? {
                            push_bytes_element(&mut framed, &s);
                        }
                        Bytes::from(framed)
                    }
                };
                Ok(InputTensor {
                    name: a.name.clone(),
                    datatype: a.datatype,
                    shape: self.model.request_shape(rows.len(), &row_shape),
                    data,
                    parameters: Default::default(),
                })
            })
            .collect::<Result<Vec<_>, String>>();
        Group {
            rows: rows.len(),
            request: inputs.map(|inputs| super::request(&self.model, inputs)),
        }
    }
}

impl Source for NpyArrays {
    fn total(&self) -> u64 {
        self.rows as u64
    }

    fn next_chunk(&mut self) -> Result<Option<Vec<Group>>, BatchError> {
        let end = (self.next + self.chunk_rows).min(self.rows);
        let step = self.group_rows.max(1);
        let groups: Vec<Group> = (self.next..end)
            .step_by(step)
            .map(|first| self.group(first..end.min(first + step)))
            .collect();
        self.next = end;
        Ok((!groups.is_empty()).then_some(groups))
    }
}

/// The file for each input: named ones as given, one file for a model of
/// one input, or `<INPUT>.npy` in a folder (optional inputs may be absent).
fn named_files(
    files: &InputFiles,
    model: &ModelSpec,
) -> Result<Vec<(String, PathBuf)>, BatchError> {
    let names: Vec<&str> = model.inputs.iter().map(|i| i.name.as_str()).collect();
    let named = match files {
        InputFiles::Named(named) => named.clone(),
        InputFiles::Path(dir) if dir.is_dir() => model
            .inputs
            .iter()
            .map(|i| (i.name.clone(), dir.join(format!("{}.npy", i.name))))
            .filter(|(name, path)| {
                path.exists() || !model.inputs.iter().any(|i| &i.name == name && i.optional)
            })
            .collect(),
        InputFiles::Path(file) => match model.inputs.as_slice() {
            [only] => vec![(only.name.clone(), file.clone())],
            _ => {
                return Err(BatchError::Usage(format!(
                    "model '{}' has {} inputs ({}): give a folder of <INPUT>.npy files or \
                     --input NAME=FILE.npy for each",
                    model.name,
                    names.len(),
                    names.join(", ")
                )));
            }
        },
    };
    for (name, _) in &named {
        if !names.contains(&name.as_str()) {
            return Err(BatchError::Usage(format!(
                "model '{}' has no input '{name}' (inputs: {})",
                model.name,
                names.join(", ")
            )));
        }
    }
    for spec in model.inputs.iter().filter(|i| !i.optional) {
        if !named.iter().any(|(n, _)| n == &spec.name) {
            return Err(BatchError::Usage(format!(
                "no .npy file for input '{}' of model '{}'",
                spec.name, model.name
            )));
        }
    }
    Ok(named)
}

fn array(name: &str, path: &Path, model: &ModelSpec) -> Result<Array, BatchError> {
    let file = File::open(path).map_err(|e| no_file(path, e))?;
    let data = map(&file).map_err(|e| BatchError::input(path, format!("cannot map: {e}")))?;
    let header = npy::parse_header(&data).map_err(|e| BatchError::input(path, e))?;
    let spec = model
        .inputs
        .iter()
        .find(|i| i.name == name)
        .ok_or_else(|| BatchError::input(path, format!("model has no input '{name}'")))?;
    let fits = match header.element {
        Element::Fixed(dt) => dt == spec.datatype,
        Element::Bytes(_) | Element::Text(_) => spec.datatype == DataType::Bytes,
    };
    if !fits {
        return Err(BatchError::input(
            path,
            format!(
                "dtype '{}' does not fit input '{name}', which is {}",
                header.element.descr().unwrap_or_default(),
                spec.datatype
            ),
        ));
    }
    if header.shape.is_empty() {
        return Err(BatchError::input(path, "a 0-d array has no rows"));
    }
    let needed = header.data_offset + header.rows() * header.row_bytes();
    if data.len() < needed {
        return Err(BatchError::input(
            path,
            format!(
                "the file is cut short: {} bytes of the {needed} its header promises",
                data.len()
            ),
        ));
    }
    Ok(Array {
        name: name.to_string(),
        datatype: spec.datatype,
        header,
        data,
    })
}

/// The file's bytes, mapped (an empty file cannot be mapped: read it).
#[expect(
    unsafe_code,
    reason = "mapping a file: the job's input must not change under it, as docs/batch.md says"
)]
fn map(file: &File) -> std::io::Result<Bytes> {
    if file.metadata()?.len() == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: the mapping is read-only and the file is the job's input,
    // which nothing is to write while the job runs.
    let map = unsafe { memmap2::Mmap::map(file)? };
    Ok(Bytes::from_owner(map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, spec};

    fn model(datatype: DataType) -> ModelSpec {
        testing::model(vec![spec("X", datatype, &[2])], Vec::new())
    }

    fn open(dir: &Path, element: Element, shape: &[usize], data: &[u8]) -> NpyArrays {
        let path = dir.join("x.npy");
        let mut file = npy::header(element, shape).unwrap();
        file.extend_from_slice(data);
        std::fs::write(&path, file).unwrap();
        let datatype = match element {
            Element::Fixed(dt) => dt,
            _ => DataType::Bytes,
        };
        let reading = Reading {
            start: 1,
            chunk_rows: 3,
            group_rows: 2,
        };
        NpyArrays::open(&InputFiles::Path(path), &model(datatype), reading).unwrap()
    }

    /// Each group's rows and its request's first input as (shape, bytes).
    fn chunk(arrays: &mut NpyArrays) -> Vec<(usize, Vec<i64>, Vec<u8>)> {
        let groups = arrays.next_chunk().unwrap().unwrap_or_default();
        groups
            .into_iter()
            .map(|g| {
                let input = g.request.unwrap().inputs.remove(0);
                (g.rows, input.shape, input.data.to_vec())
            })
            .collect()
    }

    #[test]
    fn rows_of_numbers_go_several_to_a_request_within_a_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0u8..10).collect();
        let mut arrays = open(dir.path(), Element::Fixed(DataType::Uint8), &[5, 2], &data);
        assert_eq!(
            chunk(&mut arrays),
            [
                (2, vec![2, 2], vec![2, 3, 4, 5]),
                (1, vec![1, 2], vec![6, 7])
            ]
        );
        assert_eq!(chunk(&mut arrays), [(1, vec![1, 2], vec![8, 9])]);
        assert!(arrays.next_chunk().unwrap().is_none());
    }

    #[test]
    fn rows_of_strings_go_one_to_a_request() {
        let dir = tempfile::tempdir().unwrap();
        let mut arrays = open(dir.path(), Element::Bytes(1), &[4, 2], b"abcdefgh");
        let sizes: Vec<usize> = chunk(&mut arrays).iter().map(|g| g.0).collect();
        assert_eq!(sizes, [1, 1, 1]);
    }
}
