//! The one place where what went wrong becomes an HTTP answer: every
//! problem's status and type are in [`Wrong::answer`], rendered as RFC 9457
//! `application/problem+json`.

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;

use crate::db::DbError;
use crate::error::{Current, Error, ErrorKind, FieldError, Refusal, MAX_LISTED_ERRORS};
use crate::session::report::SessionReport;
use crate::write::report::{BatchReport, BatchStatus};

/// What an answer says went wrong: a domain error, or a problem with the
/// HTTP request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrong {
    /// What the domain said.
    Domain(ErrorKind),
    /// No route at this path.
    NotFound,
    /// The route takes other methods.
    MethodNotAllowed,
    /// The collection takes no writes.
    ReadOnlyCollection,
    /// A query parameter or header is wrong.
    InvalidParameter,
    /// `Content-Type` is missing.
    MissingContentType,
    /// `Content-Type` is not one this route reads.
    UnsupportedMediaType,
    /// `Content-Encoding` is not gzip or identity.
    UnsupportedEncoding,
    /// The body could not be read (or decompressed).
    UnreadableBody,
    /// The body is larger than `FEATUREPIPE_MAX_BODY`.
    BodyTooLarge,
    /// The body took longer than `FEATUREPIPE_UPLOAD_TIMEOUT`.
    UploadTimeout,
    /// The bodies being read already hold `FEATUREPIPE_BODY_MEMORY`.
    Busy,
    /// The request took longer than `FEATUREPIPE_REQUEST_TIMEOUT`.
    DeadlineExceeded,
    /// A `Content-Crs` the collection cannot take.
    UnsupportedCrs,
    /// The body's id is not the URL's.
    IdMismatch,
    /// No feature with this id.
    UnknownFeature,
    /// The feature changed since `If-Match` / `If-Unmodified-Since`.
    PreconditionFailed,
    /// The collection requires `If-Match` or `If-Unmodified-Since`.
    PreconditionRequired,
    /// A BEFORE trigger returned NULL: the feature would not be written.
    SkippedByTrigger,
    /// `Idempotency-Key` on a request that takes none.
    IdempotencyUnsupported,
    /// An `Idempotency-Key` that is not one.
    InvalidIdempotencyKey,
    /// An `Idempotency-Key` used before for another request.
    IdempotencyKeyReused,
}

impl Wrong {
    /// The status and the problem type (`urn:featurepipe:problem:<type>`):
    /// the whole API's error statuses, on one screen.
    pub fn answer(self) -> (StatusCode, &'static str) {
        use ErrorKind as K;
        use StatusCode as S;
        match self {
            Wrong::Domain(kind) => match kind {
                K::InvalidJson => (S::BAD_REQUEST, "invalid-json"),
                K::InvalidGeojson => (S::BAD_REQUEST, "invalid-geojson"),
                K::InvalidOperations => (S::BAD_REQUEST, "invalid-operations"),
                K::InvalidParameter => (S::BAD_REQUEST, "invalid-parameter"),
                K::ValidationFailed => (S::UNPROCESSABLE_ENTITY, "validation-failed"),
                K::TooManyFeatures => (S::PAYLOAD_TOO_LARGE, "too-many-features"),
                K::Unauthorized => (S::UNAUTHORIZED, "unauthorized"),
                K::Forbidden => (S::FORBIDDEN, "forbidden"),
                K::UnknownCollection => (S::NOT_FOUND, "unknown-collection"),
                K::IdempotencyKeyInUse => (S::CONFLICT, "idempotency-key-in-use"),
                K::NoChangeFeed => (S::NOT_FOUND, "no-change-feed"),
                K::InvalidCursor => (S::BAD_REQUEST, "invalid-cursor"),
                K::CursorExpired => (S::GONE, "cursor-expired"),
                K::FeedNotInstalled => (S::SERVICE_UNAVAILABLE, "change-feed-not-installed"),
                K::TooManyLongPolls => (S::SERVICE_UNAVAILABLE, "too-many-long-polls"),
                K::Refused(Refusal::Conflicting) => (S::CONFLICT, "write-failed"),
                K::Refused(Refusal::Missing) => (S::NOT_FOUND, "write-failed"),
                K::Refused(Refusal::Changed) => (S::PRECONDITION_FAILED, "write-failed"),
                K::Refused(Refusal::Unfit) => (S::UNPROCESSABLE_ENTITY, "write-failed"),
                K::Refused(Refusal::NotPermitted) => (S::FORBIDDEN, "write-failed"),
                K::Refused(Refusal::Fault) => (S::INTERNAL_SERVER_ERROR, "database-error"),
                K::Refused(Refusal::Busy) | K::Unavailable => {
                    (S::SERVICE_UNAVAILABLE, "database-unavailable")
                }
                K::OutcomeUnknown => (S::BAD_GATEWAY, "outcome-unknown"),
                K::Internal => (S::INTERNAL_SERVER_ERROR, "internal"),
            },
            Wrong::NotFound => (S::NOT_FOUND, "not-found"),
            Wrong::MethodNotAllowed => (S::METHOD_NOT_ALLOWED, "method-not-allowed"),
            Wrong::ReadOnlyCollection => (S::METHOD_NOT_ALLOWED, "read-only-collection"),
            Wrong::InvalidParameter => (S::BAD_REQUEST, "invalid-parameter"),
            Wrong::MissingContentType => (S::BAD_REQUEST, "missing-content-type"),
            Wrong::UnsupportedMediaType => (S::UNSUPPORTED_MEDIA_TYPE, "unsupported-media-type"),
            Wrong::UnsupportedEncoding => (S::UNSUPPORTED_MEDIA_TYPE, "unsupported-encoding"),
            Wrong::UnreadableBody => (S::BAD_REQUEST, "unreadable-body"),
            Wrong::BodyTooLarge => (S::PAYLOAD_TOO_LARGE, "body-too-large"),
            Wrong::UploadTimeout => (S::REQUEST_TIMEOUT, "upload-timeout"),
            Wrong::Busy => (S::SERVICE_UNAVAILABLE, "busy"),
            Wrong::DeadlineExceeded => (S::GATEWAY_TIMEOUT, "deadline-exceeded"),
            Wrong::UnsupportedCrs => (S::BAD_REQUEST, "unsupported-crs"),
            Wrong::IdMismatch => (S::BAD_REQUEST, "id-mismatch"),
            Wrong::UnknownFeature => (S::NOT_FOUND, "unknown-feature"),
            Wrong::PreconditionFailed => (S::PRECONDITION_FAILED, "precondition-failed"),
            Wrong::PreconditionRequired => (S::PRECONDITION_REQUIRED, "precondition-required"),
            Wrong::SkippedByTrigger => (S::UNPROCESSABLE_ENTITY, "skipped-by-trigger"),
            Wrong::IdempotencyUnsupported => (S::BAD_REQUEST, "idempotency-unsupported"),
            Wrong::InvalidIdempotencyKey => (S::BAD_REQUEST, "invalid-idempotency-key"),
            Wrong::IdempotencyKeyReused => (S::UNPROCESSABLE_ENTITY, "idempotency-key-reused"),
        }
    }

    /// The headers every answer of this kind carries.
    fn headers(self) -> &'static [(HeaderName, &'static str)] {
        const RETRY: &[(HeaderName, &str)] = &[(header::RETRY_AFTER, "1")];
        const CHALLENGE: &[(HeaderName, &str)] =
            &[(header::WWW_AUTHENTICATE, "Bearer realm=\"featurepipe\"")];
        match self {
            Wrong::Domain(
                ErrorKind::Unavailable
                | ErrorKind::Refused(Refusal::Busy)
                | ErrorKind::TooManyLongPolls,
            )
            | Wrong::Busy => RETRY,
            // RFC 6750's challenge.
            Wrong::Domain(ErrorKind::Unauthorized) => CHALLENGE,
            _ => &[],
        }
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
    #[schema(value_type = Option<Vec<BatchReport>>)]
    batches: Option<serde_json::Value>,
    /// For a failed edit session: what happened to each operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    report: Option<serde_json::Value>,
    /// For a 412: the feature as it is now, when the caller may read it
    /// (its geometry in the request's CRS, as `Content-Crs` says).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    feature: Option<Box<RawValue>>,
    /// For a 412: the ETag the feature has now, for If-Match on the next try.
    #[serde(skip_serializing_if = "Option::is_none")]
    etag: Option<String>,
    /// The request's id (`x-request-id`), to find its log lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<String>,
    #[serde(skip)]
    headers: Vec<(HeaderName, HeaderValue)>,
    /// The database said the catalog is older than the tables.
    #[serde(skip)]
    stale_catalog: bool,
}

/// On a response whose error says the catalog is older than the tables:
/// the catalog is read again at once (`app::reload_when_stale`).
#[derive(Debug, Clone, Copy)]
pub struct StaleCatalog;

impl ApiError {
    /// A problem of kind `wrong`, said in one line.
    pub fn new(wrong: Wrong, detail: impl Into<String>) -> Self {
        let (status, kind) = wrong.answer();
        let headers = wrong
            .headers()
            .iter()
            .map(|(name, value)| (name.clone(), HeaderValue::from_static(value)))
            .collect();
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
            feature: None,
            etag: None,
            request_id: None,
            headers,
            stale_catalog: false,
        }))
    }

    /// Add a response header (`Allow`, `Accept`, …).
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.0.headers.push((name, value));
        self
    }

    /// Attach the problems of the body's fields.
    pub fn with_errors(mut self, errors: Vec<FieldError>) -> Self {
        self.0.total_errors = Some(errors.len());
        self.0.errors = errors;
        self
    }

    /// Say that the batches `report` lists as committed stay committed
    /// (batch mode, a body refused after they were written), and attach it.
    pub fn with_committed(mut self, report: &SessionReport) -> Self {
        let batches = report
            .batches
            .iter()
            .filter(|b| b.status == BatchStatus::Committed)
            .count();
        self.0.detail = format!(
            "{}; but {} feature(s) in {batches} batch(es) were committed before the problem              was found (mode=batch commits each batch on its own): \"report\" lists them",
            self.0.detail.replace("; nothing was written", ""),
            report.written,
        );
        self.0.report = serde_json::to_value(report).ok();
        self
    }

    /// Tell the feature as it is now (a failed precondition).
    pub fn with_current(mut self, current: &Current) -> Self {
        self.0.feature = RawValue::from_string(current.feature.clone()).ok();
        self.0.etag = Some(current.etag.clone());
        self
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        self.0.http_status
    }

    /// The detail line.
    pub fn detail(&self) -> &str {
        &self.0.detail
    }
}

impl From<Error> for ApiError {
    fn from(err: Error) -> Self {
        let mut api = ApiError::new(Wrong::Domain(err.kind()), err.detail());
        let problem = &mut api.0;
        problem.errors = err.errors().to_vec();
        problem.errors.truncate(MAX_LISTED_ERRORS);
        problem.total_errors = err.counted_errors();
        problem.batches = err.batches().cloned();
        problem.report = err.report().cloned();
        problem.stale_catalog = err.stale_catalog();
        match err.current() {
            Some(current) => api.with_current(current),
            None => api,
        }
    }
}

impl From<DbError> for ApiError {
    fn from(err: DbError) -> Self {
        Error::from(err).into()
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
        problem.request_id = super::telemetry::request_id();
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
        if problem.stale_catalog {
            response.extensions_mut().insert(StaleCatalog);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_database_and_a_missing_credential_carry_their_headers() {
        let busy = ApiError::from(Error::unavailable("later"));
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(busy.0.headers.iter().any(|(n, _)| n == header::RETRY_AFTER));
        let who = ApiError::from(crate::auth::unauthorized("who are you?"));
        assert_eq!(who.status(), StatusCode::UNAUTHORIZED);
        assert!(who
            .0
            .headers
            .iter()
            .any(|(n, _)| n == header::WWW_AUTHENTICATE));
    }
}
