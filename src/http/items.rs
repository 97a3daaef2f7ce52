//! `/collections/{collectionId}/items`: read a page of features (GET), create
//! one Feature or a FeatureCollection (POST), and OPTIONS.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::body::check_content_type;
use super::create::{create_features, Created, Post, PostAnswer};
use super::html::format::{vary_on_accept, with_format, FORMAT_PARAM};
use super::html::pages::{self, FeaturesView, Site};
use super::html::Format;
use super::jsonfg;
use super::links::BaseUrl;
use super::model::{FeatureCollection, FeatureOrCollection};
use super::problem::{ApiError, Problem};
use super::query_pairs;
use super::representation::{
    check_writable, items_allow, options_response, reading, set_content_crs,
    set_preference_applied, Preferences, FEATURE_TYPES, GEOJSON,
};
use super::transactions;
use crate::auth::Caller;
use crate::http::app::AppState;
use crate::read::params::{percent_encode, ItemsQuery};
use crate::read::{self, Encoding, Rendering};
use crate::session::Mode;
use crate::write::report::WriteReport;

/// A page of features as a GeoJSON FeatureCollection with paging links.
#[utoipa::path(
    get,
    path = "/collections/{collectionId}/items",
    tag = "Features",
    summary = "A page of features; any other parameter naming a column of a simple type filters by equality",
    operation_id = "getFeatures",
    params(("collectionId" = String, Path, description = "Collection id, from GET /collections"), ("offset" = Option<i64>, Query, description = "Features to skip; next/prev links carry it"), ("bbox" = Option<String>, Query, description = "4 or 6 numbers: only features intersecting the box (in bbox-crs, CRS84 by default)"), ("bbox-crs" = Option<String>, Query, description = "CRS of bbox (one of the collection's `crs`)"), ("crs" = Option<String>, Query, description = "CRS of the output geometry (one of the collection's `crs`); CRS84 by default"), ("datetime" = Option<String>, Query, description = "An RFC 3339 instant or interval (`start/end`, `..` open): only features whose `time` meets it"), ("filter" = Option<String>, Query, description = "A CQL2 filter (OGC API - Features Part 3) on the queryables (`/collections/{collectionId}/queryables`): only the features that match"), ("filter-lang" = Option<String>, Query, description = "cql2-text (the default) or cql2-json"), ("filter-crs" = Option<String>, Query, description = "CRS of the filter's geometries (one of the collection's `crs`); CRS84 by default"), ("sortby" = Option<String>, Query, description = "Comma-separated queryables to order by (`-name` descending, `+name` or `name` ascending), then the key; strings in code-point order"), ("properties" = Option<String>, Query, description = "Comma-separated properties: only these are shown (none when empty)"), ("with-etags" = Option<bool>, Query, description = "true: each feature's properties also carry its key and its ETag (`featurepipe:etag`), for clients that edit features later with their versions as preconditions; paging links keep it"), ("profile" = Option<String>, Query, description = "GeoJSON profile: rfc7946 (plain GeoJSON, the default), jsonfg or jsonfg-plus (JSON-FG as application/geo+json), or their URIs http://www.opengis.net/def/profile/OGC/0/…; the answer's Link header (rel=profile) names it"), ("f" = inline(Option<Format>), Query, description = FORMAT_PARAM)),
    responses((status = 200, description = "A FeatureCollection with numberMatched, numberReturned and paging links; as JSON-FG (f=jsonfg or Accept: application/fg+json) with conformsTo, coordRefSys, featureType, and each feature's place in crs (the storage CRS by default), geometry in WGS 84 and time; or the page with a map and a table of the properties", content((FeatureCollection = "application/geo+json"), (serde_json::Value = "application/fg+json"), (String = "text/html")), headers(("Content-Crs" = String, description = "CRS of the geometries, in angle brackets"))), (status = 400, description = "Bad parameter or body", body = Problem, content_type = "application/problem+json"), (status = 404, description = "No such collection or feature", body = Problem, content_type = "application/problem+json"), (status = 503, description = "The database is unreachable or busy; retry (Retry-After)", body = Problem, content_type = "application/problem+json"))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(collection_id): Path<String>,
    base: BaseUrl,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let coll = state.to_read(&caller, &collection_id)?;
    let mut pairs = query_pairs(query.as_deref())?;
    let answer = jsonfg::negotiate(&mut pairs, &headers)?;
    let (format, as_jsonfg) = (answer.format, answer.jsonfg);
    let mut query = ItemsQuery::parse(&pairs, &coll)?;
    if as_jsonfg {
        query.encoding = Encoding::JsonFg;
        // JSON-FG's `place` is in the storage CRS unless another is asked for.
        if !pairs.iter().any(|(name, _)| name == "crs") {
            query.crs = coll.storage_crs().clone();
        }
    }
    let page = read::items(&state.for_caller(&caller).db, &coll, &query).await?;
    let path = format!("/collections/{}/items", percent_encode(&coll.id));
    let at = |offset: i64| format!("{path}?{}", query.at_offset(&coll, offset));
    // Paging links stay in the format answered.
    let paged = |offset: i64| answer.path(&at(offset));
    let page_type = match format {
        Format::Json => answer.media_type,
        Format::Html => "text/html",
    };
    let mut links = match as_jsonfg {
        true => jsonfg::links(&base, &at(query.offset), "This page").to_vec(),
        false => [
            &base.self_and_alternate(&at(query.offset), GEOJSON, format, "This page")[..],
            &[jsonfg::alternate(&base, &at(query.offset))],
        ]
        .concat(),
    };
    let returned = page.features.len() as i64;
    if query.offset + returned < page.number_matched {
        links.push(base.link(
            &paged(query.offset + returned),
            "next",
            page_type,
            "Next page",
        ));
    }
    if query.offset > 0 {
        links.push(base.link(
            &paged((query.offset - query.limit).max(0)),
            "prev",
            page_type,
            "Previous page",
        ));
    }
    links.push(base.link(
        &format!("/collections/{}", percent_encode(&coll.id)),
        "collection",
        "application/json",
        "The collection",
    ));
    if format == Format::Json {
        links.push(answer.profile.link());
    }
    if format == Format::Html {
        let view = FeaturesView {
            coll: &coll,
            features: page
                .features
                .iter()
                .map(|f| pages::parsed(&f.json))
                .collect(),
            matched: Some((page.number_matched, query.offset)),
            links: &links,
            geojson_url: format!("{}{}", base.0, with_format(&at(query.offset), Format::Json)),
        };
        let title = coll.title.as_deref().unwrap_or(&coll.id);
        return Ok(pages::features(&Site::new(&state, &base), title, &view));
    }
    // The features are JSON text from PostgreSQL: joined, never re-parsed.
    let mut head = json!({
        "type": "FeatureCollection",
        "numberMatched": page.number_matched,
        "numberReturned": returned,
        "timeStamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "links": links,
    });
    if as_jsonfg {
        for (name, value) in jsonfg::root_members(&coll, &query.crs) {
            head[name] = value;
        }
    }
    let head = head.to_string();
    let size = head.len()
        + page
            .features
            .iter()
            .map(|f| f.json.len() + 1)
            .sum::<usize>()
        + 16;
    let mut body = String::with_capacity(size);
    body.push_str(head.strip_suffix('}').unwrap_or(&head));
    body.push_str(",\"features\":[");
    for (i, f) in page.features.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&f.json);
    }
    body.push_str("]}");
    let mut response = body.into_response();
    answer.apply(&mut response);
    set_content_crs(response.headers_mut(), &query.crs);
    Ok(vary_on_accept(response))
}

/// Create features; 201 with the ids in feature order and a per-batch report.
/// A single Feature with `Prefer: return=representation` or `return=minimal`
/// is answered as OGC API - Features Part 4 says instead.
#[utoipa::path(
    post,
    path = "/collections/{collectionId}/items",
    tag = "Features",
    summary = "Create one Feature (Part 4) or a whole FeatureCollection (extension: bulk, pipelined, one transaction)",
    operation_id = "createFeatures",
    params(("collectionId" = String, Path, description = "Collection id, from GET /collections"), ("mode" = Option<String>, Query, description = "For a FeatureCollection: atomic (default, one transaction), batch (each batch commits on its own) or skip (features the database refuses are skipped); batch and skip answer 200 with an edit-session report, one insert operation per feature"), ("Content-Crs" = Option<String>, Header, description = "CRS of the body's geometries, e.g. <http://www.opengis.net/def/crs/EPSG/0/4326>; CRS84 by default"), ("Prefer" = Option<String>, Header, description = "return=minimal|representation, handling=strict|lenient (lenient: unknown and read-only properties are ignored; strict: read-only ones are refused in PUT and PATCH too); Preference-Applied answers both successes and refusals"), ("Idempotency-Key" = Option<String>, Header, description = "A retry with the same key and body returns the first response (Idempotent-Replayed: true) and writes nothing; the same key with another body is a 422; one still running is a 409 (atomic mode)"), ("Content-Encoding" = Option<String>, Header, description = "gzip or none; the size limit applies after decompression")),
    request_body(description = "A GeoJSON Feature or FeatureCollection; or JSON-FG (application/fg+json, or GeoJSON whose conformsTo names JSON-FG): place in coordRefSys (else Content-Crs, else the storage CRS), geometry in WGS 84 when place is null, featureType the collection's", content((FeatureOrCollection = "application/geo+json"), (FeatureOrCollection = "application/json"), (serde_json::Value = "application/fg+json"))),
    responses((status = 201, description = "Created. A FeatureCollection (or a Feature without Prefer: return=…) is answered with the bulk report: ids in feature order and per-batch status; a Feature with Prefer: return=representation with the feature (GeoJSON, or JSON-FG when Accept prefers it or, preferring neither, the body was JSON-FG), return=minimal with no body. Location points at a single feature.", body = WriteReport, headers(("Location" = Option<String>, description = "URL of the created feature (single Feature)"), ("Preference-Applied" = Option<String>, description = "The Prefer values honoured"))), (status = 400, description = "Not JSON or not GeoJSON, unsupported Content-Crs, or a missing Content-Type", body = Problem, content_type = "application/problem+json"), (status = 404, description = "No such collection", body = Problem, content_type = "application/problem+json"), (status = 405, description = "The collection is read-only (Allow lists what it takes)", body = Problem, content_type = "application/problem+json"), (status = 409, description = "A unique or foreign-key constraint refused a feature; errors name it, nothing was written", body = Problem, content_type = "application/problem+json"), (status = 413, description = "The body is larger than FEATUREPIPE_MAX_BODY", body = Problem, content_type = "application/problem+json"), (status = 415, description = "Content-Type is not GeoJSON", body = Problem, content_type = "application/problem+json"), (status = 422, description = "Features do not fit the table (errors list each with a JSON pointer); nothing was written", body = Problem, content_type = "application/problem+json"), (status = 502, description = "outcome-unknown: the connection to the database was lost after COMMIT was sent; the features may or may not have been written (check first, or retry with the same Idempotency-Key)", body = Problem, content_type = "application/problem+json"), (status = 503, description = "The database is unreachable or busy; retry (Retry-After)", body = Problem, content_type = "application/problem+json"))
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path(collection_id): Path<String>,
    base: BaseUrl,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let coll = state.to_write(&caller, &collection_id)?;
    let preferences = Preferences::new(&headers, caller.can_read(&coll.id));
    let mode = transactions::mode(query.as_deref(), true)?;
    check_writable(&coll, items_allow(&coll, &caller))?;
    let state = state.for_caller(&caller);
    check_content_type(&headers, FEATURE_TYPES)?;
    let mut how = reading(&headers, &coll, state.input_limits, &preferences)?;
    // Skip mode writes every valid feature: invalid ones are reported, not refused.
    how.keep_valid = mode == Mode::Skip;
    // A streamed body is GeoJSON, in the CRS the request says.
    let rendering = Rendering {
        encoding: jsonfg::answer_encoding(&headers, false),
        crs: how.crs.clone(),
    };
    let post = Post {
        state: &state,
        caller: &caller,
        headers: &headers,
        target: format!(
            "/collections/{collection_id}/items?{}",
            query.as_deref().unwrap_or("")
        ),
        mode,
        how,
        answer: Arc::new(PostAnswer::new(coll, base, preferences, rendering)),
    };
    match create_features(&post, body).await? {
        Created::Answered(response) => Ok(response),
        Created::Session(report) => {
            let mut response = (StatusCode::OK, Json(report)).into_response();
            set_preference_applied(&mut response, post.answer.preferences(), false);
            Ok(response)
        }
    }
}

/// `OPTIONS`: the methods this collection allows and the bodies POST takes.
#[utoipa::path(
    options,
    path = "/collections/{collectionId}/items",
    tag = "Features",
    summary = "Methods allowed on the items",
    operation_id = "optionsFeatures",
    params(("collectionId" = String, Path, description = "Collection id, from GET /collections")),
    responses((status = 200, description = "The methods this collection allows here", headers(("Allow" = String, description = "Methods allowed"), ("Accept-Post" = Option<String>, description = "Media types the write takes (writable collections)"))), (status = 404, description = "No such collection", body = Problem, content_type = "application/problem+json"))
)]
pub async fn options(
    State(state): State<AppState>,
    caller: Caller,
    Path(collection_id): Path<String>,
) -> Result<Response, ApiError> {
    let coll = state.to_see(&caller, &collection_id)?;
    let accepts = (
        "accept-post",
        "application/geo+json, application/json, application/fg+json",
    );
    let allow = items_allow(&coll, &caller);
    Ok(options_response(
        allow,
        allow.contains("POST").then_some(accepts),
    ))
}
