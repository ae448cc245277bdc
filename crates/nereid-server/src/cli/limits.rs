//! The flags that bound what one client may take: tritonserver's
//! `--http-max-input-size`, and Nereid's own for the rest (Triton has none).

use std::time::Duration;

use nereid_edge::limits::Limits;

#[derive(Debug, clap::Args)]
pub struct LimitFlags {
    /// Largest HTTP request body in bytes, also after gzip/deflate
    /// decompression; a larger one is answered 413.
    #[arg(long, default_value_t = Limits::default().http_max_input_bytes, value_parser = positive, value_name = "BYTES")]
    pub http_max_input_size: usize,

    /// Seconds an HTTP request head may take to arrive (an idle
    /// connection is closed after it too), and a request body may stall
    /// before the request fails.
    #[arg(long, default_value_t = Limits::default().http_read_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..), value_name = "SECONDS")]
    pub http_read_timeout_secs: u64,

    /// HTTP connections served at once; more wait for one to close.
    #[arg(long, default_value_t = Limits::default().http_max_connections, value_parser = positive, value_name = "N")]
    pub http_max_connections: usize,

    /// Threads that serve HTTP connections, each running its connections'
    /// requests from start to end (tritonserver's flag; there its default
    /// is 8). Default: one per core. 0 serves them on the threads the
    /// gRPC endpoint uses.
    #[arg(long, value_name = "N")]
    pub http_thread_count: Option<usize>,

    /// Largest gRPC message received, in bytes (OUT_OF_RANGE past it).
    #[arg(long, default_value_t = Limits::default().grpc_max_message_bytes, value_parser = positive, value_name = "BYTES")]
    pub grpc_max_message_size: usize,

    /// gRPC streams (calls) open at once on one connection.
    #[arg(long, default_value_t = Limits::default().grpc_max_concurrent_streams, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub grpc_max_concurrent_streams: u32,

    /// Largest block of gRPC request headers (metadata), in bytes.
    #[arg(long, default_value_t = Limits::default().grpc_max_header_list_bytes, value_parser = clap::value_parser!(u32).range(1..), value_name = "BYTES")]
    pub grpc_max_header_list_size: u32,

    /// gRPC connections served at once; more wait for one to close.
    #[arg(long, default_value_t = Limits::default().grpc_max_connections, value_parser = positive, value_name = "N")]
    pub grpc_max_connections: usize,
}

fn positive(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("expected a positive number, got '{value}'")),
    }
}

impl LimitFlags {
    pub fn limits(&self) -> Limits {
        Limits {
            http_max_input_bytes: self.http_max_input_size,
            http_read_timeout: Duration::from_secs(self.http_read_timeout_secs),
            http_max_connections: self.http_max_connections,
            http_threads: self
                .http_thread_count
                .unwrap_or(Limits::default().http_threads),
            grpc_max_message_bytes: self.grpc_max_message_size,
            grpc_max_concurrent_streams: self.grpc_max_concurrent_streams,
            grpc_max_header_list_bytes: self.grpc_max_header_list_size,
            grpc_max_connections: self.grpc_max_connections,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::Args;
    use nereid_edge::limits::Limits;

    #[test]
    fn defaults_and_flags() {
        let args = Args::try_parse_from(["nereid", "--model-repository=/a"]).unwrap();
        assert_eq!(args.limits.limits(), Limits::default());
        let args = Args::try_parse_from([
            "nereid",
            "--model-repository=/a",
            "--http-max-input-size=1024",
            "--grpc-max-connections=3",
        ])
        .unwrap();
        let limits = args.limits.limits();
        assert_eq!(limits.http_max_input_bytes, 1024);
        assert_eq!(limits.grpc_max_connections, 3);
        for bad in [
            "--http-max-input-size=0",
            "--http-max-connections=0",
            "--grpc-max-concurrent-streams=-1",
        ] {
            assert!(Args::try_parse_from(["nereid", "--model-repository=/a", bad]).is_err());
        }
    }
}
