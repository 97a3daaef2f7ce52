//! What PostgreSQL said, in words. tokio-postgres prints an error the
//! server sent as "db error" alone, so every message of ours that wraps one
//! (at start-up, in the log) names the server's message, its SQLSTATE, and
//! its detail and hint where it gave them.

use deadpool_postgres::PoolError;

/// `err` as the database said it (`ERROR: could not load library …
/// (SQLSTATE 58P01); DETAIL: …; HINT: …`), or as the connection failed.
pub fn said(err: &tokio_postgres::Error) -> String {
    let Some(db) = err.as_db_error() else {
        // A connection's error already names its cause.
        return err.to_string();
    };
    let mut text = format!(
        "{}: {} (SQLSTATE {})",
        db.severity(),
        db.message(),
        db.code().code()
    );
    if let Some(detail) = db.detail() {
        text.push_str("; DETAIL: ");
        text.push_str(detail);
    }
    if let Some(hint) = db.hint() {
        text.push_str("; HINT: ");
        text.push_str(hint);
    }
    text
}

/// [`said`] of a pool's error: the database's when it is one.
pub fn pool_said(err: &PoolError) -> String {
    match err {
        PoolError::Backend(e) => said(e),
        other => other.to_string(),
    }
}
