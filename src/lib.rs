//! featurepipe: GeoJSON features into PostGIS in the fewest round trips.

mod json;

pub mod api;
pub mod app;
pub mod auth;
pub mod catalog;
pub mod config;
pub mod db;
pub mod error;
pub mod feature;
pub mod geometry;
pub mod push;
pub mod read;
pub mod server;
pub mod session;
pub mod telemetry;
pub mod write;

pub use app::{router, AppState};
pub use server::serve;
