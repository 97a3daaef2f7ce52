//! OGC API - Features - Part 11 (draft): a transaction in the JSON encoding
//! (`application/ogc-tx+json`, as ldproxy takes it), read into the edit
//! session's operations, so that it is checked, written and reported like
//! featurepipe's own format.
//!
//! `semantic` `atomic` is the `atomic` mode; `batch` (each action on its
//! own, failures reported) is the `skip` mode. Each action is one operation:
//! `insert` with `items` (GeoJSON Features); `replace` with `feature` (or the
//! draft schema's `properties.feature`); `update` with `properties` (`add`,
//! `modify`, `delete`); `replace`, `update` and `delete` select their
//! features with a `filter` by id (see [`filter`]), a replace also by its
//! feature's `id`. Pointers in problems are into this body
//! (`/transaction/3/items/1/properties/x`).

mod filter;
pub mod report;
mod update;

use serde::Deserialize;
use serde_json::value::RawValue;

use report::Semantic;

use super::input::{brief, collect, names_key, wrong, Dialect, OpIn, Places, Planned, Wrong};
use super::{Mode, Op, Operation, Step};
use crate::auth::Caller;
use crate::catalog::Catalog;
use crate::error::{Error, ErrorKind};
use crate::feature::{InputLimits, MALFORMED};

/// The media type of the format.
pub const MEDIA_TYPE: &str = "application/ogc-tx+json";

/// A transaction, read and checked.
#[derive(Debug)]
pub struct Transaction {
    /// How it commits: `atomic` or, for `semantic: batch`, `skip`.
    pub mode: Mode,
    /// Its actions, as operations in order.
    pub operations: Vec<Operation>,
    /// Their statements.
    pub steps: Vec<Step>,
    /// Each action's `id`, which its exceptions repeat.
    pub action_ids: Vec<Option<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    #[serde(default)]
    semantic: Semantic,
    #[serde(borrow)]
    transaction: Vec<&'a RawValue>,
    // Said of the transaction, and not kept; read to be refused when not strings.
    #[serde(default, rename = "id")]
    _id: Option<String>,
    #[serde(default, rename = "title")]
    _title: Option<String>,
    #[serde(default, rename = "description")]
    _description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionIn<'a> {
    action: String,
    collection: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default, rename = "title")]
    _title: Option<String>,
    #[serde(default, rename = "description")]
    _description: Option<String>,
    #[serde(borrow, default)]
    items: Option<&'a RawValue>,
    #[serde(borrow, default)]
    feature: Option<&'a RawValue>,
    #[serde(borrow, default)]
    properties: Option<&'a RawValue>,
    #[serde(borrow, default)]
    filter: Option<&'a RawValue>,
    #[serde(default, rename = "filter-lang")]
    filter_lang: Option<String>,
    #[serde(default, rename = "filter-crs")]
    filter_crs: Option<String>,
}

/// The draft schema's replace: `properties: {"feature": …}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wrapped<'a> {
    #[serde(borrow)]
    feature: &'a RawValue,
}

/// Just a feature's `id`.
#[derive(Deserialize)]
struct IdOf<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
}

/// An action, read: an operation in featurepipe's terms, with a body made
/// for it (an insert's FeatureCollection, an update's merge patch), or why
/// it cannot be carried out.
struct Action<'a> {
    kind: Op,
    op: OpIn<'a>,
    made: Option<String>,
    places: Places,
    refused: Option<Wrong>,
}

/// Read the transaction in `body` and check every action, as
/// [`super::input::parse`] does featurepipe's format.
pub fn parse(
    catalog: (&Catalog, InputLimits),
    caller: &Caller,
    body: &[u8],
) -> Result<Transaction, Error> {
    let envelope: Envelope<'_> = serde_json::from_slice(body).map_err(|e| {
        Error::new(
            ErrorKind::InvalidJson,
            format!(
                "the body is not an OGC transaction (an object with an array \"transaction\"): {e}"
            ),
        )
    })?;
    let mut action_ids = Vec::with_capacity(envelope.transaction.len());
    let mut actions: Vec<Result<Action<'_>, Wrong>> = envelope
        .transaction
        .iter()
        .enumerate()
        .map(|(k, raw)| {
            let (action, id) = action(catalog.0, k, raw);
            action_ids.push(id);
            action
        })
        .collect();
    // The bodies made for actions, which their operations borrow.
    let made: Vec<Option<Box<RawValue>>> = actions
        .iter_mut()
        .map(|a| {
            let text = a.as_mut().ok()?.made.take()?;
            RawValue::from_string(text).ok()
        })
        .collect();
    let planned = actions
        .into_iter()
        .zip(&made)
        .map(|(action, made)| {
            let Action {
                kind,
                mut op,
                places,
                refused,
                ..
            } = action?;
            match kind {
                Op::Insert => op.features = made.as_deref(),
                Op::Update => op.patch = made.as_deref(),
                Op::Replace | Op::Delete => {}
            }
            Ok(Planned {
                kind,
                op,
                places,
                refused,
            })
        })
        .collect();
    let mode = envelope.semantic.mode();
    let (operations, steps) = collect(catalog, caller, planned, mode == Mode::Skip, Dialect::Ogc)?;
    Ok(Transaction {
        mode,
        operations,
        steps,
        action_ids,
    })
}

/// Action `k` (or why it is not one), and its `id`.
fn action<'a>(
    catalog: &Catalog,
    k: usize,
    raw: &'a RawValue,
) -> (Result<Action<'a>, Wrong>, Option<String>) {
    let at = format!("/transaction/{k}");
    let input: ActionIn<'_> = match serde_json::from_str(raw.get()) {
        Ok(input) => input,
        Err(e) => {
            let message = format!("not an action: {}", brief(&e));
            return (Err(wrong(at, MALFORMED, message)), None);
        }
    };
    let Some(kind) = Op::from_name(&input.action) else {
        let message = format!(
            "'{}' is not an action: insert, replace, update or delete",
            input.action
        );
        return (
            Err(wrong(format!("{at}/action"), MALFORMED, message)),
            input.id,
        );
    };
    let op_at = format!("/operations/{k}");
    let mut places = Places::default();
    places.add(op_at.clone(), at.clone());
    // The precondition a collection may require: said of the action.
    places.add(format!("{op_at}/if_match"), at.clone());
    let mut op = OpIn {
        op: input.action.clone(),
        collection: input.collection.clone(),
        ..OpIn::default()
    };
    // Problems from here on are the action's: with `batch`, it is skipped.
    let (made, refused) = match read(catalog, &input, kind, (&at, &op_at), &mut op, &mut places) {
        Ok(made) => (made, None),
        Err(refused) => (None, Some(refused)),
    };
    let action = Action {
        kind,
        op,
        made,
        places,
        refused,
    };
    (Ok(action), input.id)
}

/// Read the action's members into `op` (at `op_at` in featurepipe's terms),
/// and where they are into `places`; the body made for it, if any.
fn read<'a>(
    catalog: &Catalog,
    input: &ActionIn<'a>,
    kind: Op,
    (at, op_at): (&str, &str),
    op: &mut OpIn<'a>,
    places: &mut Places,
) -> Result<Option<String>, Wrong> {
    check_members(input, kind, at)?;
    let mut made = None;
    match kind {
        Op::Insert => {
            let items = needed(input.items, "items", &input.action, at)?;
            if !items.get().starts_with('[') {
                let message = "\"items\" is an array of GeoJSON Features";
                return Err(wrong(format!("{at}/items"), MALFORMED, message));
            }
            made = Some(format!(
                "{{\"type\":\"FeatureCollection\",\"features\":{}}}",
                items.get()
            ));
            places.add(format!("{op_at}/features"), format!("{at}/items"));
            places.add(format!("{op_at}/features/features"), format!("{at}/items"));
        }
        Op::Replace => {
            let (feature, feature_at) = match (input.feature, input.properties) {
                (Some(feature), None) => (feature, format!("{at}/feature")),
                (None, Some(properties)) => {
                    let wrapped: Wrapped<'_> =
                        serde_json::from_str(properties.get()).map_err(|e| {
                            let message = format!("not {{\"feature\": …}}: {}", brief(&e));
                            wrong(format!("{at}/properties"), MALFORMED, message)
                        })?;
                    (wrapped.feature, format!("{at}/properties/feature"))
                }
                _ => {
                    let message =
                        "a replace takes \"feature\" (or \"properties\": {\"feature\": …})";
                    return Err(wrong(at.to_owned(), MALFORMED, message));
                }
            };
            places.add(format!("{op_at}/feature"), feature_at.clone());
            op.feature = Some(feature);
            match input.filter {
                Some(filter) => select((catalog, input, filter), kind, (at, op_at), op, places)?,
                None => {
                    let id_of: IdOf<'_> = serde_json::from_str(feature.get()).map_err(|_| {
                        wrong(
                            feature_at.clone(),
                            MALFORMED,
                            "a replace takes a GeoJSON Feature",
                        )
                    })?;
                    let message =
                        "a replace names its feature by a \"filter\" or the feature's \"id\"";
                    let id = id_of
                        .id
                        .ok_or_else(|| wrong(at.to_owned(), MALFORMED, message))?;
                    op.id = Some(id);
                    places.add(format!("{op_at}/id"), format!("{feature_at}/id"));
                }
            }
        }
        Op::Update => {
            let properties = needed(input.properties, "properties", &input.action, at)?;
            let filter = needed(input.filter, "filter", &input.action, at)?;
            select((catalog, input, filter), kind, (at, op_at), op, places)?;
            let at = format!("{at}/properties");
            made = Some(update::merge_patch(properties, &at, op_at, places)?);
        }
        Op::Delete => {
            let filter = needed(input.filter, "filter", &input.action, at)?;
            select((catalog, input, filter), kind, (at, op_at), op, places)?;
        }
    }
    Ok(made)
}

/// Refuse members the action does not take.
fn check_members(input: &ActionIn<'_>, kind: Op, at: &str) -> Result<(), Wrong> {
    let takes: &[&str] = match kind {
        Op::Insert => &["items"],
        Op::Replace => &["feature", "properties", "filter", "filter-lang"],
        Op::Update => &["properties", "filter", "filter-lang"],
        Op::Delete => &["filter", "filter-lang"],
    };
    let given = [
        ("items", input.items.is_some()),
        ("feature", input.feature.is_some()),
        ("properties", input.properties.is_some()),
        ("filter", input.filter.is_some()),
        ("filter-lang", input.filter_lang.is_some()),
    ];
    match given
        .iter()
        .find(|(name, given)| *given && !takes.contains(name))
    {
        Some((name, _)) => Err(wrong(
            format!("{at}/{name}"),
            MALFORMED,
            format!(
                "'{}' takes {}, not {name}",
                input.action,
                takes.join(" or ")
            ),
        )),
        None => Ok(()),
    }
}

/// The member `name` an `action` cannot do without.
fn needed<'a>(
    member: Option<&'a RawValue>,
    name: &str,
    action: &str,
    at: &str,
) -> Result<&'a RawValue, Wrong> {
    member.ok_or_else(|| {
        let message = format!("'{action}' needs \"{name}\"");
        wrong(at.to_owned(), MALFORMED, message)
    })
}

/// The features `filter` selects: as the operation's `id` or `ids` when it
/// names them by key; else, for an update or a delete, every feature the
/// CQL2 filter matches (an edit by filter, `op.filter`).
fn select<'a>(
    (catalog, input, filter): (&Catalog, &ActionIn<'a>, &'a RawValue),
    kind: Op,
    (at, op_at): (&str, &str),
    op: &mut OpIn<'a>,
    places: &mut Places,
) -> Result<(), Wrong> {
    let lang = (input.filter_lang.as_deref(), format!("{at}/filter-lang"));
    let by_id = filter::select(filter, lang, &format!("{at}/filter"));
    // `{"ids": …}`, or a collection refused later, is by id.
    let keyed = |s: &filter::Selection<'_>| match (&s.named, catalog.get(&input.collection)) {
        (Some((named, _)), Some(coll)) => names_key(coll, named),
        _ => true,
    };
    let selection = match by_id {
        Ok(selection) if kind == Op::Replace || keyed(&selection) => selection,
        Err(e) if kind == Op::Replace => return Err(e),
        _ => {
            op.filter = Some(filter);
            op.filter_lang.clone_from(&input.filter_lang);
            op.filter_crs.clone_from(&input.filter_crs);
            for member in ["filter", "filter-lang", "filter-crs"] {
                places.add(format!("{op_at}/{member}"), format!("{at}/{member}"));
            }
            return Ok(());
        }
    };
    if let Some((named, named_at)) = selection.named {
        op.key_named = Some(named);
        places.add(format!("{op_at}/key_property"), named_at);
    }
    match (selection.list, kind) {
        (true, Op::Replace) if selection.ids.len() != 1 => {
            let message = "a replace selects one feature";
            return Err(wrong(selection.at, "unsupported_filter", message));
        }
        (true, Op::Replace) => {
            op.id = Some(selection.ids[0]);
            places.add(format!("{op_at}/id"), format!("{}/0", selection.at));
        }
        (true, _) => {
            op.ids = Some(selection.ids);
            places.add(format!("{op_at}/ids"), selection.at);
        }
        (false, _) => {
            op.id = Some(selection.ids[0]);
            places.add(format!("{op_at}/id"), selection.at);
        }
    }
    Ok(())
}
