//! `featurepipe push`: load a GeoJSON file of any size into a running
//! service, in batches, each POSTed to the collection's items with an
//! Idempotency-Key derived from its content, so that running the same
//! command again after a failure writes only what was not written.
//!
//! The input is read on a thread of its own, at most one batch ahead of the
//! ones being sent, and each batch is gzip-compressed there: memory holds
//! about `--jobs` + 2 batches, whatever the input's size. Each batch's key
//! is its own, and the service stores it with the batch's rows in one
//! transaction: batches sent in parallel (`--jobs`) and answered in any
//! order resume as exactly as batches sent one by one.

mod answer;
pub mod args;
mod batches;
mod gzip;
mod http;
mod progress;
mod split;
mod summary;
mod tls;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc::Receiver;

use answer::Outcome;
use args::{Mode, PushArgs};
use batches::{Batch, Batches, Limits};
use gzip::Gzip;
use http::{Body, Service};
use progress::Progress;
use split::InputError;
use summary::Tally;

/// How much of the input is read at a time.
const READ_BUFFER: usize = 256 * 1024;
/// The smallest `--batch-bytes` (a batch must hold a feature).
const LEAST_BATCH_BYTES: usize = 1024;

/// Send the input to the service and print the summary; an error when any
/// feature was not written.
pub async fn run(args: PushArgs) -> Result<(), Box<dyn std::error::Error>> {
    if args.batch_bytes < LEAST_BATCH_BYTES {
        return Err(format!("--batch-bytes must be at least {LEAST_BATCH_BYTES}").into());
    }
    let limits = Limits {
        features: args.batch as usize,
        bytes: args.batch_bytes,
    };
    let gzip = Arc::new(Gzip::for_service(args.gzip, &args.url).await);
    let service = Service::new(&args, gzip.clone())?;
    if args.ca_file.is_some() && !args.url.starts_with("https://") {
        eprintln!(
            "featurepipe push: --ca-file (FEATUREPIPE_CA_FILE) is not used: --url {} is not https://",
            args.url
        );
    }
    let (input, size) = open(&args.file)?;
    // The service takes no key in batch mode: its batches commit one by one.
    let keyed = args.mode != Mode::Batch;
    if !keyed {
        eprintln!(
            "featurepipe push: --mode batch sends no Idempotency-Key (the service takes none \
             in that mode): running this again writes every feature again"
        );
    }
    if args.run.is_some() && !keyed {
        eprintln!("featurepipe push: --run is not used: --mode batch sends no keys to mix it into");
    }
    let scope = scope(&args);
    let (batches, next) = tokio::sync::mpsc::channel(1);
    let compressing = gzip.clone();
    std::thread::spawn(move || {
        for mut batch in Batches::new(input, limits, scope) {
            // A batch with features that are not JSON is not sent.
            if let Ok(batch) = &mut batch {
                if batch.broken.is_empty() {
                    batch.gzip = compressing.compress(&batch.body);
                }
            }
            let last = batch.is_err();
            // A closed channel: the push stopped, nothing more is wanted.
            if batches.blocking_send(batch).is_err() || last {
                break;
            }
        }
    });

    let started = Instant::now();
    let mut progress = Progress::new(size);
    let jobs = args.jobs as usize;
    let tally = send_all(&service, next, jobs, keyed, &mut progress).await;
    progress.finish();
    eprint!(
        "{}",
        tally.render(
            &service.uri().to_string(),
            args.run.as_deref(),
            &gzip.described(),
            started.elapsed()
        )
    );
    if tally.complete() {
        return Ok(());
    }
    Err(format!("not everything was written: {}", rerun(args.mode)).into())
}

/// What every batch's key is scoped to: the collection, the mode, and the
/// `--run` when given (without it, keys are those of pushes before `--run`
/// existed, so that their loads resume).
fn scope(args: &PushArgs) -> String {
    let mut scope = format!("{}\0{}", args.collection, args.mode.name());
    if let Some(run) = &args.run {
        scope.push_str("\0run ");
        scope.push_str(run);
    }
    scope
}

/// Send the batches `next` brings, up to `jobs` at once, and account for
/// their answers in whatever order they come. A batch whose failure every
/// later one would share stops the reading; the batches already sent are
/// still answered and counted.
async fn send_all(
    service: &Service,
    mut next: Receiver<Result<Batch, InputError>>,
    jobs: usize,
    keyed: bool,
    progress: &mut Progress,
) -> Tally {
    let mut tally = Tally::default();
    let mut in_flight = FuturesUnordered::new();
    let mut reading = true;
    loop {
        tokio::select! {
            batch = next.recv(), if reading && !tally.stopping() && in_flight.len() < jobs => {
                match batch {
                    Some(Ok(mut batch)) => in_flight.push(async move {
                        let outcome = if batch.broken.is_empty() {
                            send(service, &mut batch, keyed).await
                        } else {
                            Outcome::broken(&batch.broken, batch.count)
                        };
                        (batch, outcome)
                    }),
                    Some(Err(e)) => tally.stop(format!("reading the input: {e}")),
                    None => reading = false,
                }
            }
            Some((batch, outcome)) = in_flight.next(), if !in_flight.is_empty() => {
                tally.add(&batch, &outcome);
                progress.update(batch.index, batch.end, tally.answered());
                if outcome.stop {
                    tally.stop(format!(
                        "after batch {}, whose failure later batches would share; \
                         nothing more was sent once it was answered",
                        batch.index
                    ));
                }
            }
            else => break,
        }
    }
    tally
}

/// What running the same command again does, in `mode`.
fn rerun(mode: Mode) -> &'static str {
    match mode {
        Mode::Atomic => {
            "fix the cause and run the same command again; \
             batches already written are replayed, not written twice"
        }
        Mode::Skip => {
            "the service skipped the features named above; \
             running the same command again replays those batches as they were"
        }
        Mode::Batch => {
            "without Idempotency-Keys (mode=batch), \
             running the same command again writes every feature again"
        }
    }
}

/// Send `batch` (its bodies are taken), with its key if `keyed`, and read the answer.
async fn send(service: &Service, batch: &mut Batch, keyed: bool) -> Outcome {
    let body = Body {
        plain: Bytes::from(std::mem::take(&mut batch.body)),
        gzip: batch.gzip.take().map(Bytes::from),
    };
    let key = keyed.then_some(batch.key.as_str());
    match service.send(&body, key).await {
        Ok(reply) => Outcome {
            geojson_bytes: body.plain.len(),
            sent_bytes: reply.sent,
            ..answer::read(&reply, batch.first_feature, batch.count)
        },
        Err(unreachable) => Outcome {
            failed: batch.count,
            problem: Some(unreachable.to_string()),
            stop: true,
            ..Outcome::default()
        },
    }
}

/// The input and its size when known (a file, or standard input redirected from one).
fn open(path: &Path) -> Result<(Box<dyn BufRead + Send>, Option<u64>), String> {
    if path == Path::new("-") {
        let size = stdin_size();
        let input = BufReader::with_capacity(READ_BUFFER, std::io::stdin());
        return Ok((Box::new(input), size));
    }
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let size = file
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    Ok((Box::new(BufReader::with_capacity(READ_BUFFER, file)), size))
}

/// The size of standard input when it is a file (`< data.geojson`).
#[cfg(unix)]
fn stdin_size() -> Option<u64> {
    use std::os::fd::AsFd;
    let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    let metadata = std::fs::File::from(fd).metadata().ok()?;
    metadata.is_file().then_some(metadata.len())
}

#[cfg(not(unix))]
fn stdin_size() -> Option<u64> {
    None
}
