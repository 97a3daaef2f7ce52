//! Parse + validate + encode throughput of the pure function, on one core.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use featurepipe::catalog::{Collection, Column, ColumnType, Identity, ScalarType};
use featurepipe::feature::{parse_body, Reading};
use featurepipe::geometry::{Crs, GeometryColumn};
use serde_json::json;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn column(name: &str, ty: ColumnType) -> Column {
    Column {
        name: name.into(),
        type_sql: String::new(),
        ty,
        not_null: false,
        default: None,
        identity: Identity::None,
        generated: false,
    }
}

/// The benchmark's points table: serial key, a name, a number, a point.
fn points_table() -> Collection {
    let mut id = column("id", ColumnType::Scalar(ScalarType::Int4));
    id.default = Some("nextval('points_id_seq'::regclass)".into());
    id.not_null = true;
    let geom = GeometryColumn::from_typmod((4326 << 8) | (1 << 2), false);
    Collection {
        id: "points".into(),
        schema: "public".into(),
        table: "points".into(),
        description: None,
        columns: vec![
            id,
            column(
                "name",
                ColumnType::Scalar(ScalarType::Text { max_chars: None }),
            ),
            column("seq", ColumnType::Scalar(ScalarType::Int4)),
            column("geom", ColumnType::Geometry(geom)),
        ],
        geometry: 3,
        primary_key: Some(0),
        before_insert_trigger: false,
        last_modified: None,
        crs: vec![Crs::crs84()],
        title: None,
        precondition_required: false,
        read_only: false,
    }
}

fn bench(c: &mut Criterion) {
    let features: Vec<_> = (0..10_000)
        .map(|i| {
            json!({"type": "Feature",
                   "geometry": {"type": "Point", "coordinates": [-10.0 + (i % 1000) as f64 * 0.0437, 35.0 + i as f64 * 0.00213]},
                   "properties": {"name": format!("p{i}"), "seq": i}})
        })
        .collect();
    let body =
        serde_json::to_vec(&json!({"type": "FeatureCollection", "features": features})).unwrap();
    let table = points_table();
    let mut group = c.benchmark_group("parse_validate_encode");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("10k points", |b| {
        b.iter(|| parse_body(&body, &table, &Reading::default()).expect("valid"))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
