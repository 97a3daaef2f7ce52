//! GeoJSON request bodies → validated rows for one collection.
//!
//! Everything is checked here, before a connection is taken; every problem is
//! collected with a JSON pointer so a client can fix a whole request at once.

mod allowed;
mod cells;
pub mod coerce;
mod input;
pub mod jsonfg;
pub mod stream;
pub mod value;

use std::borrow::Cow;

use crate::catalog::{Collection, ColumnType, ReadOnly};
use crate::error::{Error, ErrorKind, FieldError, MAX_LISTED_ERRORS};
pub use crate::geometry::MALFORMED;
use crate::geometry::{encode_geometry, Crs, GeometryIn, WGS84_SRID};
use crate::json::Reader;
use cells::Cells;
use input::{read_body, read_feature, FeatureIn, FeatureList, Kind, Properties};
use value::SqlValue;

/// One feature as the columns it writes; left-out columns take their defaults.
#[derive(Debug, Clone)]
pub struct FeatureRow {
    /// Index into [`ParsedBody::shapes`]: the columns this row writes.
    pub shape: usize,
    /// One value per column of its shape.
    pub values: Vec<SqlValue>,
}

impl FeatureRow {
    /// Approximate parameter bytes this row sends.
    pub fn wire_size(&self) -> usize {
        self.values.iter().map(SqlValue::wire_size).sum()
    }
}

/// A parsed and validated request body.
#[derive(Debug)]
pub struct ParsedBody {
    /// The body was a single Feature (not a FeatureCollection).
    pub single: bool,
    /// One row per feature, in request order.
    pub rows: Vec<FeatureRow>,
    /// The distinct column sets the rows write (indices into the collection's
    /// columns, ascending); usually just one.
    pub shapes: Vec<Vec<usize>>,
    /// The SRID the geometries are encoded in (the request's CRS), or
    /// [`MIXED_SRID`].
    pub srid: i32,
    /// The CRS of its geometries: the request's, or for JSON-FG, `place`'s
    /// or (`geometry`) WGS 84; a single Feature is answered in it.
    pub crs: Crs,
    /// The body was JSON-FG: a single Feature is answered so, unless
    /// `Accept` asks for GeoJSON.
    pub jsonfg: bool,
    /// With [`Reading::keep_valid`]: each invalid feature's index and first problem.
    pub rejected: Vec<(usize, Box<FieldError>)>,
    /// With [`Reading::keep_valid`]: the feature index of each row.
    pub row_features: Vec<usize>,
}

/// The SRID of a body whose geometries are in more than one CRS (JSON-FG
/// `place` in one, `geometry` in WGS 84): each EWKB carries its own SRID,
/// and the write transforms every one into the column's.
pub const MIXED_SRID: i32 = 0;

/// How a request's features are read.
#[derive(Debug, Clone)]
pub struct Reading {
    /// The CRS of the geometries (`Content-Crs`).
    pub crs: Crs,
    /// `crs` was given (`Content-Crs`), not taken by default.
    pub crs_given: bool,
    /// The media type says JSON-FG (a body whose `conformsTo` names
    /// JSON-FG is read as JSON-FG without it).
    pub jsonfg: bool,
    /// What is done with properties the published schema does not take.
    pub handling: Handling,
    /// A FeatureCollection's invalid features are set aside (with their first
    /// problem) instead of refusing the body: `mode=skip`.
    pub keep_valid: bool,
    /// Limits on what one body may hold.
    pub limits: InputLimits,
}

/// How properties the published schema does not take are handled: `Prefer:
/// handling` (RFC 7240), as OGC API - Features Part 4 gives it meaning.
/// Values that do not fit a column are refused whatever it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handling {
    /// Not asked for: unknown properties are refused, and so are read-only
    /// ones in a new feature; a feature written back by PUT or PATCH may
    /// carry the read-only ones it was read with, which are left as they are.
    Unspecified,
    /// `handling=strict`: anything the schema does not take is refused,
    /// read-only properties in PUT and PATCH too.
    Strict,
    /// `handling=lenient`: unknown and read-only properties are ignored.
    Lenient,
}

/// Limits on what one request body may hold (each a clear 4xx).
#[derive(Debug, Clone, Copy)]
pub struct InputLimits {
    /// Features per request (413 beyond).
    pub features: usize,
    /// Positions per geometry.
    pub positions: usize,
    /// Properties per feature.
    pub properties: usize,
    /// Bytes per string value.
    pub string_bytes: usize,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            features: 1_000_000,
            positions: 1_000_000,
            properties: 1_000,
            string_bytes: 1 << 20,
        }
    }
}

impl Default for Reading {
    fn default() -> Self {
        Reading {
            crs: Crs::crs84(),
            crs_given: false,
            jsonfg: false,
            handling: Handling::Unspecified,
            keep_valid: false,
            limits: InputLimits::default(),
        }
    }
}

/// Parse a Feature or FeatureCollection and validate every feature against `coll`.
pub fn parse_body(body: &[u8], coll: &Collection, how: &Reading) -> Result<ParsedBody, Error> {
    let body = utf8(body)?;
    let fg = fg_context(body, coll, how)?;
    let mut v = Validator::new(coll, how, fg.as_ref());
    // Room for as many rows as the body has features: growing by doubling
    // would briefly hold the rows twice, at the peak of a large request.
    let expected = memchr::memmem::find_iter(body.as_bytes(), b"\"Feature\"").count();
    let mut rows = Vec::with_capacity(expected);
    let mut row_features = Vec::new();
    let mut too_many = false;
    // One pass checks the syntax of the whole body (line and column on error)
    // and validates each feature of a collection as soon as it is read.
    let top = read_body(body, how.limits.positions, &mut |i, f| {
        if i >= how.limits.features {
            too_many = true;
            return; // read on for the syntax, but hold no more rows
        }
        if let Some(row) = v.feature(i, Some(i), f) {
            rows.push(row);
            if how.keep_valid {
                row_features.push(i);
            }
        }
    })
    .map_err(|e| invalid_json(&e.describe(body)))?;
    if too_many {
        return Err(too_many_features(how.limits.features));
    }
    let kind = top.members.kind;
    let single = if kind == Some(Kind::Feature) {
        // Anything read as `features` of a Feature is not a feature.
        v = Validator::new(coll, how, fg.as_ref());
        rows = v.feature(0, None, &top.members).into_iter().collect();
        true
    } else if kind == Some(Kind::FeatureCollection) {
        match top.features {
            FeatureList::Array => {}
            FeatureList::Repeated => return Err(repeated_features()),
            FeatureList::Absent | FeatureList::NotArray => {
                return Err(malformed(
                    "a FeatureCollection needs an array member \"features\"",
                    "/features",
                ))
            }
        }
        false
    } else {
        return Err(not_geojson());
    };
    if v.total == 0 || (how.keep_valid && !single) {
        return Ok(ParsedBody {
            single,
            rows,
            srid: v.srid(),
            crs: v.crs().clone(),
            jsonfg: v.fg.is_some(),
            shapes: v.shapes,
            rejected: v.rejected,
            row_features,
        });
    }
    Err(v.failure())
}

/// What a single-Feature body is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A new feature (POST): every rule of the core write path.
    Create,
    /// A whole feature replacing the one whose key the URL names (PUT).
    Replace,
    /// A JSON merge patch (RFC 7396, PATCH): only the members it has change.
    Patch,
}

/// A validated body of PUT or PATCH: the columns it writes and their values.
#[derive(Debug)]
pub struct ItemBody {
    /// Columns written, ascending.
    pub columns: Vec<usize>,
    /// One value per column.
    pub values: Vec<SqlValue>,
    /// The body's `id` member as text, to compare with the URL's.
    pub id: Option<String>,
    /// The key column given as a property, as text, to compare with the URL's.
    pub key_property: Option<String>,
    /// The CRS its geometry is in: the request's, or for JSON-FG, `place`'s
    /// or (`geometry`) WGS 84.
    pub crs: Crs,
    /// The body was JSON-FG.
    pub jsonfg: bool,
}

impl ItemBody {
    /// A problem when the body's `id` or key property names another feature
    /// than `id` (ids cannot change); its pointer is relative to the body.
    pub fn changed_id(&self, coll: &Collection, id: &str) -> Option<FieldError> {
        let (pointer, given) = match (&self.id, &self.key_property, coll.primary_key) {
            (Some(given), ..) if given != id => ("/id".to_owned(), given),
            (_, Some(given), Some(pk)) if given != id => (
                format!("/properties/{}", escape_pointer(&coll.columns[pk].name)),
                given,
            ),
            _ => return None,
        };
        let message =
            format!("the feature is '{id}', the body says '{given}'; an id cannot be changed");
        Some(FieldError::new(0, pointer, MALFORMED, message))
    }
}

/// Parse and validate the body of a PUT (`Replace`) or PATCH (`Patch`).
pub fn parse_item(
    body: &[u8],
    coll: &Collection,
    purpose: Purpose,
    how: &Reading,
) -> Result<ItemBody, Error> {
    let body = utf8(body)?;
    let feature =
        read_feature(body, how.limits.positions).map_err(|e| invalid_json(&e.describe(body)))?;
    let fg = fg_context(body, coll, how)?;
    if !feature.is_object {
        return Err(malformed("the body must be a GeoJSON Feature object", ""));
    }
    let id = match feature.id {
        None => None,
        Some(raw) if raw.starts_with('"') => Reader::new(raw).string().ok().map(Cow::into_owned),
        Some(raw) if raw.starts_with(|c: char| c == '-' || c.is_ascii_digit()) => {
            Some(raw.to_owned())
        }
        Some(_) => {
            return Err(malformed(
                "a Feature id must be a string or a number",
                "/id",
            ))
        }
    };
    let mut v = Validator::new(coll, how, fg.as_ref());
    v.purpose = purpose;
    match v.feature(0, None, &feature) {
        Some(row) if v.total == 0 => Ok(ItemBody {
            crs: v.crs().clone(),
            jsonfg: v.fg.is_some(),
            columns: v.shapes.swap_remove(row.shape),
            values: row.values,
            id,
            key_property: v.key_property,
        }),
        _ => Err(v.failure()),
    }
}

/// How `body` is read as JSON-FG, if it is JSON-FG.
fn fg_context(
    body: &str,
    coll: &Collection,
    how: &Reading,
) -> Result<Option<jsonfg::Context>, Error> {
    let header_crs = how.crs_given.then_some(&how.crs);
    jsonfg::context(body, coll, how.jsonfg, header_crs)
}

/// An id as the text of a URL segment: a string's contents, a number's digits.
fn id_text(raw: &str) -> String {
    match Reader::new(raw).string() {
        Ok(text) => text.into_owned(),
        Err(_) => raw.to_owned(),
    }
}

fn invalid_json(problem: &str) -> Error {
    Error::new(
        ErrorKind::InvalidJson,
        format!("the body is not valid JSON: {problem}"),
    )
}

/// UTF-8 is checked once, so that no later pass checks it again.
fn utf8(body: &[u8]) -> Result<&str, Error> {
    std::str::from_utf8(body).map_err(|e| not_utf8(&e.to_string()))
}

/// The error of a body that is not UTF-8, for `why` as `std::str::Utf8Error` says it.
fn not_utf8(why: &str) -> Error {
    Error::new(
        ErrorKind::InvalidJson,
        format!("the body is not UTF-8: {why}"),
    )
}

/// The error of a body with more than `limit` features.
fn too_many_features(limit: usize) -> Error {
    Error::new(
        ErrorKind::TooManyFeatures,
        format!(
            "the body has more than {limit} features (FEATUREPIPE_MAX_FEATURES); send it in parts"
        ),
    )
}

fn not_geojson() -> Error {
    malformed(
        "the body must be a GeoJSON Feature or FeatureCollection object",
        "/type",
    )
}

/// A body whose `features` member is given twice: the second would number
/// its features from 0 again, so that no pointer or id could say which one
/// it means.
fn repeated_features() -> Error {
    malformed("\"features\" is given more than once", "/features")
}

fn malformed(message: &str, pointer: &str) -> Error {
    Error::new(ErrorKind::InvalidGeojson, message).with_errors(vec![FieldError::new(
        0,
        pointer.to_owned(),
        MALFORMED,
        message,
    )])
}

struct Validator<'a> {
    coll: &'a Collection,
    how: &'a Reading,
    /// The first problems, as many as a response lists.
    errors: Vec<FieldError>,
    /// All problems: a body of a million bad features must not hold a million errors.
    total: usize,
    features_at_fault: usize,
    last_at_fault: Option<usize>,
    /// Some problem is malformed GeoJSON (400) rather than invalid data (422).
    malformed: bool,
    shapes: Vec<Vec<usize>>,
    purpose: Purpose,
    /// The values of the feature being validated, by column; reused.
    cells: Cells,
    /// PUT/PATCH: the key given as a property, as text.
    key_property: Option<String>,
    /// With `keep_valid`: each invalid feature's first problem.
    rejected: Vec<(usize, Box<FieldError>)>,
    /// The column the `k`th property of the previous feature named.
    property_columns: Vec<usize>,
    /// Columns every feature must give ([`Collection::required`]; found
    /// once, checked per feature).
    required: Vec<usize>,
    /// Problems by code, for the metrics.
    codes: CodeTally,
    /// How a JSON-FG body is read; `None` for GeoJSON.
    fg: Option<&'a jsonfg::Context>,
    /// JSON-FG: some feature's geometry came from `place`, some from `geometry`.
    from_place: bool,
    from_geometry: bool,
}

/// Problems by code, added to the metrics once per body (when dropped):
/// a body of a million bad features costs no million metric updates.
#[derive(Default)]
struct CodeTally(Vec<(String, u64)>);

impl CodeTally {
    fn count(&mut self, code: &str) {
        match self.0.iter_mut().find(|(c, _)| c == code) {
            Some((_, n)) => *n += 1,
            None => self.0.push((code.to_owned(), 1)),
        }
    }
}

impl Drop for CodeTally {
    fn drop(&mut self) {
        for (code, n) in self.0.drain(..) {
            metrics::counter!("featurepipe_validation_errors_total", "code" => code).increment(n);
        }
    }
}

/// A JSON pointer into the body: `/features/{i}{suffix}`, or `{suffix}` for a single Feature.
fn at(index: Option<usize>, suffix: &str) -> String {
    match index {
        Some(i) => format!("/features/{i}{suffix}"),
        None => suffix.to_owned(),
    }
}

impl<'a> Validator<'a> {
    fn new(coll: &'a Collection, how: &'a Reading, fg: Option<&'a jsonfg::Context>) -> Self {
        Validator {
            coll,
            how,
            errors: Vec::new(),
            total: 0,
            features_at_fault: 0,
            last_at_fault: None,
            malformed: false,
            shapes: Vec::new(),
            purpose: Purpose::Create,
            cells: Cells::new(coll.columns.len()),
            key_property: None,
            rejected: Vec::new(),
            property_columns: Vec::new(),
            required: (0..coll.columns.len())
                .filter(|&ci| coll.required(ci))
                .collect(),
            codes: CodeTally::default(),
            fg,
            from_place: false,
            from_geometry: false,
        }
    }

    /// The SRID the geometries read so far are in ([`MIXED_SRID`] when
    /// JSON-FG features gave some as `place` and some as `geometry`).
    fn srid(&self) -> i32 {
        match (self.fg, self.from_place, self.from_geometry) {
            (Some(fg), true, true) if fg.crs.srid != WGS84_SRID => MIXED_SRID,
            _ => self.crs().srid,
        }
    }

    /// The CRS of the geometries read so far (one feature's, for PUT and PATCH).
    fn crs(&self) -> &'a Crs {
        match self.fg {
            None => &self.how.crs,
            Some(fg) if self.from_geometry && !self.from_place => &fg.wgs84,
            Some(fg) => &fg.crs,
        }
    }

    /// The error for a body with problems: not GeoJSON when some of it is
    /// not, else features that do not fit.
    fn failure(self) -> Error {
        let kind = if self.malformed {
            ErrorKind::InvalidGeojson
        } else {
            ErrorKind::ValidationFailed
        };
        Error::new(
            kind,
            format!(
                "{} problem(s) in {} feature(s); nothing was written",
                self.total, self.features_at_fault
            ),
        )
        .with_some_errors(self.errors, self.total)
    }

    fn error(&mut self, feature: usize, pointer: String, code: &str, message: impl Into<String>) {
        self.codes.count(code);
        self.total += 1;
        self.malformed |= code == MALFORMED;
        if self.last_at_fault != Some(feature) {
            self.last_at_fault = Some(feature);
            self.features_at_fault += 1;
            if self.how.keep_valid {
                let message = message.into();
                // Past the first that a report lists, only the code is told
                // (counted): a million refused features keep no million messages.
                let first = match self.rejected.len() < MAX_LISTED_ERRORS {
                    true => FieldError::new(feature, pointer.clone(), code, message.clone()),
                    false => FieldError::new(feature, String::new(), code, String::new()),
                };
                self.rejected.push((feature, Box::new(first)));
                if self.errors.len() < MAX_LISTED_ERRORS {
                    self.errors
                        .push(FieldError::new(feature, pointer, code, message));
                }
                return;
            }
        }
        if self.errors.len() >= MAX_LISTED_ERRORS {
            return;
        }
        self.errors
            .push(FieldError::new(feature, pointer, code, message));
    }

    /// Validate feature `i` (at `index` in the collection; `None` for a single Feature).
    fn feature(&mut self, i: usize, index: Option<usize>, f: &FeatureIn<'_>) -> Option<FeatureRow> {
        let patch = self.purpose == Purpose::Patch;
        let is_feature = match f.kind {
            Some(kind) => kind == Kind::Feature,
            None => patch, // a merge patch names only what changes
        };
        if !(f.is_object && is_feature) {
            self.error(
                i,
                at(index, ""),
                MALFORMED,
                "expected a GeoJSON Feature object",
            );
            return None;
        };
        let errors_before = self.total;
        let mut check_required = !patch;
        let how = self.how;
        match self.fg {
            None => self.geometry(i, index, f.geometry.as_ref(), "/geometry", &how.crs),
            Some(fg) => self.jsonfg(i, index, f, fg),
        }
        match &f.properties {
            Some(Properties::Members(members)) => self.properties(i, index, members),
            Some(Properties::Null) => {}
            None if patch => {}
            Some(Properties::NotAnObject) | None => {
                // Unreadable properties: which columns were meant cannot be known.
                check_required = false;
                self.error(
                    i,
                    at(index, "/properties"),
                    MALFORMED,
                    "a Feature needs a member \"properties\" that is an object or null",
                );
            }
        }
        match f.id {
            Some(id) if self.purpose == Purpose::Create => self.key_from_id(i, index, id),
            _ => {} // PUT and PATCH take the key from the URL
        }
        if check_required {
            self.required(i, index);
        }
        if self.total > errors_before {
            self.cells.clear();
            return None;
        }
        Some(self.cells.take_row(&mut self.shapes))
    }

    /// A JSON-FG feature's members: the geometry from `place` when it has
    /// one (in the body's CRS), else from `geometry` (WGS 84).
    fn jsonfg(
        &mut self,
        i: usize,
        index: Option<usize>,
        f: &FeatureIn<'_>,
        fg: &'a jsonfg::Context,
    ) {
        let root = index.is_none();
        for p in jsonfg::feature_problems(&f.fg, fg, self.coll, root) {
            self.error(i, at(index, &p.pointer), p.code, p.message);
        }
        self.time(i, index, f.fg.time);
        match &f.fg.place {
            Some(place) if !place.is_null => match jsonfg::unsupported_place(place) {
                Some(p) => self.error(i, at(index, &p.pointer), p.code, p.message),
                None => {
                    self.from_place = true;
                    self.geometry(i, index, Some(place), "/place", &fg.crs);
                }
            },
            // A merge patch that only drops `place` leaves the geometry,
            // which `geometry` then stands for.
            Some(_) if f.geometry.is_none() && self.purpose == Purpose::Patch => {}
            _ => {
                self.from_geometry |= f.geometry.as_ref().is_some_and(|g| !g.is_null);
                self.geometry(i, index, f.geometry.as_ref(), "/geometry", &fg.wgs84);
            }
        }
    }

    /// A JSON-FG feature's `time`, into the collection's temporal columns.
    fn time(&mut self, i: usize, index: Option<usize>, raw: Option<&str>) {
        let (cells, problems) = jsonfg::time_cells(raw, self.coll, self.how.handling);
        for p in problems {
            self.error(i, at(index, &p.pointer), p.code, p.message);
        }
        for c in cells {
            let pointer = at(index, &c.pointer);
            if !self.takes(i, || pointer.clone(), c.column, false) {
                continue;
            }
            match self.cell(c.column, &c.json) {
                Ok(v) => self.cells.set(c.column, v),
                Err((code, message, _)) => {
                    self.error(i, pointer, code, message);
                    self.cells.set(c.column, SqlValue::Null); // given, though invalid: not also "required"
                }
            }
        }
    }

    /// The geometry given as `member`, in `crs`.
    fn geometry(
        &mut self,
        i: usize,
        index: Option<usize>,
        geometry: Option<&GeometryIn<'_>>,
        member: &str,
        crs: &Crs,
    ) {
        let gi = self.coll.geometry;
        match geometry {
            None if self.purpose == Purpose::Patch => {}
            None => self.error(
                i,
                at(index, "/geometry"),
                MALFORMED,
                "a Feature needs a member \"geometry\" (an object or null)",
            ),
            Some(g) if g.is_null => {
                if self.coll.columns[gi].not_null && !self.coll.before_insert_trigger {
                    self.error(
                        i,
                        at(index, member),
                        "not_nullable",
                        "the geometry column is NOT NULL",
                    );
                }
                self.cells.set(gi, SqlValue::Null);
            }
            Some(g) => match encode_geometry(g, self.coll.geometry_column(), crs) {
                Ok(wkb) => self.cells.set(gi, SqlValue::Ewkb(wkb)),
                Err(e) => {
                    self.error(
                        i,
                        at(index, &format!("{member}{}", e.path)),
                        e.code,
                        e.message,
                    );
                    self.cells.set(gi, SqlValue::Null); // given, though invalid: not also "required"
                }
            },
        }
    }

    fn properties(&mut self, i: usize, index: Option<usize>, props: &[(Cow<'_, str>, &str)]) {
        let pointer = |name: &str, element: Option<usize>| {
            let element = element.map(|e| format!("/{e}")).unwrap_or_default();
            at(
                index,
                &format!("/properties/{}{element}", escape_pointer(name)),
            )
        };
        if props.len() > self.how.limits.properties {
            self.error(
                i,
                at(index, "/properties"),
                "too_many_properties",
                format!(
                    "{} properties, more than the limit of {} (FEATUREPIPE_MAX_PROPERTIES)",
                    props.len(),
                    self.how.limits.properties
                ),
            );
            return;
        }
        for (k, (name, raw)) in props.iter().enumerate() {
            let Some(ci) = self.column_named(k, name) else {
                if self.how.handling != Handling::Lenient {
                    self.error(
                        i,
                        pointer(name, None),
                        "unknown_property",
                        format!("the table has no column '{name}'"),
                    );
                }
                continue;
            };
            if self.cells.has_property(ci) {
                self.error(
                    i,
                    pointer(name, None),
                    "duplicate_property",
                    format!("'{name}' is given more than once"),
                );
                continue;
            }
            let temporal = self.coll.time.is_some_and(|t| t.columns().any(|c| c == ci));
            if temporal && self.cells.has(ci) {
                // JSON-FG's `time` wrote it already.
                self.error(
                    i,
                    pointer(name, None),
                    "time_conflict",
                    format!("'{name}' is given by \"time\" too: give it once, in \"time\""),
                );
                continue;
            }
            // A feature read, changed and written back carries what it was
            // read with: the key (checked against the URL) and the columns a
            // client cannot set, which are left as they are.
            if self.purpose != Purpose::Create && Some(ci) == self.coll.primary_key {
                self.key_property = Some(id_text(raw));
                continue;
            }
            // QGIS sends every field of a new feature, null where the user
            // left it empty: where NULL cannot be meant, it is the default.
            if *raw == "null" && self.purpose == Purpose::Create && self.coll.null_takes_default(ci)
            {
                self.cells.default_property(ci);
                continue;
            }
            if !self.takes(i, || pointer(name, None), ci, true) {
                continue;
            }
            match self.cell(ci, raw) {
                Ok(v) => self.cells.set_property(ci, v),
                Err((code, message, element)) => {
                    self.error(i, pointer(name, element), code, message);
                    self.cells.set_property(ci, SqlValue::Null); // given, though invalid: not also "required"
                }
            }
        }
    }

    /// Whether what the body gives at `pointer` (a property when
    /// `from_property`) is written to column `ci`. Not when clients cannot
    /// write it: a problem, unless `Prefer: handling` (or, for a feature
    /// written back by PUT or PATCH, the column being kept as it is) has it
    /// ignored; nor when a change keeps the column as it is.
    /// `pointer` is made only for a problem: most properties have none, and
    /// formatting one per property would cost the parser a third of its speed.
    fn takes(
        &mut self,
        i: usize,
        pointer: impl FnOnce() -> String,
        ci: usize,
        from_property: bool,
    ) -> bool {
        let kept = self.purpose != Purpose::Create && self.coll.kept_on_change(ci);
        let Some((code, message)) = self.unwritable(ci) else {
            return !kept;
        };
        let ignored = match self.how.handling {
            Handling::Lenient => true,
            Handling::Strict => false,
            Handling::Unspecified => kept,
        };
        if !ignored {
            self.error(i, pointer(), code, message);
            // Given, though refused: not also "required".
            match from_property {
                true => self.cells.set_property(ci, SqlValue::Null),
                false => self.cells.set(ci, SqlValue::Null),
            }
        }
        false
    }

    /// The column named `name`, the `k`th property. The features of a body
    /// mostly list their properties alike: the column the previous feature's
    /// `k`th property named is tried first, so that a wide table costs one
    /// comparison per property rather than a search.
    fn column_named(&mut self, k: usize, name: &str) -> Option<usize> {
        if let Some(&ci) = self.property_columns.get(k) {
            if self.coll.columns[ci].name == name {
                return Some(ci);
            }
        }
        let ci = self.coll.column_index(name)?;
        let known = self.property_columns.len();
        if k < known {
            self.property_columns[k] = ci;
        } else if k == known {
            self.property_columns.push(ci);
        }
        Some(ci)
    }

    /// Why a property cannot write column `ci` (a code and a message), if it cannot.
    fn unwritable(&self, ci: usize) -> Option<(&'static str, String)> {
        let col = &self.coll.columns[ci];
        if ci == self.coll.geometry {
            // Even as null: the geometry is the "geometry" member's alone.
            let message = "the geometry column is written from the Feature's \"geometry\" member";
            return Some(("read_only", message.into()));
        }
        Some(match self.coll.read_only(ci)? {
            ReadOnly::Unwritable => (
                "unsupported_type",
                format!(
                    "columns of type {} cannot be written by featurepipe",
                    col.type_sql
                ),
            ),
            why => (
                "read_only",
                format!("'{}' is {}: it cannot be written", col.name, why.reason()),
            ),
        })
    }

    /// Validate one property value for column `ci`.
    fn cell(
        &self,
        ci: usize,
        value: &str,
    ) -> Result<SqlValue, (&'static str, String, Option<usize>)> {
        let col = &self.coll.columns[ci];
        if value == "null" {
            return if col.not_null && !self.coll.before_insert_trigger {
                Err(("not_nullable", format!("'{}' is NOT NULL", col.name), None))
            } else {
                Ok(SqlValue::Null)
            };
        }
        let text = value;
        if text.starts_with('"') && text.len() > self.how.limits.string_bytes + 2 {
            return Err((
                "too_long",
                format!(
                    "'{}': a string of {} bytes, more than the limit of {} (FEATUREPIPE_MAX_STRING)",
                    col.name,
                    text.len() - 2,
                    self.how.limits.string_bytes
                ),
                None,
            ));
        }
        let result = match &col.ty {
            ColumnType::Scalar(t) => coerce::scalar(value, *t),
            ColumnType::Array(t) => coerce::array(value, *t),
            ColumnType::Geometry(_) | ColumnType::Unsupported => {
                return Err((
                    "unsupported_type",
                    format!(
                        "columns of type {} cannot be written by featurepipe",
                        col.type_sql
                    ),
                    None,
                ))
            }
        };
        let value =
            result.map_err(|e| (e.code, format!("'{}': {}", col.name, e.message), e.element))?;
        if let Some((code, why)) = allowed::violation(&col.checks, &value) {
            return Err((code, format!("'{}': {why}", col.name), None));
        }
        match (&value, col.numeric_scale) {
            // A key PostgreSQL would round is stored under another id than the client's.
            (SqlValue::Text(text), Some(scale))
                if Some(ci) == self.coll.primary_key && !coerce::exact_at_scale(text, scale) =>
            {
                Err((
                    "too_precise",
                    format!(
                        "'{}': {text} has more decimals than {} keeps: the key would be stored rounded",
                        col.name, col.type_sql
                    ),
                    None,
                ))
            }
            _ => Ok(value),
        }
    }

    /// A client-keyed table takes its key from the Feature's `id` when no property gives it.
    fn key_from_id(&mut self, i: usize, index: Option<usize>, id: &str) {
        if !id.starts_with(|c: char| c == '"' || c == '-' || c.is_ascii_digit()) {
            self.error(
                i,
                at(index, "/id"),
                MALFORMED,
                "a Feature id must be a string or a number",
            );
            return;
        }
        let Some(pk) = self.coll.primary_key else {
            return;
        };
        let key = &self.coll.columns[pk];
        if key.has_default() || key.generated || self.cells.has(pk) {
            return; // the database assigns the key; a client id is not a key here
        }
        match self.cell(pk, id) {
            Ok(v) => self.cells.set(pk, v),
            Err((code, message, _)) => self.error(i, at(index, "/id"), code, message),
        }
    }

    /// Columns that are NOT NULL without a default must be given (unless a trigger may fill them).
    fn required(&mut self, i: usize, index: Option<usize>) {
        let key_in_url = self.purpose == Purpose::Replace;
        for ri in 0..self.required.len() {
            let ci = self.required[ri];
            let key_given = key_in_url && self.coll.is_key(ci);
            if !key_given && !self.cells.has(ci) {
                let col = &self.coll.columns[ci];
                let pointer = if ci == self.coll.geometry {
                    at(index, "/geometry")
                } else {
                    at(index, &format!("/properties/{}", escape_pointer(&col.name)))
                };
                self.error(
                    i,
                    pointer,
                    "required",
                    format!("'{}' is NOT NULL and has no default", col.name),
                );
            }
        }
    }
}

/// Escape a member name for a JSON pointer (RFC 6901).
pub fn escape_pointer(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}
