//! Tracing over gRPC: the `TraceSetting` RPC, and the layer that gives
//! each call its arrival time (`GRPC_WAITREAD_START`) and records
//! `GRPC_SEND_END` once a traced answer has been sent.

use std::time::Instant;

use nereid_core::{Activity, Error, Trace};
use nereid_engine::Engine;
use nereid_protocol::inference::trace_setting_response::SettingValue;
use nereid_protocol::inference::{TraceSettingRequest, TraceSettingResponse};

use nereid_edge::check_model;
use nereid_trace::settings::update_from_lists;
use nereid_trace::{TracedBody, Tracer};

/// Applies the request's settings (none: only reads) to the model it names
/// (none: the global settings) and answers them all.
pub fn trace_setting(
    engine: &Engine,
    tracer: &Tracer,
    request: TraceSettingRequest,
) -> Result<TraceSettingResponse, Error> {
    let model = match request.model_name.as_str() {
        "" => None,
        model => {
            check_model(engine, model)?;
            Some(model)
        }
    };
    if !request.settings.is_empty() {
        let update = update_from_lists(
            request
                .settings
                .iter()
                .map(|(key, value)| (key.as_str(), value.value.as_slice())),
        )?;
        tracer.update(model, &update)?;
    }
    Ok(TraceSettingResponse {
        settings: tracer
            .settings(model)
            .into_iter()
            .map(|(key, shown)| {
                let value = SettingValue {
                    value: shown.into_list(),
                };
                (key.to_string(), value)
            })
            .collect(),
    })
}

/// When a call's request arrived, in its extensions.
#[derive(Debug, Clone, Copy)]
pub struct Arrived(pub Instant);

/// In a traced answer's extensions: the trace that records the send.
#[derive(Debug, Clone)]
pub struct SendTraced(pub Trace);

/// Stamps each call's arrival.
pub fn stamp_arrival<B>(mut request: http::Request<B>) -> http::Request<B> {
    request.extensions_mut().insert(Arrived(Instant::now()));
    request
}

/// Records `GRPC_SEND_END` on the answer's trace once its body is sent.
pub fn trace_send(
    mut response: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    match response.extensions_mut().remove::<SendTraced>() {
        Some(SendTraced(trace)) => response.map(|body| {
            tonic::body::Body::new(TracedBody::new(body, trace, Activity::GrpcSendEnd))
        }),
        None => response,
    }
}

/// The client's W3C trace context, for OpenTelemetry.
pub fn traceparent(metadata: &tonic::metadata::MetadataMap) -> Option<&str> {
    metadata.get("traceparent").and_then(|v| v.to_str().ok())
}
