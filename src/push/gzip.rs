//! Gzip request bodies: each batch is compressed on the reading thread,
//! while the one before it is being sent, until the service refuses gzip;
//! then every batch of the run goes uncompressed.

use std::io::Write;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use flate2::write::GzEncoder;
use flate2::Compression;

use super::args::Gzip as GzipChoice;

/// Whether batches are compressed: shared by the reading thread, which
/// compresses, and the sender, which learns whether the service takes gzip.
#[derive(Debug)]
pub struct Gzip {
    /// Compression asked for (`--gzip on`, or `auto` to a distant service).
    wanted: bool,
    /// Why, as the summary says it.
    why: &'static str,
    /// The service answered 415 to a gzip body.
    refused: AtomicBool,
}

impl Gzip {
    /// Compress when `wanted`, until the service refuses it; `why` says
    /// which way `--gzip` decided.
    pub fn new(wanted: bool, why: &'static str) -> Self {
        Gzip {
            wanted,
            why,
            refused: AtomicBool::new(false),
        }
    }

    /// Decide `--gzip` for the service at `url`: `auto` compresses only when
    /// some address of its host is neither this machine's nor a private
    /// network's, since on a fast link compressing costs more time than it
    /// saves (100,000 points: see docs/push.md).
    pub async fn for_service(choice: GzipChoice, url: &str) -> Self {
        match choice {
            GzipChoice::On => Gzip::new(true, "--gzip on"),
            GzipChoice::Off => Gzip::new(false, "--gzip off"),
            GzipChoice::Auto if nearby(url).await => Gzip::new(
                false,
                "--gzip auto: the service is on this machine or its network",
            ),
            GzipChoice::Auto => Gzip::new(true, "--gzip auto: the service is beyond this network"),
        }
    }

    /// Whether bodies are sent compressed now.
    pub fn on(&self) -> bool {
        self.wanted && !self.refused.load(Ordering::Relaxed)
    }

    /// `body` gzip-compressed, when bodies are sent so.
    pub fn compress(&self, body: &[u8]) -> Option<Vec<u8>> {
        if !self.on() {
            return None;
        }
        // GeoJSON shrinks six- to tenfold; the default level runs at tens of
        // MB/s on one core, well ahead of what a service writes.
        let mut encoder =
            GzEncoder::new(Vec::with_capacity(body.len() / 4), Compression::default());
        encoder.write_all(body).ok()?;
        encoder.finish().ok()
    }

    /// The service does not take gzip bodies: send the rest uncompressed.
    pub fn refuse(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }

    /// How bodies were sent, for the summary.
    pub fn described(&self) -> String {
        match (self.wanted, self.refused.load(Ordering::Relaxed)) {
            (false, _) => format!("uncompressed, {}", self.why),
            (true, false) => format!("gzip, {}", self.why),
            (true, true) => "uncompressed: the service refused gzip with 415".into(),
        }
    }
}

/// Whether every address the host of `url` resolves to is loopback, private
/// (RFC 1918, IPv6 unique local) or link-local; a URL that does not resolve
/// is taken as distant.
async fn nearby(url: &str) -> bool {
    let Ok(uri) = url.parse::<hyper::Uri>() else {
        return false;
    };
    let Some(host) = uri.host() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(80);
    let Ok(addresses) = tokio::net::lookup_host((host, port)).await else {
        return false;
    };
    let mut any = false;
    for address in addresses {
        any = true;
        let near = match address.ip() {
            IpAddr::V4(ip) => ip.is_loopback() || ip.is_private() || ip.is_link_local(),
            IpAddr::V6(ip) => {
                ip.is_loopback()
                    || (ip.segments()[0] & 0xfe00) == 0xfc00
                    || (ip.segments()[0] & 0xffc0) == 0xfe80
            }
        };
        if !near {
            return false;
        }
    }
    any
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn bodies_are_compressed_until_the_service_refuses_gzip() {
        let body = br#"{"type":"FeatureCollection","features":[]}"#.repeat(100);
        let gzip = Gzip::new(true, "--gzip on");
        let compressed = gzip.compress(&body).unwrap();
        assert!(compressed.len() < body.len() / 10, "{}", compressed.len());
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&compressed[..])
            .read_to_end(&mut plain)
            .unwrap();
        assert_eq!(plain, body);
        assert_eq!(gzip.described(), "gzip, --gzip on");
        gzip.refuse();
        assert!(!gzip.on() && gzip.compress(&body).is_none());
        assert!(gzip.described().contains("refused gzip with 415"));
        let off = Gzip::new(false, "--gzip off");
        assert!(off.compress(&body).is_none());
        assert_eq!(off.described(), "uncompressed, --gzip off");
    }

    #[tokio::test]
    async fn auto_compresses_only_beyond_this_machine_and_its_network() {
        for near in [
            "http://127.0.0.1:8080",
            "http://localhost:8080",
            "http://10.1.2.3",
            "http://[::1]:80",
        ] {
            assert!(
                !Gzip::for_service(GzipChoice::Auto, near).await.on(),
                "{near}"
            );
        }
        for far in ["https://93.184.215.14", "http://[2001:db8::1]:8080"] {
            assert!(Gzip::for_service(GzipChoice::Auto, far).await.on(), "{far}");
        }
        assert!(Gzip::for_service(GzipChoice::On, "http://127.0.0.1")
            .await
            .on());
    }
}
