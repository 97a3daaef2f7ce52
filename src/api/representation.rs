//! HTTP details shared by the item endpoints: allowed methods, `Prefer`,
//! validators (`ETag`, `Last-Modified`) and the preconditions built on them.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};

use super::links::BaseUrl;
use crate::auth::Caller;
use crate::catalog::Collection;
use crate::error::ApiError;
use crate::feature::{InputLimits, Reading};
use crate::geometry::Crs;
use crate::read::params::{offered_crs, percent_encode};
use crate::read::StoredFeature;
use crate::write::item::Precondition;

/// GeoJSON's media type.
pub const GEOJSON: &str = "application/geo+json";
/// Bodies accepted by POST and PUT.
pub const FEATURE_TYPES: &[&str] = &[GEOJSON, "application/json"];
/// Bodies accepted by PATCH: a JSON merge patch of the feature.
pub const PATCH_TYPES: &[&str] = &["application/merge-patch+json", GEOJSON, "application/json"];

/// Methods on `/collections/{id}/items` for this collection and caller.
pub fn items_allow(coll: &Collection, caller: &Caller) -> &'static str {
    match rights(coll, caller) {
        (true, true) => "GET, HEAD, POST, OPTIONS",
        (true, false) => "GET, HEAD, OPTIONS",
        (false, true) => "POST, OPTIONS",
        (false, false) => "OPTIONS",
    }
}

/// Methods on `/collections/{id}/items/{featureId}` for this collection and caller.
pub fn item_allow(coll: &Collection, caller: &Caller) -> &'static str {
    match rights(coll, caller) {
        (true, true) => "GET, HEAD, PUT, PATCH, DELETE, OPTIONS",
        (true, false) => "GET, HEAD, OPTIONS",
        (false, true) => "PUT, PATCH, DELETE, OPTIONS",
        (false, false) => "OPTIONS",
    }
}

/// (may read, may write) the collection: the caller's rights and the table's.
fn rights(coll: &Collection, caller: &Caller) -> (bool, bool) {
    (
        caller.can_read(&coll.id),
        caller.can_write(&coll.id) && coll.is_writable(),
    )
}

/// 405 for a write to a read-only collection, with the methods it does allow.
pub fn check_writable(coll: &Collection, allow: &'static str) -> Result<(), ApiError> {
    if coll.is_writable() {
        return Ok(());
    }
    let why = if coll.read_only {
        "the settings file makes it so"
    } else {
        "its table has no single-column primary key"
    };
    Err(ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "read-only-collection",
        format!("'{}' is read-only: {why}", coll.id),
    )
    .with_header(header::ALLOW, HeaderValue::from_static(allow)))
}

/// 200 with `Allow` and, for writable collections, the `Accept-*` header of the write.
pub fn options_response(
    allow: &'static str,
    accepts: Option<(&'static str, &'static str)>,
) -> Response {
    let mut response = StatusCode::OK.into_response();
    let h = response.headers_mut();
    h.insert(header::ALLOW, HeaderValue::from_static(allow));
    if let Some((name, value)) = accepts {
        h.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Whether clients choose keys: the key column has no default, so PUT may create.
pub fn client_keys(coll: &Collection) -> bool {
    coll.primary_key.is_some_and(|pk| {
        let key = &coll.columns[pk];
        !key.has_default() && !key.generated && !coll.before_insert_trigger
    })
}

/// The path of a feature.
pub fn item_path(coll: &Collection, id: &str) -> String {
    format!(
        "/collections/{}/items/{}",
        percent_encode(&coll.id),
        percent_encode(id)
    )
}

/// Point `Location` at the feature keyed `id`.
pub fn set_location(response: &mut Response, base: &BaseUrl, coll: &Collection, id: &str) {
    if let Ok(v) = HeaderValue::from_str(&format!("{}{}", base.0, item_path(coll, id))) {
        response.headers_mut().insert(header::LOCATION, v);
    }
}

/// `Prefer: return=…` (RFC 7240).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Return {
    /// Not asked for.
    Unspecified,
    /// `return=minimal`: no body.
    Minimal,
    /// `return=representation`: the feature as stored.
    Representation,
}

/// The preferences (`return=…`, `handling=…`) of a request, lower-cased.
fn preferences(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all("prefer")
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("").split(','))
        .map(|t| t.trim().to_ascii_lowercase().replace(' ', ""))
        .collect()
}

impl Return {
    /// Read the `return` preference of a request.
    pub fn from_headers(headers: &HeaderMap) -> Self {
        let mut result = Return::Unspecified;
        for p in preferences(headers) {
            match p.as_str() {
                "return=minimal" => result = Return::Minimal,
                "return=representation" => result = Return::Representation,
                _ => {}
            }
        }
        result
    }
}

/// The request's headers as far as a caller who may not read the collection
/// may have them: `Prefer: return=representation` becomes `return=minimal`,
/// so that a write-only credential is not answered with the stored feature.
pub fn within_reading_rights(mut headers: HeaderMap, may_read: bool) -> HeaderMap {
    if may_read {
        return headers;
    }
    let prefer: Vec<HeaderValue> = headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| {
            HeaderValue::from_str(&v.replace("return=representation", "return=minimal")).ok()
        })
        .collect();
    headers.remove("prefer");
    for value in prefer {
        headers.append("prefer", value);
    }
    headers
}

/// How the body of a write is read: its `Content-Crs`, and `Prefer:
/// handling=lenient` (unknown properties ignored) or `strict` (the default).
pub fn reading(
    headers: &HeaderMap,
    coll: &Collection,
    limits: InputLimits,
) -> Result<Reading, ApiError> {
    Ok(Reading {
        crs: body_crs(headers, coll)?.clone(),
        lenient: preferences(headers).iter().any(|p| p == "handling=lenient"),
        keep_valid: false,
        limits,
    })
}

/// `Preference-Applied`: the request's `handling` preference, and its
/// `return` preference when `return_honoured`.
pub fn set_preference_applied(response: &mut Response, headers: &HeaderMap, return_honoured: bool) {
    let applied: Vec<String> = preferences(headers)
        .into_iter()
        .filter(|p| {
            matches!(p.as_str(), "handling=strict" | "handling=lenient")
                || (return_honoured
                    && matches!(p.as_str(), "return=minimal" | "return=representation"))
        })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&applied.join(", ")) {
        if !applied.is_empty() {
            response.headers_mut().insert("preference-applied", v);
        }
    }
}

/// `If-Match` and `If-Unmodified-Since` of a request to change a feature of
/// `coll`; 428 when the collection requires one and there is none.
pub fn precondition(headers: &HeaderMap, coll: &Collection) -> Result<Precondition, ApiError> {
    let tags: Vec<String> = headers
        .get_all(header::IF_MATCH)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("").split(','))
        .map(|t| t.trim().trim_matches('"').to_owned())
        .filter(|t| !t.is_empty())
        .collect();
    let if_match = headers.contains_key(header::IF_MATCH).then_some(tags);
    // An invalid date is ignored, and so is the date when If-Match is given
    // (RFC 9110 13.1.4).
    let if_unmodified_since = headers
        .get(header::IF_UNMODIFIED_SINCE)
        .filter(|_| if_match.is_none())
        .and_then(|v| DateTime::parse_from_rfc2822(v.to_str().ok()?).ok())
        .map(|d| d.with_timezone(&Utc));
    let only_create = headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.to_str().is_ok_and(|v| v.trim() == "*"));
    if coll.precondition_required
        && if_match.is_none()
        && if_unmodified_since.is_none()
        && !only_create
    {
        return Err(ApiError::new(
            StatusCode::PRECONDITION_REQUIRED,
            "precondition-required",
            format!(
                "changes to '{}' must say which version they change: send If-Match with the \
                 feature's ETag (or If-Unmodified-Since; If-None-Match: * to create)",
                coll.id
            ),
        ));
    }
    Ok(Precondition {
        if_match,
        if_unmodified_since,
        only_create,
    })
}

/// 412: the feature changed since the client read it.
pub fn precondition_failed(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::PRECONDITION_FAILED,
        "precondition-failed",
        format!("feature '{id}' has changed since it was read (If-Match / If-Unmodified-Since); read it again"),
    )
}

/// 404 for a feature that does not exist.
pub fn unknown_feature(coll: &Collection, id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown-feature",
        format!("collection '{}' has no feature '{id}'", coll.id),
    )
}

/// `Content-Crs: <uri>` (OGC API - Features Part 2).
pub fn set_content_crs(headers: &mut HeaderMap, crs: &Crs) {
    if let Ok(v) = HeaderValue::from_str(&format!("<{}>", crs.uri)) {
        headers.insert("content-crs", v);
    }
}

/// The CRS of a request body: its `Content-Crs`, CRS84 without one.
fn body_crs<'c>(headers: &HeaderMap, coll: &'c Collection) -> Result<&'c Crs, ApiError> {
    match headers.get("content-crs") {
        None => Ok(&coll.crs[0]),
        Some(v) => offered_crs(coll, "Content-Crs", v.to_str().unwrap_or("")).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "unsupported-crs",
                e.detail().replace("query parameter ", "header "),
            )
        }),
    }
}

/// The validator headers of a stored feature.
fn validators(feature: &StoredFeature, headers: &mut HeaderMap) {
    if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", feature.etag)) {
        headers.insert(header::ETAG, v);
    }
    if let Some(t) = feature.last_modified {
        let date = t.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
        if let Ok(v) = HeaderValue::from_str(&date) {
            headers.insert(header::LAST_MODIFIED, v);
        }
    }
}

/// The feature with its links, as the body of a response.
fn with_links(feature: &StoredFeature, base: &BaseUrl, coll: &Collection, id: &str) -> String {
    let links = serde_json::json!([
        base.link(&item_path(coll, id), "self", GEOJSON, "This feature"),
        base.link(
            &format!("/collections/{}", percent_encode(&coll.id)),
            "collection",
            "application/json",
            "The collection"
        ),
    ]);
    // PostgreSQL built the object; add one member before its closing brace.
    let body = feature.json.trim_end();
    let inner = body.strip_suffix('}').unwrap_or(body);
    format!("{inner}, \"links\": {links}}}")
}

/// A response about one feature (its geometry in `crs`): with its body when
/// `preference` (or the method) calls for one, always with its validators.
/// 201 for the feature created at `id`, as `preference` asks, with `Location`.
pub fn created(
    stored: &StoredFeature,
    preference: Return,
    base: &BaseUrl,
    coll: &Collection,
    id: &str,
    crs: &Crs,
) -> Response {
    let status = StatusCode::CREATED;
    let mut response = feature_response(status, stored, preference, base, coll, id, crs);
    set_location(&mut response, base, coll, id);
    response
}

/// The feature as `preference` asks: the GeoJSON, or no body; with its validators.
pub fn feature_response(
    status: StatusCode,
    feature: &StoredFeature,
    preference: Return,
    base: &BaseUrl,
    coll: &Collection,
    id: &str,
    crs: &Crs,
) -> Response {
    let mut response = if preference == Return::Representation {
        (
            status,
            [(header::CONTENT_TYPE, HeaderValue::from_static(GEOJSON))],
            with_links(feature, base, coll, id),
        )
            .into_response()
    } else {
        let status = if status == StatusCode::OK {
            StatusCode::NO_CONTENT
        } else {
            status
        };
        status.into_response()
    };
    let headers = response.headers_mut();
    validators(feature, headers);
    if preference == Return::Representation {
        set_content_crs(headers, crs);
    }
    response
}
