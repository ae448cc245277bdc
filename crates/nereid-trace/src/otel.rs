//! The OpenTelemetry mode: each finished trace becomes Triton's spans, sent
//! by a batch span processor over OTLP/HTTP (protobuf), as Triton sends
//! them. A request gives a root span `InferRequest` with the frontend's
//! events; under it one span per model request (named after the model,
//! with `REQUEST_START`, `QUEUE_START`, `REQUEST_END`), and under that a
//! `compute` span with the compute events. An ensemble's steps hang under
//! the ensemble's model span. A client's W3C `traceparent` becomes the
//! root's parent.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use nereid_core::trace::{Activity, TraceEvent, TraceRecord, monotonic_ns};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Span, SpanKind, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};

use super::Shown;

/// `--trace-config opentelemetry,<key>=<value>` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct OtelOptions {
    /// Where spans are POSTed (OTLP/HTTP); `http://` is added when the
    /// value has no scheme.
    pub url: String,
    /// Resource attributes; `service.name` is `triton-inference-server`
    /// unless one is given.
    pub resource: Vec<(String, String)>,
    pub bsp_max_queue_size: usize,
    pub bsp_schedule_delay: Duration,
    pub bsp_max_export_batch_size: usize,
}

impl Default for OtelOptions {
    /// Triton's defaults.
    fn default() -> Self {
        OtelOptions {
            url: "http://localhost:4318/v1/traces".into(),
            resource: Vec::new(),
            bsp_max_queue_size: 2048,
            bsp_schedule_delay: Duration::from_millis(5000),
            bsp_max_export_batch_size: 512,
        }
    }
}

impl OtelOptions {
    /// Takes one `opentelemetry,<key>=<value>` setting.
    pub fn set(&mut self, key: &str, value: &str) -> anyhow::Result<()> {
        let number = || {
            value
                .parse::<u64>()
                .with_context(|| format!("opentelemetry,{key}: expected a number, got '{value}'"))
        };
        match key {
            "url" => self.url = value.to_string(),
            "resource" => {
                let (k, v) = value.split_once('=').with_context(|| {
                    format!("opentelemetry,resource={value}: expected <key>=<value>")
                })?;
                self.resource.push((k.to_string(), v.to_string()));
            }
            "bsp_max_queue_size" => self.bsp_max_queue_size = number()? as usize,
            "bsp_schedule_delay" => self.bsp_schedule_delay = Duration::from_millis(number()?),
            "bsp_max_export_batch_size" => self.bsp_max_export_batch_size = number()? as usize,
            _ => anyhow::bail!("opentelemetry,{key}: not an OpenTelemetry trace setting"),
        }
        Ok(())
    }

    /// The settings an answer shows in this mode, as Triton shows them.
    pub(super) fn shown(&self) -> Vec<(&'static str, Shown)> {
        vec![
            ("url", Shown::one(&self.url)),
            (
                "bsp_max_export_batch_size",
                Shown::one(self.bsp_max_export_batch_size),
            ),
            (
                "bsp_schedule_delay",
                Shown::one(self.bsp_schedule_delay.as_millis()),
            ),
            ("bsp_max_queue_size", Shown::one(self.bsp_max_queue_size)),
        ]
    }

    fn endpoint(&self) -> String {
        if self.url.contains("://") {
            self.url.clone()
        } else {
            format!("http://{}", self.url)
        }
    }
}

/// The exporter and the tracer spans are made with.
pub struct OtelExport {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// Wall-clock time of monotonic nanosecond 0: OpenTelemetry stamps
    /// spans with the system clock.
    epoch: SystemTime,
}

impl OtelExport {
    pub fn new(options: &OtelOptions) -> anyhow::Result<OtelExport> {
        // The OTLP HTTP client is a blocking one, which must be made (and
        // dropped) outside the async runtime.
        let options = options.clone();
        let provider = std::thread::spawn(move || build_provider(&options))
            .join()
            .map_err(|_| anyhow::anyhow!("building the OpenTelemetry exporter panicked"))??;
        let tracer = provider.tracer("triton-server");
        let now = Instant::now();
        let epoch = SystemTime::now() - Duration::from_nanos(monotonic_ns(now));
        Ok(OtelExport {
            provider,
            tracer,
            epoch,
        })
    }

    fn time(&self, ns: u64) -> SystemTime {
        self.epoch + Duration::from_nanos(ns)
    }

    /// Turns a finished trace into spans; the processor sends them.
    pub fn export(&self, record: &TraceRecord) {
        let parent = match &record.traceparent {
            Some(traceparent) => {
                let headers = HashMap::from([("traceparent".to_string(), traceparent.clone())]);
                TraceContextPropagator::new().extract(&headers)
            }
            None => Context::new(),
        };
        let (start, end) = span_bounds(record);
        let root = self.span(
            "InferRequest".into(),
            start,
            Vec::new(),
            &parent,
            record,
            Activity::is_frontend,
        );
        let root_cx = parent.with_span(root);
        self.model_spans(record, &root_cx);
        root_cx.span().end_with_timestamp(self.time(end));
    }

    /// The span of one model request (and its compute span and its
    /// children's spans) under `parent`.
    fn model_spans(&self, record: &TraceRecord, parent: &Context) {
        let Some((model, version)) = &record.model else {
            return;
        };
        let Some(start) = record.timestamp(Activity::RequestStart) else {
            return;
        };
        let attributes = vec![
            KeyValue::new("triton.model_name", model.clone()),
            KeyValue::new("triton.model_version", *version),
            KeyValue::new("triton.trace_id", record.id as i64),
            KeyValue::new(
                "triton.trace_parent_id",
                record.parent_id.unwrap_or(0) as i64,
            ),
        ];
        const REQUEST: &[Activity] = &[
            Activity::RequestStart,
            Activity::QueueStart,
            Activity::RequestEnd,
        ];
        let span = self.span(model.clone(), start, attributes, parent, record, |a| {
            REQUEST.contains(&a)
        });
        let end = record
            .timestamp(Activity::RequestEnd)
            .unwrap_or_else(|| span_bounds(record).1);
        let cx = parent.with_span(span);
        if let Some(compute_start) = record.timestamp(Activity::ComputeStart) {
            const COMPUTE: &[Activity] = &[
                Activity::ComputeStart,
                Activity::ComputeInputEnd,
                Activity::ComputeOutputStart,
                Activity::ComputeEnd,
            ];
            let mut compute = self.span(
                "compute".into(),
                compute_start,
                Vec::new(),
                &cx,
                record,
                |a| COMPUTE.contains(&a),
            );
            let compute_end = record.timestamp(Activity::ComputeEnd).unwrap_or(end);
            compute.end_with_timestamp(self.time(compute_end));
        }
        for child in &record.children {
            self.model_spans(child, &cx);
        }
        cx.span().end_with_timestamp(self.time(end));
    }

    /// A server span under `parent` from `start`, with the record's
    /// timestamps of the activities it `keeps` as events.
    fn span(
        &self,
        name: String,
        start: u64,
        attributes: Vec<KeyValue>,
        parent: &Context,
        record: &TraceRecord,
        keeps: impl Fn(Activity) -> bool,
    ) -> opentelemetry_sdk::trace::Span {
        let mut span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_start_time(self.time(start))
            .with_attributes(attributes)
            .start_with_context(&self.tracer, parent);
        for (activity, ns) in stamps(record).filter(|(a, _)| keeps(*a)) {
            span.add_event_with_timestamp(activity.name(), self.time(ns), Vec::new());
        }
        span
    }

    /// Sends the spans still queued and stops the exporter.
    pub fn shutdown(&self) {
        let provider = self.provider.clone();
        let done = std::thread::spawn(move || provider.shutdown()).join();
        if let Ok(Err(e)) = done {
            tracing::warn!(error = %e, "stopping the OpenTelemetry exporter");
        }
    }
}

fn build_provider(options: &OtelOptions) -> anyhow::Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(options.endpoint())
        .build()
        .context("cannot build the OTLP exporter")?;
    let batching = BatchConfigBuilder::default()
        .with_max_queue_size(options.bsp_max_queue_size)
        .with_scheduled_delay(options.bsp_schedule_delay)
        .with_max_export_batch_size(options.bsp_max_export_batch_size)
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batching)
        .build();
    let mut attributes: Vec<KeyValue> = options
        .resource
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    if !options.resource.iter().any(|(k, _)| k == "service.name") {
        attributes.push(KeyValue::new("service.name", "triton-inference-server"));
    }
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(Resource::builder().with_attributes(attributes).build())
        .build())
}

/// The record's timestamps, in the order they were recorded.
fn stamps(record: &TraceRecord) -> impl Iterator<Item = (Activity, u64)> + '_ {
    record.events.iter().filter_map(|e| match e {
        TraceEvent::Timestamp { activity, ns } => Some((*activity, *ns)),
        TraceEvent::Tensor { .. } => None,
    })
}

/// The earliest and latest timestamps of a record and its children; now
/// when it has none.
fn span_bounds(record: &TraceRecord) -> (u64, u64) {
    let mut all: Vec<u64> = stamps(record).map(|(_, ns)| ns).collect();
    all.extend(record.children.iter().map(|c| span_bounds(c).1));
    let now = monotonic_ns(Instant::now());
    let start = all.iter().copied().min().unwrap_or(now);
    let end = all.iter().copied().max().unwrap_or(now);
    (start, end)
}

impl std::fmt::Debug for OtelExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtelExport").finish_non_exhaustive()
    }
}
