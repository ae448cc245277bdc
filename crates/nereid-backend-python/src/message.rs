//! The binary messages of the request path (`execute`, `responses`,
//! `response`, `release`, `cancel`), as `python/README.md` ("Messages on
//! the request path") lays them out: little-endian integers, strings as a
//! `u32` length and UTF-8, lists as a `u32` count and their items. Every
//! other message is JSON text in a record of kind [`JSON`].

use nereid_core::{BackendError, CorrelationId, DataType, Error, Parameter, Parameters};

use crate::codes::{kind_of, number_to_code, type_number, type_of_number};
use crate::shm::Region;

/// Record kinds.
pub(crate) const JSON: u32 = 1;
pub(crate) const EXECUTE: u32 = 2;
pub(crate) const RESPONSES: u32 = 3;
pub(crate) const RESPONSE: u32 = 4;
pub(crate) const RELEASE: u32 = 5;
pub(crate) const CANCEL: u32 = 6;
pub(crate) const BLS: u32 = 7;
pub(crate) const BLS_RESPONSE: u32 = 8;
pub(crate) const BLS_RELEASE: u32 = 9;

/// Builds a message.
#[derive(Debug, Default)]
pub(crate) struct Out(pub(crate) Vec<u8>);

impl Out {
    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn len(&mut self, n: usize) -> &mut Self {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX))
    }
    pub(crate) fn str(&mut self, s: &str) -> &mut Self {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
        self
    }

    /// A correlation ID: `u8 0, u64` or `u8 1, str`.
    pub(crate) fn correlation_id(&mut self, id: &CorrelationId) -> &mut Self {
        match id {
            CorrelationId::Int(v) => self.u8(0).u64(*v),
            CorrelationId::Str(v) => self.u8(1).str(v),
        }
    }

    /// Parameters: a count, then each key, a type tag (0 bool, 1 int64,
    /// 2 uint64, 3 double, 4 string) and its value.
    pub(crate) fn parameters(&mut self, parameters: &Parameters) -> &mut Self {
        self.len(parameters.len());
        for (key, value) in parameters {
            self.str(key);
            match value {
                Parameter::Bool(b) => self.u8(0).u8(u8::from(*b)),
                Parameter::Int64(i) => self.u8(1).i64(*i),
                Parameter::Uint64(u) => self.u8(2).u64(*u),
                Parameter::Double(d) => self.u8(3).u64(d.to_bits()),
                Parameter::String(s) => self.u8(4).str(s),
            };
        }
        self
    }

    /// A tensor: name, Triton type number, shape, and where its bytes
    /// are (an index into the message's file table, offset and size).
    pub(crate) fn tensor(
        &mut self,
        name: &str,
        datatype: DataType,
        shape: &[i64],
        file: u32,
        region: &Region,
    ) -> &mut Self {
        self.str(name).u8(type_number(datatype)).len(shape.len());
        for &d in shape {
            self.i64(d);
        }
        self.u32(file)
            .u64(region.offset as u64)
            .u64(region.size as u64)
    }
}

/// The part of a message after its file table, and that table: each
/// tensor written names its file by index, the file added when new.
#[derive(Debug, Default)]
pub(crate) struct Body {
    files: Vec<std::path::PathBuf>,
    pub(crate) out: Out,
}

impl Body {
    /// A tensor whose bytes lie at `region` (see [`Out::tensor`]).
    pub(crate) fn tensor(
        &mut self,
        name: &str,
        datatype: DataType,
        shape: &[i64],
        region: &Region,
    ) {
        let file = match self.files.iter().position(|f| *f == region.path) {
            Some(i) => i,
            None => {
                self.files.push(region.path.clone());
                self.files.len() - 1
            }
        };
        self.out.tensor(name, datatype, shape, file as u32, region);
    }

    /// The message: `head`, the file table, then the body.
    pub(crate) fn finish(self, mut head: Out) -> Vec<u8> {
        head.len(self.files.len());
        for path in &self.files {
            head.str(&path.to_string_lossy());
        }
        head.0.extend_from_slice(&self.out.0);
        head.0
    }
}

/// Reads a message; every read checks what is left.
#[derive(Debug)]
pub(crate) struct In<'a> {
    data: &'a [u8],
    at: usize,
}

/// What went wrong reading a message.
#[derive(Debug, thiserror::Error)]
#[error("the worker sent a broken message: {0}")]
pub(crate) struct BadMessage(pub(crate) String);

impl<'a> In<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        In { data, at: 0 }
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], BadMessage> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(BadMessage(format!(
                "it ends at byte {} where {n} more were due",
                self.data.len()
            )));
        };
        let bytes = &self.data[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], BadMessage> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, BadMessage> {
        Ok(self.array::<1>()?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32, BadMessage> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, BadMessage> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub(crate) fn i64(&mut self) -> Result<i64, BadMessage> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// A count of items each at least `min` bytes long, checked against
    /// what is left so that a broken count allocates nothing.
    pub(crate) fn count(&mut self, min: usize) -> Result<usize, BadMessage> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min.max(1)) > self.data.len() - self.at {
            return Err(BadMessage(format!(
                "a count of {n} is more than the message holds"
            )));
        }
        Ok(n)
    }

    /// A correlation ID as [`Out::correlation_id`] writes it.
    pub(crate) fn correlation_id(&mut self) -> Result<CorrelationId, BadMessage> {
        Ok(match self.u8()? {
            0 => CorrelationId::Int(self.u64()?),
            _ => CorrelationId::Str(self.str()?.to_owned()),
        })
    }

    pub(crate) fn str(&mut self) -> Result<&'a str, BadMessage> {
        let n = self.u32()? as usize;
        std::str::from_utf8(self.bytes(n)?)
            .map_err(|e| BadMessage(format!("a string is not UTF-8: {e}")))
    }

    pub(crate) fn is_done(&self) -> bool {
        self.at == self.data.len()
    }

    /// Parameters as [`Out::parameters`] writes them.
    pub(crate) fn parameters(&mut self) -> Result<Parameters, BadMessage> {
        let n = self.count(6)?;
        let mut parameters = Parameters::new();
        for _ in 0..n {
            let key = self.str()?.to_owned();
            let value = match self.u8()? {
                0 => Parameter::Bool(self.u8()? != 0),
                1 => Parameter::Int64(self.i64()?),
                2 => Parameter::Uint64(self.u64()?),
                3 => Parameter::Double(f64::from_bits(self.u64()?)),
                4 => Parameter::String(self.str()?.to_owned()),
                tag => return Err(BadMessage(format!("parameter '{key}' has type tag {tag}"))),
            };
            parameters.insert(key, value);
        }
        Ok(parameters)
    }

    /// A file table: a count, then paths.
    pub(crate) fn files(&mut self) -> Result<Vec<&'a str>, BadMessage> {
        let n = self.count(4)?;
        (0..n).map(|_| self.str()).collect()
    }

    /// A tensor as [`Out::tensor`] writes it: name, type, shape and region.
    pub(crate) fn tensor(
        &mut self,
        files: &[&str],
    ) -> Result<(String, DataType, Vec<i64>, Region), BadMessage> {
        let name = self.str()?.to_owned();
        let number = self.u8()?;
        let datatype = type_of_number(number)
            .ok_or_else(|| BadMessage(format!("output '{name}' has type number {number}")))?;
        let dims = self.count(8)?;
        let shape = (0..dims)
            .map(|_| self.i64())
            .collect::<Result<Vec<_>, _>>()?;
        let file = self.u32()? as usize;
        let path = files.get(file).ok_or_else(|| {
            BadMessage(format!(
                "output '{name}' names file {file} of {}",
                files.len()
            ))
        })?;
        let offset = usize::try_from(self.u64()?).unwrap_or(usize::MAX);
        let size = usize::try_from(self.u64()?).unwrap_or(usize::MAX);
        let region = Region {
            path: (*path).into(),
            offset,
            size,
        };
        Ok((name, datatype, shape, region))
    }

    /// An error: its message and its TritonError code.
    pub(crate) fn error(&mut self) -> Result<Error, BadMessage> {
        let message = self.str()?;
        let code = self.u8()?;
        Ok(Error::new(kind_of(number_to_code(code)), message))
    }
}

/// A response the worker sent: its outputs' descriptors, or its error.
pub(crate) type Entry = Result<Vec<(String, DataType, Vec<i64>, Region)>, Error>;

/// One response entry: an error, or parameters and outputs.
pub(crate) fn entry(r: &mut In<'_>, files: &[&str]) -> Result<Entry, BadMessage> {
    if r.u8()? != 0 {
        return Ok(Err(r.error()?));
    }
    // Response parameters are read and not passed on (as before).
    let _parameters = r.parameters()?;
    let n = r.count(22)?;
    (0..n)
        .map(|_| r.tensor(files))
        .collect::<Result<_, _>>()
        .map(Ok)
}

/// What a request's slot in a `responses` message holds.
pub(crate) enum Slot {
    /// Answered by a response sender (or open: a decoupled model's).
    Kept,
    Answered(Entry),
    Rescheduled,
}

/// A `responses` message: the batch's error, or each request's slot.
pub(crate) fn responses(payload: &[u8]) -> Result<Result<Vec<Slot>, BackendError>, BadMessage> {
    let mut r = In::new(payload);
    if r.u8()? != 0 {
        let message = r.str()?.to_owned();
        return Ok(Err(BackendError::Execute(message)));
    }
    let files = r.files()?;
    let n = r.count(1)?;
    let mut slots = Vec::with_capacity(n);
    for _ in 0..n {
        slots.push(match r.u8()? {
            0 => Slot::Kept,
            1 => Slot::Answered(entry(&mut r, &files)?),
            2 => Slot::Rescheduled,
            tag => return Err(BadMessage(format!("a response slot has tag {tag}"))),
        });
    }
    finished(&r)?;
    Ok(Ok(slots))
}

/// A `response` message: the request's id, whether it is the final one,
/// and the response, if any.
pub(crate) fn response(payload: &[u8]) -> Result<(u64, bool, Option<Entry>), BadMessage> {
    let mut r = In::new(payload);
    let id = r.u64()?;
    let flags = r.u8()?;
    let files = r.files()?;
    let entry = match r.u8()? {
        0 => None,
        _ => Some(entry(&mut r, &files)?),
    };
    finished(&r)?;
    Ok((id, flags & 1 != 0, entry))
}

/// A `bls` message: a call the model makes.
pub(crate) struct BlsCall {
    pub(crate) decoupled: bool,
    pub(crate) model_name: String,
    /// A number (negative: the server's choice), or a label.
    pub(crate) version: Result<i64, String>,
    pub(crate) request_id: String,
    pub(crate) correlation_id: CorrelationId,
    pub(crate) flags: u32,
    pub(crate) timeout_us: u64,
    pub(crate) parameters: Parameters,
    pub(crate) outputs: Vec<String>,
    pub(crate) inputs: Vec<(String, DataType, Vec<i64>, Region)>,
}

/// The tag a `bls` message starts with, when it has one.
pub(crate) fn bls_tag(payload: &[u8]) -> Option<u64> {
    In::new(payload).u64().ok()
}

/// A `bls` message (`python/README.md` has the layout).
pub(crate) fn bls_call(payload: &[u8]) -> Result<BlsCall, BadMessage> {
    let mut r = In::new(payload);
    let _tag = r.u64()?;
    let decoupled = r.u8()? & 1 != 0;
    let model_name = r.str()?.to_owned();
    let version = match r.u8()? {
        0 => Ok(r.i64()?),
        _ => Err(r.str()?.to_owned()),
    };
    let request_id = r.str()?.to_owned();
    let correlation_id = r.correlation_id()?;
    let flags = r.u32()?;
    let timeout_us = r.u64()?;
    let parameters = r.parameters()?;
    let n = r.count(4)?;
    let outputs = (0..n)
        .map(|_| r.str().map(str::to_owned))
        .collect::<Result<_, _>>()?;
    let files = r.files()?;
    let n = r.count(22)?;
    let inputs = (0..n).map(|_| r.tensor(&files)).collect::<Result<_, _>>()?;
    finished(&r)?;
    Ok(BlsCall {
        decoupled,
        model_name,
        version,
        request_id,
        correlation_id,
        flags,
        timeout_us,
        parameters,
        outputs,
        inputs,
    })
}

fn finished(r: &In<'_>) -> Result<(), BadMessage> {
    match r.is_done() {
        true => Ok(()),
        false => Err(BadMessage("it has bytes past its end".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_and_tensors_round_trip() {
        let mut parameters = Parameters::new();
        parameters.insert("b".into(), Parameter::Bool(true));
        parameters.insert("d".into(), Parameter::Double(2.5));
        parameters.insert("s".into(), Parameter::String("é".into()));
        parameters.insert("u".into(), Parameter::Uint64(u64::MAX));
        let region = Region {
            path: "/dev/shm/x".into(),
            offset: 64,
            size: 16,
        };
        let mut out = Out::default();
        out.parameters(&parameters)
            .tensor("OUT", DataType::Fp32, &[1, 4], 0, &region);
        let mut r = In::new(&out.0);
        assert_eq!(r.parameters().unwrap(), parameters);
        let (name, datatype, shape, read) = r.tensor(&["/dev/shm/x"]).unwrap();
        assert_eq!(
            (name.as_str(), datatype, shape),
            ("OUT", DataType::Fp32, vec![1, 4])
        );
        assert_eq!(read, region);
        assert!(r.is_done());
    }

    #[test]
    fn cut_and_lying_messages_are_errors() {
        let mut out = Out::default();
        out.u8(0).len(1).str("/f").len(1).u8(1).u8(0).len(0).len(1);
        out.tensor(
            "OUT",
            DataType::Fp32,
            &[4],
            0,
            &Region {
                path: "/f".into(),
                offset: 0,
                size: 16,
            },
        );
        let whole = out.0.clone();
        assert!(matches!(responses(&whole), Ok(Ok(_))));
        for cut in 0..whole.len() {
            assert!(responses(&whole[..cut]).is_err(), "cut at {cut}");
        }
        let mut lying = Out::default();
        lying.u8(0).u32(u32::MAX);
        assert!(
            responses(&lying.0).is_err(),
            "a huge count allocates nothing"
        );
        let mut past_end = whole;
        past_end.push(0);
        assert!(responses(&past_end).is_err());
    }
}
