//! The OpenAPI document, generated from the handlers' annotations (utoipa),
//! and a documentation page that needs no internet access.

use std::sync::OnceLock;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use utoipa::openapi::path::{ParameterBuilder, ParameterIn, ParameterStyle};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Required, ResponseBuilder};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::html::assets::cached;
use super::{changes, collections, health, item, items, landing, transactions};
use crate::http::app::AppState;
use crate::read::params::{DEFAULT_LIMIT, MAX_LIMIT};

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
        .routes(routes!(collections::queryables))
        .routes(routes!(items::list, items::create, items::options))
        .routes(routes!(changes::list))
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
        let (_, mut doc) = routes().split_for_parts();
        declare_security(&mut doc);
        declare_limit(&mut doc);
        let mut json = doc.to_pretty_json().expect("the document serializes");
        json.push('\n');
        json
    })
}

/// The items' `limit` as a component that the items path refers to: QGIS
/// takes its page size from `components.parameters.limit.schema` (its
/// `maximum` and `default`) and pages by 100 without it.
fn declare_limit(doc: &mut utoipa::openapi::OpenApi) {
    let schema = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(1))
        .maximum(Some(MAX_LIMIT))
        .default(Some(DEFAULT_LIMIT.into()));
    let limit = ParameterBuilder::new()
        .name("limit")
        .parameter_in(ParameterIn::Query)
        .required(Required::False)
        .style(Some(ParameterStyle::Form))
        .explode(Some(false))
        .description(Some(format!(
            "Page size, 1..{MAX_LIMIT} (larger values are lowered); default {DEFAULT_LIMIT}"
        )))
        .schema(Some(schema))
        .build();
    let components = doc.components.get_or_insert_with(Default::default);
    components
        .parameters
        .insert("limit".to_owned(), RefOr::T(limit));
    // After the collection's id, where the handler's annotation would put it.
    let items = doc.paths.paths.get_mut("/collections/{collectionId}/items");
    if let Some(parameters) = items.and_then(|i| i.get.as_mut()?.parameters.as_mut()) {
        let at = parameters.len().min(1);
        parameters.insert(at, RefOr::Ref(Ref::new("#/components/parameters/limit")));
    }
}

/// Declare the credentials the data endpoints take (API key or JWT, both
/// optional where anonymous callers have rights) and their 401 and 403.
fn declare_security(doc: &mut utoipa::openapi::OpenApi) {
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .bearer_format(
                    "API key or JWT (HS256/RS256) with a scope such as 'read:* write:parcels'",
                )
                .build(),
        ),
    );
    components.add_security_scheme(
        "apiKey",
        SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-API-Key"))),
    );
    let problem = |description: &str| {
        let content = ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("Problem")))
            .build();
        RefOr::T(
            ResponseBuilder::new()
                .description(description)
                .content("application/problem+json", content)
                .build(),
        )
    };
    let no_scopes = Vec::<String>::new;
    for (path, item) in doc.paths.paths.iter_mut() {
        if !(path.starts_with("/collections") || path.starts_with("/transactions")) {
            continue;
        }
        let operations = [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.patch,
            &mut item.delete,
        ];
        for op in operations.into_iter().flatten() {
            op.security = Some(vec![
                SecurityRequirement::new("bearer", no_scopes()),
                SecurityRequirement::new("apiKey", no_scopes()),
                SecurityRequirement::default(),
            ]);
            let responses = &mut op.responses.responses;
            responses.insert(
                "401".into(),
                problem("Credentials are needed, or those given are not valid (WWW-Authenticate)"),
            );
            responses.insert(
                "403".into(),
                problem("The credentials do not grant this on the collection"),
            );
        }
    }
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
/// The documentation page: Swagger UI, served from the binary, with the
/// map pages' policy: scripts, styles and requests to the service only
/// (Swagger UI sets inline styles and draws data: images), never framed.
pub async fn page() -> impl IntoResponse {
    const POLICY: &str = "default-src 'none'; script-src 'self'; \
        style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
        font-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(POLICY),
            ),
        ],
        include_str!("api.html"),
    )
}

/// `GET /api/swagger-init.js`: what starts Swagger UI on the page.
pub async fn swagger_init() -> Response {
    cached("text/javascript", include_str!("api-init.js"))
}

/// `GET /api/swagger-ui-bundle.js`: vendored (assets/swagger-ui, Apache-2.0).
pub async fn swagger_js() -> Response {
    cached(
        "text/javascript",
        include_str!("../../assets/swagger-ui/swagger-ui-bundle.js"),
    )
}

/// `GET /api/swagger-ui.css`: vendored with the script.
pub async fn swagger_css() -> Response {
    cached(
        "text/css",
        include_str!("../../assets/swagger-ui/swagger-ui.css"),
    )
}
