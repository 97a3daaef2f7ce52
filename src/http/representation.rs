//! HTTP details shared by the item endpoints: allowed methods, `Prefer`,
//! validators (`ETag`, `Last-Modified`) and the preconditions built on them.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};

use super::html::Format;
use super::jsonfg;
use super::links::BaseUrl;
use super::problem::{ApiError, Wrong};
use super::profile::{self, Profile};
use crate::auth::Caller;
use crate::catalog::Collection;
use crate::feature::{Handling, InputLimits, Reading};
use crate::geometry::Crs;
use crate::read::params::{offered_crs, path_segment, percent_encode};
use crate::read::{plain_etag, Encoding, Rendering, StoredFeature};
use crate::write::item::Precondition;

/// GeoJSON's media type.
pub const GEOJSON: &str = "application/geo+json";
/// Bodies accepted by POST and PUT.
pub const FEATURE_TYPES: &[&str] = &[GEOJSON, "application/json", jsonfg::MEDIA_TYPE];
/// Bodies accepted by PATCH: a JSON merge patch of the feature.
pub const PATCH_TYPES: &[&str] = &[
    "application/merge-patch+json",
    GEOJSON,
    "application/json",
    jsonfg::MEDIA_TYPE,
];

/// Methods on `/collections/{id}/items` for this collection and caller.
pub fn items_allow(coll: &Collection, caller: &Caller) -> &'static str {
    match rights(coll, caller) {
        (true, true) => "GET, HEAD, POST, OPTIONS",
        (true, false) => "GET, HEAD, OPTIONS",
        (false, true) => "POST, OPTIONS",
        (false, false) => "OPTIONS",
    }
}

/// Methods on `/collections/{id}/items/{featureId}` for this collection and caller.
pub fn item_allow(coll: &Collection, caller: &Caller) -> &'static str {
    match rights(coll, caller) {
        (true, true) => "GET, HEAD, PUT, PATCH, DELETE, OPTIONS",
        (true, false) => "GET, HEAD, OPTIONS",
        (false, true) => "PUT, PATCH, DELETE, OPTIONS",
        (false, false) => "OPTIONS",
    }
}

/// (may read, may write) the collection: the caller's rights and the table's.
fn rights(coll: &Collection, caller: &Caller) -> (bool, bool) {
    (
        caller.can_read(&coll.id),
        caller.can_write(&coll.id) && coll.is_writable(),
    )
}

/// 405 for a write to a read-only collection, with the methods it does allow.
pub fn check_writable(coll: &Collection, allow: &'static str) -> Result<(), ApiError> {
    if coll.is_writable() {
        return Ok(());
    }
    let why = if coll.read_only {
        "the settings file makes it so"
    } else {
        "its table has no primary key"
    };
    Err(ApiError::new(
        Wrong::ReadOnlyCollection,
        format!("'{}' is read-only: {why}", coll.id),
    )
    .with_header(header::ALLOW, HeaderValue::from_static(allow)))
}

/// 200 with `Allow` and, for writable collections, the `Accept-*` header of the write.
pub fn options_response(
    allow: &'static str,
    accepts: Option<(&'static str, &'static str)>,
) -> Response {
    let mut response = StatusCode::OK.into_response();
    let h = response.headers_mut();
    h.insert(header::ALLOW, HeaderValue::from_static(allow));
    if let Some((name, value)) = accepts {
        h.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// The path of a feature.
pub fn item_path(coll: &Collection, id: &str) -> String {
    format!(
        "/collections/{}/items/{}",
        percent_encode(&coll.id),
        path_segment(id)
    )
}

/// Point `Location` at the feature keyed `id`.
pub fn set_location(response: &mut Response, base: &BaseUrl, coll: &Collection, id: &str) {
    if let Ok(v) = HeaderValue::from_str(&format!("{}{}", base.0, item_path(coll, id))) {
        response.headers_mut().insert(header::LOCATION, v);
    }
}

/// `Prefer: return=…` (RFC 7240).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Return {
    /// Not asked for.
    Unspecified,
    /// `return=minimal`: no body.
    Minimal,
    /// `return=representation`: the feature as stored.
    Representation,
}

/// The preferences of a request (RFC 7240), read once from its `Prefer`
/// headers, with the `return` the caller is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preferences {
    /// The `return` the client asked for.
    asked: Return,
    /// The `return` it gets: never the feature for a caller who may not read it.
    pub return_: Return,
    /// How the body is read.
    pub handling: Handling,
}

impl Preferences {
    /// The preferences in `headers` of a caller who may (`may_read`) or may
    /// not read the collection: one who may not is answered minimally.
    pub fn new(headers: &HeaderMap, may_read: bool) -> Self {
        let (mut asked, mut handling) = (None, None);
        for (name, value) in preferences(headers) {
            // Only the first instance of a preference counts (RFC 7240 2).
            match name.as_str() {
                "return" if asked.is_none() => {
                    asked = Some(match value.as_str() {
                        "minimal" => Return::Minimal,
                        "representation" => Return::Representation,
                        _ => Return::Unspecified,
                    })
                }
                "handling" if handling.is_none() => {
                    handling = Some(match value.as_str() {
                        "strict" => Handling::Strict,
                        "lenient" => Handling::Lenient,
                        _ => Handling::Unspecified,
                    })
                }
                _ => {}
            }
        }
        let asked = asked.unwrap_or(Return::Unspecified);
        let return_ = match asked {
            Return::Representation if !may_read => Return::Minimal,
            asked => asked,
        };
        Preferences {
            asked,
            return_,
            handling: handling.unwrap_or(Handling::Unspecified),
        }
    }

    /// The `Preference-Applied` values: `handling`, and `return` when the
    /// answer `answers_return` and it is what the client asked for.
    fn applied(&self, answers_return: bool) -> Vec<&'static str> {
        let handling = match self.handling {
            Handling::Unspecified => None,
            Handling::Strict => Some("handling=strict"),
            Handling::Lenient => Some("handling=lenient"),
        };
        let given = match self.return_ {
            _ if !answers_return || self.return_ != self.asked => None,
            Return::Unspecified => None,
            Return::Minimal => Some("return=minimal"),
            Return::Representation => Some("return=representation"),
        };
        handling.into_iter().chain(given).collect()
    }
}

/// Each preference of the `Prefer` headers (RFC 7240: a comma-separated
/// list, `name[=value]` with optional whitespace around `=`, a token or a
/// quoted value, parameters after `;`) as its name and value, lower-cased.
fn preferences(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| split_unquoted(v, ','))
        .filter_map(|preference| {
            let head = split_unquoted(preference, ';').into_iter().next()?;
            let (name, value) = head.split_once('=').unwrap_or((head, ""));
            let name = name.trim().to_ascii_lowercase();
            let value = unquote(value.trim()).to_ascii_lowercase();
            (!name.is_empty()).then_some((name, value))
        })
        .collect()
}

/// `text` cut at each `separator` outside a quoted string.
fn split_unquoted(text: &str, separator: char) -> Vec<&str> {
    let (mut parts, mut start) = (Vec::new(), 0);
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == separator && !quoted => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The value of a token or of a quoted string (RFC 9110 5.6.4).
fn unquote(word: &str) -> String {
    let Some(inner) = word.strip_prefix('"').and_then(|w| w.strip_suffix('"')) else {
        return word.to_owned();
    };
    let mut value = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        value.push(if c == '\\' {
            chars.next().unwrap_or(c)
        } else {
            c
        });
    }
    value
}

/// How the body of a write is read: its `Content-Crs`, and `Prefer: handling`.
pub fn reading(
    headers: &HeaderMap,
    coll: &Collection,
    limits: InputLimits,
    preferences: &Preferences,
) -> Result<Reading, ApiError> {
    Ok(Reading {
        crs: body_crs(headers, coll)?.clone(),
        crs_given: headers.contains_key("content-crs"),
        jsonfg: is_jsonfg(headers),
        handling: preferences.handling,
        keep_valid: false,
        limits,
    })
}

/// Whether the body is said to be JSON-FG: by a `Link: <…/jsonfg>;
/// rel="profile"` header (JSON-FG 1.0 on writes), or by its `Content-Type`:
/// `application/fg+json`, or GeoJSON's, JSON's or a merge patch's with
/// JSON-FG's profile.
fn is_jsonfg(headers: &HeaderMap) -> bool {
    if let Some(profile) = profile::declared(headers) {
        return profile.is_jsonfg();
    }
    let value = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let mut parts = value.split(';').map(str::trim);
    match parts.next() {
        Some(jsonfg::MEDIA_TYPE) => true,
        Some(GEOJSON | "application/json" | "application/merge-patch+json") => parts.any(|p| {
            // The value was lowercased with the rest; a profile may be a list.
            p.strip_prefix("profile=").is_some_and(|v| {
                let jsonfg = crate::feature::jsonfg::PROFILE_PREFIX.to_ascii_lowercase();
                v.trim_matches('"')
                    .split_whitespace()
                    .any(|uri| uri.starts_with(&jsonfg))
            })
        }),
        _ => false,
    }
}

/// `Preference-Applied`: the request's `handling` preference, and its
/// `return` preference when the response `answers_return` as it was asked.
pub fn set_preference_applied(
    response: &mut Response,
    preferences: &Preferences,
    answers_return: bool,
) {
    if let Some(v) = applied_header(preferences, answers_return) {
        response.headers_mut().insert(PREFERENCE_APPLIED, v);
    }
}

/// A write refused once its body was read under `preferences`: it says,
/// as a success would, which `handling` it was read with.
pub fn refused_as_read(err: ApiError, preferences: &Preferences) -> ApiError {
    match applied_header(preferences, false) {
        Some(v) => err.with_header(PREFERENCE_APPLIED, v),
        None => err,
    }
}

const PREFERENCE_APPLIED: header::HeaderName =
    header::HeaderName::from_static("preference-applied");

/// The `Preference-Applied` value, if anything was applied.
fn applied_header(preferences: &Preferences, answers_return: bool) -> Option<HeaderValue> {
    let applied = preferences.applied(answers_return);
    let value = HeaderValue::from_str(&applied.join(", ")).ok();
    value.filter(|_| !applied.is_empty())
}

/// The members of one list of entity tags (`"a", W/"b"`), trimmed.
pub fn tag_members(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|t| !t.is_empty())
}

/// An entity tag without its quotes; under weak comparison (`weak`,
/// If-None-Match) also without `W/`, while under strong comparison a weak
/// tag keeps it, and so matches no tag of the service.
pub fn unquoted(member: &str, weak: bool) -> &str {
    let member = match weak {
        true => member.strip_prefix("W/").unwrap_or(member),
        false => member,
    };
    member.trim_matches('"')
}

/// The stored features' tags named by every `name` header (see
/// [`unquoted`] and [`plain_etag`]); `*` stays `*`.
pub fn entity_tags(
    headers: &HeaderMap,
    name: header::HeaderName,
    weak: bool,
) -> impl Iterator<Item = &str> {
    headers
        .get_all(name)
        .into_iter()
        .flat_map(|v| tag_members(v.to_str().unwrap_or("")))
        .map(move |member| plain_etag(unquoted(member, weak)))
}

/// `If-Match`, `If-Unmodified-Since` and `If-None-Match` of a request to
/// change a feature of `coll`; 428 when the collection requires one of the
/// first two (or `If-None-Match: *`) and there is none.
pub fn precondition(headers: &HeaderMap, coll: &Collection) -> Result<Precondition, ApiError> {
    let tags: Vec<String> = entity_tags(headers, header::IF_MATCH, false)
        .map(str::to_owned)
        .collect();
    let if_match = headers.contains_key(header::IF_MATCH).then_some(tags);
    // An invalid date is ignored, and so is the date when If-Match is given
    // (RFC 9110 13.1.4).
    let if_unmodified_since = headers
        .get(header::IF_UNMODIFIED_SINCE)
        .filter(|_| if_match.is_none())
        .and_then(|v| DateTime::parse_from_rfc2822(v.to_str().ok()?).ok())
        .map(|d| d.with_timezone(&Utc));
    let if_none_match = headers.contains_key(header::IF_NONE_MATCH).then(|| {
        entity_tags(headers, header::IF_NONE_MATCH, true)
            .map(str::to_owned)
            .collect()
    });
    let only_create = if_none_match
        .as_ref()
        .is_some_and(|t: &Vec<String>| t == &["*"]);
    if coll.precondition_required
        && if_match.is_none()
        && if_unmodified_since.is_none()
        && !only_create
    {
        return Err(ApiError::new(
            Wrong::PreconditionRequired,
            format!(
                "changes to '{}' must say which version they change: send If-Match with the \
                 feature's ETag (or If-Unmodified-Since; If-None-Match: * to create)",
                coll.id
            ),
        ));
    }
    Ok(Precondition {
        if_match,
        if_unmodified_since,
        if_none_match,
    })
}

/// 412: the feature changed since the client read it.
pub fn precondition_failed(id: &str) -> ApiError {
    ApiError::new(
        Wrong::PreconditionFailed,
        format!("feature '{id}' has changed since it was read (If-Match / If-Unmodified-Since); read it again"),
    )
}

/// 404 for a feature that does not exist.
pub fn unknown_feature(coll: &Collection, id: &str) -> ApiError {
    ApiError::new(
        Wrong::UnknownFeature,
        format!("collection '{}' has no feature '{id}'", coll.id),
    )
}

/// `Content-Crs: <uri>` (OGC API - Features Part 2).
pub fn set_content_crs(headers: &mut HeaderMap, crs: &Crs) {
    if let Ok(v) = HeaderValue::from_str(&format!("<{}>", crs.uri)) {
        headers.insert("content-crs", v);
    }
}

/// The CRS of a request body: its `Content-Crs`, CRS84 without one.
fn body_crs<'c>(headers: &HeaderMap, coll: &'c Collection) -> Result<&'c Crs, ApiError> {
    match headers.get("content-crs") {
        None => Ok(&coll.crs[0]),
        Some(v) => offered_crs(coll, "Content-Crs", v.to_str().unwrap_or("")).map_err(|e| {
            ApiError::new(
                Wrong::UnsupportedCrs,
                e.detail().replace("query parameter ", "header "),
            )
        }),
    }
}

/// The validator headers of a stored feature.
pub fn validators(feature: &StoredFeature, headers: &mut HeaderMap) {
    if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", feature.etag)) {
        headers.insert(header::ETAG, v);
    }
    if let Some(t) = feature.last_modified {
        let date = t.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
        if let Ok(v) = HeaderValue::from_str(&date) {
            headers.insert(header::LAST_MODIFIED, v);
        }
    }
}

/// The feature with its links, as the body of a response.
fn with_links(feature: &StoredFeature, base: &BaseUrl, coll: &Collection, id: &str) -> String {
    let path = item_path(coll, id);
    let [own, page] = base.self_and_alternate(&path, GEOJSON, Format::Json, "This feature");
    let links = serde_json::json!([
        own,
        page,
        jsonfg::alternate(base, &path),
        base.link(
            &format!("/collections/{}", percent_encode(&coll.id)),
            "collection",
            "application/json",
            "The collection"
        ),
    ]);
    // PostgreSQL built the object; add one member before its closing brace.
    let body = feature.json.trim_end();
    let inner = body.strip_suffix('}').unwrap_or(body);
    format!("{inner}, \"links\": {links}}}")
}

/// 201 for the feature created at `id`, as `preference` asks, with `Location`.
pub fn created(
    stored: &StoredFeature,
    preference: Return,
    base: &BaseUrl,
    coll: &Collection,
    id: &str,
    rendering: &Rendering,
) -> Response {
    let status = StatusCode::CREATED;
    let mut response = feature_response(status, stored, preference, base, coll, id, rendering);
    set_location(&mut response, base, coll, id);
    response
}

/// The feature as `preference` asks: as `rendering` has it (GeoJSON or
/// JSON-FG, with its links), or no body; always with its validators.
pub fn feature_response(
    status: StatusCode,
    feature: &StoredFeature,
    preference: Return,
    base: &BaseUrl,
    coll: &Collection,
    id: &str,
    rendering: &Rendering,
) -> Response {
    let crs = &rendering.crs;
    let mut response = if preference == Return::Representation {
        let (media_type, body) = match rendering.encoding {
            Encoding::GeoJson => (GEOJSON, with_links(feature, base, coll, id)),
            Encoding::JsonFg => (
                jsonfg::MEDIA_TYPE,
                jsonfg::document(feature, base, coll, id, crs),
            ),
        };
        (
            status,
            [(header::CONTENT_TYPE, HeaderValue::from_static(media_type))],
            body,
        )
            .into_response()
    } else {
        let status = if status == StatusCode::OK {
            StatusCode::NO_CONTENT
        } else {
            status
        };
        status.into_response()
    };
    let headers = response.headers_mut();
    validators(feature, headers);
    if preference == Return::Representation {
        set_content_crs(headers, crs);
        let profile = Profile::default_for(rendering.encoding == Encoding::JsonFg);
        let (name, value) = profile.link_header();
        headers.insert(name, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(values: &[&str], may_read: bool) -> Preferences {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("prefer", HeaderValue::from_str(v).unwrap());
        }
        Preferences::new(&headers, may_read)
    }

    #[test]
    fn prefer_is_read_as_rfc_7240_writes_it() {
        for spelling in [
            "return=representation",
            "Return=Representation",
            "return = representation",
            "RETURN=\"representation\"",
            "respond-async, return=representation; a=\"x, return=minimal\"",
        ] {
            let p = of(&[spelling], true);
            assert_eq!(p.return_, Return::Representation, "{spelling}");
            assert_eq!(p.applied(true), ["return=representation"], "{spelling}");
        }
        // Only the first instance counts, across headers too.
        let p = of(
            &["handling=Lenient", "return=minimal, return=representation"],
            true,
        );
        assert_eq!(
            (p.return_, p.handling),
            (Return::Minimal, Handling::Lenient)
        );
        assert_eq!(
            of(&["x=\"return=minimal\""], true).return_,
            Return::Unspecified
        );
    }

    #[test]
    fn a_caller_who_may_not_read_is_answered_minimally_and_told_nothing_else() {
        let p = of(&["Return=Representation, handling=strict"], false);
        assert_eq!(p.return_, Return::Minimal);
        assert_eq!(p.applied(true), ["handling=strict"]);
        assert_eq!(
            of(&["return=minimal"], false).applied(true),
            ["return=minimal"]
        );
    }
}
