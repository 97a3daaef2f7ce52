//! Coordinate reference systems named by OGC API requests (Part 2): their
//! URIs, SRIDs and axis order.

use std::fmt;

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

    /// The EPSG CRS `code` with the axis order `srtext` (its `spatial_ref_sys` WKT) implies.
    ///
    /// EPSG's geographic CRSs are latitude first; projected ones follow their
    /// AXIS entries, easting first when the WKT has none.
    pub fn epsg(code: i32, srtext: &str) -> Crs {
        // A projected CRS's own axes follow its PROJECTION; earlier ones are its base CRS's.
        let own_axes = srtext.rsplit("PROJECTION[").next().unwrap_or(srtext);
        let lat_first = srtext.starts_with("GEOGCS")
            || (srtext.starts_with("PROJCS")
                && own_axes
                    .split("AXIS[")
                    .nth(1)
                    .is_some_and(|first| first.contains("NORTH") || first.contains("SOUTH")));
        Crs {
            uri: epsg_uri(code),
            srid: code,
            lat_first,
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
    fn axis_order_from_wkt() {
        assert!(Crs::epsg(4326, "GEOGCS[\"WGS 84\",DATUM[]]").lat_first);
        let utm = "PROJCS[\"x\",GEOGCS[\"y\",AXIS[\"Lat\",NORTH],AXIS[\"Lon\",EAST]],PROJECTION[\"tm\"],AXIS[\"Easting\",EAST],AXIS[\"Northing\",NORTH]]";
        assert!(!Crs::epsg(25832, utm).lat_first);
        let gk = "PROJCS[\"x\",PROJECTION[\"tm\"],AXIS[\"Northing\",NORTH],AXIS[\"Easting\",EAST]]";
        assert!(Crs::epsg(31467, gk).lat_first);
        assert!(!Crs::epsg(2193, "PROJCS[\"x\"]").lat_first);
        let no_own_axes = "PROJCS[\"x\",GEOGCS[\"y\",AXIS[\"Lat\",NORTH]],PROJECTION[\"tm\"]]";
        assert!(!Crs::epsg(2193, no_own_axes).lat_first);
    }
}
