//! `/collections/{collectionId}/items/{featureId}`: read, replace (PUT),
//! update (PATCH, JSON merge patch), delete, and OPTIONS.

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::body::{check_content_type, read_body};
use super::links::BaseUrl;
use super::query_pairs;
use super::representation::{
    check_writable, client_keys, feature_response, item_allow, options_response, precondition,
    precondition_failed, reading, set_location, set_preference_applied, unknown_feature, Return,
    FEATURE_TYPES, PATCH_TYPES,
};
use crate::app::AppState;
use crate::catalog::Collection;
use crate::error::{ApiError, FieldError};
use crate::feature::{parse_item, ItemBody, Purpose, Reading, MALFORMED};
use crate::geometry::Crs;
use crate::read::params::{check_format, offered_crs, unknown_parameter};
use crate::read::{self};
use crate::write::item::{self, Outcome};
use crate::write::sql::ItemChange;

/// The feature, with `ETag` and `Last-Modified`; 304 when `If-None-Match` matches.
pub async fn get(
    State(state): State<AppState>,
    Path((collection_id, id)): Path<(String, String)>,
    base: BaseUrl,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let coll = state.collection(&collection_id)?;
    let mut crs = &coll.crs[0];
    for (name, value) in query_pairs(query.as_deref())? {
        match name.as_str() {
            "f" => check_format(&value)?,
            "crs" => crs = offered_crs(&coll, &name, &value)?,
            _ => return Err(unknown_parameter(&name, "f and crs")),
        }
    }
    let stored = read::item(&state.db, &coll, &id, crs)
        .await?
        .ok_or_else(|| unknown_feature(&coll, &id))?;
    let tag = format!("\"{}\"", stored.etag);
    let not_modified = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    if not_modified {
        let mut response = StatusCode::NOT_MODIFIED.into_response();
        if let Ok(v) = HeaderValue::from_str(&tag) {
            response.headers_mut().insert(header::ETAG, v);
        }
        return Ok(response);
    }
    Ok(feature_response(
        StatusCode::OK,
        &stored,
        Return::Representation,
        &base,
        &coll,
        &id,
        crs,
    ))
}

/// Read and validate a PUT or PATCH body; its `id`, if any, must be the URL's.
async fn item_body(
    state: &AppState,
    coll: &Collection,
    id: &str,
    headers: &HeaderMap,
    body: Body,
    purpose: Purpose,
    how: &Reading,
) -> Result<ItemBody, ApiError> {
    let accepted = if purpose == Purpose::Patch {
        PATCH_TYPES
    } else {
        FEATURE_TYPES
    };
    check_content_type(headers, accepted)?;
    let body = read_body(headers, body, state.max_body).await?;
    let parsed = parse_item(&body, coll, purpose, how)?;
    let mismatch = |pointer: &str, given: &str| {
        let message = format!("the feature id is '{id}' (from the URL), the body says '{given}'; an id cannot be changed");
        ApiError::new(StatusCode::BAD_REQUEST, "id-mismatch", message.clone()).with_errors(vec![
            FieldError::new(0, pointer.to_owned(), MALFORMED, message),
        ])
    };
    if let Some(given) = parsed.id.as_deref().filter(|given| *given != id) {
        return Err(mismatch("/id", given));
    }
    if let Some(pk) = coll.primary_key.filter(|pk| parsed.columns.contains(pk)) {
        let name = &coll.columns[pk].name;
        return Err(mismatch(&format!("/properties/{name}"), "a key property"));
    }
    Ok(parsed)
}

/// The response to a PUT or PATCH that changed the feature.
fn changed(
    outcome: Outcome,
    coll: &Collection,
    id: &str,
    base: &BaseUrl,
    headers: &HeaderMap,
    crs: &Crs,
) -> Result<Response, ApiError> {
    let mut response = match outcome {
        Outcome::Missing => return Err(unknown_feature(coll, id)),
        Outcome::PreconditionFailed => return Err(precondition_failed(id)),
        Outcome::Done(Some(stored)) => feature_response(
            StatusCode::OK,
            &stored,
            Return::from_headers(headers),
            base,
            coll,
            id,
            crs,
        ),
        Outcome::Done(None) => StatusCode::NO_CONTENT.into_response(),
    };
    set_preference_applied(&mut response, headers, true);
    Ok(response)
}

/// Validate a PUT or PATCH and make the change, if its preconditions hold.
async fn replace_or_update(
    state: &AppState,
    coll: &Collection,
    id: &str,
    headers: &HeaderMap,
    body: Body,
    purpose: Purpose,
) -> Result<(ItemBody, Outcome, Crs), ApiError> {
    check_writable(coll, item_allow(coll))?;
    let how = reading(headers, coll)?;
    let parsed = item_body(state, coll, id, headers, body, purpose, &how).await?;
    let crs = how.crs;
    let change = match purpose {
        Purpose::Patch => ItemChange::Update(&parsed.columns),
        _ => ItemChange::Replace(&parsed.columns),
    };
    let pre = precondition(headers, coll)?;
    let outcome = item::change(&state.db, coll, id, change, &parsed.values, &pre, &crs).await?;
    Ok((parsed, outcome, crs))
}

/// Replace the feature; create it (201) where clients choose keys.
pub async fn put(
    State(state): State<AppState>,
    Path((collection_id, id)): Path<(String, String)>,
    base: BaseUrl,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let coll = state.collection(&collection_id)?;
    let (parsed, outcome, crs) =
        replace_or_update(&state, &coll, &id, &headers, body, Purpose::Replace).await?;
    let creates = client_keys(&coll) && !headers.contains_key(header::IF_MATCH);
    if matches!(outcome, Outcome::Missing) && creates {
        let stored =
            item::create(&state.db, &coll, &id, &parsed.columns, &parsed.values, &crs).await?;
        let preference = Return::from_headers(&headers);
        let mut response = feature_response(
            StatusCode::CREATED,
            &stored,
            preference,
            &base,
            &coll,
            &id,
            &crs,
        );
        set_location(&mut response, &base, &coll, &id);
        set_preference_applied(&mut response, &headers, true);
        return Ok(response);
    }
    changed(outcome, &coll, &id, &base, &headers, &crs)
}

/// Apply a JSON merge patch: named properties change (null: NULL), a geometry replaces the old.
pub async fn patch(
    State(state): State<AppState>,
    Path((collection_id, id)): Path<(String, String)>,
    base: BaseUrl,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let coll = state.collection(&collection_id)?;
    let (_, outcome, crs) =
        replace_or_update(&state, &coll, &id, &headers, body, Purpose::Patch).await?;
    changed(outcome, &coll, &id, &base, &headers, &crs)
}

/// Delete the feature: 204, or 404 when there is none.
pub async fn delete(
    State(state): State<AppState>,
    Path((collection_id, id)): Path<(String, String)>,
    base: BaseUrl,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let coll = state.collection(&collection_id)?;
    check_writable(&coll, item_allow(&coll))?;
    let pre = precondition(&headers, &coll)?;
    let crs = &coll.crs[0];
    let outcome = item::change(&state.db, &coll, &id, ItemChange::Delete, &[], &pre, crs).await?;
    changed(outcome, &coll, &id, &base, &headers, crs)
}

/// `OPTIONS`: the methods this collection allows on a feature and what PATCH takes.
pub async fn options(
    State(state): State<AppState>,
    Path((collection_id, _id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let coll = state.collection(&collection_id)?;
    let accepts = ("accept-patch", "application/merge-patch+json");
    Ok(options_response(
        item_allow(&coll),
        coll.is_writable().then_some(accepts),
    ))
}
