//! ONNX Runtime called in-process, with no server in front: the ceiling the
//! batching benchmark (`benches/batching.sh`) compares nereid against.
//!
//! Loads one ONNX model with the session settings nereid's backend uses for
//! a config without parameters (all graph optimisations, ONNX Runtime's own
//! intra-op thread count unless `--intra-threads` says otherwise), then, for
//! each batch size, calls `Session::run` back to back for a fixed time and
//! reports rows per second and the latency of one call.
//!
//! ```text
//! ORT_DYLIB_PATH=$(scripts/ort-path.sh) \
//!   cargo run --release -p nereid-backend-onnx --example raw_ort -- --csv raw.csv
//! ```
//!
//! The table goes to stdout; `--csv` and `--json` write the same rows for
//! scripts. Inputs are pseudo-random FP32 values, generated once per batch
//! size, outside the timed loop.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use ort::environment::Environment;
use ort::session::Session;
use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};
use ort::value::{TensorElementType, TensorRef, ValueType};
use serde::Serialize;

/// Throughput and latency of ONNX Runtime called directly, per batch size.
#[derive(Debug, Parser)]
struct Args {
    /// The ONNX model; its first input must be FP32 [batch, ...].
    #[arg(long, default_value = "model_repository/mlp/1/model.onnx")]
    model: PathBuf,
    /// libonnxruntime.so to load.
    #[arg(long, env = "ORT_DYLIB_PATH")]
    ort_lib: PathBuf,
    /// Batch sizes to measure, in order.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    batch_sizes: Vec<usize>,
    /// Seconds of back-to-back calls timed per batch size.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Seconds of untimed calls before each batch size (thread pools spin
    /// up, caches fill).
    #[arg(long, default_value_t = 0.3)]
    warmup_seconds: f64,
    /// Intra-op threads of the session; 0 leaves ONNX Runtime's default (one
    /// per physical core), as nereid does for a config without
    /// `intra_op_thread_count`.
    #[arg(long, default_value_t = 0)]
    intra_threads: usize,
    /// Also write the rows as CSV to this file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Also write the rows as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One batch size's measurement.
#[derive(Debug, Serialize)]
struct Row {
    batch: usize,
    /// 0 when ONNX Runtime chose.
    intra_threads: usize,
    calls: usize,
    seconds: f64,
    rows_per_s: f64,
    calls_per_s: f64,
    mean_us: f64,
    p50_us: f64,
    p99_us: f64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let environment = ort::init_from(&args.ort_lib)
        .with_context(|| format!("loading ONNX Runtime from '{}'", args.ort_lib.display()))?
        .with_name("raw_ort")
        .with_telemetry(false)
        .build()?;
    let mut session = open_session(&environment, args.intra_threads)
        .and_then(|mut b| b.commit_from_file(&args.model))
        .with_context(|| format!("loading '{}'", args.model.display()))?;
    let row_shape = row_shape(&session)?;
    let threads = match args.intra_threads {
        0 => "ORT default".to_string(),
        n => n.to_string(),
    };
    println!(
        "model {} (input {:?}), intra-op threads: {threads}, {} s per batch size",
        args.model.display(),
        row_shape,
        args.seconds
    );
    println!(
        "{:>5} {:>9} {:>12} {:>10} {:>10} {:>10} {:>10}",
        "batch", "calls", "rows/s", "calls/s", "mean µs", "p50 µs", "p99 µs"
    );
    let mut rows = Vec::new();
    for &batch in &args.batch_sizes {
        let row = measure(&mut session, &row_shape, batch, &args)?;
        println!(
            "{:>5} {:>9} {:>12.0} {:>10.0} {:>10.1} {:>10.1} {:>10.1}",
            row.batch,
            row.calls,
            row.rows_per_s,
            row.calls_per_s,
            row.mean_us,
            row.p50_us,
            row.p99_us
        );
        rows.push(row);
    }
    if let Some(path) = &args.csv {
        std::fs::write(path, to_csv(&rows))
            .with_context(|| format!("writing '{}'", path.display()))?;
    }
    if let Some(path) = &args.json {
        std::fs::write(path, to_json(&rows)?)
            .with_context(|| format!("writing '{}'", path.display()))?;
    }
    Ok(())
}

/// A session builder as nereid's backend makes one for a config without
/// parameters, with the intra-op thread count set when asked.
fn open_session(
    environment: &Environment,
    intra_threads: usize,
) -> Result<SessionBuilder, ort::Error> {
    let builder =
        Session::builder(environment)?.with_optimization_level(GraphOptimizationLevel::All)?;
    if intra_threads == 0 {
        return Ok(builder);
    }
    Ok(builder.with_intra_threads(intra_threads)?)
}

/// The first input's dims after the batch dimension; only FP32 is fed.
fn row_shape(session: &Session) -> anyhow::Result<Vec<i64>> {
    let input = session.inputs().first().context("the model has no input")?;
    let ValueType::Tensor { ty, shape, .. } = input.dtype() else {
        bail!("input '{}' is not a tensor", input.name());
    };
    if *ty != TensorElementType::Float32 {
        bail!(
            "input '{}' is {ty:?}; raw_ort feeds only FP32",
            input.name()
        );
    }
    let dims = shape.get(1..).unwrap_or_default().to_vec();
    if dims.iter().any(|&d| d < 0) {
        bail!(
            "input '{}' has dynamic non-batch dims {shape:?}",
            input.name()
        );
    }
    Ok(dims)
}

/// Times back-to-back runs of one batch size.
fn measure(
    session: &mut Session,
    row_shape: &[i64],
    batch: usize,
    args: &Args,
) -> anyhow::Result<Row> {
    let mut shape = vec![i64::try_from(batch)?];
    shape.extend_from_slice(row_shape);
    let len = shape.iter().product::<i64>();
    let data = pseudo_random(usize::try_from(len)?, batch as u64);
    let mut run = || -> anyhow::Result<()> {
        let input = TensorRef::from_array_view((shape.clone(), data.as_slice()))?;
        let outputs = session.run(ort::inputs![input])?;
        drop(outputs);
        Ok(())
    };
    let warmup = Duration::from_secs_f64(args.warmup_seconds);
    let start = Instant::now();
    while start.elapsed() < warmup {
        run()?;
    }
    let window = Duration::from_secs_f64(args.seconds);
    let mut latencies = Vec::new();
    let start = Instant::now();
    while start.elapsed() < window {
        let t = Instant::now();
        run()?;
        latencies.push(t.elapsed());
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(summarise(batch, args.intra_threads, seconds, latencies))
}

fn summarise(
    batch: usize,
    intra_threads: usize,
    seconds: f64,
    mut latencies: Vec<Duration>,
) -> Row {
    latencies.sort_unstable();
    let calls = latencies.len();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let pct = |p: f64| {
        let i = ((calls as f64 * p).ceil() as usize).clamp(1, calls.max(1)) - 1;
        latencies.get(i).map_or(0.0, |&d| us(d))
    };
    let total: Duration = latencies.iter().sum();
    Row {
        batch,
        intra_threads,
        calls,
        seconds,
        rows_per_s: (calls * batch) as f64 / seconds,
        calls_per_s: calls as f64 / seconds,
        mean_us: us(total) / calls.max(1) as f64,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
    }
}

/// Deterministic values in [-1, 1): the MLP's cost does not depend on them,
/// but zeros could take fast paths real inputs do not.
fn pseudo_random(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

const FIELDS: &str =
    "batch,intra_threads,calls,seconds,rows_per_s,calls_per_s,mean_us,p50_us,p99_us";

fn to_csv(rows: &[Row]) -> String {
    let mut text = format!("{FIELDS}\n");
    for r in rows {
        text += &format!(
            "{},{},{},{:.3},{:.1},{:.1},{:.1},{:.1},{:.1}\n",
            r.batch,
            r.intra_threads,
            r.calls,
            r.seconds,
            r.rows_per_s,
            r.calls_per_s,
            r.mean_us,
            r.p50_us,
            r.p99_us
        );
    }
    text
}

fn to_json(rows: &[Row]) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(rows)? + "\n")
}
