//! Absolute links: OGC API clients follow `href`s as given, so every link
//! carries the service's public base URL.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::convert::Infallible;

use axum::http::header;

use super::html::format::{with_format, Format};
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

    /// `self` in the `format` answered and `alternate` in the other one, for
    /// the resource at `path` (which may carry a query) whose JSON is of
    /// `json_type`. A JSON `self` is the plain path; other links name `f`.
    pub fn self_and_alternate(
        &self,
        path: &str,
        json_type: &str,
        format: Format,
        title: &str,
    ) -> [Link; 2] {
        let html = with_format(path, Format::Html);
        match format {
            Format::Json => [
                self.link(path, "self", json_type, title),
                self.link(&html, "alternate", "text/html", "This document as HTML"),
            ],
            Format::Html => [
                self.link(&html, "self", "text/html", title),
                self.link(
                    &with_format(path, Format::Json),
                    "alternate",
                    json_type,
                    "This document as JSON",
                ),
            ],
        }
    }
}
