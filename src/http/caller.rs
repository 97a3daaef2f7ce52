//! How credentials arrive: `Authorization: Bearer …` or `X-API-Key`. What
//! they allow is the domain's ([`crate::auth`]).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};

use super::app::AppState;
use super::problem::ApiError;
use crate::auth::{unauthorized, Caller};
use crate::error::Error;

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let auth = state.auth.current();
        let presented = match auth.enabled() {
            true => presented(&parts.headers)?,
            false => None,
        };
        Ok(auth.identify(presented)?)
    }
}

/// The credential in `Authorization: Bearer …` or `X-API-Key`, if any.
fn presented(headers: &HeaderMap) -> Result<Option<&str>, Error> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let text = value.to_str().unwrap_or_default();
        return match text.split_once(' ') {
            Some((scheme, credential)) if scheme.eq_ignore_ascii_case("bearer") => {
                Ok(Some(credential.trim()))
            }
            _ => Err(unauthorized(
                "Authorization must be 'Bearer <API key or JWT>'",
            )),
        };
    }
    match headers.get("x-api-key") {
        Some(value) => value
            .to_str()
            .map(|key| Some(key.trim()))
            .map_err(|_| unauthorized("the API key is not known")),
        None => Ok(None),
    }
}
