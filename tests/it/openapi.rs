//! The OpenAPI document is generated from the code, committed, and describes
//! the routes the service really has.

use axum::body::Body;
use axum::http::{Method, Request};
use serde_json::Value;

use crate::support::TestApp;

#[test]
fn committed_document_is_the_generated_one() {
    let committed = std::fs::read_to_string("openapi/featurepipe.json").unwrap();
    assert!(
        committed == featurepipe::http::openapi::document_json(),
        "openapi/featurepipe.json is out of date: run `make openapi` and commit it"
    );
}

#[tokio::test]
async fn every_documented_operation_is_routed() {
    let app = TestApp::new("CREATE TABLE pts (id serial PRIMARY KEY, geom geometry)").await;
    let served = app.get("/api").await;
    assert_eq!(served.status, 200);
    let doc: Value = serde_json::from_str(featurepipe::http::openapi::document_json()).unwrap();
    assert_eq!(served.body, doc);
    let mut operations = 0;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        let concrete = path
            .replace("{collectionId}", "pts")
            .replace("{featureId}", "1");
        for method in ops.as_object().unwrap().keys() {
            let method: Method = method.to_uppercase().parse().unwrap();
            let r = app
                .request(
                    Request::builder()
                        .method(method.clone())
                        .uri(&concrete)
                        .body(Body::empty())
                        .unwrap(),
                )
                .await;
            let kind = r.body["type"].as_str().unwrap_or("");
            assert!(
                !kind.ends_with(":not-found") && !kind.ends_with(":method-not-allowed"),
                "{method} {path} is documented but not routed: {r:?}"
            );
            operations += 1;
        }
    }
    assert_eq!(operations, 20);
    // Problem documents, the bulk report and the collection are described.
    for schema in [
        "SessionReport",
        "Problem",
        "FieldError",
        "WriteReport",
        "BatchReport",
        "CollectionInfo",
        "ChangesPage",
    ] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema}");
    }
}

#[tokio::test]
async fn documentation_page_works_offline() {
    let app = TestApp::new("CREATE TABLE pts (id serial PRIMARY KEY, geom geometry)").await;
    let page = app.get("/api.html").await;
    assert_eq!(page.status, 200);
    let html = page.body.as_str().unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "{html}"
    );
    for (asset, size) in [
        ("/api/swagger-ui-bundle.js", 10_000),
        ("/api/swagger-ui.css", 10_000),
        ("/api/swagger-init.js", 50),
    ] {
        assert!(html.contains(&asset[1..]), "{asset}");
        let r = app.get(asset).await;
        assert_eq!(r.status, 200, "{asset}");
        assert!(r.body.as_str().unwrap().len() > size, "{asset}");
    }
    // No script of its own, and never framed.
    assert!(!html.contains("<script>"), "{html}");
    let policy = page.headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("script-src 'self';"), "{policy}");
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert_eq!(page.headers["x-content-type-options"], "nosniff");
    // Every answer says nosniff, JSON ones too.
    for path in ["/", "/collections", "/api", "/collections/nope", "/healthz"] {
        let r = app.get(path).await;
        assert_eq!(r.headers["x-content-type-options"], "nosniff", "{path}");
    }
}

#[tokio::test]
async fn the_conformance_declaration_claims_no_openapi_3_0() {
    let doc: Value = serde_json::from_str(featurepipe::http::openapi::document_json()).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    let app = TestApp::new("").await;
    let classes = app.get("/conformance").await.body["conformsTo"].to_string();
    assert!(!classes.contains("oas30"), "{classes}");
}

#[tokio::test]
async fn the_page_size_is_published_where_qgis_reads_it() {
    let app = TestApp::new("").await;
    let doc = app.get("/api").await.body;
    // QGIS's OAPIF provider reads components.parameters.limit.schema, and
    // pages by 100 without it.
    let limit = &doc["components"]["parameters"]["limit"];
    assert_eq!(limit["in"], "query");
    assert_eq!(limit["schema"]["maximum"], 10_000, "{limit}");
    assert_eq!(limit["schema"]["default"], 10, "{limit}");
    let parameters = doc["paths"]["/collections/{collectionId}/items"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let refs: Vec<&Value> = parameters.iter().filter_map(|p| p.get("$ref")).collect();
    assert_eq!(refs, ["#/components/parameters/limit"], "{parameters:?}");
}
