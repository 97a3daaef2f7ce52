//! `GET /` (landing page) and `GET /conformance`.

use axum::extract::RawQuery;
use axum::Json;

use super::links::BaseUrl;
use super::model::{Conformance, LandingPage};
use super::problem::{ApiError, Problem};
use super::query_pairs;
use crate::read::params::only_format;

/// The conformance classes this service implements. Part 4's classes are
/// listed under both URI families clients look for, and so are the schema
/// classes: Part 5 of Features became Part 3 of Common in its drafts. Not
/// `oas30`: the OpenAPI document is 3.1.
pub const CONFORMANCE: &[&str] = &[
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/geojson",
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
    "http://www.opengis.net/spec/ogcapi-features-5/1.0/conf/schemas",
    "http://www.opengis.net/spec/ogcapi-features-5/1.0/conf/returnables-and-receivables",
    "http://www.opengis.net/spec/ogcapi-common-3/1.0/conf/schemas",
    "http://www.opengis.net/spec/ogcapi-common-3/1.0/conf/returnables-and-receivables",
];

/// The landing page: where the API, its conformance and its data are.
#[utoipa::path(
    get,
    path = "/",
    tag = "Capabilities",
    summary = "Landing page",
    params(("f" = Option<String>, Query, description = "Output format: json (the only one)")),
    responses((status = 200, description = "Links to the API, its conformance and the collections", body = LandingPage), (status = 400, description = "Unknown parameter", body = Problem, content_type = "application/problem+json"))
)]
pub async fn landing(
    base: BaseUrl,
    RawQuery(query): RawQuery,
) -> Result<Json<LandingPage>, ApiError> {
    only_format(&query_pairs(query.as_deref())?)?;
    Ok(Json(LandingPage {
        title: "featurepipe".into(),
        description: "Fast GeoJSON ingestion into PostGIS, speaking OGC API - Features".into(),
        links: vec![
            base.link("/", "self", "application/json", "This document"),
            base.link(
                "/api",
                "service-desc",
                "application/vnd.oai.openapi+json;version=3.1",
                "The API definition",
            ),
            base.link(
                "/api.html",
                "service-doc",
                "text/html",
                "The API documentation",
            ),
            base.link(
                "/conformance",
                "conformance",
                "application/json",
                "Conformance classes",
            ),
            base.link(
                "/collections",
                "data",
                "application/json",
                "The collections",
            ),
        ],
    }))
}

/// `GET /conformance`.
#[utoipa::path(
    get,
    path = "/conformance",
    tag = "Capabilities",
    summary = "Conformance classes implemented",
    params(("f" = Option<String>, Query, description = "Output format: json (the only one)")),
    responses((status = 200, description = "Conformance classes", body = Conformance), (status = 400, description = "Unknown parameter", body = Problem, content_type = "application/problem+json"))
)]
pub async fn conformance(RawQuery(query): RawQuery) -> Result<Json<Conformance>, ApiError> {
    only_format(&query_pairs(query.as_deref())?)?;
    Ok(Json(Conformance {
        conforms_to: CONFORMANCE.iter().map(|c| c.to_string()).collect(),
    }))
}
