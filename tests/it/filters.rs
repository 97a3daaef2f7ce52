//! OGC API - Features Part 3 and CQL2: `filter` on items, in cql2-text
//! and cql2-json, checked against what PostgreSQL itself selects, and the
//! queryables.

use featurepipe::read::params::percent_encode;
use serde_json::Value;

use crate::support::TestApp;

/// 40 sites of every queryable type, with NULLs, names that sort
/// differently by code point than by a language's collation, and points
/// across every longitude.
const SITES: &str = "
    CREATE TYPE mood AS ENUM ('calm', 'busy');
    CREATE TABLE sites (
        id serial PRIMARY KEY, name text, kind mood, pop int4, area float8,
        price numeric(10, 2), open bool, seen date, at timestamptz, local timestamp,
        code uuid, tags text[], meta jsonb, geom geometry(Point, 4326));
    INSERT INTO sites (name, kind, pop, area, price, open, seen, at, local, code, tags, meta, geom)
    SELECT CASE i % 4 WHEN 0 THEN 'Alpha ' || i WHEN 1 THEN 'beta ' || i
                      WHEN 2 THEN 'Ähre ' || i END,
           CASE WHEN i % 2 = 0 THEN 'calm' ELSE 'busy' END::mood,
           CASE WHEN i % 7 <> 0 THEN i * 10 END,
           i * 1.5, i * 0.25, i % 3 = 0,
           date '2024-01-01' + i,
           timestamptz '2024-01-01T00:00:00Z' + i * interval '6 hours',
           timestamp '2024-01-01 00:00' + i * interval '1 day',
           md5(i::text)::uuid, ARRAY['t' || i % 3], '{}',
           ST_SetSRID(ST_MakePoint(-180 + i * 9 - 4.5, (i % 10) * 5), 4326)
      FROM generate_series(1, 40) AS i;
";

/// The ids of the sites the items query `query` matches, checking that
/// `numberMatched` agrees.
async fn matched(app: &TestApp, query: &str) -> Vec<i64> {
    matched_in(app, "sites", query).await
}

/// The ids (in key order) of the features of `coll` the items query
/// `query` matches, checking that `numberMatched` agrees.
async fn matched_in(app: &TestApp, coll: &str, query: &str) -> Vec<i64> {
    let r = app
        .get(&format!("/collections/{coll}/items?limit=1000&{query}"))
        .await;
    assert_eq!(r.status, 200, "{query}: {r:?}");
    let ids: Vec<i64> = r.body["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_i64().unwrap())
        .collect();
    assert_eq!(r.body["numberMatched"], ids.len(), "{query}");
    ids
}

/// The ids of the sites PostgreSQL selects `WHERE sql`.
async fn selected(app: &TestApp, sql: &str) -> Vec<i64> {
    let rows = app
        .db
        .client
        .query(
            &format!("SELECT id::int8 FROM sites WHERE {sql} ORDER BY id"),
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

/// Filters and the SQL that selects the same sites. The forms follow the
/// examples of the CQL2 standard (OGC 21-065r2, Annex B; OGC document
/// licence), written against this table.
const CASES: &[(&str, &str)] = &[
    // basic CQL2
    ("pop = 100", "pop = 100"),
    ("pop <> 100", "pop <> 100"),
    ("pop >= 300 AND pop < 350", "pop >= 300 AND pop < 350"),
    (
        "pop > 390 OR name = 'beta 1'",
        "pop > 390 OR name = 'beta 1'",
    ),
    ("NOT (pop > 100)", "NOT (pop > 100)"),
    ("pop IS NULL", "pop IS NULL"),
    (
        "pop IS NOT NULL AND name IS NULL",
        "pop IS NOT NULL AND name IS NULL",
    ),
    ("open", "open"),
    ("open = false", "NOT open"),
    ("kind = 'calm'", "kind = 'calm'"),
    ("area > 58.5", "area > 58.5"),
    ("price = 2.5", "price = 2.5"),
    ("seen = DATE('2024-01-05')", "seen = '2024-01-05'"),
    ("seen > '2024-02-01'", "seen > '2024-02-01'"),
    (
        "at >= TIMESTAMP('2024-01-05T00:00:00Z')",
        "at >= '2024-01-05T00:00:00Z'",
    ),
    (
        "local < TIMESTAMP('2024-01-04T12:00:00Z')",
        "local < '2024-01-04 12:00'",
    ),
    // Strings in code-point order: 'B' < 'a' < 'Ä'.
    ("name < 'a'", "name COLLATE \"C\" < 'a'"),
    ("name > 'beta 3'", "name COLLATE \"C\" > 'beta 3'"),
    // advanced comparison operators
    ("name LIKE 'Alpha%'", "name LIKE 'Alpha%'"),
    ("name NOT LIKE '%1_'", "name NOT LIKE '%1_'"),
    ("pop BETWEEN 100 AND 200", "pop BETWEEN 100 AND 200"),
    ("pop NOT BETWEEN 100 AND 390", "pop NOT BETWEEN 100 AND 390"),
    ("pop IN (10, 20, 30)", "pop IN (10, 20, 30)"),
    (
        "name NOT IN ('beta 1', 'Alpha 4')",
        "name NOT IN ('beta 1', 'Alpha 4')",
    ),
    // case-insensitive comparison
    ("CASEI(name) = casei('ALPHA 8')", "lower(name) = 'alpha 8'"),
    (
        "CASEI(name) LIKE casei('ÄHRE%')",
        "lower(name) LIKE 'ähre%'",
    ),
    // property-property
    ("area * 10 > pop", "area * 10 > pop"),
    ("pop > area", "pop > area"),
    // arithmetic: `/` does not truncate, `div` does
    ("pop / 40 = 2.5", "pop = 100"),
    ("pop div 40 = 2", "pop IN (80, 90, 100, 110)"),
    ("pop % 30 = 0", "pop % 30 = 0"),
    ("pop + 5 * 2 = 110", "pop = 100"),
    ("pop ^ 2 >= 90000", "pop >= 300"),
    // spatial functions
    (
        "S_INTERSECTS(geom, BBOX(-100, 0, 0, 30))",
        "ST_Intersects(geom, ST_MakeEnvelope(-100, 0, 0, 30, 4326))",
    ),
    (
        "S_INTERSECTS(geom, POLYGON((-180 -1, 0 -1, 0 21, -180 21, -180 -1)))",
        "ST_Intersects(geom, ST_MakeEnvelope(-180, -1, 0, 21, 4326))",
    ),
    (
        "S_WITHIN(geom, BBOX(0, 0, 180, 90))",
        "ST_Within(geom, ST_MakeEnvelope(0, 0, 180, 90, 4326))",
    ),
    (
        "S_DISJOINT(geom, BBOX(0, 0, 180, 90))",
        "ST_Disjoint(geom, ST_MakeEnvelope(0, 0, 180, 90, 4326))",
    ),
    (
        "S_EQUALS(geom, POINT(-175.5 5))",
        "ST_Equals(geom, 'SRID=4326;POINT(-175.5 5)')",
    ),
    // A box across the antimeridian covers both sides.
    (
        "S_INTERSECTS(geom, BBOX(160, -90, -160, 90))",
        "ST_X(geom) >= 160 OR ST_X(geom) <= -160",
    ),
    // temporal functions
    (
        "T_AFTER(at, TIMESTAMP('2024-01-08T00:00:00Z'))",
        "at > '2024-01-08T00:00:00Z'",
    ),
    ("T_BEFORE(seen, DATE('2024-01-05'))", "seen < '2024-01-05'"),
    (
        "T_DURING(at, INTERVAL('2024-01-02T00:00:00Z', '2024-01-03T00:00:00Z'))",
        "at > '2024-01-02T00:00:00Z' AND at < '2024-01-03T00:00:00Z'",
    ),
    (
        "T_INTERSECTS(seen, INTERVAL('2024-01-30', '..'))",
        "seen >= '2024-01-30'",
    ),
    ("T_EQUALS(seen, DATE('2024-01-09'))", "seen = '2024-01-09'"),
    // A date spans its day.
    (
        "T_INTERSECTS(seen, TIMESTAMP('2024-01-09T12:00:00Z'))",
        "seen = '2024-01-09'",
    ),
    ("T_AFTER(DATE('2024-01-09'), seen)", "seen < '2024-01-09'"),
    // A divisor of zero makes the value unknown, not the query fail.
    ("pop / (pop - 100) > 0 OR pop = 100", "pop >= 100"),
    (
        "T_DISJOINT(local, INTERVAL('..', '2024-01-20T00:00:00Z'))",
        "local > '2024-01-20 00:00'",
    ),
    // accent-insensitive comparison, alone and with CASEI
    ("ACCENTI(name) LIKE 'Ahre%'", "name LIKE 'Ähre%'"),
    (
        "CASEI(ACCENTI(name)) LIKE CASEI(ACCENTI('ÂHRE 1%'))",
        "name LIKE 'Ähre 1%'",
    ),
    // array functions
    ("A_CONTAINS(tags, ('t1'))", "'t1' = ANY (tags)"),
    ("A_EQUALS(tags, ('t2'))", "tags = ARRAY['t2']"),
    (
        "A_CONTAINEDBY(tags, ('t0', 't2', 'x'))",
        "tags <@ ARRAY['t0', 't2']",
    ),
    ("A_OVERLAPS(('t0', 'y'), tags)", "'t0' = ANY (tags)"),
    ("NOT A_OVERLAPS(tags, ('t0', 't1'))", "tags = ARRAY['t2']"),
];

#[tokio::test]
async fn cql2_text_and_json_select_what_postgresql_selects() {
    let app = TestApp::new(SITES).await;
    for (filter, sql) in CASES {
        let expected = selected(&app, sql).await;
        assert!(
            !expected.is_empty(),
            "{filter}: a case that selects nothing proves little"
        );
        let text = matched(&app, &format!("filter={}", percent_encode(filter))).await;
        assert_eq!(text, expected, "cql2-text {filter}");
        // The same filter in the other encoding.
        let json = cql2::parse_text(filter).unwrap().to_json().unwrap();
        let query = format!("filter-lang=cql2-json&filter={}", percent_encode(&json));
        assert_eq!(matched(&app, &query).await, expected, "cql2-json {json}");
    }
}

#[tokio::test]
async fn cql2_json_as_the_standard_writes_it() {
    // The form of the standard's example 2 (JSON), on this table.
    let app = TestApp::new(SITES).await;
    let json = r#"{"op": "and", "args": [
        {"op": ">", "args": [{"property": "pop"}, 100]},
        {"op": "s_intersects", "args": [{"property": "geom"},
            {"type": "Polygon", "coordinates": [[[-180, -1], [0, -1], [0, 21], [-180, 21], [-180, -1]]]}]}]}"#;
    let query = format!("filter-lang=cql2-json&filter={}", percent_encode(json));
    let expected = selected(
        &app,
        "pop > 100 AND ST_Intersects(geom, ST_MakeEnvelope(-180, -1, 0, 21, 4326))",
    )
    .await;
    assert!(!expected.is_empty());
    assert_eq!(matched(&app, &query).await, expected);
}

#[tokio::test]
async fn a_filter_crs_reads_the_filter_s_geometries_in_its_axis_order() {
    let app = TestApp::new(SITES).await;
    // EPSG:4326 is latitude first.
    let crs = percent_encode("http://www.opengis.net/def/crs/EPSG/0/4326");
    let filter = percent_encode("S_INTERSECTS(geom, BBOX(0, -100, 30, 0))");
    let lat_first = matched(&app, &format!("filter={filter}&filter-crs={crs}")).await;
    let expected = selected(
        &app,
        "ST_Intersects(geom, ST_MakeEnvelope(-100, 0, 0, 30, 4326))",
    )
    .await;
    assert!(!expected.is_empty());
    assert_eq!(lat_first, expected);
    // A box read latitude first across the antimeridian covers both sides.
    let across = percent_encode("S_INTERSECTS(geom, BBOX(-90, 160, 90, -160))");
    let both = matched(&app, &format!("filter={across}&filter-crs={crs}")).await;
    let expected = selected(&app, "ST_X(geom) >= 160 OR ST_X(geom) <= -160").await;
    assert!(!expected.is_empty());
    assert_eq!(both, expected);
}

#[tokio::test]
async fn a_filter_that_cannot_run_is_a_400_that_says_where_and_why() {
    let app = TestApp::new(SITES).await;
    let cases = [
        ("nosuch = 1", "'nosuch' is not a queryable"),
        ("meta = 'x'", "'meta' is not a queryable"),
        ("pop = 'ten'", "a number is compared with a string"),
        (
            "name > 3 AND pop = 1",
            "at `name > 3`: a string is compared with a number",
        ),
        (
            "S_INTERSECTS(name, POINT(1 2))",
            "takes geometries, not a string",
        ),
        ("A_CONTAINS(name, ('a'))", "'name' is not an array"),
        (
            "A_CONTAINS(tags, (1, 2))",
            "a number is compared with an array of strings",
        ),
        ("tags = 't1'", "an array is compared with a string"),
        ("myfunction(pop) = 1", "'myfunction' is not a function"),
        ("pop = = 1", "query parameter 'filter'"),
        (
            "S_INTERSECTS(geom, BBOX(0, 10, 5, 0))",
            "south edge is north",
        ),
        (
            "S_INTERSECTS(geom, POLYGON((0 0, 1 0, 1 1, 0 2)))",
            "rings are closed",
        ),
        (
            "S_WITHIN(geom, POLYGON((0 0, 1 0, 0 0)))",
            "at least four points",
        ),
    ];
    for (filter, says) in cases {
        let r = app
            .get(&format!(
                "/collections/sites/items?filter={}",
                percent_encode(filter)
            ))
            .await;
        assert_eq!(r.status, 400, "{filter}: {r:?}");
        assert_eq!(r.headers["content-type"], "application/problem+json");
        let detail = r.body["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{filter}: {detail}");
    }
    let empty_in = r#"{"op": "in", "args": [{"property": "name"}, []]}"#;
    let r = app
        .get(&format!(
            "/collections/sites/items?filter-lang=cql2-json&filter={}",
            percent_encode(empty_in)
        ))
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    let r = app
        .get("/collections/sites/items?filter=pop%3D1&filter-lang=cql")
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    let r = app.get("/collections/sites/items?filter-crs=x").await;
    assert_eq!(r.status, 400, "{r:?}");
}

#[tokio::test]
async fn literals_are_bound_never_written_into_the_sql() {
    let app = TestApp::new(SITES).await;
    let filter = "name = 'x''; DROP TABLE sites; --' OR name LIKE '%'' OR 1=1 --'";
    assert!(matched(&app, &format!("filter={}", percent_encode(filter)))
        .await
        .is_empty());
    assert_eq!(app.db.int("SELECT count(*) FROM sites").await, 40);
}

#[tokio::test]
async fn paging_links_carry_the_filter() {
    let app = TestApp::new(SITES).await;
    let filter = percent_encode("pop > 100");
    let r = app
        .get(&format!("/collections/sites/items?limit=5&filter={filter}"))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let next = r.body["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["rel"] == "next")
        .unwrap()["href"]
        .as_str()
        .unwrap();
    assert!(next.contains(&format!("filter={filter}")), "{next}");
    let path = &next[next.find("/collections").unwrap()..];
    let second = app.get(path).await;
    let expected = selected(&app, "pop > 100").await;
    let ids: Vec<i64> = second.body["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, expected[5..10]);
}

#[tokio::test]
async fn queryables_are_typed_one_type_each_and_filters_are_declared() {
    let app = TestApp::new(SITES).await;
    let r = app.get("/collections/sites/queryables").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.headers["content-type"], "application/schema+json");
    let props = &r.body["properties"];
    let types: Vec<(&str, &Value)> = props
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.as_str(), &v["type"]))
        .collect();
    let expect = [
        ("name", "string"),
        ("kind", "string"),
        ("pop", "integer"),
        ("area", "number"),
        ("price", "number"),
        ("open", "boolean"),
        ("seen", "string"),
        ("at", "string"),
        ("code", "string"),
    ];
    for (name, ty) in expect {
        let found = types.iter().find(|(k, _)| *k == name);
        assert_eq!(
            found.map(|(_, t)| *t),
            Some(&Value::from(ty)),
            "{name}: {props}"
        );
    }
    assert_eq!(props["seen"]["format"], "date");
    assert_eq!(props["at"]["format"], "date-time");
    assert_eq!(props["geom"]["format"], "geometry-point");
    assert_eq!(props["geom"]["x-ogc-role"], "primary-geometry");
    assert_eq!(
        props["geom"]["$ref"],
        "https://geojson.org/schema/Point.json"
    );
    // Arrays for the array functions, with their values' type; not JSON.
    assert_eq!(props["tags"]["type"], "array", "{props}");
    assert_eq!(props["tags"]["items"]["type"], "string", "{props}");
    assert!(props.get("meta").is_none(), "{props}");
    assert_eq!(r.body["additionalProperties"], false);
    let collection = app.get("/collections/sites").await;
    let rels: Vec<&str> = collection.body["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["rel"].as_str().unwrap())
        .collect();
    assert!(
        rels.contains(&"http://www.opengis.net/def/rel/ogc/1.0/queryables"),
        "{rels:?}"
    );
    let conformance = app.get("/conformance").await;
    let classes = conformance.body["conformsTo"].to_string();
    for class in [
        "ogcapi-features-3/1.0/conf/filter",
        "ogcapi-features-3/1.0/conf/features-filter",
        "cql2/1.0/conf/basic-cql2",
        "cql2/1.0/conf/cql2-text",
        "cql2/1.0/conf/cql2-json",
        "cql2/1.0/conf/array-functions",
        "cql2/1.0/conf/accent-insensitive-comparison",
    ] {
        assert!(classes.contains(class), "{class}: {classes}");
    }
}

#[tokio::test]
async fn sortby_orders_pages_that_stay_apart_and_properties_selects_them() {
    let app = TestApp::new(SITES).await;
    // kind has two values: the key keeps the pages apart within each.
    let mut paged = Vec::new();
    for offset in (0..40).step_by(7) {
        let r = app
            .get(&format!(
                "/collections/sites/items?sortby=-kind,%2Bname&limit=7&offset={offset}&properties=name,kind"
            ))
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        for f in r.body["features"].as_array().unwrap() {
            let props = f["properties"].as_object().unwrap();
            let keys: Vec<&str> = props.keys().map(String::as_str).collect();
            assert_eq!(keys, ["name", "kind"], "{f}");
            paged.push(f["id"].as_i64().unwrap());
        }
    }
    let expected = selected(&app, "true ORDER BY kind DESC, name COLLATE \"C\", id --").await;
    assert_eq!(paged, expected);
    let next = app
        .get("/collections/sites/items?sortby=pop&properties=&limit=2")
        .await;
    assert_eq!(next.status, 200, "{next:?}");
    assert_eq!(
        next.body["features"][0]["properties"],
        serde_json::json!({})
    );
    let href = next.body["links"].to_string();
    assert!(
        href.contains("sortby=pop") && href.contains("properties="),
        "{href}"
    );
    for bad in [
        "sortby=geom",
        "sortby=nosuch",
        "properties=nosuch",
        "sortby=meta",
    ] {
        let r = app.get(&format!("/collections/sites/items?{bad}")).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
    }
}

/// Visits, whose `time` setting is an interval of two dates (a NULL end
/// open), and sightings, whose `time` is one timestamp.
const TIMED: &str = "
    CREATE TABLE visits (id serial PRIMARY KEY, starts date, ends date, geom geometry(Point, 4326));
    INSERT INTO visits (starts, ends) VALUES
        ('2024-01-01', '2024-01-10'), ('2024-02-01', NULL), (NULL, '2023-12-31'),
        ('2024-03-01', '2024-03-01');
    CREATE TABLE sightings (id serial PRIMARY KEY, seen timestamptz, geom geometry(Point, 4326));
    INSERT INTO sightings (seen) VALUES ('2024-01-01T10:00:00Z'), ('2024-06-01T00:00:00Z'), (NULL);
";

#[tokio::test]
async fn the_time_setting_is_the_queryable_time_of_the_temporal_functions() {
    let settings = "[collections.visits]\ntime = [\"starts\", \"ends\"]\n\
                    [collections.sightings]\ntime = \"seen\"\n";
    let path = crate::support::settings_file("timed-queryables", settings);
    let app = TestApp::with_config(TIMED, |c| c.settings = Some(path.clone())).await;
    let ids = |coll: &'static str, filter: &'static str| {
        let query = format!("filter={}", percent_encode(filter));
        let app = &app;
        async move { matched_in(app, coll, &query).await }
    };
    // An interval: each end a column, a NULL end open.
    let jan = "T_INTERSECTS(time, INTERVAL('2024-01-05', '2024-01-31'))";
    assert_eq!(ids("visits", jan).await, [1]);
    let later = "T_INTERSECTS(time, INTERVAL('2025-01-01', '..'))";
    assert_eq!(ids("visits", later).await, [2]);
    assert_eq!(
        ids("visits", "T_BEFORE(time, DATE('2024-01-01'))").await,
        [3]
    );
    assert_eq!(
        ids(
            "visits",
            "T_DURING(time, INTERVAL('2024-02-15', '2024-03-31'))"
        )
        .await,
        [4]
    );
    // An instant: the temporal functions, and comparisons too; NULL is no time.
    assert_eq!(
        ids(
            "sightings",
            "T_AFTER(time, TIMESTAMP('2024-03-01T00:00:00Z'))"
        )
        .await,
        [2]
    );
    assert_eq!(
        ids("sightings", "time < TIMESTAMP('2024-03-01T00:00:00Z')").await,
        [1]
    );
    assert_eq!(
        ids("sightings", "T_DISJOINT(time, DATE('2024-01-01'))").await,
        [2]
    );
    // An interval is no value to compare.
    let r = app
        .get(&format!(
            "/collections/visits/items?filter={}",
            percent_encode("time > DATE('2024-01-01')")
        ))
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(
        r.body["detail"].as_str().unwrap().contains("interval"),
        "{r:?}"
    );
    // Both are published as queryables.
    let q = app.get("/collections/visits/queryables").await.body;
    assert_eq!(q["properties"]["time"]["type"], "array", "{q}");
    assert_eq!(q["properties"]["time"]["items"]["format"], "date");
    let q = app.get("/collections/sightings/queryables").await.body;
    assert_eq!(q["properties"]["time"]["type"], "string", "{q}");
    assert_eq!(q["properties"]["time"]["format"], "date-time");
}

/// The standard's building table, for its examples (`tests/cql2/`): the
/// primary geometry `location`, which `geometry` names too.
const BUILDINGS: &str = "
    CREATE TABLE buildings (
        id serial PRIMARY KEY, floors int, taxes numeric, owner text, swimming_pool bool,
        material text, built date, starts_at timestamptz, ends_at timestamptz,
        location geometry(Point, 4326));
    INSERT INTO buildings (floors, taxes, owner, swimming_pool, material, built, starts_at, ends_at, location)
    SELECT i % 9, i * 60, (ARRAY['Mike Jones', 'mike smith', 'Ann Jones', 'Bob', NULL])[1 + i % 5],
           i % 3 = 0, (ARRAY['brick', 'red brick', 'wood', 'brickwork'])[1 + i % 4],
           date '2010-01-01' + i * 73,
           timestamptz '2017-06-10T00:00:00Z' + i * interval '3 hours',
           timestamptz '2017-06-10T09:00:00Z' + i * interval '3 hours',
           ST_SetSRID(ST_MakePoint(-118.2 + i * 0.02, 33.7 + i * 0.01), 4326)
      FROM generate_series(1, 30) AS i;
";

#[tokio::test]
async fn the_cql2_standard_s_examples_select_the_same_in_both_encodings() {
    let app = TestApp::new(BUILDINGS).await;
    let ids = |query: String| {
        let app = &app;
        async move { matched_in(app, "buildings", &query).await }
    };
    // Each example, and the same condition as SQL.
    let examples = [
        ("09", "floors > 5"),
        ("10", "taxes <= 500"),
        ("11", "owner LIKE '%Jones%'"),
        ("12", "owner LIKE 'Mike%'"),
        ("13", "owner NOT LIKE '%Mike%'"),
        ("14", "swimming_pool"),
        ("15", "floors > 5 AND swimming_pool"),
        (
            "16",
            "swimming_pool AND (floors > 5 OR material LIKE 'brick%' OR material LIKE '%brick')",
        ),
        ("17", "(floors > 5 AND material = 'brick') OR swimming_pool"),
        ("18", "NOT (floors < 5) OR swimming_pool"),
        (
            "19",
            "(owner LIKE 'mike%' OR owner LIKE 'Mike%') AND floors < 4",
        ),
        ("20", "built < '2015-01-01'"),
        ("21", "built > '2012-06-05'"),
        (
            "22",
            "starts_at > '2017-06-10T07:30:00Z' AND ends_at < '2017-06-11T10:30:00Z'",
        ),
        (
            "23",
            "ST_Within(location, ST_MakeEnvelope(-118, 33.8, -117.9, 34, 4326))",
        ),
        (
            "24",
            "ST_Intersects(location, 'SRID=4326;POLYGON((-10 -10,10 -10,10 10,-10 -10))')",
        ),
        (
            "25",
            "floors > 5 AND ST_Within(location, ST_MakeEnvelope(-118, 33.8, -117.9, 34, 4326))",
        ),
    ];
    let mut matched_some = 0;
    for (n, sql) in examples {
        let text = std::fs::read_to_string(format!("tests/cql2/example{n}.txt")).unwrap();
        let json = std::fs::read_to_string(format!("tests/cql2/example{n}.json")).unwrap();
        let by_text = ids(format!("filter={}", percent_encode(text.trim()))).await;
        let by_json = ids(format!(
            "filter-lang=cql2-json&filter={}",
            percent_encode(&json)
        ))
        .await;
        assert_eq!(by_text, by_json, "example {n}: the two encodings differ");
        let rows = app
            .db
            .client
            .query(
                &format!("SELECT id::int8 FROM buildings WHERE {sql} ORDER BY id"),
                &[],
            )
            .await
            .unwrap();
        let expected: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        assert_eq!(by_text, expected, "example {n}: {text}");
        matched_some += usize::from(!expected.is_empty());
    }
    // Nearly every example selects something here (24's triangle is far away).
    assert!(matched_some >= 15, "{matched_some}");
}
