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
use crate::BatchError;
use crate::format::Format;
use crate::spec::ModelSpec;

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
    let schema = FileReader::try_new(File::open(path).map_err(|e| e.to_string())?, None)
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

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use nereid_core::{DataType, Tensor};

    use super::*;
    use crate::testing::{self, response, spec};

    fn model() -> ModelSpec {
        testing::model(Vec::new(), vec![spec("Y", DataType::Int32, &[1])])
    }

    fn result(i: i32) -> Result<InferResponse, String> {
        if i % 3 == 2 {
            return Err(format!("record {i} failed"));
        }
        Ok(response(vec![Tensor {
            name: "Y".into(),
            datatype: DataType::Int32,
            shape: vec![1, 1],
            data: Bytes::from(i.to_le_bytes().to_vec()),
        }]))
    }

    fn policy() -> CommitPolicy {
        CommitPolicy {
            rows: 2,
            ..CommitPolicy::default()
        }
    }

    /// Writes records `from..to` as a job would, committing when due.
    fn write(sink: &mut dyn Sink, from: i32, to: i32) {
        for i in from..to {
            sink.write(result(i)).unwrap();
            if sink.wants_commit() {
                sink.commit().unwrap();
            }
        }
    }

    #[test]
    fn a_cut_off_job_keeps_its_whole_parts_and_finishes_later() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("out.parquet");
        let mut sink = Staged::open(
            &output,
            Format::Parquet,
            &model(),
            Recovered::default(),
            policy(),
        )
        .unwrap();
        // Five records: two parts of two, the fifth not committed.
        write(&mut sink, 0, 5);
        drop(sink);
        let parts = parts_dir(&output);
        // What a kill leaves: a part being written, and one cut short.
        std::fs::write(parts.join("000000000004.tmp"), b"half").unwrap();
        let whole = std::fs::read(parts.join("000000000002.arrow")).unwrap();
        std::fs::write(parts.join("000000000004.arrow"), &whole[..whole.len() / 2]).unwrap();
        let recovered = recover(&output, Format::Parquet).unwrap();
        assert_eq!(
            (recovered.records, recovered.failures, recovered.finished),
            (4, 1, false)
        );
        let names: Vec<String> = std::fs::read_dir(&parts)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");

        let mut sink = Box::new(
            Staged::open(&output, Format::Parquet, &model(), recovered, policy()).unwrap(),
        );
        write(sink.as_mut(), 4, 7);
        sink.finish().unwrap();
        assert!(!parts.exists());
        let recovered = recover(&output, Format::Parquet).unwrap();
        assert_eq!(
            (recovered.records, recovered.failures, recovered.finished),
            (7, 2, true)
        );
        let file = File::open(&output).unwrap();
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(file, 64).unwrap();
        let batch = reader.map(Result::unwrap).next().unwrap();
        let values = arrow_array::cast::AsArray::as_primitive::<arrow_array::types::Int32Type>(
            batch.column(0).as_ref(),
        );
        let got: Vec<Option<i32>> = values.iter().collect();
        assert_eq!(
            got,
            [Some(0), Some(1), None, Some(3), Some(4), None, Some(6)]
        );
    }

    #[test]
    fn a_gap_in_the_parts_drops_what_follows_it() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("out.arrow");
        let mut sink = Staged::open(
            &output,
            Format::Arrow,
            &model(),
            Recovered::default(),
            policy(),
        )
        .unwrap();
        write(&mut sink, 0, 6);
        drop(sink);
        let parts = parts_dir(&output);
        std::fs::remove_file(parts.join("000000000002.arrow")).unwrap();
        let recovered = recover(&output, Format::Arrow).unwrap();
        assert_eq!(recovered.records, 2);
        assert!(!parts.join("000000000004.arrow").exists());
    }

    #[test]
    fn a_finished_output_counts_and_stray_parts_go() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("out");
        let mut sink = Box::new(
            Staged::open(
                &output,
                Format::Npy,
                &model(),
                Recovered::default(),
                policy(),
            )
            .unwrap(),
        );
        write(sink.as_mut(), 0, 5);
        sink.finish().unwrap();
        let y = std::fs::read(output.join("Y.npy")).unwrap();
        let header = crate::npy::parse_header(&y).unwrap();
        assert_eq!(header.shape, [5, 1]);
        let values = nereid_core::testing::int32s(&y[header.data_offset..]);
        assert_eq!(values, [0, 1, 0, 3, 4]);
        let errors = std::fs::read_to_string(output.join(finish::NPY_ERRORS)).unwrap();
        assert_eq!(errors, "{\"error\":\"record 2 failed\",\"index\":2}\n");
        // Parts left by a job cut off between the rename and their removal.
        std::fs::create_dir(parts_dir(&output)).unwrap();
        let recovered = recover(&output, Format::Npy).unwrap();
        assert_eq!(
            (recovered.records, recovered.failures, recovered.finished),
            (5, 1, true)
        );
        assert!(!parts_dir(&output).exists());
    }
}
