//! `GET /` (landing page) and `GET /conformance`.

use axum::extract::RawQuery;
use axum::Json;
use serde_json::{json, Value};

use super::links::BaseUrl;
use super::query_pairs;
use crate::error::ApiError;
use crate::read::params::only_format;

/// The conformance classes this service implements. Part 4's classes are
/// listed under both URI families clients look for.
pub const CONFORMANCE: &[&str] = &[
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/geojson",
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/oas30",
    "http://www.opengis.net/spec/ogcapi-features-2/1.0/conf/crs",
    "http://www.opengis.net/spec/ogcapi-features-4/1.0/conf/create-replace-delete",
    "http://www.opengis.net/spec/ogcapi-features-4/1.0/conf/update",
    "http://www.opengis.net/spec/ogcapi-features-4/1.0/conf/optimistic-locking-etags",
    "http://www.opengis.net/spec/ogcapi-features-4/1.0/conf/optimistic-locking-timestamps",
    "http://www.opengis.net/spec/ogcapi-features-4/1.0/conf/return-resource-representation-in-response",
    "http://www.opengis.net/spec/ogcapi-features-4/1.0/conf/handling",
    "http://www.opengis.net/spec/ogcapi-features-4/1.0/conf/features",
    "http://www.opengis.net/spec/ogcapi-common-5/1.0/conf/create-replace-delete",
    "http://www.opengis.net/spec/ogcapi-common-5/1.0/conf/update",
    "http://www.opengis.net/spec/ogcapi-common-5/1.0/conf/optimistic-locking-etags",
    "http://www.opengis.net/spec/ogcapi-common-5/1.0/conf/optimistic-locking-timestamps",
    "http://www.opengis.net/spec/ogcapi-common-5/1.0/conf/return-resource-representation-in-response",
    "http://www.opengis.net/spec/ogcapi-common-5/1.0/conf/handling",
];

/// The landing page: where the API, its conformance and its data are.
pub async fn landing(base: BaseUrl, RawQuery(query): RawQuery) -> Result<Json<Value>, ApiError> {
    only_format(&query_pairs(query.as_deref())?)?;
    Ok(Json(json!({
        "title": "featurepipe",
        "description": "Fast GeoJSON ingestion into PostGIS, speaking OGC API - Features",
        "links": [
            base.link("/", "self", "application/json", "This document"),
            base.link("/api", "service-desc", "application/vnd.oai.openapi+json;version=3.0", "The API definition"),
            base.link("/api.html", "service-doc", "text/html", "The API documentation"),
            base.link("/conformance", "conformance", "application/json", "Conformance classes"),
            base.link("/collections", "data", "application/json", "The collections"),
        ],
    })))
}

/// `GET /conformance`.
pub async fn conformance(RawQuery(query): RawQuery) -> Result<Json<Value>, ApiError> {
    only_format(&query_pairs(query.as_deref())?)?;
    Ok(Json(json!({ "conformsTo": CONFORMANCE })))
}
