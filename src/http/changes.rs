//! `GET /collections/{collectionId}/changes`: a collection's change feed,
//! for clients that keep a copy (docs/offline-sync.md).

use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::value::RawValue;

use super::jsonfg;
use super::model::{ChangeOp, ChangesPage, FeatureChange};
use super::problem::{ApiError, Problem};
use super::query_pairs;
use super::representation::set_content_crs;
use crate::auth::Caller;
use crate::catalog::Collection;
use crate::changes::{self, Change, Cursor, Follow, MAX_WAIT};
use crate::error::{Error, ErrorKind};
use crate::geometry::Crs;
use crate::http::app::AppState;
use crate::read::filter::Filter;
use crate::read::params::{check_format, offered_crs, unknown_parameter, FilterParams, MAX_LIMIT};
use crate::read::Encoding;

/// Log entries per page when `limit` is not given.
const DEFAULT_LIMIT: i64 = 100;

/// The query of a request for changes.
struct ChangesQuery<'c> {
    since: Option<Cursor>,
    filter: Option<Filter>,
    limit: i64,
    wait: Duration,
    crs: &'c Crs,
    encoding: Encoding,
}

fn bad(param: &str, detail: &str) -> Error {
    Error::new(
        ErrorKind::InvalidParameter,
        format!("query parameter '{param}': {detail}"),
    )
}

impl<'c> ChangesQuery<'c> {
    /// Check the query string's pairs (`f=jsonfg` taken out, `encoding`
    /// saying whether it was asked for): unknown or repeated names are a 400.
    fn parse(
        pairs: &[(String, String)],
        coll: &'c Collection,
        encoding: Encoding,
    ) -> Result<Self, Error> {
        let mut filter = FilterParams::default();
        let mut query = ChangesQuery {
            since: None,
            filter: None,
            limit: DEFAULT_LIMIT,
            wait: Duration::ZERO,
            // JSON-FG's `place` is in the storage CRS unless another is asked for.
            crs: match encoding {
                Encoding::JsonFg => coll.storage_crs(),
                Encoding::GeoJson => &coll.crs[0],
            },
            encoding,
        };
        for (i, (name, value)) in pairs.iter().enumerate() {
            if pairs[..i].iter().any(|(n, _)| n == name) {
                return Err(bad(name, "given more than once"));
            }
            if filter.take(coll, name, value)? {
                continue;
            }
            match name.as_str() {
                "since" => query.since = Some(Cursor::decode(value)?),
                "limit" => {
                    let n: i64 = value
                        .parse()
                        .map_err(|_| bad(name, &format!("'{value}' is not an integer")))?;
                    if n < 1 {
                        return Err(bad(name, "must be at least 1"));
                    }
                    query.limit = n.min(MAX_LIMIT);
                }
                "wait" => {
                    let seconds: u64 = value.parse().map_err(|_| {
                        bad(name, &format!("'{value}' is not a whole number of seconds"))
                    })?;
                    query.wait = Duration::from_secs(seconds);
                    if query.wait > MAX_WAIT {
                        return Err(bad(
                            name,
                            &format!("at most {} seconds", MAX_WAIT.as_secs()),
                        ));
                    }
                }
                "crs" => query.crs = offered_crs(coll, name, value)?,
                "f" => check_format(value)?,
                other => {
                    return Err(unknown_parameter(
                        other,
                        "since, limit, wait, crs, filter, filter-lang, filter-crs and f",
                    ))
                }
            }
        }
        query.filter = filter.finish(coll)?;
        if query.since.is_none() && !query.wait.is_zero() {
            return Err(bad("wait", "is for following a cursor: give since too"));
        }
        Ok(query)
    }
}

/// The changes of a collection since a cursor: each changed feature as it
/// is when read (upsert) or gone (delete), and the cursor to follow on with.
#[utoipa::path(
    get,
    path = "/collections/{collectionId}/changes",
    tag = "Features",
    summary = "The collection's change feed: without since, the cursor for now; with it, what changed after it (collections with changes = true)",
    operation_id = "getChanges",
    params(("collectionId" = String, Path, description = "Collection id, from GET /collections"), ("since" = Option<String>, Query, description = "A cursor from an earlier answer; without it the answer is the cursor for now, and no changes: take it, download the collection, then follow it"), ("limit" = Option<i64>, Query, description = "Most changes logged in the database per page, 1..10000 (larger values are lowered); default 100. A feature changed several times is answered once"), ("wait" = Option<u64>, Query, description = "With since, when nothing has changed: wait up to this many seconds (at most 60) for a change to be committed, then answer (long poll)"), ("crs" = Option<String>, Query, description = "CRS of the features' geometries (one of the collection's `crs`); CRS84 by default"), ("filter" = Option<String>, Query, description = "A CQL2 filter (as on items): only the features that match it are followed; a changed feature that does not match (any more) is a delete, one that starts to match an upsert. The cursor is bound to the filter"), ("filter-lang" = Option<String>, Query, description = "cql2-text (the default) or cql2-json"), ("filter-crs" = Option<String>, Query, description = "CRS of the filter's geometries; CRS84 by default"), ("f" = Option<String>, Query, description = "json, or jsonfg for JSON-FG features (as Accept: application/fg+json); their place is then in the storage CRS unless crs says another")),
    responses((status = 200, description = "The changes after since, in the order to apply them, and the cursor to follow on with; more: ask again at once", body = ChangesPage, headers(("Content-Crs" = String, description = "CRS of the geometries, in angle brackets"))), (status = 400, description = "Bad parameter, or since is not a cursor of this collection (invalid-cursor)", body = Problem, content_type = "application/problem+json"), (status = 404, description = "No such collection, or it has no change feed (no-change-feed)", body = Problem, content_type = "application/problem+json"), (status = 410, description = "cursor-expired: changes after the cursor are no longer kept (FEATUREPIPE_CHANGES_RETENTION), or the feed started again; download the collection again with a new cursor", body = Problem, content_type = "application/problem+json"), (status = 503, description = "The database is unreachable or busy (Retry-After), the feed could not be installed (change-feed-not-installed), or too many long polls wait already (too-many-long-polls, Retry-After)", body = Problem, content_type = "application/problem+json"))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(collection_id): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let coll = state.to_read(&caller, &collection_id)?;
    changes::relid(&coll)?;
    let mut pairs = query_pairs(query.as_deref())?;
    let encoding = match jsonfg::asked(&mut pairs, &headers)? {
        true => Encoding::JsonFg,
        false => Encoding::GeoJson,
    };
    let query = ChangesQuery::parse(&pairs, &coll, encoding)?;
    let db = &state.for_caller(&caller).db;
    let page = match query.since {
        None => ChangesPage {
            changes: Vec::new(),
            cursor: changes::now(db, &coll, query.filter.as_ref())
                .await?
                .encode(),
            more: false,
        },
        Some(cursor) => {
            let follow = Follow {
                coll: &coll,
                cursor,
                limit: query.limit,
                crs: query.crs,
                encoding: query.encoding,
                filter: query.filter.as_ref(),
            };
            let page = changes::changes(db, &state.changes, follow, query.wait).await?;
            ChangesPage {
                changes: page.changes.into_iter().map(answered).collect(),
                cursor: page.cursor.encode(),
                more: page.more,
            }
        }
    };
    let mut response = Json(page).into_response();
    let headers = response.headers_mut();
    set_content_crs(headers, query.crs);
    // Each answer is of its moment: never one to keep or share.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// A change as the client is told it.
fn answered(change: Change) -> FeatureChange {
    let id = change.id;
    let raw = |json: String| RawValue::from_string(json).expect("PostgreSQL made this JSON");
    match change.feature {
        Some(feature) => FeatureChange {
            op: ChangeOp::Upsert,
            id: raw(id),
            feature: Some(raw(feature.json)),
            etag: Some(feature.etag),
        },
        None => FeatureChange {
            op: ChangeOp::Delete,
            id: raw(id),
            feature: None,
            etag: None,
        },
    }
}
