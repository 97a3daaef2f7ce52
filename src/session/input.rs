//! The body of `POST /transactions`: every operation is read and validated
//! before any database work, with the items endpoint's error reports and
//! pointers into the operations array.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Op, Operation, Step, StepKind};
use crate::auth::Caller;
use crate::catalog::Catalog;
use crate::error::{Error, ErrorKind, FieldError, MAX_LISTED_ERRORS};
use crate::feature::{parse_body, parse_item, InputLimits, ItemBody, Purpose, Reading, MALFORMED};
use crate::read::plain_etag;

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow)]
    operations: Vec<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpIn<'a> {
    op: String,
    collection: String,
    #[serde(borrow, default)]
    feature: Option<&'a RawValue>,
    #[serde(borrow, default)]
    features: Option<&'a RawValue>,
    #[serde(borrow, default)]
    patch: Option<&'a RawValue>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    ids: Option<Vec<&'a RawValue>>,
    #[serde(default)]
    if_match: Option<String>,
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
    (catalog, limits): (&Catalog, InputLimits),
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
    let mut problems = Problems::default();
    let mut operations = Vec::with_capacity(body.operations.len());
    let mut steps = Vec::new();
    for (k, raw) in body.operations.iter().enumerate() {
        let at = format!("/operations/{k}");
        let op: OpIn<'_> = match serde_json::from_str(raw.get()) {
            Ok(op) => op,
            Err(e) => {
                let message = e.to_string();
                let message = message.split(" at line ").next().unwrap_or(&message);
                problems.say(k, at, MALFORMED, format!("not an operation: {message}"));
                continue;
            }
        };
        let Some(kind) = Op::from_name(&op.op) else {
            let message = format!(
                "'{}' is not an operation: insert, replace, update or delete",
                op.op
            );
            problems.say(k, format!("{at}/op"), MALFORMED, message);
            continue;
        };
        // Rights before anything of the operation is looked at: a refusal
        // says nothing of the collection or its columns.
        caller.check_write(&op.collection).map_err(|e| {
            let problem = FieldError::new(0, format!("{at}/collection"), "forbidden", e.detail());
            e.with_errors(vec![FieldError {
                operation: Some(k),
                feature: None,
                ..problem
            }])
        })?;
        let first = steps.len();
        let may_read = caller.can_read(&op.collection);
        match read((catalog, limits), &op, kind, &at, &mut steps) {
            Ok((at, indexed)) => operations.push(Operation {
                op: kind,
                collection: op.collection.clone(),
                steps: first..steps.len(),
                at,
                indexed,
                rejected: None,
                feature: None,
                may_read,
            }),
            Err(err) => {
                steps.truncate(first);
                let mut own = Problems::default();
                match err {
                    Wrong::Field(pointer, code, message) => own.say(k, pointer, code, message),
                    Wrong::Body(err, at) => own.absorb(err, k, &at),
                }
                if keep_valid {
                    operations.push(Operation {
                        op: kind,
                        collection: op.collection.clone(),
                        steps: first..first,
                        at,
                        indexed: false,
                        rejected: own.listed.into_iter().next(),
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

/// Why an operation cannot be carried out.
enum Wrong {
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
                "changes to '{}' must say which version they change: give \"if_match\"",
                coll.id
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
    let allowed: &[&str] = match kind {
        Op::Insert => &["feature", "features"],
        Op::Replace => &["id", "feature"],
        Op::Update => &["id", "patch"],
        Op::Delete => &["id", "ids"],
    };
    let given = [
        ("feature", op.feature.is_some()),
        ("features", op.features.is_some()),
        ("patch", op.patch.is_some()),
        ("id", op.id.is_some()),
        ("ids", op.ids.is_some()),
    ];
    if let Some((name, _)) = given.iter().find(|(n, g)| *g && !allowed.contains(n)) {
        return Err(field(
            at,
            &format!("/{name}"),
            MALFORMED,
            format!("'{}' takes {}, not {name}", op.op, allowed.join(" or ")),
        ));
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
                    srid: how.crs.srid,
                });
            }
            if member == "/features" {
                return Ok((format!("{at}/features/features"), true));
            }
            Ok((format!("{at}{member}"), false))
        }
        Op::Replace | Op::Update => {
            let id = one_id(op.id, at)?;
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
            if let Some(problem) = parsed.changed_id(&coll, &id) {
                let pointer = format!("{at}{member}{}", problem.pointer);
                return Err(Wrong::Field(pointer, MALFORMED, problem.message));
            }
            let ItemBody {
                columns, values, ..
            } = parsed;
            steps.push(Step {
                coll: coll.clone(),
                kind: match kind {
                    _ if !coll.could_be_key(&id) => StepKind::Missing,
                    Op::Replace => StepKind::Replace(columns),
                    _ => StepKind::Update(columns),
                },
                id: Some(id),
                values,
                if_match,
                srid: how.crs.srid,
            });
            Ok((format!("{at}{member}"), false))
        }
        Op::Delete => {
            let (ids, list) = match (op.id, &op.ids) {
                (Some(id), None) => (vec![one_id(Some(id), at)?], false),
                (None, Some(ids)) if !ids.is_empty() => (
                    ids.iter()
                        .enumerate()
                        .map(|(i, raw)| key_text(raw, &format!("{at}/ids/{i}")))
                        .collect::<Result<_, _>>()?,
                    true,
                ),
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

fn one_id(raw: Option<&RawValue>, at: &str) -> Result<String, Wrong> {
    let raw = raw.ok_or_else(|| field(at, "/id", MALFORMED, "the operation needs an \"id\""))?;
    key_text(raw, &format!("{at}/id"))
}
