//! `Idempotency-Key`: a retried write returns the first attempt's response
//! and writes nothing. The key is claimed in the same transaction as the
//! rows and the response stored there before COMMIT: after any failure, a
//! retry finds either no key (nothing was written) or the response.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::catalog::Collection;
use crate::db::statement::prepare;
use crate::db::Database;
use crate::error::Error;
use crate::read::{Rendering, StoredFeature};
use crate::write::report::WriteReport;

/// A write's idempotency key and what it claims.
#[derive(Debug, Clone)]
pub struct Idempotency {
    /// The client's key.
    pub key: String,
    /// sha256 of the request (see [`request_hash`]).
    pub hash: String,
    /// Keys older than this are forgotten.
    pub ttl: Duration,
    /// How a write of features is answered; `None`: with the bulk report.
    pub respond: Option<Arc<dyn Respond>>,
    /// The caller's database role (`[auth] set_role`), which the bookkeeping
    /// steps out of: it runs as the service's own role.
    pub role: Option<String>,
}

/// A response as a keyed write stores it and as every replay sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The body; empty for none.
    pub body: Vec<u8>,
    /// `Location`, if any.
    pub location: Option<String>,
    /// The other headers that matter (`Content-Type`, `ETag`, …), by name.
    pub headers: Map<String, Value>,
}

impl Answer {
    /// `status` with `report` as JSON.
    pub fn json(status: u16, report: &impl serde::Serialize) -> Self {
        let mut headers = Map::new();
        headers.insert("content-type".into(), "application/json".into());
        Answer {
            status,
            body: serde_json::to_vec(report).expect("a report serializes"),
            location: None,
            headers,
        }
    }
}

/// The created feature an answer shows, read in the write's own transaction.
#[derive(Debug)]
pub struct Shown {
    /// Its collection.
    pub coll: Arc<Collection>,
    /// Its key, as text.
    pub id: String,
    /// How it is shown: its encoding and the CRS of its geometry.
    pub rendering: Rendering,
}

/// How a keyed write of features is answered. The answer is made before
/// COMMIT, in the write's transaction, and stored under the key with it: the
/// response sent and every replay are that one answer.
pub trait Respond: Send + Sync + std::fmt::Debug {
    /// The feature the answer shows, if any.
    fn shows(&self, report: &WriteReport) -> Option<Shown>;
    /// The answer, from the report and the feature it shows as stored
    /// (`None` when it shows none, or it could not be read).
    fn answer<'a>(
        &'a self,
        report: &'a WriteReport,
        feature: Option<&'a StoredFeature>,
    ) -> BoxFuture<'a, Answer>;
}

/// A response stored under a key.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The request's hash.
    pub hash: String,
    /// The response.
    pub answer: Answer,
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

/// The hash a retry must match: of the method, path and query, the
/// `headers` (lines `name: value` of the headers that change what the
/// request does or how it is answered) and the body.
pub fn request_hash(method: &str, path_and_query: &str, headers: &[String], body: &[u8]) -> String {
    let mut h = RequestHasher::new(method, path_and_query, headers);
    h.update(body);
    h.finish()
}

/// [`request_hash`] taken as the body arrives.
pub struct RequestHasher(Sha256);

impl RequestHasher {
    /// The hash of a request, before its body.
    pub fn new(method: &str, path_and_query: &str, headers: &[String]) -> Self {
        let mut h = Sha256::new();
        h.update(method.as_bytes());
        h.update(b" ");
        h.update(path_and_query.as_bytes());
        h.update(b"\n");
        for line in headers {
            h.update(line.as_bytes());
            h.update(b"\n");
        }
        h.update(b"\n");
        RequestHasher(h)
    }

    /// The next bytes of the body.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The hash, in hex.
    pub fn finish(self) -> String {
        self.0
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// The stored response of `key`, if it has one that has not expired.
pub async fn lookup(db: &Database, key: &str, ttl: Duration) -> Result<Option<Stored>, Error> {
    // On a connection of the service's own role: the function is its alone.
    let db = db.as_role(None);
    let client = db.connection().await?;
    let sql = "SELECT request_hash, status, body, location, headers \
                 FROM featurepipe.idempotency_lookup($1::text, $2::float8)";
    let failed = |e| Error::database("looking up the idempotency key", &e);
    let statement = prepare(&client, sql, db.naming()).await.map_err(failed)?;
    crate::db::round_trips::round_trip();
    let row = statement
        .query_opt(&client, &[&key, &ttl.as_secs_f64()])
        .await
        .map_err(failed)?;
    Ok(row.map(|r| Stored {
        hash: r.get(0),
        answer: Answer {
            status: r.get::<_, i32>(1) as u16,
            body: r.get(2),
            location: r.get(3),
            // Stored before migration 4, or by an edit session: none.
            headers: match r.get(4) {
                Some(Value::Object(headers)) => headers,
                _ => Map::new(),
            },
        },
    }))
}
