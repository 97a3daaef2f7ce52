//! The COPY fast path: keys known before writing, ids in feature order.

use std::time::Duration;

use serde_json::json;

use crate::support::{collection, point, via_proxy, TestApp, TestDb};
use featurepipe::write::Strategy;

async fn copy_app(setup: &str) -> TestApp {
    TestApp::with_config(setup, |c| {
        c.write_strategy = Strategy::Copy;
        c.batch_size = 300;
    })
    .await
}

fn numbered(n: usize) -> serde_json::Value {
    collection(
        (0..n)
            .map(|i| point(i as f64 / 100.0, 1.0, json!({"seq": i})))
            .collect(),
    )
}

#[tokio::test]
async fn serial_identity_and_uuid_keys_map_back_to_their_features() {
    // `tick` is a volatile default of another column: a sequence, so that
    // "filled per row" is a count of distinct values that does not depend
    // on how fast the clock ticks.
    let app = copy_app(
        "CREATE SEQUENCE ticks;
         CREATE TABLE s (id serial PRIMARY KEY, seq int, geom geometry(Point, 4326) NOT NULL);
         CREATE TABLE i (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, seq int, geom geometry);
         CREATE TABLE u (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), seq int,
                         tick bigint DEFAULT nextval('ticks'), geom geometry);
         SELECT setval('s_id_seq', 500);",
    )
    .await;
    for table in ["s", "i", "u"] {
        let r = app.post(table, &numbered(1000)).await;
        assert_eq!(r.status, 201, "{table}: {r:?}");
        assert_eq!(r.body["strategy"], "copy", "{table}");
        let ids: Vec<String> = r.body["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().map_or_else(|| id.to_string(), str::to_owned))
            .collect();
        assert_eq!(ids.len(), 1000);
        // Every returned id, in order, names the row of the feature at its
        // position (each feature carries its index in `seq`).
        let mapped = app
            .db
            .int(&format!(
                "SELECT count(*) FROM unnest('{{{}}}'::text[]) WITH ORDINALITY AS r(id, n)
                   JOIN {table} AS t ON t.id::text = r.id AND t.seq = r.n - 1",
                ids.join(",")
            ))
            .await;
        assert_eq!(mapped, 1000, "{table}: every id belongs to its feature");
        assert_eq!(r.batch_statuses(), ["committed"; 4]);
    }
    assert_eq!(app.db.int("SELECT min(id)::int8 FROM s").await, 501);
    assert_eq!(
        app.db.int("SELECT count(DISTINCT tick) FROM u").await,
        1000,
        "COPY fills the other defaults per row"
    );
    assert_eq!(
        app.db
            .text("SELECT ST_AsText(geom) FROM s WHERE seq = 999")
            .await
            .as_deref(),
        Some("POINT(9.99 1)")
    );
}

#[tokio::test]
async fn client_keys_are_copied_and_reported() {
    let app = copy_app("CREATE TABLE k (code text PRIMARY KEY, seq int, geom geometry)").await;
    let features = (0..5)
        .map(|i| {
            let mut f = point(0.0, 0.0, json!({"seq": i}));
            f["id"] = json!(format!("K{i}"));
            f
        })
        .collect();
    let r = app.post("k", &collection(features)).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["strategy"], "copy");
    assert_eq!(r.body["ids"], json!(["K0", "K1", "K2", "K3", "K4"]));
    assert_eq!(
        app.db
            .int("SELECT seq::int8 FROM k WHERE code = 'K3'")
            .await,
        3
    );
}

#[tokio::test]
async fn typed_columns_survive_binary_copy() {
    let app = copy_app(
        "CREATE TABLE t (id serial PRIMARY KEY, i2 smallint, i8 bigint, f4 real, f8 float8,
            vc varchar(4), b bool, u uuid, d date, ts timestamp, tz timestamptz,
            j json, jb jsonb, ai int[], geom geometry(PointZ, 4326))",
    )
    .await;
    let f = json!({"type": "Feature", "geometry": {"type": "Point", "coordinates": [1, 2, 3]}, "properties": {
        "i2": 7, "i8": 9007199254740993i64, "f4": 1.5, "f8": 0.1, "vc": "abcd", "b": false,
        "u": "67e55044-10b1-426f-9247-bb680e5fe0c8", "d": "2024-02-29",
        "ts": "2024-05-01T12:30:00.25", "tz": "2024-05-01T12:30:00Z",
        "j": {"a": 1}, "jb": [true], "ai": [1, null]
    }});
    let r = app.post("t", &collection(vec![f])).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["strategy"], "copy");
    let got = app
        .db
        .text(
            "SELECT concat_ws('|', i2, i8, f4, f8, vc, b, u, d, ts, tz AT TIME ZONE 'UTC', j, jb, ai, ST_AsText(geom)) FROM t",
        )
        .await
        .unwrap();
    assert_eq!(
        got,
        "7|9007199254740993|1.5|0.1|abcd|f|67e55044-10b1-426f-9247-bb680e5fe0c8|2024-02-29|\
         2024-05-01 12:30:00.25|2024-05-01 12:30:00|{\"a\":1}|[true]|{1,NULL}|POINT Z (1 2 3)"
    );
}

#[tokio::test]
async fn a_copy_error_on_row_k_is_reported_as_feature_k() {
    let app = copy_app(
        "CREATE TABLE s (id serial PRIMARY KEY, seq int UNIQUE CHECK (seq >= 0), geom geometry)",
    )
    .await;
    let mut body = numbered(1000);
    body["features"][700]["properties"]["seq"] = json!(3);
    let r = app.post("s", &body).await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(r.body["errors"][0]["feature"], 700);
    assert_eq!(r.body["errors"][0]["constraint"], "s_seq_key");
    assert_eq!(
        r.batch_statuses(),
        ["rolled_back", "rolled_back", "rolled_back", "not_attempted"]
    );
    assert_eq!(r.body["batches"][2]["failed_feature"], 700);

    let mut body = numbered(1000);
    body["features"][555]["properties"]["seq"] = json!(-1);
    let r = app.post("s", &body).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["feature"], 555);
    assert_eq!(r.body["errors"][0]["code"], "check_violation");
    assert_eq!(app.db.int("SELECT count(*) FROM s").await, 0);

    // The connection is clean afterwards.
    let r = app.post("s", &numbered(10)).await;
    assert_eq!(r.status, 201, "{r:?}");
}

#[tokio::test]
async fn copy_is_used_only_where_it_is_safe() {
    let app = copy_app(
        "CREATE TABLE trig (id serial PRIMARY KEY, seq int, geom geometry);
         CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
         CREATE TRIGGER noop BEFORE INSERT ON trig FOR EACH ROW EXECUTE FUNCTION noop();
         CREATE TABLE merc (id serial PRIMARY KEY, seq int, geom geometry(Point, 3857));
         CREATE TABLE num (id serial PRIMARY KEY, seq numeric, geom geometry);
         CREATE TABLE nokey (code text PRIMARY KEY, seq int, geom geometry);
         CREATE TABLE tags (id serial PRIMARY KEY, seq varchar(10)[], geom geometry);",
    )
    .await;
    let tagged = collection(
        (0..20)
            .map(|i| point(0.0, 0.0, json!({"seq": [format!("t{i}")]})))
            .collect(),
    );
    let r = app.post("tags", &tagged).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        r.body["strategy"], "insert",
        "varchar[] falls back to INSERT"
    );
    for table in ["trig", "merc", "num"] {
        let r = app.post(table, &numbered(20)).await;
        assert_eq!(r.status, 201, "{table}: {r:?}");
        assert_eq!(r.body["strategy"], "insert", "{table} falls back to INSERT");
    }
    // Mixed column sets cannot share one COPY column list.
    let mixed = collection(vec![
        point(0.0, 0.0, json!({"seq": 1})),
        point(0.0, 0.0, json!({})),
    ]);
    assert_eq!(app.post("trig", &mixed).await.body["strategy"], "insert");
    let r = app.post("nokey", &numbered(2)).await;
    assert_eq!(r.status, 422, "no key, no default: {r:?}");
}

#[tokio::test]
async fn auto_switches_at_the_threshold_and_copy_costs_two_round_trips() {
    let db =
        TestDb::new("CREATE TABLE s (id serial PRIMARY KEY, seq int, geom geometry(Point, 4326))")
            .await;
    let (proxy, mut config) = via_proxy(&db, Duration::from_millis(2)).await;
    config.pool_size = 1;
    config.copy_threshold = 100;
    let app = TestApp::on(db, config).await;
    assert_eq!(
        app.post("s", &numbered(99)).await.body["strategy"],
        "insert"
    );
    let before = proxy.round_trips();
    let r = app.post("s", &numbered(5000)).await;
    assert_eq!(r.body["strategy"], "copy", "{r:?}");
    let cold = proxy.round_trips() - before;
    let before = proxy.round_trips();
    let r = app.post("s", &numbered(5000)).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        proxy.round_trips() - before,
        2,
        "BEGIN + keys + COPY start; rows + COPY end + COMMIT"
    );
    assert_eq!(cold, 3, "and once per connection: prepare");
    assert_eq!(app.db.int("SELECT count(*) FROM s").await, 10_099);
}
