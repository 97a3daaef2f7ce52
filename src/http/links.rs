//! Absolute links: OGC API clients follow `href`s as given, so every link
//! carries the service's public base URL.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::convert::Infallible;

use axum::http::header;

use super::model::Link;
use crate::http::app::AppState;

/// The base URL links start with: `FEATUREPIPE_PUBLIC_URL`, else
/// `http://<Host>`; without either, links are relative to the root.
#[derive(Debug)]
pub struct BaseUrl(pub String);

impl FromRequestParts<AppState> for BaseUrl {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Infallible> {
        if let Some(url) = &state.public_url {
            return Ok(BaseUrl(url.trim_end_matches('/').to_owned()));
        }
        let host = parts
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| parts.uri.authority().map(|a| a.as_str()));
        Ok(BaseUrl(
            host.map(|h| format!("http://{h}")).unwrap_or_default(),
        ))
    }
}

impl BaseUrl {
    /// A link to `path` (absolute from the service root).
    pub fn link(&self, path: &str, rel: &str, media_type: &str, title: &str) -> Link {
        Link {
            href: format!("{}{path}", self.0),
            rel: rel.to_owned(),
            media_type: media_type.to_owned(),
            title: title.to_owned(),
        }
    }
}
