//! featurepipe: GeoJSON features into PostGIS in the fewest round trips.
//!
//! The modules are layers; each imports only those listed below it
//! (docs/architecture.md draws them):
//! - adapters: [`http`] (the web API: handlers, `AppState`, problem+json),
//!   [`config`] (the CLI's settings), [`push`] (the bulk-load client, which
//!   uses no server module);
//! - domain: [`session`], [`write`], [`read`], [`changes`], [`feature`],
//!   [`auth`], with their typed [`error`]s;
//! - model: [`catalog`], what a table is;
//! - database access: [`db`];
//! - below it, shared by `db` and `push`: `trust`, the CAs a TLS client
//!   trusts and the rustls error behind a failed connection; and `budget`,
//!   the memory all requests share;
//! - pure: `json`, [`geometry`], `units`.

pub mod budget;
mod json;

pub mod auth;
pub mod catalog;
pub mod changes;
pub mod config;
pub mod db;
pub mod error;
pub mod feature;
pub mod geometry;
pub mod http;
pub mod push;
pub mod read;
pub mod session;
mod trust;
mod units;
pub mod write;

pub use http::app::{metrics_router, router, AppState};
pub use http::server::serve;
