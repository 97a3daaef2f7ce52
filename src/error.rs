//! One error type for the HTTP API, rendered as RFC 9457 `application/problem+json`.

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::write::report::BatchReport;
use crate::write::retry::Conflict;

/// How many individual problems a response lists; the total is always given.
pub const MAX_LISTED_ERRORS: usize = 100;

/// One problem with one feature: where it is (JSON pointer) and what is wrong.
#[derive(Debug, Clone, Serialize, PartialEq, ToSchema)]
pub struct FieldError {
    /// Index of the operation of an edit session (`POST /transactions`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<usize>,
    /// Index of the feature in the request (0 for a single Feature); absent
    /// when the database could not tie the problem to one feature (e.g. at COMMIT).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feature: Option<usize>,
    /// JSON pointer into the request body, e.g. `/features/17/properties/height`.
    pub pointer: String,
    /// Stable machine-readable code, e.g. `unknown_property`.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
    /// SQLSTATE when the database reported the problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sqlstate: Option<String>,
    /// Constraint named by the database.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
    /// Column named by the database.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// The database's DETAIL line: never a failing row; only for readers of the collection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl FieldError {
    /// A validation problem found before touching the database.
    pub fn new(feature: usize, pointer: String, code: &str, message: impl Into<String>) -> Self {
        FieldError {
            operation: None,
            feature: Some(feature),
            pointer,
            code: code.to_owned(),
            message: message.into(),
            sqlstate: None,
            constraint: None,
            column: None,
            detail: None,
        }
    }

    /// As told to a caller who may or may not (`may_read`) read the
    /// collection: a DETAIL can quote values stored in it, so only readers get it.
    pub fn for_reader(mut self, may_read: bool) -> Self {
        if !may_read {
            self.detail = None;
        }
        self
    }
}

/// An error answered to the client as problem+json (boxed: errors travel far, and often).
#[derive(Debug, Clone)]
pub struct ApiError(Box<Problem>);

/// The problem document (RFC 9457), with the feature-level problems.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Problem {
    #[serde(skip)]
    http_status: StatusCode,
    /// Problem type: `urn:featurepipe:problem:<kind>` (not dereferenceable).
    #[serde(rename = "type")]
    kind: String,
    /// The status's reason phrase.
    title: String,
    /// The HTTP status code.
    status: u16,
    /// What went wrong, in one line.
    detail: String,
    /// Problems with features or fields: the first 100.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    errors: Vec<FieldError>,
    /// How many problems there were in all.
    #[serde(skip_serializing_if = "Option::is_none")]
    total_errors: Option<usize>,
    /// For a failed write: what happened to each batch (none is committed).
    #[serde(skip_serializing_if = "Option::is_none")]
    batches: Option<Vec<BatchReport>>,
    /// For a failed edit session: what happened to each operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    report: Option<serde_json::Value>,
    /// The request's id (`x-request-id`), to find its log lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<String>,
    #[serde(skip)]
    headers: Vec<(HeaderName, HeaderValue)>,
    /// The database rolled the transaction back for this reason: running it again may succeed.
    #[serde(skip)]
    conflict: Option<Conflict>,
}

impl ApiError {
    /// A problem with a status, a short kind (`invalid-json`, …) and a detail line.
    pub fn new(status: StatusCode, kind: &str, detail: impl Into<String>) -> Self {
        ApiError(Box::new(Problem {
            http_status: status,
            kind: format!("urn:featurepipe:problem:{kind}"),
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            detail: detail.into(),
            errors: Vec::new(),
            total_errors: None,
            batches: None,
            report: None,
            request_id: None,
            headers: Vec::new(),
            conflict: None,
        }))
    }

    /// 404 for an unknown collection.
    pub fn unknown_collection(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "unknown-collection",
            format!("no collection named '{id}'; GET /collections lists them"),
        )
    }

    /// 503 with `Retry-After`: the database cannot take the request now.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "database-unavailable",
            detail,
        )
        .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"))
    }

    /// [`ApiError::unavailable`] for a connection that failed: the error is
    /// logged, the caller reads only `detail`, since connection errors can
    /// name hosts, ports, users and TLS settings.
    pub fn connection_failed(detail: &str, err: &dyn std::fmt::Display) -> Self {
        tracing::warn!(error = %err, "{detail}");
        Self::unavailable(detail)
    }

    /// Add a response header (`Allow`, `Retry-After`, …).
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.0.headers.push((name, value));
        self
    }

    /// Attach the report of a failed edit session.
    pub fn with_report(mut self, report: serde_json::Value) -> Self {
        self.0.report = Some(report);
        self
    }

    /// The detail line.
    pub fn detail(&self) -> &str {
        &self.0.detail
    }

    /// Replace the detail line.
    pub fn with_detail(mut self, detail: String) -> Self {
        self.0.detail = detail;
        self
    }

    /// Mark the error as a transaction the database rolled back because of `conflict`.
    pub fn with_conflict(mut self, conflict: Option<Conflict>) -> Self {
        self.0.conflict = conflict;
        self
    }

    /// Why the database rolled the transaction back, when running it again may succeed.
    pub fn conflict(&self) -> Option<Conflict> {
        self.0.conflict
    }

    /// 500 for a fault of the service or the database that the client cannot fix.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", detail)
    }

    /// 500 for a panic or an aborted task of the service; what failed stays
    /// in the log, since a panic's text may describe internals.
    pub fn failed() -> Self {
        Self::internal(
            "the service failed while answering this request; it was logged. If it was a \
             write, check whether it took effect before sending it again",
        )
    }

    /// [`ApiError::failed`] for the task doing `what` that did not finish
    /// (its panic or cancellation logged, never answered).
    pub fn task_failed(what: &str, err: &tokio::task::JoinError) -> Self {
        tracing::error!(error = %err, "the task {what} failed");
        Self::failed()
    }

    /// 502 for a write whose connection to the database was lost after COMMIT
    /// was sent and before its answer: it may or may not have been written.
    /// No `Retry-After`: a blind retry could write everything twice.
    pub fn outcome_unknown() -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            "outcome-unknown",
            "the connection to the database was lost after COMMIT was sent: whether \
             the features were written is unknown. Check before sending them again, \
             or retry with the same Idempotency-Key (a request sent with one is \
             answered from its first outcome); a retry without one may write them twice",
        )
    }

    /// Attach feature-level problems; only the first [`MAX_LISTED_ERRORS`] are kept.
    pub fn with_errors(self, errors: Vec<FieldError>) -> Self {
        let total = errors.len();
        self.with_some_errors(errors, total)
    }

    /// Attach the first of `total` feature-level problems (at most [`MAX_LISTED_ERRORS`] are kept).
    pub fn with_some_errors(mut self, mut errors: Vec<FieldError>, total: usize) -> Self {
        self.0.total_errors = Some(total);
        errors.truncate(MAX_LISTED_ERRORS);
        self.0.errors = errors;
        self
    }

    /// Attach the per-batch report of a failed write.
    pub fn with_batches(mut self, batches: Vec<BatchReport>) -> Self {
        self.0.batches = Some(batches);
        self
    }

    /// [`FieldError::for_reader`] for each feature-level problem.
    pub fn for_reader(mut self, may_read: bool) -> Self {
        let errors = std::mem::take(&mut self.0.errors);
        self.0.errors = errors.into_iter().map(|e| e.for_reader(may_read)).collect();
        self
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        self.0.http_status
    }

    /// The listed feature-level problems.
    pub fn errors(&self) -> &[FieldError] {
        &self.0.errors
    }

    /// All problems, including those not listed.
    pub fn total_errors(&self) -> usize {
        self.0.total_errors.unwrap_or(self.0.errors.len())
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.0.http_status, self.0.detail)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut problem = *self.0;
        problem.request_id = crate::telemetry::request_id();
        if problem.http_status.is_server_error() {
            tracing::error!(status = %problem.http_status, detail = %problem.detail, "request failed");
        }
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = (problem.http_status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        for (name, value) in problem.headers {
            headers.insert(name, value);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_task_is_answered_without_its_panic_text() {
        let joined = tokio::spawn(async { panic!("secret internals at 0xdead") }).await;
        let err = ApiError::task_failed("writing", &joined.unwrap_err());
        assert_eq!(err.0.http_status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!err.detail().contains("secret"), "{}", err.detail());
        assert!(!err.detail().contains("panic"), "{}", err.detail());
        assert_eq!(err.detail(), ApiError::failed().detail());
    }
}
