//! `POST /transactions`: a whole edit session in one request.

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::body::{check_content_type, idempotency, read_body, KeyUse};
use super::model::SessionBody;
use super::problem::{ApiError, Problem, Wrong};
use super::query_pairs;
use crate::auth::Caller;
use crate::error::Error;
use crate::http::app::AppState;
use crate::read::params::{check_format, unknown_parameter};
use crate::session::report::SessionReport;
use crate::session::{self, input, Mode, Operation, Step};
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
    let batch = state.write.limits.max_features;
    let report = session::carry_out(&state.db, operations, steps, mode, batch, idempotency).await?;
    Ok((StatusCode::OK, Json(report)).into_response())
}

#[utoipa::path(
    post,
    path = "/transactions",
    tag = "Features",
    summary = "Save a whole edit session: inserts, replaces, updates and deletes across collections, pipelined, in request order",
    operation_id = "transaction",
    params(("mode" = Option<String>, Query, description = "atomic (default): all or nothing; batch: each batch commits on its own; skip: every valid operation is written, failing ones are skipped"), ("Idempotency-Key" = Option<String>, Header, description = "atomic mode: a retry with the same key and body returns the first response (Idempotent-Replayed: true) and writes nothing")),
    request_body(description = "The operations, in order", content((SessionBody = "application/json"))),
    responses(
        (status = 200, description = "The session ran: each operation's result (ids, ETag or count) and status, per-batch status", body = SessionReport),
        (status = 400, description = "Not JSON, or operations that are not operations", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Atomic: a feature to replace, update or delete does not exist; nothing was written (the report is attached)", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Atomic: a constraint refused an operation; nothing was written", body = Problem, content_type = "application/problem+json"),
        (status = 412, description = "Atomic: an if_match did not match; nothing was written", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than FEATUREPIPE_MAX_BODY", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Content-Type is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Operations that do not fit their tables (errors point into the operations array); nothing was written", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unreachable or busy; retry (Retry-After)", body = Problem, content_type = "application/problem+json")
    )
)]
/// Validate every operation, then run them all in one flight.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let mode = mode(query.as_deref(), false)?;
    // Nothing of the body is read for a caller who may write nothing.
    caller.check_write_any()?;
    let state = state.for_caller(&caller);
    check_content_type(&headers, &["application/json"])?;
    let body = read_body(&state, &headers, body).await?;
    let target = format!("/transactions?{}", query.as_deref().unwrap_or(""));
    let key = idempotency(&state, &caller, &headers, ("POST", &target), &body, mode).await?;
    let idempotency = match key {
        KeyUse::Replay(response) => return Ok(response),
        KeyUse::Write(idempotency) => idempotency,
    };
    let (parse_state, parse_caller) = (state.clone(), caller.clone());
    let (operations, steps) = tokio::task::spawn_blocking(move || {
        let catalog = parse_state.catalog();
        input::parse(
            (&catalog, parse_state.input_limits),
            &parse_caller,
            &body,
            mode == Mode::Skip,
        )
    })
    .await
    .map_err(|e| Error::task_failed("parsing the body", &e))??;
    answer(&state, &operations, &steps, mode, idempotency.as_ref()).await
}
