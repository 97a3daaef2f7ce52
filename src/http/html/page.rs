//! The frame every page shares (head, breadcrumbs, footer) and the headers
//! it is sent with: a Content-Security-Policy that runs only the service's
//! own script files.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};

use super::format::{vary_on_accept, with_format, Format};
use crate::http::app::AppState;
use crate::http::links::BaseUrl;
use crate::http::model::Link;

/// Where the pages are: the base URL of links and the optional basemap.
pub struct Site<'a> {
    /// The base URL links start with.
    pub base: &'a BaseUrl,
    /// `FEATUREPIPE_BASEMAP_URL`, an XYZ template.
    pub basemap: Option<&'a str>,
}

impl<'a> Site<'a> {
    /// The site of `state`, reached at `base`.
    pub fn new(state: &'a AppState, base: &'a BaseUrl) -> Self {
        Site {
            base,
            basemap: state.basemap_url.as_deref(),
        }
    }
}

/// A page: its title, where it sits, its links and its content.
pub struct Page<'a> {
    /// The `<title>` and the heading.
    pub title: &'a str,
    /// Breadcrumbs above the heading: (text, path) from the landing page down.
    pub trail: Vec<(String, String)>,
    /// The resource's links; `alternate` ones go into the head and the footer.
    pub links: &'a [Link],
    /// Whether the page has a map (and so loads OpenLayers and the page script).
    pub map: bool,
}

impl<'a> Page<'a> {
    /// A page without a map, at the top of the trail.
    pub fn plain(title: &'a str, links: &'a [Link]) -> Self {
        Page {
            title,
            trail: vec![],
            links,
            map: false,
        }
    }

    /// The whole document around `main`, answered as `text/html` with its
    /// security headers.
    pub fn render(&self, site: &Site, main: Markup) -> Response {
        let (base, basemap) = (site.base, site.basemap);
        let asset = |name: &str| format!("{}/assets/{name}", base.0);
        let alternates = self.links.iter().filter(|l| l.rel == "alternate");
        let document = html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (self.title) " · featurepipe" }
                    @for link in alternates.clone() {
                        link rel="alternate" type=(link.media_type) href=(link.href) title=(link.title);
                    }
                    @if self.map {
                        link rel="stylesheet" href=(asset("ol.css"));
                    }
                    link rel="stylesheet" href=(asset("featurepipe.css"));
                    @if self.map {
                        script src=(asset("ol.js")) defer {}
                        script src=(asset("featurepipe.js")) defer {}
                    }
                }
                body {
                    header {
                        nav.trail aria-label="Breadcrumbs" {
                            a href=(with_format(&format!("{}/", base.0), Format::Html)) { "featurepipe" }
                            @for (text, path) in &self.trail {
                                " / "
                                a href=(with_format(&format!("{}{path}", base.0), Format::Html)) { (text) }
                            }
                        }
                        h1 { (self.title) }
                    }
                    main { (main) }
                    footer {
                        @for link in alternates {
                            a href=(link.href) type=(link.media_type) { (link.title) }
                            " · "
                        }
                        a href=(format!("{}/api.html", base.0)) { "API documentation" }
                    }
                }
            }
        };
        let mut response = document.into_string().into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        if let Ok(policy) = HeaderValue::from_str(&content_security_policy(basemap)) {
            headers.insert(header::CONTENT_SECURITY_POLICY, policy);
        }
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        vary_on_accept(response)
    }
}

/// Scripts, styles and requests only to the service itself; images also from
/// the basemap's tile server, when one is configured.
pub fn content_security_policy(basemap: Option<&str>) -> String {
    let tiles = basemap.and_then(tile_source);
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
         img-src 'self'{}; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        tiles.map(|t| format!(" {t}")).unwrap_or_default()
    )
}

/// The CSP source of an XYZ template's host: `https://tile.example.org`,
/// and `https://*.example.org` for a host with a `{a-c}` placeholder.
fn tile_source(template: &str) -> Option<String> {
    let (scheme, rest) = template.split_once("://")?;
    let host = rest.split('/').next()?;
    let host = match host.split_once('.') {
        Some((first, domain)) if first.contains('{') => format!("*.{domain}"),
        _ => host.to_owned(),
    };
    let safe = |c: char| c.is_ascii_alphanumeric() || "-.:*".contains(c);
    host.chars().all(safe).then(|| format!("{scheme}://{host}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_names_only_the_service_and_the_tile_server() {
        let plain = content_security_policy(None);
        assert!(plain.contains("script-src 'self';"), "{plain}");
        assert!(!plain.contains("unsafe"), "{plain}");
        assert!(plain.contains("img-src 'self';"), "{plain}");
        let osm = content_security_policy(Some("https://{a-c}.tile.example.org/{z}/{x}/{y}.png"));
        assert!(
            osm.contains("img-src 'self' https://*.tile.example.org;"),
            "{osm}"
        );
        let own = content_security_policy(Some("http://127.0.0.1:8081/tiles/{z}/{x}/{y}.png"));
        assert!(
            own.contains("img-src 'self' http://127.0.0.1:8081;"),
            "{own}"
        );
        // A host that would break out of the policy is left out.
        let odd = content_security_policy(Some("https://a;script-src *.example.org/{z}/{x}/{y}"));
        assert!(odd.contains("img-src 'self';"), "{odd}");
    }
}
