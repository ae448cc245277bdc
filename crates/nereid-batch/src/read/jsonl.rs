//! JSON lines: one KServe v2 infer request body per line, decoded by the
//! REST frontend's own decoder, so a line means what the same body posted
//! to `/v2/models/<model>/infer` means. Every line is a record, a blank
//! one too (it fails), so that output line N answers input line N.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use nereid_core::ModelVersion;
use nereid_protocol::rest::decode_infer_request;

use super::{Group, Record, Source, no_file};
use crate::BatchError;
use crate::spec::ModelSpec;

/// Lines decoded per chunk.
const CHUNK: usize = 1024;

pub struct JsonLines {
    path: PathBuf,
    reader: BufReader<File>,
    total: u64,
    model: String,
    version: ModelVersion,
}

impl JsonLines {
    pub fn open(path: &Path, model: &ModelSpec, start: u64) -> Result<JsonLines, BatchError> {
        let total = count_lines(File::open(path).map_err(|e| no_file(path, e))?)
            .map_err(|e| BatchError::input(path, e))?;
        let mut reader =
            BufReader::with_capacity(1 << 20, File::open(path).map_err(|e| no_file(path, e))?);
        let mut skipped = Vec::new();
        for _ in 0..start {
            skipped.clear();
            reader
                .read_until(b'\n', &mut skipped)
                .map_err(|e| BatchError::input(path, e))?;
        }
        Ok(JsonLines {
            path: path.to_path_buf(),
            reader,
            total,
            model: model.name.clone(),
            version: model.version.clone(),
        })
    }

    fn decode(&self, line: Vec<u8>) -> Record {
        let mut line = line;
        while line.last().is_some_and(|b| matches!(b, b'\n' | b'\r')) {
            line.pop();
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return Err("empty line: expected a KServe v2 infer request body".into());
        }
        let len = line.len();
        decode_infer_request(&self.model, self.version.clone(), Bytes::from(line), len)
            .map(|decoded| decoded.request)
            .map_err(|e| e.message().to_string())
    }
}

impl Source for JsonLines {
    fn total(&self) -> u64 {
        self.total
    }

    fn next_chunk(&mut self) -> Result<Option<Vec<Group>>, BatchError> {
        let mut records = Vec::with_capacity(CHUNK);
        while records.len() < CHUNK {
            let mut line = Vec::new();
            let n = self
                .reader
                .read_until(b'\n', &mut line)
                .map_err(|e| BatchError::input(&self.path, e))?;
            if n == 0 {
                break;
            }
            records.push(Group::one(self.decode(line)));
        }
        Ok((!records.is_empty()).then_some(records))
    }
}

/// Lines in `file`; a last line without its newline counts.
pub fn count_lines(mut file: impl Read) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let (mut lines, mut last) = (0u64, b'\n');
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        last = buf[n - 1];
    }
    Ok(lines + u64::from(last != b'\n'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_count_with_or_without_a_last_newline() {
        assert_eq!(count_lines(&b""[..]).unwrap(), 0);
        assert_eq!(count_lines(&b"a\nb\n"[..]).unwrap(), 2);
        assert_eq!(count_lines(&b"a\nb"[..]).unwrap(), 2);
        assert_eq!(count_lines(&b"\n\n"[..]).unwrap(), 2);
    }
}
