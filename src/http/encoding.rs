//! Content codings: responses compressed (gzip, br, zstd) as `Accept-Encoding`
//! asks, request bodies decompressed (gzip, deflate, br, zstd), both by
//! tower-http, a chunk at a time as the bytes flow, so that neither holds a
//! whole body nor blocks the runtime for long. A compressed response's
//! strong `ETag` names its coding (`"<tag>-gzip"`), as RFC 9110 asks of a
//! strong validator; the API takes such a tag wherever it takes the plain one.

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
use tower_http::compression::CompressionLayer;
use tower_http::decompression::RequestDecompressionLayer;

use super::representation::{tag_members, unquoted};
use crate::read::{plain_etag, TAGGED_CODINGS};

/// The content codings the API decodes in request bodies, for `Accept-Encoding`.
pub const DECODED: &str = "gzip, deflate, br, zstd";

/// Bodies smaller than this are sent as they are: compressing them saves
/// less than it costs.
const SMALLEST_COMPRESSED: u64 = 1024;

/// Compression of responses: gzip, br and zstd, whichever `Accept-Encoding`
/// prefers; bodies of known size under [`SMALLEST_COMPRESSED`] bytes and
/// images stay as they are.
pub fn compression() -> CompressionLayer<impl Predicate> {
    let worth_it = SizeAbove::new(SMALLEST_COMPRESSED).and(NotForContentType::IMAGES);
    CompressionLayer::new()
        .gzip(true)
        .br(true)
        .zstd(true)
        .compress_when(worth_it)
}

/// Decompression of request bodies; a coding it does not know passes
/// through, for `read_body` to refuse with a problem.
pub fn decompression() -> RequestDecompressionLayer {
    RequestDecompressionLayer::new()
        .gzip(true)
        .deflate(true)
        .br(true)
        .zstd(true)
        .pass_through_unaccepted(true)
}

/// Middleware, outside compression: `Content-Encoding` of requests in the
/// form tower-http matches (lower case; `x-gzip` is gzip), and the coding
/// of compressed responses in their `ETag`.
pub async fn tag_codings(mut request: Request, next: Next) -> Response {
    normalize_content_encoding(request.headers_mut());
    let if_none_match = request.headers().get(header::IF_NONE_MATCH).cloned();
    let mut response = next.run(request).await;
    let status = response.status();
    let headers = response.headers_mut();
    let coding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .and_then(|c| TAGGED_CODINGS.into_iter().find(|known| *known == c));
    let tagged = match (coding, status) {
        (Some(coding), _) => etag_with(headers.get(header::ETAG), coding),
        // A 304 names the representation the client holds: the one its
        // If-None-Match named, coding and all.
        (None, StatusCode::NOT_MODIFIED) => held_representation(headers, if_none_match.as_ref()),
        (None, _) => None,
    };
    if let Some(tag) = tagged {
        headers.insert(header::ETAG, tag);
    }
    response
}

/// `x-gzip` and any case of a coding, as the coding's name.
fn normalize_content_encoding(headers: &mut HeaderMap) {
    let Some(value) = headers.get(header::CONTENT_ENCODING) else {
        return;
    };
    let text = value
        .to_str()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let name = match text.as_str() {
        "x-gzip" => "gzip",
        other => other,
    };
    if let Ok(name) = HeaderValue::from_str(name) {
        headers.insert(header::CONTENT_ENCODING, name);
    }
}

/// A strong `etag` with `coding` in it; weak tags name no bytes and stay.
fn etag_with(etag: Option<&HeaderValue>, coding: &str) -> Option<HeaderValue> {
    let tag = etag?.to_str().ok()?;
    let inner = tag.strip_prefix('"')?.strip_suffix('"')?;
    HeaderValue::from_str(&format!("\"{inner}-{coding}\"")).ok()
}

/// The member of `if_none_match` that is the 304's `ETag` with a coding.
fn held_representation(
    headers: &HeaderMap,
    if_none_match: Option<&HeaderValue>,
) -> Option<HeaderValue> {
    let etag = headers.get(header::ETAG)?.to_str().ok()?;
    let inner = etag.strip_prefix('"')?.strip_suffix('"')?;
    tag_members(if_none_match?.to_str().ok()?)
        .map(|member| unquoted(member, true))
        .find(|member| plain_etag(member) == inner && *member != inner)
        .and_then(|member| HeaderValue::from_str(&format!("\"{member}\"")).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compressed_answer_names_its_coding_in_a_strong_tag_only() {
        let strong = HeaderValue::from_static("\"abc\"");
        assert_eq!(etag_with(Some(&strong), "br").unwrap(), "\"abc-br\"");
        assert!(etag_with(Some(&HeaderValue::from_static("W/\"abc\"")), "br").is_none());
        assert!(etag_with(None, "gzip").is_none());
    }

    #[test]
    fn a_304_names_the_coded_representation_the_client_holds() {
        let mut headers = HeaderMap::new();
        headers.insert(header::ETAG, HeaderValue::from_static("\"abc\""));
        let held = HeaderValue::from_static("\"x\", \"abc-zstd\"");
        assert_eq!(
            held_representation(&headers, Some(&held)).unwrap(),
            "\"abc-zstd\""
        );
        let plain = HeaderValue::from_static("\"abc\"");
        assert!(held_representation(&headers, Some(&plain)).is_none());
    }

    #[test]
    fn request_codings_are_named_as_tower_http_matches_them() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static(" X-GZIP "),
        );
        normalize_content_encoding(&mut headers);
        assert_eq!(headers[header::CONTENT_ENCODING], "gzip");
    }
}
