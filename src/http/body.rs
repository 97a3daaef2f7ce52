//! Reading request bodies: size limit, content type.

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::http::{HeaderName, HeaderValue};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::Value;

use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

use super::encoding::DECODED;
use super::problem::{ApiError, Wrong};
use crate::auth::Caller;
use crate::budget::{Budget, Busy, Held};
use crate::error::Error;
use crate::http::app::AppState;
use crate::session::Mode;
use crate::write::idempotency::{
    lookup, request_hash, Answer, Idempotency, RequestHasher, Respond, Stored,
};
use crate::write::item::KeyedItem;

/// Memory for request bodies, shared by every request
/// (`FEATUREPIPE_BODY_MEMORY`): a body holds room for the bytes it has
/// received (decompressed), as they come, until it has been parsed.
#[derive(Clone)]
pub struct BodyRoom(pub Budget);

impl BodyRoom {
    /// `bytes` of room; a body waits at most `wait` for its share.
    pub fn new(bytes: usize, wait: Duration) -> Self {
        BodyRoom(Budget::new(bytes, wait))
    }

    /// Grow `held` to room for `bytes`, waiting for others to give some back.
    async fn hold(&self, held: &mut Held, bytes: usize) -> Result<(), ApiError> {
        self.0.hold(held, bytes).await.map_err(exhausted)
    }

    /// Hold `bytes` of room for what a request builds from its body (an
    /// edit session's operations and report, one per feature, which for
    /// small features outweigh the body): waiting, as a body does, for
    /// others to give some back, and a 503 after the wait.
    pub async fn reserve(&self, bytes: usize) -> Result<Held, ApiError> {
        let mut held = Held::default();
        self.hold(&mut held, bytes).await?;
        Ok(held)
    }
}

/// The 503 of a request that found no room.
fn exhausted(Busy(wait): Busy) -> ApiError {
    ApiError::new(
        Wrong::Busy,
        format!(
            "other requests' bodies fill the memory set aside for bodies \
             (FEATUREPIPE_BODY_MEMORY) for longer than {wait:?}; nothing was written, retry later"
        ),
    )
}

/// A request body, with the room it holds in [`BodyRoom`] until dropped.
pub struct BodyBytes {
    bytes: Vec<u8>,
    _held: Held,
}

impl std::ops::Deref for BodyBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Read the whole body into one buffer (sized from `Content-Length`, up to
/// [`CAPACITY_HINT`]). A compressed body arrives decompressed (see
/// [`super::encoding`]), so the limit applies to what it decompresses to: a
/// zip bomb is a 413, never an out-of-memory. Its bytes are counted in
/// `room` as they arrive.
/// The limits are the state's: `max_body`, `upload_timeout` and `body_room`.
pub async fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<BodyBytes, ApiError> {
    let mut receiving = Receiving::new(state, headers, body, None)?;
    let (buf, held) = receiving.hold_up_to(&state.body_room, usize::MAX).await?;
    Ok(BodyBytes {
        bytes: buf,
        _held: held,
    })
}

/// The largest buffer a `Content-Length` alone makes us allocate before the
/// bytes arrive: a header costs the client nothing.
const CAPACITY_HINT: usize = 1 << 20;

/// The 413 of a body over `max` bytes.
fn too_large(max: usize) -> ApiError {
    ApiError::new(
        Wrong::BodyTooLarge,
        format!("the body is larger than the limit of {max} bytes (FEATUREPIPE_MAX_BODY)"),
    )
}

/// A request body as it arrives: its bytes counted against the size limit,
/// the time spent waiting for them against the upload timeout (time spent
/// writing what has arrived is not the client's), and hashed for its
/// Idempotency-Key when it has one.
struct Receiving {
    chunks: axum::body::BodyDataStream,
    max: usize,
    received: usize,
    /// Bytes the client announced (`Content-Length`), if it did.
    declared: Option<usize>,
    timeout: Duration,
    waited: Duration,
    hasher: Option<RequestHasher>,
}

impl Receiving {
    /// Receive `body` within the state's limits (413 at once when its
    /// `Content-Length` is over).
    fn new(
        state: &AppState,
        headers: &HeaderMap,
        body: Body,
        hasher: Option<RequestHasher>,
    ) -> Result<Self, ApiError> {
        refuse_unknown_encoding(headers)?;
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        if declared.is_some_and(|n| n > state.max_body) {
            return Err(too_large(state.max_body));
        }
        Ok(Receiving {
            chunks: body.into_data_stream(),
            max: state.max_body,
            received: 0,
            declared,
            timeout: state.upload_timeout,
            waited: Duration::ZERO,
            hasher,
        })
    }

    /// The next bytes, or `None` at the end of the body.
    async fn next(&mut self) -> Result<Option<Bytes>, ApiError> {
        let started = Instant::now();
        let left = self.timeout.saturating_sub(self.waited);
        let chunk = tokio::time::timeout(left, self.chunks.next()).await;
        self.waited += started.elapsed();
        // A stalled upload must not hold its task and buffer for ever.
        let Ok(chunk) = chunk else {
            return Err(ApiError::new(
                Wrong::UploadTimeout,
                format!(
                    "the body did not arrive within {:?} (FEATUREPIPE_UPLOAD_TIMEOUT); nothing was written",
                    self.timeout
                ),
            ));
        };
        let Some(chunk) = chunk else {
            return Ok(None);
        };
        let chunk = chunk.map_err(|e| {
            ApiError::new(
                Wrong::UnreadableBody,
                format!("cannot read the request body: {e}"),
            )
        })?;
        if self.received + chunk.len() > self.max {
            return Err(too_large(self.max));
        }
        self.received += chunk.len();
        if let Some(hasher) = &mut self.hasher {
            hasher.update(&chunk);
        }
        Ok(Some(chunk))
    }

    /// Read into one buffer until the body ends or holds more than `most`
    /// bytes, holding room for them in `room` as they arrive. Room is held
    /// for bytes received, never for bytes announced: a client that
    /// announces a large body and sends nothing holds nothing.
    async fn hold_up_to(
        &mut self,
        room: &BodyRoom,
        most: usize,
    ) -> Result<(Vec<u8>, Held), ApiError> {
        let mut held = Held::default();
        let mut buf = Vec::with_capacity(self.declared.unwrap_or(0).min(CAPACITY_HINT));
        while buf.len() <= most {
            let Some(chunk) = self.next().await? else {
                break;
            };
            room.hold(&mut held, buf.len() + chunk.len()).await?;
            buf.extend_from_slice(&chunk);
        }
        Ok((buf, held))
    }

    /// The hash of the request, once the whole body has been received.
    fn hash(self) -> Option<String> {
        self.hasher.map(RequestHasher::finish)
    }
}

/// A request body, whole or arriving.
pub enum Incoming {
    /// Read whole (it ended before [`AppState::stream_after`] bytes), with
    /// the request's hash when it has an Idempotency-Key.
    Whole(BodyBytes, Option<String>),
    /// Larger: its first bytes, then the rest as it comes.
    Streaming(StreamedBody),
}

/// A body read as it arrives: its first bytes, then the rest through a
/// channel, read by a task of its own that applies the limits to the end
/// of the body whoever reads it.
pub struct StreamedBody {
    /// The bytes received before streaming began.
    pub head: Bytes,
    /// The bytes after them, as they come.
    pub rest: mpsc::Receiver<Bytes>,
    /// How the body ended: the request's hash when it has an
    /// Idempotency-Key, or why it was refused.
    pub received: AbortOnDropHandle<Result<Option<String>, ApiError>>,
    /// Room held for the head, as for the batches of the write; a streamed
    /// session grows it for its report.
    pub held: Held,
}

impl StreamedBody {
    /// Wait for the end of the body, its bytes after the head dropped.
    pub async fn end(self) -> Result<Option<String>, ApiError> {
        drop(self.rest);
        received(self.received).await
    }
}

/// How a body read by the task `reading` ended.
pub async fn received(
    reading: AbortOnDropHandle<Result<Option<String>, ApiError>>,
) -> Result<Option<String>, ApiError> {
    reading
        .await
        .map_err(|e| ApiError::from(Error::task_failed("reading the body", &e)))?
}

/// Chunks of a streamed body waiting to be parsed.
const CHUNKS_AHEAD: usize = 16;

/// Read a body whole if it ends within `state.stream_after` bytes, else
/// hand it on as it arrives (its limits checked as [`read_body`] checks
/// them, its hash taken with `hasher` if given).
pub async fn read_or_stream(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    hasher: Option<RequestHasher>,
) -> Result<Incoming, ApiError> {
    let mut receiving = Receiving::new(state, headers, body, hasher)?;
    let (head, held) = receiving
        .hold_up_to(&state.body_room, state.stream_after)
        .await?;
    if head.len() <= state.stream_after {
        let hash = receiving.hash();
        return Ok(Incoming::Whole(
            BodyBytes {
                bytes: head,
                _held: held,
            },
            hash,
        ));
    }
    let (tx, rx) = mpsc::channel(CHUNKS_AHEAD);
    let received = AbortOnDropHandle::new(tokio::spawn(async move {
        let mut reader = Some(tx);
        while let Some(chunk) = receiving.next().await? {
            // A reader gone (the body is refused, or replayed) leaves the
            // rest to be received for its limits and its hash only.
            if let Some(tx) = &reader {
                if tx.send(chunk).await.is_err() {
                    reader = None;
                }
            }
        }
        Ok(receiving.hash())
    }));
    Ok(Incoming::Streaming(StreamedBody {
        head: Bytes::from(head),
        rest: rx,
        received,
        held,
    }))
}

/// A `Content-Encoding` left on the request is one the decompression layer
/// did not take (it removes the ones it decodes): 415.
fn refuse_unknown_encoding(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_ENCODING) else {
        return Ok(());
    };
    let coding = value.to_str().unwrap_or("").trim();
    if coding.is_empty() || coding.eq_ignore_ascii_case("identity") {
        return Ok(());
    }
    Err(ApiError::new(
        Wrong::UnsupportedEncoding,
        format!("Content-Encoding '{coding}' is not accepted: use one of {DECODED}, or none"),
    )
    .with_header(header::ACCEPT_ENCODING, HeaderValue::from_static(DECODED)))
}

/// Check that the body's media type is one of `accepted` (parameters
/// allowed); the one it is.
pub fn check_content_type<'a>(
    headers: &HeaderMap,
    accepted: &[&'a str],
) -> Result<&'a str, ApiError> {
    let list = accepted.join(", ");
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(ApiError::new(
            Wrong::MissingContentType,
            format!("a Content-Type header is required: {list}"),
        ));
    };
    let essence = value
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if let Some(media_type) = accepted.iter().find(|a| **a == essence) {
        return Ok(media_type);
    }
    let mut e = ApiError::new(
        Wrong::UnsupportedMediaType,
        format!(
            "Content-Type '{}' is not accepted: use {list}",
            value.to_str().unwrap_or("(not text)")
        ),
    );
    if let Ok(v) = HeaderValue::from_str(&list) {
        e = e.with_header(header::ACCEPT, v);
    }
    Err(e)
}

/// What a write's `Idempotency-Key` asks of it.
pub enum KeyUse {
    /// Write, under this key if there is one.
    Write(Option<Idempotency>),
    /// The key has a stored response: answer it, write nothing.
    Replay(Response),
}

/// Look up the request's `Idempotency-Key` (of `method` on `target`, path
/// and query, with `body`): replay its stored response, or write under it.
pub async fn idempotency(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    (method, target): (&str, &str),
    body: &[u8],
    mode: Mode,
) -> Result<KeyUse, ApiError> {
    let Some(found) = look_up_key(state, caller, headers).await? else {
        return Ok(KeyUse::Write(None));
    };
    let hash = request_hash(method, target, &hashed_headers(headers), body);
    found.settle(hash, mode)
}

/// An `Idempotency-Key` looked up before the request's hash is known.
pub struct FoundKey {
    /// The key, its hash still to be set.
    idempotency: Idempotency,
    stored: Option<Stored>,
}

impl FoundKey {
    /// Whether the key has a stored response (the body then only needs hashing).
    pub fn has_response(&self) -> bool {
        self.stored.is_some()
    }

    /// The key to write under once the request's hash is known, answered by `respond`.
    pub fn idempotency(self, respond: Arc<dyn Respond>) -> Idempotency {
        Idempotency {
            respond: Some(respond),
            ..self.idempotency
        }
    }

    /// With the request's `hash`: replay the stored response (or refuse a
    /// different request under the key), or write under it.
    pub fn settle(self, hash: String, mode: Mode) -> Result<KeyUse, ApiError> {
        if let Some(stored) = self.stored {
            return replay(stored, &hash).map(KeyUse::Replay);
        }
        if mode == Mode::Batch {
            return Err(ApiError::new(
                Wrong::IdempotencyUnsupported,
                "Idempotency-Key is not taken with mode=batch: its batches commit one by one, so \
                 a retry could not be all or nothing; use mode=atomic or mode=skip",
            ));
        }
        Ok(KeyUse::Write(Some(Idempotency {
            hash,
            ..self.idempotency
        })))
    }
}

/// The request's `Idempotency-Key` and its stored response, if it has a key.
pub async fn look_up_key(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
) -> Result<Option<FoundKey>, ApiError> {
    let Some(key) = idempotency_key(headers)? else {
        return Ok(None);
    };
    // Keys are the caller's own: another caller's key, the same or not, is
    // another key, and its response is never theirs.
    let key = caller.own_key(&key);
    let stored = lookup(&state.db, &key, state.idempotency_ttl).await?;
    Ok(Some(FoundKey {
        idempotency: Idempotency {
            key,
            hash: String::new(),
            ttl: state.idempotency_ttl,
            respond: None,
            role: caller.role.clone(),
        },
        stored,
    }))
}

/// The hash of a request (of `method` on `target`) with an
/// `Idempotency-Key`, to take as its body arrives; `None` without one.
pub fn request_hasher(
    headers: &HeaderMap,
    (method, target): (&str, &str),
) -> Option<RequestHasher> {
    headers
        .contains_key("idempotency-key")
        .then(|| RequestHasher::new(method, target, &hashed_headers(headers)))
}

/// The request's `Idempotency-Key`, if any: 1 to 255 visible ASCII characters.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(key) if (1..=255).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic()) => {
            Ok(Some(key.to_owned()))
        }
        _ => Err(ApiError::new(
            Wrong::InvalidIdempotencyKey,
            "Idempotency-Key must be 1 to 255 visible ASCII characters",
        )),
    }
}

/// The request headers that change what a write does or how it is
/// answered: a retry must send them as the first request did.
const HASHED_HEADERS: [&str; 3] = ["content-type", "content-crs", "prefer"];

/// `name: value` of each of [`HASHED_HEADERS`] (values of repeated headers
/// joined), as the request hash takes them.
fn hashed_headers(headers: &HeaderMap) -> Vec<String> {
    HASHED_HEADERS
        .iter()
        .map(|name| {
            let values: Vec<&str> = headers
                .get_all(*name)
                .iter()
                .map(|v| v.to_str().unwrap_or("(not text)"))
                .collect();
            format!("{name}: {}", values.join(", "))
        })
        .collect()
}

/// The stored response of an earlier request with the same key; a different
/// request under the same key is a 422.
fn replay(stored: Stored, hash: &str) -> Result<Response, ApiError> {
    if stored.hash != hash {
        return Err(ApiError::new(
            Wrong::IdempotencyKeyReused,
            "this Idempotency-Key was used for a different request (method, target, \
             Content-Type, Content-Crs, Prefer or body)",
        ));
    }
    let mut response = response_of(stored.answer);
    let h = response.headers_mut();
    h.insert("idempotent-replayed", HeaderValue::from_static("true"));
    Ok(response)
}

/// The response an answer stored under a key stands for.
pub fn response_of(answer: Answer) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    let has_body = !answer.body.is_empty();
    let mut response = (status, answer.body).into_response();
    let h = response.headers_mut();
    if has_body {
        // Reports are JSON; a stored Content-Type below says otherwise.
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if let Some(location) = answer.location.and_then(|l| HeaderValue::from_str(&l).ok()) {
        h.insert(header::LOCATION, location);
    }
    for (name, value) in answer.headers {
        let name = HeaderName::from_bytes(name.as_bytes());
        let value = value.as_str().map(HeaderValue::from_str);
        if let (Ok(name), Some(Ok(value))) = (name, value) {
            h.insert(name, value);
        }
    }
    response
}

/// The headers of a response its replay carries too (besides `Location`).
const REPLAYED_HEADERS: [&str; 5] = [
    "content-type",
    "etag",
    "last-modified",
    "content-crs",
    "preference-applied",
];

/// `response` as an answer to store under a key, and its body (read whole).
pub async fn answer_of(response: Response) -> Result<(Answer, Response), ApiError> {
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|e| Error::internal(format!("the response could not be read: {e}")))?;
    let headers: serde_json::Map<String, Value> = REPLAYED_HEADERS
        .iter()
        .filter_map(|name| {
            let value = parts.headers.get(*name)?.to_str().ok()?;
            Some((name.to_string(), Value::String(value.to_owned())))
        })
        .collect();
    let location = parts
        .headers
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let answer = Answer {
        status: parts.status.as_u16(),
        body: bytes.to_vec(),
        location,
        headers,
    };
    Ok((answer, Response::from_parts(parts, Body::from(bytes))))
}

/// Answer a keyed single-feature write: store `response` under its key and
/// commit; an error answer rolls the write back (the key stays free). An
/// unkeyed write has committed already.
pub async fn answer_keyed(
    keyed: Option<KeyedItem>,
    response: Result<Response, ApiError>,
) -> Result<Response, ApiError> {
    let Some(keyed) = keyed else {
        return response;
    };
    let response = match response {
        Ok(response) => response,
        Err(e) => {
            keyed.rollback().await;
            return Err(e);
        }
    };
    let (answer, response) = answer_of(response).await?;
    keyed.commit(&answer).await?;
    Ok(response)
}
