//! Thin HTTP handlers, one file per resource.

pub mod body;
pub mod collections;
pub mod guard;
pub mod health;
pub mod item;
pub mod items;
pub mod landing;
pub mod links;
pub mod model;
pub mod openapi;
pub mod representation;
pub mod transactions;

use axum::http::StatusCode;

use crate::error::ApiError;

/// The pairs of a query string, in order; a malformed one is a 400.
pub fn query_pairs(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    serde_urlencoded::from_str(query.unwrap_or("")).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-parameter",
            format!("the query string cannot be read: {e}"),
        )
    })
}
