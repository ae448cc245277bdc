//! What every network frontend shares: the one map from an error's kind
//! to an HTTP status and a gRPC code, the limits one client may take, TLS
//! and the connection handshake, restricted API groups, what the server
//! says about itself, the repository API's load parameters, the logging
//! extension's settings, and [`Frontend`] / [`Endpoint`], what the server
//! hands each frontend it starts.
//!
//! Depends on the engine handle, the wire formats and `nereid-trace` (a
//! frontend's tracer) only: never on the repository, the scheduler, a
//! backend or a frontend.

pub mod error;
pub mod handshake;
pub mod info;
pub mod limits;
pub mod logging;
pub mod model_control;
pub mod restricted;
pub mod tls;

use nereid_core::Error;
use nereid_engine::Engine;
use nereid_trace::Tracer;
use tokio::net::TcpListener;

use limits::{ConnectionLimit, Limits};
use logging::LogControl;
use restricted::Restrictions;
use tls::ServerTls;

/// What the HTTP and gRPC frontends serve with.
#[derive(Debug, Clone)]
pub struct Frontend {
    pub engine: Engine,
    pub log: LogControl,
    pub tracer: Tracer,
    pub limits: Limits,
    pub restrictions: Restrictions,
}

/// A frontend's bound socket, the cap on its connections, and its TLS.
#[derive(Debug)]
pub struct Endpoint {
    pub listener: TcpListener,
    pub connections: ConnectionLimit,
    pub tls: Option<ServerTls>,
}

/// Triton's answer to a trace setting request for a model it does not
/// know.
pub fn check_model(engine: &Engine, model: &str) -> Result<(), Error> {
    engine
        .model_config(model, None)
        .map(|_| ())
        .map_err(|_| Error::invalid_argument(format!("Request for unknown model : {model}")))
}
