//! SQL text for reads, built only from catalog identifiers.

use super::params::{ETAG_PROPERTY, ID_PROPERTY};
use super::reach::Reach;
use super::{jsonfg, Encoding};
use crate::catalog::temporal::Temporal;
use crate::catalog::{key, Collection, Column, ColumnType, ScalarType};
use crate::db::quote_ident;
use crate::geometry::{Crs, GeometryColumn, GeometryType, WGS84_SRID};

/// `t."column"`.
pub fn col(coll: &Collection, ci: usize) -> String {
    format!("t.{}", quote_ident(&coll.columns[ci].name))
}

/// The feature geometry in `crs` (axes in its order), whatever the storage CRS.
pub fn geometry_in(coll: &Collection, crs: &Crs) -> String {
    let g = col(coll, coll.geometry);
    let gc = coll.geometry_column();
    let (g, stored) = if gc.geography {
        (format!("{g}::geometry"), gc.srid)
    } else {
        (g, gc.srid)
    };
    let to = crs.srid;
    let expr = match stored {
        s if s == to => g,
        // Unconstrained columns may hold any SRID (0: unknown, taken as is).
        0 => {
            format!("CASE WHEN ST_SRID({g}) IN (0, {to}) THEN {g} ELSE ST_Transform({g}, {to}) END")
        }
        _ => format!("ST_Transform({g}, {to})"),
    };
    if crs.lat_first {
        format!("ST_FlipCoordinates({expr})")
    } else {
        expr
    }
}

/// `ORDER BY` the columns `by` (descending where marked), strings in
/// code-point order as filters compare them, then the key (or the row's
/// place, without one): pages stay apart however many features share a
/// value.
pub fn order_by(coll: &Collection, by: &[(usize, bool)]) -> String {
    let mut terms: Vec<String> = by
        .iter()
        .map(|&(ci, descending)| {
            let collate = match coll.columns[ci].ty {
                ColumnType::Scalar(ScalarType::Text { .. }) if !coll.columns[ci].enum_type => {
                    " COLLATE \"C\""
                }
                _ => "",
            };
            let direction = if descending { " DESC" } else { "" };
            format!("{}{collate}{direction}", col(coll, ci))
        })
        .collect();
    match coll.primary_key {
        Some(pk) => terms.push(col(coll, pk)),
        None if coll.has_key() => terms.extend(coll.composite_key.iter().map(|&ci| col(coll, ci))),
        None => terms.push("t.ctid".into()),
    }
    terms.join(", ")
}

/// Columns published as properties: all but the feature geometry, and the
/// key unless clients choose keys. Then it is a property too, so that a
/// client that takes its fields from the properties and leaves `id` out of
/// a POST (QGIS) can still set it.
pub fn property_columns(coll: &Collection) -> impl Iterator<Item = usize> + '_ {
    let key_too = coll.client_keys();
    (0..coll.columns.len())
        .filter(move |&ci| ci != coll.geometry && (Some(ci) != coll.primary_key || key_too))
}

/// Which properties a feature is read with.
#[derive(Clone, Copy, Default)]
pub struct Shown<'a> {
    /// Columns left out (`properties=`, or shown elsewhere).
    pub hidden: &'a [usize],
    /// `with-etags=true`: the key and the ETag too.
    pub with_etags: bool,
}

/// `<feature json>, <etag>, <last modified>` of the row `t`, geometry in `crs`.
///
/// The feature is assembled by PostgreSQL as GeoJSON text; the ETag is the
/// md5 of the whole stored row, so it changes with any column and does not
/// depend on the CRS the feature is read in.
pub fn feature_columns(coll: &Collection, crs: &Crs, shown: Shown<'_>) -> String {
    let geometry = format!(
        "'geometry', ST_AsGeoJSON({}, 15, 0)::json",
        geometry_in(coll, crs)
    );
    feature_object(coll, &geometry, shown)
}

/// [`feature_columns`] of a feature whose geometry is given by the
/// `json_build_object` arguments `geometry_members`, its properties as
/// `shown` says (its hidden columns are shown elsewhere, or not at all).
pub fn feature_object(coll: &Collection, geometry_members: &str, shown: Shown<'_>) -> String {
    let id = match coll.primary_key {
        Some(pk) => format!("'id', {}, ", col(coll, pk)),
        None if coll.has_key() => format!("'id', {}, ", key_text(coll)),
        None => String::new(),
    };
    let mut props: Vec<String> = property_columns(coll)
        .filter(|ci| !shown.hidden.contains(ci))
        .map(|ci| property(coll, ci))
        .collect();
    if shown.with_etags {
        // The key as a property (unless it is one), so that a client that
        // takes its fields from the properties knows each feature's id.
        if let Some(pk) = coll.primary_key.filter(|_| !coll.client_keys()) {
            props.push(col(coll, pk));
        } else if !coll.composite_key.is_empty() {
            props.push(format!(
                "{} AS {}",
                key_text(coll),
                quote_ident(ID_PROPERTY)
            ));
        }
        props.push(format!("md5(t::text) AS {}", quote_ident(ETAG_PROPERTY)));
    }
    let last_modified = match coll.last_modified {
        // Cast: the column may be a domain over timestamptz.
        Some(ci) => format!("{}::timestamptz", col(coll, ci)),
        None => "NULL::timestamptz".into(),
    };
    format!(
        "json_build_object('type', 'Feature', {id}{geometry_members}, \
         'properties', (SELECT to_json(p) FROM (SELECT {props}) AS p))::text, \
         md5(t::text), {last_modified}",
        props = props.join(", "),
    )
}

/// Column `ci` of the row `t` as a property. A floating-point or numeric
/// value that is a whole number is written as a real (`1.0`, not `1`):
/// clients that type fields from the first features read (QGIS through
/// GDAL) would take the column for an integer and lose later fractions.
/// Written with the type's own text, as `to_json` writes it (NaN and the
/// infinities as strings), and not with `to_json`: Citus refuses a stable
/// function in the FROM-less subquery that gathers the properties.
fn property(coll: &Collection, ci: usize) -> String {
    let c = col(coll, ci);
    match coll.columns[ci].ty {
        ColumnType::Scalar(ScalarType::Float4 | ScalarType::Float8 | ScalarType::Numeric) => {
            format!(
                "CASE WHEN {c}::text ~ '^-?[0-9]+$' THEN ({c}::text || '.0')::json \
                 WHEN {c}::text IN ('NaN', 'Infinity', '-Infinity') THEN ('\"' || {c}::text || '\"')::json \
                 ELSE {c}::text::json END AS {}",
                quote_ident(&coll.columns[ci].name)
            )
        }
        _ => c,
    }
}

/// [`feature_columns`] of the feature as `encoding` has it.
pub fn feature_columns_as(coll: &Collection, crs: &Crs, encoding: Encoding) -> String {
    feature_columns_but(coll, crs, encoding, Shown::default())
}

/// [`feature_columns_as`] with the properties `shown` says.
fn feature_columns_but(
    coll: &Collection,
    crs: &Crs,
    encoding: Encoding,
    shown: Shown<'_>,
) -> String {
    match encoding {
        Encoding::GeoJson => feature_columns(coll, crs, shown),
        Encoding::JsonFg => jsonfg::feature_columns(coll, crs, shown),
    }
}

/// `SELECT <feature columns> FROM <table> AS t`, features as `encoding` has them.
pub fn select_features(coll: &Collection, crs: &Crs, encoding: Encoding) -> String {
    select_features_but(coll, crs, encoding, Shown::default())
}

/// [`select_features`] with the properties `shown` says.
pub fn select_features_but(
    coll: &Collection,
    crs: &Crs,
    encoding: Encoding,
    shown: Shown<'_>,
) -> String {
    let columns = feature_columns_but(coll, crs, encoding, shown);
    format!("SELECT {columns} FROM {} AS t", coll.qualified_name())
}

/// The feature keyed `$1` in `crs`; `None` for a table without a key.
pub fn select_item(coll: &Collection, crs: &Crs, encoding: Encoding) -> Option<String> {
    let key = key_equals(coll, 1)?;
    Some(format!(
        "{} WHERE {key}",
        select_features(coll, crs, encoding)
    ))
}

/// The feature id of row `t` as text: its key, or a composite key's
/// values joined as [`crate::catalog::key`] says.
pub fn key_text(coll: &Collection) -> String {
    key_text_of(coll, |ci| col(coll, ci))
}

/// [`key_text`] with the columns named `column(ci)` (unqualified in an
/// INSERT's `RETURNING`).
pub fn key_text_of(coll: &Collection, column: impl Fn(usize) -> String) -> String {
    match coll.primary_key {
        Some(pk) => format!("{}::text", column(pk)),
        None => {
            let parts: Vec<String> = (coll.composite_key.iter())
                .map(|&ci| match escapes(&coll.columns[ci]) {
                    true => key::ESCAPED
                        .iter()
                        .fold(format!("{}::text", column(ci)), |t, &c| {
                            format!("replace({t}, chr({}), '{}')", u32::from(c), key::escape(c))
                        }),
                    false => format!("{}::text", column(ci)),
                })
                .collect();
            // `||`, not concat_ws, which is stable: Citus allows only
            // immutable functions in RETURNING.
            format!("({})", parts.join(" || ',' || "))
        }
    }
}

/// Whether a column of a composite key may hold characters its part of an
/// id escapes ([`key::ESCAPED`]): all but integers and uuids, whose text
/// never does (and whose SQL is kept short).
fn escapes(column: &Column) -> bool {
    !column.is_integer() && column.ty != ColumnType::Scalar(ScalarType::Uuid)
}

/// `t."key" = $n::text::<key type>`, compared as [`column_equals`] does, so
/// its index is used; for a composite key, each of its columns equal to its
/// part of the id `$n` ([`crate::catalog::key::parts`]), and the id of as
/// many parts. `None` for a table without a key.
pub fn key_equals(coll: &Collection, n: usize) -> Option<String> {
    key_matches(coll, &format!("${n}::text"))
}

/// [`key_equals`] of the id the text expression `id` holds (`$1::text`, `u.id`).
pub fn key_matches(coll: &Collection, id: &str) -> Option<String> {
    if let Some(pk) = coll.primary_key {
        return Some(column_matches(coll, pk, id));
    }
    if !coll.has_key() {
        return None;
    }
    let mut terms: Vec<String> = (coll.composite_key.iter().enumerate())
        .map(|(i, &ci)| {
            let part = format!("split_part({id}, ',', {})", i + 1);
            let value = match escapes(&coll.columns[ci]) {
                true => key::ESCAPED.iter().rev().fold(part, |t, &c| {
                    format!("replace({t}, '{}', chr({}))", key::escape(c), u32::from(c))
                }),
                false => part,
            };
            column_matches(coll, ci, &value)
        })
        .collect();
    terms.push(format!(
        "cardinality(string_to_array({id}, ',')) = {}",
        coll.composite_key.len()
    ));
    Some(terms.join(" AND "))
}

/// `t."column" = $n::text::<type>`, the type without its modifier: a cast to
/// `varchar(10)` or `numeric(5,2)` would truncate or round the value, so
/// that `abcdefghijXYZ` found `abcdefghij`. The index still serves.
pub fn column_equals(coll: &Collection, ci: usize, n: usize) -> String {
    column_matches(coll, ci, &format!("${n}::text"))
}

/// [`column_equals`] of the text expression `text`.
fn column_matches(coll: &Collection, ci: usize, text: &str) -> String {
    format!(
        "{} = {text}::{}",
        col(coll, ci),
        coll.columns[ci].exact_type_sql
    )
}

/// The feature's `time` (its temporal columns, not all NULL; NULL is an
/// open end of an interval) meets the span from `$n` to `$n+1` (UTC
/// timestamps; NULL: open). A date covers its day.
pub fn time_meets(coll: &Collection, t: Temporal, n: usize) -> String {
    let utc = |ci: usize, last: bool| {
        let c = col(coll, ci);
        match coll.columns[ci].ty {
            ColumnType::Scalar(ScalarType::Date) if last => {
                format!("({c}::date::timestamp + interval '1 day' - interval '1 microsecond')")
            }
            ColumnType::Scalar(ScalarType::Date) => format!("{c}::date::timestamp"),
            ColumnType::Scalar(ScalarType::Timestamp) => format!("{c}::timestamp"),
            _ => format!("({c}::timestamptz AT TIME ZONE 'UTC')"),
        }
    };
    let first = utc(t.start, false);
    let last = utc(t.end.unwrap_or(t.start), true);
    let (from, to) = (format!("${n}::timestamp"), format!("${}::timestamp", n + 1));
    format!(
        "({first} IS NOT NULL OR {last} IS NOT NULL) \
         AND ({from} IS NULL OR {last} IS NULL OR {last} >= {from}) \
         AND ({to} IS NULL OR {first} IS NULL OR {first} <= {to})"
    )
}

/// The SRID of `coll`'s geometry column when a box in longitude and
/// latitude (`srid` 4326) is compared with its geometries by its
/// [`reach`](super::reach) there: a geometry column of another, known SRID.
/// A box in a projected CRS is transformed to the column's by its corners.
pub fn bbox_reach_srid(coll: &Collection, srid: i32) -> Option<i32> {
    let gc = coll.geometry_column();
    let projected = !gc.geography && gc.srid != 0 && gc.srid != WGS84_SRID;
    (srid == WGS84_SRID && projected).then_some(gc.srid)
}

/// The values a bbox condition with `reach` binds after the box's own
/// ([`bbox_intersects`]): the reach's extent for points, its step for others.
pub fn bbox_reach_values(coll: &Collection, reach: &Reach) -> Vec<f64> {
    match points_only(coll.geometry_column()) {
        true => reach.extent.to_vec(),
        false => vec![reach.step],
    }
}

/// The feature geometry intersects the box `$n..$n+3` (min x, min y, max x,
/// max y) in SRID `srid`; with `true`, the condition also takes the box's
/// [`covering_points`](super::cover::covering_points) as `$n+4`. With
/// `reached` (a column of [`bbox_reach_srid`] and the box's
/// [`bbox_reach_values`] from `$n+4` on), the index narrows the rows by the
/// box's image in the column's SRID.
pub fn bbox_intersects(coll: &Collection, n: usize, srid: i32, reached: bool) -> (String, bool) {
    let g = col(coll, coll.geometry);
    let gc = coll.geometry_column();
    let env = format!(
        "ST_MakeEnvelope(${n}::float8, ${}::float8, ${}::float8, ${}::float8, {srid})",
        n + 1,
        n + 2,
        n + 3
    );
    let env_in = |s: i32| match s == srid {
        true => env.clone(),
        false => format!("ST_Transform({env}, {s})"),
    };
    // ST_Intersects uses the spatial index and, unlike `&&`, compares the
    // geometry itself rather than its bounding box.
    match (gc.geography, gc.srid) {
        // Compared in longitude/latitude, as the bbox means: as geography the
        // envelope's edges would be great circles. For points, `&&` with the
        // covering points lets the geography index narrow the rows without
        // dropping any. Not for lines and polygons: their index boxes cover
        // great-circle edges, and a long edge's lon/lat path can leave them.
        (true, s) if s == srid && s == WGS84_SRID && points_only(gc) => (
            format!(
                "({g} && ${}::text::geography AND ST_Intersects({g}::geometry, {env}))",
                n + 4
            ),
            true,
        ),
        (true, s) => (
            format!("ST_Intersects({g}::geometry, {})", env_in(s)),
            false,
        ),
        // Unconstrained columns may mix SRIDs, which ST_Intersects refuses.
        (false, 0) => (format!("{g} && {env}"), false),
        (false, s) if bbox_reach_srid(coll, srid).is_none() => {
            (format!("ST_Intersects({g}, {})", env_in(s)), false)
        }
        // A point is in the box in the box's own CRS, where its edges are
        // straight, the index narrowing by its reach's extent. A line or
        // polygon meets the box's outline as the reach transformed it, its
        // curved edges followed, in the column's CRS, where the line's own
        // edges are straight. Without a reach (the box past the CRS's
        // domain), each row is compared in the box's CRS.
        (false, s) => {
            let exact = format!("ST_Intersects(ST_Transform({g}, {srid}), {env})");
            let condition = match (reached, points_only(gc)) {
                (false, _) => exact,
                (true, true) => format!(
                    "({g} && ST_MakeEnvelope(${}::float8, ${}::float8, ${}::float8, ${}::float8, {s}) AND {exact})",
                    n + 4,
                    n + 5,
                    n + 6,
                    n + 7
                ),
                (true, false) => format!(
                    "ST_Intersects({g}, ST_Transform(ST_Segmentize({env}, ${}::float8), {s}))",
                    n + 4
                ),
            };
            (condition, false)
        }
    }
}

/// Whether the column holds only points (then its index boxes are the points').
fn points_only(gc: &GeometryColumn) -> bool {
    matches!(
        gc.kind,
        Some(GeometryType::Point | GeometryType::MultiPoint)
    )
}

/// Tables of at least this many rows (as PostgreSQL estimates) keep the
/// estimated extent after the service's writes: a scan would cost seconds.
pub const EXACT_EXTENT_ROWS: u32 = 1_000_000;

/// The table's extent in CRS84: estimated from statistics, computed when
/// there are none, or when `exact` (the service has written the table, and
/// the statistics may not know it yet) and the table has fewer than
/// [`EXACT_EXTENT_ROWS`] rows. Geometry columns take (schema, table,
/// column) as `$1..$3`.
pub fn extent(coll: &Collection, exact: bool) -> String {
    let gc = coll.geometry_column();
    let name = quote_ident(&coll.columns[coll.geometry].name);
    let srid = if gc.geography || gc.srid == 0 {
        4326
    } else {
        gc.srid
    };
    let computed = format!(
        "(SELECT ST_Extent({name}::geometry) FROM {})",
        coll.qualified_name()
    );
    let estimated = match (gc.geography, exact) {
        // Statistics of geography columns are not boxes in degrees.
        (true, _) => "NULL::box2d".to_owned(),
        (false, false) => "ST_EstimatedExtent($1::text, $2::text, $3::text)".to_owned(),
        (false, true) => format!(
            "CASE WHEN (SELECT c.reltuples FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace \
                         WHERE n.nspname = $1::text AND c.relname = $2::text) >= {EXACT_EXTENT_ROWS} \
                  THEN ST_EstimatedExtent($1::text, $2::text, $3::text) END"
        ),
    };
    format!(
        "SELECT ST_XMin(e), ST_YMin(e), ST_XMax(e), ST_YMax(e) FROM \
         (SELECT ST_Transform(ST_SetSRID(COALESCE({estimated}, {computed})::geometry, {srid}), 4326) AS e) AS x"
    )
}
