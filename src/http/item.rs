//! `/collections/{collectionId}/items/{featureId}`: read, replace (PUT),
//! update (PATCH, JSON merge patch), delete, and OPTIONS.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::body::{answer_keyed, check_content_type, idempotency, read_body, KeyUse};
use super::html::format::{vary_on_accept, with_format, FORMAT_PARAM};
use super::html::pages::{self, FeaturesView, Site};
use super::html::Format;
use super::jsonfg;
use super::links::BaseUrl;
use super::model::Feature;
use super::problem::{ApiError, Problem, Wrong};
use super::query_pairs;
use super::representation::{
    check_writable, created, entity_tags, feature_response, item_allow, item_path,
    options_response, precondition, precondition_failed, reading, refused_as_read,
    set_preference_applied, unknown_feature, Preferences, Return, FEATURE_TYPES, GEOJSON,
    PATCH_TYPES,
};
use crate::auth::Caller;
use crate::catalog::Collection;
use crate::feature::{parse_item, ItemBody, Purpose, Reading};
use crate::http::app::AppState;
use crate::read::params::{offered_crs, percent_encode, unknown_parameter, with_etags, WITH_ETAGS};
use crate::read::{self, Encoding, Rendering, StoredFeature};
use crate::session::Mode;
use crate::write::idempotency::Idempotency;
use crate::write::item::{self, Changed, Outcome};
use crate::write::sql::ItemChange;

/// The route that takes an id holding `/` raw (`items/A/1`), as QGIS 3.40
/// sends it; the documented route takes it percent-encoded (`items/A%2F1`).
pub const RAW_SLASHES: &str = "/collections/{collectionId}/items/{featureId}/{*rest}";

/// The collection id and the feature id of an item's URL, the id whole
/// when it holds `/` raw ([`RAW_SLASHES`]).
pub struct ItemPath(pub String, pub String);

impl<S: Send + Sync> FromRequestParts<S> for ItemPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(mut params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::new(Wrong::InvalidParameter, e.body_text()))?;
        let mut take = |name: &str| params.remove(name);
        let (collection, id) = (take("collectionId"), take("featureId"));
        let id = match take("rest") {
            Some(rest) => format!("{}/{rest}", id.unwrap_or_default()),
            None => id.unwrap_or_default(),
        };
        Ok(ItemPath(collection.unwrap_or_default(), id))
    }
}

/// The feature, with `ETag` and `Last-Modified`; 304 when `If-None-Match` matches.
#[utoipa::path(
    get,
    path = "/collections/{collectionId}/items/{featureId}",
    tag = "Features",
    summary = "One feature",
    operation_id = "getFeature",
    params(("collectionId" = String, Path, description = "Collection id, from GET /collections"), ("featureId" = String, Path, description = "The feature's key"), ("crs" = Option<String>, Query, description = "CRS of the output geometry (one of the collection's `crs`); CRS84 by default"), ("profile" = Option<String>, Query, description = "GeoJSON profile: rfc7946 (plain GeoJSON, the default), jsonfg or jsonfg-plus (JSON-FG as application/geo+json), or their URIs http://www.opengis.net/def/profile/OGC/0/…; the answer's Link header (rel=profile) names it"), ("f" = inline(Option<Format>), Query, description = FORMAT_PARAM), ("If-None-Match" = Option<String>, Header, description = "304 when the ETag matches (JSON)")),
    responses((status = 200, description = "The feature with self, alternate and collection links; as JSON-FG (f=jsonfg or Accept: application/fg+json) with conformsTo, coordRefSys, featureType, place in crs (the storage CRS by default), geometry in WGS 84 and time; or its page with a map", content((Feature = "application/geo+json"), (serde_json::Value = "application/fg+json"), (String = "text/html")), headers(("ETag" = String, description = "Strong entity tag of the stored feature"), ("Last-Modified" = Option<String>, description = "From the last-modified column, when the table has one"), ("Content-Crs" = Option<String>, description = "CRS of the geometry, in angle brackets"))), (status = 304, description = "Not modified (If-None-Match)"), (status = 400, description = "Bad parameter or body", body = Problem, content_type = "application/problem+json"), (status = 404, description = "No such collection or feature", body = Problem, content_type = "application/problem+json"), (status = 503, description = "The database is unreachable or busy; retry (Retry-After)", body = Problem, content_type = "application/problem+json"))
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    ItemPath(collection_id, id): ItemPath,
    base: BaseUrl,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let coll = state.to_read(&caller, &collection_id)?;
    let mut pairs = query_pairs(query.as_deref())?;
    let answer = jsonfg::negotiate(&mut pairs, &headers)?;
    let format = answer.format;
    let (encoding, mut crs) = match answer.jsonfg {
        // JSON-FG's `place` is in the storage CRS unless another is asked for.
        true => (Encoding::JsonFg, coll.storage_crs()),
        false => (Encoding::GeoJson, &coll.crs[0]),
    };
    for (name, value) in pairs {
        match name.as_str() {
            "crs" => crs = offered_crs(&coll, &name, &value)?,
            // Its ETag is in its header: said of the properties of pages only.
            WITH_ETAGS => drop(with_etags(&value)?),
            _ => return Err(unknown_parameter(&name, "f, profile, crs and with-etags").into()),
        }
    }
    let db = &state.for_caller(&caller).db;
    let stored = read::item_as(db, &coll, &id, crs, encoding)
        .await?
        .ok_or_else(|| unknown_feature(&coll, &id))?;
    if format == Format::Html {
        return Ok(page(&state, &base, &coll, &id, &stored));
    }
    let tag = format!("\"{}\"", stored.etag);
    // Weak comparison (RFC 9110 13.1.2): `W/"x"` matches `"x"`.
    let not_modified =
        entity_tags(&headers, header::IF_NONE_MATCH, true).any(|t| t == "*" || t == stored.etag);
    if not_modified {
        let mut response = StatusCode::NOT_MODIFIED.into_response();
        if let Ok(v) = HeaderValue::from_str(&tag) {
            response.headers_mut().insert(header::ETAG, v);
        }
        return Ok(vary_on_accept(response));
    }
    let rendering = Rendering {
        encoding,
        crs: crs.clone(),
    };
    let mut response = feature_response(
        StatusCode::OK,
        &stored,
        Return::Representation,
        &base,
        &coll,
        &id,
        &rendering,
    );
    answer.apply(&mut response);
    Ok(vary_on_accept(response))
}

/// The feature's web page: its map and its properties. It carries no ETag:
/// the editor reads the feature's JSON, and saves against that one's.
fn page(
    state: &AppState,
    base: &BaseUrl,
    coll: &Collection,
    id: &str,
    stored: &StoredFeature,
) -> Response {
    let path = item_path(coll, id);
    let mut links = base
        .self_and_alternate(&path, GEOJSON, Format::Html, "This feature")
        .to_vec();
    links.push(base.link(
        &format!("/collections/{}/items", percent_encode(&coll.id)),
        "collection",
        "text/html",
        "The collection's features",
    ));
    let view = FeaturesView {
        coll,
        features: vec![pages::parsed(&stored.json)],
        matched: None,
        links: &links,
        geojson_url: format!("{}{}", base.0, with_format(&path, Format::Json)),
    };
    pages::features(&Site::new(state, base), &format!("Feature {id}"), &view)
}

/// Validate a PUT or PATCH body; its `id`, if any, must be the URL's.
fn item_body(
    coll: &Collection,
    id: &str,
    body: &[u8],
    purpose: Purpose,
    how: &Reading,
) -> Result<ItemBody, ApiError> {
    let parsed = parse_item(body, coll, purpose, how)?;
    if let Some(problem) = parsed.changed_id(coll, id) {
        return Err(
            ApiError::new(Wrong::IdMismatch, problem.message.clone()).with_errors(vec![problem])
        );
    }
    Ok(parsed)
}

/// The response to a PUT or PATCH that changed the feature (shown as
/// `rendering` has it).
fn changed(
    outcome: Outcome,
    coll: &Collection,
    id: &str,
    base: &BaseUrl,
    preferences: &Preferences,
    rendering: &Rendering,
) -> Result<Response, ApiError> {
    let (mut response, answers_return) = match outcome {
        Outcome::Missing => return Err(unknown_feature(coll, id)),
        Outcome::PreconditionFailed => return Err(precondition_failed(id)),
        Outcome::SkippedByTrigger => {
            return Err(ApiError::new(
                Wrong::SkippedByTrigger,
                format!("a trigger or a row security policy skipped the change of feature '{id}'"),
            ))
        }
        Outcome::Done(Some(stored)) => (
            feature_response(
                StatusCode::OK,
                &stored,
                preferences.return_,
                base,
                coll,
                id,
                rendering,
            ),
            true,
        ),
        // No body: a return=representation asked for was not applied.
        Outcome::Done(None) => (
            StatusCode::NO_CONTENT.into_response(),
            preferences.return_ != Return::Representation,
        ),
    };
    set_preference_applied(&mut response, preferences, answers_return);
    Ok(response)
}

/// A 412 told the feature as it is now and its ETag, when the caller may
/// read it, so that a client can merge without asking again. Read once the
/// write's transaction (a keyed one) is over: it is at least as new as the
/// version the precondition failed on. It is rendered as `rendering` says.
async fn told_current(
    answer: Result<Response, ApiError>,
    state: &AppState,
    caller: &Caller,
    (coll, id): (&Collection, &str),
    rendering: &Rendering,
) -> Result<Response, ApiError> {
    match answer {
        Err(e) if e.status() == StatusCode::PRECONDITION_FAILED && caller.can_read(&coll.id) => {
            let Rendering { encoding, crs } = rendering;
            match read::item_as(&state.db, coll, id, crs, *encoding).await {
                Ok(Some(now)) => {
                    let content_crs = HeaderValue::from_str(&format!("<{}>", crs.uri));
                    let e = e.with_current(&now.into());
                    Err(match content_crs {
                        Ok(v) => e.with_header(header::HeaderName::from_static("content-crs"), v),
                        Err(_) => e,
                    })
                }
                // Gone meanwhile, or hidden from the caller's role: as it was.
                _ => Err(e),
            }
        }
        other => other,
    }
}

/// The collection `caller` may write (else 401/403/404/405), the state to
/// write it with (SQL run as the caller's role), and the request's
/// preferences as far as the caller's rights go.
fn for_writing(
    state: &AppState,
    caller: &Caller,
    collection_id: &str,
    headers: &HeaderMap,
) -> Result<(Arc<Collection>, AppState, Preferences), ApiError> {
    let coll = state.to_write(caller, collection_id)?;
    check_writable(&coll, item_allow(&coll, caller))?;
    let preferences = Preferences::new(headers, caller.can_read(&coll.id));
    Ok((coll, state.for_caller(caller), preferences))
}

/// What a write of one feature came to: a stored response replayed, or a change.
enum Attempt {
    /// The Idempotency-Key's stored response.
    Replayed(Response),
    /// The validated body, what the change did, and how the feature is
    /// shown: in the body's CRS, and encoding.
    Made(Box<(ItemBody, Changed, Rendering)>),
}

/// The request's Idempotency-Key for `method` on the feature: a replay, or
/// the key to write under (if any).
async fn item_key(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    method: &str,
    (coll, id): (&Collection, &str),
    body: &[u8],
) -> Result<KeyUse, ApiError> {
    let target = format!(
        "/collections/{}/items/{}",
        percent_encode(&coll.id),
        percent_encode(id)
    );
    idempotency(
        state,
        caller,
        headers,
        (method, &target),
        body,
        Mode::Atomic,
    )
    .await
}

/// Read a PUT or PATCH (its body, its Idempotency-Key) and [make the
/// change](change_as_read); refusals from the body's validation on say
/// which `handling` it was read with.
async fn replace_or_update(
    state: &AppState,
    caller: &Caller,
    (coll, id): (&Collection, &str),
    (headers, preferences): (&HeaderMap, &Preferences),
    body: Body,
    purpose: Purpose,
) -> Result<Attempt, ApiError> {
    let how = reading(headers, coll, state.input_limits, preferences)?;
    let (accepted, method) = match purpose {
        Purpose::Patch => (PATCH_TYPES, "PATCH"),
        _ => (FEATURE_TYPES, "PUT"),
    };
    check_content_type(headers, accepted)?;
    let body = read_body(state, headers, body).await?;
    let key = match item_key(state, caller, headers, method, (coll, id), &body).await? {
        KeyUse::Replay(response) => return Ok(Attempt::Replayed(response)),
        KeyUse::Write(key) => key,
    };
    change_as_read(
        state,
        caller,
        (coll, id),
        headers,
        (&body, purpose, how),
        key,
    )
    .await
    .map_err(|e| refused_as_read(e, preferences))
}

/// Validate a PUT or PATCH body as `how` says and make the change, if its
/// preconditions hold.
async fn change_as_read(
    state: &AppState,
    caller: &Caller,
    (coll, id): (&Collection, &str),
    headers: &HeaderMap,
    (body, purpose, how): (&[u8], Purpose, Reading),
    key: Option<Idempotency>,
) -> Result<Attempt, ApiError> {
    let parsed = item_body(coll, id, body, purpose, &how)?;
    let rendering = Rendering {
        encoding: jsonfg::answer_encoding(headers, parsed.jsonfg),
        crs: parsed.crs.clone(),
    };
    let change = match purpose {
        Purpose::Patch => ItemChange::Update(&parsed.columns),
        _ => ItemChange::Replace(&parsed.columns),
    };
    let pre = precondition(headers, coll)?;
    let values = &parsed.values;
    let changed = item::change(
        &state.db,
        coll,
        id,
        change,
        values,
        &pre,
        &rendering,
        key.as_ref(),
    )
    .await
    .map_err(|e| e.for_reader(caller.can_read(&coll.id)))?;
    Ok(Attempt::Made(Box::new((parsed, changed, rendering))))
}

/// Replace the feature; create it (201) where clients choose keys.
#[utoipa::path(
    put,
    path = "/collections/{collectionId}/items/{featureId}",
    tag = "Features",
    summary = "Replace a feature: left-out properties take their defaults; creates it (201) where clients choose keys",
    operation_id = "replaceFeature",
    params(("collectionId" = String, Path, description = "Collection id, from GET /collections"), ("featureId" = String, Path, description = "The feature's key"), ("If-Match" = Option<String>, Header, description = "ETag the feature must still have (412 otherwise); * for any"), ("If-Unmodified-Since" = Option<String>, Header, description = "HTTP date the last-modified column must not be after (412 otherwise)"), ("Content-Crs" = Option<String>, Header, description = "CRS of the body's geometries, e.g. <http://www.opengis.net/def/crs/EPSG/0/4326>; CRS84 by default"), ("Prefer" = Option<String>, Header, description = "return=minimal|representation, handling=strict|lenient (lenient: unknown and read-only properties are ignored; strict: read-only ones are refused in PUT and PATCH too); Preference-Applied answers both successes and refusals"), ("Idempotency-Key" = Option<String>, Header, description = "A retry with the same key and body returns the first response (Idempotent-Replayed: true) and changes nothing; the same key with another body is a 422")),
    request_body(description = "The whole feature; an id, if any, must be the URL's. JSON-FG is read as on POST", content((Feature = "application/geo+json"), (Feature = "application/json"), (serde_json::Value = "application/fg+json"))),
    responses((status = 200, description = "Changed; the feature as stored (Prefer: return=representation), as JSON-FG when Accept prefers it or, preferring neither, the body was JSON-FG", content((Feature = "application/geo+json"), (serde_json::Value = "application/fg+json")), headers(("ETag" = String, description = "Strong entity tag of the stored feature"), ("Last-Modified" = Option<String>, description = "From the last-modified column, when the table has one"), ("Content-Crs" = Option<String>, description = "CRS of the geometry, in angle brackets"))), (status = 204, description = "Changed", headers(("ETag" = String, description = "The new ETag"))), (status = 201, description = "Created (collections with supportsNonAutogeneratedResourceIds); the feature as on 200", content((Feature = "application/geo+json"), (serde_json::Value = "application/fg+json"))), (status = 400, description = "Bad body, id differs from the URL, or a missing Content-Type", body = Problem, content_type = "application/problem+json"), (status = 404, description = "No such collection or feature", body = Problem, content_type = "application/problem+json"), (status = 405, description = "The collection is read-only", body = Problem, content_type = "application/problem+json"), (status = 409, description = "A constraint refused the change", body = Problem, content_type = "application/problem+json"), (status = 412, description = "The feature changed since it was read (If-Match / If-Unmodified-Since); to a caller who may read it, the body tells the feature as it is now (`feature`, in the body's CRS) and its `etag`", body = Problem, content_type = "application/problem+json"), (status = 415, description = "Unsupported Content-Type", body = Problem, content_type = "application/problem+json"), (status = 422, description = "The feature does not fit the table", body = Problem, content_type = "application/problem+json"), (status = 428, description = "The collection requires If-Match or If-Unmodified-Since", body = Problem, content_type = "application/problem+json"), (status = 503, description = "The database is unreachable or busy; retry (Retry-After)", body = Problem, content_type = "application/problem+json"))
)]
pub async fn put(
    State(state): State<AppState>,
    caller: Caller,
    ItemPath(collection_id, id): ItemPath,
    base: BaseUrl,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (coll, state, preferences) = for_writing(&state, &caller, &collection_id, &headers)?;
    let feature = (coll.as_ref(), id.as_str());
    let request = (&headers, &preferences);
    let attempt =
        replace_or_update(&state, &caller, feature, request, body, Purpose::Replace).await?;
    let (parsed, Changed { outcome, keyed }, rendering) = match attempt {
        Attempt::Replayed(response) => return Ok(response),
        Attempt::Made(made) => *made,
    };
    let creates = coll.client_keys() && coll.could_be_key(&id);
    let response =
        if matches!(outcome, Outcome::Missing) && creates && headers.contains_key(header::IF_MATCH)
        {
            // If-Match names a current representation, and there is none (RFC 9110 13.1.1).
            Err(precondition_failed(&id))
        } else if matches!(outcome, Outcome::Missing) && creates {
            let (columns, values) = (&parsed.columns, &parsed.values);
            item::create(
                &state.db,
                &coll,
                &id,
                columns,
                values,
                &rendering,
                keyed.as_ref(),
            )
            .await
            .map_err(|e| e.for_reader(caller.can_read(&coll.id)).into())
            .map(|stored| {
                let preference = preferences.return_;
                let mut response = created(&stored, preference, &base, &coll, &id, &rendering);
                set_preference_applied(&mut response, &preferences, true);
                response
            })
        } else {
            changed(outcome, &coll, &id, &base, &preferences, &rendering)
        };
    let response = response.map_err(|e| refused_as_read(e, &preferences));
    let answered = answer_keyed(keyed, response).await;
    told_current(answered, &state, &caller, (&coll, &id), &rendering).await
}

/// Apply a JSON merge patch: named properties change (null: NULL), a geometry replaces the old.
#[utoipa::path(
    patch,
    path = "/collections/{collectionId}/items/{featureId}",
    tag = "Features",
    summary = "Update a feature with a JSON merge patch (RFC 7396): named properties change, null sets NULL, a geometry replaces the old",
    operation_id = "updateFeature",
    params(("collectionId" = String, Path, description = "Collection id, from GET /collections"), ("featureId" = String, Path, description = "The feature's key"), ("If-Match" = Option<String>, Header, description = "ETag the feature must still have (412 otherwise); * for any"), ("If-Unmodified-Since" = Option<String>, Header, description = "HTTP date the last-modified column must not be after (412 otherwise)"), ("Content-Crs" = Option<String>, Header, description = "CRS of the body's geometries, e.g. <http://www.opengis.net/def/crs/EPSG/0/4326>; CRS84 by default"), ("Prefer" = Option<String>, Header, description = "return=minimal|representation, handling=strict|lenient (lenient: unknown and read-only properties are ignored; strict: read-only ones are refused in PUT and PATCH too); Preference-Applied answers both successes and refusals"), ("Idempotency-Key" = Option<String>, Header, description = "A retry with the same key and body returns the first response (Idempotent-Replayed: true) and changes nothing; the same key with another body is a 422")),
    request_body(description = "A merge patch of the feature: properties and/or geometry (JSON-FG: place, or geometry in WGS 84)", content((Feature = "application/merge-patch+json"), (Feature = "application/geo+json"), (Feature = "application/json"), (serde_json::Value = "application/fg+json"))),
    responses((status = 200, description = "Changed; the feature as stored (Prefer: return=representation), as JSON-FG when Accept prefers it or, preferring neither, the body was JSON-FG", content((Feature = "application/geo+json"), (serde_json::Value = "application/fg+json")), headers(("ETag" = String, description = "Strong entity tag of the stored feature"), ("Last-Modified" = Option<String>, description = "From the last-modified column, when the table has one"), ("Content-Crs" = Option<String>, description = "CRS of the geometry, in angle brackets"))), (status = 204, description = "Changed", headers(("ETag" = String, description = "The new ETag"))), (status = 400, description = "Bad body, id differs from the URL, or a missing Content-Type", body = Problem, content_type = "application/problem+json"), (status = 404, description = "No such collection or feature", body = Problem, content_type = "application/problem+json"), (status = 405, description = "The collection is read-only", body = Problem, content_type = "application/problem+json"), (status = 409, description = "A constraint refused the change", body = Problem, content_type = "application/problem+json"), (status = 412, description = "The feature changed since it was read (If-Match / If-Unmodified-Since); to a caller who may read it, the body tells the feature as it is now (`feature`, in the body's CRS) and its `etag`", body = Problem, content_type = "application/problem+json"), (status = 415, description = "Unsupported Content-Type", body = Problem, content_type = "application/problem+json"), (status = 422, description = "The feature does not fit the table", body = Problem, content_type = "application/problem+json"), (status = 428, description = "The collection requires If-Match or If-Unmodified-Since", body = Problem, content_type = "application/problem+json"), (status = 503, description = "The database is unreachable or busy; retry (Retry-After)", body = Problem, content_type = "application/problem+json"))
)]
pub async fn patch(
    State(state): State<AppState>,
    caller: Caller,
    ItemPath(collection_id, id): ItemPath,
    base: BaseUrl,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (coll, state, preferences) = for_writing(&state, &caller, &collection_id, &headers)?;
    let feature = (coll.as_ref(), id.as_str());
    let request = (&headers, &preferences);
    let attempt =
        replace_or_update(&state, &caller, feature, request, body, Purpose::Patch).await?;
    match attempt {
        Attempt::Replayed(response) => Ok(response),
        Attempt::Made(made) => {
            let (_, Changed { outcome, keyed }, rendering) = *made;
            let response = changed(outcome, &coll, &id, &base, &preferences, &rendering)
                .map_err(|e| refused_as_read(e, &preferences));
            let answered = answer_keyed(keyed, response).await;
            told_current(answered, &state, &caller, (&coll, &id), &rendering).await
        }
    }
}

/// Delete the feature: 204, or 404 when there is none.
#[utoipa::path(
    delete,
    path = "/collections/{collectionId}/items/{featureId}",
    tag = "Features",
    summary = "Delete a feature",
    operation_id = "deleteFeature",
    params(("collectionId" = String, Path, description = "Collection id, from GET /collections"), ("featureId" = String, Path, description = "The feature's key"), ("If-Match" = Option<String>, Header, description = "ETag the feature must still have (412 otherwise); * for any"), ("If-Unmodified-Since" = Option<String>, Header, description = "HTTP date the last-modified column must not be after (412 otherwise)"), ("Idempotency-Key" = Option<String>, Header, description = "A retry with the same key and body returns the first response (Idempotent-Replayed: true) and changes nothing; the same key with another body is a 422")),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such collection or feature", body = Problem, content_type = "application/problem+json"), (status = 405, description = "The collection is read-only", body = Problem, content_type = "application/problem+json"), (status = 409, description = "A foreign key refers to the feature", body = Problem, content_type = "application/problem+json"), (status = 412, description = "The feature changed since it was read; to a caller who may read it, the body tells the feature as it is now (`feature`) and its `etag`", body = Problem, content_type = "application/problem+json"), (status = 428, description = "The collection requires If-Match or If-Unmodified-Since", body = Problem, content_type = "application/problem+json"), (status = 503, description = "The database is unreachable or busy; retry (Retry-After)", body = Problem, content_type = "application/problem+json"))
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    ItemPath(collection_id, id): ItemPath,
    base: BaseUrl,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (coll, state, preferences) = for_writing(&state, &caller, &collection_id, &headers)?;
    let pre = precondition(&headers, &coll)?;
    let rendering = Rendering::geojson(&coll.crs[0]);
    let key = match item_key(&state, &caller, &headers, "DELETE", (&coll, &id), &[]).await? {
        KeyUse::Replay(response) => return Ok(response),
        KeyUse::Write(key) => key,
    };
    let delete = ItemChange::Delete;
    let Changed { outcome, keyed } = item::change(
        &state.db,
        &coll,
        &id,
        delete,
        &[],
        &pre,
        &rendering,
        key.as_ref(),
    )
    .await
    .map_err(|e| e.for_reader(caller.can_read(&coll.id)))?;
    let response = changed(outcome, &coll, &id, &base, &preferences, &rendering);
    let answered = answer_keyed(keyed, response).await;
    told_current(answered, &state, &caller, (&coll, &id), &rendering).await
}

/// `OPTIONS`: the methods this collection allows on a feature and what PATCH takes.
#[utoipa::path(
    options,
    path = "/collections/{collectionId}/items/{featureId}",
    tag = "Features",
    summary = "Methods allowed on a feature",
    operation_id = "optionsFeature",
    params(("collectionId" = String, Path, description = "Collection id, from GET /collections"), ("featureId" = String, Path, description = "The feature's key")),
    responses((status = 200, description = "The methods this collection allows here", headers(("Allow" = String, description = "Methods allowed"), ("Accept-Patch" = Option<String>, description = "Media types the write takes (writable collections)"))), (status = 404, description = "No such collection", body = Problem, content_type = "application/problem+json"))
)]
pub async fn options(
    State(state): State<AppState>,
    caller: Caller,
    ItemPath(collection_id, _id): ItemPath,
) -> Result<Response, ApiError> {
    let coll = state.to_see(&caller, &collection_id)?;
    // A merge patch of GeoJSON, or of JSON-FG (its `place`, `time`).
    let accepts = (
        "accept-patch",
        "application/merge-patch+json, application/fg+json",
    );
    let allow = item_allow(&coll, &caller);
    Ok(options_response(
        allow,
        allow.contains("PATCH").then_some(accepts),
    ))
}
