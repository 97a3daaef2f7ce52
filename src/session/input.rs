//! The body of `POST /transactions`: every operation is read and validated
//! before any database work, with the items endpoint's error reports and
//! pointers into the operations array. The OGC format ([`super::ogc`]) is
//! read into the same operations and goes through the same checks here.

use serde::Deserialize;
use serde_json::value::RawValue;

use std::sync::Arc;

use super::{Op, Operation, Selected, Step, StepKind};
use crate::auth::Caller;
use crate::catalog::{Catalog, Collection};
use crate::error::{Error, ErrorKind, FieldError, MAX_LISTED_ERRORS};
use crate::feature::{
    escape_pointer, parse_body, parse_item, InputLimits, ItemBody, Purpose, Reading, MALFORMED,
};
use crate::geometry::Crs;
use crate::read::filter::{Filter, Lang};
use crate::read::params::offered_crs;
use crate::read::plain_etag;

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow)]
    operations: Vec<&'a RawValue>,
}

/// One operation as featurepipe's format has it (the OGC format's actions
/// are read into the same).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct OpIn<'a> {
    pub op: String,
    pub collection: String,
    #[serde(borrow, default)]
    pub feature: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub features: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub patch: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub ids: Option<Vec<&'a RawValue>>,
    #[serde(default)]
    pub if_match: Option<String>,
    /// Updates and deletes: the features a CQL2 filter selects (an object
    /// in cql2-json, a string in cql2-text).
    #[serde(borrow, default)]
    pub filter: Option<&'a RawValue>,
    /// The filter's language, when not told by its shape.
    #[serde(default, rename = "filter-lang")]
    pub filter_lang: Option<String>,
    /// The CRS of the filter's geometries (CRS84 unless given).
    #[serde(default, rename = "filter-crs")]
    pub filter_crs: Option<String>,
    /// The property an OGC filter names the features by: it must be the key
    /// (checked once the collection is known, at `/key_property`).
    #[serde(skip)]
    pub key_named: Option<String>,
}

/// The body format operations came in, for what differs in reading them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    /// featurepipe's `{"operations": [...]}`.
    Own,
    /// OGC API - Features Part 11 (draft): `{"transaction": [...]}`.
    Ogc,
}

impl Dialect {
    /// The members an operation of `kind` may have.
    fn takes(self, kind: Op) -> &'static [&'static str] {
        match (self, kind) {
            (_, Op::Insert) => &["feature", "features"],
            (_, Op::Replace) => &["id", "feature"],
            (Dialect::Own, Op::Update) => &["id", "patch", "filter"],
            // An OGC filter may select several features to update alike.
            (Dialect::Ogc, Op::Update) => &["id", "ids", "patch", "filter"],
            (_, Op::Delete) => &["id", "ids", "filter"],
        }
    }

    /// How a change says which version of the feature it changes.
    fn precondition(self) -> &'static str {
        match self {
            Dialect::Own => "give \"if_match\"",
            Dialect::Ogc => {
                "the OGC transaction format cannot say it: send featurepipe's own format \
                 (application/json) with \"if_match\""
            }
        }
    }
}

/// Where the parts of an operation are in a body of another format:
/// featurepipe's pointers (`/operations/3/patch/properties/x`) and theirs.
#[derive(Debug, Default)]
pub(super) struct Places(Vec<(String, String)>);

impl Places {
    /// What is at `from` in featurepipe's format is at `to`.
    pub fn add(&mut self, from: String, to: String) {
        self.0.push((from, to));
    }

    /// `pointer` in the body's own terms: by the longest `from` it starts
    /// with (whole segments); unchanged when none.
    pub fn apply(&self, pointer: &str) -> String {
        let place = self
            .0
            .iter()
            .filter(|(from, _)| {
                pointer
                    .strip_prefix(from.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            })
            .max_by_key(|(from, _)| from.len());
        match place {
            Some((from, to)) => format!("{to}{}", &pointer[from.len()..]),
            None => pointer.to_owned(),
        }
    }

    fn relocate(&self, mut e: FieldError) -> FieldError {
        e.pointer = self.apply(&e.pointer);
        e
    }
}

/// One operation read from a body, ready for the checks every format shares.
pub(super) struct Planned<'a> {
    /// What it does.
    pub kind: Op,
    /// Its members.
    pub op: OpIn<'a>,
    /// Where its parts are in the body (none: featurepipe's own pointers).
    pub places: Places,
    /// Why it cannot be carried out, found by the body's reader.
    pub refused: Option<Wrong>,
}

/// Problems found so far, capped like the items endpoint's.
#[derive(Default)]
struct Problems {
    listed: Vec<FieldError>,
    total: usize,
    malformed: bool,
}

impl Problems {
    fn add(&mut self, mut e: FieldError, operation: usize) {
        e.operation = Some(operation);
        self.total += 1;
        self.malformed |= e.code == MALFORMED;
        if self.listed.len() < MAX_LISTED_ERRORS {
            self.listed.push(e);
        }
    }

    fn say(&mut self, operation: usize, pointer: String, code: &str, message: impl Into<String>) {
        let mut e = FieldError::new(0, pointer, code, message);
        e.feature = None;
        self.add(e, operation);
    }

    /// Take over why `operation` cannot be carried out.
    fn wrong(&mut self, wrong: Wrong, operation: usize) {
        match wrong {
            Wrong::Field(pointer, code, message) => self.say(operation, pointer, code, message),
            Wrong::Body(err, at) => self.absorb(err, operation, &at),
        }
    }

    fn merge(&mut self, other: Problems) {
        let unlisted = other.total - other.listed.len();
        for e in other.listed {
            let k = e.operation.unwrap_or_default();
            self.add(e, k);
        }
        self.total += unlisted;
    }

    /// Take over the problems of a Feature or FeatureCollection at `at`.
    fn absorb(&mut self, err: Error, operation: usize, at: &str) {
        if err.errors().is_empty() {
            self.say(operation, at.to_owned(), MALFORMED, err.detail());
            return;
        }
        let unlisted = err.total_errors() - err.errors().len();
        for e in err.errors() {
            let mut e = e.clone();
            e.pointer = format!("{at}{}", e.pointer);
            self.add(e, operation);
        }
        self.total += unlisted;
    }
}

/// Read the session: its operations, expanded into statements in order.
/// With `keep_valid` (skip mode), an operation that does not validate is
/// kept as rejected (not sent) instead of refusing the session; one that is
/// not an operation at all still refuses it.
pub fn parse(
    catalog: (&Catalog, InputLimits),
    caller: &Caller,
    body: &[u8],
    keep_valid: bool,
) -> Result<(Vec<Operation>, Vec<Step>), Error> {
    let body: Body<'_> = serde_json::from_slice(body).map_err(|e| {
        Error::new(
            ErrorKind::InvalidJson,
            format!("the body is not an object with an array \"operations\": {e}"),
        )
    })?;
    let planned = body
        .operations
        .iter()
        .enumerate()
        .map(|(k, raw)| own(k, raw));
    collect(catalog, caller, planned.collect(), keep_valid, Dialect::Own)
}

/// Operation `k` of featurepipe's format, or why it is not an operation.
fn own<'a>(k: usize, raw: &'a RawValue) -> Result<Planned<'a>, Wrong> {
    let at = format!("/operations/{k}");
    let op: OpIn<'_> = serde_json::from_str(raw.get()).map_err(|e| {
        wrong(
            at.clone(),
            MALFORMED,
            format!("not an operation: {}", brief(&e)),
        )
    })?;
    let Some(kind) = Op::from_name(&op.op) else {
        let message = format!(
            "'{}' is not an operation: insert, replace, update or delete",
            op.op
        );
        return Err(wrong(format!("{at}/op"), MALFORMED, message));
    };
    Ok(Planned {
        kind,
        op,
        places: Places::default(),
        refused: None,
    })
}

/// serde's message without its position (the pointer says where).
pub(super) fn brief(e: &serde_json::Error) -> String {
    let message = e.to_string();
    match message.split_once(" at line ") {
        Some((said, _)) => said.to_owned(),
        None => message,
    }
}

/// A problem of an operation at `pointer`, found before any database work.
pub(super) fn wrong(pointer: String, code: &'static str, message: impl Into<String>) -> Wrong {
    Wrong::Field(pointer, code, message.into())
}

/// Check and expand the operations of a body (in either format), in order:
/// the caller's rights, the collection, and each operation's content. An
/// `Err` among `planned` is not an operation at all: it refuses the session
/// even with `keep_valid`; one the reader `refused` is rejected like one
/// that does not validate.
pub(super) fn collect(
    (catalog, limits): (&Catalog, InputLimits),
    caller: &Caller,
    planned: Vec<Result<Planned<'_>, Wrong>>,
    keep_valid: bool,
    dialect: Dialect,
) -> Result<(Vec<Operation>, Vec<Step>), Error> {
    let mut problems = Problems::default();
    let mut operations = Vec::with_capacity(planned.len());
    let mut steps = Vec::new();
    for (k, planned) in planned.into_iter().enumerate() {
        let Planned {
            kind,
            op,
            places,
            refused,
        } = match planned {
            Ok(planned) => planned,
            Err(e) => {
                problems.wrong(e, k);
                continue;
            }
        };
        let at = format!("/operations/{k}");
        // Rights before anything of the operation is looked at: a refusal
        // says nothing of the collection or its columns.
        caller
            .check_write(&op.collection)
            .map_err(|e| forbidden_at(e, places.apply(&format!("{at}/collection")), k))?;
        let first = steps.len();
        let may_read = caller.can_read(&op.collection);
        // A filter reads the features it selects (how many matched, which).
        if op.filter.is_some() {
            caller
                .check_read(&op.collection)
                .map_err(|e| forbidden_at(e, places.apply(&format!("{at}/filter")), k))?;
        }
        let read = match refused {
            Some(refused) => Err(refused),
            None => read((catalog, limits), &op, kind, &at, dialect, &mut steps),
        };
        match read {
            Ok((written_at, indexed)) => operations.push(Operation {
                op: kind,
                collection: op.collection.as_str().into(),
                steps: first..steps.len(),
                at: places.apply(&written_at),
                indexed,
                rejected: None,
                feature: None,
                may_read,
            }),
            Err(err) => {
                steps.truncate(first);
                let mut own = Problems::default();
                own.wrong(err, k);
                own.listed = own.listed.into_iter().map(|e| places.relocate(e)).collect();
                if keep_valid {
                    operations.push(Operation {
                        op: kind,
                        collection: op.collection.as_str().into(),
                        steps: first..first,
                        at: places.apply(&at),
                        indexed: false,
                        rejected: own.listed.into_iter().next().map(Box::new),
                        feature: None,
                        may_read,
                    });
                } else {
                    problems.merge(own);
                }
            }
        }
    }
    if problems.total == 0 {
        return Ok((operations, steps));
    }
    let kind = if problems.malformed {
        ErrorKind::InvalidOperations
    } else {
        ErrorKind::ValidationFailed
    };
    Err(Error::new(
        kind,
        format!(
            "{} problem(s) in the operations; nothing was written",
            problems.total
        ),
    )
    .with_some_errors(problems.listed, problems.total))
}

/// A refusal of the caller's rights, said of operation `k` at `pointer`.
fn forbidden_at(e: Error, pointer: String, k: usize) -> Error {
    let problem = FieldError::new(0, pointer, "forbidden", e.detail());
    e.with_errors(vec![FieldError {
        operation: Some(k),
        feature: None,
        ..problem
    }])
}

/// Why an operation cannot be carried out.
pub(super) enum Wrong {
    /// A problem with the operation itself: pointer, code, message.
    Field(String, &'static str, String),
    /// Problems in its feature(s), reported at this pointer.
    Body(Error, String),
}

fn field(at: &str, member: &str, code: &'static str, message: impl Into<String>) -> Wrong {
    Wrong::Field(format!("{at}{member}"), code, message.into())
}

/// Validate one operation and append its statements; answers what it does,
/// and where in the body its statements' features or ids are (see [`Operation`]).
fn read(
    (catalog, limits): (&Catalog, InputLimits),
    op: &OpIn<'_>,
    kind: Op,
    at: &str,
    dialect: Dialect,
    steps: &mut Vec<Step>,
) -> Result<(String, bool), Wrong> {
    let coll = catalog.get(&op.collection).cloned().ok_or_else(|| {
        field(
            at,
            "/collection",
            "unknown_collection",
            format!("no collection named '{}'", op.collection),
        )
    })?;
    if !coll.is_writable() {
        return Err(field(
            at,
            "/collection",
            "read_only",
            format!("'{}' is read-only", coll.id),
        ));
    }
    if let Some(named) = &op.key_named {
        check_key_named(&coll, named, at)?;
    }
    let how = Reading {
        limits,
        ..Reading::default()
    };
    let if_match = op
        .if_match
        .as_ref()
        .map(|t| vec![plain_etag(t.trim().trim_matches('"')).to_owned()]);
    if coll.precondition_required && kind != Op::Insert && if_match.is_none() {
        return Err(field(
            at,
            "/if_match",
            "precondition_required",
            format!(
                "changes to '{}' must say which version they change: {}",
                coll.id,
                dialect.precondition()
            ),
        ));
    }
    if if_match.is_some() && op.ids.as_ref().is_some_and(|ids| ids.len() > 1) {
        return Err(field(
            at,
            "/if_match",
            MALFORMED,
            "one if_match cannot hold for several features: one delete per id",
        ));
    }
    let allowed = dialect.takes(kind);
    let given = [
        ("feature", op.feature.is_some()),
        ("features", op.features.is_some()),
        ("patch", op.patch.is_some()),
        ("id", op.id.is_some()),
        ("ids", op.ids.is_some()),
        ("filter", op.filter.is_some()),
    ];
    if let Some((name, _)) = given.iter().find(|(n, g)| *g && !allowed.contains(n)) {
        return Err(field(
            at,
            &format!("/{name}"),
            MALFORMED,
            format!("'{}' takes {}, not {name}", op.op, allowed.join(" or ")),
        ));
    }
    if let Some(filter) = op.filter {
        return by_filter(&coll, op, (kind, at), filter, &how, steps);
    }
    match kind {
        Op::Insert => {
            let (raw, member) = match (op.feature, op.features) {
                (Some(f), None) => (f, "/feature"),
                (None, Some(fc)) => (fc, "/features"),
                _ => {
                    return Err(field(
                        at,
                        "",
                        MALFORMED,
                        "an insert takes either \"feature\" or \"features\"",
                    ))
                }
            };
            let parsed = parse_body(raw.get().as_bytes(), &coll, &how)
                .map_err(|e| Wrong::Body(e, format!("{at}{member}")))?;
            if member == "/feature" && !parsed.single {
                return Err(field(
                    at,
                    member,
                    MALFORMED,
                    "\"feature\" takes one Feature; use \"features\" for a FeatureCollection",
                ));
            }
            if member == "/features" && parsed.single {
                return Err(field(
                    at,
                    member,
                    MALFORMED,
                    "\"features\" takes a FeatureCollection; use \"feature\" for one Feature",
                ));
            }
            for row in parsed.rows {
                steps.push(Step {
                    coll: coll.clone(),
                    kind: StepKind::Insert(parsed.shapes[row.shape].clone()),
                    id: None,
                    values: row.values,
                    if_match: None,
                    srid: parsed.srid,
                });
            }
            if member == "/features" {
                return Ok((format!("{at}/features/features"), true));
            }
            Ok((format!("{at}{member}"), false))
        }
        Op::Replace | Op::Update => {
            let (ids, list) = match &op.ids {
                Some(ids) => (keys(ids, at)?, true),
                None => (vec![one_id(op.id, at)?], false),
            };
            let (raw, member, purpose) = match kind {
                Op::Replace => (op.feature, "/feature", Purpose::Replace),
                _ => (op.patch, "/patch", Purpose::Patch),
            };
            let raw = raw.ok_or_else(|| {
                field(
                    at,
                    member,
                    MALFORMED,
                    format!("'{}' needs \"{}\"", op.op, &member[1..]),
                )
            })?;
            let parsed = parse_item(raw.get().as_bytes(), &coll, purpose, &how)
                .map_err(|e| Wrong::Body(e, format!("{at}{member}")))?;
            if let Some(problem) = ids.iter().find_map(|id| parsed.changed_id(&coll, id)) {
                let pointer = format!("{at}{member}{}", problem.pointer);
                return Err(Wrong::Field(pointer, MALFORMED, problem.message));
            }
            let ItemBody {
                columns,
                values,
                crs,
                ..
            } = parsed;
            // Several ids (an OGC filter): the same change to each feature.
            for id in ids {
                steps.push(Step {
                    coll: coll.clone(),
                    kind: match kind {
                        _ if !coll.could_be_key(&id) => StepKind::Missing,
                        Op::Replace => StepKind::Replace(columns.clone()),
                        _ => StepKind::Update(columns.clone()),
                    },
                    id: Some(id),
                    values: values.clone(),
                    if_match: if_match.clone(),
                    srid: crs.srid,
                });
            }
            if list {
                return Ok((format!("{at}/ids"), true));
            }
            Ok((format!("{at}{member}"), false))
        }
        Op::Delete => {
            let (ids, list) = match (op.id, &op.ids) {
                (Some(id), None) => (vec![one_id(Some(id), at)?], false),
                (None, Some(ids)) if !ids.is_empty() => (keys(ids, at)?, true),
                _ => {
                    return Err(field(
                        at,
                        "",
                        MALFORMED,
                        "a delete takes \"id\" or a non-empty array \"ids\"",
                    ))
                }
            };
            for id in ids {
                steps.push(Step {
                    coll: coll.clone(),
                    kind: if coll.could_be_key(&id) {
                        StepKind::Delete
                    } else {
                        StepKind::Missing
                    },
                    id: Some(id),
                    values: Vec::new(),
                    if_match: if_match.clone(),
                    srid: how.crs.srid,
                });
            }
            if list {
                Ok((format!("{at}/ids"), true))
            } else {
                Ok((format!("{at}/id"), false))
            }
        }
    }
}

/// An update or delete of every feature `filter` selects: one statement,
/// whose condition the filter is (see [`crate::read::filter`]).
fn by_filter(
    coll: &Arc<Collection>,
    op: &OpIn<'_>,
    (kind, at): (Op, &str),
    filter: &RawValue,
    how: &Reading,
    steps: &mut Vec<Step>,
) -> Result<(String, bool), Wrong> {
    let wrong_filter = |member: &str, message: String| field(at, member, "invalid_filter", message);
    if op.id.is_some() || op.ids.is_some() {
        let message =
            "an operation selects its features by \"id\", \"ids\" or \"filter\", not both";
        return Err(field(at, "/filter", MALFORMED, message));
    }
    if op.if_match.is_some() {
        let message = "one if_match cannot hold for the features a filter selects";
        return Err(field(at, "/if_match", MALFORMED, message));
    }
    let text = filter.get();
    let lang = match (op.filter_lang.as_deref(), text.starts_with('"')) {
        (None | Some("cql2-text"), true) => Lang::Text,
        (None | Some("cql2-json"), false) => Lang::Json,
        (Some(lang @ ("cql2-text" | "cql2-json")), _) => {
            let message = format!("filter-lang is {lang}, and the filter is not");
            return Err(wrong_filter("/filter-lang", message));
        }
        (Some(other), _) => {
            let message = format!("'{other}' is not a filter language: cql2-text or cql2-json");
            return Err(wrong_filter("/filter-lang", message));
        }
    };
    let given = match lang {
        Lang::Text => serde_json::from_str::<String>(text).unwrap_or_default(),
        Lang::Json => text.to_owned(),
    };
    let crs = match &op.filter_crs {
        Some(uri) => offered_crs(coll, "filter-crs", uri)
            .map_err(|e| wrong_filter("/filter-crs", e.detail().to_owned()))?
            .clone(),
        None => Crs::crs84(),
    };
    let filter = Filter::parse(coll, &given, lang, &crs, op.filter_crs.clone()).map_err(|e| {
        // Said of the query parameter on items; here, of the member.
        let detail = e.detail();
        let detail = detail
            .strip_prefix("query parameter 'filter': ")
            .unwrap_or(detail);
        wrong_filter("/filter", detail.to_owned())
    })?;
    let (columns, values, srid, written_at) = match kind {
        Op::Update => {
            let raw = op
                .patch
                .ok_or_else(|| field(at, "/patch", MALFORMED, "'update' needs \"patch\""))?;
            let parsed = parse_item(raw.get().as_bytes(), coll, Purpose::Patch, how)
                .map_err(|e| Wrong::Body(e, format!("{at}/patch")))?;
            let key_given = match (&parsed.id, coll.primary_key) {
                (Some(_), _) => Some("/patch/id".to_owned()),
                (None, Some(pk))
                    if parsed.key_property.is_some() || parsed.columns.contains(&pk) =>
                {
                    Some(format!(
                        "/patch/properties/{}",
                        escape_pointer(&coll.columns[pk].name)
                    ))
                }
                _ => None,
            };
            if let Some(member) = key_given {
                let message =
                    "an update by filter cannot give every feature it selects the same key";
                return Err(field(at, &member, MALFORMED, message));
            }
            let srid = parsed.crs.srid;
            (
                Some(parsed.columns),
                parsed.values,
                srid,
                format!("{at}/patch"),
            )
        }
        Op::Delete => (None, Vec::new(), how.crs.srid, format!("{at}/filter")),
        Op::Insert | Op::Replace => {
            let message = format!("'{}' does not select features by a filter", op.op);
            return Err(field(at, "/filter", MALFORMED, message));
        }
    };
    let (condition, bound) = filter.sql(values.len() + 1);
    let selected = Box::new(Selected {
        condition,
        values: bound,
    });
    steps.push(Step {
        coll: coll.clone(),
        kind: match columns {
            Some(columns) => StepKind::UpdateWhere(columns, selected),
            None => StepKind::DeleteWhere(selected),
        },
        id: None,
        values,
        if_match: None,
        srid,
    });
    Ok((written_at, false))
}

/// An id (string or number), as text.
fn key_text(raw: &RawValue, pointer: &str) -> Result<String, Wrong> {
    let text = raw.get();
    let id = if text.starts_with('"') {
        serde_json::from_str(text).ok()
    } else if text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        Some(text.to_owned())
    } else {
        None
    };
    let id = id.ok_or_else(|| {
        Wrong::Field(
            pointer.to_owned(),
            MALFORMED,
            "a feature id is a string or a number".into(),
        )
    })?;
    Ok(id)
}

/// The ids of a list at `{at}/ids`, as text.
fn keys(ids: &[&RawValue], at: &str) -> Result<Vec<String>, Wrong> {
    ids.iter()
        .enumerate()
        .map(|(i, raw)| key_text(raw, &format!("{at}/ids/{i}")))
        .collect()
}

/// Whether `named` names the key: the key column, or `id` (the GeoJSON
/// member) unless a column other than the key is called so (a column of a
/// key of several is part of the id: `id` names the feature's whole id).
pub(super) fn names_key(coll: &Collection, named: &str) -> bool {
    let key = coll.primary_key.map(|pk| coll.columns[pk].name.as_str());
    let id_free = (coll.column_index("id")).is_none_or(|ci| coll.composite_key.contains(&ci));
    Some(named) == key || (named == "id" && id_free)
}

/// A filter that names features by `named`, which must be the key.
fn check_key_named(coll: &Collection, named: &str, at: &str) -> Result<(), Wrong> {
    if names_key(coll, named) {
        return Ok(());
    }
    let key = coll.primary_key.map(|pk| coll.columns[pk].name.as_str());
    Err(field(
        at,
        "/key_property",
        "unsupported_filter",
        format!(
            "features are selected by their key ('{}' or 'id'), not by '{named}'",
            key.unwrap_or("id")
        ),
    ))
}

fn one_id(raw: Option<&RawValue>, at: &str) -> Result<String, Wrong> {
    let raw = raw.ok_or_else(|| field(at, "/id", MALFORMED, "the operation needs an \"id\""))?;
    key_text(raw, &format!("{at}/id"))
}
