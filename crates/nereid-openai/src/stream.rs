//! Streamed answers as server-sent events: `data: {json}\n\n` per chunk,
//! a usage chunk when `stream_options.include_usage` asks for it, then
//! `data: [DONE]\n\n`. A model error midway is sent as an event with
//! OpenAI's error body, and the stream ends there (OpenAI's clients raise
//! it). A client that goes away drops the stream, which cancels the
//! model's request.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{Stream, StreamExt};

use super::error::ApiError;
use super::generate::{Generation, Step, Tally};
use super::schema::Usage;

/// How one route writes its chunks.
pub trait Chunks: Send + 'static {
    /// The chunk before the model's first response, if the route sends one.
    fn opening(&self) -> Option<String>;
    /// A chunk with the text of one response; `finish` on the last.
    fn piece(&self, text: String, finish: Option<&'static str>) -> String;
    /// The chunk that carries the usage, with no choices.
    fn usage(&self, usage: Usage) -> String;
}

/// The event-stream response for `steps`.
pub fn respond(
    steps: impl Stream<Item = Result<Step, ApiError>> + Send + 'static,
    chunks: impl Chunks,
    generation: Generation,
    include_usage: bool,
) -> Response {
    let events = events(steps, chunks, generation, include_usage);
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(events.map(Ok::<_, Infallible>)),
    )
        .into_response()
}

fn events(
    steps: impl Stream<Item = Result<Step, ApiError>> + Send + 'static,
    chunks: impl Chunks,
    generation: Generation,
    include_usage: bool,
) -> impl Stream<Item = Bytes> + Send {
    async_stream::stream! {
        if let Some(opening) = chunks.opening() {
            yield event(&opening);
        }
        let mut tally = Tally::default();
        futures::pin_mut!(steps);
        while let Some(step) = steps.next().await {
            match step {
                Ok(step) => {
                    tally.add(&step.piece);
                    let finish = step.last.then(|| generation.finish_reason(tally.usage()));
                    yield event(&chunks.piece(step.piece.text, finish));
                }
                Err(error) => {
                    tracing::warn!(error = %error.message, "an OpenAI stream failed midway");
                    yield event(&error.to_json());
                    return;
                }
            }
        }
        if include_usage && let Some(usage) = tally.usage() {
            yield event(&chunks.usage(usage));
        }
        yield Bytes::from_static(b"data: [DONE]\n\n");
    }
}

fn event(json: &str) -> Bytes {
    Bytes::from(format!("data: {json}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{Piece, SamplingParameters};

    struct Plain;

    impl Chunks for Plain {
        fn opening(&self) -> Option<String> {
            Some("open".into())
        }
        fn piece(&self, text: String, finish: Option<&'static str>) -> String {
            format!("{text}|{}", finish.unwrap_or("-"))
        }
        fn usage(&self, usage: Usage) -> String {
            format!("usage {}", usage.total_tokens)
        }
    }

    fn generation(max_tokens: u32) -> Generation {
        Generation {
            prompt: String::new(),
            stream: true,
            echo: false,
            max_tokens,
            stop: Vec::new(),
            sampling: SamplingParameters {
                frequency_penalty: 0.0,
                ignore_eos: false,
                min_tokens: None,
                n: 1,
                presence_penalty: 0.0,
                seed: None,
                stop: None,
                temperature: 1.0,
                top_p: 1.0,
                max_tokens,
            },
        }
    }

    fn step(text: &str, last: bool) -> Result<Step, ApiError> {
        Ok(Step {
            piece: Piece {
                text: text.into(),
                prompt_tokens: Some(2),
                completion_tokens: Some(u64::from(!text.is_empty())),
            },
            last,
        })
    }

    async fn body(steps: Vec<Result<Step, ApiError>>, max_tokens: u32, usage: bool) -> String {
        let events = events(
            futures::stream::iter(steps),
            Plain,
            generation(max_tokens),
            usage,
        );
        let all: Vec<Bytes> = events.collect().await;
        all.iter().map(|b| String::from_utf8_lossy(b)).collect()
    }

    #[tokio::test]
    async fn events_end_with_usage_and_done() {
        let steps = vec![step("a", false), step("b", false), step("", true)];
        assert_eq!(
            body(steps, 16, true).await,
            "data: open\n\ndata: a|-\n\ndata: b|-\n\ndata: |stop\n\n\
             data: usage 4\n\ndata: [DONE]\n\n"
        );
        let steps = vec![step("a", false), step("b", true)];
        assert_eq!(
            body(steps, 2, false).await,
            "data: open\n\ndata: a|-\n\ndata: b|length\n\ndata: [DONE]\n\n"
        );
    }

    #[tokio::test]
    async fn an_error_midway_is_the_last_event() {
        let steps = vec![
            step("a", false),
            Err(ApiError::server("boom")),
            step("b", true),
        ];
        let body = body(steps, 16, true).await;
        assert!(
            body.starts_with("data: open\n\ndata: a|-\n\ndata: {\"error\""),
            "{body}"
        );
        assert!(
            body.ends_with("}\n\n") && !body.contains("[DONE]"),
            "{body}"
        );
    }
}
