//! The OpenAPI document, generated from the handlers' annotations (utoipa),
//! and a documentation page that needs no internet access.

use std::sync::OnceLock;

use axum::http::{header, HeaderValue};
use axum::response::IntoResponse;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{collections, health, item, items, landing, transactions};
use crate::app::AppState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "featurepipe",
        description = "Saves GeoJSON features to PostGIS in the fewest database round trips, \
                       and speaks OGC API - Features (Part 1 core and GeoJSON, Part 2 CRS, \
                       Part 4 create/replace/update/delete). Extension: POST a whole \
                       FeatureCollection to create it in one transaction, answered with the \
                       ids in feature order and a report per batch.",
        license(name = "MIT OR Apache-2.0")
    ),
    tags(
        (name = "Capabilities", description = "What the service offers"),
        (name = "Features", description = "Reading and writing features"),
        (name = "Operations", description = "Probes for orchestrators")
    )
)]
struct ApiDoc;

/// Every route, with its OpenAPI description.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(document))
        .routes(routes!(page))
        .routes(routes!(landing::landing))
        .routes(routes!(landing::conformance))
        .routes(routes!(collections::list))
        .routes(routes!(collections::one))
        .routes(routes!(collections::schema))
        .routes(routes!(items::list, items::create, items::options))
        .routes(routes!(transactions::create))
        .routes(routes!(
            item::get,
            item::put,
            item::patch,
            item::delete,
            item::options
        ))
}

/// The OpenAPI document as served and as committed in `openapi/featurepipe.json`.
pub fn document_json() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let (_, doc) = routes().split_for_parts();
        let mut json = doc.to_pretty_json().expect("the document serializes");
        json.push('\n');
        json
    })
}

#[utoipa::path(
    get,
    path = "/api",
    tag = "Capabilities",
    summary = "This OpenAPI document",
    operation_id = "openapi",
    responses((status = 200, description = "OpenAPI 3.1", content_type = "application/vnd.oai.openapi+json;version=3.1", body = Object))
)]
/// Serve the OpenAPI document.
pub async fn document() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/vnd.oai.openapi+json;version=3.1"),
        )],
        document_json(),
    )
}

#[utoipa::path(
    get,
    path = "/api.html",
    tag = "Capabilities",
    summary = "Documentation of this API as a web page (no internet access needed)",
    operation_id = "apiDocumentation",
    responses((status = 200, description = "HTML", content_type = "text/html", body = String))
)]
/// The documentation page: Swagger UI, served from the binary.
pub async fn page() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        include_str!("api.html"),
    )
}

/// `GET /api/swagger-ui-bundle.js`: vendored (assets/swagger-ui, Apache-2.0).
pub async fn swagger_js() -> impl IntoResponse {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/javascript"),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("max-age=86400"),
            ),
        ],
        include_str!("../../assets/swagger-ui/swagger-ui-bundle.js"),
    )
}

/// `GET /api/swagger-ui.css`: vendored with the script.
pub async fn swagger_css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/css")),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("max-age=86400"),
            ),
        ],
        include_str!("../../assets/swagger-ui/swagger-ui.css"),
    )
}
