//! Event and span fields written `name=value`, strings unquoted: the whole
//! message is quoted once as a JSON string by the line format, and quotes
//! inside it would come out escaped (`model=\"simple\"`).

use std::fmt::{self, Debug};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// The field formatter of Nereid's log lines.
#[derive(Debug, Default)]
pub struct PlainFields;

impl<'w> FormatFields<'w> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = PlainVisitor {
            writer,
            result: Ok(()),
            first: true,
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct PlainVisitor<'w> {
    writer: Writer<'w>,
    result: fmt::Result,
    first: bool,
}

impl PlainVisitor<'_> {
    fn write(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        if self.result.is_err() {
            return;
        }
        let separator = if self.first { "" } else { " " };
        self.first = false;
        self.result = match field.name() {
            "message" => write!(self.writer, "{separator}{value}"),
            name => write!(self.writer, "{separator}{name}={value}"),
        };
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.write(field, format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.write(field, format_args!("{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn strings_are_unquoted_and_the_message_comes_bare() {
        let out = std::sync::Arc::new(parking_lot::Mutex::new(Vec::<u8>::new()));
        let sink = std::sync::Arc::clone(&out);
        let layer = tracing_subscriber::fmt::layer()
            .fmt_fields(PlainFields)
            .without_time()
            .with_level(false)
            .with_target(false)
            .with_ansi(false)
            .with_writer(move || Sink(std::sync::Arc::clone(&sink)));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(model = "simple", version = 1, "model ready");
        });
        let text = String::from_utf8(out.lock().clone()).unwrap();
        assert_eq!(text.trim(), "model ready model=simple version=1");
    }

    struct Sink(std::sync::Arc<parking_lot::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
