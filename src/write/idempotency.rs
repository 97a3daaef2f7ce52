//! `Idempotency-Key`: a retried write returns the first attempt's response
//! and writes nothing. The key is claimed in the same transaction as the
//! rows and the response stored there before COMMIT: after any failure, a
//! retry finds either no key (nothing was written) or the response.

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::db::statement::prepare;
use crate::db::Database;
use crate::error::ApiError;
use crate::write::dberror::request_error;

/// A write's idempotency key and what it claims.
#[derive(Debug, Clone)]
pub struct Idempotency {
    /// The client's key.
    pub key: String,
    /// sha256 of the request (method, path and query, body).
    pub hash: String,
    /// Keys older than this are forgotten.
    pub ttl: Duration,
    /// Where a single created feature is: this plus its id (for `Location`).
    pub location_prefix: Option<String>,
    /// The caller's database role (`[auth] set_role`), which the bookkeeping
    /// steps out of: it runs as the service's own role.
    pub role: Option<String>,
}

/// A response stored under a key.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The request's hash.
    pub hash: String,
    /// HTTP status.
    pub status: u16,
    /// JSON body.
    pub body: Vec<u8>,
    /// `Location`, if any.
    pub location: Option<String>,
    /// Other headers of the response, by name.
    pub headers: Option<serde_json::Value>,
}

/// Forget expired keys (so that an expired key can be used again). The
/// statements call the service's own functions (migrations 5 and 6), which
/// only the service's own role may run (see [`crate::write::as_service`]).
pub const EXPIRE: &str = "SELECT featurepipe.idempotency_expire($1::float8)";
/// Claim the key; a concurrent request with the same key waits, then fails (23505).
pub const CLAIM: &str = "SELECT featurepipe.idempotency_claim($1::text, $2::text)";
/// Store the response, in the transaction that wrote the rows.
pub const STORE: &str =
    "SELECT featurepipe.idempotency_store($1::text, $2::int4, $3::bytea, $4::text, $5::jsonb)";

/// The hash a retry must match.
pub fn request_hash(method: &str, path_and_query: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update(b" ");
    h.update(path_and_query.as_bytes());
    h.update(b"\n");
    h.update(body);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The stored response of `key`, if it has one that has not expired.
pub async fn lookup(db: &Database, key: &str, ttl: Duration) -> Result<Option<Stored>, ApiError> {
    // On a connection of the service's own role: the function is its alone.
    let db = db.as_role(None);
    let client = db.connection().await?;
    let sql = "SELECT request_hash, status, body, location, headers \
                 FROM featurepipe.idempotency_lookup($1::text, $2::float8)";
    let failed = |e| request_error("looking up the idempotency key", &e);
    let statement = prepare(&client, sql, db.naming()).await.map_err(failed)?;
    crate::telemetry::round_trip();
    let row = statement
        .query_opt(&client, &[&key, &ttl.as_secs_f64()])
        .await
        .map_err(failed)?;
    Ok(row.map(|r| Stored {
        hash: r.get(0),
        status: r.get::<_, i32>(1) as u16,
        body: r.get(2),
        location: r.get(3),
        headers: r.get(4),
    }))
}
