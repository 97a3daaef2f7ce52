//! `GET /` (landing page) and `GET /conformance`.

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;

use super::app::AppState;
use super::html::format::FORMAT_PARAM;
use super::html::pages::{self, Site};
use super::html::Format;
use super::links::BaseUrl;
use super::model::{Conformance, LandingPage};
use super::problem::{ApiError, Problem};
use crate::feature::jsonfg;

/// The conformance classes this service implements. Part 4's classes are
/// listed under both URI families clients look for, and so are the schema
/// classes: Part 5 of Features became Part 3 of Common in its drafts. Not
/// `oas30`: the OpenAPI document is 3.1. JSON-FG: Core and Feature Types
/// (every JSON-FG feature has its collection's `featureType`).
pub const CONFORMANCE: &[&str] = &[
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/geojson",
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/html",
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
    jsonfg::CORE,
    jsonfg::TYPES_SCHEMAS,
    // JSON-FG in Web APIs and GeoJSON profiles (`http::profile`): the
    // `profile` parameter of Part 5, whose class it builds on.
    "http://www.opengis.net/spec/json-fg-1/1.0/conf/api",
    "http://www.opengis.net/spec/json-fg-1/1.0/conf/profiles",
    "http://www.opengis.net/spec/ogcapi-features-5/1.0/conf/profile-parameter",
    "http://www.opengis.net/spec/ogcapi-common-3/1.0/conf/profile-parameter",
    // Part 3 and CQL2 (`read::filter`): filters by cql2-text or cql2-json,
    // with the functions and operators below.
    "http://www.opengis.net/spec/ogcapi-features-3/1.0/conf/queryables",
    "http://www.opengis.net/spec/ogcapi-features-3/1.0/conf/queryables-query-parameters",
    "http://www.opengis.net/spec/ogcapi-features-3/1.0/conf/filter",
    "http://www.opengis.net/spec/ogcapi-features-3/1.0/conf/features-filter",
    "http://www.opengis.net/spec/cql2/1.0/conf/cql2-text",
    "http://www.opengis.net/spec/cql2/1.0/conf/cql2-json",
    "http://www.opengis.net/spec/cql2/1.0/conf/basic-cql2",
    "http://www.opengis.net/spec/cql2/1.0/conf/advanced-comparison-operators",
    "http://www.opengis.net/spec/cql2/1.0/conf/case-insensitive-comparison",
    "http://www.opengis.net/spec/cql2/1.0/conf/accent-insensitive-comparison",
    "http://www.opengis.net/spec/cql2/1.0/conf/array-functions",
    "http://www.opengis.net/spec/cql2/1.0/conf/basic-spatial-functions",
    // Their names in CQL2's drafts, which QGIS 3.40 looks for before it
    // sends a spatial filter (of a point or a box; of any geometry)
    // rather than filtering itself.
    "http://www.opengis.net/spec/cql2/1.0/conf/basic-spatial-operators",
    "http://www.opengis.net/spec/cql2/1.0/conf/spatial-operators",
    "http://www.opengis.net/spec/cql2/1.0/conf/basic-spatial-functions-plus",
    "http://www.opengis.net/spec/cql2/1.0/conf/spatial-functions",
    "http://www.opengis.net/spec/cql2/1.0/conf/temporal-functions",
    "http://www.opengis.net/spec/cql2/1.0/conf/property-property",
    "http://www.opengis.net/spec/cql2/1.0/conf/arithmetic",
];

/// The landing page: where the API, its conformance and its data are.
#[utoipa::path(
    get,
    path = "/",
    tag = "Capabilities",
    summary = "Landing page",
    params(("f" = inline(Option<Format>), Query, description = FORMAT_PARAM)),
    responses((status = 200, description = "Links to the API, its conformance and the collections", content((LandingPage = "application/json"), (String = "text/html"))), (status = 400, description = "Unknown parameter", body = Problem, content_type = "application/problem+json"))
)]
pub async fn landing(
    State(state): State<AppState>,
    base: BaseUrl,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let format = Format::only(query.as_deref(), &headers)?;
    let mut links = base
        .self_and_alternate("/", "application/json", format, "This document")
        .to_vec();
    links.extend([
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
    ]);
    let doc = LandingPage {
        title: "featurepipe".into(),
        description: "Fast GeoJSON ingestion into PostGIS, speaking OGC API - Features".into(),
        links,
    };
    Ok(format.answer(doc, |doc| pages::landing(&Site::new(&state, &base), doc)))
}

/// `GET /conformance`.
#[utoipa::path(
    get,
    path = "/conformance",
    tag = "Capabilities",
    summary = "Conformance classes implemented",
    params(("f" = inline(Option<Format>), Query, description = FORMAT_PARAM)),
    responses((status = 200, description = "Conformance classes", content((Conformance = "application/json"), (String = "text/html"))), (status = 400, description = "Unknown parameter", body = Problem, content_type = "application/problem+json"))
)]
pub async fn conformance(
    State(state): State<AppState>,
    base: BaseUrl,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let format = Format::only(query.as_deref(), &headers)?;
    let doc = Conformance {
        conforms_to: CONFORMANCE.iter().map(|c| c.to_string()).collect(),
        links: base
            .self_and_alternate(
                "/conformance",
                "application/json",
                format,
                "Conformance classes",
            )
            .to_vec(),
    };
    Ok(format.answer(doc, |doc| {
        pages::conformance(&Site::new(&state, &base), doc)
    }))
}
