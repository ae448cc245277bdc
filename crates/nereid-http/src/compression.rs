//! Content encodings, as Triton's HTTP frontend handles them: only the
//! infer route reads `Content-Encoding` (gzip and deflate are inflated,
//! identity passes, anything else is 501), and only a successful infer
//! response is compressed, when the client's `Accept-Encoding` picks gzip
//! or deflate by Triton's reading of it. Every other answer goes plain
//! (tritonclient's asyncio client reads them as JSON without inflating).

use std::io::Write;

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use flate2::Compression;
use flate2::write::{GzEncoder, ZlibEncoder};
use nereid_core::Error;

use super::ApiError;

/// How a response body is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Identity,
    Gzip,
    /// The zlib format, which is what HTTP's `deflate` means.
    Deflate,
}

/// The answer to a request body in an encoding other than those Triton
/// takes (named exactly: `gzip`, `deflate`, `identity`): Triton's words,
/// and the encodings it takes. The route's decompression layer inflates
/// the others and passes this one through for the handler to refuse (after
/// the model, as Triton).
pub fn refuse_unknown_encoding(headers: &HeaderMap) -> Option<Response> {
    let encoding = headers.get(header::CONTENT_ENCODING)?;
    if matches!(encoding.as_bytes(), b"gzip" | b"deflate" | b"identity") {
        return None;
    }
    let mut response = ApiError(Error::unsupported("Unsupported compression type")).into_response();
    response.headers_mut().insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("gzip, deflate"),
    );
    Some(response)
}

/// The encoding a response to a request with `headers` gets.
pub fn response_encoding(headers: &HeaderMap) -> Encoding {
    headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|value| value.to_str().ok())
        .map_or(Encoding::Identity, chosen)
}

/// Triton's reading of an `Accept-Encoding` value: of `identity`,
/// `deflate` and `gzip`, the first with the highest weight (`;q=`, 1 by
/// default) above 0; any other name, a malformed weight or a part with
/// spaces after its name counts for nothing.
fn chosen(accept: &str) -> Encoding {
    let mut best = (Encoding::Identity, 0.0);
    for part in accept.split(',') {
        let Some(start) = part.find(|c| c != ' ') else {
            continue;
        };
        let weight_at = part.find(";q=");
        if weight_at.is_some_and(|at| start >= at) {
            continue;
        }
        let weight = match weight_at {
            None => Some(1.0),
            Some(at) => leading_number(&part[at + 3..]),
        };
        let encoding = match &part[start..weight_at.unwrap_or(part.len())] {
            "identity" => Encoding::Identity,
            "deflate" => Encoding::Deflate,
            "gzip" => Encoding::Gzip,
            _ => continue,
        };
        if let Some(weight) = weight.filter(|&w| w > best.1) {
            best = (encoding, weight);
        }
    }
    best.0
}

/// The number at the start of `text`, as C++'s `std::stod` reads it
/// (within its first 32 characters: a weight is a few, and the bound keeps
/// a hostile header cheap).
fn leading_number(text: &str) -> Option<f64> {
    let text: String = text.trim_start().chars().take(32).collect();
    (1..=text.len())
        .rev()
        .filter(|&end| text.is_char_boundary(end))
        .find_map(|end| text[..end].parse().ok())
}

/// `body` compressed with `encoding`, and the `Content-Encoding` that says
/// so; the body as it is for identity.
pub fn compress(body: Bytes, encoding: Encoding) -> (Bytes, Option<&'static str>) {
    let compressed = match encoding {
        Encoding::Identity => return (body, None),
        Encoding::Gzip => gzip(&body).map(|b| (b, "gzip")),
        Encoding::Deflate => zlib(&body).map(|b| (b, "deflate")),
    };
    match compressed {
        Ok((compressed, name)) => (Bytes::from(compressed), Some(name)),
        // As Triton: a body that fails to compress goes plain.
        Err(e) => {
            tracing::debug!(error = %e, "unable to compress response");
            (body, None)
        }
    }
}

fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(body)?;
    encoder.finish()
}

fn zlib(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = ZlibEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(body)?;
    encoder.finish()
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn accept_encoding_is_read_as_triton_reads_it() {
        use Encoding::*;
        for (accept, expected) in [
            ("gzip", Gzip),
            ("deflate", Deflate),
            ("gzip, deflate", Gzip),
            ("deflate, gzip", Deflate),
            ("gzip;q=0.5, deflate", Deflate),
            ("identity, gzip;q=2", Gzip),
            ("gzip;q=0", Identity),
            ("gzip;q=x, deflate;q=0.1", Deflate),
            ("br", Identity),
            ("*", Identity),
            ("GZIP", Identity),
            ("gzip , deflate", Deflate),
            ("", Identity),
        ] {
            assert_eq!(chosen(accept), expected, "{accept:?}");
        }
        assert_eq!(leading_number("0.5abc"), Some(0.5));
        assert_eq!(leading_number(" 2"), Some(2.0));
        assert_eq!(leading_number("é"), None);
    }

    #[test]
    fn compressed_bodies_inflate_back() {
        let body = Bytes::from_static(b"{\"outputs\":[]}");
        let (gz, name) = compress(body.clone(), Encoding::Gzip);
        assert_eq!(name, Some("gzip"));
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut plain)
            .unwrap();
        assert_eq!(plain, body);
        let (z, name) = compress(body.clone(), Encoding::Deflate);
        assert_eq!(name, Some("deflate"));
        let mut plain = Vec::new();
        flate2::read::ZlibDecoder::new(&z[..])
            .read_to_end(&mut plain)
            .unwrap();
        assert_eq!(plain, body);
        assert_eq!(compress(body.clone(), Encoding::Identity), (body, None));
    }
}
