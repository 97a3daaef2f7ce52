//! Content codings: request bodies in gzip, deflate, br and zstd, limited
//! after decompression; answers compressed as `Accept-Encoding` asks, with
//! `Vary`, and ETags that name the coding without breaking conditional
//! requests.

use std::io::{Read, Write};

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::support::{collection, point, TestApp};

const SETUP: &str =
    "CREATE TABLE pts (id serial PRIMARY KEY, note text, geom geometry(Point, 4326));";

/// `bytes` in `coding`.
fn encode(coding: &str, bytes: &[u8]) -> Vec<u8> {
    match coding {
        "gzip" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(bytes).unwrap();
            e.finish().unwrap()
        }
        "deflate" => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(bytes).unwrap();
            e.finish().unwrap()
        }
        "br" => {
            let mut out = Vec::new();
            brotli::BrotliCompress(&mut &bytes[..], &mut out, &Default::default()).unwrap();
            out
        }
        "zstd" => zstd::encode_all(bytes, 3).unwrap(),
        other => panic!("no encoder for {other}"),
    }
}

/// `bytes` decoded from `coding` (none: as they are).
fn decode(coding: Option<&str>, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        None => out.extend_from_slice(bytes),
        Some("gzip") => {
            flate2::read::GzDecoder::new(bytes)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("br") => {
            brotli::BrotliDecompress(&mut &bytes[..], &mut out).unwrap();
        }
        Some("zstd") => out = zstd::decode_all(bytes).unwrap(),
        Some(other) => panic!("unexpected coding {other}"),
    }
    out
}

/// The raw answer to `request`: status, headers, body bytes as sent.
async fn raw(app: &TestApp, request: Request<Body>) -> (StatusCode, HeaderMap, Vec<u8>) {
    let response = app.router.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes().to_vec();
    (parts.status, parts.headers, bytes)
}

fn get(path: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut request = Request::get(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::empty()).unwrap()
}

fn post_in(coding: &str, body: Vec<u8>) -> Request<Body> {
    Request::post("/collections/pts/items")
        .header("content-type", "application/geo+json")
        .header("content-encoding", coding)
        .body(Body::from(body))
        .unwrap()
}

#[tokio::test]
async fn request_bodies_in_every_coding_are_decoded_and_limited() {
    let app = TestApp::with_config(SETUP, |c| c.max_body = 1 << 20).await;
    let fc = collection(
        (0..50)
            .map(|i| point(1.0, 2.0, json!({"note": format!("n{i}")})))
            .collect(),
    );
    for coding in ["gzip", "deflate", "br", "zstd", "x-gzip", "GZIP"] {
        let wire = if coding.eq_ignore_ascii_case("gzip") || coding == "x-gzip" {
            "gzip"
        } else {
            coding
        };
        let (status, _, body) = raw(
            &app,
            post_in(coding, encode(wire, fc.to_string().as_bytes())),
        )
        .await;
        assert_eq!(status, 201, "{coding}: {}", String::from_utf8_lossy(&body));
    }
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 300);
    // A bomb in each coding: 32 MiB of whitespace is a 413 (limit 1 MiB), nothing written.
    let mut bomb = vec![b' '; 32 << 20];
    bomb.extend_from_slice(fc.to_string().as_bytes());
    for coding in ["gzip", "br", "zstd"] {
        let packed = encode(coding, &bomb);
        assert!(packed.len() < 1 << 20, "{coding}: {}", packed.len());
        let (status, _, body) = raw(&app, post_in(coding, packed)).await;
        assert_eq!(status, 413, "{coding}: {}", String::from_utf8_lossy(&body));
    }
    // Bytes that are not what they claim: 400, named.
    let (status, _, body) = raw(&app, post_in("zstd", b"not zstd".to_vec())).await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    let problem: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["type"], "urn:featurepipe:problem:unreadable-body");
    assert_eq!(app.db.int("SELECT count(*) FROM pts").await, 300);
}

#[tokio::test]
async fn answers_are_compressed_as_asked_and_decode_to_the_same_features() {
    let app = TestApp::new(SETUP).await;
    let fc = collection(
        (0..200)
            .map(|i| point(1.0, 2.0, json!({"note": format!("n{i}")})))
            .collect(),
    );
    assert_eq!(app.post("pts", &fc).await.status, 201);
    let path = "/collections/pts/items?limit=200";
    let (status, headers, plain) = raw(&app, get(path, &[])).await;
    assert_eq!(status, 200);
    assert!(headers.get("content-encoding").is_none());
    let features: Value = serde_json::from_slice(&plain).unwrap();
    assert_eq!(features["features"].as_array().unwrap().len(), 200);
    for coding in ["gzip", "br", "zstd"] {
        let asked = format!("{coding}, identity;q=0.5");
        let (status, headers, body) = raw(&app, get(path, &[("accept-encoding", &asked)])).await;
        assert_eq!(status, 200);
        assert_eq!(headers["content-encoding"], coding);
        let vary = headers
            .get_all("vary")
            .iter()
            .map(|v| v.to_str().unwrap().to_ascii_lowercase())
            .collect::<Vec<_>>()
            .join(",");
        assert!(vary.contains("accept-encoding"), "{vary}");
        assert!(
            body.len() < plain.len() / 3,
            "{coding}: {} of {}",
            body.len(),
            plain.len()
        );
        let decoded: Value = serde_json::from_slice(&decode(Some(coding), &body)).unwrap();
        assert_eq!(decoded["features"], features["features"], "{coding}");
    }
    // A small answer stays as it is.
    let (_, headers, _) = raw(
        &app,
        get("/collections/pts/items/1", &[("accept-encoding", "gzip")]),
    )
    .await;
    assert!(headers.get("content-encoding").is_none(), "{headers:?}");
}

#[tokio::test]
async fn etags_name_the_coding_and_conditional_requests_still_hold() {
    let app = TestApp::new(SETUP).await;
    // Large enough to be compressed.
    let long = "x".repeat(4000);
    assert_eq!(
        app.post("pts", &point(1.0, 2.0, json!({"note": long})))
            .await
            .status,
        201
    );
    let item = "/collections/pts/items/1";
    let (_, headers, _) = raw(&app, get(item, &[])).await;
    let plain = headers["etag"].to_str().unwrap().to_owned();
    let (status, headers, body) = raw(&app, get(item, &[("accept-encoding", "gzip")])).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-encoding"], "gzip");
    let coded = headers["etag"].to_str().unwrap().to_owned();
    assert_eq!(coded, format!("{}-gzip\"", plain.trim_end_matches('"')));
    let decoded: Value = serde_json::from_slice(&decode(Some("gzip"), &body)).unwrap();
    assert_eq!(decoded["properties"]["note"].as_str().unwrap().len(), 4000);
    // The client holding the gzip representation revalidates it: 304, same tag.
    let held = [
        ("accept-encoding", "gzip"),
        ("if-none-match", coded.as_str()),
    ];
    let (status, headers, _) = raw(&app, get(item, &held)).await;
    assert_eq!(status, 304);
    assert_eq!(headers["etag"], coded.as_str());
    // So does a client of the plain one, and one holding a zstd copy.
    let (status, headers, _) = raw(&app, get(item, &[("if-none-match", plain.as_str())])).await;
    assert_eq!(
        (status, headers["etag"].to_str().unwrap()),
        (StatusCode::NOT_MODIFIED, plain.as_str())
    );
    let zstd = coded.replace("-gzip", "-zstd");
    let (status, _, _) = raw(&app, get(item, &[("if-none-match", zstd.as_str())])).await;
    assert_eq!(status, 304);
    // If-Match takes the tag of either representation.
    let patch = |tag: &str| {
        Request::patch(item)
            .header("content-type", "application/merge-patch+json")
            .header("if-match", tag)
            .body(Body::from(
                json!({"properties": {"note": "short"}}).to_string(),
            ))
            .unwrap()
    };
    let (status, _, body) = raw(&app, patch(&coded)).await;
    assert!(
        status.is_success(),
        "{status}: {}",
        String::from_utf8_lossy(&body)
    );
    // The tag is stale now, in any coding.
    let (status, _, _) = raw(&app, patch(&coded)).await;
    assert_eq!(status, 412);
    assert_eq!(
        app.db.text("SELECT note FROM pts").await.as_deref(),
        Some("short")
    );
}
