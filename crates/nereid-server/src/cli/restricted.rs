//! tritonserver's restricted API flags.

use crate::server::RestrictedApis;
use nereid_edge::restricted::{Protocol, Restrictions};

#[derive(Debug, clap::Args)]
pub struct RestrictedFlags {
    /// HTTP API groups that need a header, `<group>[,<group>...]:<header>=<value>`;
    /// repeat for several. Groups: health, metadata, inference,
    /// shared-memory, model-config, model-repository, statistics, trace,
    /// logging.
    #[arg(long = "http-restricted-api", value_name = "GROUPS:HEADER=VALUE")]
    pub http_restricted_api: Vec<String>,

    /// The same for gRPC; the header a client sends is
    /// `triton-grpc-protocol-<header>`.
    #[arg(long = "grpc-restricted-protocol", value_name = "GROUPS:HEADER=VALUE")]
    pub grpc_restricted_protocol: Vec<String>,
}

impl RestrictedFlags {
    pub fn restricted_apis(&self) -> anyhow::Result<RestrictedApis> {
        Ok(RestrictedApis {
            http: Restrictions::parse(Protocol::Http, &self.http_restricted_api)
                .map_err(anyhow::Error::msg)?,
            grpc: Restrictions::parse(Protocol::Grpc, &self.grpc_restricted_protocol)
                .map_err(anyhow::Error::msg)?,
        })
    }
}
