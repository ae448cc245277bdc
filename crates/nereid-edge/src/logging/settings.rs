//! The log settings as Triton names and types them, and the checks an
//! update over HTTP or gRPC goes through.

use std::fmt;

use nereid_core::Error;
use serde::Serialize;

/// `log_format`: Triton's two line layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
pub enum LogFormat {
    /// `I1203 18:17:07.927805 24728 file.rs:42] "message"`
    #[default]
    #[serde(rename = "default")]
    #[value(name = "default")]
    Default,
    /// `2026-12-03T18:17:07Z I 24728 file.rs:42] "message"`
    #[serde(rename = "ISO8601")]
    #[value(name = "ISO8601")]
    Iso8601,
}

/// Every setting, in the order and with the JSON types Triton answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogSettings {
    /// Empty: standard output.
    pub log_file: String,
    pub log_info: bool,
    pub log_warning: bool,
    pub log_error: bool,
    pub log_verbose_level: u32,
    pub log_format: LogFormat,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            log_file: String::new(),
            log_info: true,
            log_warning: true,
            log_error: true,
            log_verbose_level: 0,
            log_format: LogFormat::Default,
        }
    }
}

/// A value a client sent for one setting, whatever its wire.
#[derive(Debug, Clone, PartialEq)]
pub enum SettingValue {
    Bool(bool),
    Uint(u64),
    Str(String),
    /// Anything else (a negative or fractional number, an array, a gRPC
    /// value with no field set), as the client wrote it.
    Other(String),
}

impl fmt::Display for SettingValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingValue::Bool(b) => write!(f, "{b}"),
            SettingValue::Uint(n) => write!(f, "{n}"),
            SettingValue::Str(s) => write!(f, "{s:?}"),
            SettingValue::Other(s) => f.write_str(s),
        }
    }
}

impl LogFormat {
    /// The name Triton answers and takes.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Default => "default",
            LogFormat::Iso8601 => "ISO8601",
        }
    }
}

impl LogSettings {
    /// Sets `name` to `value`, checking its type; unknown names are
    /// ignored, as Triton ignores them.
    pub fn apply(&mut self, name: &str, value: SettingValue) -> Result<(), Error> {
        match name {
            // Triton's words: letting a network client pick a file to
            // write is refused, whatever the value.
            "log_file" => {
                return Err(Error::unsupported(
                    "log file location can not be updated through network protocol",
                ));
            }
            "log_info" => self.log_info = boolean(name, value)?,
            "log_warning" => self.log_warning = boolean(name, value)?,
            "log_error" => self.log_error = boolean(name, value)?,
            "log_verbose_level" => self.log_verbose_level = level(value)?,
            "log_format" => self.log_format = format(value)?,
            other => tracing::debug!(setting = other, "unknown log setting ignored"),
        }
        Ok(())
    }
}

fn boolean(name: &str, value: SettingValue) -> Result<bool, Error> {
    match value {
        SettingValue::Bool(b) => Ok(b),
        other => Err(Error::invalid_argument(format!(
            "expect boolean for '{name}', got {other}"
        ))),
    }
}

fn level(value: SettingValue) -> Result<u32, Error> {
    match value {
        SettingValue::Uint(n) => u32::try_from(n).map_err(|_| {
            Error::invalid_argument(format!(
                "expect unsigned 32-bit integer for 'log_verbose_level', got {n}, more than {}",
                u32::MAX
            ))
        }),
        other => Err(Error::invalid_argument(format!(
            "expect unsigned integer for 'log_verbose_level', got {other}"
        ))),
    }
}

fn format(value: SettingValue) -> Result<LogFormat, Error> {
    match value {
        SettingValue::Str(s) => match s.as_str() {
            "default" => Ok(LogFormat::Default),
            "ISO8601" => Ok(LogFormat::Iso8601),
            // Triton's words, and the choices.
            _ => Err(Error::invalid_argument(format!(
                "invalid argument for log_format, got: {s} (expected \"default\" or \"ISO8601\")"
            ))),
        },
        other => Err(Error::invalid_argument(format!(
            "expect string for 'log_format', got {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_core::ErrorKind;

    #[test]
    fn wrong_types_name_the_setting_and_the_value() {
        let mut s = LogSettings::default();
        let cases = [
            ("log_info", SettingValue::Str("false".into()), "\"false\""),
            ("log_error", SettingValue::Uint(1), "got 1"),
            ("log_verbose_level", SettingValue::Other("-1".into()), "-1"),
            ("log_verbose_level", SettingValue::Bool(true), "got true"),
            (
                "log_verbose_level",
                SettingValue::Uint(1 << 32),
                "4294967296",
            ),
            ("log_format", SettingValue::Str("xml".into()), "got: xml"),
            ("log_format", SettingValue::Uint(1), "got 1"),
        ];
        for (name, value, shown) in cases {
            let err = s.apply(name, value).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidArgument);
            assert!(err.message().contains(name), "{}", err.message());
            assert!(err.message().contains(shown), "{}", err.message());
        }
        assert_eq!(s, LogSettings::default());
    }

    #[test]
    fn settings_serialize_as_triton_answers() {
        let json = serde_json::to_string(&LogSettings::default()).unwrap();
        assert_eq!(
            json,
            r#"{"log_file":"","log_info":true,"log_warning":true,"log_error":true,"log_verbose_level":0,"log_format":"default"}"#
        );
    }
}
