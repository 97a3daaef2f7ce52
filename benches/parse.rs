//! Parse + validate + encode throughput of the pure function, on one core.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use featurepipe::catalog::{Collection, Column, ColumnType, ScalarType};
use featurepipe::feature::{parse_body, Reading};
use featurepipe::geometry::GeometryColumn;
use serde_json::json;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The benchmark's points table: serial key, a name, a number, a point.
fn points_table() -> Collection {
    let mut id = Column::new("id", ColumnType::Scalar(ScalarType::Int4));
    id.default = Some("nextval('points_id_seq'::regclass)".into());
    id.not_null = true;
    let geom = GeometryColumn::from_typmod((4326 << 8) | (1 << 2), false);
    let columns = vec![
        id,
        Column::new(
            "name",
            ColumnType::Scalar(ScalarType::Text { max_chars: None }),
        ),
        Column::new("seq", ColumnType::Scalar(ScalarType::Int4)),
        Column::new("geom", ColumnType::Geometry(geom)),
    ];
    Collection::new("points", columns, 3)
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
    // The same body through serde_json checking its syntax only: a reference
    // run side by side, so that figures from a noisy machine can be compared.
    group.bench_function("serde_json syntax only", |b| {
        b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(&body).expect("valid"))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
