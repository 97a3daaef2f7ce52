//! The query parameters of `GET /collections/{id}/items`, checked against the collection.

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime};

use super::filter::{Filter, Lang};
use super::Encoding;
use crate::catalog::{Collection, ColumnType, ScalarType};
use crate::error::{Error, ErrorKind};
use crate::geometry::{crs, Crs, WGS84_SRID};

/// Items per page when `limit` is not given.
pub const DEFAULT_LIMIT: i64 = 10;
/// The largest page; a larger `limit` is lowered to it (OGC API - Features 7.15.4).
pub const MAX_LIMIT: i64 = 10_000;

/// A box: min x, min y, max x, max y (easting/longitude first) in SRID `srid`.
#[derive(Debug, Clone, PartialEq)]
pub struct Bbox {
    /// The corners, x first.
    pub coords: [f64; 4],
    /// The SRID of `bbox-crs`.
    pub srid: i32,
    /// `bbox` and `bbox-crs` as given, for paging links.
    pub given: Vec<(&'static str, String)>,
}

/// A checked items query.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemsQuery {
    /// The CRS features are returned in (`crs`).
    pub crs: Crs,
    /// Page size.
    pub limit: i64,
    /// Features skipped.
    pub offset: i64,
    /// Only features whose geometry intersects this box.
    pub bbox: Option<Bbox>,
    /// Property equality filters: (column index, value as text).
    pub filters: Vec<(usize, String)>,
    /// `datetime`: only features whose `time` (the collection's temporal
    /// columns) meets it; in a collection without one it matches every
    /// feature (OGC API - Features 7.15.6).
    pub datetime: Option<Datetime>,
    /// `filter` (CQL2, with `filter-lang` and `filter-crs`): only the
    /// features that match it.
    pub filter: Option<Filter>,
    /// `sortby`: the columns features are ordered by, each descending or
    /// not, before the key; as given, for paging links.
    pub sortby: Option<(Vec<(usize, bool)>, String)>,
    /// `properties`: the only properties shown; as given, for paging links.
    pub properties: Option<(Vec<usize>, String)>,
    /// How the features are encoded (the HTTP layer's choice).
    pub encoding: Encoding,
    /// `with-etags=true`: properties carry the key and the ETag.
    pub with_etags: bool,
}

/// A checked `datetime`: an instant or an interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Datetime {
    /// As given, for paging links.
    pub given: String,
    /// Its first and last instant in UTC (a date covers its day); `None`
    /// for an open end.
    pub bounds: [Option<NaiveDateTime>; 2],
}

fn bad(param: &str, detail: impl Into<String>) -> Error {
    Error::new(
        ErrorKind::InvalidParameter,
        format!("query parameter '{param}': {}", detail.into()),
    )
}

/// Check that `f`, when given, asks for JSON.
pub fn check_format(value: &str) -> Result<(), Error> {
    match value {
        "json" | "geojson" => Ok(()),
        other => Err(bad("f", format!("'{other}' is not offered; use f=json"))),
    }
}

/// `with-etags=true`: each feature's properties also carry its key (under
/// the key column's name; a key of several columns, whose columns are
/// properties already, its id under [`ID_PROPERTY`]) and its ETag (under
/// [`ETAG_PROPERTY`]), for a
/// client that keeps features to edit and reads them through a provider
/// it does not control (the QGIS plugin, through QGIS's OGC API - Features
/// provider, which takes a service URL's query to every read).
pub const WITH_ETAGS: &str = "with-etags";

/// The property that says a feature's ETag, with `with-etags=true`.
pub const ETAG_PROPERTY: &str = "featurepipe:etag";

/// The property that says the id of a feature keyed by several columns,
/// with `with-etags=true`.
pub const ID_PROPERTY: &str = "featurepipe:id";

/// The value of `with-etags`.
pub fn with_etags(value: &str) -> Result<bool, Error> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(bad(WITH_ETAGS, format!("'{other}' is not true or false"))),
    }
}

/// Reject any parameter but `f` (for resources that take no query), and
/// `with-etags`, which says nothing where no features are read: a client
/// puts it in the service's URL, and takes that to every resource.
pub fn only_format(pairs: &[(String, String)]) -> Result<(), Error> {
    for (name, value) in pairs {
        match name.as_str() {
            "f" => check_format(value)?,
            WITH_ETAGS => drop(with_etags(value)?),
            other => return Err(unknown_parameter(other, "f")),
        }
    }
    Ok(())
}

/// 400 for a parameter this resource does not take.
pub fn unknown_parameter(name: &str, known: &str) -> Error {
    bad(
        name,
        format!("unknown parameter (this resource takes {known})"),
    )
}

impl ItemsQuery {
    /// Check the query string's pairs against `coll`; any unknown or repeated
    /// name is a 400. `f` is the HTTP layer's (which representation), and
    /// taken out before.
    pub fn parse(pairs: &[(String, String)], coll: &Collection) -> Result<Self, Error> {
        let mut bbox = None;
        let mut bbox_crs = None;
        let mut query = ItemsQuery {
            crs: coll.crs[0].clone(),
            limit: DEFAULT_LIMIT,
            offset: 0,
            bbox: None,
            filters: Vec::new(),
            datetime: None,
            filter: None,
            sortby: None,
            properties: None,
            encoding: Encoding::GeoJson,
            with_etags: false,
        };
        let mut filter = FilterParams::default();
        for (i, (name, value)) in pairs.iter().enumerate() {
            if pairs[..i].iter().any(|(n, _)| n == name) {
                return Err(bad(name, "given more than once"));
            }
            if filter.take(coll, name, value)? {
                continue;
            }
            match name.as_str() {
                "limit" => {
                    let n: i64 = value
                        .parse()
                        .map_err(|_| bad(name, format!("'{value}' is not an integer")))?;
                    if n < 1 {
                        return Err(bad(name, "must be at least 1"));
                    }
                    query.limit = n.min(MAX_LIMIT);
                }
                "offset" => {
                    query.offset = value
                        .parse()
                        .ok()
                        .filter(|n: &i64| *n >= 0)
                        .ok_or_else(|| bad(name, format!("'{value}' is not a whole number")))?;
                }
                "bbox" => bbox = Some(parse_bbox(value)?),
                "bbox-crs" => bbox_crs = Some(offered_crs(coll, name, value)?),
                "crs" => query.crs = offered_crs(coll, name, value)?.clone(),
                "datetime" => query.datetime = Some(checked_datetime(value)?),
                "sortby" => query.sortby = Some((sortby(coll, value)?, value.clone())),
                "properties" => {
                    query.properties = Some((properties(coll, value)?, value.clone()))
                }
                WITH_ETAGS => query.with_etags = with_etags(value)?,
                other => match coll.column_index(other) {
                    Some(ci) if filterable(coll, ci) => query.filters.push((ci, value.clone())),
                    _ => return Err(unknown_parameter(
                        other,
                        "limit, offset, bbox, bbox-crs, crs, datetime, filter, filter-lang, filter-crs, sortby, properties, with-etags, f and its properties of simple types",
                    )),
                },
            }
        }
        query.bbox = match (bbox, bbox_crs) {
            (Some(b), crs) => {
                let mut checked = checked_bbox(b, crs.unwrap_or(&coll.crs[0]))?;
                for name in ["bbox", "bbox-crs"] {
                    if let Some((_, v)) = pairs.iter().find(|(n, _)| n == name) {
                        checked.given.push((name, v.clone()));
                    }
                }
                Some(checked)
            }
            (None, Some(_)) => return Err(bad("bbox-crs", "is given without bbox")),
            (None, None) => None,
        };
        query.filter = filter.finish(coll)?;
        Ok(query)
    }

    /// The query string of this query at another offset (for paging links).
    pub fn at_offset(&self, coll: &Collection, offset: i64) -> String {
        let mut parts = vec![format!("limit={}", self.limit), format!("offset={offset}")];
        // The box as given: its axis order is its CRS's.
        if let Some(b) = &self.bbox {
            for (name, value) in &b.given {
                parts.push(format!("{name}={}", percent_encode(value)));
            }
        }
        if let Some(datetime) = &self.datetime {
            parts.push(format!("datetime={}", percent_encode(&datetime.given)));
        }
        if let Some(filter) = &self.filter {
            parts.push(format!("filter={}", percent_encode(&filter.given)));
            if filter.lang != Lang::Text {
                parts.push(format!("filter-lang={}", filter.lang.name()));
            }
            if let Some(crs) = &filter.crs {
                parts.push(format!("filter-crs={}", percent_encode(crs)));
            }
        }
        let sortby = self.sortby.as_ref().map(|(_, given)| ("sortby", given));
        let properties = self
            .properties
            .as_ref()
            .map(|(_, given)| ("properties", given));
        for (name, given) in sortby.into_iter().chain(properties) {
            parts.push(format!("{name}={}", percent_encode(given)));
        }
        if self.crs.uri != crs::CRS84 {
            parts.push(format!("crs={}", percent_encode(&self.crs.uri)));
        }
        if self.with_etags {
            parts.push(format!("{WITH_ETAGS}=true"));
        }
        for (ci, value) in &self.filters {
            parts.push(format!(
                "{}={}",
                percent_encode(&coll.columns[*ci].name),
                percent_encode(value)
            ));
        }
        parts.join("&")
    }
}

/// `filter`, `filter-lang` and `filter-crs`, as a query string gives them.
#[derive(Default)]
pub struct FilterParams<'q> {
    filter: Option<&'q str>,
    lang: Option<Lang>,
    crs: Option<(&'q str, Crs)>,
}

impl<'q> FilterParams<'q> {
    /// Take the pair if it is one of the three (then `true`).
    pub fn take(&mut self, coll: &Collection, name: &str, value: &'q str) -> Result<bool, Error> {
        match name {
            "filter" => self.filter = Some(value),
            "filter-lang" => self.lang = Some(Lang::named(value)?),
            "filter-crs" => self.crs = Some((value, offered_crs(coll, name, value)?.clone())),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The filter they give, checked against `coll`, if they give one.
    pub fn finish(self, coll: &Collection) -> Result<Option<Filter>, Error> {
        let given = match (self.filter, self.lang.is_some() || self.crs.is_some()) {
            (Some(given), _) => given,
            (None, true) => {
                return Err(bad(
                    "filter",
                    "filter-lang and filter-crs are given without it",
                ))
            }
            (None, false) => return Ok(None),
        };
        let crs = self.crs.as_ref().map_or(&coll.crs[0], |(_, crs)| crs);
        let given_crs = self.crs.as_ref().map(|(given, _)| given.to_string());
        Filter::parse(coll, given, self.lang.unwrap_or(Lang::Text), crs, given_crs).map(Some)
    }
}

/// `sortby`: comma-separated sortables (the queryables but the geometry),
/// each `-` for descending, `+` or nothing for ascending.
fn sortby(coll: &Collection, value: &str) -> Result<Vec<(usize, bool)>, Error> {
    value
        .split(',')
        .map(|term| {
            let term = term.trim();
            let (name, descending) = match term.as_bytes().first() {
                Some(b'-') => (&term[1..], true),
                Some(b'+') => (&term[1..], false),
                _ => (term, false),
            };
            let ci = coll
                .column_index(name)
                .filter(|&ci| ci != coll.geometry && super::filter::queryables(coll).any(|q| q == ci))
                .ok_or_else(|| bad("sortby", format!("'{name}' is not a sortable of this collection (its queryables but the geometry)")))?;
            Ok((ci, descending))
        })
        .collect()
}

/// `properties`: comma-separated published properties; none when empty.
fn properties(coll: &Collection, value: &str) -> Result<Vec<usize>, Error> {
    value
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| {
            coll.column_index(name)
                .filter(|&ci| super::sql::property_columns(coll).any(|p| p == ci))
                .ok_or_else(|| {
                    bad(
                        "properties",
                        format!("'{name}' is not a property of this collection"),
                    )
                })
        })
        .collect()
}

/// Published properties of scalar types can be filtered on by equality
/// (`json` has no equality operator).
fn filterable(coll: &Collection, ci: usize) -> bool {
    ci != coll.geometry
        && matches!(coll.columns[ci].ty, ColumnType::Scalar(t) if t != ScalarType::Json)
}

/// An RFC 3339 date-time, or an interval `start/end` where either may be `..` or empty.
fn checked_datetime(value: &str) -> Result<Datetime, Error> {
    let bounds = datetime_bounds(value).ok_or_else(|| {
        bad(
            "datetime",
            format!("'{value}' is not an RFC 3339 date-time or interval"),
        )
    })?;
    Ok(Datetime {
        given: value.to_owned(),
        bounds,
    })
}

/// The first and last instant (UTC) of an RFC 3339 date-time, date, or
/// interval of them (`..` or nothing: open); `None` when it is none of these.
fn datetime_bounds(value: &str) -> Option<[Option<NaiveDateTime>; 2]> {
    let instant = |s: &str| {
        if let Ok(t) = DateTime::parse_from_rfc3339(s) {
            return Some([t.naive_utc(); 2]);
        }
        let day = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
        Some([
            day.and_time(NaiveTime::MIN),
            day.and_hms_micro_opt(23, 59, 59, 999_999)?,
        ])
    };
    let open = |s: &str| s.is_empty() || s == "..";
    match value.split_once('/') {
        Some((start, end)) => {
            let start = match open(start) {
                true => None,
                false => Some(instant(start)?[0]),
            };
            let end = match open(end) {
                true => None,
                false => Some(instant(end)?[1]),
            };
            Some([start, end])
        }
        None => instant(value).map(|[first, last]| [Some(first), Some(last)]),
    }
}

/// The offered CRS `value` names, else a 400 listing those offered.
pub fn offered_crs<'c>(coll: &'c Collection, param: &str, value: &str) -> Result<&'c Crs, Error> {
    coll.find_crs(value).ok_or_else(|| {
        let offered: Vec<&str> = coll.crs.iter().map(|c| c.uri.as_str()).collect();
        bad(
            param,
            format!(
                "'{value}' is not offered here; use one of {}",
                offered.join(", ")
            ),
        )
    })
}

/// `minx,miny,maxx,maxy` or `minx,miny,minz,maxx,maxy,maxz`, in the axis order of its CRS.
fn parse_bbox(value: &str) -> Result<[f64; 4], Error> {
    let numbers: Vec<f64> = value
        .split(',')
        .map(|s| s.trim().parse::<f64>().ok().filter(|n| n.is_finite()))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("bbox", format!("'{value}' is not a list of numbers")))?;
    match numbers[..] {
        [a0, b0, a1, b1] | [a0, b0, _, a1, b1, _] => Ok([a0, b0, a1, b1]),
        _ => Err(bad("bbox", "takes 4 or 6 numbers")),
    }
}

/// The box with x first; in degrees, its latitudes in range and south below north.
fn checked_bbox(b: [f64; 4], crs: &Crs) -> Result<Bbox, Error> {
    let coords = if crs.lat_first {
        [b[1], b[0], b[3], b[2]]
    } else {
        b
    };
    let [x0, y0, x1, y1] = coords;
    if y0 > y1 {
        return Err(bad("bbox", "the lower corner is above the upper corner"));
    }
    let degrees = crs.srid == WGS84_SRID;
    if degrees && (x0.abs() > 180.0 || x1.abs() > 180.0 || y0.abs() > 90.0 || y1.abs() > 90.0) {
        return Err(bad(
            "bbox",
            "longitudes lie in [-180, 180] and latitudes in [-90, 90]",
        ));
    }
    if !degrees && x0 > x1 {
        return Err(bad("bbox", "the lower corner is east of the upper corner"));
    }
    Ok(Bbox {
        coords,
        srid: crs.srid,
        given: Vec::new(),
    })
}

impl Bbox {
    /// The box as one or two boxes that do not cross the antimeridian.
    pub fn parts(&self) -> Vec<[f64; 4]> {
        let [x0, y0, x1, y1] = self.coords;
        if x0 <= x1 {
            vec![self.coords]
        } else {
            vec![[x0, y0, 180.0, y1], [-180.0, y0, x1, y1]]
        }
    }
}

/// Percent-encode text for a URL path segment or query value.
pub fn percent_encode(s: &str) -> String {
    encoded(s, b"-._~")
}

/// Percent-encode a feature id for the last segment of its URL, leaving
/// what a path segment may hold as it is (RFC 3986 `pchar`: `,`, `;`, `=`,
/// `:`, `@`…): QGIS takes a new feature's id from its `Location` as it
/// stands, and took `acme%2C4` for another feature than `acme,4`.
pub fn path_segment(s: &str) -> String {
    encoded(s, b"-._~!$&'()*+,;=:@")
}

/// `s` with every byte but ASCII letters, digits and `kept` percent-encoded.
fn encoded(s: &str, kept: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || kept.contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_id_keeps_in_its_path_segment_what_a_segment_may_hold() {
        assert_eq!(super::path_segment("acme,4"), "acme,4");
        assert_eq!(super::path_segment("a~2Cb,3"), "a~2Cb,3");
        assert_eq!(super::path_segment("a b/c?d#e%f"), "a%20b%2Fc%3Fd%23e%25f");
        assert_eq!(super::percent_encode("acme,4"), "acme%2C4");
    }

    use super::*;

    #[test]
    fn bbox_forms() {
        let crs84 = Crs::crs84();
        let check = |v: &str| parse_bbox(v).and_then(|b| checked_bbox(b, &crs84));
        assert_eq!(check("1,2,3,4").unwrap().coords, [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(check("1,2,0,3,4,9").unwrap().coords, [1.0, 2.0, 3.0, 4.0]);
        assert!(check("1,2,3").is_err());
        assert!(check("1,x,3,4").is_err());
        assert!(check("0,10,1,5").is_err());
        assert!(check("0,-91,1,5").is_err());
        let across = check("170,0,-170,1").unwrap();
        assert_eq!(
            across.parts(),
            vec![[170.0, 0.0, 180.0, 1.0], [-180.0, 0.0, -170.0, 1.0]]
        );
        let epsg4326 = Crs {
            uri: crs::epsg_uri(4326),
            srid: 4326,
            lat_first: true,
        };
        let b = checked_bbox([2.0, 1.0, 4.0, 3.0], &epsg4326).unwrap();
        assert_eq!(
            b.coords,
            [1.0, 2.0, 3.0, 4.0],
            "lat/lon given, lon/lat kept"
        );
    }

    #[test]
    fn encoding() {
        assert_eq!(percent_encode("a b/ü"), "a%20b%2F%C3%BC");
    }
}
