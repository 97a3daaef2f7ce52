//! Cross-origin requests from web pages (CORS), for the origins of
//! `FEATUREPIPE_CORS_ORIGINS`: tower-http's `CorsLayer` answers their
//! preflights, before any authentication (browsers send no credentials on a
//! preflight), and marks the answers to their requests. A request from any
//! other origin, or from none, is served as if CORS did not exist: it gets
//! no CORS header, and a plain `OPTIONS` reaches the API's own handlers.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use tower::{Layer, ServiceExt};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::config::CorsOrigins;

/// How long a browser may cache a preflight's answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(3600);

/// The request headers the API reads (beyond the ones CORS always allows).
const REQUEST_HEADERS: [&str; 11] = [
    "content-type",
    "authorization",
    "x-api-key",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "prefer",
    "idempotency-key",
    "content-crs",
    "content-encoding",
    "x-request-id",
];

/// The response headers a page needs to read (beyond the CORS-safelisted ones).
const RESPONSE_HEADERS: [&str; 9] = [
    "etag",
    "location",
    "last-modified",
    "preference-applied",
    "idempotent-replayed",
    "content-crs",
    "x-request-id",
    "db-round-trips",
    "retry-after",
];

/// CORS for the configured origins.
#[derive(Clone)]
pub struct Cors {
    origins: CorsOrigins,
    layer: CorsLayer,
}

impl Cors {
    /// CORS for `origins`; `None` when no origin is configured.
    pub fn new(origins: &CorsOrigins) -> Option<Arc<Cors>> {
        let allow = match origins {
            CorsOrigins::None => return None,
            CorsOrigins::Any => AllowOrigin::any(),
            CorsOrigins::List(list) => {
                AllowOrigin::list(list.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
            }
        };
        let names = |names: &[&'static str]| -> Vec<HeaderName> {
            names.iter().map(|n| HeaderName::from_static(n)).collect()
        };
        let layer = CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([
                Method::GET,
                Method::HEAD,
                Method::POST,
                Method::PUT,
                Method::PATCH,
                Method::DELETE,
                Method::OPTIONS,
            ])
            .allow_headers(names(&REQUEST_HEADERS))
            .expose_headers(names(&RESPONSE_HEADERS))
            .max_age(PREFLIGHT_MAX_AGE);
        Some(Arc::new(Cors {
            origins: origins.clone(),
            layer,
        }))
    }

    fn allows(&self, origin: &HeaderValue) -> bool {
        match &self.origins {
            CorsOrigins::None => false,
            CorsOrigins::Any => true,
            CorsOrigins::List(list) => list.iter().any(|o| o.as_bytes() == origin.as_bytes()),
        }
    }
}

/// Whether `request` is a preflight: tower-http answers every `OPTIONS` it
/// sees as one, so it sees only these.
fn is_preflight(request: &Request) -> bool {
    request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// Middleware: CORS for requests from an allowed origin; `Vary: Origin` on
/// every answer, since the answer to the same URL depends on it.
pub async fn handle(State(cors): State<Arc<Cors>>, request: Request, next: Next) -> Response {
    let allowed = request
        .headers()
        .get(header::ORIGIN)
        .is_some_and(|origin| cors.allows(origin));
    let mut response = if allowed && (request.method() != Method::OPTIONS || is_preflight(&request))
    {
        match cors.layer.layer(next).oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    } else {
        next.run(request).await
    };
    if !allowed {
        response
            .headers_mut()
            .append(header::VARY, HeaderValue::from_static("origin"));
    }
    response
}
