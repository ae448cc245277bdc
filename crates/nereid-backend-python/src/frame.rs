//! The frames server and worker exchange over the worker's stdin and
//! stdout: a 4-byte little-endian length, then that many bytes of UTF-8
//! JSON holding one object (`python/README.md` has the messages).

use std::io::{self, Read, Write};

use serde_json::Value;

/// The largest frame either side accepts. Frames carry descriptors and
/// messages, never tensor bytes, so a bigger one is a broken peer.
pub(crate) const MAX_FRAME: usize = 64 << 20;

/// Writes one frame and flushes it.
pub(crate) fn write_frame(out: &mut impl Write, message: &Value) -> io::Result<()> {
    let body = serde_json::to_vec(message)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&n| n as usize <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(&body)?;
    out.flush()
}

/// Reads one frame; `None` at a clean end of stream (the peer closed it
/// between frames).
pub(crate) fn read_frame(input: &mut impl Read) -> io::Result<Option<Value>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes is over the {MAX_FRAME}-byte limit"),
        ));
    }
    let mut body = vec![0u8; len];
    input.read_exact(&mut body)?;
    let value: Value = serde_json::from_slice(&body)?;
    if !value.is_object() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a frame is not a JSON object",
        ));
    }
    Ok(Some(value))
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
        let mut r = buf.as_slice();
        assert_eq!(read_frame(&mut r).unwrap(), Some(json!({"op": "ready"})));
        assert_eq!(
            read_frame(&mut r).unwrap(),
            Some(json!({"op": "log", "message": "é\u{0}"}))
        );
        assert_eq!(read_frame(&mut r).unwrap(), None);
    }

    #[test]
    fn broken_frames_are_errors_not_panics() {
        let truncated = [5u8, 0, 0, 0, b'{'];
        assert!(read_frame(&mut truncated.as_slice()).is_err());
        let huge = u32::MAX.to_le_bytes();
        assert!(read_frame(&mut huge.as_slice()).is_err());
        let mut not_object = Vec::new();
        write_frame(&mut not_object, &json!([1, 2])).unwrap();
        assert!(read_frame(&mut not_object.as_slice()).is_err());
    }
}
