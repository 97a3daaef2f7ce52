//! Where a bounding box in longitude and latitude lies in a column's
//! projected CRS: the extent of its image, by which the spatial index narrows
//! the rows before each one is compared with the box. Its corners alone would
//! not do: the image's edges curve (a box bulges on Lambert-93), and a box
//! reaching past the CRS's domain (the whole world, on UTM) cannot be
//! transformed, or comes back as something else. So the box's outline, and a
//! grid of points inside it (where the CRS could have a singular point), are
//! transformed and back again; when that fails or does not return them, the
//! index does not narrow the rows, and every row is compared with the box.

use deadpool_postgres::ClientWrapper;

use crate::db::statement::{prepare, Naming};

/// Points each edge of the box is transformed at, and the share of the
/// image's size added on each side for what lies between them.
const POINTS_PER_EDGE: f64 = 32.0;

/// The outline of the box `$1..$4` in SRID `$5`, `$7` apart, and a grid of
/// 7 × 7 points inside it, transformed to SRID `$6`: the image's extent, and
/// how far the image transformed back lies from them.
const IMAGE: &str = "SELECT ST_XMin(i.t)::float8, ST_YMin(i.t)::float8, ST_XMax(i.t)::float8, ST_YMax(i.t)::float8, \
       ST_HausdorffDistance(ST_Transform(i.t, $5::int4), i.b)::float8 \
  FROM (SELECT o.b, ST_Transform(o.b, $6::int4) AS t \
          FROM (SELECT ST_Collect(ST_Segmentize(ST_MakeEnvelope($1::float8, $2::float8, $3::float8, $4::float8, $5::int4), $7::float8), \
                                  (SELECT ST_Collect(ST_SetSRID(ST_MakePoint($1::float8 + ($3::float8 - $1::float8) * gx / 8, \
                                                                             $2::float8 + ($4::float8 - $2::float8) * gy / 8), $5::int4)) \
                                     FROM generate_series(1, 7) AS gx, generate_series(1, 7) AS gy)) AS b) AS o) AS i";

/// Where a box lies in another CRS.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reach {
    /// An extent there that holds every point of the box.
    pub extent: [f64; 4],
    /// How far apart its outline was transformed at (in the box's units):
    /// the same outline transformed again cannot fail.
    pub step: f64,
}

/// Where `bbox` (min x, min y, max x, max y in SRID `from`) lies in SRID
/// `to`, or `None` when PostGIS cannot tell it.
pub async fn reach_of(
    client: &ClientWrapper,
    naming: Naming,
    bbox: [f64; 4],
    from: i32,
    to: i32,
) -> Option<Reach> {
    let [x0, y0, x1, y1] = bbox;
    let size = (x1 - x0).max(y1 - y0);
    let step = (size / POINTS_PER_EDGE).max(1e-9);
    crate::db::round_trips::round_trip();
    let statement = prepare(client, IMAGE, naming).await.ok()?;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
        [&x0, &y0, &x1, &y1, &from, &to, &step];
    // A box past the CRS's domain is an error of the transformation: no extent.
    let row = statement.query_one(client, &params).await.ok()?;
    let image: [Option<f64>; 5] = std::array::from_fn(|i| row.get(i));
    let extent = widened(image, size)?;
    Some(Reach { extent, step })
}

/// The image's extent widened by its share for the points between those
/// transformed, if the outline came back to within a millionth of the
/// box's size and every number is finite.
fn widened(image: [Option<f64>; 5], size: f64) -> Option<[f64; 4]> {
    let [Some(x0), Some(y0), Some(x1), Some(y1), Some(back)] = image else {
        return None;
    };
    let finite = [x0, y0, x1, y1, back].iter().all(|v| v.is_finite());
    if !finite || back > (size * 1e-6).max(1e-9) {
        return None;
    }
    let margin = (x1 - x0).max(y1 - y0) / POINTS_PER_EDGE;
    Some([x0 - margin, y0 - margin, x1 + margin, y1 + margin])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_that_came_back_is_widened() {
        let image = [Some(0.0), Some(10.0), Some(320.0), Some(330.0), Some(1e-10)];
        assert_eq!(widened(image, 2.0), Some([-10.0, 0.0, 330.0, 340.0]));
    }

    #[test]
    fn one_that_did_not_or_is_not_finite_is_none() {
        let away = [Some(0.0), Some(0.0), Some(1.0), Some(1.0), Some(0.5)];
        assert_eq!(widened(away, 2.0), None);
        let infinite = [
            Some(0.0),
            Some(0.0),
            Some(f64::INFINITY),
            Some(1.0),
            Some(0.0),
        ];
        assert_eq!(widened(infinite, 2.0), None);
        let missing = [None, Some(0.0), Some(1.0), Some(1.0), Some(0.0)];
        assert_eq!(widened(missing, 2.0), None);
        let nan = [Some(0.0), Some(0.0), Some(1.0), Some(1.0), Some(f64::NAN)];
        assert_eq!(widened(nan, 2.0), None);
    }
}
