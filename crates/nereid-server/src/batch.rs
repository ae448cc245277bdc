//! `nereid batch`: the engine made as the server makes it, the job's model
//! loaded alone, the job run, and its outcome as an exit status.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use nereid_batch::{BatchError, Summary};
use nereid_engine::{Engine, LoadRequest};

use crate::backends;
use crate::cli::{BatchArgs, BatchConfig};

/// Every record succeeded.
pub const EXIT_OK: i32 = 0;
/// The job could not run: flags, model, files.
pub const EXIT_NOT_RUN: i32 = 1;
/// The job ran, and some records failed (they are in the output).
pub const EXIT_SOME_FAILED: i32 = 2;
/// Stopped by SIGINT or SIGTERM; the same command resumes it.
pub const EXIT_INTERRUPTED: i32 = 130;

/// Runs the job `args` describe; the summary (or the reason it could not
/// run) goes to stderr. Returns the exit status.
pub fn main(args: BatchArgs) -> i32 {
    if let Err(e) = nereid_edge::logging::install_stderr(&args.log_settings()) {
        eprintln!("nereid batch: {e:#}");
        return EXIT_NOT_RUN;
    }
    match run(args) {
        Ok(summary) => {
            eprintln!("{}", summary.line());
            match summary {
                Summary {
                    interrupted: true, ..
                } => EXIT_INTERRUPTED,
                Summary { failures: 0, .. } => EXIT_OK,
                _ => EXIT_SOME_FAILED,
            }
        }
        Err(e) => {
            eprintln!("nereid batch: error: {e:#}");
            EXIT_NOT_RUN
        }
    }
}

fn run(args: BatchArgs) -> anyhow::Result<Summary> {
    let config = args.into_config(std::io::stderr().is_terminal())?;
    let mirrors = config.engine.mirrors.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcome = runtime.block_on(job(config));
    // The local copies of cloud repositories go with the job.
    mirrors.iter().for_each(|mirror| mirror.close());
    outcome
}

async fn job(config: BatchConfig) -> anyhow::Result<Summary> {
    let BatchConfig {
        engine,
        control,
        backends: settings,
        job,
    } = config;
    let engine = backends::engine(engine, control, &settings);
    load(&engine, &job.model).await?;
    let stop = Arc::new(AtomicBool::new(false));
    tokio::spawn(stop_on_signal(Arc::clone(&stop)));
    let summary = nereid_batch::run(&engine, &job, stop).await;
    engine.begin_shutdown();
    summary.map_err(|e| match e {
        BatchError::Model(_) | BatchError::Usage(_) => anyhow::anyhow!(e),
        e => anyhow::Error::new(e),
    })
}

/// Loads `model` alone (with its composing models, for an ensemble).
async fn load(engine: &Engine, model: &str) -> anyhow::Result<()> {
    let loader = engine.clone();
    tokio::task::spawn_blocking(move || loader.load_all())
        .await
        .context("the model loading task panicked")?
        .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    engine
        .load_model(model, LoadRequest::default())
        .await
        .map_err(|e| anyhow::anyhow!("model '{model}' did not load: {}", e.message()))
}

/// Sets `stop` at the first SIGINT or SIGTERM: the job stops taking
/// records and commits what is done.
async fn stop_on_signal(stop: Arc<AtomicBool>) {
    let Ok(mut terminate) =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    stop.store(true, Ordering::Relaxed);
}
