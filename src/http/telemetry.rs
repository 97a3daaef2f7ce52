//! What an operator watches: Prometheus metrics (served at `/metrics`),
//! request ids in every log line and problem body, and the database round
//! trips each request cost.

use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing::Instrument;

use crate::catalog::live::Reload;
use crate::db::round_trips::RoundTrips;
use crate::http::app::AppState;

tokio::task_local! {
    /// The request's id.
    static REQUEST_ID: HeaderValue;
}

/// The process's metrics recorder (one per process, however many apps run in it).
pub fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Suffix("duration_seconds".into()),
                &[
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0,
                ],
            )
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Suffix("round_trips".into()),
                    &[0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 10.0, 20.0, 50.0, 100.0],
                )
            })
            .expect("bucket lists are not empty")
            .install_recorder()
            .expect("the only recorder of this process")
    })
}

/// The current request's id, if there is a request.
pub fn request_id() -> Option<String> {
    REQUEST_ID
        .try_with(|id| id.to_str().unwrap_or_default().to_owned())
        .ok()
}

/// A request id given by the client (`x-request-id`) if it is reasonable,
/// else a new one.
fn request_id_of(req: &Request) -> HeaderValue {
    req.headers()
        .get("x-request-id")
        .filter(|v| {
            (1..=128).contains(&v.len())
                && v.to_str()
                    .is_ok_and(|s| s.bytes().all(|b| b.is_ascii_graphic()))
        })
        .cloned()
        .unwrap_or_else(|| {
            HeaderValue::from_str(&uuid::Uuid::new_v4().simple().to_string())
                .expect("hex digits are a header value")
        })
}

/// Middleware: a request id (echoed in `x-request-id`), a span that every
/// log line of the request carries, and the request's metrics.
pub async fn observe(req: Request, next: Next) -> Response {
    let id = request_id_of(&req);
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_owned();
    // Only the standard methods: any other string would make a new series.
    let method = match req.method().as_str() {
        m @ ("GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" | "OPTIONS") => m,
        _ => "other",
    }
    .to_owned();
    let span = tracing::info_span!(
        "request",
        id = id.to_str().unwrap_or_default(),
        %method,
        %route
    );
    let round_trips = RoundTrips::default();
    let started = Instant::now();
    let answered = round_trips.count(next.run(req).instrument(span.clone()));
    let mut response = REQUEST_ID.scope(id.clone(), answered).await;
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    let trips = round_trips.get();
    let headers = response.headers_mut();
    headers.insert("x-request-id", id);
    // What the request cost the database, for clients tuning their batches.
    headers.insert("db-round-trips", HeaderValue::from(trips));
    let labels = [("route", route.clone()), ("method", method.clone())];
    counter!("featurepipe_http_requests_total", "route" => route, "method" => method, "status" => status.to_string())
        .increment(1);
    histogram!("featurepipe_http_request_duration_seconds", &labels).record(elapsed.as_secs_f64());
    histogram!("featurepipe_db_round_trips", &labels).record(trips as f64);
    span.in_scope(|| {
        tracing::info!(
            status,
            ms = elapsed.as_secs_f64() * 1000.0,
            db_round_trips = trips,
            "answered"
        )
    });
    response
}

/// Count a reload of the catalog by its outcome: `changed`, `unchanged`
/// or `failed` (the catalog in use stayed).
pub fn count_catalog_reload(reload: Reload<'_>) {
    let outcome = match reload {
        Reload::Changed(_) => "changed",
        Reload::Unchanged => "unchanged",
        Reload::Failed => "failed",
    };
    counter!("featurepipe_catalog_reloads_total", "outcome" => outcome).increment(1);
}

/// `GET /metrics`: every metric in Prometheus's text format, with the
/// connection pool's state as it is now.
pub async fn metrics(State(state): State<AppState>) -> Response {
    let pool = state.db.pool_status();
    gauge!("featurepipe_db_pool_connections").set(pool.size as f64);
    gauge!("featurepipe_db_pool_available").set(pool.available as f64);
    gauge!("featurepipe_db_pool_in_use").set((pool.size - pool.available) as f64);
    gauge!("featurepipe_db_pool_waiting").set(pool.waiting as f64);
    gauge!("featurepipe_db_pool_max").set(pool.max_size as f64);
    let mut response = Response::new(recorder().render().into());
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}
