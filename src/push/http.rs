//! Sending batches to the service: HTTP/1.1 on kept-alive connections,
//! over TLS for an https:// service, bodies gzip-compressed while the
//! service takes them so, and the same request again, with the same
//! Idempotency-Key, when the network or the service says to try later.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};

use super::args::PushArgs;
use super::gzip::Gzip;
use super::tls::{self, Roots};
use crate::trust;

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
    /// Bytes of the request body it answers, as sent (compressed or not).
    pub sent: usize,
}

/// A batch's body, and the same gzip-compressed when push compresses.
pub struct Body {
    /// The FeatureCollection.
    pub plain: Bytes,
    /// It, gzip-compressed.
    pub gzip: Option<Bytes>,
}

/// The service could not be reached, or did not answer.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unreachable(String);

/// A running featurepipe service's items endpoint for one collection.
pub struct Service {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    uri: Uri,
    credential: Option<HeaderValue>,
    retries: u32,
    /// What an https:// service's certificate must be signed by.
    roots: Roots,
    gzip: Arc<Gzip>,
}

impl Service {
    /// The items of `args.collection` at the service at `args.url`, written
    /// in `args.mode`, with the API key or JWT if given; failed attempts are
    /// retried up to `args.retries` times. Bodies are compressed as `gzip` says.
    pub fn new(args: &PushArgs, gzip: Arc<Gzip>) -> Result<Self, String> {
        let url = args.url.as_str();
        let https = url.starts_with("https://");
        if !https && !url.starts_with("http://") {
            return Err(format!(
                "--url {url}: a URL starting with http:// or https:// is needed"
            ));
        }
        let target = format!(
            "{}/collections/{}/items?mode={}",
            url.trim_end_matches('/'),
            utf8_percent_encode(&args.collection, NON_ALPHANUMERIC),
            args.mode.name()
        );
        let uri = target
            .parse()
            .map_err(|e| format!("--url {url} is not a URL: {e}"))?;
        let credential = args
            .api_key
            .as_deref()
            .map(|key| {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                    .map_err(|_| "the API key has characters an HTTP header cannot carry")?;
                value.set_sensitive(true);
                Ok::<_, String>(value)
            })
            .transpose()?;
        let roots = args.ca_file.clone().map_or(Roots::System, Roots::File);
        let mut connector = HttpConnector::new();
        // The TLS layer above it takes https:// URLs.
        connector.enforce_http(false);
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let connector = if https {
            HttpsConnectorBuilder::new()
                .with_tls_config(roots.client_config()?)
                .https_only()
        } else {
            // Certificates are neither loaded nor needed.
            HttpsConnectorBuilder::new()
                .with_tls_config(tls::plain_config()?)
                .https_or_http()
        }
        .enable_http1()
        .wrap_connector(connector);
        Ok(Service {
            client: Client::builder(TokioExecutor::new()).build(connector),
            uri,
            credential,
            retries: args.retries,
            roots,
            gzip,
        })
    }

    /// Where batches go.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// POST `body`, under `key` if given: gzip-compressed while the service
    /// takes that, and the same body uncompressed, at once, when it answers
    /// 415 to gzip. Retried with pauses growing from half a second (or as
    /// `Retry-After` says): a refused connection, and with a key also a
    /// lost answer, 408, 429, 502, 503, 504 and the 409 of a key whose
    /// first request is still running. Without a key only what certainly
    /// was not sent is retried: sending it again could write it twice. A
    /// certificate push refuses is not retried: it would be refused again.
    pub async fn send(&self, body: &Body, key: Option<&str>) -> Result<Reply, Unreachable> {
        let mut pause = FIRST_PAUSE;
        let mut attempt = 0;
        loop {
            let gzip = body.gzip.as_ref().filter(|_| self.gzip.on());
            let outcome = self
                .attempt(gzip.unwrap_or(&body.plain).clone(), gzip.is_some(), key)
                .await;
            if gzip.is_some()
                && matches!(&outcome, Ok(r) if r.status == StatusCode::UNSUPPORTED_MEDIA_TYPE)
            {
                // The service (or a proxy before it) takes no gzip body, and
                // so wrote nothing: this batch and the rest go uncompressed.
                // The key stays: the service hashes the body uncompressed.
                self.gzip.refuse();
                continue;
            }
            let wait = match &outcome {
                Ok(reply) if key.is_some() => try_later(reply),
                Ok(_) => None,
                Err(failure) if failure.lasting => None,
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

    /// POST `body` once (`gzip`: it is gzip-compressed).
    async fn attempt(&self, body: Bytes, gzip: bool, key: Option<&str>) -> Result<Reply, Failure> {
        let sent = body.len();
        let mut request = Request::post(self.uri.clone())
            .header(header::CONTENT_TYPE, "application/geo+json")
            .body(Full::new(body))
            .map_err(|e| Failure::unmade(format!("cannot make the request: {e}")))?;
        let headers = request.headers_mut();
        if gzip {
            headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        if let Some(credential) = &self.credential {
            headers.insert(header::AUTHORIZATION, credential.clone());
        }
        if let Some(key) = key.and_then(|k| HeaderValue::from_str(k).ok()) {
            headers.insert("idempotency-key", key);
        }
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| {
                let uri = self.uri.to_string();
                match tls::explain(&e, &uri, &self.roots) {
                    Some(message) => Failure {
                        maybe_sent: false,
                        lasting: true,
                        message,
                    },
                    None => Failure {
                        maybe_sent: !e.is_connect(),
                        lasting: false,
                        message: format!("cannot reach {uri}: {}", causes(&e)),
                    },
                }
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
            // No answer of featurepipe's to a batch is near this large: a
            // server that sends more is not one to trust with the rest.
            let body = Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(
                    |e| match e.downcast_ref::<http_body_util::LengthLimitError>() {
                        Some(_) => Failure {
                            maybe_sent: true,
                            lasting: true,
                            message: format!(
                                "the answer from {} is larger than {} MiB, which no answer of \
                             featurepipe's is: whether the batch was written is unknown",
                                self.uri,
                                MAX_ANSWER >> 20
                            ),
                        },
                        None => Failure {
                            maybe_sent: true,
                            lasting: false,
                            message: format!(
                                "the answer from {} broke off: {}",
                                self.uri,
                                causes(&*e)
                            ),
                        },
                    },
                )?;
            Ok(Reply {
                status,
                replayed,
                body: body.to_bytes(),
                retry_after,
                sent,
            })
        };
        tokio::time::timeout(ATTEMPT_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(Failure {
                    maybe_sent: true,
                    lasting: false,
                    message: format!("no answer from {} within {ATTEMPT_TIMEOUT:?}", self.uri),
                })
            })
    }
}

/// The most push reads of an answer (a batch's report lists each of its
/// features: some tens of bytes each).
const MAX_ANSWER: usize = 64 << 20;

/// An attempt that got no answer.
struct Failure {
    /// The request may have reached the service.
    maybe_sent: bool,
    /// Sending it again would fail the same way (a certificate push refuses).
    lasting: bool,
    message: String,
}

impl Failure {
    /// A request that could not be made (and never will be).
    fn unmade(message: String) -> Self {
        Failure {
            maybe_sent: false,
            lasting: true,
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
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let causes: Vec<String> = trust::causes(e).map(|c| c.to_string()).collect();
    causes.join(": ")
}
