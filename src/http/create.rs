//! Creating features by POST on a collection's items, below its handler:
//! the body read whole or as it arrives, the mode's writer, and the
//! Idempotency-Key's two paths (the request's hash known before the write,
//! or only once the body has ended) are chosen here; the handler answers
//! the [`Created`] outcome.

use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use tokio::sync::oneshot;

use super::body::{
    self, answer_of, idempotency, look_up_key, read_body, read_or_stream, request_hasher,
    response_of, Incoming, KeyUse, StreamedBody,
};
use super::jsonfg;
use super::links::BaseUrl;
use super::problem::ApiError;
use super::representation::{
    created, refused_as_read, set_location, set_preference_applied, Preferences, Return,
};
use crate::auth::Caller;
use crate::catalog::Collection;
use crate::error::Error;
use crate::feature::stream::Streamed::{self, Rows, Whole};
use crate::feature::{parse_body, ParsedBody, Reading};
use crate::http::app::AppState;
use crate::read::{self, Rendering, StoredFeature};
use crate::session::report::SessionReport;
use crate::session::stream::{carry_out_streamed, read_windows, Streaming};
use crate::session::{self, Mode, Reply};
use crate::write::idempotency::{Answer, Idempotency, Respond, Shown};
use crate::write::report::WriteReport;
use crate::write::stream::{read_rows, write_stream, Verdict};
use crate::write::write_features;

/// A POST of features, as the handler has read its request.
pub struct Post<'a> {
    /// The state, for the caller.
    pub state: &'a AppState,
    /// Who asks.
    pub caller: &'a Caller,
    /// The request's headers.
    pub headers: &'a HeaderMap,
    /// Path and query, as the Idempotency-Key's hash takes them.
    pub target: String,
    /// How a FeatureCollection commits.
    pub mode: Mode,
    /// How the features are read.
    pub how: Reading,
    /// How the created features are answered.
    pub answer: Arc<PostAnswer>,
}

/// What a POST of features came to.
pub enum Created {
    /// Answered already: a stored response replayed, or a write in atomic
    /// mode (its answer made under the key, or now).
    Answered(Response),
    /// A FeatureCollection in batch or skip mode: its edit-session report.
    Session(SessionReport),
}

/// Where a request stands once its body has been read (or refused).
enum Taken {
    /// Done: answered, or a session reported.
    Done(Created),
    /// Read whole, to be written as such, under this key if any.
    Held(Result<ParsedBody, Error>, Option<Idempotency>),
}

/// Bodies up to this size are parsed on the async worker that received
/// them (about 0.1 ms of work at most): the hop to a blocking thread and
/// back costs 25–30 µs a request.
const PARSED_IN_PLACE: usize = 32 << 10;

/// Create the features of `body`: read whole, or (a larger FeatureCollection,
/// with pipelining on) written as it arrives in every mode.
pub async fn create_features(post: &Post<'_>, body: Body) -> Result<Created, ApiError> {
    let (state, headers) = (post.state, post.headers);
    // With pipelining off statements go one at a time: the body is read whole.
    let incoming = match state.write.pipeline {
        true => {
            let hasher = request_hasher(headers, ("POST", &post.target));
            read_or_stream(state, headers, body, hasher).await?
        }
        false => Incoming::Whole(read_body(state, headers, body).await?, None),
    };
    let taken = match incoming {
        Incoming::Whole(body, hash) => {
            let key = match hash {
                Some(hash) => match look_up_key(state, post.caller, headers).await? {
                    Some(found) => found.settle(hash, post.mode)?,
                    None => KeyUse::Write(None),
                },
                None => {
                    let target = ("POST", post.target.as_str());
                    idempotency(state, post.caller, headers, target, &body, post.mode).await?
                }
            };
            let idempotency = match key {
                KeyUse::Replay(response) => return Ok(Created::Answered(response)),
                KeyUse::Write(idempotency) => idempotency,
            };
            // Parsing tens of MiB is CPU work: keep it off the async workers.
            // A small body takes less than the hop to another thread would.
            let parsed = match body.len() <= PARSED_IN_PLACE {
                true => parse_body(&body, &post.answer.coll, &post.how),
                false => {
                    let (coll, how) = (post.answer.coll.clone(), post.how.clone());
                    tokio::task::spawn_blocking(move || parse_body(&body, &coll, &how))
                        .await
                        .map_err(|e| Error::task_failed("parsing the body", &e))?
                }
            };
            Taken::Held(parsed, idempotency)
        }
        Incoming::Streaming(streamed) => write_streamed(post, streamed).await?,
    };
    match taken {
        Taken::Done(created) => Ok(created),
        Taken::Held(parsed, idempotency) => write_held(post, parsed, idempotency).await,
    }
}

/// Write a body read whole.
async fn write_held(
    post: &Post<'_>,
    parsed: Result<ParsedBody, Error>,
    idempotency: Option<Idempotency>,
) -> Result<Created, ApiError> {
    let (state, answer) = (post.state, &post.answer);
    let preferences = &answer.preferences;
    let may_read = post.caller.can_read(&answer.coll.id);
    // From here on, refusals say how the body was read, as successes do.
    let as_read = move |e: ApiError| refused_as_read(e, preferences);
    let parsed = parsed.map_err(|e| as_read(e.into()))?;
    let single = parsed.single;
    let rendering = Rendering {
        encoding: jsonfg::answer_encoding(post.headers, parsed.jsonfg),
        crs: parsed.crs.clone(),
    };
    if post.mode != Mode::Atomic && !single {
        // Batch or skip: the features as one insert operation each, whose
        // operations and report are counted in the memory bodies share.
        let features = parsed.rows.len() + parsed.rejected.len();
        let _room = state
            .body_room
            .reserve(features.saturating_mul(session::report::BYTES_PER_OPERATION))
            .await
            .map_err(as_read)?;
        let (operations, steps) = session::inserts(&answer.coll, parsed, may_read);
        let work = (operations.as_slice(), steps.as_slice());
        let batch = state.write.limits.max_features;
        let key = idempotency.as_ref();
        let report = session::carry_out(&state.db, work, post.mode, batch, key, Reply::Report)
            .await
            .map_err(|e| as_read(e.into()))?;
        return Ok(Created::Session(report));
    }
    let answer = Arc::new(answer.for_body(single, rendering));
    let idempotency = idempotency.map(|idempotency| Idempotency {
        respond: Some(answer.clone()),
        ..idempotency
    });
    let report = write_features(
        state.db.clone(),
        answer.coll.clone(),
        parsed,
        state.write,
        idempotency,
    )
    .await
    .map_err(|e| as_read(e.for_reader(may_read).into()))?;
    Ok(Created::Answered(answered(state, &answer, &report).await))
}

/// What a body written as it arrived wrote.
enum Written {
    /// Atomic mode: committed.
    Features(WriteReport),
    /// Batch or skip mode: the session's report.
    Session(SessionReport),
}

/// Write a FeatureCollection as it arrives: parsed, validated and written
/// batch by batch. Atomic and skip mode commit once the whole body has
/// been read and found good; a body refused on the way (too large, cut
/// short, stalled, not JSON, an invalid feature in atomic mode) is rolled
/// back and answered as it would have been read whole. Batch mode commits
/// each batch as it comes: a body refused after some batches committed is
/// answered with its refusal and the report of what was committed.
///
/// The Idempotency-Key is looked up before the body is read (a stored
/// response is then replayed once the body's hash is known, and nothing is
/// written); it is claimed with the request's hash before COMMIT.
async fn write_streamed(post: &Post<'_>, streamed: StreamedBody) -> Result<Taken, ApiError> {
    let (state, answer) = (post.state, &post.answer);
    let found = look_up_key(state, post.caller, post.headers).await?;
    let (found, stored) = match found {
        Some(found) if found.has_response() || post.mode == Mode::Batch => (None, Some(found)),
        found => (found, None),
    };
    if let Some(found) = stored {
        // Replayed or refused: the body is only hashed.
        let hash = streamed.end().await?.expect("a keyed request is hashed");
        return match found.settle(hash, post.mode)? {
            KeyUse::Replay(response) => Ok(Taken::Done(Created::Answered(response))),
            KeyUse::Write(_) => unreachable!("a stored response is replayed or refused"),
        };
    }
    let may_read = post.caller.can_read(&answer.coll.id);
    let (coll, srid) = (answer.coll.clone(), post.how.crs.srid);
    let StreamedBody {
        head,
        rest,
        received: reading,
        held,
    } = streamed;
    let idempotency = found.map(|found| found.idempotency(answer.clone()));
    let (verdict, judged) = oneshot::channel();
    let (writing, parse): (BoxFuture<'_, Result<Option<Written>, Error>>, _) = match post.mode {
        Mode::Atomic => {
            let limits = state.write.limits;
            let (batches, parse) = read_rows(head, rest, coll.clone(), post.how.clone(), limits);
            let (db, options) = (state.db.clone(), state.write);
            let key = idempotency.clone();
            let writing = write_stream(db, coll.clone(), batches, judged, options, key, srid);
            let writing = writing.map(|w| w.map(|report| report.map(Written::Features)));
            (writing.boxed(), parse)
        }
        Mode::Batch | Mode::Skip => {
            let batch_size = state.write.limits.max_features;
            let how = post.how.clone();
            let (windows, parse) = read_windows(head, rest, coll.clone(), how, batch_size);
            let streaming = Streaming {
                db: state.db.clone(),
                coll: coll.clone(),
                mode: post.mode,
                batch_size,
                srid,
                may_read,
                budget: state.body_room.0.clone(),
            };
            let key = idempotency.clone();
            let writing = carry_out_streamed(streaming, windows, judged, key, held);
            let writing = writing.map(|w| w.map(|report| report.map(Written::Session)));
            (writing.boxed(), parse)
        }
    };
    let (written, outcome) = tokio::join!(writing, judge(reading, parse, verdict));
    let preferences = &answer.preferences;
    let as_read = |e: ApiError| refused_as_read(e, preferences);
    // A body refused after batches committed (batch mode) says so.
    let refused = |e: ApiError, written: Result<Option<Written>, Error>| match written {
        Ok(Some(Written::Session(report))) if report.written > 0 => {
            as_read(e.with_committed(&report))
        }
        _ => as_read(e),
    };
    let (hash, parsed) = match outcome {
        Ok(outcome) => outcome,
        Err(e) => return Err(refused(e, written)),
    };
    let idempotency = idempotency.map(|idem| Idempotency {
        hash: hash.unwrap_or_default(),
        ..idem
    });
    let shapes = match parsed {
        Whole(parsed) => return Ok(Taken::Held(parsed, idempotency)),
        Rows(Err(e)) => return Err(refused(e.into(), written)),
        Rows(Ok(shapes)) => shapes,
    };
    let written = written.map_err(|e| as_read(e.for_reader(may_read).into()))?;
    match written {
        Some(Written::Features(report)) => Ok(Taken::Done(Created::Answered(
            answered(state, answer, &report).await,
        ))),
        Some(Written::Session(report)) => Ok(Taken::Done(Created::Session(report))),
        // A FeatureCollection without features.
        None => Ok(Taken::Held(
            Ok(ParsedBody {
                single: false,
                rows: Vec::new(),
                shapes,
                srid,
                crs: answer.rendering.crs.clone(),
                jsonfg: false,
                rejected: Vec::new(),
                row_features: Vec::new(),
            }),
            idempotency,
        )),
    }
}

/// How a body read as it arrived ended, once it has: the read (its limits)
/// decides first, then the parse. The writer is told whether it may commit.
async fn judge(
    reading: tokio_util::task::AbortOnDropHandle<Result<Option<String>, ApiError>>,
    parse: tokio::task::JoinHandle<Streamed>,
    verdict: oneshot::Sender<Verdict>,
) -> Result<(Option<String>, Streamed), ApiError> {
    let parsed = parse.await;
    let outcome = match (body::received(reading).await, parsed) {
        (Err(e), _) => Err(e),
        (_, Err(e)) => Err(ApiError::from(Error::task_failed("parsing the body", &e))),
        (Ok(hash), Ok(parsed)) => Ok((hash, parsed)),
    };
    let commit = match &outcome {
        Ok((hash, Rows(Ok(_)))) => Verdict::Commit {
            hash: hash.clone().unwrap_or_default(),
        },
        _ => Verdict::Abandon,
    };
    let _ = verdict.send(commit);
    outcome
}

/// The response to a write of features that has committed `report`: as
/// stored under its key (made before COMMIT), or made now.
async fn answered(state: &AppState, answer: &PostAnswer, report: &WriteReport) -> Response {
    // Keyed: the answer made before COMMIT, as it was stored.
    if let Some(made) = answer
        .made
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    {
        return response_of(made);
    }
    let stored = match answer.shows(report) {
        Some(shown) => read_back(state, &answer.coll, &shown.id, &shown.rendering).await,
        None => None,
    };
    answer.response(report, stored.as_ref())
}

/// How a POST of features is answered: with the bulk report, or (one
/// Feature with `Prefer: return=…`) as OGC API - Features Part 4 says. Under
/// an Idempotency-Key the answer is made in the write's transaction and
/// stored with it, so that a replay is this answer ([`Respond`]).
#[derive(Debug)]
pub struct PostAnswer {
    coll: Arc<Collection>,
    base: BaseUrl,
    /// The preferences, as far as the caller's rights allow.
    preferences: Preferences,
    /// How the feature is shown: in the body's CRS, and encoding.
    rendering: Rendering,
    /// The body was one Feature.
    single: bool,
    /// The answer made for a keyed write, to send as stored.
    made: Mutex<Option<Answer>>,
}

impl PostAnswer {
    /// The answer to a POST of features to `coll` (as a FeatureCollection,
    /// until the body says otherwise).
    pub fn new(
        coll: Arc<Collection>,
        base: BaseUrl,
        preferences: Preferences,
        rendering: Rendering,
    ) -> Self {
        PostAnswer {
            coll,
            base,
            preferences,
            rendering,
            single: false,
            made: Mutex::new(None),
        }
    }

    /// The preferences it answers.
    pub fn preferences(&self) -> &Preferences {
        &self.preferences
    }

    /// The same answer for a body that was (or was not) one Feature, its
    /// feature shown with `rendering`.
    fn for_body(&self, single: bool, rendering: Rendering) -> PostAnswer {
        PostAnswer {
            coll: self.coll.clone(),
            base: BaseUrl(self.base.0.clone()),
            preferences: self.preferences,
            rendering,
            single,
            made: Mutex::new(None),
        }
    }

    /// The created feature's id, when the body was one Feature.
    fn id(&self, report: &WriteReport) -> Option<String> {
        report.ids.text(0).filter(|_| self.single)
    }

    /// The response, showing the created feature as `stored` when the
    /// preference asks for it and it could be read.
    fn response(&self, report: &WriteReport, stored: Option<&StoredFeature>) -> Response {
        let Some(id) = self.id(report) else {
            let mut response = (StatusCode::CREATED, Json(report)).into_response();
            set_preference_applied(&mut response, &self.preferences, false);
            return response;
        };
        let preference = self.preferences.return_;
        let mut response = match stored.filter(|_| preference != Return::Unspecified) {
            Some(stored) => created(
                stored,
                preference,
                &self.base,
                &self.coll,
                &id,
                &self.rendering,
            ),
            // Not asked for, or not readable (gone already, or a role that
            // may insert but not select): the report still tells the id.
            None => (StatusCode::CREATED, Json(report)).into_response(),
        };
        set_location(&mut response, &self.base, &self.coll, &id);
        let honoured = preference != Return::Unspecified && stored.is_some();
        set_preference_applied(&mut response, &self.preferences, honoured);
        response
    }
}

impl Respond for PostAnswer {
    fn shows(&self, report: &WriteReport) -> Option<Shown> {
        let id = self.id(report)?;
        let shown = self.preferences.return_ != Return::Unspecified;
        shown.then(|| Shown {
            coll: self.coll.clone(),
            id,
            rendering: self.rendering.clone(),
        })
    }

    fn answer<'a>(
        &'a self,
        report: &'a WriteReport,
        feature: Option<&'a StoredFeature>,
    ) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            // The body was made in memory just now: reading it cannot fail.
            let (answer, _) = answer_of(self.response(report, feature))
                .await
                .expect("a body in memory reads");
            *self.made.lock().unwrap_or_else(PoisonError::into_inner) = Some(answer.clone());
            answer
        })
    }
}

/// The feature just created and committed, if it can be read. A read that
/// fails (the role may INSERT but not SELECT, a row security policy hides
/// it, it is already deleted, no connection is free) must not answer an
/// error for a row that exists: the caller gets the 201 report instead.
async fn read_back(
    state: &AppState,
    coll: &Collection,
    id: &str,
    rendering: &Rendering,
) -> Option<StoredFeature> {
    read::item_as(&state.db, coll, id, &rendering.crs, rendering.encoding)
        .await
        .inspect_err(|e| tracing::warn!(collection = %coll.id, id, error = %e, "created feature not read back; answered with the report"))
        .ok()
        .flatten()
}
