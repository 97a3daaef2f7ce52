//! The HTML representation of the read resources (OGC API - Features Part 1,
//! HTML): which requests get it, its links, its escaping and its headers.
//! What the pages do in a browser is in `browser.rs`.

use serde_json::{json, Value};

use crate::support::{TestApp, TestResponse};

/// `ogc_read`'s tables, and one keyed by text.
fn setup() -> String {
    format!(
        "{}{}",
        crate::ogc_read::SETUP,
        "CREATE TABLE labels (code text PRIMARY KEY, note text, geom geometry(Point, 4326));"
    )
}

/// What Chromium sends when it opens a page.
const BROWSER: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,\
                       image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7";

const READ_RESOURCES: [&str; 6] = [
    "/",
    "/conformance",
    "/collections",
    "/collections/places",
    "/collections/places/items",
    "/collections/places/items/7",
];

async fn get(app: &TestApp, path: &str, accept: Option<&str>) -> TestResponse {
    let headers: Vec<(&str, &str)> = accept.map(|a| ("accept", a)).into_iter().collect();
    app.send("GET", path, &headers, None).await
}

fn page(r: &TestResponse) -> &str {
    r.body
        .as_str()
        .unwrap_or_else(|| panic!("not a page: {r:?}"))
}

/// Whether one of the `Vary` headers names `Accept`.
fn varies_on_accept(r: &TestResponse) -> bool {
    r.headers.get_all("vary").iter().any(|v| v == "accept")
}

fn alternate(links: &Value, media_type: &str) -> Vec<String> {
    links
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["rel"] == "alternate" && l["type"] == media_type)
        .map(|l| l["href"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn browsers_get_pages_and_everyone_else_json() {
    let app = TestApp::new(&setup()).await;
    for path in READ_RESOURCES {
        let r = get(&app, path, Some(BROWSER)).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert_eq!(
            r.headers["content-type"], "text/html; charset=utf-8",
            "{path}"
        );
        assert!(page(&r).starts_with("<!DOCTYPE html>"), "{path}");
        assert!(varies_on_accept(&r), "{path}: {r:?}");
        let policy = r.headers["content-security-policy"].to_str().unwrap();
        assert!(policy.contains("script-src 'self';"), "{path}: {policy}");
        assert!(!policy.contains("unsafe"), "{path}: {policy}");
        // No inline script: every <script> has a src.
        assert_eq!(
            page(&r).matches("<script").count(),
            page(&r).matches("<script src=").count(),
            "{path}"
        );

        let sep = if path.contains('?') { '&' } else { '?' };
        let r = get(&app, &format!("{path}{sep}f=html"), None).await;
        assert_eq!(
            r.headers["content-type"], "text/html; charset=utf-8",
            "{path}"
        );

        for accept in [None, Some("*/*"), Some("application/json")] {
            let r = get(&app, path, accept).await;
            assert_eq!(r.status, 200, "{path}: {r:?}");
            assert!(r.body.is_object(), "{path} {accept:?}: {r:?}");
            assert!(varies_on_accept(&r), "{path}: {r:?}");
        }
        let r = get(&app, &format!("{path}{sep}f=json"), Some(BROWSER)).await;
        assert!(r.body.is_object(), "f=json wins over Accept: {path}: {r:?}");
        // JSON links to its page.
        let pages = alternate(&r.body["links"], "text/html");
        assert_eq!(pages.len(), 1, "{path}: {r:?}");
        assert!(pages[0].ends_with("f=html"), "{path}: {pages:?}");
    }
}

#[tokio::test]
async fn pages_link_to_their_json_and_the_html_class_is_declared() {
    let app = TestApp::new(&setup()).await;
    let r = get(&app, "/conformance", None).await;
    assert!(r.body["conformsTo"].as_array().unwrap().contains(&json!(
        "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/html"
    )));
    let r = app.get("/collections/places?f=html").await;
    let html = page(&r);
    assert!(
        html.contains(
            r#"<link rel="alternate" type="application/json" href="/collections/places?f=json""#
        ),
        "{html}"
    );
    assert!(
        html.contains(r#"href="/collections/places/items?f=html""#),
        "{html}"
    );
    // The collection's JSON offers its items as a page too.
    let r = app.get("/collections/places").await;
    let items: Vec<_> = r.body["links"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["rel"] == "items")
        .map(|l| (l["type"].as_str().unwrap(), l["href"].as_str().unwrap()))
        .collect();
    assert_eq!(
        items,
        [
            ("application/geo+json", "/collections/places/items"),
            ("application/fg+json", "/collections/places/items?f=jsonfg"),
            ("text/html", "/collections/places/items?f=html")
        ]
    );
}

#[tokio::test]
async fn the_items_page_pages_with_its_query_and_shows_the_properties() {
    let app = TestApp::new(&setup()).await;
    let r = app
        .get("/collections/places/items?limit=5&offset=5&kind=odd&f=html")
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let html = page(&r);
    assert!(html.contains("13 features, showing 6–10"), "{html}");
    assert!(
        html.contains(r#"<a rel="next" href="/collections/places/items?limit=5&amp;offset=10&amp;kind=odd&amp;f=html">"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<a rel="prev" href="/collections/places/items?limit=5&amp;offset=0&amp;kind=odd&amp;f=html">"#),
        "{html}"
    );
    // The map reads the same page as GeoJSON.
    assert!(
        html.contains(r#"data-features="/collections/places/items?limit=5&amp;offset=5&amp;kind=odd&amp;f=json""#),
        "{html}"
    );
    assert_eq!(html.matches("<tr data-id=").count(), 5, "{html}");
    assert!(
        html.contains(r#"<tr data-id="11" tabindex="0"><td class="id"><a href="/collections/places/items/11?f=html">11</a></td><td data-key="name">p11</td><td data-key="kind">odd</td><td data-key="pop">11</td></tr>"#),
        "{html}"
    );
    // The JSON of a page links to the same page as HTML, query kept.
    let r = app.get("/collections/places/items?limit=5&kind=odd").await;
    assert_eq!(
        alternate(&r.body["links"], "text/html"),
        ["/collections/places/items?limit=5&offset=0&kind=odd&f=html"]
    );
    let next = r.body["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["rel"] == "next")
        .unwrap();
    assert_eq!(next["type"], "application/geo+json");
}

#[tokio::test]
async fn database_values_are_escaped_in_pages() {
    let app = TestApp::new(&setup()).await;
    let hostile = r#"<script>alert("x")</script>'"&"#;
    app.db
        .client
        .execute(
            "INSERT INTO labels VALUES ($1, $1, 'SRID=4326;POINT(1 2)')",
            &[&hostile],
        )
        .await
        .unwrap();
    let escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;'&quot;&amp;";
    for path in [
        "/collections/labels/items?f=html".to_owned(),
        format!(
            "/collections/labels/items/{}?f=html",
            featurepipe::read::params::percent_encode(hostile)
        ),
    ] {
        let r = app.get(&path).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
        let html = page(&r);
        assert!(!html.contains("<script>alert"), "{path}: {html}");
        assert!(
            html.contains(&format!(r#"<tr data-id="{escaped}" tabindex="0">"#)),
            "{path}: {html}"
        );
        assert!(
            html.contains(&format!(r#"<td data-key="note">{escaped}</td>"#)),
            "{path}: {html}"
        );
    }
}

#[tokio::test]
async fn an_unknown_format_is_a_400_and_html_is_not_offered_where_there_is_no_page() {
    let app = TestApp::new(&setup()).await;
    // (The items' bad `f`s are in ogc_read's bad queries.)
    let paths = [
        "/?f=pdf",
        "/collections/places/items/7?f=csv",
        "/collections/places/schema?f=html",
    ];
    let mut answers = Vec::new();
    for path in paths {
        let r = app.get(path).await;
        answers.push((
            r.status.as_u16(),
            r.headers["content-type"].to_str().unwrap().to_owned(),
        ));
    }
    assert_eq!(
        answers,
        vec![(400, "application/problem+json".to_owned()); 3]
    );
    // An error is problem+json, whatever the browser asked for.
    let r = get(&app, "/collections/nowhere/items", Some(BROWSER)).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.headers["content-type"], "application/problem+json");
}

#[tokio::test]
async fn the_assets_are_served_from_the_binary_and_cached() {
    let app = TestApp::new(&setup()).await;
    for (name, media_type) in [
        ("ol.js", "text/javascript"),
        ("ol.css", "text/css"),
        ("featurepipe.js", "text/javascript"),
        ("featurepipe.css", "text/css"),
    ] {
        let r = app.get(&format!("/assets/{name}")).await;
        assert_eq!(r.status, 200, "{name}");
        assert_eq!(r.headers["content-type"], media_type, "{name}");
        assert_eq!(r.headers["cache-control"], "max-age=86400", "{name}");
    }
    let r = app.get("/assets/../Cargo.toml").await;
    assert_eq!(r.status, 404);
    assert_eq!(app.get("/assets/nothing.js").await.status, 404);
}

#[tokio::test]
async fn a_basemap_is_passed_to_the_map_and_allowed_by_the_policy() {
    let template = "https://{a-c}.tiles.example.org/{z}/{x}/{y}.png";
    let app = TestApp::with_config(&setup(), |c| c.basemap_url = Some(template.into())).await;
    let r = app.get("/collections/places/items?f=html").await;
    assert!(
        page(&r).contains(r#"data-basemap="https://{a-c}.tiles.example.org/{z}/{x}/{y}.png""#),
        "{r:?}"
    );
    let policy = r.headers["content-security-policy"].to_str().unwrap();
    assert!(
        policy.contains("img-src 'self' https://*.tiles.example.org;"),
        "{policy}"
    );
    // Without one, the pages load nothing from elsewhere.
    let app = TestApp::new(&setup()).await;
    let r = app.get("/collections/places/items?f=html").await;
    assert!(!page(&r).contains("data-basemap"), "{r:?}");
}
