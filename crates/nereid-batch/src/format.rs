//! The file formats a job reads and writes, told from the path or named.

use std::path::Path;

use crate::BatchError;

/// A format for records in and results out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One KServe v2 infer body per line in; one infer response (or
    /// `{"error": ...}`) per line out.
    JsonLines,
    /// `.npy` arrays, rows along the first axis: one file per input (or a
    /// folder of `<INPUT>.npy`) in; a folder of `<OUTPUT>.npy` out.
    Npy,
    /// A Parquet file, a column per input in, a column per output and an
    /// `error` column out.
    Parquet,
    /// An Arrow IPC file (or stream, in), columns as for Parquet.
    Arrow,
}

impl Format {
    /// The name `--input-format` and `--output-format` take.
    pub fn parse(name: &str) -> Result<Format, BatchError> {
        match name.to_ascii_lowercase().as_str() {
            "jsonl" | "json" | "ndjson" => Ok(Format::JsonLines),
            "npy" => Ok(Format::Npy),
            "parquet" => Ok(Format::Parquet),
            "arrow" | "ipc" | "feather" => Ok(Format::Arrow),
            _ => Err(BatchError::Usage(format!(
                "unknown format '{name}': expected jsonl, npy, parquet or arrow"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::JsonLines => "jsonl",
            Format::Npy => "npy",
            Format::Parquet => "parquet",
            Format::Arrow => "arrow",
        }
    }

    /// The format a path's extension names; a folder holds `.npy` files.
    pub fn of_path(path: &Path) -> Result<Format, BatchError> {
        if path.is_dir() {
            return Ok(Format::Npy);
        }
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("jsonl" | "json" | "ndjson") => Ok(Format::JsonLines),
            Some("npy") => Ok(Format::Npy),
            Some("parquet" | "pq") => Ok(Format::Parquet),
            Some("arrow" | "ipc" | "feather" | "arrows") => Ok(Format::Arrow),
            _ => Err(BatchError::Usage(format!(
                "cannot tell the format of {} from its name: name it .jsonl, .npy, .parquet or \
                 .arrow, or pass the format",
                path.display()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_come_from_extensions_and_names() {
        assert_eq!(
            Format::of_path(Path::new("a/b.JSONL")).unwrap(),
            Format::JsonLines
        );
        assert_eq!(
            Format::of_path(Path::new("x.parquet")).unwrap(),
            Format::Parquet
        );
        assert_eq!(
            Format::of_path(Path::new("x.feather")).unwrap(),
            Format::Arrow
        );
        assert!(Format::of_path(Path::new("x.csv")).is_err());
        assert_eq!(Format::parse("IPC").unwrap(), Format::Arrow);
        assert!(Format::parse("csv").is_err());
    }
}
