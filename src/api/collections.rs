//! `GET /collections`.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::app::AppState;

/// List the published collections with links to their items.
pub async fn list(State(state): State<AppState>) -> Json<Value> {
    let collections: Vec<Value> = state
        .catalog
        .summaries()
        .into_iter()
        .map(|c| {
            json!({
                "id": c.id,
                "title": c.id,
                "description": c.description,
                "itemType": "feature",
                "writable": c.writable,
                "links": [{
                    "href": format!("/collections/{}/items", c.id),
                    "rel": "items",
                    "type": "application/geo+json",
                }],
            })
        })
        .collect();
    Json(json!({
        "collections": collections,
        "links": [{"href": "/collections", "rel": "self", "type": "application/json"}],
    }))
}
