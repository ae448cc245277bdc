//! Which events are written, read from the live settings on every event:
//! Triton's switches are independent (errors off, info on is allowed), so
//! no single tracing level could express them.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tracing::subscriber::Interest;
use tracing::{Level, Metadata};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Filter};

use super::Shared;

/// The per-layer filter of the log output.
#[derive(Debug)]
pub struct Gate {
    shared: Arc<Shared>,
    /// `RUST_LOG`, which may enable DEBUG and TRACE lines besides.
    env: Option<EnvFilter>,
}

impl Gate {
    pub fn new(shared: Arc<Shared>, env: Option<EnvFilter>) -> Gate {
        Gate { shared, env }
    }
}

/// Whether the event or span comes from Nereid itself rather than a library.
fn ours(meta: &Metadata<'_>) -> bool {
    meta.target().starts_with("nereid")
}

/// What `log_verbose_level` lets through below INFO.
pub fn verbose_allows(verbose: u32, meta: &Metadata<'_>) -> bool {
    match *meta.level() {
        Level::DEBUG => verbose >= 2 || (verbose >= 1 && ours(meta)),
        Level::TRACE => verbose >= 2 && ours(meta),
        _ => false,
    }
}

impl<S> Filter<S> for Gate {
    fn enabled(&self, meta: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        let s = &self.shared;
        match *meta.level() {
            Level::ERROR => s.error.load(Ordering::Relaxed),
            Level::WARN => s.warning.load(Ordering::Relaxed),
            Level::INFO => s.info.load(Ordering::Relaxed),
            _ => {
                verbose_allows(s.verbose.load(Ordering::Relaxed), meta)
                    || self
                        .env
                        .as_ref()
                        .is_some_and(|env| Filter::<S>::enabled(env, meta, cx))
            }
        }
    }

    /// Never cached: the settings change at run time.
    fn callsite_enabled(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    /// INFO unless `--log-verbose` (or `RUST_LOG`) asks for more, so that
    /// DEBUG and TRACE callsites, the libraries' included, are skipped
    /// before anything is built: h2 alone opens a TRACE span per frame,
    /// which the subscriber's registry would otherwise record (about a
    /// tenth of the server's CPU on a small model, docs/benchmarks.md).
    /// Changing the verbose level rebuilds the callsites' interest.
    fn max_level_hint(&self) -> Option<LevelFilter> {
        if self.env.is_some() {
            return None;
        }
        Some(match self.shared.verbose.load(Ordering::Relaxed) {
            0 => LevelFilter::INFO,
            _ => LevelFilter::TRACE,
        })
    }
}
