//! A geography that lets the spatial index of a geography column of points
//! answer a `bbox` given in longitude/latitude, without ever leaving out a
//! point of it.
//!
//! The index of a geography column holds geocentric boxes: the range of
//! x = cos φ cos λ, y = cos φ sin λ and z = sin φ over each feature. The
//! region the bbox means, R = [λ0, λ1] × [φ0, φ1] (not crossing the
//! antimeridian), is not a polygon with great-circle edges; casting its
//! envelope to geography bends the parallels towards the pole, which is the
//! bug this replaces. Instead the query's box is the geocentric box of a
//! MULTIPOINT of points of R that includes, for each of ±x, ±y, ±z, a point
//! where it is greatest over R:
//!
//! - z = sin φ is greatest and least at φ1 and φ0;
//! - x and y are cos φ · cos(λ − a) for a ∈ {0°, 90°, 180°, −90°}. Over λ,
//!   cos(λ − a) is greatest at the λ of [λ0, λ1] nearest to a (an end, or a
//!   itself); for that λ, the product is greatest at the φ of [φ0, φ1]
//!   nearest to 0° when the cosine is positive, else at φ0 or φ1.
//!
//! So the points (λ, φ) with λ ∈ {λ0, λ1} ∪ ({−180°, −90°, 0°, 90°, 180°} ∩ R)
//! and φ ∈ {φ0, φ1} ∪ ({0°} ∩ R) contain every extreme. All lie in R, so
//! their box is exactly R's geocentric box: every point of R is inside it
//! (`&&` never drops a point in the bbox), and nothing wider is scanned.
//! PostGIS rounds index boxes outwards to float4, far more than the double
//! rounding of the sines and cosines. The exact test stays in lon/lat.
//!
//! Only for points: the index box of a line or polygon covers its edges as
//! great circles, while the lon/lat test follows them as straight lines in
//! degrees; a long edge between latitudes 60 can pass through a box at
//! latitude 60 that its great circle, bulging poleward, misses. Such columns
//! are filtered without this prefilter.

/// `SRID=4326;MULTIPOINT(…)`: points of the box `[λ0, φ0, λ1, φ1]` (degrees,
/// λ0 ≤ λ1) whose geocentric bounding box is the box's.
pub fn covering_points(b: [f64; 4]) -> String {
    let [lon0, lat0, lon1, lat1] = b;
    let mut lons = vec![lon0, lon1];
    lons.extend(
        [-180.0, -90.0, 0.0, 90.0, 180.0]
            .into_iter()
            .filter(|l| (lon0..=lon1).contains(l)),
    );
    let mut lats = vec![lat0, lat1];
    if (lat0..=lat1).contains(&0.0) {
        lats.push(0.0);
    }
    let points: Vec<String> = lons
        .iter()
        .flat_map(|lon| lats.iter().map(move |lat| format!("{lon} {lat}")))
        .collect();
    format!("SRID=4326;MULTIPOINT({})", points.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_box_away_from_the_axes_is_its_corners() {
        assert_eq!(
            covering_points([10.0, 60.0, 20.0, 61.0]),
            "SRID=4326;MULTIPOINT(10 60,10 61,20 60,20 61)"
        );
    }

    #[test]
    fn axis_meridians_and_the_equator_inside_are_added() {
        let wkt = covering_points([-180.0, -90.0, 180.0, 90.0]);
        for point in ["0 0", "90 0", "-90 0", "180 0", "-180 0", "0 90", "0 -90"] {
            assert!(wkt.contains(point), "{point} in {wkt}");
        }
    }
}
