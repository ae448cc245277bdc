use clap::Parser;
use nereid_server::cli::Args;

/// mimalloc rather than glibc's malloc: see docs/benchmarks.md, "Where the
/// server's CPU goes".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let logging = nereid_server::logging::install(&args.log_settings())?;
    let mut config = args.into_config()?;
    config.logging = logging;
    let mirrors = config.engine.mirrors.clone();
    let served = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(config));
    // The local copies of cloud repositories go with the server.
    mirrors.iter().for_each(|mirror| mirror.close());
    served
}

async fn run(config: nereid_server::ServerConfig) -> anyhow::Result<()> {
    let mut server = nereid_server::start(config).await?;
    // A signal during startup stops at once; a failed startup model stops
    // with an error under --exit-on-error.
    let loaded = tokio::select! {
        loaded = server.wait_loaded() => Some(loaded),
        signal = wait_for_signal() => {
            signal?;
            None
        }
    };
    if let Some(loaded) = loaded {
        if let Err(e) = loaded {
            server.shutdown().await?;
            return Err(e);
        }
        wait_for_signal().await?;
    }
    tracing::info!("shutting down: no new connections, finishing in-flight requests");
    server.shutdown().await?;
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result?,
        _ = terminate.recv() => {}
    }
    Ok(())
}
