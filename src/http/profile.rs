//! GeoJSON profiles (JSON-FG 1.0 "JSON-FG in Web APIs", OGC API - Features
//! Part 5's profile parameter): `profile=rfc7946|jsonfg|jsonfg-plus` on
//! reads, by its token or its URI; the profile a document keeps to, said in
//! a `Link: <…>; rel="profile"` header and in its links; and on writes, a
//! request's `Link` header that declares its body JSON-FG.

use axum::http::{header, HeaderMap, HeaderValue};

use super::model::Link;
use super::problem::{ApiError, Wrong};

/// Where OGC's profiles are named: `{PREFIX}{token}`.
const PREFIX: &str = "http://www.opengis.net/def/profile/OGC/0/";

/// A GeoJSON profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Plain GeoJSON (RFC 7946): no `place`, no JSON-FG `conformsTo`.
    Rfc7946,
    /// JSON-FG: `place` in the asked CRS, `geometry` in WGS 84.
    JsonFg,
    /// JSON-FG with a `geometry` wherever there is a `place` (featurepipe's
    /// JSON-FG always has one).
    JsonFgPlus,
}

/// Every profile, with its token.
const ALL: [(&str, Profile); 3] = [
    ("rfc7946", Profile::Rfc7946),
    ("jsonfg", Profile::JsonFg),
    ("jsonfg-plus", Profile::JsonFgPlus),
];

impl Profile {
    /// The profile named by `value`: its token or its URI.
    fn named(value: &str) -> Option<Profile> {
        let token = value.strip_prefix(PREFIX).unwrap_or(value);
        ALL.iter().find(|(t, _)| *t == token).map(|(_, p)| *p)
    }

    /// Its URI.
    pub fn uri(self) -> String {
        format!("{PREFIX}{}", self.token())
    }

    /// The profile of a document nobody asked one of: JSON-FG's, or plain GeoJSON's.
    pub fn default_for(jsonfg: bool) -> Profile {
        match jsonfg {
            true => Profile::JsonFg,
            false => Profile::Rfc7946,
        }
    }

    /// Its token, as the `profile` query parameter takes it.
    pub fn token(self) -> &'static str {
        ALL.iter()
            .find(|(_, p)| *p == self)
            .expect("every profile is listed")
            .0
    }

    /// The link that says a document keeps to it (`rel=profile`).
    pub fn link(self) -> Link {
        Link {
            href: self.uri(),
            rel: "profile".into(),
            media_type: "text/html".into(),
            title: format!(
                "This document keeps to the GeoJSON profile {}",
                self.token()
            ),
        }
    }

    /// Whether documents of it are JSON-FG.
    pub fn is_jsonfg(self) -> bool {
        self != Profile::Rfc7946
    }

    /// The `Link` header that says a document keeps to it.
    pub fn link_header(self) -> (header::HeaderName, HeaderValue) {
        let value = format!("<{}>; rel=\"profile\"", self.uri());
        (
            header::LINK,
            HeaderValue::from_str(&value).expect("a URI is a header value"),
        )
    }
}

/// The profile the `profile` query parameter asks for, taken out of
/// `pairs`: one of [`ALL`] (a comma-separated list may repeat it), or a 400.
pub fn asked(pairs: &mut Vec<(String, String)>) -> Result<Option<Profile>, ApiError> {
    let mut asked = None;
    for (_, value) in pairs.iter().filter(|(name, _)| name == "profile") {
        for item in value.split(',').map(str::trim) {
            let profile = Profile::named(item).ok_or_else(|| {
                let message = format!(
                    "query parameter 'profile': '{item}' is not a profile this service offers: \
                     rfc7946, jsonfg or jsonfg-plus (or their URIs, {PREFIX}…)"
                );
                ApiError::new(Wrong::InvalidParameter, message)
            })?;
            match asked {
                Some(other) if other != profile => {
                    let message = "query parameter 'profile': rfc7946, jsonfg and jsonfg-plus \
                                   exclude each other; ask for one";
                    return Err(ApiError::new(Wrong::InvalidParameter, message));
                }
                _ => asked = Some(profile),
            }
        }
    }
    pairs.retain(|(name, _)| name != "profile");
    Ok(asked)
}

/// The profile a request's `Link` headers declare its body to keep to
/// (`Link: <…/jsonfg>; rel="profile"`), if any.
pub fn declared(headers: &HeaderMap) -> Option<Profile> {
    headers
        .get_all(header::LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|link| {
            let (target, params) = link.trim().split_once('>')?;
            let target = target.strip_prefix('<')?.trim();
            let profile_rel = params.split(';').any(|p| {
                let p = p.trim().to_ascii_lowercase().replace(' ', "");
                p == "rel=\"profile\"" || p == "rel=profile"
            });
            profile_rel.then(|| Profile::named(target)).flatten()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(query: &[(&str, &str)]) -> Vec<(String, String)> {
        query
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_profile_is_named_by_its_token_or_its_uri() {
        let mut p = pairs(&[("profile", "jsonfg"), ("limit", "3")]);
        assert_eq!(asked(&mut p).unwrap(), Some(Profile::JsonFg));
        assert_eq!(p, pairs(&[("limit", "3")]));
        let uri = "http://www.opengis.net/def/profile/OGC/0/rfc7946";
        assert_eq!(
            asked(&mut pairs(&[("profile", uri)])).unwrap(),
            Some(Profile::Rfc7946)
        );
        assert_eq!(asked(&mut pairs(&[])).unwrap(), None);
        assert!(asked(&mut pairs(&[("profile", "geojson")])).is_err());
        assert!(asked(&mut pairs(&[("profile", "jsonfg,rfc7946")])).is_err());
        assert_eq!(Profile::JsonFgPlus.uri(), format!("{PREFIX}jsonfg-plus"));
    }

    #[test]
    fn a_link_header_declares_a_body_s_profile() {
        let mut h = HeaderMap::new();
        assert_eq!(declared(&h), None);
        h.append(
            header::LINK,
            HeaderValue::from_static("<https://example.com/x>; rel=\"alternate\""),
        );
        h.append(
            header::LINK,
            HeaderValue::from_static(
                "<http://www.opengis.net/def/profile/OGC/0/jsonfg>; rel=\"profile\"",
            ),
        );
        assert_eq!(declared(&h), Some(Profile::JsonFg));
    }
}
