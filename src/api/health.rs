//! Liveness and readiness probes.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::app::AppState;
use crate::error::ApiError;

/// `GET /healthz`: the process is alive.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: a database connection answers now (503 otherwise).
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state.db.is_ready().await?;
    Ok(Json(json!({"status": "ready"})))
}
