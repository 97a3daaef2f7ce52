//! Features read as JSON-FG: the primary geometry as `place` in the asked
//! CRS and as `geometry` in WGS 84, and `time`, assembled by PostgreSQL as
//! GeoJSON features are ([`super::sql::feature_columns`]).

use super::sql::{feature_object, geometry_in};
use crate::catalog::Collection;
use crate::geometry::crs::CRS84;
use crate::geometry::Crs;

/// `<feature json>, <etag>, <last modified>` of the row `t` as a JSON-FG
/// feature, `place` in `crs`. In CRS84 `place` is null and the geometry is
/// `geometry`'s alone (JSON-FG /req/core/place-geometries). No collection
/// has a temporal property, so `time` is null.
pub fn feature_columns(coll: &Collection, crs: &Crs) -> String {
    let wgs84 = format!(
        "ST_AsGeoJSON({}, 15, 0)::json",
        geometry_in(coll, &Crs::crs84())
    );
    let place = match crs.uri.as_str() {
        CRS84 => "NULL::json".to_owned(),
        _ => format!("ST_AsGeoJSON({}, 15, 0)::json", geometry_in(coll, crs)),
    };
    feature_object(
        coll,
        &format!("'time', NULL::json, 'place', {place}, 'geometry', {wgs84}"),
    )
}
