//! The pages' script and style files, served from the binary so that the
//! pages work offline: OpenLayers (vendored in assets/ol, BSD-2-Clause) and
//! the service's own (assets/html).

use axum::extract::Path;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

use crate::http::problem::{ApiError, Wrong};

/// Every file under `/assets/`: (name, media type, content).
const FILES: &[(&str, &str, &str)] = &[
    (
        "ol.js",
        "text/javascript",
        include_str!("../../../assets/ol/ol.js"),
    ),
    (
        "ol.css",
        "text/css",
        include_str!("../../../assets/ol/ol.css"),
    ),
    (
        "featurepipe.js",
        "text/javascript",
        include_str!("../../../assets/html/featurepipe.js"),
    ),
    (
        "featurepipe.css",
        "text/css",
        include_str!("../../../assets/html/featurepipe.css"),
    ),
];

/// `GET /assets/{name}`: one of the files, cached for a day; else a 404.
pub async fn asset(Path(name): Path<String>) -> Result<Response, ApiError> {
    let (_, media_type, content) = FILES
        .iter()
        .find(|(file, _, _)| *file == name)
        .ok_or_else(|| ApiError::new(Wrong::NotFound, format!("no asset named '{name}'")))?;
    Ok(cached(media_type, content))
}

/// A static file's response: its type, and a day's caching.
pub fn cached(media_type: &'static str, content: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(media_type)),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("max-age=86400"),
            ),
        ],
        content,
    )
        .into_response()
}
