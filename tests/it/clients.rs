//! Real clients that nobody here wrote: GDAL's OGC API - Features driver reads
//! what featurepipe serves.

use crate::support::{run, Served, TestApp};

const SETUP: &str = "
    CREATE TABLE stations (id serial PRIMARY KEY, name text, elevation float8,
                           geom geometry(Point, 4326));
    INSERT INTO stations (name, elevation, geom)
         SELECT 'station ' || i, i * 10.5, ST_SetSRID(ST_MakePoint(i * 0.25, 45 + i * 0.125), 4326)
           FROM generate_series(1, 23) AS i;
    CREATE TABLE lakes (gid int PRIMARY KEY, name text, geom geometry(Polygon, 25832));
    INSERT INTO lakes VALUES (1, 'square', ST_Transform(ST_GeomFromText(
        'POLYGON((9 50, 9.01 50, 9.01 50.01, 9 50.01, 9 50))', 4326), 25832));
";

#[tokio::test]
async fn gdal_lists_collections_and_reads_every_feature() {
    let app = TestApp::new(SETUP).await;
    let served = Served::start(&app).await;
    let source = format!("OAPIF:{}", served.url);
    let out = run("ogrinfo", &["-ro", "-q", &source]).await;
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{listing}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        listing.contains("stations") && listing.contains("lakes"),
        "{listing}"
    );

    // Page size 10 forces GDAL to follow next links over 3 pages.
    let out = run(
        "ogrinfo",
        &["-ro", "-al", "-oo", "PAGE_SIZE=10", &source, "stations"],
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches("OGRFeature(stations)").count(), 23, "{text}");
    assert!(text.contains("name (String) = station 7"), "{text}");
    assert!(text.contains("POINT (1.75 45.875)"), "{text}");

    let out = run("ogrinfo", &["-ro", "-al", &source, "lakes"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // Stored in UTM; read back in longitude/latitude.
    assert!(
        text.contains("POLYGON ((9.0 50.0,9.01 50.0,9.01 50.01,9.0 50.01,9.0 50.0))"),
        "{text}"
    );
}

#[tokio::test]
async fn owslib_creates_replaces_and_deletes() {
    let app = TestApp::new(SETUP).await;
    // Watch the table from the database side while OWSLib works.
    app.db
        .client
        .batch_execute(
            "CREATE TABLE seen (op text, name text, wkt text);
             CREATE FUNCTION log() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF TG_OP = 'DELETE' THEN INSERT INTO seen VALUES (TG_OP, OLD.name, NULL);
               ELSE INSERT INTO seen VALUES (TG_OP, NEW.name, ST_AsText(NEW.geom)); END IF;
               RETURN NULL;
             END $$;
             CREATE TRIGGER log AFTER INSERT OR UPDATE OR DELETE ON stations
               FOR EACH ROW EXECUTE FUNCTION log();",
        )
        .await
        .unwrap();
    let served = Served::start(&app).await;
    let python = std::env::var("FEATUREPIPE_TEST_PYTHON")
        .expect("FEATUREPIPE_TEST_PYTHON is not set: run the tests with `make test`");
    let out = run(&python, &["tests/clients/owslib_crud.py", &served.url]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "24");
    let log = app
        .db
        .text("SELECT string_agg(concat_ws(' ', op, name, wkt), '; ') FROM seen")
        .await;
    assert_eq!(
        log.as_deref(),
        Some(
            "INSERT from owslib POINT(1.5 2.5); UPDATE replaced by owslib POINT(-3 4); \
             DELETE replaced by owslib"
        )
    );
}

#[tokio::test]
async fn gdal_types_a_float_column_real_when_its_first_values_are_whole() {
    // GDAL (and QGIS through it) types fields from the first features read:
    // a float column whose first values are whole numbers must read as Real.
    let app = TestApp::new(
        "CREATE TABLE gauges (id serial PRIMARY KEY, level float8, flow numeric, count int,
                              geom geometry(Point, 4326));
         INSERT INTO gauges (level, flow, count, geom)
             SELECT CASE WHEN i < 15 THEN i ELSE i + 0.5 END, i, i, ST_MakePoint(i, i)
               FROM generate_series(1, 20) AS i;",
    )
    .await;
    let page = app.get("/collections/gauges/items?limit=1").await;
    let properties = &page.body["features"][0]["properties"];
    assert!(properties["level"].is_f64(), "{properties}");
    assert!(properties["flow"].is_f64(), "{properties}");
    assert!(properties["count"].is_u64(), "{properties}");
    let served = Served::start(&app).await;
    let source = format!("OAPIF:{}", served.url);
    let out = run("ogrinfo", &["-ro", "-al", "-so", &source, "gauges"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("level: Real"), "{text}");
    assert!(text.contains("flow: Real"), "{text}");
    assert!(text.contains("count: Integer"), "{text}");
    let out = run("ogrinfo", &["-ro", "-al", &source, "gauges"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("level (Real) = 15.5"), "{text}");
}

#[tokio::test]
async fn owslib_reads_queryables_and_filters_by_cql2() {
    let app = TestApp::new(SETUP).await;
    let served = Served::start(&app).await;
    let python = std::env::var("FEATUREPIPE_TEST_PYTHON")
        .expect("FEATUREPIPE_TEST_PYTHON is not set: run the tests with `make test`");
    let out = run(&python, &["tests/clients/owslib_filter.py", &served.url]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "elevation,geom,name");
    // elevation = i * 10.5 > 200: i >= 20; named "station 2…": 20..23.
    assert_eq!(lines[1], "station 23,station 22,station 21,station 20");
}

#[tokio::test]
async fn gdal_filters_by_attribute_and_by_box() {
    let app = TestApp::new(SETUP).await;
    let served = Served::start(&app).await;
    let source = format!("OAPIF:{}", served.url);
    // An attribute filter (GDAL sends what it can translate, and filters
    // the rest itself) and a box (sent as bbox=): the very stations SQL selects.
    for (args, sql) in [
        (vec!["-where", "elevation > 100"], "elevation > 100"),
        (
            vec!["-spat", "1", "45", "3", "46"],
            "ST_Intersects(geom, ST_MakeEnvelope(1, 45, 3, 46, 4326))",
        ),
        (
            vec!["-where", "elevation > 100", "-spat", "1", "45", "5", "48"],
            "elevation > 100 AND ST_Intersects(geom, ST_MakeEnvelope(1, 45, 5, 48, 4326))",
        ),
    ] {
        let mut all = vec!["-ro", "-al", source.as_str(), "stations"];
        all.extend(args.iter().copied());
        let out = run("ogrinfo", &all).await;
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let expected = app
            .db
            .int(&format!("SELECT count(*) FROM stations WHERE {sql}"))
            .await;
        assert!(
            expected > 0,
            "{sql}: a filter that selects nothing proves little"
        );
        assert_eq!(
            text.matches("OGRFeature(stations)").count() as i64,
            expected,
            "{args:?}: {text}"
        );
    }
}
