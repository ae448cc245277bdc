//! JSON lines out: each record's infer response as the HTTP endpoint
//! answers it (outputs as JSON data), or `{"error": "..."}` as the HTTP
//! endpoint answers a failure, one per line, appended to the output.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use nereid_core::InferResponse;
use nereid_protocol::rest::{OutputEncoding, encode_infer_response};

use super::{CommitPolicy, Recovered, Sink};
use crate::BatchError;

/// How a failure line starts (and how a resumed job counts them).
const ERROR_PREFIX: &[u8] = b"{\"error\":";

pub struct JsonLinesSink {
    path: PathBuf,
    out: BufWriter<File>,
    policy: CommitPolicy,
    since: Instant,
    rows: usize,
}

impl JsonLinesSink {
    pub fn open(path: &Path, policy: CommitPolicy) -> Result<JsonLinesSink, BatchError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| BatchError::output(path, format!("cannot open: {e}")))?;
        Ok(JsonLinesSink {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 20, file),
            policy,
            since: Instant::now(),
            rows: 0,
        })
    }
}

/// The line for one result, without its newline.
pub fn line(result: Result<InferResponse, String>) -> (Vec<u8>, bool) {
    let encoded = result.and_then(|response| {
        encode_infer_response(&response, &OutputEncoding::default())
            .map(|e| e.body.to_vec())
            .map_err(|e| e.message().to_string())
    });
    match encoded {
        Ok(body) => (body, false),
        Err(message) => {
            let body = serde_json::json!({ "error": message }).to_string();
            (body.into_bytes(), true)
        }
    }
}

impl Sink for JsonLinesSink {
    fn write(&mut self, result: Result<InferResponse, String>) -> Result<bool, BatchError> {
        let (mut body, failed) = line(result);
        body.push(b'\n');
        self.out
            .write_all(&body)
            .map_err(|e| BatchError::output(&self.path, e))?;
        self.rows += 1;
        Ok(failed)
    }

    fn wants_commit(&self) -> bool {
        self.policy.due(self.rows, 0, self.since)
    }

    fn commit(&mut self) -> Result<(), BatchError> {
        self.out
            .flush()
            .map_err(|e| BatchError::output(&self.path, e))?;
        self.rows = 0;
        self.since = Instant::now();
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<(), BatchError> {
        self.commit()?;
        self.out
            .get_ref()
            .sync_all()
            .map_err(|e| BatchError::output(&self.path, e))
    }
}

/// Counts the whole lines of `path` (and the failures among them) and cuts
/// off a last line without its newline: the line a killed job was writing.
pub fn recover(path: &Path) -> Result<Recovered, BatchError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Recovered::default()),
        Err(e) => return Err(BatchError::output(path, format!("cannot read: {e}"))),
    };
    let bad = |e: std::io::Error| BatchError::output(path, e);
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let (mut recovered, mut whole, mut line) = (Recovered::default(), 0u64, Vec::new());
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(bad)?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        whole += n as u64;
        recovered.records += 1;
        recovered.failures += u64::from(line.starts_with(ERROR_PREFIX));
    }
    if whole < std::fs::metadata(path).map_err(bad)?.len() {
        OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(whole))
            .map_err(bad)?;
    }
    Ok(recovered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_off_last_line_is_dropped_and_failures_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, "{\"outputs\":[]}\n{\"error\":\"x\"}\n{\"outp").unwrap();
        let recovered = recover(&path).unwrap();
        assert_eq!((recovered.records, recovered.failures), (2, 1));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"outputs\":[]}\n{\"error\":\"x\"}\n"
        );
        assert_eq!(
            recover(&dir.path().join("none.jsonl")).unwrap(),
            Recovered::default()
        );
    }

    #[test]
    fn appended_lines_follow_the_kept_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, "{\"error\":\"a\"}\n{\"err").unwrap();
        recover(&path).unwrap();
        let mut sink = Box::new(JsonLinesSink::open(&path, CommitPolicy::default()).unwrap());
        assert!(sink.write(Err("b \"quoted\"".into())).unwrap());
        sink.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "{\"error\":\"a\"}\n{\"error\":\"b \\\"quoted\\\"\"}\n"
        );
        assert_eq!(recover(&path).unwrap().failures, 2);
    }
}
