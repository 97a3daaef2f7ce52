//! The COPY fast path: keys known before writing, ids in feature order.

use std::time::Duration;

use serde_json::json;

use crate::support::{collection, create_role, point, settings_file, via_proxy, TestApp, TestDb};
use featurepipe::db::statement::STATEMENT_CACHE_LIMIT;
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
        "CREATE TABLE s (id serial PRIMARY KEY, seq int UNIQUE CHECK (abs(seq) = seq), geom geometry)",
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
async fn auto_switches_at_the_threshold_and_copy_takes_one_round_trip() {
    let db =
        TestDb::new("CREATE TABLE s (id serial PRIMARY KEY, seq int, geom geometry(Point, 4326))")
            .await;
    let (proxy, mut config) = via_proxy(&db, Duration::from_millis(2)).await;
    config.pool_size = 1;
    config.copy_threshold = Some(100);
    let app = TestApp::on(db, config).await;
    // A few writes by INSERT measure the round trip (4 ms): reading 1,000
    // keys back after the rows costs less, so COPY draws them itself.
    for _ in 0..5 {
        let r = app.post("s", &numbered(99)).await;
        assert_eq!(r.body["strategy"], "insert", "{r:?}");
    }
    let before = proxy.round_trips();
    let r = app.post("s", &numbered(1000)).await;
    assert_eq!(r.body["strategy"], "copy", "{r:?}");
    let cold = proxy.round_trips() - before;
    let before = proxy.round_trips();
    let r = app.post("s", &numbered(1000)).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        proxy.round_trips() - before,
        1,
        "BEGIN, the COPY and its rows, the keys read back with the row count checked, COMMIT"
    );
    assert_eq!(cold, 2, "and once per connection: prepare");
    // The ids are the rows' keys, in feature order.
    let ids: Vec<i64> = r.body["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 1000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    for (k, id) in ids.iter().enumerate().step_by(97) {
        let seq = app
            .db
            .int(&format!("SELECT seq::int8 FROM s WHERE id = {id}"))
            .await;
        assert_eq!(seq, k as i64, "feature {k} is row {id}");
    }
    // Under an Idempotency-Key the answer, ids included, is stored before
    // COMMIT: a flight of its own, after the key's lookup.
    let mut keyed = Vec::new();
    for key in ["copy-keyed-1", "copy-keyed-2"] {
        let headers = [
            ("Content-Type", "application/geo+json"),
            ("Idempotency-Key", key),
        ];
        let before = proxy.round_trips();
        let body = Some(numbered(1000).to_string());
        let r = app
            .send("POST", "/collections/s/items", &headers, body)
            .await;
        assert_eq!(r.status, 201, "{r:?}");
        assert_eq!(r.body["strategy"], "copy", "{r:?}");
        keyed.push(proxy.round_trips() - before);
    }
    assert_eq!(
        keyed[1], 3,
        "warm and keyed: the lookup; the rows; the answer and COMMIT ({keyed:?})"
    );
    assert_eq!(app.db.int("SELECT count(*) FROM s").await, 4_495);
}

/// A partitioned table whose partition (not the parent) has a BEFORE INSERT
/// trigger that drops the feature with `seq` 7.
const PARTITIONED: &str = "
    CREATE TABLE parts (id serial PRIMARY KEY, seq int, geom geometry(Point, 4326))
        PARTITION BY RANGE (id);
    CREATE TABLE parts_low PARTITION OF parts FOR VALUES FROM (MINVALUE) TO (1000000);
    CREATE TABLE parts_rest PARTITION OF parts DEFAULT;
    CREATE FUNCTION drop_seven() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN IF NEW.seq = 7 THEN RETURN NULL; END IF; RETURN NEW; END $$;";

const PARTITION_TRIGGER: &str =
    "CREATE TRIGGER drop_seven BEFORE INSERT ON parts_low FOR EACH ROW EXECUTE FUNCTION drop_seven()";

/// A feature a trigger drops is a 422 naming it, and nothing is written;
/// the answer agrees with the table.
async fn assert_feature_7_refused(app: &TestApp, n: usize) {
    let r = app.post("parts", &numbered(n)).await;
    assert_eq!(r.status, 422, "{n} features: {r:?}");
    assert_eq!(r.body["errors"][0]["feature"], 7, "{n} features: {r:?}");
    assert_eq!(r.body["errors"][0]["code"], "skipped_by_trigger", "{n}");
    assert!(
        r.batch_statuses().iter().all(|s| *s != "committed"),
        "{n} features: {r:?}"
    );
    assert_eq!(
        app.db.int("SELECT count(*) FROM parts").await,
        0,
        "{n} features"
    );
}

#[tokio::test]
async fn a_partition_trigger_that_drops_a_row_is_seen_by_insert_and_copy() {
    let app = TestApp::with_config(&format!("{PARTITIONED}; {PARTITION_TRIGGER}"), |c| {
        c.write_strategy = Strategy::Auto;
        c.copy_threshold = Some(100);
    })
    .await;
    // Below the COPY threshold (pipelined INSERTs) and above it.
    for n in [20, 500] {
        assert_feature_7_refused(&app, n).await;
    }
    // Without the dropped feature, every row is written and reported, by
    // INSERT (the trigger may change keys, so COPY is not used).
    let mut body = numbered(500);
    body["features"][7]["properties"]["seq"] = json!(-7);
    let r = app.post("parts", &body).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["strategy"], "insert");
    assert_eq!(app.db.int("SELECT count(*) FROM parts").await, 500);
    let id = &r.body["ids"][7];
    let seq = app
        .db
        .int(&format!("SELECT seq::int8 FROM parts WHERE id = {id}"))
        .await;
    assert_eq!(seq, -7);
}

#[tokio::test]
async fn a_copy_that_loses_rows_to_a_trigger_created_after_start_up_commits_nothing() {
    let app = copy_app(PARTITIONED).await;
    // The catalog was read without the trigger: COPY is chosen, and its row
    // count tells that a row went missing before COMMIT is sent.
    app.db
        .client
        .batch_execute(PARTITION_TRIGGER)
        .await
        .unwrap();
    assert_feature_7_refused(&app, 500).await;
}

#[tokio::test]
async fn without_statistics_counters_a_copy_still_counts_its_rows() {
    // track_counts off: the checks count this transaction's rows instead,
    // for keys read back (`parts`) and keys drawn first (`drawn`).
    let app = copy_app(&format!(
        "{PARTITIONED};
         CREATE TABLE drawn (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), seq int,
                             geom geometry(Point, 4326));
         DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET track_counts = off', \
         current_database()); END $$"
    ))
    .await;
    let pooled = crate::support::connect(&app.db.url).await;
    let counting = pooled.query_one("SHOW track_counts", &[]).await.unwrap();
    assert_eq!(
        counting.get::<_, String>(0),
        "off",
        "as the service's connections"
    );
    for table in ["parts", "drawn"] {
        let r = app.post(table, &numbered(500)).await;
        assert_eq!(r.status, 201, "{r:?}");
        assert_eq!(r.body["strategy"], "copy", "{table}: {r:?}");
        let count = app.db.int(&format!("SELECT count(*) FROM {table}")).await;
        assert_eq!(count, 500, "{table}");
    }
    app.db
        .client
        .batch_execute(&format!("TRUNCATE parts; {PARTITION_TRIGGER}"))
        .await
        .unwrap();
    assert_feature_7_refused(&app, 500).await;
}

#[tokio::test]
async fn pipelined_inserts_that_lose_a_row_to_a_trigger_created_after_start_up_say_so() {
    let app = TestApp::with_config(PARTITIONED, |c| c.write_strategy = Strategy::Insert).await;
    app.db
        .client
        .batch_execute(PARTITION_TRIGGER)
        .await
        .unwrap();
    // The INSERT of all 20 rows fails when it inserts fewer, so that the
    // COMMIT sent with it keeps nothing; written again one by one, with
    // COMMIT waiting for every answer, feature 7 is named.
    let r = app.post("parts", &numbered(20)).await;
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(r.body["errors"][0]["code"], "skipped_by_trigger", "{r:?}");
    assert_eq!(r.body["errors"][0]["feature"], 7, "{r:?}");
    assert_eq!(app.db.int("SELECT count(*) FROM parts").await, 0);
    // A request of one feature is one INSERT, and COMMIT went out with it:
    // the answer says that it was skipped and nothing else was written.
    let seven = collection(vec![point(0.07, 1.0, json!({"seq": 7}))]);
    let r = app.post("parts", &seven).await;
    assert_eq!(r.status, 500, "{r:?}");
    let detail = r.body["detail"].as_str().unwrap();
    assert!(detail.contains("skipped feature 0"), "{detail}");
    assert_eq!(app.db.int("SELECT count(*) FROM parts").await, 0);
}

/// Under `[auth] set_role`, a role the table's rights allow to INSERT.
async fn role_app(setup: &str, role: &str) -> TestApp {
    let key = format!("{role}_key");
    let settings = format!(
        "[auth]\nset_role = true\n[api_keys.k]\nsha256 = \"{}\"\nscope = \"read:* write:*\"\nrole = \"{role}\"\n",
        crate::auth::sha256(&key)
    );
    let path = settings_file(role, &settings);
    TestApp::with_config(setup, |c| {
        c.auth = true;
        c.settings = Some(path);
        c.write_strategy = Strategy::Auto;
        c.copy_threshold = Some(100);
    })
    .await
}

/// The same request at 99 and at 1000 features (INSERT and COPY sizes) gets
/// the same answer as the role, and writes every row.
async fn same_answer_below_and_above_the_threshold(app: &TestApp, role: &str, table: &str) {
    let key = format!("{role}_key");
    let headers = [
        ("x-api-key", key.as_str()),
        ("content-type", "application/geo+json"),
    ];
    let path = format!("/collections/{table}/items");
    for n in [99, 1000] {
        let r = app
            .send("POST", &path, &headers, Some(numbered(n).to_string()))
            .await;
        assert_eq!(r.status, 201, "{table}, {n} features: {r:?}");
        assert_eq!(r.body["ids"].as_array().unwrap().len(), n);
    }
    let count = app.db.int(&format!("SELECT count(*) FROM {table}")).await;
    assert_eq!(count, 1099, "{table}");
}

#[tokio::test]
async fn copy_under_row_level_security_answers_as_insert_does() {
    let role = "fp_test_copy_rls";
    let app = role_app(
        &format!(
            "{}
             CREATE TABLE guarded (id serial PRIMARY KEY, seq int, geom geometry(Point, 4326));
             ALTER TABLE guarded ENABLE ROW LEVEL SECURITY;
             CREATE POLICY everyone ON guarded USING (true) WITH CHECK (seq >= 0);
             GRANT SELECT, INSERT ON guarded TO {role};
             GRANT USAGE ON SEQUENCE guarded_id_seq TO {role};",
            create_role(role, "NOLOGIN")
        ),
        role,
    )
    .await;
    same_answer_below_and_above_the_threshold(&app, role, "guarded").await;
}

#[tokio::test]
async fn copy_without_usage_on_the_identity_sequence_answers_as_insert_does() {
    let role = "fp_test_copy_seq";
    let app = role_app(
        &format!(
            "{}
             CREATE TABLE counted (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                                   seq int, geom geometry(Point, 4326));
             GRANT SELECT, INSERT ON counted TO {role};",
            create_role(role, "NOLOGIN")
        ),
        role,
    )
    .await;
    same_answer_below_and_above_the_threshold(&app, role, "counted").await;
}

#[tokio::test]
async fn copy_statements_stay_within_the_per_connection_cache() {
    let app = TestApp::with_config(
        "CREATE TABLE wide (id serial PRIMARY KEY, a int, b int, c int, d int, e int, f int,
                            g int, geom geometry(Point, 4326))",
        |c| {
            c.write_strategy = Strategy::Copy;
            c.pool_size = 1;
        },
    )
    .await;
    // Each request has a property set of its own: a COPY column list of its own.
    let names = ["a", "b", "c", "d", "e", "f", "g"];
    let sets = STATEMENT_CACHE_LIMIT + 16;
    for set in 1..=sets {
        let properties: serde_json::Map<String, serde_json::Value> = names
            .iter()
            .enumerate()
            .filter(|(bit, _)| set & (1 << bit) != 0)
            .map(|(_, name)| (name.to_string(), json!(set)))
            .collect();
        let features = (0..3)
            .map(|_| point(0.0, 0.0, serde_json::Value::Object(properties.clone())))
            .collect();
        let r = app.post("wide", &collection(features)).await;
        assert_eq!(r.status, 201, "set {set}: {r:?}");
        assert_eq!(r.body["strategy"], "copy", "set {set}");
    }
    assert_eq!(
        app.db.int("SELECT count(*) FROM wide").await,
        3 * sets as i64
    );
    // The pool's one connection: what the server holds for it.
    let client = app.state.db.connection().await.unwrap();
    // Unnamed: this query is not itself a prepared statement.
    let prepared: i64 = client
        .query_typed("SELECT count(*) FROM pg_prepared_statements", &[])
        .await
        .unwrap()[0]
        .get(0);
    assert!(
        prepared as usize <= STATEMENT_CACHE_LIMIT,
        "{prepared} statements prepared on one connection"
    );
    assert!(client.statement_cache.size() <= STATEMENT_CACHE_LIMIT);
}
