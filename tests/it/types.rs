//! Every supported column type, written and read back by PostgreSQL.

use serde_json::json;

use crate::support::{point, TestApp};

const ALL_TYPES: &str = "CREATE TABLE typed (
    id bigserial PRIMARY KEY,
    i2 smallint, i4 integer, i8 bigint,
    f4 real, f8 double precision, num numeric(30, 10),
    t text, vc varchar(5), ch char(3),
    b boolean, u uuid, d date, ts timestamp, tstz timestamptz,
    j json, jb jsonb,
    ai integer[], at text[], an numeric[],
    dom_positive positive_int,
    geom geometry(Point, 4326)
)";

#[tokio::test]
async fn every_supported_type_round_trips() {
    let app = TestApp::new(&format!(
        "CREATE DOMAIN positive_int AS integer CHECK (VALUE > 0); {ALL_TYPES}"
    ))
    .await;
    let props = json!({
        "i2": -32768, "i4": 2147483647, "i8": 9007199254740993i64,
        "f4": 1.5, "f8": 0.1, "num": "BIG",
        "t": "tekst ✓", "vc": "abcde", "ch": "ab",
        "b": true, "u": "67e55044-10b1-426f-9247-bb680e5fe0c8",
        "d": "2024-02-29", "ts": "2024-05-01T12:30:00.25", "tstz": "2024-05-01T12:30:00+02:00",
        "j": {"a": [1, 2.5, null]}, "jb": ["x", {"y": false}],
        "ai": [1, null, 3], "at": ["a", "b,c", "\"q\""], "an": [0.1, "2.50"],
        "dom_positive": 7
    });
    // A number with more digits than an f64 holds, sent as JSON text.
    let body = point(1.0, 2.0, props)
        .to_string()
        .replace("\"BIG\"", "12345678901234567890.0123456789");
    let r = app
        .post_raw(
            "/collections/typed/items",
            Some("application/geo+json"),
            body,
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let row = app
        .db
        .client
        .query_one(
            "SELECT i2::text, i4::text, i8::text, f4::text, f8::text, num::text, t, vc, ch::text || '|',
                    b::text, u::text, d::text, ts::text, (tstz AT TIME ZONE 'UTC')::text,
                    j::text, jb::text, ai::text, at::text, an::text, dom_positive::text
               FROM typed",
            &[],
        )
        .await
        .unwrap();
    let got: Vec<String> = (0..20).map(|i| row.get::<_, String>(i)).collect();
    assert_eq!(
        got,
        vec![
            "-32768",
            "2147483647",
            "9007199254740993",
            "1.5",
            "0.1",
            "12345678901234567890.0123456789",
            "tekst ✓",
            "abcde",
            "ab|",
            "true",
            "67e55044-10b1-426f-9247-bb680e5fe0c8",
            "2024-02-29",
            "2024-05-01 12:30:00.25",
            "2024-05-01 10:30:00",
            r#"{"a":[1,2.5,null]}"#,
            r#"["x", {"y": false}]"#,
            "{1,NULL,3}",
            r#"{a,"b,c","\"q\""}"#,
            "{0.1,2.50}",
            "7",
        ]
    );
}

#[tokio::test]
async fn domain_checks_are_enforced_by_the_database() {
    // A check validation does not read (it takes `VALUE > 0`: see schemas.rs).
    let app = TestApp::new(&format!(
        "CREATE DOMAIN positive_int AS integer CHECK (sign(VALUE) = 1); {ALL_TYPES}"
    ))
    .await;
    let r = app
        .post("typed", &point(1.0, 2.0, json!({"dom_positive": -1})))
        .await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["sqlstate"], "23514");
    assert_eq!(r.body["errors"][0]["constraint"], "positive_int_check");
}

#[tokio::test]
async fn floats_and_numerics_are_read_as_to_json_wrote_them() {
    let app = TestApp::new(
        "CREATE TABLE nums (id serial PRIMARY KEY, f4 real, f8 double precision, num numeric,
                            geom geometry(Point, 4326));
         INSERT INTO nums (f4, f8, num, geom) VALUES
           (1, 2, 3, 'SRID=4326;POINT(0 0)'), (0.1, 1e20, 1.50, 'SRID=4326;POINT(0 0)'),
           ('NaN', 'Infinity', 'NaN', 'SRID=4326;POINT(0 0)'), (-2.5, '-Infinity', -7, 'SRID=4326;POINT(0 0)'),
           (NULL, NULL, NULL, 'SRID=4326;POINT(0 0)');",
    )
    .await;
    // Whole numbers as reals (QGIS types fields from the first features);
    // the rest as PostgreSQL's to_json writes them, NaN and the infinities
    // as strings, NULL as null: written with each type's own text, which
    // Citus takes where it refuses to_json.
    let page = app.get("/collections/nums/items").await;
    let got: Vec<_> = page.body["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let p = &f["properties"];
            (
                p["f4"].to_string(),
                p["f8"].to_string(),
                p["num"].to_string(),
            )
        })
        .collect();
    let want = [
        ("1.0", "2.0", "3.0"),
        ("0.1", "1e+20", "1.5"),
        (r#""NaN""#, r#""Infinity""#, r#""NaN""#),
        ("-2.5", r#""-Infinity""#, "-7.0"),
        ("null", "null", "null"),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(got, want, "{page:?}");
}
