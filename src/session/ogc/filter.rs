//! The `filter` of an OGC action, as far as featurepipe takes it: CQL2 JSON
//! that selects features by id (`=` or `in` on the id property), or the
//! draft example's `{"ids": [...]}`. Anything else is refused, since a
//! session's statements each name one feature by its key.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::session::input::{brief, wrong, Wrong};

const UNSUPPORTED: &str = "unsupported_filter";

/// The features a filter selects.
pub struct Selection<'a> {
    /// Their ids, as given (strings or numbers).
    pub ids: Vec<&'a RawValue>,
    /// Pointer of the id (`=`) or of the list of ids (`in`, `ids`).
    pub at: String,
    /// The ids came as a list.
    pub list: bool,
    /// The property the filter names them by, and where it says so.
    pub named: Option<(String, String)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilterIn<'a> {
    #[serde(default)]
    op: Option<String>,
    #[serde(borrow, default)]
    args: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    ids: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PropertyIn {
    property: String,
}

/// Read `filter` (at `at`) in `lang` (`filter-lang`, at `lang_at`).
pub fn select<'a>(
    filter: &'a RawValue,
    (lang, lang_at): (Option<&str>, String),
    at: &str,
) -> Result<Selection<'a>, Wrong> {
    if let Some(lang) = lang.filter(|l| *l != "cql2-json") {
        return Err(unsupported(
            lang_at,
            format!("filter-lang '{lang}' is not supported: give the filter as cql2-json"),
        ));
    }
    if filter.get().starts_with('"') {
        let message = "a cql2-text filter is not supported: give the filter as cql2-json";
        return Err(unsupported(at.to_owned(), message));
    }
    let parsed: FilterIn<'_> = serde_json::from_str(filter.get())
        .map_err(|e| unsupported(at.to_owned(), format!("not a filter by id: {}", brief(&e))))?;
    match parsed {
        FilterIn {
            ids: Some(ids),
            op: None,
            args: None,
        } => nonempty(Selection {
            ids,
            at: format!("{at}/ids"),
            list: true,
            named: None,
        }),
        FilterIn {
            op: Some(op),
            args: Some(args),
            ids: None,
        } if (op == "=" || op == "in") && args.len() == 2 => {
            let property: PropertyIn = serde_json::from_str(args[0].get()).map_err(|_| {
                let message = "the first argument names the id property: {\"property\": \"id\"}";
                unsupported(format!("{at}/args/0"), message)
            })?;
            let named = Some((property.property, format!("{at}/args/0/property")));
            let at = format!("{at}/args/1");
            if op == "=" {
                return Ok(Selection {
                    ids: vec![args[1]],
                    at,
                    list: false,
                    named,
                });
            }
            let ids = serde_json::from_str(args[1].get())
                .map_err(|_| unsupported(at.clone(), "'in' takes an array of ids"))?;
            nonempty(Selection {
                ids,
                at,
                list: true,
                named,
            })
        }
        FilterIn { op: Some(op), .. } => Err(unsupported(
            format!("{at}/op"),
            format!(
                "'{op}' is not supported: features are selected by id, \
                 {{\"op\": \"=\" or \"in\", \"args\": [{{\"property\": \"id\"}}, …]}}"
            ),
        )),
        _ => Err(unsupported(
            at.to_owned(),
            "not a filter by id: {\"op\": \"=\" or \"in\", \"args\": [{\"property\": \"id\"}, …]}",
        )),
    }
}

fn nonempty(selection: Selection<'_>) -> Result<Selection<'_>, Wrong> {
    if selection.ids.is_empty() {
        return Err(unsupported(selection.at, "the filter selects no feature"));
    }
    Ok(selection)
}

fn unsupported(pointer: String, message: impl Into<String>) -> Wrong {
    wrong(pointer, UNSUPPORTED, message)
}
