//! Sending batches to the service: HTTP/1.1 on kept-alive connections, and
//! the same request again, with the same Idempotency-Key, when the network
//! or the service says to try later.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};

use super::args::Mode;

/// How long one attempt may take, answer included: longer than the service's
/// own limits (upload and statement timeouts), so that it is only a safety net.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(300);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The first pause before a retry; each further one is twice as long.
const FIRST_PAUSE: Duration = Duration::from_millis(500);
/// The longest pause, whatever `Retry-After` says.
const LONGEST_PAUSE: Duration = Duration::from_secs(30);

/// The service's answer to one batch.
#[derive(Debug)]
pub struct Reply {
    /// Its status.
    pub status: StatusCode,
    /// `Idempotent-Replayed: true`: an earlier request with the key wrote it.
    pub replayed: bool,
    /// Its body.
    pub body: Bytes,
    /// How long `Retry-After` asks to wait (in seconds, the form featurepipe sends).
    pub retry_after: Option<Duration>,
}

/// The service could not be reached, or did not answer.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unreachable(String);

/// A running featurepipe service's items endpoint for one collection.
pub struct Service {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: Uri,
    credential: Option<HeaderValue>,
    retries: u32,
}

impl Service {
    /// The items of `collection` at the service at `url` (http only), written
    /// in `mode`, with an API key or JWT if given; failed attempts are
    /// retried up to `retries` times.
    pub fn new(
        url: &str,
        collection: &str,
        mode: Mode,
        credential: Option<&str>,
        retries: u32,
    ) -> Result<Self, String> {
        if url.starts_with("https://") {
            return Err(format!(
                "--url {url}: featurepipe push speaks plain http:// (no TLS); \
                 run it where it reaches the service over http"
            ));
        }
        if !url.starts_with("http://") {
            return Err(format!(
                "--url {url}: a URL starting with http:// is needed"
            ));
        }
        let target = format!(
            "{}/collections/{}/items?mode={}",
            url.trim_end_matches('/'),
            utf8_percent_encode(collection, NON_ALPHANUMERIC),
            mode.name()
        );
        let uri = target
            .parse()
            .map_err(|e| format!("--url {url} is not a URL: {e}"))?;
        let credential = credential
            .map(|key| {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                    .map_err(|_| "the API key has characters an HTTP header cannot carry")?;
                value.set_sensitive(true);
                Ok::<_, String>(value)
            })
            .transpose()?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        Ok(Service {
            client: Client::builder(TokioExecutor::new()).build(connector),
            uri,
            credential,
            retries,
        })
    }

    /// Where batches go.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// POST `body`, under `key` if given. Retried with pauses growing from
    /// half a second (or as `Retry-After` says): a refused connection, and
    /// with a key also a lost answer, 408, 429, 502, 503, 504 and the 409 of
    /// a key whose first request is still running. Without a key only what
    /// certainly was not sent is retried: sending it again could write it twice.
    pub async fn send(&self, body: Bytes, key: Option<&str>) -> Result<Reply, Unreachable> {
        let mut pause = FIRST_PAUSE;
        let mut attempt = 0;
        loop {
            let outcome = self.attempt(body.clone(), key).await;
            let wait = match &outcome {
                Ok(reply) if key.is_some() => try_later(reply),
                Ok(_) => None,
                Err(failure) if key.is_some() || !failure.maybe_sent => Some(Duration::ZERO),
                Err(_) => None,
            };
            match wait {
                Some(wait) if attempt < self.retries => {
                    tokio::time::sleep(wait.max(pause).min(LONGEST_PAUSE)).await;
                    pause *= 2;
                    attempt += 1;
                }
                _ => return outcome.map_err(|f| Unreachable(f.message)),
            }
        }
    }

    async fn attempt(&self, body: Bytes, key: Option<&str>) -> Result<Reply, Failure> {
        let mut request = Request::post(self.uri.clone())
            .header(header::CONTENT_TYPE, "application/geo+json")
            .body(Full::new(body))
            .map_err(|e| Failure::unsent(format!("cannot make the request: {e}")))?;
        let headers = request.headers_mut();
        if let Some(credential) = &self.credential {
            headers.insert(header::AUTHORIZATION, credential.clone());
        }
        if let Some(key) = key.and_then(|k| HeaderValue::from_str(k).ok()) {
            headers.insert("idempotency-key", key);
        }
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| Failure {
                maybe_sent: !e.is_connect(),
                message: format!("cannot reach {}: {}", self.uri, causes(&e)),
            })?;
            let status = response.status();
            let replayed = response
                .headers()
                .get("idempotent-replayed")
                .is_some_and(|v| v == "true");
            let retry_after = response
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok()?.trim().parse().ok())
                .map(Duration::from_secs);
            let body = response.into_body().collect().await.map_err(|e| Failure {
                maybe_sent: true,
                message: format!("the answer from {} broke off: {}", self.uri, causes(&e)),
            })?;
            Ok(Reply {
                status,
                replayed,
                body: body.to_bytes(),
                retry_after,
            })
        };
        tokio::time::timeout(ATTEMPT_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(Failure {
                    maybe_sent: true,
                    message: format!("no answer from {} within {ATTEMPT_TIMEOUT:?}", self.uri),
                })
            })
    }
}

/// An attempt that got no answer.
struct Failure {
    /// The request may have reached the service.
    maybe_sent: bool,
    message: String,
}

impl Failure {
    fn unsent(message: String) -> Self {
        Failure {
            maybe_sent: false,
            message,
        }
    }
}

/// How long to wait before sending a keyed request again, if the answer says to.
fn try_later(reply: &Reply) -> Option<Duration> {
    let again = match reply.status.as_u16() {
        408 | 429 | 502 | 503 | 504 => true,
        // The first request with this key (an attempt whose answer was lost) is still running.
        409 => serde_json::from_slice::<serde_json::Value>(&reply.body)
            .is_ok_and(|p| p["type"] == "urn:featurepipe:problem:idempotency-key-in-use"),
        _ => false,
    };
    again.then(|| reply.retry_after.unwrap_or_default())
}

/// An error with its causes, which say what happened ("Connection refused").
fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
