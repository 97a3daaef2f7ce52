//! An OGC `update` action's `properties` (`add`, `modify`, `delete`: names
//! and values) as the JSON merge patch featurepipe's update takes. `add` and
//! `modify` set a property, `delete` sets it to null; `geometry` is the
//! feature's geometry.

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::Places;
use crate::feature::{escape_pointer, MALFORMED};
use crate::session::input::{brief, wrong, Wrong};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangesIn<'a> {
    #[serde(borrow, default)]
    add: Vec<&'a RawValue>,
    #[serde(borrow, default)]
    modify: Vec<&'a RawValue>,
    #[serde(borrow, default)]
    delete: Vec<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameValue<'a> {
    name: String,
    #[serde(borrow)]
    value: &'a RawValue,
}

/// The merge patch `properties` (at `at`) stands for; `places` learns where
/// each of its members came from (`op_at`: the operation in featurepipe's terms).
pub fn merge_patch(
    properties: &RawValue,
    at: &str,
    op_at: &str,
    places: &mut Places,
) -> Result<String, Wrong> {
    let changes: ChangesIn<'_> = serde_json::from_str(properties.get()).map_err(|e| {
        let message = format!("not the changes of an update: {}", brief(&e));
        wrong(at.to_owned(), MALFORMED, message)
    })?;
    let mut set: Vec<(String, &str, String)> = Vec::new();
    for (bucket, entries) in [("add", &changes.add), ("modify", &changes.modify)] {
        for (j, raw) in entries.iter().enumerate() {
            let entry_at = format!("{at}/{bucket}/{j}");
            let entry: NameValue<'_> = serde_json::from_str(raw.get()).map_err(|e| {
                let message = format!("not a name and a value: {}", brief(&e));
                wrong(entry_at.clone(), MALFORMED, message)
            })?;
            set.push((entry.name, entry.value.get(), format!("{entry_at}/value")));
        }
    }
    for (j, raw) in changes.delete.iter().enumerate() {
        let entry_at = format!("{at}/delete/{j}");
        let name: String = serde_json::from_str(raw.get()).map_err(|_| {
            wrong(
                entry_at.clone(),
                MALFORMED,
                "a property to delete is named by a string",
            )
        })?;
        set.push((name, "null", entry_at));
    }
    if set.is_empty() {
        let message = "an update changes at least one property: give add, modify or delete";
        return Err(wrong(at.to_owned(), MALFORMED, message));
    }
    places.add(format!("{op_at}/patch"), at.to_owned());
    let mut seen = HashSet::new();
    let mut members = Vec::new();
    let mut geometry = None;
    for (name, value, value_at) in set {
        if !seen.insert(name.clone()) {
            let message = format!("'{name}' is changed twice in one update");
            return Err(wrong(value_at, MALFORMED, message));
        }
        if name == "geometry" {
            places.add(format!("{op_at}/patch/geometry"), value_at);
            geometry = Some(value);
            continue;
        }
        places.add(
            format!("{op_at}/patch/properties/{}", escape_pointer(&name)),
            value_at,
        );
        let key = serde_json::to_string(&name).expect("a string serializes");
        members.push(format!("{key}:{value}"));
    }
    let mut patch = format!("{{\"properties\":{{{}}}", members.join(","));
    if let Some(geometry) = geometry {
        patch.push_str(",\"geometry\":");
        patch.push_str(geometry);
    }
    patch.push('}');
    Ok(patch)
}
