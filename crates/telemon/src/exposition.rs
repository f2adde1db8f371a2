//! The exposition of a snapshot over HTTP: the format `Accept` asks for, gzipped when allowed.

use std::io::Write as _;

use axum::body::Body;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;
use telemon_fleet::render::{Chunks, Format, CHUNK};
use telemon_fleet::FleetSnapshot;

/// Whether an `Accept-Encoding` header accepts gzip (`gzip` or `*`, with a q-value above 0).
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.is_some_and(|v| {
        v.split(',').any(|item| {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or("").trim();
            let q = parts
                .find_map(|p| p.trim().strip_prefix("q=").map(|q| q.trim().parse::<f32>().unwrap_or(0.0)))
                .unwrap_or(1.0);
            (name.eq_ignore_ascii_case("gzip") || name == "*") && q > 0.0
        })
    })
}

/// A page's chunks gzipped on the fly (fast level: a scrape is CPU-bound, the network rarely is).
struct Gzip {
    chunks: Chunks,
    encoder: Option<GzEncoder<Vec<u8>>>,
}

impl Iterator for Gzip {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        loop {
            let encoder = self.encoder.as_mut()?;
            match self.chunks.next() {
                Some(chunk) => {
                    encoder.write_all(&chunk).expect("writing to a Vec cannot fail");
                    if encoder.get_ref().len() >= CHUNK / 4 {
                        return Some(Bytes::from(std::mem::take(encoder.get_mut())));
                    }
                }
                None => {
                    let rest = self.encoder.take()?.finish().expect("writing to a Vec cannot fail");
                    return (!rest.is_empty()).then(|| Bytes::from(rest));
                }
            }
        }
    }
}

/// The exposition of `snapshot` in the format `Accept` asks for, with the process-wide families and
/// `tail` (`/metrics`), streamed in chunks, and gzipped when `Accept-Encoding` allows it.
pub fn exposition(snapshot: FleetSnapshot, headers: &HeaderMap, tail: String) -> Response {
    respond(headers, |format| Chunks::new(snapshot, format).with_tail(tail))
}

/// The exposition of `snapshot`'s targets alone, without a process-wide family (a `/probe` answer:
/// see [`Chunks::targets_only`]), as [`exposition`] serves it.
pub fn targets_exposition(snapshot: FleetSnapshot, headers: &HeaderMap) -> Response {
    respond(headers, |format| Chunks::targets_only(snapshot, format))
}

/// The page `chunks` makes in the format `Accept` asks for, gzipped when `Accept-Encoding` allows.
fn respond(headers: &HeaderMap, chunks: impl FnOnce(Format) -> Chunks) -> Response {
    let header_str = |name| headers.get(name).and_then(|v: &header::HeaderValue| v.to_str().ok());
    let format = Format::from_accept(header_str(header::ACCEPT));
    let chunks = chunks(format);
    let ok = Ok::<Bytes, std::convert::Infallible>;
    if accepts_gzip(header_str(header::ACCEPT_ENCODING)) {
        let gzip = Gzip {
            chunks,
            encoder: Some(GzEncoder::new(Vec::with_capacity(CHUNK / 2), Compression::fast())),
        };
        (
            [
                (header::CONTENT_TYPE, format.content_type()),
                (header::CONTENT_ENCODING, "gzip"),
                (header::VARY, "accept-encoding"),
            ],
            Body::from_stream(futures::stream::iter(gzip.map(ok))),
        )
            .into_response()
    } else {
        (
            [(header::CONTENT_TYPE, format.content_type()), (header::VARY, "accept-encoding")],
            Body::from_stream(futures::stream::iter(chunks.map(ok))),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::accepts_gzip;

    #[test]
    fn gzip_negotiation() {
        assert!(!accepts_gzip(None));
        assert!(accepts_gzip(Some("gzip")));
        assert!(accepts_gzip(Some("GZIP")));
        assert!(accepts_gzip(Some("deflate, gzip;q=0.5")));
        assert!(accepts_gzip(Some("*")));
        assert!(!accepts_gzip(Some("identity")));
        assert!(!accepts_gzip(Some("gzip;q=0")));
        assert!(!accepts_gzip(Some("gzip; q=0.0, br")));
        assert!(!accepts_gzip(Some("x-gzip-ish")));
    }
}
