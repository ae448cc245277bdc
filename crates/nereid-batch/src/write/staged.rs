//! Staged columnar output: committed rows in numbered Arrow IPC parts,
//! made into the finished Parquet, Arrow or `.npy` output at the end.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::Array;
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::FileWriter;
use arrow_schema::SchemaRef;
use nereid_core::InferResponse;

use super::columns::{ERROR_COLUMN, OutputColumns, output_schema};
use super::{CommitPolicy, Recovered, Sink, finish, parts_dir};
use crate::format::Format;
use crate::spec::ModelSpec;
use crate::BatchError;

const PART_EXTENSION: &str = "arrow";

pub struct Staged {
    output: PathBuf,
    format: Format,
    dir: PathBuf,
    model: ModelSpec,
    schema: SchemaRef,
    columns: OutputColumns,
    /// The index of the first record not yet in a part.
    next: u64,
    policy: CommitPolicy,
    since: Instant,
}

impl Staged {
    pub fn open(
        output: &Path,
        format: Format,
        model: &ModelSpec,
        recovered: Recovered,
        policy: CommitPolicy,
    ) -> Result<Staged, BatchError> {
        let schema = output_schema(model).map_err(BatchError::Usage)?;
        let dir = parts_dir(output);
        std::fs::create_dir_all(&dir)
            .map_err(|e| BatchError::output(&dir, format!("cannot create: {e}")))?;
        Ok(Staged {
            output: output.to_path_buf(),
            format,
            dir,
            model: model.clone(),
            columns: OutputColumns::new(model, Arc::clone(&schema)),
            schema,
            next: recovered.records,
            policy,
            since: Instant::now(),
        })
    }
}

impl Sink for Staged {
    fn write(&mut self, result: Result<InferResponse, String>) -> Result<bool, BatchError> {
        Ok(self.columns.push(result))
    }

    fn wants_commit(&self) -> bool {
        self.policy
            .due(self.columns.rows(), self.columns.bytes(), self.since)
    }

    fn commit(&mut self) -> Result<(), BatchError> {
        self.since = Instant::now();
        let rows = self.columns.rows();
        if rows == 0 {
            return Ok(());
        }
        let batch = self
            .columns
            .take_batch()
            .map_err(|e| BatchError::output(&self.output, e))?;
        let part = self.dir.join(format!("{:012}.{PART_EXTENSION}", self.next));
        let tmp = part.with_extension("tmp");
        let bad = |e: &dyn std::fmt::Display| BatchError::output(&tmp, e);
        let file = File::create(&tmp).map_err(|e| bad(&e))?;
        let mut writer = FileWriter::try_new(file, &self.schema).map_err(|e| bad(&e))?;
        writer.write(&batch).map_err(|e| bad(&e))?;
        writer.finish().map_err(|e| bad(&e))?;
        std::fs::rename(&tmp, &part).map_err(|e| bad(&e))?;
        self.next += rows as u64;
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<(), BatchError> {
        self.commit()?;
        let parts = parts(&self.dir)?;
        let files: Vec<PathBuf> = parts.into_iter().map(|(_, path)| path).collect();
        finish::assemble(&self.output, self.format, &files, &self.model, &self.schema)?;
        std::fs::remove_dir_all(&self.dir)
            .map_err(|e| BatchError::output(&self.dir, format!("cannot remove: {e}")))
    }
}

/// The parts in `dir` by first record, temporary files removed.
fn parts(dir: &Path) -> Result<Vec<(u64, PathBuf)>, BatchError> {
    let bad = |e: std::io::Error| BatchError::output(dir, e);
    let mut parts = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(bad)? {
        let path = entry.map_err(bad)?.path();
        let start = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u64>().ok());
        match (start, path.extension().and_then(|e| e.to_str())) {
            (Some(start), Some(PART_EXTENSION)) => parts.push((start, path)),
            (_, Some("tmp")) => std::fs::remove_file(&path).map_err(bad)?,
            _ => {
                return Err(BatchError::output(
                    dir,
                    format!("holds {}, which no batch job wrote", path.display()),
                ));
            }
        }
    }
    parts.sort();
    Ok(parts)
}

/// Rows and failures in an Arrow IPC file, from its `error` column.
pub fn count_ipc(path: &Path) -> Result<(u64, u64), String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let schema = FileReader::try_new(File::open(path).map_err(|e| e.to_string())?, Some(vec![]))
        .map_err(|e| e.to_string())?
        .schema();
    let index = schema
        .index_of(ERROR_COLUMN)
        .map_err(|_| format!("has no '{ERROR_COLUMN}' column"))?;
    let reader = FileReader::try_new(file, Some(vec![index])).map_err(|e| e.to_string())?;
    let (mut rows, mut failures) = (0, 0);
    for batch in reader {
        let batch = batch.map_err(|e| e.to_string())?;
        let errors = batch.column(0);
        rows += batch.num_rows() as u64;
        failures += (errors.len() - errors.null_count()) as u64;
    }
    Ok((rows, failures))
}

/// What the output and its parts hold; parts after a gap or one that does
/// not read whole are removed.
pub fn recover(output: &Path, format: Format) -> Result<Recovered, BatchError> {
    let dir = parts_dir(output);
    if output.exists() {
        // The output is renamed into place before its parts go: a job cut
        // off in between is finished.
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| BatchError::output(&dir, format!("cannot remove: {e}")))?;
        }
        let (records, failures) =
            finish::count(output, format).map_err(|e| BatchError::output(output, e))?;
        return Ok(Recovered {
            records,
            failures,
            finished: true,
        });
    }
    if !dir.exists() {
        return Ok(Recovered::default());
    }
    let mut recovered = Recovered::default();
    let mut parts = parts(&dir)?.into_iter();
    for (start, path) in parts.by_ref() {
        let counted = (start == recovered.records)
            .then(|| count_ipc(&path).ok())
            .flatten();
        let Some((rows, failures)) = counted else {
            std::fs::remove_file(&path).map_err(|e| BatchError::output(&path, e))?;
            break;
        };
        recovered.records += rows;
        recovered.failures += failures;
    }
    for (_, path) in parts {
        std::fs::remove_file(&path).map_err(|e| BatchError::output(&path, e))?;
    }
    Ok(recovered)
}
