//! The HTTP adapter: thin handlers (one file per resource), extractors, the
//! shared state and router, middleware, and the one place that turns a
//! domain error into problem+json with a status ([`problem`]).

pub mod app;
pub mod body;
pub mod caller;
pub mod changes;
pub mod collections;
pub mod cors;
pub mod create;
pub mod encoding;
pub mod guard;
pub mod health;
pub mod html;
pub mod item;
pub mod items;
pub mod jsonfg;
pub mod landing;
pub mod links;
pub mod model;
pub mod ogc_tx;
pub mod openapi;
pub mod problem;
pub mod profile;
pub mod representation;
pub mod server;
pub mod settings_file;
pub mod telemetry;
pub mod transactions;

use problem::{ApiError, Wrong};

/// The pairs of a query string, in order; a malformed one is a 400.
pub fn query_pairs(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    serde_urlencoded::from_str(query.unwrap_or("")).map_err(|e| {
        ApiError::new(
            Wrong::InvalidParameter,
            format!("the query string cannot be read: {e}"),
        )
    })
}
