//! Any bytes as a request body → validated rows and EWKB: never a panic, and
//! what is accepted is consistent (one row or one rejection per feature).

#![no_main]

use featurepipe::catalog::{Collection, Column, ColumnType, ScalarType};
use featurepipe::feature::{parse_body, parse_item, Handling, Purpose, Reading};
use featurepipe::geometry::{Crs, GeometryColumn};
use libfuzzer_sys::fuzz_target;


/// A table with a column of most types a feature can fill, and any geometry.
fn table(geometry: GeometryColumn) -> Collection {
    use ScalarType::*;
    let mut id = Column::new("id", ColumnType::Scalar(Int8));
    id.not_null = true;
    id.default = Some("nextval('t_id_seq'::regclass)".into());
    let columns = vec![
        id,
        Column::new("name", ColumnType::Scalar(Text { max_chars: Some(8) })),
        Column::new("n2", ColumnType::Scalar(Int2)),
        Column {
            not_null: true,
            ..Column::new("n4", ColumnType::Scalar(Int4))
        },
        Column::new("f4", ColumnType::Scalar(Float4)),
        Column::new("f8", ColumnType::Scalar(Float8)),
        Column::new("num", ColumnType::Scalar(Numeric)),
        Column::new("ok", ColumnType::Scalar(Bool)),
        Column::new("u", ColumnType::Scalar(Uuid)),
        Column::new("d", ColumnType::Scalar(Date)),
        Column::new("ts", ColumnType::Scalar(Timestamp)),
        Column::new("tz", ColumnType::Scalar(Timestamptz)),
        Column::new("j", ColumnType::Scalar(Jsonb)),
        Column::new("tags", ColumnType::Array(Text { max_chars: None })),
        Column::new("geom", ColumnType::Geometry(geometry)),
    ];
    let geometry = columns.len() - 1;
    Collection::new("t", columns, geometry)
}

fuzz_target!(|data: &[u8]| {
    let any = table(GeometryColumn::from_typmod(-1, false));
    // MultiPolygonZ, 3857: promotion, dimensions and a storage CRS.
    let polygons = table(GeometryColumn::from_typmod((3857 << 8) | (6 << 2) | 0x2, false));
    let lat_first = Crs {
        uri: String::new(),
        srid: 4326,
        lat_first: true,
    };
    let selector = data.first().copied().unwrap_or(0);
    let mut how = Reading {
        handling: match selector & 9 {
            0 => Handling::Unspecified,
            1 => Handling::Lenient,
            _ => Handling::Strict,
        },
        keep_valid: selector & 2 != 0,
        ..Reading::default()
    };
    if selector & 4 != 0 {
        how.crs = lat_first;
    }
    how.limits.positions = 1000;
    for coll in [&any, &polygons] {
        if let Ok(parsed) = parse_body(data, coll, &how) {
            for row in &parsed.rows {
                assert!(row.shape < parsed.shapes.len());
                assert_eq!(row.values.len(), parsed.shapes[row.shape].len());
            }
            if how.keep_valid && !parsed.single {
                assert_eq!(parsed.row_features.len(), parsed.rows.len());
            }
        }
        for purpose in [Purpose::Create, Purpose::Replace, Purpose::Patch] {
            let _ = parse_item(data, coll, purpose, &how);
        }
    }
});
