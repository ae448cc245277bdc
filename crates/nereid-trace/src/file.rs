//! Triton's JSON trace files: a finished trace as the objects Triton
//! writes for it (one per timestamp or tensor, the model and ids before
//! its `REQUEST_START`), and the trace file itself: indexed files
//! (`trace.json.0`, `.1`, ...) written whole, and the main file that
//! collects the rest and is closed at shutdown.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use nereid_core::DataType;
use nereid_core::trace::{Activity, TraceEvent, TraceRecord};
use parking_lot::Mutex;
use serde_json::json;

/// Appends `record`'s objects, then its children's, comma-separated, to
/// `out` (which gets a comma first when it is not empty).
pub fn write_record(out: &mut String, record: &TraceRecord) {
    let mut push = |value: serde_json::Value| {
        if !out.is_empty() {
            out.push(',');
        }
        // Writing to a String cannot fail.
        let _ = write!(out, "{value}");
    };
    let id = record.id;
    for event in &record.events {
        match event {
            TraceEvent::Timestamp { activity, ns } => {
                if *activity == Activity::RequestStart
                    && let Some((model, version)) = &record.model
                {
                    let mut head = json!({"id": id, "model_name": model, "model_version": version});
                    if !record.request_id.is_empty() {
                        head["request_id"] = json!(record.request_id);
                    }
                    if let Some(parent) = record.parent_id {
                        head["parent_id"] = json!(parent);
                    }
                    push(head);
                }
                push(json!({"id": id, "timestamps": [{"name": activity.name(), "ns": ns}]}));
            }
            TraceEvent::Tensor {
                activity,
                name,
                datatype,
                shape,
                data,
            } => push(json!({
                "id": id,
                "activity": activity.name(),
                "tensor": {
                    "name": name,
                    "data": tensor_text(*datatype, data),
                    "shape": shape.iter().map(i64::to_string).collect::<Vec<_>>().join(","),
                    "dtype": datatype.wire_name(),
                }
            })),
        }
    }
    for child in &record.children {
        write_record(out, child);
    }
}

/// A tensor's elements as Triton's trace writes them: numbers as C++
/// streams print them (floats with 6 significant digits), booleans as 0
/// and 1, strings each in double quotes; FP16 and BF16 are left empty,
/// as Triton leaves them. Triton prints INT8 and UINT8 elements as
/// characters; they are numbers here.
pub fn tensor_text(datatype: DataType, data: &[u8]) -> String {
    fn join<const N: usize>(data: &[u8], show: impl Fn([u8; N]) -> String) -> String {
        data.chunks_exact(N)
            .map(|c| show(c.try_into().unwrap_or([0; N])))
            .collect::<Vec<_>>()
            .join(",")
    }
    match datatype {
        DataType::Bool => join::<1>(data, |[b]| u8::from(b != 0).to_string()),
        DataType::Uint8 => join::<1>(data, |b| u8::from_le_bytes(b).to_string()),
        DataType::Int8 => join::<1>(data, |b| i8::from_le_bytes(b).to_string()),
        DataType::Uint16 => join::<2>(data, |b| u16::from_le_bytes(b).to_string()),
        DataType::Int16 => join::<2>(data, |b| i16::from_le_bytes(b).to_string()),
        DataType::Uint32 => join::<4>(data, |b| u32::from_le_bytes(b).to_string()),
        DataType::Int32 => join::<4>(data, |b| i32::from_le_bytes(b).to_string()),
        DataType::Uint64 => join::<8>(data, |b| u64::from_le_bytes(b).to_string()),
        DataType::Int64 => join::<8>(data, |b| i64::from_le_bytes(b).to_string()),
        DataType::Fp32 => join::<4>(data, |b| general(f64::from(f32::from_le_bytes(b)))),
        DataType::Fp64 => join::<8>(data, |b| general(f64::from_le_bytes(b))),
        DataType::Fp16 | DataType::Bf16 => String::new(),
        DataType::Bytes => strings(data),
    }
}

/// `BYTES` framing (4-byte little-endian length, then the bytes) as
/// `"a","bc"`; a truncated element ends the list.
fn strings(mut data: &[u8]) -> String {
    let mut elements = Vec::new();
    while let Some((len, rest)) = data.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*len) as usize;
        let Some(element) = rest.get(..len) else {
            break;
        };
        elements.push(format!("\"{}\"", String::from_utf8_lossy(element)));
        data = &rest[len..];
    }
    elements.join(",")
}

/// `value` as C's `%g` prints it (6 significant digits, trailing zeros
/// dropped, an exponent below 1e-4 or from 1e6 on).
fn general(value: f64) -> String {
    if value.is_nan() {
        return if value.is_sign_negative() {
            "-nan"
        } else {
            "nan"
        }
        .into();
    }
    if value.is_infinite() {
        return if value < 0.0 { "-inf" } else { "inf" }.into();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let scientific = format!("{value:.5e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{}e{sign}{:02}",
            trim_zeros(mantissa),
            exponent.unsigned_abs()
        );
    }
    let decimals = usize::try_from(5 - exponent).unwrap_or(0);
    trim_zeros(&format!("{value:.decimals$}")).to_string()
}

fn trim_zeros(number: &str) -> &str {
    if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    }
}

/// The trace file named at startup.
#[derive(Debug)]
pub struct TraceFile {
    path: PathBuf,
    next_index: AtomicU64,
    main: Mutex<MainFile>,
}

#[derive(Debug, Default)]
struct MainFile {
    file: Option<File>,
    closed: bool,
}

impl TraceFile {
    pub fn new(path: PathBuf) -> TraceFile {
        TraceFile {
            path,
            next_index: AtomicU64::new(0),
            main: Mutex::default(),
        }
    }

    /// Writes `traces` (comma-separated objects) as the next indexed file.
    pub fn write_indexed(&self, traces: &str) {
        let index = self.next_index.fetch_add(1, Ordering::Relaxed);
        let mut name = self.path.clone().into_os_string();
        name.push(format!(".{index}"));
        let path = PathBuf::from(name);
        if let Err(e) = std::fs::write(&path, format!("[{traces}]")) {
            tracing::error!(path = %path.display(), error = %e, "failed creating trace file");
        }
    }

    /// Adds `traces` to the main file, opening it on the first write.
    pub fn append(&self, traces: &str) {
        let mut main = self.main.lock();
        if main.closed {
            tracing::warn!(path = %self.path.display(), "a trace finished after the trace file was closed; it is dropped");
            return;
        }
        let result = match &mut main.file {
            Some(file) => file
                .write_all(b",")
                .and_then(|()| file.write_all(traces.as_bytes())),
            None => File::create(&self.path).and_then(|mut file| {
                file.write_all(b"[")?;
                file.write_all(traces.as_bytes())?;
                main.file = Some(file);
                Ok(())
            }),
        };
        if let Err(e) = result {
            tracing::error!(path = %self.path.display(), error = %e, "failed writing trace file");
        }
    }

    /// Ends the main file's JSON array; later traces are dropped.
    pub fn close(&self) {
        let mut main = self.main.lock();
        main.closed = true;
        if let Some(mut file) = main.file.take()
            && let Err(e) = file.write_all(b"]").and_then(|()| file.sync_all())
        {
            tracing::error!(path = %self.path.display(), error = %e, "failed closing trace file");
        }
    }
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_core::trace::TensorActivity;

    #[test]
    fn numbers_print_as_c_prints_them() {
        for (value, text) in [
            (0.1, "0.1"),
            (1.0, "1"),
            (-2.5, "-2.5"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (1.0 / 3.0, "0.333333"),
            (0.0, "0"),
        ] {
            assert_eq!(general(value), text, "{value}");
        }
        let floats: Vec<u8> = [0.5f32, 2.0].iter().flat_map(|f| f.to_le_bytes()).collect();
        assert_eq!(tensor_text(DataType::Fp32, &floats), "0.5,2");
        assert_eq!(tensor_text(DataType::Bool, &[0, 1, 7]), "0,1,1");
        assert_eq!(tensor_text(DataType::Int8, &[0xff, 3]), "-1,3");
        assert_eq!(tensor_text(DataType::Fp16, &[0, 60]), "");
    }

    #[test]
    fn strings_are_quoted_and_a_truncated_element_ends_them() {
        let mut data = Vec::new();
        for s in [&b"a"[..], b"bc", b"\"q\""] {
            data.extend((s.len() as u32).to_le_bytes());
            data.extend(s);
        }
        assert_eq!(tensor_text(DataType::Bytes, &data), r#""a","bc",""q"""#);
        data.extend(9u32.to_le_bytes());
        data.extend(b"xy");
        assert_eq!(tensor_text(DataType::Bytes, &data), r#""a","bc",""q"""#);
    }

    #[test]
    fn a_record_writes_its_head_before_request_start_then_its_children() {
        let stamp = |activity, ns| TraceEvent::Timestamp { activity, ns };
        let record = TraceRecord {
            id: 7,
            model: Some(("ens".into(), 1)),
            request_id: "r".into(),
            events: vec![
                stamp(Activity::HttpRecvStart, 1),
                stamp(Activity::RequestStart, 2),
                TraceEvent::Tensor {
                    activity: TensorActivity::QueueInput,
                    name: "IN".into(),
                    datatype: DataType::Int32,
                    shape: vec![1, 2],
                    data: bytes::Bytes::from_static(&[1, 0, 0, 0, 2, 0, 0, 0]),
                },
            ],
            children: vec![TraceRecord {
                id: 8,
                parent_id: Some(7),
                model: Some(("step".into(), 3)),
                events: vec![stamp(Activity::RequestStart, 3)],
                ..TraceRecord::default()
            }],
            ..TraceRecord::default()
        };
        let mut out = String::new();
        write_record(&mut out, &record);
        let objects: Vec<serde_json::Value> =
            serde_json::from_str(&format!("[{out}]")).expect("valid JSON");
        assert_eq!(objects.len(), 6);
        assert_eq!(objects[0]["timestamps"][0]["name"], "HTTP_RECV_START");
        assert_eq!(
            objects[1],
            json!({"id": 7, "model_name": "ens", "model_version": 1, "request_id": "r"})
        );
        assert_eq!(objects[2]["timestamps"][0]["ns"], 2);
        assert_eq!(
            objects[3]["tensor"],
            json!({"name": "IN", "data": "1,2", "shape": "1,2", "dtype": "INT32"})
        );
        assert_eq!(
            objects[4],
            json!({"id": 8, "model_name": "step", "model_version": 3, "parent_id": 7})
        );
    }

    #[test]
    fn the_main_file_is_one_array_once_closed() {
        let dir = tempfile::tempdir().unwrap();
        let file = TraceFile::new(dir.path().join("t.json"));
        file.append(r#"{"id":1}"#);
        file.append(r#"{"id":2}"#);
        file.write_indexed(r#"{"id":3}"#);
        file.close();
        file.append(r#"{"id":4}"#);
        let main = std::fs::read_to_string(dir.path().join("t.json")).unwrap();
        assert_eq!(main, r#"[{"id":1},{"id":2}]"#);
        let indexed = std::fs::read_to_string(dir.path().join("t.json.0")).unwrap();
        assert_eq!(indexed, r#"[{"id":3}]"#);
    }
}
