//! JSON-FG on reads: asked for with `f=jsonfg`, or with an `Accept` that
//! rates `application/fg+json` above GeoJSON, JSON and HTML; the members a
//! JSON-FG document has at its root, and the links between the formats.

use axum::http::HeaderMap;
use serde_json::{json, Value};

use super::html::format::{accept_prefers, with_f, with_format, Format, HTML_TYPES, JSON_TYPES};
use super::links::BaseUrl;
use super::model::Link;
use super::problem::{ApiError, Wrong};
use super::profile::{self, Profile};
use super::representation::{item_path, GEOJSON};
use crate::catalog::Collection;
use crate::feature::jsonfg::{feature_type, CORE, TYPES_SCHEMAS};
use crate::geometry::Crs;
use crate::read::params::percent_encode;
use crate::read::{Encoding, StoredFeature};

pub use crate::feature::jsonfg::MEDIA_TYPE;

/// The value of `f` that asks for JSON-FG.
pub const F: &str = "jsonfg";

/// Whether the request asks for JSON-FG; `f=jsonfg` is taken out of `pairs`.
pub fn asked(pairs: &mut Vec<(String, String)>, headers: &HeaderMap) -> Result<bool, ApiError> {
    let formats = pairs.iter().filter(|(name, _)| name == "f").count();
    if !pairs.iter().any(|(name, value)| name == "f" && value == F) {
        let media_type = [("application", "fg+json")];
        let others = [&JSON_TYPES[..], &HTML_TYPES[..]];
        return Ok(formats == 0 && accept_prefers(headers, &media_type, &others));
    }
    if formats > 1 {
        return Err(ApiError::new(
            Wrong::InvalidParameter,
            "query parameter 'f': given more than once",
        ));
    }
    pairs.retain(|(name, _)| name != "f");
    Ok(true)
}

/// How a read of features is answered, from `f`, `profile` and `Accept`.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    /// JSON (GeoJSON or JSON-FG) or HTML.
    pub format: Format,
    /// The features are JSON-FG.
    pub jsonfg: bool,
    /// The media type of a JSON answer: JSON-FG asked for by `f=jsonfg` or
    /// `Accept: application/fg+json` keeps JSON-FG's own; by a profile, it
    /// is GeoJSON's, as JSON-FG 1.0 has it.
    pub media_type: &'static str,
    /// The profile a JSON answer keeps to, said in its `Link` header and
    /// its links: the one asked for, else `jsonfg` or `rfc7946`.
    pub profile: Profile,
}

/// The answer the request asks for; `f` and `profile` are taken out of `pairs`.
pub fn negotiate(
    pairs: &mut Vec<(String, String)>,
    headers: &HeaderMap,
) -> Result<Answer, ApiError> {
    let profile = profile::asked(pairs)?;
    let f_jsonfg = pairs.iter().any(|(name, value)| name == "f" && value == F);
    if f_jsonfg && profile == Some(Profile::Rfc7946) {
        let message = "query parameters 'f' and 'profile': f=jsonfg is not the rfc7946 profile";
        return Err(ApiError::new(Wrong::InvalidParameter, message));
    }
    let own_type = asked(pairs, headers)?;
    let format = match own_type {
        true => Format::Json,
        false => Format::negotiate(pairs, headers)?,
    };
    let jsonfg = format == Format::Json && profile.map_or(own_type, Profile::is_jsonfg);
    let media_type = match (jsonfg, own_type) {
        (true, true) => MEDIA_TYPE,
        _ => GEOJSON,
    };
    let profile = profile.unwrap_or(Profile::default_for(jsonfg));
    Ok(Answer {
        format,
        jsonfg,
        media_type,
        profile,
    })
}

impl Answer {
    /// `path` (which may carry a query) asking for this answer again: a
    /// paging link stays in the format and the profile answered.
    pub fn path(&self, path: &str) -> String {
        match (self.format, self.jsonfg, self.media_type) {
            (Format::Html, ..) => with_format(path, Format::Html),
            (_, true, MEDIA_TYPE) => with_f(path, F),
            (_, true, _) => {
                let joint = if path.contains('?') { '&' } else { '?' };
                format!("{path}{joint}profile={}", self.profile.token())
            }
            _ => path.to_owned(),
        }
    }

    /// Say the profile in `response`'s `Link` header (and the JSON-FG media
    /// type asked for), unless it is a page.
    pub fn apply(&self, response: &mut axum::response::Response) {
        if self.format == Format::Html {
            return;
        }
        let (name, value) = self.profile.link_header();
        let headers = response.headers_mut();
        headers.insert(name, value);
        headers.insert(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static(self.media_type),
        );
    }
}

/// The members of a JSON-FG document's root about `coll`'s features in
/// `crs`: the classes it conforms to, its CRS and its features' type.
pub fn root_members(coll: &Collection, crs: &Crs) -> [(&'static str, Value); 3] {
    [
        ("conformsTo", json!([CORE, TYPES_SCHEMAS])),
        ("coordRefSys", json!(crs.uri)),
        ("featureType", json!(feature_type(coll))),
    ]
}

/// The links of the JSON-FG document at `path` (which may carry a query):
/// itself, and its GeoJSON and HTML alternates.
pub fn links(base: &BaseUrl, path: &str, title: &str) -> [Link; 3] {
    [
        base.link(&with_f(path, F), "self", MEDIA_TYPE, title),
        base.link(path, "alternate", GEOJSON, "This document as GeoJSON"),
        base.link(
            &with_format(path, Format::Html),
            "alternate",
            "text/html",
            "This document as HTML",
        ),
    ]
}

/// The link from another format to the JSON-FG document at `path`.
pub fn alternate(base: &BaseUrl, path: &str) -> Link {
    base.link(
        &with_f(path, F),
        "alternate",
        MEDIA_TYPE,
        "This document as JSON-FG",
    )
}

/// `path` asking for JSON-FG (paging links stay in it).
pub fn path(path: &str) -> String {
    with_f(path, F)
}

/// The stored JSON-FG feature `id` of `coll` (its `place` in `crs`) as a
/// document of its own: root members and links.
pub fn document(
    stored: &StoredFeature,
    base: &BaseUrl,
    coll: &Collection,
    id: &str,
    crs: &Crs,
) -> String {
    let path = item_path(coll, id);
    let mut links = links(base, &path, "This feature").to_vec();
    links.push(base.link(
        &format!("/collections/{}", percent_encode(&coll.id)),
        "collection",
        "application/json",
        "The collection",
    ));
    // PostgreSQL built the object: the root members go after its opening
    // brace, the links before its closing one.
    let body = stored.json.trim();
    let inner = body
        .strip_prefix('{')
        .and_then(|b| b.strip_suffix('}'))
        .unwrap_or(body);
    let mut head = String::from("{");
    for (name, value) in root_members(coll, crs) {
        head.push_str(&format!("{}: {value}, ", json!(name)));
    }
    format!("{head}{inner}, \"links\": {}}}", json!(links))
}

/// The encoding a write answers its feature in (`Prefer:
/// return=representation`): the one of JSON-FG and GeoJSON that `Accept`
/// prefers, else the body's (`body_jsonfg`); the profile a `Link` header
/// declared the body to keep to, before either.
pub fn answer_encoding(headers: &HeaderMap, body_jsonfg: bool) -> Encoding {
    let fg = [("application", "fg+json")];
    if let Some(profile) = profile::declared(headers) {
        match profile.is_jsonfg() {
            true => Encoding::JsonFg,
            false => Encoding::GeoJson,
        }
    } else if accept_prefers(headers, &fg, &[&JSON_TYPES]) {
        Encoding::JsonFg
    } else if accept_prefers(headers, &JSON_TYPES, &[&fg]) || !body_jsonfg {
        Encoding::GeoJson
    } else {
        Encoding::JsonFg
    }
}
