//! The query parameters of `GET /collections/{id}/items`, checked against the collection.

use axum::http::StatusCode;

use crate::catalog::{Collection, ColumnType};
use crate::error::ApiError;

/// Items per page when `limit` is not given.
pub const DEFAULT_LIMIT: i64 = 10;
/// The largest page; a larger `limit` is lowered to it (OGC API - Features 7.15.4).
pub const MAX_LIMIT: i64 = 10_000;

/// A box in CRS84: min lon, min lat, max lon, max lat.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bbox(pub [f64; 4]);

/// A checked items query.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemsQuery {
    /// Page size.
    pub limit: i64,
    /// Features skipped.
    pub offset: i64,
    /// Only features whose geometry intersects this box.
    pub bbox: Option<Bbox>,
    /// Property equality filters: (column index, value as text).
    pub filters: Vec<(usize, String)>,
}

fn bad(param: &str, detail: impl Into<String>) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid-parameter",
        format!("query parameter '{param}': {}", detail.into()),
    )
}

/// Check that `f`, when given, asks for JSON.
pub fn check_format(value: &str) -> Result<(), ApiError> {
    match value {
        "json" | "geojson" => Ok(()),
        other => Err(bad("f", format!("'{other}' is not offered; use f=json"))),
    }
}

/// Reject any parameter but `f` (for resources that take no query).
pub fn only_format(pairs: &[(String, String)]) -> Result<(), ApiError> {
    for (name, value) in pairs {
        match name.as_str() {
            "f" => check_format(value)?,
            other => return Err(unknown(other, "f")),
        }
    }
    Ok(())
}

fn unknown(name: &str, known: &str) -> ApiError {
    bad(
        name,
        format!("unknown parameter (this resource takes {known})"),
    )
}

impl ItemsQuery {
    /// Check the query string's pairs against `coll`; any unknown or repeated name is a 400.
    pub fn parse(pairs: &[(String, String)], coll: &Collection) -> Result<Self, ApiError> {
        let mut query = ItemsQuery {
            limit: DEFAULT_LIMIT,
            offset: 0,
            bbox: None,
            filters: Vec::new(),
        };
        for (i, (name, value)) in pairs.iter().enumerate() {
            if pairs[..i].iter().any(|(n, _)| n == name) {
                return Err(bad(name, "given more than once"));
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
                "bbox" => query.bbox = Some(parse_bbox(value)?),
                "f" => check_format(value)?,
                other => match coll.column_index(other) {
                    Some(ci) if filterable(coll, ci) => query.filters.push((ci, value.clone())),
                    _ => {
                        return Err(unknown(
                            other,
                            "limit, offset, bbox, f and its properties of simple types",
                        ))
                    }
                },
            }
        }
        Ok(query)
    }

    /// The query string of this query at another offset (for paging links).
    pub fn at_offset(&self, coll: &Collection, offset: i64) -> String {
        let mut parts = vec![format!("limit={}", self.limit), format!("offset={offset}")];
        if let Some(Bbox(b)) = self.bbox {
            parts.push(format!("bbox={},{},{},{}", b[0], b[1], b[2], b[3]));
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

/// Published properties of scalar types can be filtered on by equality.
fn filterable(coll: &Collection, ci: usize) -> bool {
    ci != coll.geometry && matches!(coll.columns[ci].ty, ColumnType::Scalar(_))
}

/// `minx,miny,maxx,maxy` or `minx,miny,minz,maxx,maxy,maxz` in CRS84.
fn parse_bbox(value: &str) -> Result<Bbox, ApiError> {
    let numbers: Vec<f64> = value
        .split(',')
        .map(|s| s.trim().parse::<f64>().ok().filter(|n| n.is_finite()))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("bbox", format!("'{value}' is not a list of numbers")))?;
    let b = match numbers[..] {
        [x0, y0, x1, y1] | [x0, y0, _, x1, y1, _] => [x0, y0, x1, y1],
        _ => return Err(bad("bbox", "takes 4 or 6 numbers")),
    };
    if b[1] > b[3] {
        return Err(bad("bbox", "the minimum latitude is above the maximum"));
    }
    if b.iter().step_by(2).any(|x| x.abs() > 180.0)
        || b.iter().skip(1).step_by(2).any(|y| y.abs() > 90.0)
    {
        return Err(bad(
            "bbox",
            "longitudes lie in [-180, 180] and latitudes in [-90, 90]",
        ));
    }
    Ok(Bbox(b))
}

impl Bbox {
    /// The box as one or two boxes that do not cross the antimeridian.
    pub fn parts(self) -> Vec<[f64; 4]> {
        let [x0, y0, x1, y1] = self.0;
        if x0 <= x1 {
            vec![self.0]
        } else {
            vec![[x0, y0, 180.0, y1], [-180.0, y0, x1, y1]]
        }
    }
}

/// Percent-encode text for a URL path segment or query value.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bbox_forms() {
        assert_eq!(parse_bbox("1,2,3,4").unwrap(), Bbox([1.0, 2.0, 3.0, 4.0]));
        assert_eq!(
            parse_bbox("1,2,0,3,4,9").unwrap(),
            Bbox([1.0, 2.0, 3.0, 4.0])
        );
        assert!(parse_bbox("1,2,3").is_err());
        assert!(parse_bbox("1,x,3,4").is_err());
        assert!(parse_bbox("0,10,1,5").is_err());
        assert!(parse_bbox("0,-91,1,5").is_err());
        assert_eq!(
            Bbox([170.0, 0.0, -170.0, 1.0]).parts(),
            vec![[170.0, 0.0, 180.0, 1.0], [-180.0, 0.0, -170.0, 1.0]]
        );
    }

    #[test]
    fn encoding() {
        assert_eq!(percent_encode("a b/ü"), "a%20b%2F%C3%BC");
    }
}
