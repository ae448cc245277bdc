//! Log lines laid out as tritonserver writes them, so that what parses a
//! Triton log parses Nereid's:
//!
//! ```text
//! I1203 18:17:07.927805 24728 server.rs:120] "started HTTP endpoint at 0.0.0.0:8000"
//! 2026-12-03T18:17:07Z I 24728 server.rs:120] "started HTTP endpoint at 0.0.0.0:8000"
//! ```
//!
//! The level letter is E, W or I (Triton's verbose lines are I too); the
//! time is UTC; the message, its fields and the spans it runs in are one
//! JSON string, as Triton 2.51 quotes its messages.

use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use super::Shared;

/// The event formatter; reads `log_format` on every line.
#[derive(Debug)]
pub struct TritonFormat {
    shared: Arc<Shared>,
    pid: u32,
}

impl TritonFormat {
    pub fn new(shared: Arc<Shared>) -> TritonFormat {
        TritonFormat {
            shared,
            pid: std::process::id(),
        }
    }
}

impl<S, N> FormatEvent<S, N> for TritonFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let letter = match *meta.level() {
            Level::ERROR => 'E',
            Level::WARN => 'W',
            _ => 'I',
        };
        let now = Utc::now();
        if self.shared.iso8601.load(Ordering::Relaxed) {
            write!(writer, "{} {letter} {} ", now.iso8601(), self.pid)?;
        } else {
            write!(writer, "{letter}{} {} ", now.glog(), self.pid)?;
        }
        let file = meta.file().map(base_name).unwrap_or(meta.target());
        write!(writer, "{file}:{}] ", meta.line().unwrap_or(0))?;
        let mut text = String::new();
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let _ = write!(text, "{}", span.name());
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    let _ = write!(text, "{{{fields}}}");
                }
                text.push_str(": ");
            }
        }
        ctx.format_fields(Writer::new(&mut text), event)?;
        let quoted = serde_json::to_string(&text).map_err(|_| fmt::Error)?;
        writeln!(writer, "{quoted}")
    }
}

fn base_name(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

/// A UTC wall-clock time broken into its calendar fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Utc {
    year: i64,
    month: u32,
    day: u32,
    hour: u64,
    minute: u64,
    second: u64,
    micros: u32,
}

impl Utc {
    fn now() -> Utc {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Utc::from_unix(since.as_secs(), since.subsec_micros())
    }

    fn from_unix(secs: u64, micros: u32) -> Utc {
        let days = i64::try_from(secs / 86_400).unwrap_or(0);
        let (year, month, day) = civil_from_days(days);
        let rest = secs % 86_400;
        Utc {
            year,
            month,
            day,
            hour: rest / 3600,
            minute: rest / 60 % 60,
            second: rest % 60,
            micros,
        }
    }

    /// `MMDD HH:MM:SS.ffffff`, glog's layout (Triton's `default`).
    fn glog(&self) -> String {
        format!(
            "{:02}{:02} {:02}:{:02}:{:02}.{:06}",
            self.month, self.day, self.hour, self.minute, self.second, self.micros
        )
    }

    /// `YYYY-MM-DDTHH:MM:SSZ` (Triton's `ISO8601`).
    fn iso8601(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// Year, month and day of a count of days since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_laid_out_as_triton_does() {
        // 2026-12-03T18:17:07.927805Z
        let t = Utc::from_unix(1_796_321_827, 927_805);
        assert_eq!(t.glog(), "1203 18:17:07.927805");
        assert_eq!(t.iso8601(), "2026-12-03T18:17:07Z");
        assert_eq!(Utc::from_unix(0, 0).iso8601(), "1970-01-01T00:00:00Z");
        assert_eq!(
            Utc::from_unix(951_782_400, 0).iso8601(),
            "2000-02-29T00:00:00Z"
        );
    }

    #[test]
    fn file_names_lose_their_folders() {
        assert_eq!(base_name("crates/nereid-server/src/server.rs"), "server.rs");
        assert_eq!(base_name("main.rs"), "main.rs");
    }
}
