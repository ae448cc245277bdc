//! A request's routing facts: which version it asks for (a number, a
//! label, or whatever the model's policy and traffic settings choose), the
//! sequence it belongs to, its sticky key, priority and timeout. A
//! frontend types them once where the request enters; nothing downstream
//! reads them out of `parameters`.

use std::fmt;
use std::time::Duration;

/// The version a request names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum ModelVersion {
    /// None: the model's traffic settings or version policy choose.
    #[default]
    Latest,
    /// A version number (0 is a number, and simply never found).
    Number(i64),
    /// A version label (`stable`), resolved by the engine when the request
    /// runs, so that every way in can name one.
    Label(String),
}

impl ModelVersion {
    /// The version `text` names where a version may be a number or a
    /// label: empty is [`ModelVersion::Latest`], digits a number, a
    /// [label-shaped](is_label) word a label; `None` for anything else.
    pub fn parse(text: &str) -> Option<ModelVersion> {
        if text.is_empty() {
            return Some(ModelVersion::Latest);
        }
        if let Ok(number) = text.parse::<i64>() {
            return Some(ModelVersion::Number(number));
        }
        is_label(text).then(|| ModelVersion::Label(text.to_string()))
    }

    /// The number, when the request names one.
    pub fn number(&self) -> Option<i64> {
        match self {
            ModelVersion::Number(v) => Some(*v),
            ModelVersion::Latest | ModelVersion::Label(_) => None,
        }
    }
}

impl From<Option<i64>> for ModelVersion {
    fn from(version: Option<i64>) -> Self {
        version.map_or(ModelVersion::Latest, ModelVersion::Number)
    }
}

impl fmt::Display for ModelVersion {
    /// As a wire `model_version` spells it: empty for the latest.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelVersion::Latest => Ok(()),
            ModelVersion::Number(v) => write!(f, "{v}"),
            ModelVersion::Label(label) => f.write_str(label),
        }
    }
}

/// Triton's words for a version string that is no number (its `stol`
/// failed), which a word a model has no label for gets too.
pub fn not_a_version_number(version: &str) -> crate::Error {
    crate::Error::invalid_argument(format!(
        "failed to get model version from specified version string '{version}' (details: stol), version should be an integral value > 0"
    ))
}

/// Whether `name` can be a version label: it can never be read as a
/// version number, and it fits in a URL path segment unescaped.
pub fn is_label(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= 64
        && bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// A sequence's correlation ID, as the request gave it. `Int(0)` and an
/// empty string mean "no sequence", as in Triton.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CorrelationId {
    Int(u64),
    Str(String),
}

impl Default for CorrelationId {
    fn default() -> Self {
        CorrelationId::Int(0)
    }
}

impl CorrelationId {
    /// Whether the ID names no sequence.
    pub fn is_none(&self) -> bool {
        match self {
            CorrelationId::Int(id) => *id == 0,
            CorrelationId::Str(id) => id.is_empty(),
        }
    }
}

impl fmt::Display for CorrelationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CorrelationId::Int(id) => write!(f, "{id}"),
            CorrelationId::Str(id) => f.write_str(id),
        }
    }
}

/// A request's place in a sequence: Triton's `sequence_id`,
/// `sequence_start` and `sequence_end`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Sequence {
    pub id: CorrelationId,
    pub start: bool,
    pub end: bool,
}

impl Sequence {
    /// Triton's request flags: 1 for the start, 2 for the end.
    pub fn flags(&self) -> u32 {
        u32::from(self.start) | (u32::from(self.end) << 1)
    }
}

/// The routing facts of one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Routing {
    pub version: ModelVersion,
    pub sequence: Sequence,
    /// The key a sticky split keeps on one version: the `routing_key`
    /// parameter, or the `nereid-routing-key` header or metadata.
    pub routing_key: Option<String>,
    /// Triton's `priority`: 0 is the model's default level.
    pub priority: u64,
    /// Triton's `timeout`, from microseconds.
    pub timeout: Option<Duration>,
}

/// The header (and gRPC metadata key) that gives a request its sticky key.
pub const ROUTING_HEADER: &str = "nereid-routing-key";

/// The request parameter that gives a request its sticky key.
pub const ROUTING_KEY_PARAMETER: &str = "routing_key";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_as_numbers_labels_or_nothing() {
        assert_eq!(ModelVersion::parse(""), Some(ModelVersion::Latest));
        assert_eq!(ModelVersion::parse("3"), Some(ModelVersion::Number(3)));
        assert_eq!(
            ModelVersion::parse("stable"),
            Some(ModelVersion::Label("stable".into()))
        );
        assert_eq!(ModelVersion::parse("-1"), Some(ModelVersion::Number(-1)));
        assert_eq!(ModelVersion::parse("1x"), None);
        assert_eq!(ModelVersion::parse("a b"), None);
        assert_eq!(ModelVersion::Label("canary".into()).to_string(), "canary");
        assert_eq!(ModelVersion::Latest.to_string(), "");
    }

    #[test]
    fn labels_never_read_as_numbers() {
        assert!(is_label("stable"));
        assert!(is_label("v1.2-rc_3"));
        assert!(!is_label("1"));
        assert!(!is_label("1abc"));
        assert!(!is_label(""));
        assert!(!is_label(&"a".repeat(65)));
    }

    #[test]
    fn flags_and_empty_ids() {
        let s = Sequence {
            id: CorrelationId::Int(7),
            start: true,
            end: true,
        };
        assert_eq!(s.flags(), 3);
        assert!(CorrelationId::default().is_none());
        assert!(CorrelationId::Str(String::new()).is_none());
        assert!(!CorrelationId::Str("a".into()).is_none());
    }
}
