//! `.npy` inputs: an array per model input, rows along the first axis,
//! every array with as many rows. The files are mapped, not read: a
//! record's tensor is a slice of the mapping.

use std::fs::File;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use nereid_core::tensor::push_bytes_element;
use nereid_core::{DataType, InferRequest, InputTensor};

use super::{InputFiles, Record, Source, no_file};
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
}

impl NpyArrays {
    pub fn open(
        files: &InputFiles,
        model: &ModelSpec,
        start: u64,
        chunk_rows: usize,
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
        Ok(NpyArrays {
            arrays,
            model: model.clone(),
            next: (start as usize).min(rows),
            rows,
            chunk_rows,
        })
    }

    fn record(&self, row: usize) -> Record {
        let inputs = self
            .arrays
            .iter()
            .map(|a| {
                let size = a.header.row_bytes();
                let start = a.header.data_offset + row * size;
                let bytes = a.data.slice(start..start + size);
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
                    shape: self.model.request_shape(&row_shape),
                    data,
                    parameters: Default::default(),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(InferRequest {
            model_name: self.model.name.clone(),
            model_version: self.model.version,
            id: String::new(),
            inputs,
            outputs: Vec::new(),
            parameters: Default::default(),
            trace: None,
        })
    }
}

impl Source for NpyArrays {
    fn total(&self) -> u64 {
        self.rows as u64
    }

    fn next_chunk(&mut self) -> Result<Option<Vec<Record>>, BatchError> {
        let end = (self.next + self.chunk_rows).min(self.rows);
        let records: Vec<Record> = (self.next..end).map(|row| self.record(row)).collect();
        self.next = end;
        Ok((!records.is_empty()).then_some(records))
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
