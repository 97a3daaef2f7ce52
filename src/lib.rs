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
pub mod proxy;
pub mod push;
pub mod read;
pub mod session;
pub mod telemetry;
pub mod write;

use std::future::Future;

pub use app::{router, AppState};

/// Serve the API on an already-bound listener until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
