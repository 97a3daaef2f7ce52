//! Coordinate reference systems named by OGC API requests (Part 2): their
//! URIs, SRIDs and axis order.

use std::fmt;

use super::northing_first::NORTHING_FIRST;

/// CRS84: longitude, latitude on WGS 84, the default of OGC API - Features.
pub const CRS84: &str = "http://www.opengis.net/def/crs/OGC/1.3/CRS84";

/// A CRS a collection offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crs {
    /// Its URI, e.g. `http://www.opengis.net/def/crs/EPSG/0/25832`.
    pub uri: String,
    /// The PostGIS SRID.
    pub srid: i32,
    /// The first axis is latitude or northing (EPSG:4326 is lat/lon; CRS84 is lon/lat).
    pub lat_first: bool,
}

impl Crs {
    /// CRS84 (lon/lat on WGS 84).
    pub fn crs84() -> Crs {
        Crs {
            uri: CRS84.to_owned(),
            srid: 4326,
            lat_first: false,
        }
    }

    /// The EPSG CRS `code`, with the axis order EPSG defines for it.
    pub fn epsg(code: i32) -> Crs {
        Crs {
            uri: epsg_uri(code),
            srid: code,
            lat_first: NORTHING_FIRST.binary_search(&code).is_ok(),
        }
    }
}

impl fmt::Display for Crs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.uri)
    }
}

/// The URI of EPSG CRS `code`.
pub fn epsg_uri(code: i32) -> String {
    format!("http://www.opengis.net/def/crs/EPSG/0/{code}")
}

/// A CRS reference from a request in its canonical URI form: angle brackets
/// (as in `Content-Crs`) and a safe CURIE `[EPSG:n]` are accepted, https too.
pub fn normalize(reference: &str) -> String {
    let r = reference.trim();
    let r = r
        .strip_prefix('<')
        .and_then(|r| r.strip_suffix('>'))
        .unwrap_or(r);
    let r = r
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(r);
    if let Some(code) = r.strip_prefix("EPSG:").and_then(|c| c.parse::<i32>().ok()) {
        return epsg_uri(code);
    }
    if r == "OGC:CRS84" {
        return CRS84.to_owned();
    }
    r.replacen("https://", "http://", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_normalise() {
        assert_eq!(normalize(&format!("<{CRS84}>")), CRS84);
        assert_eq!(normalize("[EPSG:25832]"), epsg_uri(25832));
        assert_eq!(
            normalize("https://www.opengis.net/def/crs/EPSG/0/4326"),
            epsg_uri(4326)
        );
    }

    #[test]
    fn axis_order_follows_epsg() {
        assert!(NORTHING_FIRST.windows(2).all(|w| w[0] < w[1]), "sorted");
        // Geographic: latitude first. Projected: by definition, mostly easting first.
        for (code, lat_first) in [
            (4326, true),
            (4258, true),
            (3857, false),
            (25832, false),
            (3035, true),
            (31467, true),
            (2193, true),
        ] {
            assert_eq!(Crs::epsg(code).lat_first, lat_first, "EPSG:{code}");
        }
    }
}
