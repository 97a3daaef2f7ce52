//! Preconditions of PUT, PATCH and DELETE against RFC 9110 §13: every
//! combination of a present and a missing feature with `If-Match`,
//! `If-None-Match` and `If-Unmodified-Since`, in one table.

use serde_json::json;

use crate::auth::sha256;
use crate::support::{settings_file, TestApp};

/// Client-chosen keys (PUT creates) and a last-modified column.
const SETUP: &str = "CREATE TABLE sites (code text PRIMARY KEY, note text, \
     updated timestamptz NOT NULL DEFAULT now(), geom geometry(Point, 4326));";

/// A precondition header, with the value to send (`CURRENT` and `STALE`
/// stand for the feature's ETag and one it no longer has).
type Header = Option<(&'static str, &'static str)>;

const CURRENT: &str = "current";
const STALE: &str = "\"0123456789abcdef0123456789abcdef\"";
const FUTURE: &str = "Fri, 01 Jan 2100 00:00:00 GMT";
const PAST: &str = "Mon, 01 Jan 2001 00:00:00 GMT";

#[tokio::test]
async fn preconditions_hold_as_rfc_9110_says() {
    let app = TestApp::new(SETUP).await;
    // (header, status of PUT, PATCH, DELETE on a present feature; on a missing one)
    let table: [(Header, [u16; 3], [u16; 3]); 10] = [
        (None, [204, 204, 204], [201, 404, 404]),
        (
            Some(("if-match", CURRENT)),
            [204, 204, 204],
            [412, 404, 404],
        ),
        (Some(("if-match", STALE)), [412, 412, 412], [412, 404, 404]),
        (Some(("if-match", "*")), [204, 204, 204], [412, 404, 404]),
        (
            Some(("if-none-match", "*")),
            [412, 412, 412],
            [201, 404, 404],
        ),
        (
            Some(("if-none-match", CURRENT)),
            [412, 412, 412],
            [201, 404, 404],
        ),
        (
            Some(("if-none-match", STALE)),
            [204, 204, 204],
            [201, 404, 404],
        ),
        (
            Some(("if-unmodified-since", FUTURE)),
            [204, 204, 204],
            [201, 404, 404],
        ),
        (
            Some(("if-unmodified-since", PAST)),
            [412, 412, 412],
            [201, 404, 404],
        ),
        // If-Match wins over If-Unmodified-Since (13.2.2): the date is not looked at.
        (
            Some(("if-match", "current+past")),
            [204, 204, 204],
            [412, 404, 404],
        ),
    ];
    let feature = json!({"type": "Feature", "geometry": {"type": "Point", "coordinates": [1, 2]},
                         "properties": {"note": "new"}});
    let mut failures = Vec::new();
    for (header, present, missing) in table {
        for (exists, expected) in [(true, present), (false, missing)] {
            for (method, want) in ["PUT", "PATCH", "DELETE"].into_iter().zip(expected) {
                app.db
                    .int("WITH gone AS (DELETE FROM sites RETURNING 1) SELECT count(*) FROM gone")
                    .await;
                if exists {
                    app.db
                        .int(
                            "WITH new AS (INSERT INTO sites (code, note, geom) \
                              VALUES ('a', 'old', 'SRID=4326;POINT(0 0)') RETURNING 1) \
                              SELECT count(*) FROM new",
                        )
                        .await;
                }
                let etag = match exists {
                    true => app.get("/collections/sites/items/a").await.headers["etag"]
                        .to_str()
                        .unwrap()
                        .to_owned(),
                    false => "\"00000000000000000000000000000000\"".to_owned(),
                };
                let mut headers: Vec<(&str, String)> = vec![(
                    "content-type",
                    match method {
                        "PATCH" => "application/merge-patch+json".into(),
                        _ => "application/geo+json".into(),
                    },
                )];
                match header {
                    Some((name, "current+past")) => {
                        headers.push((name, etag.clone()));
                        headers.push(("if-unmodified-since", PAST.into()));
                    }
                    Some((name, CURRENT)) => headers.push((name, etag.clone())),
                    Some((name, value)) => headers.push((name, value.into())),
                    None => {}
                }
                let headers: Vec<(&str, &str)> =
                    headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                let body = (method != "DELETE").then(|| feature.to_string());
                let r = app
                    .send(method, "/collections/sites/items/a", &headers, body)
                    .await;
                if r.status.as_u16() != want {
                    failures.push(format!(
                        "{method} {} feature, {header:?}: {} (want {want}) {}",
                        if exists { "present" } else { "missing" },
                        r.status,
                        r.body
                    ));
                }
                // A refused request changed nothing.
                if !r.status.is_success() {
                    let note = app
                        .db
                        .text("SELECT (SELECT note FROM sites WHERE code = 'a')")
                        .await;
                    assert_eq!(
                        note.as_deref(),
                        exists.then_some("old"),
                        "{method} {header:?}"
                    );
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

const EDITOR: &str = "fp_precondition_editor_key";
const WRITER: &str = "fp_precondition_writer_key";

/// `method` on feature `a` of `sites` as `key`, with `If-Match: if_match`
/// and `more` headers: a body for PUT and PATCH.
async fn stale_write(
    app: &TestApp,
    (method, key): (&str, &str),
    if_match: &str,
    more: &[(&str, &str)],
) -> crate::support::TestResponse {
    let content_type = match method {
        "PATCH" => "application/merge-patch+json",
        _ => "application/geo+json",
    };
    let mut headers = vec![
        ("x-api-key", key),
        ("if-match", if_match),
        ("content-type", content_type),
    ];
    headers.extend_from_slice(more);
    let body = json!({"type": "Feature", "geometry": {"type": "Point", "coordinates": [1, 2]},
                      "properties": {"note": "mine"}});
    let body = (method != "DELETE").then(|| body.to_string());
    app.send(method, "/collections/sites/items/a", &headers, body)
        .await
}

#[tokio::test]
async fn a_failed_if_match_tells_the_feature_as_it_is_now_to_whoever_may_read_it() {
    let settings = format!(
        "[api_keys.editor]\nsha256 = \"{}\"\nscope = \"read:* write:*\"\n\
         [api_keys.writer]\nsha256 = \"{}\"\nscope = \"write:*\"\n",
        sha256(EDITOR),
        sha256(WRITER)
    );
    let path = settings_file("stale-writes", &settings);
    let app = TestApp::with_config(SETUP, |c| {
        c.auth = true;
        c.settings = Some(path);
    })
    .await;
    app.db
        .client
        .batch_execute(
            "INSERT INTO sites (code, note, geom) VALUES ('a', 'theirs', 'SRID=4326;POINT(3 4)')",
        )
        .await
        .unwrap();
    let read = app
        .send(
            "GET",
            "/collections/sites/items/a",
            &[("x-api-key", EDITOR)],
            None,
        )
        .await;
    let (now, etag) = (read.body.clone(), read.headers["etag"].to_str().unwrap());
    let stale = "\"0123456789abcdef0123456789abcdef\"";

    for method in ["PUT", "PATCH", "DELETE"] {
        let r = stale_write(&app, (method, EDITOR), stale, &[]).await;
        assert_eq!(r.status, 412, "{method}: {r:?}");
        assert_eq!(
            r.body["type"],
            "urn:featurepipe:problem:precondition-failed"
        );
        assert_eq!(format!("\"{}\"", r.body["etag"].as_str().unwrap()), etag);
        assert_eq!(
            r.body["feature"]["properties"], now["properties"],
            "{method}"
        );
        assert_eq!(r.body["feature"]["geometry"], now["geometry"], "{method}");
        // A key that may write but not read learns nothing of the feature.
        let r = stale_write(&app, (method, WRITER), stale, &[]).await;
        assert_eq!(r.status, 412, "{method}: {r:?}");
        assert!(
            r.body.get("feature").is_none() && r.body.get("etag").is_none(),
            "{r:?}"
        );
    }
    // In the CRS the write was in.
    let epsg4326 = "<http://www.opengis.net/def/crs/EPSG/0/4326>";
    let r = stale_write(&app, ("PATCH", EDITOR), stale, &[("content-crs", epsg4326)]).await;
    assert_eq!(r.status, 412, "{r:?}");
    assert_eq!(r.headers["content-crs"], epsg4326);
    assert_eq!(r.body["feature"]["geometry"]["coordinates"], json!([4, 3]));

    // An edit session's operation whose if_match fails.
    let session = json!({"operations": [
        {"op": "update", "collection": "sites", "id": "a", "if_match": stale,
         "patch": {"properties": {"note": "mine"}}},
    ]})
    .to_string();
    for (key, told) in [(EDITOR, true), (WRITER, false)] {
        let headers = [("x-api-key", key), ("content-type", "application/json")];
        let r = app
            .send("POST", "/transactions", &headers, Some(session.clone()))
            .await;
        assert_eq!(r.status, 412, "{r:?}");
        assert_eq!(r.body["feature"].is_object(), told, "{r:?}");
        if told {
            assert_eq!(format!("\"{}\"", r.body["etag"].as_str().unwrap()), etag);
            assert_eq!(r.body["feature"]["properties"]["note"], "theirs");
        }
    }
    let note = app.db.text("SELECT note FROM sites").await;
    assert_eq!(note.as_deref(), Some("theirs"), "nothing was written");
}
