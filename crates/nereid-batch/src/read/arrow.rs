//! Parquet and Arrow IPC inputs: record batches read a chunk at a time,
//! only the columns the model takes, from the first record not yet done,
//! turned into requests of up to `group_rows` records.

use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_ipc::reader::{FileReader, StreamReader};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::columns::ColumnPlan;
use super::{Group, Reading, Source, no_file};
use crate::BatchError;
use crate::spec::ModelSpec;

type Batches = Box<dyn Iterator<Item = Result<RecordBatch, arrow_schema::ArrowError>> + Send>;

/// Record batches of a file, turned into records.
pub struct Columnar {
    path: PathBuf,
    batches: Batches,
    plan: ColumnPlan,
    model: ModelSpec,
    total: u64,
    /// Rows still to skip (IPC files cannot seek to a row).
    skip: u64,
    chunk_rows: usize,
    group_rows: usize,
    /// What is left of the batch being read.
    current: Option<RecordBatch>,
}

impl Source for Columnar {
    fn total(&self) -> u64 {
        self.total
    }

    fn next_chunk(&mut self) -> Result<Option<Vec<Group>>, BatchError> {
        loop {
            let batch = match self.current.take() {
                Some(batch) => batch,
                None => match self.batches.next() {
                    None => return Ok(None),
                    Some(batch) => batch.map_err(|e| BatchError::input(&self.path, e))?,
                },
            };
            let skip = (self.skip as usize).min(batch.num_rows());
            self.skip -= skip as u64;
            let batch = batch.slice(skip, batch.num_rows() - skip);
            if batch.num_rows() == 0 {
                continue;
            }
            let take = batch.num_rows().min(self.chunk_rows);
            if take < batch.num_rows() {
                self.current = Some(batch.slice(take, batch.num_rows() - take));
            }
            let batch = batch.slice(0, take);
            return Ok(Some(self.plan.groups(&batch, &self.model, self.group_rows)));
        }
    }
}

/// A Parquet file's records from `reading.start` on.
pub fn parquet(path: &Path, model: &ModelSpec, reading: Reading) -> Result<Columnar, BatchError> {
    let bad = |e: parquet::errors::ParquetError| BatchError::input(path, e);
    let file = File::open(path).map_err(|e| no_file(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(bad)?;
    let total = builder.metadata().file_metadata().num_rows() as u64;
    let plan = ColumnPlan::new(builder.schema(), model).map_err(|e| BatchError::input(path, e))?;
    let mask = ProjectionMask::roots(builder.parquet_schema(), plan.indices());
    let reader = builder
        .with_projection(mask)
        .with_batch_size(reading.chunk_rows)
        .with_offset(reading.start as usize)
        .build()
        .map_err(bad)?;
    Ok(Columnar {
        path: path.to_path_buf(),
        batches: Box::new(reader),
        plan: plan.projected(),
        model: model.clone(),
        total,
        skip: 0,
        chunk_rows: reading.chunk_rows,
        group_rows: reading.group_rows,
        current: None,
    })
}

/// An Arrow IPC file, or stream, records from `reading.start` on.
pub fn ipc(path: &Path, model: &ModelSpec, reading: Reading) -> Result<Columnar, BatchError> {
    let bad = |e: arrow_schema::ArrowError| BatchError::input(path, e);
    let open = || File::open(path).map_err(|e| no_file(path, e));
    let is_file = {
        let mut magic = [0u8; 6];
        open()?.read_exact(&mut magic).is_ok() && &magic == b"ARROW1"
    };
    let projected = |projection| -> Result<Batches, BatchError> {
        let file = BufReader::with_capacity(1 << 20, open()?);
        Ok(if is_file {
            Box::new(FileReader::try_new(file, projection).map_err(bad)?)
        } else {
            Box::new(StreamReader::try_new(file, projection).map_err(bad)?)
        })
    };
    // The row count, from a pass that reads no column.
    let total = projected(Some(Vec::new()))?
        .map(|b| b.map(|b| b.num_rows() as u64))
        .sum::<Result<u64, _>>()
        .map_err(bad)?;
    let schema = schema_of(open()?, is_file).map_err(bad)?;
    let plan = ColumnPlan::new(&schema, model).map_err(|e| BatchError::input(path, e))?;
    let mut indices = plan.indices();
    indices.sort_unstable();
    Ok(Columnar {
        path: path.to_path_buf(),
        batches: projected(Some(indices))?,
        plan: plan.projected(),
        model: model.clone(),
        total,
        skip: reading.start,
        chunk_rows: reading.chunk_rows,
        group_rows: reading.group_rows,
        current: None,
    })
}

fn schema_of<R: Read + Seek>(
    file: R,
    is_file: bool,
) -> Result<arrow_schema::SchemaRef, arrow_schema::ArrowError> {
    Ok(if is_file {
        FileReader::try_new(file, None)?.schema()
    } else {
        StreamReader::try_new(file, None)?.schema()
    })
}
