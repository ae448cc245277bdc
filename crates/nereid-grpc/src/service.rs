//! `inference.GRPCInferenceService` over the engine. Extensions this server
//! does not implement answer UNIMPLEMENTED naming the extension, never a
//! pretended success.

use std::pin::Pin;

use futures::Stream;
use nereid_core::{Activity, Error};
use nereid_engine::{Engine, VersionStatistics};
use nereid_protocol::inference::grpc_inference_service_server::GrpcInferenceService;
use nereid_protocol::inference::*;
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};

use super::trace::{Arrived, SendTraced, traceparent};
use super::{convert, labels, shared_memory, stream};
use nereid_edge::error::grpc_status;
use nereid_edge::logging::LogControl;
use nereid_edge::{info, model_control};
use nereid_trace::Tracer;

/// The inference service: the engine, and the shutdown signal that ends
/// open streams.
pub struct InferenceService {
    engine: Engine,
    log: LogControl,
    tracer: Tracer,
    stop: watch::Receiver<bool>,
}

impl InferenceService {
    pub fn new(
        engine: Engine,
        log: LogControl,
        tracer: Tracer,
        stop: watch::Receiver<bool>,
    ) -> InferenceService {
        InferenceService {
            engine,
            log,
            tracer,
            stop,
        }
    }
}

type Rpc<T> = Result<Response<T>, Status>;

/// Converts a core result into a gRPC answer.
fn answer<T>(result: Result<T, Error>) -> Rpc<T> {
    result.map(Response::new).map_err(|e| grpc_status(&e))
}

#[tonic::async_trait]
impl GrpcInferenceService for InferenceService {
    async fn server_live(&self, _: Request<ServerLiveRequest>) -> Rpc<ServerLiveResponse> {
        answer(Ok(ServerLiveResponse {
            live: self.engine.is_live(),
        }))
    }

    async fn server_ready(&self, _: Request<ServerReadyRequest>) -> Rpc<ServerReadyResponse> {
        answer(Ok(ServerReadyResponse {
            ready: self.engine.is_ready(),
        }))
    }

    /// Like Triton, an unknown model or version is `ready: false`, not an
    /// error; only a malformed version string is.
    async fn model_ready(&self, request: Request<ModelReadyRequest>) -> Rpc<ModelReadyResponse> {
        let r = request.into_inner();
        answer(
            labels::model_version(&self.engine, &r.name, &r.version).map(|version| {
                ModelReadyResponse {
                    ready: self.engine.model_ready(&r.name, version),
                }
            }),
        )
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Rpc<ServerMetadataResponse> {
        answer(Ok(ServerMetadataResponse {
            name: info::SERVER_NAME.to_string(),
            version: info::SERVER_VERSION.to_string(),
            extensions: info::extensions(&self.engine)
                .into_iter()
                .map(str::to_string)
                .collect(),
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Rpc<ModelMetadataResponse> {
        let r = request.into_inner();
        let _kept = match self.engine.load_on_request(&r.name, None).await {
            Ok(kept) => kept,
            Err(e) => return answer(Err(e)),
        };
        answer(
            labels::model_version(&self.engine, &r.name, &r.version)
                .and_then(|version| {
                    let metadata = self.engine.model_metadata(&r.name, version)?;
                    Ok(metadata.for_version(version))
                })
                .map(convert::model_metadata),
        )
    }

    /// Unary inference. If the client cancels or its deadline passes, tonic
    /// drops this future and with it the engine's, which abandons the
    /// request: nothing here is spawned detached.
    async fn model_infer(&self, request: Request<ModelInferRequest>) -> Rpc<ModelInferResponse> {
        let key = labels::routing_key(request.metadata());
        let model = &request.get_ref().model_name;
        let Some(trace) = self.tracer.sample(model, traceparent(request.metadata())) else {
            return answer(stream::infer(&self.engine, request.into_inner(), None, key).await);
        };
        if let Some(Arrived(at)) = request.extensions().get::<Arrived>() {
            trace.record_at(Activity::GrpcWaitreadStart, *at);
        }
        trace.record(Activity::GrpcWaitreadEnd);
        let result =
            stream::infer(&self.engine, request.into_inner(), Some(trace.clone()), key).await;
        trace.record(Activity::GrpcSendStart);
        let mut response = answer(result)?;
        response.extensions_mut().insert(SendTraced(trace));
        Ok(response)
    }

    type ModelStreamInferStream =
        Pin<Box<dyn Stream<Item = Result<ModelStreamInferResponse, Status>> + Send>>;

    async fn model_stream_infer(
        &self,
        request: Request<Streaming<ModelInferRequest>>,
    ) -> Rpc<Self::ModelStreamInferStream> {
        let answers = stream::answers(
            self.engine.clone(),
            self.tracer.clone(),
            request,
            self.stop.clone(),
        );
        answer(Ok(Box::pin(answers) as Self::ModelStreamInferStream))
    }

    async fn model_config(&self, request: Request<ModelConfigRequest>) -> Rpc<ModelConfigResponse> {
        let r = request.into_inner();
        let _kept = match self.engine.load_on_request(&r.name, None).await {
            Ok(kept) => kept,
            Err(e) => return answer(Err(e)),
        };
        answer(
            labels::model_version(&self.engine, &r.name, &r.version)
                .and_then(|version| self.engine.model_config(&r.name, version))
                .map(|config| ModelConfigResponse {
                    config: Some(config.as_ref().clone()),
                }),
        )
    }

    async fn model_statistics(
        &self,
        request: Request<ModelStatisticsRequest>,
    ) -> Rpc<ModelStatisticsResponse> {
        let r = request.into_inner();
        answer(statistics(&self.engine, &r.name, &r.version).map(convert::model_statistics))
    }

    async fn repository_index(
        &self,
        request: Request<RepositoryIndexRequest>,
    ) -> Rpc<RepositoryIndexResponse> {
        let r = request.into_inner();
        if !r.repository_name.is_empty() {
            return answer(Err(repository_name_unsupported()));
        }
        answer(Ok(convert::repository_index(self.engine.index(), r.ready)))
    }

    async fn repository_model_load(
        &self,
        request: Request<RepositoryModelLoadRequest>,
    ) -> Rpc<RepositoryModelLoadResponse> {
        let r = request.into_inner();
        if !r.repository_name.is_empty() {
            return answer(Err(repository_name_unsupported()));
        }
        let params = convert::repository_params(r.parameters);
        let load = model_control::load_request(&r.model_name, params);
        let result = match load {
            Ok(load) => self.engine.load_model(&r.model_name, load).await,
            Err(e) => Err(e),
        };
        answer(result.map(|()| RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        request: Request<RepositoryModelUnloadRequest>,
    ) -> Rpc<RepositoryModelUnloadResponse> {
        let r = request.into_inner();
        if !r.repository_name.is_empty() {
            return answer(Err(repository_name_unsupported()));
        }
        let params = convert::repository_params(r.parameters);
        let result = match model_control::unload_dependents(&r.model_name, params) {
            Ok(dependents) => self.engine.unload_model(&r.model_name, dependents).await,
            Err(e) => Err(e),
        };
        answer(result.map(|()| RepositoryModelUnloadResponse {}))
    }

    async fn system_shared_memory_status(
        &self,
        request: Request<SystemSharedMemoryStatusRequest>,
    ) -> Rpc<SystemSharedMemoryStatusResponse> {
        answer(shared_memory::system_status(
            &self.engine,
            request.into_inner(),
        ))
    }

    async fn system_shared_memory_register(
        &self,
        request: Request<SystemSharedMemoryRegisterRequest>,
    ) -> Rpc<SystemSharedMemoryRegisterResponse> {
        answer(shared_memory::system_register(
            &self.engine,
            request.into_inner(),
        ))
    }

    async fn system_shared_memory_unregister(
        &self,
        request: Request<SystemSharedMemoryUnregisterRequest>,
    ) -> Rpc<SystemSharedMemoryUnregisterResponse> {
        let r = request.into_inner();
        answer(Ok(shared_memory::system_unregister(&self.engine, r)))
    }

    async fn cuda_shared_memory_status(
        &self,
        request: Request<CudaSharedMemoryStatusRequest>,
    ) -> Rpc<CudaSharedMemoryStatusResponse> {
        answer(shared_memory::cuda_status(
            &self.engine,
            request.into_inner(),
        ))
    }

    async fn cuda_shared_memory_register(
        &self,
        request: Request<CudaSharedMemoryRegisterRequest>,
    ) -> Rpc<CudaSharedMemoryRegisterResponse> {
        answer(shared_memory::cuda_register(
            &self.engine,
            request.into_inner(),
        ))
    }

    async fn cuda_shared_memory_unregister(
        &self,
        request: Request<CudaSharedMemoryUnregisterRequest>,
    ) -> Rpc<CudaSharedMemoryUnregisterResponse> {
        answer(Ok(shared_memory::cuda_unregister(
            &self.engine,
            request.into_inner(),
        )))
    }

    async fn trace_setting(
        &self,
        request: Request<TraceSettingRequest>,
    ) -> Rpc<TraceSettingResponse> {
        answer(super::trace::trace_setting(
            &self.engine,
            &self.tracer,
            request.into_inner(),
        ))
    }

    async fn log_settings(&self, request: Request<LogSettingsRequest>) -> Rpc<LogSettingsResponse> {
        answer(super::logging::log_settings(
            &self.log,
            request.into_inner(),
        ))
    }
}

/// Triton's answer to a repository RPC that names a repository.
fn repository_name_unsupported() -> Error {
    Error::unsupported("'repository_name' specification is not supported")
}

/// Statistics as Triton's `ModelStatistics` answers them: an empty name
/// means every model (and ignores the version); the engine words unknown
/// models and versions as Triton does.
fn statistics(engine: &Engine, name: &str, version: &str) -> Result<Vec<VersionStatistics>, Error> {
    let version = labels::model_version(engine, name, version)?;
    if name.is_empty() {
        return engine.statistics(None, None);
    }
    engine.statistics(Some(name), version)
}
