//! What a GGUF file says about itself, read without loading it: the
//! header and the metadata (architecture, context length, the chat template
//! and special tokens). Reading it first lets a file that is not GGUF, is
//! cut short, or names no architecture be refused with a clear reason
//! before the runtime sees it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

/// Metadata values are length-prefixed; none of the ones read here is
/// larger than this (a tokenizer's token list is read element by element).
const MAX_STRING: u64 = 64 << 20;

/// Why a file is not a GGUF model this backend can read.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a GGUF file (it does not begin with 'GGUF')")]
    NotGguf { path: String },
    #[error("{path} is GGUF version {version}; versions 2 and 3 are supported")]
    Version { path: String, version: u32 },
    #[error("{path} is cut short or malformed: {what}")]
    Malformed { path: String, what: String },
    #[error("{path} names no architecture (general.architecture)")]
    NoArchitecture { path: String },
}

/// A metadata value, as far as this backend needs one.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i128),
    Float(f64),
    Bool(bool),
    Text(String),
    /// An array of strings (only `tokenizer.ggml.tokens` is kept).
    Texts(Vec<String>),
    /// Any other array, skipped.
    Array,
}

/// The metadata of one GGUF file.
#[derive(Debug, Clone)]
pub struct Gguf {
    pub version: u32,
    pub tensors: u64,
    metadata: HashMap<String, Value>,
}

impl Gguf {
    pub fn read(path: &Path) -> Result<Gguf, GgufError> {
        let shown = path.display().to_string();
        let file = File::open(path).map_err(|source| GgufError::Io {
            path: shown.clone(),
            source,
        })?;
        let mut reader = Reader {
            input: BufReader::with_capacity(1 << 20, file),
            path: shown.clone(),
        };
        let gguf = reader.gguf()?;
        match gguf.architecture() {
            Some(_) => Ok(gguf),
            None => Err(GgufError::NoArchitecture { path: shown }),
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    pub fn text(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    pub fn integer(&self, key: &str) -> Option<i128> {
        match self.get(key)? {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// `general.architecture` (`llama`, `qwen2`, ...).
    pub fn architecture(&self) -> Option<&str> {
        self.text("general.architecture")
    }

    /// The context the model was trained with (`<arch>.context_length`).
    pub fn context_length(&self) -> Option<usize> {
        let key = format!("{}.context_length", self.architecture()?);
        usize::try_from(self.integer(&key)?).ok()
    }

    /// The Jinja chat template the file carries.
    pub fn chat_template(&self) -> Option<&str> {
        self.text("tokenizer.chat_template")
    }

    /// The text of a special token named by `tokenizer.ggml.<which>_token_id`.
    pub fn special_token(&self, which: &str) -> Option<&str> {
        let id = self.integer(&format!("tokenizer.ggml.{which}_token_id"))?;
        match self.get("tokenizer.ggml.tokens")? {
            Value::Texts(tokens) => tokens.get(usize::try_from(id).ok()?).map(String::as_str),
            _ => None,
        }
    }
}

struct Reader<R> {
    input: R,
    path: String,
}

impl<R: Read> Reader<R> {
    fn gguf(&mut self) -> Result<Gguf, GgufError> {
        let mut magic = [0u8; 4];
        self.input
            .read_exact(&mut magic)
            .map_err(|_| GgufError::NotGguf {
                path: self.path.clone(),
            })?;
        if &magic != b"GGUF" {
            return Err(GgufError::NotGguf {
                path: self.path.clone(),
            });
        }
        let version = self.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::Version {
                path: self.path.clone(),
                version,
            });
        }
        let tensors = self.u64("the tensor count")?;
        let entries = self.u64("the metadata count")?;
        let mut metadata = HashMap::new();
        for _ in 0..entries {
            let key = self.string("a metadata key")?;
            let kind = self.u32("a value type")?;
            let value = self.value(kind, &key)?;
            metadata.insert(key, value);
        }
        Ok(Gguf {
            version,
            tensors,
            metadata,
        })
    }

    fn malformed(&self, what: impl Into<String>) -> GgufError {
        GgufError::Malformed {
            path: self.path.clone(),
            what: what.into(),
        }
    }

    fn bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let mut buffer = [0u8; N];
        self.input
            .read_exact(&mut buffer)
            .map_err(|_| self.malformed(format!("it ends inside {what}")))?;
        Ok(buffer)
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.bytes(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.bytes(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        if len > MAX_STRING {
            return Err(self.malformed(format!("{what} claims {len} bytes")));
        }
        let mut buffer = vec![0u8; len as usize];
        self.input
            .read_exact(&mut buffer)
            .map_err(|_| self.malformed(format!("it ends inside {what}")))?;
        Ok(String::from_utf8_lossy(&buffer).into_owned())
    }

    fn value(&mut self, kind: u32, key: &str) -> Result<Value, GgufError> {
        let what = format!("the value of {key}");
        Ok(match kind {
            0 => Value::Int(self.bytes::<1>(&what)?[0].into()),
            1 => Value::Int(i8::from_le_bytes(self.bytes(&what)?).into()),
            2 => Value::Int(u16::from_le_bytes(self.bytes(&what)?).into()),
            3 => Value::Int(i16::from_le_bytes(self.bytes(&what)?).into()),
            4 => Value::Int(u32::from_le_bytes(self.bytes(&what)?).into()),
            5 => Value::Int(i32::from_le_bytes(self.bytes(&what)?).into()),
            6 => Value::Float(f32::from_le_bytes(self.bytes(&what)?).into()),
            7 => Value::Bool(self.bytes::<1>(&what)?[0] != 0),
            8 => Value::Text(self.string(&what)?),
            9 => self.array(key)?,
            10 => Value::Int(u64::from_le_bytes(self.bytes(&what)?).into()),
            11 => Value::Int(i64::from_le_bytes(self.bytes(&what)?).into()),
            12 => Value::Float(f64::from_le_bytes(self.bytes(&what)?)),
            other => return Err(self.malformed(format!("{key} has unknown value type {other}"))),
        })
    }

    fn array(&mut self, key: &str) -> Result<Value, GgufError> {
        let kind = self.u32("an array's type")?;
        let count = self.u64("an array's length")?;
        if kind == 9 {
            return Err(self.malformed(format!("{key} is an array of arrays")));
        }
        let keep = kind == 8 && key == "tokenizer.ggml.tokens";
        let mut texts = Vec::new();
        for _ in 0..count {
            match self.value(kind, key)? {
                Value::Text(text) if keep => texts.push(text),
                _ => {}
            }
        }
        Ok(if keep {
            Value::Texts(texts)
        } else {
            Value::Array
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A GGUF header with `entries`, as (key, type, encoded value).
    pub(crate) fn gguf_bytes(entries: &[(&str, u32, Vec<u8>)]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend(0u64.to_le_bytes());
        out.extend((entries.len() as u64).to_le_bytes());
        for (key, kind, value) in entries {
            out.extend(text(key));
            out.extend(kind.to_le_bytes());
            out.extend(value);
        }
        out
    }

    fn text(s: &str) -> Vec<u8> {
        let mut out = (s.len() as u64).to_le_bytes().to_vec();
        out.extend(s.as_bytes());
        out
    }

    fn write(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(bytes).unwrap();
        file
    }

    fn tokens(list: &[&str]) -> Vec<u8> {
        let mut out = 8u32.to_le_bytes().to_vec();
        out.extend((list.len() as u64).to_le_bytes());
        for t in list {
            out.extend(text(t));
        }
        out
    }

    #[test]
    fn metadata_is_read_with_the_architecture_and_special_tokens() {
        let file = write(&gguf_bytes(&[
            ("general.architecture", 8, text("llama")),
            ("llama.context_length", 4, 8192u32.to_le_bytes().to_vec()),
            ("tokenizer.chat_template", 8, text("{{ messages }}")),
            ("tokenizer.ggml.tokens", 9, tokens(&["<s>", "</s>", "a"])),
            (
                "tokenizer.ggml.eos_token_id",
                4,
                1u32.to_le_bytes().to_vec(),
            ),
        ]));
        let gguf = Gguf::read(file.path()).unwrap();
        assert_eq!(gguf.architecture(), Some("llama"));
        assert_eq!(gguf.context_length(), Some(8192));
        assert_eq!(gguf.chat_template(), Some("{{ messages }}"));
        assert_eq!(gguf.special_token("eos"), Some("</s>"));
        assert_eq!(gguf.special_token("bos"), None);
    }

    #[test]
    fn a_file_that_is_not_gguf_or_is_cut_short_is_refused_with_why() {
        let file = write(b"PK\x03\x04 a zip file");
        let error = Gguf::read(file.path()).unwrap_err().to_string();
        assert!(error.contains("is not a GGUF file"), "{error}");
        let whole = gguf_bytes(&[("general.architecture", 8, text("llama"))]);
        let file = write(&whole[..whole.len() - 3]);
        let error = Gguf::read(file.path()).unwrap_err().to_string();
        assert!(
            error.contains(
                "cut short or malformed: it ends inside the value of general.architecture"
            ),
            "{error}"
        );
        let file = write(&gguf_bytes(&[("general.name", 8, text("x"))]));
        let error = Gguf::read(file.path()).unwrap_err().to_string();
        assert!(error.contains("names no architecture"), "{error}");
    }
}
