//! The finished output, made from the staged parts: one Parquet file (its
//! row groups as Parquet cuts them), one Arrow IPC file (a record batch per
//! part), or a folder of `<OUTPUT>.npy` arrays with `errors.jsonl`. Each is
//! written under a temporary name and renamed into place.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::FileWriter;
use arrow_schema::{DataType as ArrowType, SchemaRef};
use nereid_core::DataType;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use super::columns::{ERROR_COLUMN, Layout, output_schema};
use super::staged::count_ipc;
use crate::BatchError;
use crate::format::Format;
use crate::npy::{self, Element};
use crate::spec::{ModelSpec, TensorSpec};

/// The failed records of an `.npy` output, one JSON object a line.
pub const NPY_ERRORS: &str = "errors.jsonl";

fn tmp_path(output: &Path) -> PathBuf {
    let mut name = output.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

fn batches(part: &Path) -> Result<FileReader<File>, String> {
    let file = File::open(part).map_err(|e| format!("{}: {e}", part.display()))?;
    FileReader::try_new(file, None).map_err(|e| format!("{}: {e}", part.display()))
}

pub fn assemble(
    output: &Path,
    format: Format,
    parts: &[PathBuf],
    model: &ModelSpec,
    schema: &SchemaRef,
) -> Result<(), BatchError> {
    let tmp = tmp_path(output);
    let written = match format {
        Format::Parquet => parquet(&tmp, parts, schema),
        Format::Arrow => arrow(&tmp, parts, schema),
        Format::Npy => npy_folder(&tmp, parts, model),
        Format::JsonLines => Err("JSON lines are not staged".to_string()),
    };
    written.map_err(|e| BatchError::output(output, e))?;
    std::fs::rename(&tmp, output).map_err(|e| BatchError::output(output, e))
}

fn parquet(tmp: &Path, parts: &[PathBuf], schema: &SchemaRef) -> Result<(), String> {
    let file = File::create(tmp).map_err(|e| e.to_string())?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut writer =
        ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(|e| e.to_string())?;
    for part in parts {
        for batch in batches(part)? {
            writer
                .write(&batch.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
    }
    writer.close().map_err(|e| e.to_string())?;
    Ok(())
}

fn arrow(tmp: &Path, parts: &[PathBuf], schema: &SchemaRef) -> Result<(), String> {
    let file = BufWriter::new(File::create(tmp).map_err(|e| e.to_string())?);
    let mut writer = FileWriter::try_new(file, schema).map_err(|e| e.to_string())?;
    for part in parts {
        for batch in batches(part)? {
            writer
                .write(&batch.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
    }
    writer.finish().map_err(|e| e.to_string())
}

/// Refuses, before the job runs, outputs an `.npy` array cannot hold.
pub fn check_npy(model: &ModelSpec) -> Result<(), String> {
    output_schema(model)?;
    for spec in &model.outputs {
        Element::Fixed(spec.datatype).descr().map_err(|e| {
            format!(
                "output '{}': {e}; write Parquet, Arrow or JSON lines",
                spec.name
            )
        })?;
        if spec.row_dims.iter().filter(|&&d| d < 0).count() > 1 {
            return Err(format!(
                "output '{}' has more than one variable dim; an .npy row cannot say its shape: \
                 write Parquet, Arrow or JSON lines",
                spec.name
            ));
        }
    }
    Ok(())
}

/// Every part's batches in order.
fn all_batches(parts: &[PathBuf]) -> impl Iterator<Item = Result<RecordBatch, String>> + '_ {
    parts.iter().flat_map(|part| match batches(part) {
        Ok(reader) => reader
            .map(|b| b.map_err(|e| e.to_string()))
            .collect::<Vec<_>>(),
        Err(e) => vec![Err(e)],
    })
}

fn npy_folder(tmp: &Path, parts: &[PathBuf], model: &ModelSpec) -> Result<(), String> {
    if tmp.exists() {
        std::fs::remove_dir_all(tmp).map_err(|e| e.to_string())?;
    }
    std::fs::create_dir_all(tmp).map_err(|e| e.to_string())?;
    let rows: usize = all_batches(parts)
        .map(|b| b.map(|b| b.num_rows()))
        .sum::<Result<usize, String>>()?;
    for (index, spec) in model.outputs.iter().enumerate() {
        npy_array(
            &tmp.join(format!("{}.npy", spec.name)),
            parts,
            index,
            spec,
            rows,
        )?;
    }
    npy_errors(&tmp.join(NPY_ERRORS), parts, model.outputs.len())
}

/// One output's rows as an array of shape `(rows, *row_shape)`.
fn npy_array(
    path: &Path,
    parts: &[PathBuf],
    column: usize,
    spec: &TensorSpec,
    rows: usize,
) -> Result<(), String> {
    let layout = Layout::of(spec);
    let width = match layout {
        Layout::Scalar => 1,
        Layout::Fixed(n) => n,
        Layout::List => list_width(parts, column, spec)?,
    };
    let row_shape = spec.row_shape(width)?;
    let mut shape = vec![rows];
    shape.extend(row_shape.iter().map(|&d| d as usize));
    let element = Element::Fixed(spec.datatype);
    let mut out = BufWriter::new(File::create(path).map_err(|e| e.to_string())?);
    out.write_all(&npy::header(element, &shape)?)
        .map_err(|e| e.to_string())?;
    let size = spec.datatype.element_size().unwrap_or(1);
    for batch in all_batches(parts) {
        let batch = batch?;
        let array = batch.column(column);
        let bytes = match layout {
            Layout::Scalar => element_bytes(array.as_ref(), spec.datatype),
            Layout::Fixed(_) => {
                element_bytes(array.as_fixed_size_list().values().as_ref(), spec.datatype)
            }
            Layout::List => {
                let lists = array.as_list::<i32>();
                let mut bytes = Vec::with_capacity(lists.len() * width * size);
                for i in 0..lists.len() {
                    if lists.is_null(i) {
                        bytes.resize(bytes.len() + width * size, 0);
                    } else {
                        bytes.extend(element_bytes(lists.value(i).as_ref(), spec.datatype));
                    }
                }
                bytes
            }
        };
        out.write_all(&bytes).map_err(|e| e.to_string())?;
    }
    out.flush().map_err(|e| e.to_string())
}

/// The one length every list row of a variable output has.
fn list_width(parts: &[PathBuf], column: usize, spec: &TensorSpec) -> Result<usize, String> {
    let mut width = None;
    for batch in all_batches(parts) {
        let batch = batch?;
        let lists = batch.column(column).as_list::<i32>();
        for i in (0..lists.len()).filter(|&i| !lists.is_null(i)) {
            let len = lists.value_length(i) as usize;
            if *width.get_or_insert(len) != len {
                return Err(format!(
                    "output '{}' has rows of {len} and of {} elements; an .npy array needs one \
                     shape: write Parquet, Arrow or JSON lines",
                    spec.name,
                    width.unwrap_or(len)
                ));
            }
        }
    }
    Ok(width.unwrap_or(0))
}

/// A numeric or boolean array's elements as little-endian bytes.
fn element_bytes(array: &dyn Array, datatype: DataType) -> Vec<u8> {
    if let ArrowType::Boolean = array.data_type() {
        let bools = array.as_boolean();
        return (0..bools.len()).map(|i| u8::from(bools.value(i))).collect();
    }
    let data = array.to_data();
    let size = datatype.element_size().unwrap_or(1);
    data.buffers()
        .first()
        .and_then(|b| {
            b.as_slice()
                .get(data.offset() * size..(data.offset() + data.len()) * size)
        })
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}

fn npy_errors(path: &Path, parts: &[PathBuf], column: usize) -> Result<(), String> {
    let mut out = BufWriter::new(File::create(path).map_err(|e| e.to_string())?);
    let mut index = 0u64;
    for batch in all_batches(parts) {
        let batch = batch?;
        let errors = batch.column(column).as_string::<i32>();
        for i in 0..errors.len() {
            if errors.is_valid(i) {
                let line = serde_json::json!({"index": index + i as u64, "error": errors.value(i)});
                writeln!(out, "{line}").map_err(|e| e.to_string())?;
            }
        }
        index += errors.len() as u64;
    }
    out.flush().map_err(|e| e.to_string())
}

/// Records and failures in a finished output.
pub fn count(output: &Path, format: Format) -> Result<(u64, u64), String> {
    match format {
        Format::Arrow => count_ipc(output),
        Format::Parquet => count_parquet(output),
        Format::Npy => count_npy(output),
        Format::JsonLines => Err("JSON lines are not staged".into()),
    }
}

fn count_parquet(path: &Path) -> Result<(u64, u64), String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| e.to_string())?;
    let rows = builder.metadata().file_metadata().num_rows() as u64;
    let index = builder
        .schema()
        .index_of(ERROR_COLUMN)
        .map_err(|_| format!("has no '{ERROR_COLUMN}' column: not a batch job's output"))?;
    let mask = parquet::arrow::ProjectionMask::roots(builder.parquet_schema(), [index]);
    let reader = builder
        .with_projection(mask)
        .build()
        .map_err(|e| e.to_string())?;
    let mut failures = 0;
    for batch in reader {
        let errors = batch.map_err(|e| e.to_string())?.column(0).clone();
        failures += (errors.len() - errors.null_count()) as u64;
    }
    Ok((rows, failures))
}

fn count_npy(dir: &Path) -> Result<(u64, u64), String> {
    let errors = std::fs::read(dir.join(NPY_ERRORS))
        .map_err(|e| format!("{NPY_ERRORS}: {e}: not a batch job's output"))?;
    let failures = errors.iter().filter(|&&b| b == b'\n').count() as u64;
    let mut rows = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "npy") {
            let mut head = Vec::new();
            File::open(&path)
                .and_then(|f| f.take(1 << 16).read_to_end(&mut head))
                .map_err(|e| e.to_string())?;
            rows = npy::parse_header(&head)?.rows() as u64;
            break;
        }
    }
    Ok((rows, failures))
}
