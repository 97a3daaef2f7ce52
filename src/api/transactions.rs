//! `POST /transactions`: a whole edit session in one request.

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::body::{check_content_type, idempotency, read_body, KeyUse};
use super::model::SessionBody;
use super::query_pairs;
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, Problem};
use crate::read::params::{check_format, unknown_parameter};
use crate::session::report::SessionReport;
use crate::session::{self, input, Mode, Operation, Step};
use crate::write::dberror::refusal;
use crate::write::idempotency::Idempotency;
use crate::write::report::BatchStatus;

/// The `mode` query parameter; `f` (only `json`) is taken too where `with_f`.
pub fn mode(query: Option<&str>, with_f: bool) -> Result<Mode, ApiError> {
    let mut mode = Mode::Atomic;
    for (name, value) in query_pairs(query)? {
        match name.as_str() {
            "mode" => {
                mode = Mode::parse(&value).ok_or_else(|| {
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "invalid-parameter",
                        format!("query parameter 'mode': '{value}' is not atomic, batch or skip"),
                    )
                })?
            }
            "f" if with_f => check_format(&value)?,
            other => return Err(unknown_parameter(other, "mode")),
        }
    }
    Ok(mode)
}

/// Run a validated session and answer: 200 with the report, or, when an
/// atomic session failed (nothing written), the first failure's problem with
/// the report attached.
///
/// An atomic session rolled back by a deadlock or a serialization failure is
/// run again (`FEATUREPIPE_RETRIES`). Batch and skip sessions are not: other
/// batches may have committed after the failed one (running it again would
/// reorder the writes), and in skip mode the transaction went on after
/// rolling back to the operation's savepoint; the report says what failed.
pub async fn answer(
    state: &AppState,
    operations: &[Operation],
    steps: &[Step],
    mode: Mode,
    idempotency: Option<&Idempotency>,
) -> Result<Response, ApiError> {
    let batch = state.write.limits.max_features;
    let attempt = || async {
        let report = session::run(&state.db, operations, steps, mode, batch, idempotency).await?;
        match report.failure {
            Some(status) if mode == Mode::Atomic => Err(rolled_back(status, &report)),
            _ => Ok(report),
        }
    };
    let report = match mode {
        Mode::Atomic => state.db.retry().run(attempt).await?,
        Mode::Batch | Mode::Skip => attempt().await?,
    };
    if lost_after_commit(&report) {
        let attached = serde_json::to_value(&report).unwrap_or_default();
        return Err(ApiError::outcome_unknown().with_report(attached));
    }
    Ok((StatusCode::OK, Json(report)).into_response())
}

/// Whether the connection was lost after a COMMIT went out: some batch may or
/// may not have been written.
fn lost_after_commit(report: &SessionReport) -> bool {
    report
        .batches
        .iter()
        .any(|b| b.status == BatchStatus::Unknown)
}

/// The problem of an atomic session that failed: its first failure (of an
/// operation, or at COMMIT), with the report attached. A session whose
/// connection was lost after COMMIT was sent may have been written: that is
/// an unknown outcome, never "nothing was written".
fn rolled_back(status: StatusCode, report: &SessionReport) -> ApiError {
    let attached = serde_json::to_value(report).unwrap_or_default();
    if lost_after_commit(report) {
        return ApiError::outcome_unknown().with_report(attached);
    }
    let first = report
        .results
        .iter()
        .find_map(|r| r.error.clone())
        .or_else(|| report.errors.first().cloned())
        .into_iter()
        .collect();
    let detail = "an operation failed; the session was rolled back and nothing was written";
    refusal(status, detail.into(), first).with_report(attached)
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
        input::parse(&parse_state, &parse_caller, &body, mode == Mode::Skip)
    })
    .await
    .map_err(|e| ApiError::task_failed("parsing the body", &e))??;
    answer(&state, &operations, &steps, mode, idempotency.as_ref()).await
}
