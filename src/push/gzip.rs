//! Gzip request bodies: each batch is compressed on the reading thread,
//! while the one before it is being sent, until the service refuses gzip;
//! then every batch of the run goes uncompressed.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use flate2::write::GzEncoder;
use flate2::Compression;

/// Whether batches are compressed: shared by the reading thread, which
/// compresses, and the sender, which learns whether the service takes gzip.
#[derive(Debug)]
pub struct Gzip {
    /// `--gzip on`.
    wanted: bool,
    /// The service answered 415 to a gzip body.
    refused: AtomicBool,
}

impl Gzip {
    /// Compress when `wanted` (`--gzip on`), until the service refuses it.
    pub fn new(wanted: bool) -> Self {
        Gzip {
            wanted,
            refused: AtomicBool::new(false),
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
    pub fn described(&self) -> &'static str {
        match (self.wanted, self.refused.load(Ordering::Relaxed)) {
            (false, _) => "uncompressed, --gzip off",
            (true, false) => "gzip",
            (true, true) => "uncompressed: the service refused gzip with 415",
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn bodies_are_compressed_until_the_service_refuses_gzip() {
        let body = br#"{"type":"FeatureCollection","features":[]}"#.repeat(100);
        let gzip = Gzip::new(true);
        let compressed = gzip.compress(&body).unwrap();
        assert!(compressed.len() < body.len() / 10, "{}", compressed.len());
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&compressed[..])
            .read_to_end(&mut plain)
            .unwrap();
        assert_eq!(plain, body);
        assert_eq!(gzip.described(), "gzip");
        gzip.refuse();
        assert!(!gzip.on() && gzip.compress(&body).is_none());
        assert!(gzip.described().contains("refused gzip with 415"));
        let off = Gzip::new(false);
        assert!(off.compress(&body).is_none());
        assert_eq!(off.described(), "uncompressed, --gzip off");
    }
}
