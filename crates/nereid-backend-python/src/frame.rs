//! JSON messages: the frames of the side channel (a 4-byte little-endian
//! length, then that many bytes of UTF-8 JSON holding one object), and the
//! JSON records of the channel (`python/README.md` has the messages).

#[cfg(test)]
use std::io::Write;
use std::io::{self, Read};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use crate::channel::{SendError, Sender};
use crate::message::JSON;

/// The way to a worker, written one message at a time by its instance
/// thread, its drain thread, BLS threads and its side thread.
pub(crate) type ToWorker = Arc<Mutex<Sender>>;

/// Sends a JSON message on the channel.
pub(crate) fn send_json(to: &ToWorker, message: &Value) -> Result<(), SendError> {
    let text = serde_json::to_vec(message).map_err(|e| SendError::Closed(e.into()))?;
    to.lock().send(JSON, &text)
}

/// The largest frame either side accepts. Frames carry descriptors and
/// messages, never tensor bytes, so a bigger one is a broken peer.
pub(crate) const MAX_FRAME: usize = 64 << 20;

/// Room the reader asks the socket for at once.
const READ_CHUNK: usize = 64 << 10;

/// Writes one frame in one `write_all` and flushes it.
#[cfg(test)]
pub(crate) fn write_frame(out: &mut impl Write, message: &Value) -> io::Result<()> {
    let mut buf = vec![0u8; 4];
    serde_json::to_writer(&mut buf, message)?;
    let len = u32::try_from(buf.len() - 4)
        .ok()
        .filter(|&n| n as usize <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    buf[..4].copy_from_slice(&len.to_le_bytes());
    out.write_all(&buf)?;
    out.flush()
}

/// Reads frames from a stream in two steps, so that the caller can wait
/// for data with a timeout in between: [`FrameReader::take`] gives a frame
/// already buffered, [`FrameReader::fill`] reads what the stream has.
#[derive(Debug)]
pub(crate) struct FrameReader<R> {
    input: R,
    buf: Vec<u8>,
}

impl<R: Read> FrameReader<R> {
    pub(crate) fn new(input: R) -> Self {
        FrameReader {
            input,
            buf: Vec::new(),
        }
    }

    /// Reads once from the stream into the buffer; `Ok(false)` at the end
    /// of the stream.
    pub(crate) fn fill(&mut self) -> io::Result<bool> {
        let filled = self.buf.len();
        self.buf.resize(filled + READ_CHUNK, 0);
        let read = loop {
            match self.input.read(&mut self.buf[filled..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                read => break read,
            }
        };
        self.buf.truncate(filled + *read.as_ref().unwrap_or(&0));
        Ok(read? > 0)
    }

    /// A whole frame from the buffer, if one is there.
    pub(crate) fn take(&mut self) -> io::Result<Option<Value>> {
        let Some(header) = self.buf.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_le_bytes(*header) as usize;
        if len > MAX_FRAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a frame of {len} bytes is over the {MAX_FRAME}-byte limit"),
            ));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let value: Result<Value, _> = serde_json::from_slice(&self.buf[4..4 + len]);
        self.buf.drain(..4 + len);
        let value = value?;
        if !value.is_object() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a frame is not a JSON object",
            ));
        }
        Ok(Some(value))
    }

    /// Whether the stream ended inside a frame.
    #[cfg(test)]
    fn is_mid_frame(&self) -> bool {
        !self.buf.is_empty()
    }

    /// The next frame, blocking; `None` at a clean end of stream.
    #[cfg(test)]
    fn next(&mut self) -> io::Result<Option<Value>> {
        loop {
            if let Some(frame) = self.take()? {
                return Ok(Some(frame));
            }
            if !self.fill()? {
                return match self.is_mid_frame() {
                    true => Err(io::ErrorKind::UnexpectedEof.into()),
                    false => Ok(None),
                };
            }
        }
    }
}

/// Logs a worker's `log` frame as the worker `label`.
pub(crate) fn log_frame(label: &str, frame: &Value) {
    let message = frame["message"].as_str().unwrap_or_default();
    let at = format!(
        "{}:{}",
        frame["file"].as_str().unwrap_or("?"),
        frame["line"].as_u64().unwrap_or(0)
    );
    let worker = label;
    match frame["level"].as_str() {
        Some("error") => tracing::error!(target: "nereid::python", worker, at, "{message}"),
        Some("warn") => tracing::warn!(target: "nereid::python", worker, at, "{message}"),
        Some("verbose") => tracing::debug!(target: "nereid::python", worker, at, "{message}"),
        _ => tracing::info!(target: "nereid::python", worker, at, "{message}"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn frames_round_trip_back_to_back() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &json!({"op": "ready"})).unwrap();
        write_frame(&mut buf, &json!({"op": "log", "message": "é\u{0}"})).unwrap();
        let mut r = FrameReader::new(buf.as_slice());
        assert_eq!(r.next().unwrap(), Some(json!({"op": "ready"})));
        assert_eq!(
            r.next().unwrap(),
            Some(json!({"op": "log", "message": "é\u{0}"}))
        );
        assert_eq!(r.next().unwrap(), None);
    }

    #[test]
    fn frames_split_across_reads_come_whole() {
        let mut data = Vec::new();
        write_frame(&mut data, &json!({"op": "a", "n": 12345})).unwrap();
        write_frame(&mut data, &json!({"op": "b"})).unwrap();
        let mut r = FrameReader::new(io::Read::chain(&data[..3], &data[3..]));
        assert_eq!(r.take().unwrap(), None);
        assert!(r.fill().unwrap(), "three bytes: no frame yet");
        assert_eq!(r.take().unwrap(), None);
        assert_eq!(r.next().unwrap(), Some(json!({"op": "a", "n": 12345})));
        assert_eq!(r.next().unwrap(), Some(json!({"op": "b"})));
        assert_eq!(r.next().unwrap(), None);
    }

    #[test]
    fn broken_frames_are_errors_not_panics() {
        let truncated = [5u8, 0, 0, 0, b'{'];
        assert!(FrameReader::new(truncated.as_slice()).next().is_err());
        let huge = u32::MAX.to_le_bytes();
        assert!(FrameReader::new(huge.as_slice()).next().is_err());
        let mut not_object = Vec::new();
        write_frame(&mut not_object, &json!([1, 2])).unwrap();
        assert!(FrameReader::new(not_object.as_slice()).next().is_err());
    }
}
