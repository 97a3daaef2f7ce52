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
    /// Send batches gzip-compressed (`on`, until the service refuses gzip) or not (`off`).
    #[arg(long, default_value = "on", value_parser = parse_switch, action = clap::ArgAction::Set)]
    pub gzip: bool,
    /// Features per request.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
    /// Most bytes per request (suffixes KiB, MiB); also the largest feature taken.
    #[arg(long, default_value = "16MiB", value_parser = parse_bytes)]
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
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_JOBS))]
    pub jobs: u32,
    /// A name mixed into every batch's key: a new load of an input an earlier
    /// push wrote (the same name again resumes that load).
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub run: Option<String>,
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
        assert_eq!((p.batch, p.batch_bytes, p.retries), (1000, 16 << 20, 5));
        assert_eq!(p.mode, Mode::Atomic);
        assert!(p.gzip && p.ca_file.is_none());
        assert_eq!((p.jobs, p.run), (1, None));
        let off = Wrapper::parse_from(["push", "-", "-c", "c", "--gzip", "off"]).push;
        assert!(!off.gzip);
        assert!(Wrapper::try_parse_from(["push", "-", "-c", "c", "--mode", "all"]).is_err());
        for wrong in [["--jobs", "0"], ["--jobs", "65"], ["--run", ""]] {
            let args = [["push", "-", "-c", "c"].as_slice(), &wrong].concat();
            assert!(Wrapper::try_parse_from(args).is_err(), "{wrong:?}");
        }
    }
}
