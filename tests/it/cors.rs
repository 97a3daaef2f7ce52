//! CORS: preflights answered before authentication for the configured
//! origins, answers marked for them, and nothing for any other origin.

use axum::http::HeaderMap;
use featurepipe::config::CorsOrigins;
use sha2::Digest;

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
    // Vary may come as several headers (the format's `accept` is another).
    let vary: Vec<_> = r.headers.get_all("vary").iter().collect();
    assert!(vary.iter().any(|v| *v == "origin"), "{r:?}");
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

/// A page server on its own origin: `/page.html` runs `script`, which
/// POSTs what it saw to `/result`; the texts come out of the receiver.
async fn page_server(
    listener: tokio::net::TcpListener,
    script: String,
) -> tokio::sync::mpsc::Receiver<String> {
    use axum::routing::{get, post};
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let html = "<!doctype html><html><body><script src=\"/page.js\"></script></body></html>";
    let page = axum::Router::new()
        .route(
            "/page.html",
            get(move || async move { axum::response::Html(html) }),
        )
        .route(
            "/page.js",
            get(move || async move { ([("content-type", "text/javascript")], script) }),
        )
        .route(
            "/result",
            post(move |body: String| async move {
                let _ = tx.send(body).await;
            }),
        );
    tokio::spawn(async move { axum::serve(listener, page).await });
    rx
}

/// What a page's script reported, within a minute.
async fn reported(rx: &mut tokio::sync::mpsc::Receiver<String>) -> String {
    tokio::time::timeout(std::time::Duration::from_secs(60), rx.recv())
        .await
        .expect("the page reports within a minute")
        .expect("the page server runs")
}

/// The editor's round: create, read with its ETag, patch with If-Match, a
/// second patch with the stale ETag, delete; each step's outcome in order.
const EDITOR_ROUND: &str = r#"
const out = [];
const auth = {"Authorization": "Bearer " + KEY};
async function step(name, f) {
  try { out.push(name + " " + await f()); } catch (e) { out.push(name + " error " + e); }
}
(async () => {
  let at, tag;
  const patch = (note) => fetch(at, {method: "PATCH", body: JSON.stringify({properties: {note}}),
    headers: {...auth, "Content-Type": "application/merge-patch+json", "If-Match": tag}});
  await step("create", async () => {
    const r = await fetch(API + "/collections/pts/items", {method: "POST",
      headers: {...auth, "Content-Type": "application/geo+json"},
      body: JSON.stringify({type: "Feature", geometry: {type: "Point", coordinates: [1, 2]},
                            properties: {note: "from a page"}})});
    at = r.headers.get("Location");
    return r.status;
  });
  await step("read", async () => {
    const r = await fetch(at, {headers: auth});
    tag = r.headers.get("ETag");
    const f = await r.json();
    return r.status + " " + f.properties.note + " " + (tag ? "tagged" : "untagged");
  });
  await step("patch", async () => (await patch("patched")).status);
  await step("stale", async () => {
    const r = await patch("again");
    return r.status + " " + (await r.json()).type;
  });
  await step("delete", async () => {
    tag = (await fetch(at, {headers: auth})).headers.get("ETag");
    return (await fetch(at, {method: "DELETE", headers: {...auth, "If-Match": tag}})).status;
  });
  await fetch("/result", {method: "POST", body: out.join("\n")});
})();
"#;

#[tokio::test]
async fn a_page_on_a_listed_origin_edits_with_etags_and_one_elsewhere_is_refused() {
    use crate::chromium::Chromium;
    use crate::support::Served;
    let key = "fp_key_of_a_page_for_tests";
    let hash: String = sha2::Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let listed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listed.local_addr().unwrap());
    let settings = format!(
        "[auth]\nanonymous = \"read:*\"\n[api_keys.page]\nsha256 = \"{hash}\"\nscope = \"read:* write:pts\"\n"
    );
    let settings = settings_file("cors-page", &settings);
    let setup = "CREATE TABLE pts (id serial PRIMARY KEY, note text, geom geometry(Point, 4326));";
    let app = TestApp::with_config(setup, |c| {
        c.auth = true;
        c.settings = Some(settings);
        c.cors_origins = CorsOrigins::List(vec![origin.clone()]);
    })
    .await;
    let api = Served::start(&app).await;
    let prelude = format!("const API = {:?}; const KEY = {key:?};\n", api.url);
    let other_url = format!("http://{}/page.html", other.local_addr().unwrap());
    let mut from_listed = page_server(listed, format!("{prelude}{EDITOR_ROUND}")).await;
    let mut from_other = page_server(other, format!("{prelude}{EDITOR_ROUND}")).await;

    let _browser = Chromium::open(&format!("{origin}/page.html"));
    let steps = reported(&mut from_listed).await;
    let steps: Vec<&str> = steps.lines().collect();
    assert_eq!(
        steps,
        [
            "create 201",
            "read 200 from a page tagged",
            "patch 204",
            "stale 412 urn:featurepipe:problem:precondition-failed",
            "delete 204"
        ],
        "{steps:#?}"
    );
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 0);

    let _browser = Chromium::open(&other_url);
    let steps = reported(&mut from_other).await;
    assert!(steps.starts_with("create error TypeError"), "{steps}");
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 0);
}
