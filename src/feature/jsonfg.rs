//! JSON-FG (OGC Features and Geometries JSON 1.0) request bodies: which CRS
//! a body's `place` is in, and what its `coordRefSys`, `featureType`,
//! `time`, `measures` and `conformsTo` must be for featurepipe to take it.
//!
//! A body is JSON-FG when its media type says so (`application/fg+json`)
//! or when its root's `conformsTo` names a JSON-FG class, as JSON-FG 1.0
//! identifies its documents. The features themselves are read in the same
//! pass as GeoJSON's ([`super::input`]); this module checks what JSON-FG adds.

pub mod time;

use serde_json::Value;

use super::input::FgMembers;
use super::Handling;
use crate::catalog::Collection;
use crate::error::{Error, ErrorKind, FieldError};
use crate::geometry::{crs, Crs, GeometryIn, MALFORMED};
use crate::json::{Read, Reader};

/// JSON-FG's media type (before 1.0; 1.0 uses GeoJSON's with `conformsTo`).
pub const MEDIA_TYPE: &str = "application/fg+json";

/// JSON-FG's GeoJSON profiles (`jsonfg`, `jsonfg-plus`) start so.
pub const PROFILE_PREFIX: &str = "http://www.opengis.net/def/profile/OGC/0/jsonfg";

/// The URIs of JSON-FG's conformance classes start so.
const CLASS_PREFIX: &str = "http://www.opengis.net/spec/json-fg-1/";
/// JSON-FG Core.
pub const CORE: &str = "http://www.opengis.net/spec/json-fg-1/1.0/conf/core";
/// JSON-FG Feature Types and Schemas: `featureType`.
pub const TYPES_SCHEMAS: &str = "http://www.opengis.net/spec/json-fg-1/1.0/conf/types-schemas";

/// How JSON-FG names WGS 84 longitude/latitude, in 2D and with heights.
const JSONFG_CRS84: [&str; 2] = [
    "http://www.opengis.net/def/crs/OGC/0/CRS84",
    "http://www.opengis.net/def/crs/OGC/0/CRS84h",
];

/// Geometry types of JSON-FG's Polyhedra, Prisms and Circular Arcs classes,
/// none of which featurepipe implements.
const UNSUPPORTED_TYPES: [&str; 9] = [
    "Polyhedron",
    "MultiPolyhedron",
    "Prism",
    "MultiPrism",
    "CircularString",
    "CompoundCurve",
    "CurvePolygon",
    "MultiCurve",
    "MultiSurface",
];

/// How the features of one JSON-FG body are read.
#[derive(Debug, Clone)]
pub struct Context {
    /// The CRS of `place`: the root's `coordRefSys`, else `Content-Crs`,
    /// else the collection's storage CRS.
    pub crs: Crs,
    /// The CRS of `geometry`: always WGS 84 longitude/latitude.
    pub wgs84: Crs,
}

/// A problem with a JSON-FG member: where (relative to the object that has
/// it), its code and what is wrong.
#[derive(Debug)]
pub struct Problem {
    /// JSON pointer relative to the feature (or the root).
    pub pointer: String,
    /// Machine-readable code.
    pub code: &'static str,
    /// Explanation.
    pub message: String,
}

fn problem(pointer: impl Into<String>, code: &'static str, message: impl Into<String>) -> Problem {
    Problem {
        pointer: pointer.into(),
        code,
        message: message.into(),
    }
}

/// The feature type of `coll`'s features: its `feature_type` setting, else its id.
pub fn feature_type(coll: &Collection) -> &str {
    coll.feature_type.as_deref().unwrap_or(&coll.id)
}

/// The members of a body's root that decide how its features are read.
#[derive(Default)]
struct Root<'a> {
    collection: bool,
    conforms_to: Option<&'a str>,
    fg: FgMembers<'a>,
    /// A collection's first feature's `conformsTo` and `coordRefSys`: the
    /// items of an OGC Part 11 insert are JSON-FG documents each.
    first: (Option<&'a str>, Option<&'a str>),
}

const ROOT_MEMBERS: [&str; 6] = [
    "type",
    "conformsTo",
    "coordRefSys",
    "featureType",
    "measures",
    "features",
];

/// The root's members, its features skipped but for the first one's
/// `conformsTo` and `coordRefSys`; `None` when the body is not a JSON
/// object (the pass that reads the features says where).
fn root(body: &str) -> Option<Root<'_>> {
    fn read<'a>(r: &mut Reader<'a>) -> Read<Root<'a>> {
        let mut root = Root::default();
        if !r.object()? {
            return Err(crate::json::Stop);
        }
        let mut first = true;
        while let Some(name) = r.member_named(&mut first, &ROOT_MEMBERS)? {
            match name {
                0 => root.collection = r.raw()? == "\"FeatureCollection\"",
                1 => root.conforms_to = Some(r.raw()?),
                2 => root.fg.coord_ref_sys = Some(r.raw()?),
                3 => root.fg.feature_type = Some(r.raw()?),
                4 => root.fg.measures = Some(r.raw()?),
                5 => root.first = first_feature(r)?,
                _ => r.skip()?,
            }
        }
        Ok(root)
    }
    read(&mut Reader::new(body)).ok()
}

/// The first feature's `conformsTo` and `coordRefSys`; the rest skipped.
fn first_feature<'a>(r: &mut Reader<'a>) -> Read<(Option<&'a str>, Option<&'a str>)> {
    let mut found = (None, None);
    if !r.array()? {
        r.skip()?;
        return Ok(found);
    }
    let mut first = true;
    while r.element(&mut first)? {
        if found != (None, None) || !r.object()? {
            r.skip()?;
            continue;
        }
        let mut first_member = true;
        while let Some(name) = r.member_named(&mut first_member, &ROOT_MEMBERS[1..3])? {
            match name {
                0 => found.0 = Some(r.raw()?),
                1 => found.1 = Some(r.raw()?),
                _ => r.skip()?,
            }
        }
    }
    Ok(found)
}

/// How `body` is read as JSON-FG, or `None` when it is GeoJSON: neither
/// `asked` (its media type) nor its `conformsTo` (a collection's, else its
/// first feature's) says JSON-FG. `place` is in the `coordRefSys` found so,
/// else in `header_crs` (`Content-Crs`), else in the storage CRS. Problems of the root (its `coordRefSys`,
/// `conformsTo`; a FeatureCollection's `featureType` and `measures`) are
/// the error.
pub fn context(
    body: &str,
    coll: &Collection,
    asked: bool,
    header_crs: Option<&Crs>,
) -> Result<Option<Context>, Error> {
    // Most bodies are plain GeoJSON: a search, not a parse, tells.
    if !asked && memchr::memmem::find(body.as_bytes(), b"\"conformsTo\"").is_none() {
        return Ok(None);
    }
    let root = root(body).unwrap_or_default();
    let mut problems = Vec::new();
    let mut jsonfg = asked;
    let (conforms_to, coord_ref_sys) = match root.conforms_to {
        None if root.collection => (root.first.0, root.fg.coord_ref_sys.or(root.first.1)),
        conforms_to => (conforms_to, root.fg.coord_ref_sys),
    };
    if let Some(raw) = conforms_to {
        match serde_json::from_str::<Vec<String>>(raw) {
            Ok(uris) => jsonfg |= uris.iter().any(|u| u.starts_with(CLASS_PREFIX)),
            Err(_) if asked => problems.push(problem(
                "/conformsTo",
                MALFORMED,
                "\"conformsTo\" is an array of conformance class URIs",
            )),
            Err(_) => {}
        }
    }
    if !jsonfg {
        return Ok(None);
    }
    let crs = match coord_ref_sys.map(|raw| crs_named(raw, coll)) {
        Some(Ok(crs)) => crs,
        Some(Err(p)) => {
            problems.push(p);
            Crs::crs84()
        }
        None => header_crs.unwrap_or_else(|| coll.storage_crs()).clone(),
    };
    if root.collection {
        problems.extend(feature_type_problem(root.fg.feature_type, coll));
        problems.extend(measures_problem(root.fg.measures));
    }
    if problems.is_empty() {
        return Ok(Some(Context {
            crs,
            wgs84: Crs::crs84(),
        }));
    }
    let kind = match problems.iter().any(|p| p.code == MALFORMED) {
        true => ErrorKind::InvalidGeojson,
        false => ErrorKind::ValidationFailed,
    };
    let detail = format!(
        "{} problem(s) in the JSON-FG body's root; nothing was written",
        problems.len()
    );
    let errors = problems
        .into_iter()
        .map(|p| FieldError::new(0, p.pointer, p.code, p.message))
        .collect();
    Err(Error::new(kind, detail).with_errors(errors))
}

/// The offered CRS a `coordRefSys` value names (at `/coordRefSys`).
fn crs_named(raw: &str, coll: &Collection) -> Result<Crs, Problem> {
    let at = "/coordRefSys";
    let value: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
    let uri =
        match &value {
            Value::String(uri) => uri.as_str(),
            Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("Reference") => {
                if o.contains_key("epoch") {
                    return Err(problem(
                        format!("{at}/epoch"),
                        "unsupported_crs",
                        "coordinate epochs are not supported: give the CRS by its URI alone",
                    ));
                }
                match o.get("href").and_then(Value::as_str) {
                    Some(href) => href,
                    None => {
                        return Err(problem(
                            format!("{at}/href"),
                            MALFORMED,
                            "a CRS reference needs a string member \"href\"",
                        ))
                    }
                }
            }
            Value::Array(_) => {
                return Err(problem(
                    at,
                    "unsupported_crs",
                    "compound CRSs are not supported: give one CRS the collection offers",
                ))
            }
            Value::Object(_) => return Err(problem(
                at,
                "unsupported_crs",
                "CRSs given by value are not supported: give one the collection offers by its URI",
            )),
            _ => return Err(problem(
                at,
                MALFORMED,
                "\"coordRefSys\" is a CRS URI or a {\"type\": \"Reference\", \"href\": …} object",
            )),
        };
    let uri = match JSONFG_CRS84.contains(&uri) {
        true => crs::CRS84,
        false => uri,
    };
    coll.find_crs(uri).cloned().ok_or_else(|| {
        let offered: Vec<&str> = coll.crs.iter().map(|c| c.uri.as_str()).collect();
        problem(
            at,
            "unsupported_crs",
            format!(
                "'{uri}' is not a CRS of collection '{}'; it offers {}",
                coll.id,
                offered.join(", ")
            ),
        )
    })
}

/// A `featureType` other than the collection's.
fn feature_type_problem(raw: Option<&str>, coll: &Collection) -> Option<Problem> {
    let raw = raw?;
    let given: Option<String> = serde_json::from_str(raw).ok();
    let expected = feature_type(coll);
    match given {
        Some(t) if t == expected => None,
        Some(t) => Some(problem(
            "/featureType",
            "feature_type_mismatch",
            format!(
                "featureType '{t}' given; collection '{}' holds features of type '{expected}'",
                coll.id
            ),
        )),
        None => Some(problem(
            "/featureType",
            MALFORMED,
            "\"featureType\" is a string",
        )),
    }
}

/// `measures` that say the coordinates carry measure values (not stored),
/// or that are not JSON-FG's object with a boolean `enabled`.
fn measures_problem(raw: Option<&str>) -> Option<Problem> {
    let value: Value = serde_json::from_str(raw?).unwrap_or(Value::Null);
    match value.as_object().map(|m| m.get("enabled")) {
        Some(Some(Value::Bool(false))) => None,
        Some(Some(Value::Bool(true))) => Some(problem(
            "/measures",
            "unsupported_measures",
            "measure values are not stored: featurepipe does not implement JSON-FG Measures",
        )),
        Some(_) => Some(problem(
            "/measures/enabled",
            MALFORMED,
            "\"measures\" needs a boolean member \"enabled\"",
        )),
        None => Some(problem(
            "/measures",
            MALFORMED,
            "\"measures\" is an object with a boolean member \"enabled\"",
        )),
    }
}

/// The problems of one feature's JSON-FG members; `root` when the feature
/// is the body's root (its `coordRefSys` was read with the body's).
pub fn feature_problems(
    fg: &FgMembers<'_>,
    ctx: &Context,
    coll: &Collection,
    root: bool,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    if let (Some(raw), false) = (fg.coord_ref_sys, root) {
        // JSON-FG 1.0 /req/core/same-crs: only the root names the CRS.
        match crs_named(raw, coll) {
            Ok(crs) if crs == ctx.crs => {}
            Ok(crs) => problems.push(problem(
                "/coordRefSys",
                "crs_mismatch",
                format!(
                    "'{}' differs from the body's CRS '{}': give coordRefSys once, at the root",
                    crs.uri, ctx.crs.uri
                ),
            )),
            Err(p) => problems.push(p),
        }
    }
    problems.extend(feature_type_problem(fg.feature_type, coll));
    problems.extend(measures_problem(fg.measures));
    problems
}

/// How a feature's `time` (as JSON text; `None`: absent, which leaves the
/// columns alone) is stored in `coll`'s temporal columns: their values, and
/// the problems. A time that is not valid JSON-FG is always one; one the
/// collection cannot store (it has no temporal columns, or they hold
/// another kind of time) is ignored under `Prefer: handling=lenient`, as an
/// unknown property is.
pub fn time_cells(
    raw: Option<&str>,
    coll: &Collection,
    handling: Handling,
) -> (Vec<time::Cell>, Vec<Problem>) {
    let Some(raw) = raw else {
        return (Vec::new(), Vec::new());
    };
    let given = match time::parse(raw) {
        Ok(given) => given,
        Err(p) => return (Vec::new(), vec![p]),
    };
    let (cells, problems) = match coll.time {
        Some(temporal) => time::cells(given.as_ref(), temporal, coll),
        None if given.as_ref().is_none_or(time::Time::is_empty) => (Vec::new(), Vec::new()),
        None => (
            Vec::new(),
            vec![problem(
                "/time",
                "no_temporal_property",
                format!(
                    "collection '{}' has no temporal property to store \"time\" in (the \
                     settings file's time names none); send null, or Prefer: \
                     handling=lenient to have it ignored",
                    coll.id
                ),
            )],
        ),
    };
    match handling {
        Handling::Lenient => (cells, Vec::new()),
        _ => (cells, problems),
    }
}

/// A `place` of a JSON-FG geometry type featurepipe does not store (the
/// GeoJSON encoder would call it no geometry at all).
pub fn unsupported_place(place: &GeometryIn<'_>) -> Option<Problem> {
    let name = place
        .other_type()
        .filter(|t| UNSUPPORTED_TYPES.contains(t))?;
    Some(problem(
        "/place/type",
        "unsupported_geometry_type",
        format!(
            "a {name} cannot be stored: featurepipe implements none of JSON-FG's \
             Polyhedra, Prisms and Circular Arcs classes"
        ),
    ))
}
