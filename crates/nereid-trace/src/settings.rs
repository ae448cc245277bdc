//! Trace settings as Triton's trace extension reads and changes them: the
//! values, which of them a model or the global setting names itself, and
//! the changes a client asks for, parsed from JSON (HTTP) or string lists
//! (gRPC) with Triton's words for every mistake.

use nereid_core::Error;
use nereid_core::trace::TraceLevel;
use serde_json::Value;

/// The settings one sampler works with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Values {
    pub level: TraceLevel,
    /// Every `rate`-th request is traced.
    pub rate: u32,
    /// Traces still to take; -1 is no limit.
    pub count: i32,
    /// Traces per indexed file; 0 writes them all to the trace file.
    pub log_frequency: u32,
}

impl Default for Values {
    /// tritonserver's defaults.
    fn default() -> Self {
        Values {
            level: TraceLevel::default(),
            rate: 1000,
            count: -1,
            log_frequency: 0,
        }
    }
}

/// Which values a setting names itself rather than taking from its
/// fallback (the global setting for a model, the startup flags for the
/// global setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Specified {
    pub level: bool,
    pub rate: bool,
    pub count: bool,
    pub log_frequency: bool,
}

impl Specified {
    pub fn all(self) -> bool {
        self.level && self.rate && self.count && self.log_frequency
    }

    pub fn none(self) -> bool {
        !(self.level || self.rate || self.count || self.log_frequency)
    }
}

/// One setting's change: `None` leaves it, `Some(None)` clears it (back
/// to the fallback), `Some(Some(v))` sets it.
pub type Change<T> = Option<Option<T>>;

/// The changes one request asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Update {
    pub level: Change<TraceLevel>,
    pub rate: Change<u32>,
    pub count: Change<i32>,
    pub log_frequency: Change<u32>,
}

impl Update {
    /// The new values and which are specified, from the setting's current
    /// `values` and `specified` (`None` for a model without a setting of
    /// its own) and the `fallback` values.
    pub fn apply(
        &self,
        current: Option<(Values, Specified)>,
        fallback: Values,
    ) -> (Values, Specified) {
        let (now, was) = current.unwrap_or((fallback, Specified::default()));
        fn pick<T: Copy>(change: Change<T>, was: bool, now: T, fallback: T) -> (T, bool) {
            match change {
                Some(Some(v)) => (v, true),
                Some(None) => (fallback, false),
                None if was => (now, true),
                None => (fallback, false),
            }
        }
        let (level, level_specified) = pick(self.level, was.level, now.level, fallback.level);
        let (rate, rate_specified) = pick(self.rate, was.rate, now.rate, fallback.rate);
        let (count, count_specified) = pick(self.count, was.count, now.count, fallback.count);
        let (log_frequency, log_frequency_specified) = pick(
            self.log_frequency,
            was.log_frequency,
            now.log_frequency,
            fallback.log_frequency,
        );
        (
            Values {
                level,
                rate,
                count,
                log_frequency,
            },
            Specified {
                level: level_specified,
                rate: rate_specified,
                count: count_specified,
                log_frequency: log_frequency_specified,
            },
        )
    }
}

/// Triton's answer to any change of `trace_file` over the network.
fn file_refused() -> Error {
    Error::unsupported("trace file location can not be updated through network protocol")
}

/// The change a JSON body (`POST .../trace/setting`) asks for. A body that
/// is not an object, unknown keys and unknown level names are ignored, as
/// Triton ignores them.
pub fn update_from_json(body: &[u8]) -> Result<Update, Error> {
    let json: Value = serde_json::from_slice(body).map_err(|e| {
        Error::invalid_argument(format!("failed to parse the request JSON buffer: {e}"))
    })?;
    let mut update = Update::default();
    let Value::Object(map) = json else {
        return Ok(update);
    };
    for (key, value) in &map {
        match key.as_str() {
            "trace_file" => return Err(file_refused()),
            "trace_level" => {
                update.level = match value {
                    Value::Null => Some(None),
                    Value::Array(items) => {
                        let names = items.iter().map(json_str).collect::<Result<Vec<_>, _>>()?;
                        Some(Some(parse_level(&names)?))
                    }
                    _ => {
                        return Err(Error::invalid_argument(
                            "attempt to access JSON non-array as array",
                        ));
                    }
                }
            }
            "trace_rate" => update.rate = json_number(value, key, parse_unsigned)?,
            "trace_count" => update.count = json_number(value, key, parse_count)?,
            "log_frequency" => update.log_frequency = json_number(value, key, parse_unsigned)?,
            _ => {}
        }
    }
    Ok(update)
}

fn json_str(value: &Value) -> Result<&str, Error> {
    value
        .as_str()
        .ok_or_else(|| Error::invalid_argument("attempt to access JSON non-string as string"))
}

fn json_number<T>(
    value: &Value,
    key: &str,
    parse: fn(&str, &str) -> Result<T, Error>,
) -> Result<Change<T>, Error> {
    match value {
        Value::Null => Ok(Some(None)),
        value => Ok(Some(Some(parse(key, json_str(value)?)?))),
    }
}

/// The change a gRPC `TraceSettingRequest` asks for: each setting a list
/// of strings, an empty list clearing it.
pub fn update_from_lists<'a>(
    settings: impl IntoIterator<Item = (&'a str, &'a [String])>,
) -> Result<Update, Error> {
    let mut update = Update::default();
    for (key, values) in settings {
        let first = values.first().map(String::as_str);
        match key {
            "trace_file" => return Err(file_refused()),
            "trace_level" => {
                update.level = match values.is_empty() {
                    true => Some(None),
                    false => {
                        let names: Vec<&str> = values.iter().map(String::as_str).collect();
                        Some(Some(parse_level(&names)?))
                    }
                }
            }
            "trace_rate" => update.rate = list_number(first, key, parse_unsigned)?,
            "trace_count" => update.count = list_number(first, key, parse_count)?,
            "log_frequency" => update.log_frequency = list_number(first, key, parse_unsigned)?,
            _ => {}
        }
    }
    Ok(update)
}

fn list_number<T>(
    first: Option<&str>,
    key: &str,
    parse: fn(&str, &str) -> Result<T, Error>,
) -> Result<Change<T>, Error> {
    match first {
        None => Ok(Some(None)),
        Some(text) => Ok(Some(Some(parse(key, text)?))),
    }
}

/// Level names as Triton reads them: `OFF` alone, or any of `TIMESTAMPS`
/// and `TENSORS`; other names add nothing.
fn parse_level(names: &[&str]) -> Result<TraceLevel, Error> {
    let mut level = TraceLevel::default();
    for name in names {
        match *name {
            "OFF" if names.len() == 1 => {}
            "OFF" => {
                return Err(Error::invalid_argument(
                    "Expect only one trace level 'OFF' is specified",
                ));
            }
            "TIMESTAMPS" => level.timestamps = true,
            "TENSORS" => level.tensors = true,
            _ => {}
        }
    }
    Ok(level)
}

/// An unsigned 32-bit setting, read as C's `strtoul` reads it (a leading
/// minus wraps around), which is what Triton answers with.
fn parse_unsigned(key: &str, text: &str) -> Result<u32, Error> {
    let unparsable = || Error::invalid_argument(format!("Unable to parse '{key}', got: {text}"));
    let trimmed = text.trim_start();
    let (negative, digits) = match trimmed.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, trimmed.strip_prefix('+').unwrap_or(trimmed)),
    };
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    let value: u64 = digits[..end].parse().map_err(|_| unparsable())?;
    let value = u32::try_from(value).map_err(|_| unparsable())?;
    Ok(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

fn parse_count(key: &str, text: &str) -> Result<i32, Error> {
    let count: i32 = text
        .trim()
        .parse()
        .map_err(|_| Error::invalid_argument(format!("Unable to parse '{key}', got: {text}")))?;
    if count < -1 {
        return Err(Error::invalid_argument(format!(
            "Unable to parse '{key}'. Expecting value >= -1, got:{text}"
        )));
    }
    Ok(count)
}

/// Level names for an answer: `["OFF"]`, or those that are on.
pub fn level_names(level: TraceLevel) -> Vec<String> {
    if level.is_off() {
        return vec!["OFF".into()];
    }
    let mut names = Vec::new();
    if level.timestamps {
        names.push("TIMESTAMPS".into());
    }
    if level.tensors {
        names.push("TENSORS".into());
    }
    names
}

/// A `--trace-config level=` value.
pub fn parse_level_flag(name: &str) -> Option<TraceLevel> {
    match name.to_ascii_uppercase().as_str() {
        "OFF" => Some(TraceLevel::default()),
        "TIMESTAMPS" => Some(TraceLevel {
            timestamps: true,
            tensors: false,
        }),
        "TENSORS" => Some(TraceLevel {
            timestamps: false,
            tensors: true,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_core::ErrorKind;

    fn message(result: Result<Update, Error>) -> String {
        result.unwrap_err().message().to_string()
    }

    #[test]
    fn json_bodies_as_triton_reads_them() {
        let update = update_from_json(
            br#"{"trace_level":["TIMESTAMPS","TENSORS"],"trace_rate":"5","trace_count":null,"x":1}"#,
        )
        .unwrap();
        assert_eq!(
            update.level,
            Some(Some(TraceLevel {
                timestamps: true,
                tensors: true
            }))
        );
        assert_eq!(update.rate, Some(Some(5)));
        assert_eq!(update.count, Some(None));
        assert_eq!(update.log_frequency, None);
        assert_eq!(update_from_json(b"[1]").unwrap(), Update::default());
        assert_eq!(
            update_from_json(br#"{"trace_level":["BOGUS"]}"#)
                .unwrap()
                .level,
            Some(Some(TraceLevel::default()))
        );
    }

    #[test]
    fn json_mistakes_get_tritons_words() {
        assert_eq!(
            message(update_from_json(br#"{"trace_level":"TIMESTAMPS"}"#)),
            "attempt to access JSON non-array as array"
        );
        assert_eq!(
            message(update_from_json(br#"{"trace_rate":1}"#)),
            "attempt to access JSON non-string as string"
        );
        assert_eq!(
            message(update_from_json(br#"{"trace_level":[1]}"#)),
            "attempt to access JSON non-string as string"
        );
        assert_eq!(
            message(update_from_json(br#"{"trace_rate":"x"}"#)),
            "Unable to parse 'trace_rate', got: x"
        );
        assert_eq!(
            message(update_from_json(br#"{"trace_count":"-5"}"#)),
            "Unable to parse 'trace_count'. Expecting value >= -1, got:-5"
        );
        assert_eq!(
            message(update_from_json(br#"{"trace_level":["OFF","TIMESTAMPS"]}"#)),
            "Expect only one trace level 'OFF' is specified"
        );
        let file = update_from_json(br#"{"trace_file":null}"#).unwrap_err();
        assert_eq!(file.kind(), ErrorKind::Unsupported);
        assert!(
            message(update_from_json(b"{")).starts_with("failed to parse the request JSON buffer")
        );
    }

    #[test]
    fn grpc_lists_clear_when_empty() {
        let rate = vec!["7".to_string()];
        let empty: Vec<String> = Vec::new();
        let update =
            update_from_lists([("trace_rate", rate.as_slice()), ("trace_count", &empty)]).unwrap();
        assert_eq!(update.rate, Some(Some(7)));
        assert_eq!(update.count, Some(None));
        let bad = vec!["y".to_string()];
        assert_eq!(
            message(update_from_lists([("trace_rate", bad.as_slice())])),
            "Unable to parse 'trace_rate', got: y"
        );
    }

    #[test]
    fn unsigned_settings_wrap_as_strtoul() {
        assert_eq!(parse_unsigned("r", "-1").unwrap(), u32::MAX);
        assert_eq!(parse_unsigned("r", "12abc").unwrap(), 12);
        assert!(parse_unsigned("r", "abc").is_err());
        assert!(parse_unsigned("r", "99999999999").is_err());
    }

    #[test]
    fn updates_keep_specified_values_and_fall_back_for_the_rest() {
        let fallback = Values {
            rate: 10,
            ..Values::default()
        };
        let now = Values {
            rate: 3,
            count: 4,
            ..Values::default()
        };
        let was = Specified {
            count: true,
            ..Specified::default()
        };
        let update = Update {
            log_frequency: Some(Some(2)),
            ..Update::default()
        };
        let (values, specified) = update.apply(Some((now, was)), fallback);
        // rate was not specified: it follows the fallback.
        assert_eq!(values.rate, 10);
        assert_eq!(values.count, 4);
        assert_eq!(values.log_frequency, 2);
        assert!(specified.count && specified.log_frequency && !specified.rate);
        let clear = Update {
            count: Some(None),
            log_frequency: Some(None),
            ..Update::default()
        };
        let (values, specified) = clear.apply(Some((values, specified)), fallback);
        assert!(specified.none());
        assert_eq!(values, fallback);
    }
}
