//! Liveness and readiness probes.

use super::model::Health;
use axum::extract::State;
use axum::Json;

use super::problem::{ApiError, Problem};
use crate::http::app::AppState;

/// `GET /healthz`: the process is alive.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "Operations",
    summary = "The process is alive",
    responses((status = 200, description = "Alive", body = Health))
)]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// `GET /readyz`: a database connection answers now (503 otherwise).
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "Operations",
    summary = "A database connection answers now",
    responses((status = 200, description = "Ready", body = Health), (status = 503, description = "Not ready", body = Problem, content_type = "application/problem+json"))
)]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    // The service's own role: readiness is not a caller's business.
    state.db.as_role(None).is_ready().await?;
    Ok(Json(Health {
        status: "ready".into(),
    }))
}
