//! Parse + validate + encode throughput of the pure function, on one core.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use featurepipe::catalog::{Collection, Column, ColumnType, ScalarType};
use featurepipe::feature::{parse_body, Reading};
use featurepipe::geometry::GeometryColumn;
use serde_json::{json, Value};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The benchmark's points table: serial key, a name, a number, a point, then
/// `extra` text columns `c0`, `c1`, ….
fn points_table(extra: usize) -> Collection {
    let mut id = Column::new("id", ColumnType::Scalar(ScalarType::Int4));
    id.default = Some("nextval('points_id_seq'::regclass)".into());
    id.not_null = true;
    let geom = GeometryColumn::from_typmod((4326 << 8) | (1 << 2), false);
    let text = || ColumnType::Scalar(ScalarType::Text { max_chars: None });
    let mut columns = vec![
        id,
        Column::new("name", text()),
        Column::new("seq", ColumnType::Scalar(ScalarType::Int4)),
        Column::new("geom", ColumnType::Geometry(geom)),
    ];
    columns.extend((0..extra).map(|c| Column::new(&format!("c{c}"), text())));
    Collection::new("points", columns, 3)
}

/// 10,000 points as a FeatureCollection, each with the properties `properties(i)`.
fn points_body(properties: impl Fn(usize) -> Value) -> Vec<u8> {
    let features: Vec<_> = (0..10_000)
        .map(|i| {
            json!({"type": "Feature",
                   "geometry": {"type": "Point", "coordinates": [-10.0 + (i % 1000) as f64 * 0.0437, 35.0 + i as f64 * 0.00213]},
                   "properties": properties(i)})
        })
        .collect();
    serde_json::to_vec(&json!({"type": "FeatureCollection", "features": features})).unwrap()
}

fn bench(c: &mut Criterion) {
    let body = points_body(|i| json!({"name": format!("p{i}"), "seq": i}));
    let table = points_table(0);
    let mut group = c.benchmark_group("parse_validate_encode");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("10k points", |b| {
        b.iter(|| parse_body(&body, &table, &Reading::default()).expect("valid"))
    });
    // The same body through serde_json checking its syntax only: a reference
    // run side by side, so that figures from a noisy machine can be compared.
    group.bench_function("serde_json syntax only", |b| {
        b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(&body).expect("valid"))
    });
    // A wide table: 20 text properties of 44 columns, the last 20.
    let body = points_body(|i| {
        Value::Object(
            (20..40)
                .map(|c| (format!("c{c}"), json!(format!("v{i}"))))
                .collect(),
        )
    });
    let table = points_table(40);
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("10k points, 20 of 44 columns", |b| {
        b.iter(|| parse_body(&body, &table, &Reading::default()).expect("valid"))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
