//! `GET /api`: the OpenAPI document in `openapi/featurepipe.json`.

use axum::http::{header, HeaderValue};
use axum::response::IntoResponse;

/// The committed OpenAPI 3.1 description of this API.
pub const DOCUMENT: &str = include_str!("../../openapi/featurepipe.json");

/// Serve the OpenAPI document.
pub async fn document() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/vnd.oai.openapi+json;version=3.1"),
        )],
        DOCUMENT,
    )
}
