//! Triton's trace extension: which requests are traced (every
//! `trace_rate`-th, while `trace_count` lasts, globally or per model), the
//! settings clients read and change at run time, and where finished traces
//! go: Triton's JSON trace files, or OpenTelemetry spans over OTLP/HTTP.
//!
//! Frontends call [`Tracer::sample`] for each inference request and put
//! the [`Trace`] on it; the engine records what happens to it; the last
//! handle dropped hands the record to the [`Sampler`] that took it.
//!
//! Depends on `nereid-core` only: never on the engine, a frontend, a
//! backend, the scheduler or the repository.

mod body;
mod file;
mod otel;
pub mod settings;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nereid_core::Error;
use nereid_core::trace::{Trace, TraceRecord, TraceSink};
use parking_lot::{Mutex, RwLock};

pub use body::TracedBody;
pub use otel::OtelOptions;
use settings::{Specified, Update, Values, level_names};

/// Where traces go, as `--trace-config mode=` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceMode {
    #[default]
    Triton,
    OpenTelemetry,
}

/// What `--trace-config` (and the older `--trace-*` flags) ask for.
#[derive(Debug, Clone, Default)]
pub struct TraceOptions {
    pub values: Values,
    /// The Triton mode's trace file; empty: none.
    pub file: String,
    pub mode: TraceMode,
    pub otel: OtelOptions,
}

/// The server's tracing. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Tracer {
    shared: Arc<Shared>,
}

struct Shared {
    options: TraceOptions,
    output: Output,
    settings: RwLock<Settings>,
    /// Whether any setting can sample: requests skip the lock when none can.
    enabled: AtomicBool,
}

/// Where finished traces go.
#[derive(Clone)]
enum Output {
    File(Arc<file::TraceFile>),
    OpenTelemetry(Arc<otel::OtelExport>),
    /// The Triton mode without a trace file: nothing can be traced.
    Nowhere,
}

struct Settings {
    global: Entry,
    models: HashMap<String, Entry>,
}

struct Entry {
    specified: Specified,
    sampler: Arc<Sampler>,
}

/// A setting in effect: its values, and the sampling state that goes with
/// them (replaced, not changed, when the setting changes, as Triton does,
/// so that traces in flight finish under the setting that took them).
struct Sampler {
    values: Values,
    output: Output,
    state: Mutex<SampleState>,
}

#[derive(Default)]
struct SampleState {
    /// Requests seen.
    seen: u64,
    /// Traces still to take; -1: no limit.
    count: i32,
    created: u64,
    collected: u64,
    /// Finished traces not yet written, comma-separated JSON objects.
    pending: String,
    pending_traces: u32,
}

impl Tracer {
    /// Sets tracing up; in OpenTelemetry mode this builds the exporter.
    pub fn new(options: TraceOptions) -> anyhow::Result<Tracer> {
        let output = match options.mode {
            TraceMode::OpenTelemetry => {
                Output::OpenTelemetry(Arc::new(otel::OtelExport::new(&options.otel)?))
            }
            TraceMode::Triton if options.file.is_empty() => Output::Nowhere,
            TraceMode::Triton => {
                Output::File(Arc::new(file::TraceFile::new(options.file.clone().into())))
            }
        };
        let global = Entry {
            specified: Specified::default(),
            sampler: Sampler::new(options.values, output.clone()),
        };
        let tracer = Tracer {
            shared: Arc::new(Shared {
                options,
                output,
                settings: RwLock::new(Settings {
                    global,
                    models: HashMap::new(),
                }),
                enabled: AtomicBool::new(false),
            }),
        };
        tracer.refresh_enabled(&tracer.shared.settings.read());
        Ok(tracer)
    }

    /// A trace for a request to `model` when it is sampled. In
    /// OpenTelemetry mode a request carrying a W3C `traceparent` is always
    /// traced, as Triton does.
    pub fn sample(&self, model: &str, traceparent: Option<&str>) -> Option<Trace> {
        if let (Some(traceparent), Output::OpenTelemetry(_)) = (traceparent, &self.shared.output) {
            let sampler = self.sampler(model);
            let mut level = sampler.values.level;
            level.timestamps = true;
            let trace = Trace::new(level, sampler);
            trace.set_traceparent(traceparent.to_string());
            return Some(trace);
        }
        if !self.shared.enabled.load(Ordering::Relaxed) {
            return None;
        }
        Sampler::sample(&self.sampler(model))
    }

    fn sampler(&self, model: &str) -> Arc<Sampler> {
        let settings = self.shared.settings.read();
        let entry = settings.models.get(model).unwrap_or(&settings.global);
        Arc::clone(&entry.sampler)
    }

    /// The settings in effect for `model` (its own, else the global ones),
    /// as Triton names and spells them.
    pub fn settings(&self, model: Option<&str>) -> Vec<(&'static str, Shown)> {
        let sampler = match model {
            Some(model) => self.sampler(model),
            None => Arc::clone(&self.shared.settings.read().global.sampler),
        };
        let values = sampler.current();
        let mut shown = vec![
            ("trace_level", Shown::List(level_names(values.level))),
            ("trace_rate", Shown::one(values.rate)),
            ("trace_count", Shown::one(values.count)),
        ];
        let options = &self.shared.options;
        match options.mode {
            TraceMode::Triton => shown.extend([
                ("log_frequency", Shown::one(values.log_frequency)),
                ("trace_file", Shown::one(&options.file)),
                ("trace_mode", Shown::one("triton")),
            ]),
            TraceMode::OpenTelemetry => {
                shown.push(("trace_mode", Shown::one("opentelemetry")));
                shown.extend(options.otel.shown());
            }
        }
        shown
    }

    /// Applies `update` to `model`'s setting (`None`: the global one); a
    /// global change also reaches every model setting that takes some of
    /// its values from the global one. Triton's rules: a cleared value
    /// falls back, a model left naming nothing follows the global setting,
    /// and a setting that could not trace is refused unless it is OFF.
    pub fn update(&self, model: Option<&str>, update: &Update) -> Result<(), Error> {
        let mut settings = self.shared.settings.write();
        self.update_entry(&mut settings, model, update)?;
        if model.is_none() {
            let following: Vec<String> = settings
                .models
                .iter()
                .filter(|(_, e)| !e.specified.all())
                .map(|(name, _)| name.clone())
                .collect();
            for name in following {
                self.update_entry(&mut settings, Some(&name), &Update::default())?;
            }
        }
        self.refresh_enabled(&settings);
        Ok(())
    }

    fn update_entry(
        &self,
        settings: &mut Settings,
        model: Option<&str>,
        update: &Update,
    ) -> Result<(), Error> {
        let (current, fallback) = match model {
            Some(model) => (
                settings.models.get(model),
                settings.global.sampler.current(),
            ),
            None => (Some(&settings.global), self.shared.options.values),
        };
        let current = current.map(|e| (e.sampler.current(), e.specified));
        let (values, specified) = update.apply(current, fallback);
        if let Some(model) = model
            && specified.none()
        {
            settings.models.remove(model);
            return Ok(());
        }
        if let Err(reason) = self.check(&values)
            && !values.level.is_off()
        {
            return Err(Error::invalid_argument(format!(
                "Attempting to set invalid trace setting :{reason}"
            )));
        }
        let entry = Entry {
            specified,
            sampler: Sampler::new(values, self.shared.output.clone()),
        };
        match model {
            Some(model) => {
                settings.models.insert(model.to_string(), entry);
            }
            None => settings.global = entry,
        }
        Ok(())
    }

    /// Why a setting with `values` cannot trace, in Triton's words.
    fn check(&self, values: &Values) -> Result<(), &'static str> {
        if values.level.is_off() {
            Err("tracing is disabled")
        } else if values.rate == 0 {
            Err("sample rate must be non-zero")
        } else if matches!(self.shared.output, Output::Nowhere) {
            Err("trace file name is not given")
        } else {
            Ok(())
        }
    }

    fn refresh_enabled(&self, settings: &Settings) {
        let enabled = std::iter::once(&settings.global)
            .chain(settings.models.values())
            .any(|e| self.check(&e.sampler.values).is_ok());
        self.shared.enabled.store(enabled, Ordering::Relaxed);
    }

    /// Writes what is still pending and closes the trace file, or sends
    /// the spans still queued; traces that finish later are dropped.
    pub fn close(&self) {
        {
            let settings = self.shared.settings.read();
            for entry in std::iter::once(&settings.global).chain(settings.models.values()) {
                entry.sampler.flush();
            }
        }
        match &self.shared.output {
            Output::File(file) => file.close(),
            Output::OpenTelemetry(export) => export.shutdown(),
            Output::Nowhere => {}
        }
    }
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("mode", &self.shared.options.mode)
            .finish_non_exhaustive()
    }
}

/// A setting's value in an answer: one string, or a list (`trace_level`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    One(String),
    List(Vec<String>),
}

impl Shown {
    fn one(value: impl ToString) -> Shown {
        Shown::One(value.to_string())
    }

    pub fn into_list(self) -> Vec<String> {
        match self {
            Shown::One(value) => vec![value],
            Shown::List(values) => values,
        }
    }
}

impl Sampler {
    fn new(values: Values, output: Output) -> Arc<Sampler> {
        Arc::new(Sampler {
            values,
            output,
            state: Mutex::new(SampleState {
                count: values.count,
                ..SampleState::default()
            }),
        })
    }

    /// The values, with the count still left.
    fn current(&self) -> Values {
        Values {
            count: self.state.lock().count,
            ..self.values
        }
    }

    fn sample(this: &Arc<Sampler>) -> Option<Trace> {
        let Values { level, rate, .. } = this.values;
        if level.is_off() || rate == 0 || matches!(this.output, Output::Nowhere) {
            return None;
        }
        {
            let mut state = this.state.lock();
            state.seen += 1;
            if !state.seen.is_multiple_of(u64::from(rate)) || state.count == 0 {
                return None;
            }
            if state.count > 0 {
                state.count -= 1;
            }
            state.created += 1;
        }
        Some(Trace::new(level, Arc::clone(this) as Arc<dyn TraceSink>))
    }

    /// Writes the pending traces: to an indexed file when traces go out
    /// `log_frequency` at a time, else to the main file.
    fn flush(&self) {
        let Output::File(file) = &self.output else {
            return;
        };
        let pending = {
            let mut state = self.state.lock();
            state.pending_traces = 0;
            std::mem::take(&mut state.pending)
        };
        if pending.is_empty() {
            return;
        }
        if self.values.log_frequency != 0 {
            file.write_indexed(&pending);
        } else {
            file.append(&pending);
        }
    }
}

impl TraceSink for Sampler {
    /// Keeps a finished trace; every `log_frequency` traces, or once the
    /// count is spent and every trace taken has finished, they are written
    /// to the next indexed file.
    fn finish(&self, record: TraceRecord) {
        let file = match &self.output {
            Output::File(file) => file,
            Output::OpenTelemetry(export) => return export.export(&record),
            Output::Nowhere => return,
        };
        let batch = {
            let mut state = self.state.lock();
            file::write_record(&mut state.pending, &record);
            state.pending_traces += 1;
            state.collected += 1;
            let spent = state.count == 0 && state.collected == state.created;
            let full =
                self.values.log_frequency != 0 && state.pending_traces >= self.values.log_frequency;
            if !(spent || full) {
                return;
            }
            state.pending_traces = 0;
            std::mem::take(&mut state.pending)
        };
        file.write_indexed(&batch);
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests;
