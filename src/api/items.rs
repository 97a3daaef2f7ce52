//! `POST /collections/{collectionId}/items`: create one Feature or a FeatureCollection.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;

use crate::app::AppState;
use crate::error::ApiError;
use crate::feature::parse_body;
use crate::write::write_features;

/// Create features; 201 with the ids in feature order and a per-batch report.
pub async fn create(
    State(state): State<AppState>,
    Path(collection_id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let coll = state.collection(&collection_id)?;
    if !coll.is_writable() {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "read-only-collection",
            format!("'{collection_id}' is read-only: its table has no single-column primary key"),
        )
        .with_header(header::ALLOW, HeaderValue::from_static("")));
    }
    check_geojson_content_type(&headers)?;
    let body = read_body(&headers, body, state.max_body).await?;
    // Parsing tens of MiB is CPU work: keep it off the async workers.
    let parse_coll = coll.clone();
    let parsed = tokio::task::spawn_blocking(move || parse_body(&body, &parse_coll))
        .await
        .map_err(|e| ApiError::internal(format!("parsing failed: {e}")))??;
    let single = parsed.single;
    let report = write_features(state.db.clone(), coll, parsed, state.write).await?;
    let mut response = (StatusCode::CREATED, Json(&report)).into_response();
    if let Some(id) = report.ids.text(0).filter(|_| single) {
        let location = format!(
            "/collections/{collection_id}/items/{}",
            encode_path_segment(&id)
        );
        if let Ok(v) = HeaderValue::from_str(&location) {
            response.headers_mut().insert(header::LOCATION, v);
        }
    }
    Ok(response)
}

/// Read the whole body into one buffer sized from `Content-Length`, so that
/// a large body is held once (collecting chunks and joining them would hold it twice).
async fn read_body(headers: &HeaderMap, body: Body, max: usize) -> Result<Vec<u8>, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            format!("the body is larger than the limit of {max} bytes (FEATUREPIPE_MAX_BODY)"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_large());
    }
    let mut buf = Vec::with_capacity(declared.unwrap_or(0));
    let mut chunks = body.into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "unreadable-body",
                format!("cannot read the request body: {e}"),
            )
        })?;
        if buf.len() + chunk.len() > max {
            return Err(too_large());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf)
}

/// Writes take `application/geo+json` or `application/json` (parameters allowed).
fn check_geojson_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "missing-content-type",
            "a Content-Type header is required: application/geo+json or application/json",
        ));
    };
    let essence = value
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/geo+json" | "application/json" => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            format!(
                "Content-Type '{}' is not accepted: use application/geo+json or application/json",
                value.to_str().unwrap_or("(not text)")
            ),
        )
        .with_header(
            header::ACCEPT,
            HeaderValue::from_static("application/geo+json, application/json"),
        )),
    }
}

/// Percent-encode an id for use as one URL path segment.
fn encode_path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
