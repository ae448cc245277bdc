//! Every inference has a `tracing` span, whatever the frontend: the
//! engine's `infer` span carries the model, the version that served, the
//! request id, and its queue and compute times; the span of the batch
//! that ran it follows from it. Its own test binary: the subscriber that
//! watches is the process's global one (instance threads are threads of
//! their own).

#![expect(clippy::unwrap_used, reason = "test helpers may panic")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{CONFIG, InferOne, request, write_model};
use nereid_engine::ControlMode;
use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span as the layer saw it: its name, fields and what it follows.
#[derive(Debug, Default, Clone)]
struct Seen {
    name: String,
    fields: BTreeMap<String, String>,
    follows: Vec<u64>,
}

#[derive(Default, Clone)]
struct Spans(Arc<Mutex<BTreeMap<u64, Seen>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut seen = Seen {
            name: attrs.metadata().name().to_string(),
            ..Seen::default()
        };
        attrs.record(&mut Fields(&mut seen.fields));
        self.0.lock().insert(id.into_u64(), seen);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(seen) = self.0.lock().get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, _: Context<'_, S>) {
        if let Some(seen) = self.0.lock().get_mut(&id.into_u64()) {
            seen.follows.push(follows.into_u64());
        }
    }
}

#[tokio::test]
async fn an_inference_has_a_span_and_its_batch_follows_from_it() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "m", CONFIG, "plain");
    let (engine, _controls) = common::engine(root.path(), ControlMode::None, &["*"]);
    engine.load_all().unwrap();
    let mut r = request("m", &[1, 2]);
    r.id = "r-7".into();
    engine.infer_one(r).await.unwrap();

    let seen = spans.0.lock().clone();
    let (id, infer) = seen
        .iter()
        .find(|(_, s)| s.name == "infer")
        .expect("an infer span");
    assert_eq!(infer.fields["model"], "m");
    assert_eq!(infer.fields["id"], "r-7");
    assert_eq!(infer.fields["version"], "1");
    assert!(infer.fields.contains_key("queue_us"), "{infer:?}");
    assert!(infer.fields.contains_key("compute_us"), "{infer:?}");
    let batch = seen
        .values()
        .find(|s| s.name == "batch")
        .expect("a batch span");
    assert_eq!(batch.follows, [*id]);
    assert_eq!(batch.fields["size"], "1");
}
