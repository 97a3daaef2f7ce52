//! `/collections/{collectionId}/items`: read a page of features (GET), create
//! one Feature or a FeatureCollection (POST), and OPTIONS.

use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::body;
use super::body::{
    answer_of, check_content_type, idempotency, look_up_key, read_body, read_or_stream,
    request_hasher, response_of, Incoming, KeyUse, StreamedBody,
};
use super::html::format::{vary_on_accept, with_format, FORMAT_PARAM};
use super::html::pages::{self, FeaturesView, Site};
use super::html::Format;
use super::jsonfg;
use super::links::BaseUrl;
use super::model::{FeatureCollection, FeatureOrCollection};
use super::problem::{ApiError, Problem};
use super::query_pairs;
use super::representation::{
    check_writable, created, items_allow, options_response, reading, refused_as_read,
    set_content_crs, set_location, set_preference_applied, Preferences, Return, FEATURE_TYPES,
    GEOJSON,
};
use super::transactions;
use crate::auth::Caller;
use crate::catalog::Collection;
use crate::error::Error;
use crate::feature::stream::Streamed::{Rows, Whole};
use crate::feature::{parse_body, ParsedBody, Reading};
use crate::http::app::AppState;
use crate::read::params::{percent_encode, ItemsQuery};
use crate::read::{self, Encoding, Rendering, StoredFeature};
use crate::session::{self, Mode};
use crate::write::idempotency::{Answer, Idempotency, Respond, Shown};
use crate::write::report::WriteReport;
use crate::write::stream::{read_rows, write_stream, Verdict};
use crate::write::write_features;
use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

/// A page of features as a GeoJSON FeatureCollection with paging links.
#[utoipa::path(
    get,
    path = "/collections/{collectionId}/items",
    tag = "Features",
    summary = "A page of features; any other parameter naming a column of a simple type filters by equality",
    operation_id = "getFeatures",
    params(("collectionId" = String, Path, description = "Collection id, from GET /collections"), ("limit" = Option<i64>, Query, description = "Page size, 1..10000 (larger values are lowered); default 10"), ("offset" = Option<i64>, Query, description = "Features to skip; next/prev links carry it"), ("bbox" = Option<String>, Query, description = "4 or 6 numbers: only features intersecting the box (in bbox-crs, CRS84 by default)"), ("bbox-crs" = Option<String>, Query, description = "CRS of bbox (one of the collection's `crs`)"), ("crs" = Option<String>, Query, description = "CRS of the output geometry (one of the collection's `crs`); CRS84 by default"), ("f" = inline(Option<Format>), Query, description = FORMAT_PARAM)),
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
    let as_jsonfg = jsonfg::asked(&mut pairs, &headers)?;
    let format = match as_jsonfg {
        true => Format::Json,
        false => Format::negotiate(&mut pairs, &headers)?,
    };
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
    let paged = |offset: i64| match format {
        _ if as_jsonfg => jsonfg::path(&at(offset)),
        Format::Json => at(offset),
        Format::Html => with_format(&at(offset), Format::Html),
    };
    let page_type = match format {
        _ if as_jsonfg => jsonfg::MEDIA_TYPE,
        Format::Json => GEOJSON,
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
    let mut response = (
        [(header::CONTENT_TYPE, HeaderValue::from_static(page_type))],
        body,
    )
        .into_response();
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
    let may_read = caller.can_read(&coll.id);
    let preferences = Preferences::new(&headers, may_read);
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
    let target = format!(
        "/collections/{collection_id}/items?{}",
        query.as_deref().unwrap_or("")
    );
    let answer = Arc::new(PostAnswer {
        coll: coll.clone(),
        base,
        preferences,
        rendering,
        single: false,
        made: Mutex::new(None),
    });
    // Batch and skip modes read the body whole; atomic mode streams a large
    // one, pipelined (with pipelining off, statements go one at a time: whole).
    let incoming = match mode {
        Mode::Atomic if state.write.pipeline => {
            let hasher = request_hasher(&headers, ("POST", &target));
            read_or_stream(&state, &headers, body, hasher).await?
        }
        _ => Incoming::Whole(read_body(&state, &headers, body).await?, None),
    };
    let (parsed, idempotency) = match incoming {
        Incoming::Whole(body, hash) => {
            let key = match hash {
                Some(hash) => match look_up_key(&state, &caller, &headers).await? {
                    Some(found) => found.settle(hash, mode)?,
                    None => KeyUse::Write(None),
                },
                None => {
                    idempotency(&state, &caller, &headers, ("POST", &target), &body, mode).await?
                }
            };
            let idempotency = match key {
                KeyUse::Replay(response) => return Ok(response),
                KeyUse::Write(idempotency) => idempotency,
            };
            // Parsing tens of MiB is CPU work: keep it off the async workers.
            let parse_coll = coll.clone();
            let parsed = tokio::task::spawn_blocking(move || parse_body(&body, &parse_coll, &how))
                .await
                .map_err(|e| Error::task_failed("parsing the body", &e))?;
            (parsed, idempotency)
        }
        Incoming::Streaming(streamed) => {
            match create_streamed(&state, &caller, &headers, streamed, how, answer.clone()).await? {
                StreamOutcome::Answered(response) => return Ok(response),
                StreamOutcome::Held(parsed, idempotency) => (parsed, idempotency),
            }
        }
    };
    let preferences = &answer.preferences;
    // From here on, refusals say how the body was read, as successes do.
    let as_read = move |e: ApiError| refused_as_read(e, preferences);
    let parsed = parsed.map_err(|e| as_read(e.into()))?;
    let single = parsed.single;
    let rendering = Rendering {
        encoding: jsonfg::answer_encoding(&headers, parsed.jsonfg),
        crs: parsed.crs.clone(),
    };
    if mode != Mode::Atomic && !single {
        // Batch or skip: the features as one insert operation each.
        let (operations, steps) = session::inserts(&coll, parsed, may_read);
        let key = idempotency.as_ref();
        let mut answer = transactions::answer(&state, &operations, &steps, mode, key)
            .await
            .map_err(as_read)?;
        set_preference_applied(&mut answer, preferences, false);
        return Ok(answer);
    }
    let answer = Arc::new(answer.for_body(single, rendering));
    let idempotency = idempotency.map(|idempotency| Idempotency {
        respond: Some(answer.clone()),
        ..idempotency
    });
    let report = write_features(
        state.db.clone(),
        coll.clone(),
        parsed,
        state.write,
        idempotency,
    )
    .await
    .map_err(|e| as_read(e.for_reader(may_read).into()))?;
    Ok(answered(&state, &answer, &report).await)
}

/// The response to a write of features that has committed `report`: as
/// stored under its key (made before COMMIT), or made now.
async fn answered(state: &AppState, answer: &PostAnswer, report: &WriteReport) -> Response {
    // Keyed: the answer made before COMMIT, as it was stored.
    if let Some(made) = answer
        .made
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    {
        return response_of(made);
    }
    let stored = match answer.shows(report) {
        Some(shown) => read_back(state, &answer.coll, &shown.id, &shown.rendering).await,
        None => None,
    };
    answer.response(report, stored.as_ref())
}

/// Where a body written as it arrived left the request.
enum StreamOutcome {
    /// Answered: written, replayed or refused.
    Answered(Response),
    /// Not a FeatureCollection that could be streamed (or one without
    /// features): read whole, to be written as such, under this key if any.
    Held(Result<ParsedBody, Error>, Option<Idempotency>),
}

/// Write a FeatureCollection (atomic mode) as it arrives: parsed, validated
/// and written batch by batch, committed once the whole body has been read
/// and found good. A body refused on the way (too large, cut short, stalled,
/// not JSON, invalid features) is rolled back and answered as it would have
/// been read whole. The Idempotency-Key is looked up before the body is read
/// (a stored response is then replayed once the body's hash is known, and
/// nothing is written); it is claimed with the request's hash in the
/// transaction's last flight, before COMMIT.
async fn create_streamed(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    streamed: StreamedBody,
    how: Reading,
    answer: Arc<PostAnswer>,
) -> Result<StreamOutcome, ApiError> {
    let found = look_up_key(state, caller, headers).await?;
    let (found, stored) = match found {
        Some(found) if found.has_response() => (None, Some(found)),
        found => (found, None),
    };
    if let Some(found) = stored {
        let hash = streamed.end().await?.expect("a keyed request is hashed");
        return match found.settle(hash, Mode::Atomic)? {
            KeyUse::Replay(response) => Ok(StreamOutcome::Answered(response)),
            KeyUse::Write(_) => unreachable!("a stored response is replayed or refused"),
        };
    }
    let may_read = caller.can_read(&answer.coll.id);
    let coll = answer.coll.clone();
    let srid = how.crs.srid;
    let StreamedBody {
        head,
        rest,
        received: reading,
        ..
    } = streamed;
    let (batches, parse) = read_rows(head, rest, coll.clone(), how, state.write.limits);
    let (verdict, judged) = oneshot::channel();
    let idempotency = found.map(|found| found.idempotency(answer.clone()));
    let writing = write_stream(
        state.db.clone(),
        coll.clone(),
        batches,
        judged,
        state.write,
        idempotency.clone(),
        srid,
    );
    // The body's end decides: the read (its limits) first, then the parse.
    let judging = async move {
        let parsed = parse.await;
        let outcome = match (body::received(reading).await, parsed) {
            (Err(e), _) => Err(e),
            (_, Err(e)) => Err(ApiError::from(Error::task_failed("parsing the body", &e))),
            (Ok(hash), Ok(parsed)) => Ok((hash, parsed)),
        };
        let commit = match &outcome {
            Ok((hash, Rows(Ok(_)))) => Verdict::Commit {
                hash: hash.clone().unwrap_or_default(),
            },
            _ => Verdict::Abandon,
        };
        let _ = verdict.send(commit);
        outcome
    };
    let (written, outcome) = tokio::join!(writing, judging);
    let (hash, parsed) = outcome?;
    let idempotency = idempotency.map(|idem| Idempotency {
        hash: hash.unwrap_or_default(),
        ..idem
    });
    let preferences = &answer.preferences;
    let shapes = match parsed {
        Whole(parsed) => return Ok(StreamOutcome::Held(parsed, idempotency)),
        Rows(Err(e)) => return Err(refused_as_read(e.into(), preferences)),
        Rows(Ok(shapes)) => shapes,
    };
    let written =
        written.map_err(|e| refused_as_read(e.for_reader(may_read).into(), preferences))?;
    match written {
        Some(report) => Ok(StreamOutcome::Answered(
            answered(state, &answer, &report).await,
        )),
        // A FeatureCollection without features.
        None => Ok(StreamOutcome::Held(
            Ok(ParsedBody {
                single: false,
                rows: Vec::new(),
                shapes,
                srid,
                crs: answer.rendering.crs.clone(),
                jsonfg: false,
                rejected: Vec::new(),
                row_features: Vec::new(),
            }),
            idempotency,
        )),
    }
}

/// How a POST of features is answered: with the bulk report, or (one
/// Feature with `Prefer: return=…`) as OGC API - Features Part 4 says. Under
/// an Idempotency-Key the answer is made in the write's transaction and
/// stored with it, so that a replay is this answer ([`Respond`]).
#[derive(Debug)]
struct PostAnswer {
    coll: Arc<Collection>,
    base: BaseUrl,
    /// The preferences, as far as the caller's rights allow.
    preferences: Preferences,
    /// How the feature is shown: in the body's CRS, and encoding.
    rendering: Rendering,
    /// The body was one Feature.
    single: bool,
    /// The answer made for a keyed write, to send as stored.
    made: Mutex<Option<Answer>>,
}

impl PostAnswer {
    /// The same answer for a body that was (or was not) one Feature, its
    /// feature shown with `rendering`.
    fn for_body(&self, single: bool, rendering: Rendering) -> PostAnswer {
        PostAnswer {
            coll: self.coll.clone(),
            base: BaseUrl(self.base.0.clone()),
            preferences: self.preferences,
            rendering,
            single,
            made: Mutex::new(None),
        }
    }

    /// The created feature's id, when the body was one Feature.
    fn id(&self, report: &WriteReport) -> Option<String> {
        report.ids.text(0).filter(|_| self.single)
    }

    /// The response, showing the created feature as `stored` when the
    /// preference asks for it and it could be read.
    fn response(&self, report: &WriteReport, stored: Option<&StoredFeature>) -> Response {
        let Some(id) = self.id(report) else {
            let mut response = (StatusCode::CREATED, Json(report)).into_response();
            set_preference_applied(&mut response, &self.preferences, false);
            return response;
        };
        let preference = self.preferences.return_;
        let mut response = match stored.filter(|_| preference != Return::Unspecified) {
            Some(stored) => created(
                stored,
                preference,
                &self.base,
                &self.coll,
                &id,
                &self.rendering,
            ),
            // Not asked for, or not readable (gone already, or a role that
            // may insert but not select): the report still tells the id.
            None => (StatusCode::CREATED, Json(report)).into_response(),
        };
        set_location(&mut response, &self.base, &self.coll, &id);
        let honoured = preference != Return::Unspecified && stored.is_some();
        set_preference_applied(&mut response, &self.preferences, honoured);
        response
    }
}

impl Respond for PostAnswer {
    fn shows(&self, report: &WriteReport) -> Option<Shown> {
        let id = self.id(report)?;
        let shown = self.preferences.return_ != Return::Unspecified;
        shown.then(|| Shown {
            coll: self.coll.clone(),
            id,
            rendering: self.rendering.clone(),
        })
    }

    fn answer<'a>(
        &'a self,
        report: &'a WriteReport,
        feature: Option<&'a StoredFeature>,
    ) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            // The body was made in memory just now: reading it cannot fail.
            let (answer, _) = answer_of(self.response(report, feature))
                .await
                .expect("a body in memory reads");
            *self.made.lock().unwrap_or_else(PoisonError::into_inner) = Some(answer.clone());
            answer
        })
    }
}

/// The feature just created and committed, if it can be read. A read that
/// fails (the role may INSERT but not SELECT, a row security policy hides
/// it, it is already deleted, no connection is free) must not answer an
/// error for a row that exists: the caller gets the 201 report instead.
async fn read_back(
    state: &AppState,
    coll: &Collection,
    id: &str,
    rendering: &Rendering,
) -> Option<StoredFeature> {
    read::item_as(&state.db, coll, id, &rendering.crs, rendering.encoding)
        .await
        .inspect_err(|e| tracing::warn!(collection = %coll.id, id, error = %e, "created feature not read back; answered with the report"))
        .ok()
        .flatten()
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
