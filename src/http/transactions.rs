//! `POST /transactions`: a whole edit session in one request.

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::body::{check_content_type, idempotency, read_body, BodyBytes, KeyUse};
use super::links::BaseUrl;
use super::model::SessionBody;
use super::ogc_tx::OgcTransaction;
use super::problem::{ApiError, Problem, Wrong};
use super::query_pairs;
use crate::auth::Caller;
use crate::catalog::Catalog;
use crate::error::Error;
use crate::feature::InputLimits;
use crate::http::app::AppState;
use crate::read::params::{check_format, unknown_parameter};
use crate::session::ogc::{self, report::Names};
use crate::session::report::BYTES_PER_OPERATION;
use crate::session::{self, input, Mode, Operation, Reply, SessionAnswer, Step};
use crate::write::idempotency::Idempotency;

/// The `mode` query parameter; `f` (only `json`) is taken too where `with_f`.
pub fn mode(query: Option<&str>, with_f: bool) -> Result<Mode, ApiError> {
    let mut mode = Mode::Atomic;
    for (name, value) in query_pairs(query)? {
        match name.as_str() {
            "mode" => {
                mode = Mode::parse(&value).ok_or_else(|| {
                    ApiError::new(
                        Wrong::InvalidParameter,
                        format!("query parameter 'mode': '{value}' is not atomic, batch or skip"),
                    )
                })?
            }
            "f" if with_f => check_format(&value)?,
            other => return Err(unknown_parameter(other, "mode").into()),
        }
    }
    Ok(mode)
}

/// Run a validated session ([`session::carry_out`]) and answer 200 with its report.
pub async fn answer(
    state: &AppState,
    operations: &[Operation],
    steps: &[Step],
    mode: Mode,
    idempotency: Option<&Idempotency>,
) -> Result<Response, ApiError> {
    let work = (operations, steps);
    run_and_reply(state, work, mode, idempotency, Reply::Report).await
}

/// Run a validated session and answer 200 with its report as `reply` has it.
async fn run_and_reply(
    state: &AppState,
    (operations, steps): (&[Operation], &[Step]),
    mode: Mode,
    idempotency: Option<&Idempotency>,
    reply: Reply<'_>,
) -> Result<Response, ApiError> {
    // Operations and their report, one result each, are counted in the
    // memory bodies share until the answer is made.
    let room = operations.len().saturating_mul(BYTES_PER_OPERATION);
    let _room = state.body_room.reserve(room).await?;
    let batch = state.write.limits.max_features;
    let work = (operations, steps);
    let report = session::carry_out(&state.db, work, mode, batch, idempotency, reply).await?;
    let document = reply.document(report, operations, steps);
    Ok((StatusCode::OK, Json(document)).into_response())
}

/// Read the body with `read`, off the async threads (a large session takes a while).
async fn read_off_thread<T: Send + 'static>(
    state: &AppState,
    caller: &Caller,
    body: BodyBytes,
    read: impl FnOnce((&Catalog, InputLimits), &Caller, &[u8]) -> Result<T, Error> + Send + 'static,
) -> Result<T, ApiError> {
    let (state, caller) = (state.clone(), caller.clone());
    let read = tokio::task::spawn_blocking(move || {
        read((&state.catalog(), state.input_limits), &caller, &body)
    })
    .await
    .map_err(|e| Error::task_failed("parsing the body", &e))??;
    Ok(read)
}

#[utoipa::path(
    post,
    path = "/transactions",
    tag = "Features",
    summary = "Save a whole edit session: inserts, replaces, updates and deletes across collections, pipelined, in request order",
    operation_id = "transaction",
    params(("mode" = Option<String>, Query, description = "atomic (default): all or nothing; batch: each batch commits on its own; skip: every valid operation is written, failing ones are skipped. Not with an OGC transaction, whose semantic says it"), ("Idempotency-Key" = Option<String>, Header, description = "atomic mode: a retry with the same key and body returns the first response (Idempotent-Replayed: true) and writes nothing")),
    request_body(description = "The operations, in order: featurepipe's format, or an OGC API - Features Part 11 (draft) transaction, whose `semantic` is the mode (`batch` is `skip`)", content((SessionBody = "application/json"), (OgcTransaction = "application/ogc-tx+json"))),
    responses(
        (status = 200, description = "The session ran: each operation's result (ids, ETag or count) and status, per-batch status; to an OGC transaction, its response (counts, links to the features, exceptions)", body = SessionAnswer),
        (status = 400, description = "Not JSON, or operations that are not operations (an OGC transaction with `mode`)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Atomic: a feature to replace, update or delete does not exist; nothing was written (the report is attached)", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Atomic: a constraint refused an operation; nothing was written", body = Problem, content_type = "application/problem+json"),
        (status = 412, description = "Atomic: an if_match did not match; nothing was written. To a caller who may read it, the body tells the feature as it is now (`feature`) and its `etag`", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than FEATUREPIPE_MAX_BODY", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Content-Type is not JSON or application/ogc-tx+json", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Operations that do not fit their tables (errors point into the operations or transaction array), or an OGC filter not by id; nothing was written", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unreachable or busy; retry (Retry-After)", body = Problem, content_type = "application/problem+json")
    )
)]
/// Validate every operation, then run them all in one flight.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    base: BaseUrl,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let mode = mode(query.as_deref(), false)?;
    // Nothing of the body is read for a caller who may write nothing.
    caller.check_write_any()?;
    let state = state.for_caller(&caller);
    let media_type = check_content_type(&headers, &["application/json", ogc::MEDIA_TYPE])?;
    let is_ogc = media_type == ogc::MEDIA_TYPE;
    if is_ogc
        && query_pairs(query.as_deref())?
            .iter()
            .any(|(name, _)| name == "mode")
    {
        return Err(ApiError::new(
            Wrong::InvalidParameter,
            "an OGC transaction's \"semantic\" says how it commits: leave out the query parameter 'mode'",
        ));
    }
    let body = read_body(&state, &headers, body).await?;
    let target = format!("/transactions?{}", query.as_deref().unwrap_or(""));
    // An OGC transaction is atomic or skips failed actions: both take keys.
    let key = idempotency(&state, &caller, &headers, ("POST", &target), &body, mode).await?;
    let idempotency = match key {
        KeyUse::Replay(response) => return Ok(response),
        KeyUse::Write(idempotency) => idempotency,
    };
    if is_ogc {
        let tx = read_off_thread(&state, &caller, body, ogc::parse).await?;
        let names = Names {
            action_ids: &tx.action_ids,
            base: &base.0,
        };
        let work = (tx.operations.as_slice(), tx.steps.as_slice());
        return run_and_reply(
            &state,
            work,
            tx.mode,
            idempotency.as_ref(),
            Reply::Ogc(names),
        )
        .await;
    }
    let keep_valid = mode == Mode::Skip;
    let (operations, steps) =
        read_off_thread(&state, &caller, body, move |catalog, caller, body| {
            input::parse(catalog, caller, body, keep_valid)
        })
        .await?;
    answer(&state, &operations, &steps, mode, idempotency.as_ref()).await
}
