//! Prometheus metrics on their own port, with Triton's metric names and
//! `model` / `version` labels, computed from the engine's statistics at
//! scrape time.

use std::fmt::Write;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use nereid_engine::Engine;
use tokio::net::TcpListener;

pub async fn serve(
    engine: Engine,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(engine);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

async fn metrics(State(engine): State<Engine>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        render(&engine),
    )
}

/// One metric family: name, help, type, and how to read it from a snapshot.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    value: fn(&nereid_engine::stats::StatsSnapshot) -> u64,
}

const FAMILIES: &[Family] = &[
    Family {
        name: "nv_inference_request_success",
        help: "Number of successful inference requests, all batch sizes",
        kind: "counter",
        value: |s| s.success.count,
    },
    Family {
        name: "nv_inference_request_failure",
        help: "Number of failed inference requests, all batch sizes",
        kind: "counter",
        value: |s| s.fail.count,
    },
    Family {
        name: "nereid_inference_request_cancelled",
        help: "Number of requests dropped before they ran because their client went away",
        kind: "counter",
        value: |s| s.cancelled,
    },
    Family {
        name: "nv_inference_count",
        help: "Number of inferences performed (does not include cached requests)",
        kind: "counter",
        value: |s| s.inference_count,
    },
    Family {
        name: "nv_inference_exec_count",
        help: "Number of model executions performed (does not include cached requests)",
        kind: "counter",
        value: |s| s.execution_count,
    },
    Family {
        name: "nv_inference_request_duration_us",
        help: "Cumulative inference request duration in microseconds (includes cached requests)",
        kind: "counter",
        value: |s| (s.success.ns + s.fail.ns) / 1000,
    },
    Family {
        name: "nv_inference_queue_duration_us",
        help: "Cumulative inference queuing duration in microseconds (includes cached requests)",
        kind: "counter",
        value: |s| s.queue.ns / 1000,
    },
    Family {
        name: "nv_inference_compute_input_duration_us",
        help: "Cumulative compute input duration in microseconds (does not include cached requests)",
        kind: "counter",
        value: |s| s.compute_input.ns / 1000,
    },
    Family {
        name: "nv_inference_compute_infer_duration_us",
        help: "Cumulative compute inference duration in microseconds (does not include cached requests)",
        kind: "counter",
        value: |s| s.compute_infer.ns / 1000,
    },
    Family {
        name: "nv_inference_compute_output_duration_us",
        help: "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        kind: "counter",
        value: |s| s.compute_output.ns / 1000,
    },
];

fn render(engine: &Engine) -> String {
    let stats = engine.statistics(None, None).unwrap_or_default();
    let mut out = String::new();
    for family in FAMILIES {
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
        for v in &stats {
            let _ = writeln!(
                out,
                "{}{{model=\"{}\",version=\"{}\"}} {}",
                family.name,
                escape(&v.name),
                v.version,
                (family.value)(&v.stats)
            );
        }
    }
    out
}

/// Escapes a label value per the Prometheus text format.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
