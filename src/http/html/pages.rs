//! The web pages of the read resources, rendered from the same documents as
//! their JSON. Every value is escaped by the templates; the map pages pass
//! what their script needs in `data-` attributes, never in inline script.

use axum::response::Response;
use maud::{html, Markup};
use serde_json::Value;

use super::format::{with_format, Format};
use super::page::Page;
pub use super::page::Site;
use crate::catalog::Collection;
use crate::http::model::{CollectionInfo, Collections, Conformance, LandingPage, Link};
use crate::http::representation::{item_path, GEOJSON};
use crate::read::params::percent_encode;
use crate::read::sql::property_columns;

/// The breadcrumb of a collection.
fn collection_crumb(id: &str, title: &str) -> (String, String) {
    (
        title.to_owned(),
        format!("/collections/{}", percent_encode(id)),
    )
}

/// The breadcrumb of the collections.
fn collections_crumb() -> (String, String) {
    ("Collections".into(), "/collections".into())
}

/// The link's target as a web page, where the target has one.
fn page_href(link: &Link) -> String {
    if link.media_type == "application/json" || link.media_type == GEOJSON {
        with_format(&link.href, Format::Html)
    } else {
        link.href.clone()
    }
}

/// A list of links other than `self` and `alternate`, each to its web page.
fn link_list(links: &[Link]) -> Markup {
    html! {
        ul.links {
            @for link in links.iter().filter(|l| l.rel != "self" && l.rel != "alternate") {
                li { a href=(page_href(link)) { (link.title) } " (" (link.rel) ")" }
            }
        }
    }
}

/// `GET /` as a web page.
pub fn landing(site: &Site, doc: &LandingPage) -> Response {
    let main = html! {
        p { (doc.description) }
        (link_list(&doc.links))
    };
    Page::plain(&doc.title, &doc.links).render(site, main)
}

/// `GET /conformance` as a web page.
pub fn conformance(site: &Site, doc: &Conformance) -> Response {
    let main = html! {
        p { "The conformance classes this service implements:" }
        ul.classes { @for class in &doc.conforms_to { li { code { (class) } } } }
    };
    Page::plain("Conformance", &doc.links).render(site, main)
}

/// `GET /collections` as a web page.
pub fn collections(site: &Site, doc: &Collections) -> Response {
    let page = Page::plain("Collections", &doc.links);
    let items = |c: &CollectionInfo| {
        let link = c.links.iter().find(|l| l.rel == "items");
        link.map(page_href).unwrap_or_default()
    };
    page.render(
        site,
        html! {
            table.collections {
                thead { tr { th { "Collection" } th { "Description" } th { "Features" } th { "Writable" } } }
                tbody {
                    @for c in &doc.collections {
                        @let own = c.links.iter().find(|l| l.rel == "self");
                        tr {
                            td { a href=(own.map(page_href).unwrap_or_default()) { (c.title) } }
                            td { (c.description.as_deref().unwrap_or("")) }
                            td { a href=(items(c)) { "on a map" } }
                            td { (if c.writable { "yes" } else { "no" }) }
                        }
                    }
                }
            }
        },
    )
}

/// `GET /collections/{id}` as a web page.
pub fn collection(site: &Site, doc: &CollectionInfo) -> Response {
    let page = Page {
        title: &doc.title,
        trail: vec![collections_crumb()],
        links: &doc.links,
        map: false,
    };
    let bbox = doc.extent.as_ref().and_then(|e| e.spatial.bbox.first());
    page.render(
        site,
        html! {
            @if let Some(description) = &doc.description { p { (description) } }
            dl.facts {
                dt { "Id" } dd { code { (doc.id) } }
                dt { "Extent (CRS84)" }
                dd { @match bbox { Some(b) => { (format!("{}, {} – {}, {}", b[0], b[1], b[2], b[3])) }, None => { "no features" } } }
                dt { "Storage CRS" } dd { code { (doc.storage_crs) } }
                dt { "CRSs offered" } dd { @for crs in &doc.crs { code { (crs) } " " } }
                dt { "Writable" } dd { (if doc.writable { "yes" } else { "no" }) }
            }
            (link_list(&doc.links))
        },
    )
}

/// A page of features (or one feature) and what its map and editor need.
pub struct FeaturesView<'a> {
    /// The collection read.
    pub coll: &'a Collection,
    /// The features, as read.
    pub features: Vec<Value>,
    /// `numberMatched`, for a page of items; `None` for one feature.
    pub matched: Option<(i64, i64)>,
    /// The resource's links (self, alternate, next, prev, collection).
    pub links: &'a [Link],
    /// Where the script reads the same features as GeoJSON, for the map.
    pub geojson_url: String,
}

/// The items page or a feature's page: a map, the properties as a table,
/// and the editor (hidden until the script learns the caller may write).
pub fn features(site: &Site, title: &str, view: &FeaturesView) -> Response {
    let coll = view.coll;
    let coll_title = coll.title.as_deref().unwrap_or(&coll.id);
    let items_path = format!("/collections/{}/items", percent_encode(&coll.id));
    let mut trail = vec![collections_crumb(), collection_crumb(&coll.id, coll_title)];
    if view.matched.is_none() {
        trail.push(("Features".into(), items_path));
    }
    let page = Page {
        title,
        trail,
        links: view.links,
        map: true,
    };
    let columns: Vec<&str> = property_columns(coll)
        .map(|ci| coll.columns[ci].name.as_str())
        .collect();
    let link = |rel: &str| view.links.iter().find(|l| l.rel == rel);
    let main = html! {
        @if let Some((matched, offset)) = view.matched {
            p.summary {
                (matched) " features"
                @if !view.features.is_empty() {
                    ", showing " (offset + 1) "–" (offset + view.features.len() as i64)
                }
                @if let Some(prev) = link("prev") { " · " a rel="prev" href=(prev.href) { "previous page" } }
                @if let Some(next) = link("next") { " · " a rel="next" href=(next.href) { "next page" } }
            }
        }
        div #map .map
            data-features=(view.geojson_url)
            data-collection=(format!("{}/collections/{}", site.base.0, percent_encode(&coll.id)))
            data-basemap=[site.basemap]
            data-state="loading" {}
        (editor())
        div #table-box .table-box { table #features .features {
            thead { tr { th { "id" } @for name in &columns { th { (name) } } } }
            tbody {
                @for feature in &view.features {
                    @let id = text(&feature["id"]);
                    tr data-id=(id) tabindex="0" {
                        td.id { a href=(with_format(&format!("{}{}", site.base.0, item_path(coll, &id)), Format::Html)) { (id) } }
                        @for name in &columns {
                            td data-key=(name) { (text(&feature["properties"][name])) }
                        }
                    }
                }
            }
        } }
    };
    page.render(site, main)
}

/// A feature as PostgreSQL wrote it, parsed for its page (null if it were not JSON).
pub fn parsed(json: &str) -> Value {
    serde_json::from_str(json).unwrap_or(Value::Null)
}

/// A property value as the table shows it: text as is, null as nothing,
/// anything else as JSON.
fn text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The credential form and the editor's controls, filled in by the script.
fn editor() -> Markup {
    html! {
        form #credential .credential {
            label { "API key or token " input #token type="password" autocomplete="off"; }
            " " button type="submit" { "Use" }
            " " button #forget type="button" { "Forget" }
            " " span #rights role="status" {}
        }
        section #editor .editor hidden {
            div.toolbar {
                button #create type="button" { "New feature" }
                " " span #hint {}
            }
            p #status role="status" {}
            form #feature-form hidden {
                h2 #form-title {}
                div #fields {}
                p #geometry-note {}
                button #save type="submit" { "Save" }
                " " button #cancel type="button" { "Cancel" }
                " " button #delete type="button" { "Delete" }
                " " button #confirm-delete type="button" hidden { "Really delete" }
            }
            div #conflict .conflict hidden {
                p { "Someone else changed this feature after you opened it. Your changes are not saved." }
                button #reload type="button" { "Reload their version" }
                " " button #compare type="button" { "Show both versions" }
                table #versions hidden {
                    thead { tr { th { "" } th { "Your version" } th { "Saved version" } } }
                    tbody {}
                }
            }
        }
    }
}
