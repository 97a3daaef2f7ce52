//! What `featurepipe push` is told on its command line.

use clap::Args;

use crate::units::{parse_bytes, parse_switch};

/// Settings of `featurepipe push`.
#[derive(Debug, Clone, Args)]
pub struct PushArgs {
    /// The GeoJSON to send: a FeatureCollection, or a GeoJSON text sequence
    /// (RFC 8142, or one feature per line); `-` reads standard input.
    pub file: std::path::PathBuf,
    /// The collection to write to.
    #[arg(long, short)]
    pub collection: String,
    /// The featurepipe service: http:// or https://.
    #[arg(long, env = "FEATUREPIPE_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// PEM file of the CAs to trust for an https:// --url, instead of the system's.
    #[arg(long, env = "FEATUREPIPE_CA_FILE")]
    pub ca_file: Option<std::path::PathBuf>,
    /// Send batches gzip-compressed (`on`, until the service refuses gzip), or
    /// not (`off`), or (`auto`) only to a service beyond this machine and its
    /// private network, where the link, not the database, is what is slow.
    #[arg(long, default_value = "auto", value_parser = parse_gzip)]
    pub gzip: Gzip,
    /// Most features per request; batches are cut by `--batch-bytes` first.
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
    /// Most bytes per request (suffixes KiB, MiB); also the largest feature taken.
    #[arg(long, default_value = "2MiB", value_parser = parse_bytes)]
    pub batch_bytes: usize,
    /// How the service writes each request: atomic, batch or skip (its `mode`).
    #[arg(long, default_value = "atomic", value_enum)]
    pub mode: Mode,
    /// API key or JWT, sent as `Authorization: Bearer`.
    #[arg(long, env = "FEATUREPIPE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// How many times a request the network or the service failed is sent again.
    #[arg(long, default_value_t = 5)]
    pub retries: u32,
    /// How many batches are sent at once, each on a connection of its own.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=MAX_JOBS))]
    pub jobs: u32,
    /// A name mixed into every batch's key: a new load of an input an earlier
    /// push wrote (the same name again resumes that load).
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub run: Option<String>,
}

/// `--gzip`: whether batches are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gzip {
    /// Always (until the service refuses gzip).
    On,
    /// Never.
    Off,
    /// Only to a service that is not on this machine or its private network.
    Auto,
}

/// `on`, `off` (or their synonyms) or `auto`.
fn parse_gzip(s: &str) -> Result<Gzip, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(Gzip::Auto),
        other => match parse_switch(other) {
            Ok(true) => Ok(Gzip::On),
            Ok(false) => Ok(Gzip::Off),
            Err(_) => Err(format!("'{other}' is not on, off or auto")),
        },
    }
}

/// The most `--jobs`: each holds a connection of the service's pool
/// (`FEATUREPIPE_POOL_SIZE`, 16 by default) while its batch is written.
const MAX_JOBS: i64 = 64;

/// How the service writes each request: its `mode` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// All or nothing per request.
    Atomic,
    /// Each of the service's batches commits on its own.
    Batch,
    /// Every valid feature is written; failing ones are skipped.
    Skip,
}

impl Mode {
    /// The value of the `mode` query parameter.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Atomic => "atomic",
            Mode::Batch => "batch",
            Mode::Skip => "skip",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_defaults_match_the_readme() {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            push: PushArgs,
        }
        let p = Wrapper::parse_from(["push", "-", "--collection", "c"]).push;
        assert_eq!(p.url, "http://127.0.0.1:8080");
        assert_eq!((p.batch, p.batch_bytes, p.retries), (50_000, 2 << 20, 5));
        assert_eq!(p.mode, Mode::Atomic);
        assert!(p.gzip == Gzip::Auto && p.ca_file.is_none());
        assert_eq!((p.jobs, p.run), (4, None));
        let off = Wrapper::parse_from(["push", "-", "-c", "c", "--gzip", "off"]).push;
        assert_eq!(off.gzip, Gzip::Off);
        let on = Wrapper::parse_from(["push", "-", "-c", "c", "--gzip", "yes"]).push;
        assert_eq!(on.gzip, Gzip::On);
        assert!(Wrapper::try_parse_from(["push", "-", "-c", "c", "--gzip", "maybe"]).is_err());
        assert!(Wrapper::try_parse_from(["push", "-", "-c", "c", "--mode", "all"]).is_err());
        for wrong in [["--jobs", "0"], ["--jobs", "65"], ["--run", ""]] {
            let args = [["push", "-", "-c", "c"].as_slice(), &wrong].concat();
            assert!(Wrapper::try_parse_from(args).is_err(), "{wrong:?}");
        }
    }
}
