use clap::Parser;
use clap::error::ErrorKind;
use nereid_server::cli::{Args, Command};

/// mimalloc rather than glibc's malloc: see docs/benchmarks.md, "Where the
/// server's CPU goes".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let mut args = parse();
    if let Some(Command::Batch(batch)) = args.command.take() {
        std::process::exit(nereid_server::batch::main(batch));
    }
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

/// The flags. A `nereid batch` whose flags are wrong could not run: exit
/// status 1, as its other failures to start, where clap's usual 2 would
/// read as "some records failed".
fn parse() -> Args {
    Args::try_parse().unwrap_or_else(|e| {
        let batch = std::env::args_os().nth(1).is_some_and(|a| a == "batch");
        let shown = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
        if batch && !shown {
            let _ = e.print();
            std::process::exit(nereid_server::batch::EXIT_NOT_RUN);
        }
        e.exit()
    })
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
