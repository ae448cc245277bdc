//! The one entry every frontend calls: [`Engine::infer`] takes a request
//! and [`Call`] (who makes it, what answers it takes) and answers one
//! response or a decoupled model's stream.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use nereid_core::{Error, InferRequest, InferResponse};
use tracing::Instrument;

use crate::handle::{Engine, InFlight};
use crate::job::Streamed;
use crate::model::LoadedVersion;
use crate::traffic;

impl Engine {
    /// Runs one inference: the one way in for every frontend. The request
    /// goes to the version it names (a number, or a label resolved now) or
    /// the one the model's traffic settings choose; inputs and outputs
    /// placed in shared memory are read from and written to their
    /// registered regions. A decoupled model's responses come as a stream,
    /// as they are made, when the call takes one ([`Call::stream`]); any
    /// other model's answer comes whole. Shared memory outputs are for
    /// single answers only.
    pub async fn infer(&self, request: InferRequest, call: Call) -> Result<Answer, Error> {
        let span = tracing::debug_span!(
            "infer",
            model = %request.model_name,
            version = tracing::field::Empty,
            id = %request.id,
            nested = call.nested,
            queue_us = tracing::field::Empty,
            compute_us = tracing::field::Empty,
        );
        self.infer_in(request, call).instrument(span).await
    }

    async fn infer_in(&self, mut request: InferRequest, call: Call) -> Result<Answer, Error> {
        if !call.nested && self.inner.stopping.load(Ordering::SeqCst) {
            return Err(Error::unavailable("the server is shutting down"));
        }
        let counted = InFlight::enter(&self.inner.in_flight);
        let _kept = self
            .load_on_request(&request.model_name, request.routing.timeout)
            .await?;
        let route = self.route(&mut request)?;
        tracing::Span::current().record("version", route.version.version);
        let decoupled = route.version.is_decoupled();
        let refusal = match call.takes {
            Takes::Stream if decoupled => return self.stream_on(route.version, request, counted),
            Takes::Stream => None,
            Takes::One(refusal) => refusal,
        };
        let result = self.infer_on(route, request).await;
        match (decoupled, refusal) {
            // The caller's words for a model it cannot serve (Triton's).
            (true, Some(words)) => Err(Error::unsupported(words)),
            _ => result.map(Answer::One),
        }
    }

    /// Where `request` goes: the version it names, or the one its model's
    /// traffic settings choose (see [`traffic`]).
    fn route(&self, request: &mut InferRequest) -> Result<traffic::Route<LoadedVersion>, Error> {
        self.inner
            .traffic
            .route(&*self.inner.registry.read(), request)
    }

    /// Runs `request` on the version `route` chose, its shared memory
    /// inputs and outputs read and written.
    async fn infer_on(
        &self,
        mut route: traffic::Route<LoadedVersion>,
        mut request: InferRequest,
    ) -> Result<InferResponse, Error> {
        let plan = self.inner.shared_memory.prepare(&mut request)?;
        let watch = route.watch(&request);
        let mut result = route.version.infer(request).await;
        watch.finish(route.version.version, &mut result);
        let mut response = result?;
        plan.write(&mut response)?;
        Ok(response)
    }

    /// Starts `request` on decoupled `model`: its responses as a stream.
    fn stream_on(
        &self,
        model: Arc<LoadedVersion>,
        mut request: InferRequest,
        counted: InFlight,
    ) -> Result<Answer, Error> {
        let plan = self.inner.shared_memory.prepare(&mut request)?;
        if !plan.is_empty() {
            return Err(Error::invalid_argument(format!(
                "model '{}' is decoupled: its outputs cannot go to shared memory regions",
                model.config.name
            )));
        }
        let responses = model.stream(request)?;
        Ok(Answer::Stream(ResponseStream {
            responses,
            in_flight: counted,
        }))
    }
}

/// Who makes a request, and what answers it takes.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// Made by a request already accepted (a Python model's BLS call):
    /// served while the server drains, so that the request making it can
    /// finish.
    pub nested: bool,
    pub takes: Takes,
}

/// The answers a caller takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// One answer, or a decoupled model's responses as a stream.
    Stream,
    /// One answer. A decoupled model is refused: in these words (the
    /// frontend's, as Triton says them), or in the engine's own.
    One(Option<&'static str>),
}

impl Call {
    /// A client that takes one answer.
    pub fn one() -> Call {
        Call {
            nested: false,
            takes: Takes::One(None),
        }
    }

    /// A client that takes a decoupled model's responses as a stream.
    pub fn stream() -> Call {
        Call {
            nested: false,
            takes: Takes::Stream,
        }
    }

    /// A client that takes one answer and refuses a decoupled model with
    /// `words`.
    pub fn one_refusing(words: &'static str) -> Call {
        Call {
            nested: false,
            takes: Takes::One(Some(words)),
        }
    }

    /// The call, made by a request already accepted.
    pub fn nested(self) -> Call {
        Call {
            nested: true,
            ..self
        }
    }
}

/// What [`Engine::infer`] answers.
#[derive(Debug)]
pub enum Answer {
    /// The one answer of a model that is not decoupled.
    One(InferResponse),
    /// A decoupled model's responses.
    Stream(ResponseStream),
}

impl Answer {
    /// The one answer, for a call that takes one ([`Call::one`]), which a
    /// decoupled model never gives.
    pub fn one(self) -> Result<InferResponse, Error> {
        match self {
            Answer::One(response) => Ok(response),
            Answer::Stream(_) => Err(Error::internal(
                "a decoupled model's stream came to a call that takes one answer",
            )),
        }
    }
}

/// A decoupled model's responses to one request, as the model sends them;
/// the last is marked. Dropping it cancels the request (the model's
/// `is_cancelled()` turns true) and ends it for the drain.
#[derive(Debug)]
pub struct ResponseStream {
    responses: tokio::sync::mpsc::UnboundedReceiver<Streamed>,
    in_flight: InFlight,
}

impl ResponseStream {
    /// The next response; `None` after the last, or when the model lost
    /// the request without a final flag (its worker died).
    pub async fn next(&mut self) -> Option<Streamed> {
        self.responses.recv().await
    }

    /// The responses the model sent, errors included, up to the one with
    /// the final flag; a final flag sent alone gives none. The request
    /// stays in flight while the stream lives.
    pub fn responses(self) -> impl futures::Stream<Item = Result<InferResponse, Error>> + Send {
        until_last(self.responses, self.in_flight)
    }
}

/// The responses on `responses` up to the one with the final flag, the
/// flag-only ones left out; `held` lives as long as the stream.
pub(crate) fn until_last<H: Send + 'static>(
    responses: tokio::sync::mpsc::UnboundedReceiver<Streamed>,
    held: H,
) -> impl futures::Stream<Item = Result<InferResponse, Error>> + Send {
    futures::stream::unfold(
        (responses, held, false),
        |(mut responses, held, ended)| async move {
            if ended {
                return None;
            }
            loop {
                let streamed = responses.recv().await?;
                if let Some(response) = streamed.response {
                    return Some((response, (responses, held, streamed.last)));
                }
                if streamed.last {
                    return None;
                }
            }
        },
    )
}
