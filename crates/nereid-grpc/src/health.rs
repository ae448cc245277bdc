//! The standard `grpc.health.v1.Health` service, for load balancers and
//! Kubernetes gRPC probes: SERVING while the engine is ready.

use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use nereid_core::Error;
use nereid_engine::Engine;
use nereid_protocol::health::health_check_response::ServingStatus;
use nereid_protocol::health::health_server::Health;
use nereid_protocol::health::{HealthCheckRequest, HealthCheckResponse};
use nereid_protocol::inference::grpc_inference_service_server::SERVICE_NAME as INFERENCE_SERVICE;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use tonic::{Request, Response, Status};

use nereid_edge::error::grpc_status;

/// How often `Watch` looks at the engine's readiness.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

pub struct HealthService {
    engine: Engine,
    stop: watch::Receiver<bool>,
}

impl HealthService {
    pub fn new(engine: Engine, stop: watch::Receiver<bool>) -> HealthService {
        HealthService { engine, stop }
    }
}

/// The status of `service` ("" is the server as a whole); `None` for a
/// service this server does not have.
fn serving_status(engine: &Engine, service: &str) -> Option<ServingStatus> {
    if !service.is_empty() && service != INFERENCE_SERVICE {
        return None;
    }
    Some(if engine.is_ready() {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    })
}

fn response(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status as i32,
    }
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = request.into_inner().service;
        match serving_status(&self.engine, &service) {
            Some(status) => Ok(Response::new(response(status))),
            None => Err(grpc_status(&Error::not_found(format!(
                "unknown service '{service}'"
            )))),
        }
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let service = request.into_inner().service;
        let updates = watch_updates(self.engine.clone(), service, self.stop.clone());
        Ok(Response::new(Box::pin(updates)))
    }
}

/// Sends the current status, then each change (polled every second). As
/// the health protocol asks, an unknown service is SERVICE_UNKNOWN rather
/// than an error. Ends at server shutdown, after a last status, so that the
/// graceful drain is not held open; a client that goes away drops it.
fn watch_updates(
    engine: Engine,
    service: String,
    mut stop: watch::Receiver<bool>,
) -> impl Stream<Item = Result<HealthCheckResponse, Status>> + Send {
    async_stream::stream! {
        let mut ticker = tokio::time::interval(WATCH_INTERVAL);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last = None;
        loop {
            let stopping = tokio::select! {
                _ = ticker.tick() => false,
                _ = stop.wait_for(|&s| s) => true,
            };
            let now = serving_status(&engine, &service).unwrap_or(ServingStatus::ServiceUnknown);
            if last != Some(now) {
                last = Some(now);
                yield Ok(response(now));
            }
            if stopping {
                break;
            }
        }
    }
}
