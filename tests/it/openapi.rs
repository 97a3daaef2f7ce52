//! The committed OpenAPI document describes the routes the service really has.

use axum::body::Body;
use axum::http::{Method, Request};
use serde_json::Value;

use crate::support::TestApp;

#[tokio::test]
async fn every_documented_operation_is_routed() {
    let app = TestApp::new("CREATE TABLE pts (id serial PRIMARY KEY, geom geometry)").await;
    let served = app.get("/api").await;
    assert_eq!(served.status, 200);
    let doc: Value = serde_json::from_str(featurepipe::api::openapi::DOCUMENT).unwrap();
    assert_eq!(served.body, doc);
    for (path, ops) in doc["paths"].as_object().unwrap() {
        let concrete = path.replace("{collectionId}", "pts");
        for method in ops
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "parameters")
        {
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
        }
    }
}
