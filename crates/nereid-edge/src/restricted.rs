//! Restricted APIs: tritonserver's `--http-restricted-api` and
//! `--grpc-restricted-protocol`. Each names API groups and the header a
//! request must carry, with its value, to use them; a request without it
//! is refused before any handler runs (HTTP 403, gRPC UNAVAILABLE, with
//! Triton's words). The groups and what falls into each are Triton's.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderMap, HeaderName, Request, Response};

/// Triton's API groups, named as its flags name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiGroup {
    Health,
    Metadata,
    Inference,
    SharedMemory,
    ModelConfig,
    ModelRepository,
    Statistics,
    Trace,
    Logging,
}

impl ApiGroup {
    const ALL: [ApiGroup; 9] = [
        ApiGroup::Health,
        ApiGroup::Metadata,
        ApiGroup::Inference,
        ApiGroup::SharedMemory,
        ApiGroup::ModelConfig,
        ApiGroup::ModelRepository,
        ApiGroup::Statistics,
        ApiGroup::Trace,
        ApiGroup::Logging,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ApiGroup::Health => "health",
            ApiGroup::Metadata => "metadata",
            ApiGroup::Inference => "inference",
            ApiGroup::SharedMemory => "shared-memory",
            ApiGroup::ModelConfig => "model-config",
            ApiGroup::ModelRepository => "model-repository",
            ApiGroup::Statistics => "statistics",
            ApiGroup::Trace => "trace",
            ApiGroup::Logging => "logging",
        }
    }

    fn from_name(name: &str) -> Option<ApiGroup> {
        ApiGroup::ALL.into_iter().find(|g| g.name() == name)
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The group of an HTTP request path, as Triton's URL patterns sort
    /// them; `None` for a path outside every group (it is answered 404).
    pub fn of_http_path(path: &str) -> Option<ApiGroup> {
        let path = path.strip_suffix('/').unwrap_or(path);
        let rest = match path.strip_prefix("/v2") {
            Some("") => return Some(ApiGroup::Metadata),
            Some(rest) => rest.strip_prefix('/')?,
            None => return None,
        };
        let mut parts = rest.split('/');
        match parts.next()? {
            "health" => Some(ApiGroup::Health),
            "repository" => Some(ApiGroup::ModelRepository),
            "systemsharedmemory" | "cudasharedmemory" => Some(ApiGroup::SharedMemory),
            "trace" => Some(ApiGroup::Trace),
            "logging" => Some(ApiGroup::Logging),
            "models" => {
                let model = parts.next()?;
                let mut tail: Vec<&str> = parts.collect();
                if tail.is_empty() && model == "stats" {
                    return Some(ApiGroup::Statistics);
                }
                if tail.first() == Some(&"versions") && tail.len() >= 2 {
                    tail.drain(..2);
                }
                match tail.as_slice() {
                    [] => Some(ApiGroup::Metadata),
                    ["ready"] => Some(ApiGroup::Health),
                    ["config"] => Some(ApiGroup::ModelConfig),
                    ["infer" | "generate" | "generate_stream"] => Some(ApiGroup::Inference),
                    ["stats"] => Some(ApiGroup::Statistics),
                    ["trace", "setting"] => Some(ApiGroup::Trace),
                    // Nereid's traffic endpoint moves labels: as a load does.
                    ["traffic"] | ["traffic", "rollback"] => Some(ApiGroup::ModelRepository),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The group of a gRPC method path (`/package.Service/Method`).
    pub fn of_grpc_path(path: &str) -> Option<ApiGroup> {
        let (service, method) = path.strip_prefix('/')?.split_once('/')?;
        if service == "grpc.health.v1.Health" {
            return Some(ApiGroup::Health);
        }
        if service != "inference.GRPCInferenceService" {
            return None;
        }
        Some(match method {
            "ServerLive" | "ServerReady" | "ModelReady" => ApiGroup::Health,
            "ServerMetadata" | "ModelMetadata" => ApiGroup::Metadata,
            "ModelInfer" | "ModelStreamInfer" => ApiGroup::Inference,
            "ModelConfig" => ApiGroup::ModelConfig,
            "ModelStatistics" => ApiGroup::Statistics,
            "RepositoryIndex" | "RepositoryModelLoad" | "RepositoryModelUnload" => {
                ApiGroup::ModelRepository
            }
            "TraceSetting" => ApiGroup::Trace,
            "LogSettings" => ApiGroup::Logging,
            m if m.starts_with("SystemSharedMemory") || m.starts_with("CudaSharedMemory") => {
                ApiGroup::SharedMemory
            }
            _ => return None,
        })
    }
}

/// The header (and its value) a restricted group asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    /// As the flag spelled it, for the error message.
    spelled: String,
    header: HeaderName,
    value: String,
}

/// Which groups of one endpoint are restricted, and to which header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restrictions {
    keys: [Option<Key>; 9],
}

/// The endpoint a set of restrictions is for: it decides the flag named in
/// errors, the prefix of the gRPC header and how a refusal is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Grpc,
}

impl Protocol {
    fn flag(self) -> &'static str {
        match self {
            Protocol::Http => "--http-restricted-api",
            Protocol::Grpc => "--grpc-restricted-protocol",
        }
    }

    /// Triton prefixes gRPC restriction headers so that they cannot clash
    /// with gRPC's own metadata.
    fn header_prefix(self) -> &'static str {
        match self {
            Protocol::Http => "",
            Protocol::Grpc => "triton-grpc-protocol-",
        }
    }
}

impl Restrictions {
    /// Parses the flag's values, `<group>[,<group>...]:<header>=<value>`
    /// each, with tritonserver's errors: an unknown group, a malformed
    /// value, or a group named twice.
    pub fn parse(protocol: Protocol, values: &[String]) -> Result<Restrictions, String> {
        let mut restrictions = Restrictions::default();
        for value in values {
            let malformed = || {
                format!(
                    "{} option format is '<config name>:<setting>=<value>'. Got {value}",
                    protocol.flag()
                )
            };
            let (groups, key) = value.split_once(':').ok_or_else(malformed)?;
            let (header, expected) = key.split_once('=').ok_or_else(malformed)?;
            if groups.is_empty() || header.is_empty() || expected.is_empty() {
                return Err(malformed());
            }
            let spelled = format!("{}{header}", protocol.header_prefix());
            let name =
                HeaderName::from_bytes(spelled.to_ascii_lowercase().as_bytes()).map_err(|_| {
                    format!("{}: '{header}' is not a valid header name", protocol.flag())
                })?;
            for group in groups.split(',') {
                let group = ApiGroup::from_name(group)
                    .ok_or_else(|| format!("unknown restricted api '{group}'"))?;
                let slot = &mut restrictions.keys[group.index()];
                if slot.is_some() {
                    return Err(format!(
                        "restricted api '{}' can not be specified in multiple config groups",
                        group.name()
                    ));
                }
                *slot = Some(Key {
                    spelled: spelled.clone(),
                    header: name.clone(),
                    value: expected.to_string(),
                });
            }
        }
        Ok(restrictions)
    }

    /// `Err` with the header expected when `group` is restricted and
    /// `headers` lack its key.
    fn check(&self, group: ApiGroup, headers: &HeaderMap) -> Result<(), &str> {
        let Some(key) = &self.keys[group.index()] else {
            return Ok(());
        };
        let granted = headers
            .get_all(&key.header)
            .iter()
            .any(|v| v.as_bytes() == key.value.as_bytes());
        if granted { Ok(()) } else { Err(&key.spelled) }
    }
}

/// A tower layer that refuses requests to restricted groups without their
/// header, for the HTTP (axum) and gRPC (tonic) routers alike.
pub struct RestrictLayer<B> {
    inner: Arc<Restrict<B>>,
}

impl<B> Clone for RestrictLayer<B> {
    fn clone(&self) -> Self {
        RestrictLayer {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Restrict<B> {
    restrictions: Restrictions,
    group_of: fn(&str) -> Option<ApiGroup>,
    refuse: fn(&str) -> Response<B>,
}

impl<B> fmt::Debug for RestrictLayer<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestrictLayer")
            .field("restrictions", &self.inner.restrictions)
            .finish()
    }
}

impl<B> RestrictLayer<B> {
    /// `group_of` sorts a request path into its group; `refuse` answers a
    /// request that lacks the header named.
    pub fn new(
        restrictions: Restrictions,
        group_of: fn(&str) -> Option<ApiGroup>,
        refuse: fn(&str) -> Response<B>,
    ) -> Self {
        RestrictLayer {
            inner: Arc::new(Restrict {
                restrictions,
                group_of,
                refuse,
            }),
        }
    }
}

impl<S, B> tower::Layer<S> for RestrictLayer<B> {
    type Service = RestrictService<S, B>;

    fn layer(&self, service: S) -> Self::Service {
        RestrictService {
            service,
            rules: Arc::clone(&self.inner),
        }
    }
}

/// The service [`RestrictLayer`] makes.
pub struct RestrictService<S, B> {
    service: S,
    rules: Arc<Restrict<B>>,
}

impl<S: Clone, B> Clone for RestrictService<S, B> {
    fn clone(&self) -> Self {
        RestrictService {
            service: self.service.clone(),
            rules: Arc::clone(&self.rules),
        }
    }
}

impl<S, B> fmt::Debug for RestrictService<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestrictService").finish_non_exhaustive()
    }
}

impl<S, ReqBody, B> tower::Service<Request<ReqBody>> for RestrictService<S, B>
where
    S: tower::Service<Request<ReqBody>, Response = Response<B>>,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future =
        futures::future::Either<S::Future, std::future::Ready<Result<Response<B>, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.service.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let rules = &self.rules;
        if let Some(group) = (rules.group_of)(request.uri().path())
            && let Err(header) = rules.restrictions.check(group, request.headers())
        {
            tracing::debug!(
                path = request.uri().path(),
                group = group.name(),
                "refused: a restricted API without its header"
            );
            return futures::future::Either::Right(std::future::ready(Ok((rules.refuse)(header))));
        }
        futures::future::Either::Left(self.service.call(request))
    }
}

/// Triton's words for a refused request.
pub fn refusal(protocol: Protocol, header: &str) -> String {
    match protocol {
        Protocol::Http => format!("This API is restricted, expecting header '{header}'"),
        Protocol::Grpc => format!("This protocol is restricted, expecting header '{header}'"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(protocol: Protocol, values: &[&str]) -> Result<Restrictions, String> {
        let values: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        Restrictions::parse(protocol, &values)
    }

    #[test]
    fn flags_parse_with_tritons_errors() {
        let r = parse(
            Protocol::Http,
            &[
                "model-repository,shared-memory:Admin-Key=secret",
                "statistics:k=v=w",
            ],
        )
        .unwrap();
        let mut headers = HeaderMap::new();
        assert_eq!(
            r.check(ApiGroup::ModelRepository, &headers),
            Err("Admin-Key")
        );
        assert_eq!(r.check(ApiGroup::Inference, &headers), Ok(()));
        headers.insert("admin-key", "secret".parse().unwrap());
        assert_eq!(r.check(ApiGroup::SharedMemory, &headers), Ok(()));
        headers.insert("k", "v=w".parse().unwrap());
        assert_eq!(r.check(ApiGroup::Statistics, &headers), Ok(()));
        headers.insert("admin-key", "Secret".parse().unwrap());
        assert!(r.check(ApiGroup::ModelRepository, &headers).is_err());

        for bad in ["health", "health:k", "health:=v", "health:k=", ":k=v"] {
            assert_eq!(
                parse(Protocol::Http, &[bad]).unwrap_err(),
                format!(
                    "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got {bad}"
                )
            );
        }
        assert_eq!(
            parse(Protocol::Grpc, &["health,bogus:k=v"]).unwrap_err(),
            "unknown restricted api 'bogus'"
        );
        assert_eq!(
            parse(Protocol::Grpc, &["Health:k=v"]).unwrap_err(),
            "unknown restricted api 'Health'"
        );
        for twice in [&["health:k=v", "health:j=w"][..], &["health,health:k=v"]] {
            assert_eq!(
                parse(Protocol::Http, twice).unwrap_err(),
                "restricted api 'health' can not be specified in multiple config groups"
            );
        }
    }

    #[test]
    fn grpc_headers_carry_tritons_prefix() {
        let r = parse(Protocol::Grpc, &["inference:infer-key=k"]).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("infer-key", "k".parse().unwrap());
        assert_eq!(
            r.check(ApiGroup::Inference, &headers),
            Err("triton-grpc-protocol-infer-key")
        );
        headers.insert("triton-grpc-protocol-infer-key", "k".parse().unwrap());
        assert_eq!(r.check(ApiGroup::Inference, &headers), Ok(()));
    }

    #[test]
    fn http_paths_fall_into_tritons_groups() {
        let cases = [
            ("/v2", Some(ApiGroup::Metadata)),
            ("/v2/", Some(ApiGroup::Metadata)),
            ("/v2/health/live", Some(ApiGroup::Health)),
            ("/v2/health/ready", Some(ApiGroup::Health)),
            ("/v2/models/m/ready", Some(ApiGroup::Health)),
            ("/v2/models/m/versions/1/ready", Some(ApiGroup::Health)),
            ("/v2/models/m", Some(ApiGroup::Metadata)),
            ("/v2/models/m/versions/1", Some(ApiGroup::Metadata)),
            ("/v2/models/m/config", Some(ApiGroup::ModelConfig)),
            ("/v2/models/m/infer", Some(ApiGroup::Inference)),
            ("/v2/models/m/versions/2/infer", Some(ApiGroup::Inference)),
            ("/v2/models/m/generate_stream", Some(ApiGroup::Inference)),
            ("/v2/models/stats", Some(ApiGroup::Statistics)),
            ("/v2/models/m/stats", Some(ApiGroup::Statistics)),
            ("/v2/repository/index", Some(ApiGroup::ModelRepository)),
            (
                "/v2/repository/models/m/load",
                Some(ApiGroup::ModelRepository),
            ),
            (
                "/v2/systemsharedmemory/status",
                Some(ApiGroup::SharedMemory),
            ),
            (
                "/v2/systemsharedmemory/region/r/register",
                Some(ApiGroup::SharedMemory),
            ),
            ("/v2/cudasharedmemory/status", Some(ApiGroup::SharedMemory)),
            ("/v2/trace/setting", Some(ApiGroup::Trace)),
            ("/v2/models/m/trace/setting", Some(ApiGroup::Trace)),
            ("/v2/logging", Some(ApiGroup::Logging)),
            ("/v2/nothing", None),
            ("/metrics", None),
            ("/v2/models/m/bogus", None),
        ];
        for (path, group) in cases {
            assert_eq!(ApiGroup::of_http_path(path), group, "{path}");
        }
    }

    #[test]
    fn grpc_methods_fall_into_tritons_groups() {
        let service = "/inference.GRPCInferenceService/";
        let cases = [
            ("ServerLive", Some(ApiGroup::Health)),
            ("ModelReady", Some(ApiGroup::Health)),
            ("ServerMetadata", Some(ApiGroup::Metadata)),
            ("ModelConfig", Some(ApiGroup::ModelConfig)),
            ("ModelStreamInfer", Some(ApiGroup::Inference)),
            ("ModelStatistics", Some(ApiGroup::Statistics)),
            ("RepositoryModelUnload", Some(ApiGroup::ModelRepository)),
            ("SystemSharedMemoryRegister", Some(ApiGroup::SharedMemory)),
            ("CudaSharedMemoryStatus", Some(ApiGroup::SharedMemory)),
            ("TraceSetting", Some(ApiGroup::Trace)),
            ("LogSettings", Some(ApiGroup::Logging)),
            ("Nothing", None),
        ];
        for (method, group) in cases {
            assert_eq!(
                ApiGroup::of_grpc_path(&format!("{service}{method}")),
                group,
                "{method}"
            );
        }
        assert_eq!(
            ApiGroup::of_grpc_path("/grpc.health.v1.Health/Check"),
            Some(ApiGroup::Health)
        );
        assert_eq!(ApiGroup::of_grpc_path("/other.Service/ModelInfer"), None);
    }
}
