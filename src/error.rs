//! What went wrong, in the domain's words: a typed kind, a detail line, and
//! the features and fields at fault. No HTTP here: `http::problem` is the
//! one place that gives each kind a status and renders it as problem+json.

use serde::Serialize;
use utoipa::ToSchema;

use crate::db::DbError;

/// How many individual problems an error lists; the total is always given.
pub const MAX_LISTED_ERRORS: usize = 100;

/// What kind of thing went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The body is not JSON (or not UTF-8).
    InvalidJson,
    /// The body is JSON, but not a GeoJSON Feature or FeatureCollection.
    InvalidGeojson,
    /// An edit session's operations are not operations.
    InvalidOperations,
    /// Features do not fit the table.
    ValidationFailed,
    /// A query parameter (or the header standing for one) is wrong.
    InvalidParameter,
    /// More features than `FEATUREPIPE_MAX_FEATURES`.
    TooManyFeatures,
    /// No credential, or one that is not valid.
    Unauthorized,
    /// The caller may not do this.
    Forbidden,
    /// No collection of that name.
    UnknownCollection,
    /// Another request holding the same Idempotency-Key is running.
    IdempotencyKeyInUse,
    /// The collection publishes no change feed.
    NoChangeFeed,
    /// A change feed cursor that is not one, or is another collection's.
    InvalidCursor,
    /// A change feed cursor older than the feed's history (or its epoch):
    /// the client downloads the collection again.
    CursorExpired,
    /// The collection's change feed could not be installed (the log says why).
    FeedNotInstalled,
    /// As many long polls as the service lets wait are waiting.
    TooManyLongPolls,
    /// The database refused the work, for the reason given.
    Refused(Refusal),
    /// The database cannot take the request now (busy, unreachable).
    Unavailable,
    /// The connection was lost after COMMIT was sent: written or not, nobody knows.
    OutcomeUnknown,
    /// A fault of the service or the database that the client cannot fix.
    Internal,
}

/// Why the database refused, in the classes a client acts on; from SQLSTATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A unique, foreign-key or exclusion constraint, or more than one feature matched.
    Conflicting,
    /// No such feature (raised by the edit session's checks).
    Missing,
    /// The feature changed since the caller read it.
    Changed,
    /// The values do not fit: a data exception, a constraint, a trigger.
    Unfit,
    /// The database role may not do it.
    NotPermitted,
    /// A lock, a deadlock, a connection or resource problem, or a table
    /// changed under the catalog: try again later.
    Busy,
    /// Anything else: the service's or the database's fault.
    Fault,
}

/// Whether an SQLSTATE says the catalog is older than the tables.
/// featurepipe names only the catalog's tables and columns, and types its
/// parameters by it: one that is missing was dropped or renamed since the
/// catalog was read (42P01, 42703), a value of the wrong type (42804) met a
/// column retyped since; the next reload, asked for at once, puts it right.
pub fn stale_catalog(sqlstate: &str) -> bool {
    matches!(sqlstate, "42P01" | "42703" | "42804")
}

impl Refusal {
    /// The class of an SQLSTATE.
    pub fn of(sqlstate: &str) -> Refusal {
        match sqlstate {
            "23505" | "23503" | "23P01" | "21000" => Refusal::Conflicting,
            // Raised by featurepipe.fail in edit sessions.
            "P0002" => Refusal::Missing,
            "FP412" => Refusal::Changed,
            "FP422" => Refusal::Unfit,
            "42501" => Refusal::NotPermitted,
            "40001" | "40P01" | "55P03" => Refusal::Busy,
            c if stale_catalog(c) => Refusal::Busy,
            c if c.starts_with("23") || c.starts_with("22") || c == "P0001" => Refusal::Unfit,
            c if c.starts_with("08") || c.starts_with("53") || c.starts_with("57") => Refusal::Busy,
            _ => Refusal::Fault,
        }
    }

    /// The class of a database error; a lost connection is [`Refusal::Busy`].
    pub fn of_error(err: &tokio_postgres::Error) -> Refusal {
        err.code().map_or(Refusal::Busy, |c| Refusal::of(c.code()))
    }
}

/// Why PostgreSQL rolled back a transaction that may succeed when run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// SQLSTATE 40P01: this transaction and another waited for each other.
    Deadlock,
    /// SQLSTATE 40001: a concurrent change made the transaction unserializable.
    Serialization,
}

impl Conflict {
    /// The conflict an SQLSTATE reports, if it reports one.
    pub fn from_sqlstate(code: &str) -> Option<Conflict> {
        match code {
            "40P01" => Some(Conflict::Deadlock),
            "40001" => Some(Conflict::Serialization),
            _ => None,
        }
    }

    /// The conflict in words, for a detail line.
    pub fn describe(self) -> &'static str {
        match self {
            Conflict::Deadlock => "a deadlock with another transaction (SQLSTATE 40P01)",
            Conflict::Serialization => "a serialization failure (SQLSTATE 40001)",
        }
    }
}

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

/// The feature as it is now, told with a write whose precondition failed
/// (If-Match), so that the client can merge without asking again.
#[derive(Debug, Clone, PartialEq)]
pub struct Current {
    /// The Feature, as JSON text.
    pub feature: String,
    /// Its entity tag.
    pub etag: String,
}

/// A domain error (boxed: errors travel far, and often).
#[derive(Debug, Clone)]
pub struct Error(Box<Inner>);

#[derive(Debug, Clone)]
struct Inner {
    kind: ErrorKind,
    detail: String,
    errors: Vec<FieldError>,
    total_errors: Option<usize>,
    batches: Option<serde_json::Value>,
    report: Option<serde_json::Value>,
    conflict: Option<Conflict>,
    current: Option<Current>,
    stale: bool,
}

impl Error {
    /// An error of `kind`, said in one line.
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Error(Box::new(Inner {
            kind,
            detail: detail.into(),
            errors: Vec::new(),
            total_errors: None,
            batches: None,
            report: None,
            conflict: None,
            current: None,
            stale: false,
        }))
    }

    /// No collection named `id`.
    pub fn unknown_collection(id: &str) -> Self {
        Self::new(
            ErrorKind::UnknownCollection,
            format!("no collection named '{id}'; GET /collections lists them"),
        )
    }

    /// The database cannot take the request now.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, detail)
    }

    /// [`Error::unavailable`] for a connection that failed: the error is
    /// logged, the caller reads only `detail`, since connection errors can
    /// name hosts, ports, users and TLS settings.
    pub fn connection_failed(detail: &str, err: &dyn std::fmt::Display) -> Self {
        tracing::warn!(error = %err, "{detail}");
        Self::unavailable(detail)
    }

    /// A fault of the service or the database that the client cannot fix.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, detail)
    }

    /// A panic or an aborted task of the service; what failed stays in the
    /// log, since a panic's text may describe internals.
    pub fn failed() -> Self {
        Self::internal(
            "the service failed while answering this request; it was logged. If it was a \
             write, check whether it took effect before sending it again",
        )
    }

    /// [`Error::failed`] for the task doing `what` that did not finish
    /// (its panic or cancellation logged, never told).
    pub fn task_failed(what: &str, err: &tokio::task::JoinError) -> Self {
        tracing::error!(error = %err, "the task {what} failed");
        Self::failed()
    }

    /// A write whose connection to the database was lost after COMMIT was
    /// sent and before its answer: it may or may not have been written.
    pub fn outcome_unknown() -> Self {
        Self::new(
            ErrorKind::OutcomeUnknown,
            "the connection to the database was lost after COMMIT was sent: whether \
             the features were written is unknown. Check before sending them again, \
             or retry with the same Idempotency-Key (a request sent with one is \
             answered from its first outcome); a retry without one may write them twice",
        )
    }

    /// A database error outside any feature (preparing, BEGIN, reading),
    /// met while `doing`.
    pub fn database(doing: &str, err: &tokio_postgres::Error) -> Self {
        let Some(db) = err.as_db_error() else {
            return Self::connection_failed(
                &format!("database connection lost while {doing}"),
                err,
            );
        };
        let mut error = Self::new(
            ErrorKind::Refused(Refusal::of(db.code().code())),
            format!("database error while {doing}: {}", db.message()),
        )
        .with_conflict(Conflict::from_sqlstate(db.code().code()));
        error.0.stale = stale_catalog(db.code().code());
        error
    }

    /// A database error of a read that the caller's input did not shape
    /// (a change feed's page): a data error there is the service's or the
    /// database's fault (500), never a refused write; a busy or lost
    /// database stays a 503, a role that may not read stays a 403.
    pub fn reading(doing: &str, err: &tokio_postgres::Error) -> Self {
        let mut error = Self::database(doing, err);
        if let ErrorKind::Refused(refusal) = &mut error.0.kind {
            if !matches!(refusal, Refusal::Busy | Refusal::NotPermitted) {
                tracing::error!(error = %crate::db::said::said(err), "database error while {doing}");
                *refusal = Refusal::Fault;
            }
        }
        error
    }

    /// A write the database refused (`refusal`), `errors` (its cause first)
    /// saying why; marked when the cause is a conflict that running it
    /// again may resolve.
    pub fn refused(refusal: Refusal, detail: String, errors: Vec<FieldError>) -> Self {
        let cause = errors.first().and_then(|cause| cause.sqlstate.as_deref());
        let conflict = cause.and_then(Conflict::from_sqlstate);
        let stale = cause.is_some_and(stale_catalog);
        let mut error = Self::new(ErrorKind::Refused(refusal), detail)
            .with_errors(errors)
            .with_conflict(conflict);
        error.0.stale = stale;
        error
    }

    /// Whether the database said the catalog is older than the tables
    /// ([`stale_catalog`]): it is to be read again now.
    pub fn stale_catalog(&self) -> bool {
        self.0.stale
    }

    /// What kind of error it is.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
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

    /// The listed feature-level problems.
    pub fn errors(&self) -> &[FieldError] {
        &self.0.errors
    }

    /// All problems, including those not listed.
    pub fn total_errors(&self) -> usize {
        self.0.total_errors.unwrap_or(self.0.errors.len())
    }

    /// How many problems were counted, when some were (for the problem's `total_errors`).
    pub fn counted_errors(&self) -> Option<usize> {
        self.0.total_errors
    }

    /// [`FieldError::for_reader`] for each feature-level problem.
    pub fn for_reader(mut self, may_read: bool) -> Self {
        let errors = std::mem::take(&mut self.0.errors);
        self.0.errors = errors.into_iter().map(|e| e.for_reader(may_read)).collect();
        self
    }

    /// Attach what happened to each batch of a failed write.
    pub fn with_batches(mut self, batches: &impl Serialize) -> Self {
        self.0.batches = serde_json::to_value(batches).ok();
        self
    }

    /// What happened to each batch, for a failed write.
    pub fn batches(&self) -> Option<&serde_json::Value> {
        self.0.batches.as_ref()
    }

    /// Attach the report of a failed edit session.
    pub fn with_report(mut self, report: &impl Serialize) -> Self {
        self.0.report = serde_json::to_value(report).ok();
        self
    }

    /// The report of a failed edit session.
    pub fn report(&self) -> Option<&serde_json::Value> {
        self.0.report.as_ref()
    }

    /// Attach the feature as it is now (a failed precondition).
    pub fn with_current(mut self, current: Current) -> Self {
        self.0.current = Some(current);
        self
    }

    /// The feature as it is now, for a failed precondition.
    pub fn current(&self) -> Option<&Current> {
        self.0.current.as_ref()
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
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.0.kind, self.0.detail)
    }
}

impl std::error::Error for Error {}

impl From<DbError> for Error {
    fn from(err: DbError) -> Self {
        match err {
            DbError::Busy(_) => Error::unavailable(err.to_string()),
            DbError::Unreachable(source) => {
                Error::connection_failed("the database is unreachable; retry later", &source)
            }
            DbError::NoAnswer(source) => {
                Error::connection_failed("the database does not answer", &source)
            }
            DbError::RoleRefused { .. } => Error::new(ErrorKind::Forbidden, err.to_string()),
            DbError::RoleUnbound => Error::internal(err.to_string()),
            DbError::Query { doing, source } => Error::database(doing, &source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_task_is_told_without_its_panic_text() {
        let joined = tokio::spawn(async { panic!("secret internals at 0xdead") }).await;
        let err = Error::task_failed("writing", &joined.unwrap_err());
        assert_eq!(err.kind(), ErrorKind::Internal);
        assert!(!err.detail().contains("secret"), "{}", err.detail());
        assert!(!err.detail().contains("panic"), "{}", err.detail());
        assert_eq!(err.detail(), Error::failed().detail());
    }

    #[test]
    fn sqlstates_by_class() {
        assert_eq!(Refusal::of("23505"), Refusal::Conflicting);
        assert_eq!(Refusal::of("23514"), Refusal::Unfit);
        assert_eq!(Refusal::of("22P02"), Refusal::Unfit);
        assert_eq!(Refusal::of("40P01"), Refusal::Busy);
        assert_eq!(Refusal::of("08006"), Refusal::Busy);
        assert_eq!(Refusal::of("42703"), Refusal::Busy);
        assert_eq!(Refusal::of("42804"), Refusal::Busy);
        assert_eq!(Refusal::of("XX000"), Refusal::Fault);
    }

    #[test]
    fn conflicts_by_sqlstate() {
        assert_eq!(Conflict::from_sqlstate("40P01"), Some(Conflict::Deadlock));
        assert_eq!(
            Conflict::from_sqlstate("40001"),
            Some(Conflict::Serialization)
        );
        assert_eq!(Conflict::from_sqlstate("23505"), None);
        assert_eq!(Conflict::from_sqlstate("08006"), None);
    }
}
