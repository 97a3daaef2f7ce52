//! CORS: preflights answered before authentication for the configured
//! origins, answers marked for them, and nothing for any other origin.

use axum::http::HeaderMap;
use featurepipe::config::CorsOrigins;

use crate::support::{settings_file, TestApp};

const SETUP: &str = "CREATE TABLE pts (id serial PRIMARY KEY, geom geometry(Point, 4326));";
const PAGE: &str = "http://editor.example:5173";

/// An app with authentication on and CORS for `origins`.
async fn app(origins: CorsOrigins) -> TestApp {
    let settings = settings_file("cors", "[auth]\nanonymous = \"read:*\"\n");
    TestApp::with_config(SETUP, |c| {
        c.auth = true;
        c.settings = Some(settings);
        c.cors_origins = origins;
    })
    .await
}

fn cors_headers(headers: &HeaderMap) -> Vec<String> {
    headers
        .keys()
        .map(|k| k.as_str().to_owned())
        .filter(|k| k.starts_with("access-control-"))
        .collect()
}

async fn preflight(app: &TestApp, origin: &str) -> crate::support::TestResponse {
    let headers = [
        ("origin", origin),
        ("access-control-request-method", "PATCH"),
        (
            "access-control-request-headers",
            "authorization, content-type, if-match",
        ),
    ];
    app.send("OPTIONS", "/collections/pts/items/1", &headers, None)
        .await
}

#[tokio::test]
async fn a_listed_origin_is_answered_before_authentication() {
    let app = app(CorsOrigins::List(vec![PAGE.to_owned()])).await;
    let r = preflight(&app, PAGE).await;
    assert!(r.status.is_success(), "{r:?}");
    let h = &r.headers;
    assert_eq!(h["access-control-allow-origin"], PAGE);
    let methods = h["access-control-allow-methods"].to_str().unwrap();
    for m in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
        assert!(methods.contains(m), "{methods}");
    }
    let allowed = h["access-control-allow-headers"].to_str().unwrap();
    for name in [
        "authorization",
        "if-match",
        "idempotency-key",
        "content-crs",
        "prefer",
    ] {
        assert!(allowed.contains(name), "{allowed}");
    }
    assert_eq!(h["access-control-max-age"], "3600");
    // Its requests are marked, with what a page needs to read.
    let r = app
        .send("GET", "/collections/pts/items", &[("origin", PAGE)], None)
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["access-control-allow-origin"], PAGE);
    let exposed = r.headers["access-control-expose-headers"].to_str().unwrap();
    for name in [
        "etag",
        "location",
        "preference-applied",
        "x-request-id",
        "db-round-trips",
    ] {
        assert!(exposed.contains(name), "{exposed}");
    }
    // A refusal is marked too, so the page can read why.
    let r = app
        .send(
            "POST",
            "/collections/pts/items",
            &[("origin", PAGE)],
            Some("{}".into()),
        )
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.headers["access-control-allow-origin"], PAGE);
}

#[tokio::test]
async fn other_origins_and_plain_requests_get_no_cors_headers() {
    let app = app(CorsOrigins::List(vec![PAGE.to_owned()])).await;
    let r = preflight(&app, "http://elsewhere.example").await;
    assert!(cors_headers(&r.headers).is_empty(), "{r:?}");
    let r = app
        .send(
            "GET",
            "/collections",
            &[("origin", "http://elsewhere.example")],
            None,
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(cors_headers(&r.headers).is_empty(), "{r:?}");
    assert!(r.headers["vary"].to_str().unwrap().contains("origin"));
    // An OPTIONS that is no preflight reaches the API: its Allow says what the caller may do.
    let r = app
        .send("OPTIONS", "/collections/pts/items", &[], None)
        .await;
    assert!(r.status.is_success(), "{r:?}");
    assert!(
        r.headers["allow"].to_str().unwrap().contains("GET"),
        "{r:?}"
    );
    assert!(cors_headers(&r.headers).is_empty());
}

#[tokio::test]
async fn any_origin_with_a_star_and_none_by_default() {
    let app = app(CorsOrigins::Any).await;
    let r = preflight(&app, "http://anywhere.example").await;
    assert_eq!(r.headers["access-control-allow-origin"], "*");
    let app = TestApp::new(SETUP).await;
    let r = preflight(&app, PAGE).await;
    assert!(cors_headers(&r.headers).is_empty(), "{r:?}");
}
