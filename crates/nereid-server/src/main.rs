use std::backtrace::BacktraceStatus;
use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;
use nereid_server::cli::{Args, Command};

/// mimalloc rather than glibc's malloc: see docs/benchmarks.md, "Where the
/// server's CPU goes".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let mut args = parse();
    if let Some(Command::Batch(batch)) = args.command.take() {
        std::process::exit(nereid_server::batch::main(batch));
    }
    match serve(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            report(&error);
            ExitCode::FAILURE
        }
    }
}

/// Starts the server and serves until a signal; any error is one that
/// stops it (at startup: a port in use, a flag's file that cannot be
/// read, ...).
fn serve(args: Args) -> anyhow::Result<()> {
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

/// Tells the user why the server stopped, on one line: the error and its
/// causes joined with ": " (`main` returning the error would print
/// anyhow's multi-line debug form). The backtrace, only when
/// RUST_BACKTRACE asks for one, comes first so that the line stays last.
fn report(error: &anyhow::Error) {
    if error.backtrace().status() == BacktraceStatus::Captured {
        eprintln!("{}", error.backtrace());
    }
    eprintln!("error: {}", one_line(error));
}

/// The chain on one line, joined with ": ". A cause whose words the line
/// already holds is left out (many errors repeat their source in their
/// own message), and a cause that spans lines (a model's load errors, one
/// per version) has its lines joined with spaces.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        let text = text
            .lines()
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_one_line_without_repeats() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error = anyhow::Error::new(io).context("cannot read x.pem: no such file");
        let error = error.context("--http-server-cert");
        assert_eq!(
            one_line(&error),
            "--http-server-cert: cannot read x.pem: no such file"
        );
        let error = anyhow::anyhow!("version 1 failed;\nversion 2 failed;\n").context("'m'");
        assert_eq!(one_line(&error), "'m': version 1 failed; version 2 failed;");
    }
}
