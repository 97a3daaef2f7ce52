//! `GET /collections` and `GET /collections/{collectionId}`.

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use serde_json::{json, Value};

use super::links::BaseUrl;
use super::query_pairs;
use crate::app::AppState;
use crate::catalog::Collection;
use crate::error::ApiError;
use crate::read::params::{only_format, percent_encode};
use crate::read::{self};

/// CRS84: longitude, latitude on WGS 84, the default CRS of OGC API - Features.
pub const CRS84: &str = "http://www.opengis.net/def/crs/OGC/1.3/CRS84";

/// The URI of the CRS features are stored in.
pub fn storage_crs(coll: &Collection) -> String {
    match coll.geometry_column().srid {
        0 => CRS84.to_owned(),
        srid => format!("http://www.opengis.net/def/crs/EPSG/0/{srid}"),
    }
}

/// The description of one collection, with its extent when it has features.
async fn describe(state: &AppState, base: &BaseUrl, coll: &Collection) -> Result<Value, ApiError> {
    let path = format!("/collections/{}", percent_encode(&coll.id));
    let mut v = json!({
        "id": coll.id,
        "title": coll.id,
        "description": coll.description,
        "itemType": "feature",
        "crs": [CRS84],
        "storageCrs": storage_crs(coll),
        "writable": coll.is_writable(),
        "links": [
            base.link(&path, "self", "application/json", "This collection"),
            base.link(&format!("{path}/items"), "items", "application/geo+json", "Its features"),
        ],
    });
    if let Some(bbox) = read::extent(&state.db, coll).await? {
        v["extent"] = json!({"spatial": {"bbox": [bbox], "crs": CRS84}});
    }
    Ok(v)
}

/// List the published collections.
pub async fn list(
    State(state): State<AppState>,
    base: BaseUrl,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    only_format(&query_pairs(query.as_deref())?)?;
    let mut collections = Vec::new();
    for coll in state.catalog.collections() {
        collections.push(describe(&state, &base, coll).await?);
    }
    Ok(Json(json!({
        "collections": collections,
        "links": [base.link("/collections", "self", "application/json", "The collections")],
    })))
}

/// Describe one collection.
pub async fn one(
    State(state): State<AppState>,
    Path(collection_id): Path<String>,
    base: BaseUrl,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let coll = state.collection(&collection_id)?;
    only_format(&query_pairs(query.as_deref())?)?;
    Ok(Json(describe(&state, &base, &coll).await?))
}
