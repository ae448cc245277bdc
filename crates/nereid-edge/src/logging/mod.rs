//! Triton's logging extension: the settings tritonserver takes as
//! `--log-*` flags and `/v2/logging` / `LogSettings` change at run time,
//! and the `tracing` subscriber that obeys them.
//!
//! Levels: `log_error`, `log_warning` and `log_info` switch tracing's
//! ERROR, WARN and INFO events each on its own, as Triton's switches do.
//! `log_verbose_level` 1 adds DEBUG from Nereid's own crates; 2 and more add
//! TRACE from them and DEBUG from every library (hyper, h2, tonic, ...).
//! `RUST_LOG`, when set, can enable further DEBUG/TRACE lines.

mod fields;
mod filter;
mod format;
mod settings;

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use anyhow::Context;
use nereid_core::Error;
use parking_lot::Mutex;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

pub use settings::{LogFormat, LogSettings, SettingValue};

/// The settings in force, shared by the subscriber (which reads them on
/// every event) and the frontends (which read and change them).
#[derive(Debug)]
struct Shared {
    info: AtomicBool,
    warning: AtomicBool,
    error: AtomicBool,
    verbose: AtomicU32,
    iso8601: AtomicBool,
    /// Fixed at startup: Triton does not let the network move the log.
    file: String,
    /// Serializes updates, so that a reader sees one update whole.
    update: Mutex<()>,
}

/// A handle on the log settings; clones share them.
#[derive(Debug, Clone)]
pub struct LogControl {
    shared: Arc<Shared>,
}

impl Default for LogControl {
    /// Triton's defaults, not connected to any subscriber (for servers
    /// started in-process by tests or embedders that log their own way).
    fn default() -> Self {
        LogControl::new(&LogSettings::default())
    }
}

impl LogControl {
    fn new(settings: &LogSettings) -> LogControl {
        LogControl {
            shared: Arc::new(Shared {
                info: AtomicBool::new(settings.log_info),
                warning: AtomicBool::new(settings.log_warning),
                error: AtomicBool::new(settings.log_error),
                verbose: AtomicU32::new(settings.log_verbose_level),
                iso8601: AtomicBool::new(settings.log_format == LogFormat::Iso8601),
                file: settings.log_file.clone(),
                update: Mutex::new(()),
            }),
        }
    }

    /// The settings now in force.
    pub fn settings(&self) -> LogSettings {
        let _whole = self.shared.update.lock();
        self.read()
    }

    fn read(&self) -> LogSettings {
        let s = &self.shared;
        LogSettings {
            log_file: s.file.clone(),
            log_info: s.info.load(Ordering::Relaxed),
            log_warning: s.warning.load(Ordering::Relaxed),
            log_error: s.error.load(Ordering::Relaxed),
            log_verbose_level: s.verbose.load(Ordering::Relaxed),
            log_format: match s.iso8601.load(Ordering::Relaxed) {
                true => LogFormat::Iso8601,
                false => LogFormat::Default,
            },
        }
    }

    /// Applies `changes` (setting name, value) all or none, and returns
    /// the settings then in force. Unknown names are ignored, as Triton
    /// ignores them; a known name with a wrong value fails the whole update.
    pub fn update<'a>(
        &self,
        changes: impl IntoIterator<Item = (&'a str, SettingValue)>,
    ) -> Result<LogSettings, Error> {
        let _whole = self.shared.update.lock();
        let mut next = self.read();
        for (name, value) in changes {
            next.apply(name, value)?;
        }
        let s = &self.shared;
        s.info.store(next.log_info, Ordering::Relaxed);
        s.warning.store(next.log_warning, Ordering::Relaxed);
        s.error.store(next.log_error, Ordering::Relaxed);
        let verbose_changed =
            s.verbose.swap(next.log_verbose_level, Ordering::Relaxed) != next.log_verbose_level;
        if verbose_changed {
            // The filter's level hint follows the verbose level; callsites
            // cache it, so they must ask again.
            tracing::callsite::rebuild_interest_cache();
        }
        s.iso8601
            .store(next.log_format == LogFormat::Iso8601, Ordering::Relaxed);
        Ok(next)
    }
}

/// Installs the process's `tracing` subscriber under `settings`, writing
/// to `settings.log_file` (appending) or, when it is empty, to stdout.
/// Fails when the log file cannot be opened, naming it.
pub fn install(settings: &LogSettings) -> anyhow::Result<LogControl> {
    install_to(settings, BoxMakeWriter::new(std::io::stdout))
}

/// As [`install`], writing to stderr when there is no log file: `nereid
/// batch` keeps stdout for its user and draws its progress on stderr.
pub fn install_stderr(settings: &LogSettings) -> anyhow::Result<LogControl> {
    install_to(settings, BoxMakeWriter::new(std::io::stderr))
}

fn install_to(settings: &LogSettings, standard: BoxMakeWriter) -> anyhow::Result<LogControl> {
    let control = LogControl::new(settings);
    let writer = match settings.log_file.as_str() {
        "" => standard,
        path => BoxMakeWriter::new(Arc::new(open_log_file(Path::new(path))?)),
    };
    let env = std::env::var_os(EnvFilter::DEFAULT_ENV)
        .map(|_| EnvFilter::try_from_default_env())
        .transpose()
        .context("RUST_LOG is not a valid filter")?;
    let gate = filter::Gate::new(Arc::clone(&control.shared), env);
    let layer = tracing_subscriber::fmt::layer()
        .fmt_fields(fields::PlainFields)
        .event_format(format::TritonFormat::new(Arc::clone(&control.shared)))
        .with_writer(writer)
        .with_ansi(false);
    tracing_subscriber::registry()
        .with(tracing_subscriber::Layer::with_filter(layer, gate))
        .try_init()
        .context("a tracing subscriber is already installed")?;
    Ok(control)
}

fn open_log_file(path: &Path) -> anyhow::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open --log-file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_core::ErrorKind;

    #[test]
    fn updates_apply_whole_or_not_at_all() {
        let control = LogControl::default();
        let err = control
            .update([
                ("log_info", SettingValue::Bool(false)),
                ("log_warning", SettingValue::Str("no".into())),
            ])
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.message().contains("'log_warning'"), "{}", err.message());
        assert!(
            control.settings().log_info,
            "a failed update changed nothing"
        );
        let s = control
            .update([
                ("log_info", SettingValue::Bool(false)),
                ("log_verbose_level", SettingValue::Uint(2)),
                ("log_format", SettingValue::Str("ISO8601".into())),
                ("no_such_setting", SettingValue::Uint(1)),
            ])
            .unwrap();
        assert!(!s.log_info);
        assert_eq!(s.log_verbose_level, 2);
        assert_eq!(s.log_format, LogFormat::Iso8601);
        assert_eq!(control.settings(), s);
    }

    #[test]
    fn the_log_file_cannot_move_over_the_network() {
        let control = LogControl::default();
        let err = control
            .update([("log_file", SettingValue::Str("/tmp/x".into()))])
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
    }

    #[test]
    fn an_unwritable_log_file_is_named() {
        let err = open_log_file(Path::new("/nonexistent/dir/nereid.log")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/dir/nereid.log"));
    }
}
