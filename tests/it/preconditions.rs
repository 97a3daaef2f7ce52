//! Preconditions of PUT, PATCH and DELETE against RFC 9110 §13: every
//! combination of a present and a missing feature with `If-Match`,
//! `If-None-Match` and `If-Unmodified-Since`, in one table.

use serde_json::json;

use crate::support::TestApp;

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
