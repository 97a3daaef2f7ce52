//! Which representation a read resource answers with: `f` when given, else
//! what the `Accept` header prefers (browsers put `text/html` first).

use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use crate::http::problem::{ApiError, Wrong};
use crate::http::query_pairs;
use crate::read::params::only_format;

/// A representation of a read resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON (GeoJSON for features): the default.
    Json,
    /// A web page.
    Html,
}

/// The OpenAPI description of `f` on the resources that have a web page.
pub const FORMAT_PARAM: &str = "Output format: json or html (a web page with a map for features), \
     and for features jsonfg (JSON-FG); without f, HTML when Accept prefers text/html (as browsers \
     send), JSON-FG when it prefers application/fg+json, else JSON";

/// Media types that mean a web page.
pub const HTML_TYPES: [(&str, &str); 2] = [("text", "html"), ("application", "xhtml+xml")];
/// Media types that mean the JSON representations.
pub const JSON_TYPES: [(&str, &str); 2] = [("application", "json"), ("application", "geo+json")];

impl Format {
    /// The format asked for: `f` (json, geojson or html; any other is a
    /// 400), else HTML when `Accept` rates a web page above JSON, else JSON.
    /// `f` is taken out of `pairs`, which keep the resource's own parameters.
    pub fn negotiate(
        pairs: &mut Vec<(String, String)>,
        headers: &HeaderMap,
    ) -> Result<Format, ApiError> {
        let mut asked = None;
        let mut error = None;
        pairs.retain(|(name, value)| {
            if name != "f" {
                return true;
            }
            let format = match value.as_str() {
                "json" | "geojson" => Ok(Format::Json),
                "html" => Ok(Format::Html),
                other => Err(format!(
                    "query parameter 'f': '{other}' is not offered; use f=json or f=html"
                )),
            };
            match (format, asked) {
                (Ok(format), None) => asked = Some(format),
                (Ok(_), Some(_)) => {
                    error = Some("query parameter 'f': given more than once".into())
                }
                (Err(e), _) => error = Some(e),
            }
            false
        });
        if let Some(detail) = error {
            return Err(ApiError::new(Wrong::InvalidParameter, detail));
        }
        Ok(asked.unwrap_or_else(|| Self::accepted(headers)))
    }

    /// The format of a resource whose only parameter is `f`; any other is a 400.
    pub fn only(query: Option<&str>, headers: &HeaderMap) -> Result<Format, ApiError> {
        let mut pairs = query_pairs(query)?;
        let format = Self::negotiate(&mut pairs, headers)?;
        only_format(&pairs)?;
        Ok(format)
    }

    /// `doc` as JSON, or as the web page `page` makes of it.
    pub fn answer<T: Serialize>(self, doc: T, page: impl FnOnce(&T) -> Response) -> Response {
        match self {
            Format::Json => vary_on_accept(Json(doc).into_response()),
            Format::Html => page(&doc),
        }
    }

    /// HTML when `Accept` gives a web page a higher quality than JSON: a
    /// browser's `text/html,…,*/*;q=0.8`, but not `*/*` or no `Accept`.
    fn accepted(headers: &HeaderMap) -> Format {
        if accept_prefers(headers, &HTML_TYPES, &[&JSON_TYPES]) {
            Format::Html
        } else {
            Format::Json
        }
    }

    /// The value of `f` that asks for this format.
    pub fn param(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Html => "html",
        }
    }
}

/// `path` (which may carry a query) with `f` set to `format`.
pub fn with_format(path: &str, format: Format) -> String {
    with_f(path, format.param())
}

/// `path` (which may carry a query) with `f` set to `value`.
pub fn with_f(path: &str, value: &str) -> String {
    let separator = if path.contains('?') { '&' } else { '?' };
    format!("{path}{separator}f={value}")
}

/// Whether `Accept` gives one of `wanted` a higher quality than any of
/// `others` (RFC 9110 12.5.1: the most specific range naming a type counts).
pub fn accept_prefers(
    headers: &HeaderMap,
    wanted: &[(&str, &str)],
    others: &[&[(&str, &str)]],
) -> bool {
    let ranges: Vec<MediaRange> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(MediaRange::parse)
        .collect();
    let best = |types: &[(&str, &str)]| {
        types
            .iter()
            .map(|t| quality(&ranges, t))
            .fold(0.0, f32::max)
    };
    let other = others.iter().map(|types| best(types)).fold(0.0, f32::max);
    best(wanted) > other
}

/// Mark `response` as chosen by `Accept`, for caches.
pub fn vary_on_accept(mut response: Response) -> Response {
    response
        .headers_mut()
        .append(header::VARY, HeaderValue::from_static("accept"));
    response
}

/// One member of `Accept`: `type/subtype` and its quality.
#[derive(Debug)]
struct MediaRange {
    kind: String,
    subtype: String,
    q: f32,
}

impl MediaRange {
    fn parse(text: &str) -> Option<MediaRange> {
        let mut parts = text.split(';');
        let (kind, subtype) = parts.next()?.trim().split_once('/')?;
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
            .map_or(Some(1.0), |(_, v)| v.trim().parse::<f32>().ok())?;
        Some(MediaRange {
            kind: kind.trim().to_ascii_lowercase(),
            subtype: subtype.trim().to_ascii_lowercase(),
            q: q.clamp(0.0, 1.0),
        })
    }

    /// How closely this range names `(kind, subtype)`: 2 exactly, 1 by
    /// `kind/*`, 0 by `*/*`; `None` when it does not.
    fn specificity(&self, (kind, subtype): &(&str, &str)) -> Option<u8> {
        match (self.kind.as_str(), self.subtype.as_str()) {
            (k, s) if k == *kind && s == *subtype => Some(2),
            (k, "*") if k == *kind => Some(1),
            ("*", "*") => Some(0),
            _ => None,
        }
    }
}

/// The quality `Accept` gives `media_type`: that of the most specific range
/// naming it (RFC 9110 12.5.1); 0 when none does.
fn quality(ranges: &[MediaRange], media_type: &(&str, &str)) -> f32 {
    ranges
        .iter()
        .filter_map(|r| Some((r.specificity(media_type)?, r.q)))
        .max_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)))
        .map_or(0.0, |(_, q)| q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn negotiated(query: &[(&str, &str)], accept: Option<&str>) -> Result<Format, ApiError> {
        let mut headers = HeaderMap::new();
        if let Some(accept) = accept {
            headers.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
        }
        let mut pairs = query
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        Format::negotiate(&mut pairs, &headers)
    }

    const FIREFOX: &str =
        "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8";
    const CHROMIUM: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,\
                            image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7";

    #[test]
    fn browsers_get_html_and_everyone_else_json() {
        for accept in [FIREFOX, CHROMIUM, "text/html", "text/*", "TEXT/HTML;q=0.5"] {
            assert_eq!(
                negotiated(&[], Some(accept)).unwrap(),
                Format::Html,
                "{accept}"
            );
        }
        for accept in [
            None,
            Some("*/*"),
            Some("application/json"),
            Some("application/geo+json, application/json;q=0.9"),
            Some("application/json, text/html"),
            Some("text/html;q=0.5, application/json"),
            Some("text/html;q=0, */*"),
            Some("text/html;q=bad"),
            Some("nonsense"),
            Some(""),
        ] {
            assert_eq!(negotiated(&[], accept).unwrap(), Format::Json, "{accept:?}");
        }
    }

    #[test]
    fn f_wins_over_accept_and_is_taken_out_of_the_query() {
        assert_eq!(
            negotiated(&[("f", "json")], Some(FIREFOX)).unwrap(),
            Format::Json
        );
        assert_eq!(
            negotiated(&[("f", "geojson")], Some(FIREFOX)).unwrap(),
            Format::Json
        );
        assert_eq!(negotiated(&[("f", "html")], None).unwrap(), Format::Html);
        let mut pairs = vec![("limit".into(), "5".into()), ("f".into(), "html".into())];
        Format::negotiate(&mut pairs, &HeaderMap::new()).unwrap();
        assert_eq!(pairs, [("limit".to_string(), "5".to_string())]);
    }

    #[test]
    fn an_unknown_or_repeated_f_is_a_400() {
        for query in [
            &[("f", "xml")][..],
            &[("f", "json"), ("f", "html")],
            &[("f", "")],
        ] {
            let e = negotiated(query, Some(FIREFOX)).unwrap_err();
            assert_eq!(e.status(), 400, "{query:?}");
            assert!(e.detail().contains("'f'"), "{}", e.detail());
        }
    }

    #[test]
    fn links_carry_the_format() {
        assert_eq!(
            with_format("/collections", Format::Html),
            "/collections?f=html"
        );
        assert_eq!(
            with_format("/x/items?limit=5", Format::Json),
            "/x/items?limit=5&f=json"
        );
    }
}
