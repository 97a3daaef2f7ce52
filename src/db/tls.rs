//! TLS to PostgreSQL (or PgBouncer) with libpq's meanings of `sslmode`,
//! `sslrootcert`, `sslcert` and `sslkey`, through rustls.
//!
//! tokio-postgres knows only `sslmode` disable, prefer and require, and none
//! of the certificate parameters; it refuses a connection string that has
//! them. So they are read here and removed before the rest of the string
//! reaches `tokio_postgres::Config`.

use std::error::Error as _;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use tokio_postgres::config::SslMode as WireMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS if the server takes it, else plain; the certificate is not checked
    /// (unless `sslrootcert` names a file).
    Prefer,
    /// TLS or no connection; the certificate is not checked (unless
    /// `sslrootcert` names a file).
    Require,
    /// TLS, and the certificate chain must lead to a trusted CA; the host name is not checked.
    VerifyCa,
    /// TLS, a trusted chain, and a certificate for the host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, TlsError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return Err(TlsError::BadMode(value.to_owned())),
        })
    }

    fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres does on the wire: the verify modes are `require`
    /// there, and the checking is done by the certificate verifier.
    pub fn wire(self) -> WireMode {
        match self {
            SslMode::Disable => WireMode::Disable,
            SslMode::Prefer => WireMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireMode::Require,
        }
    }
}

/// The TLS parameters of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// `sslmode` (default `prefer`, as in libpq).
    pub mode: SslMode,
    /// `sslrootcert`: a PEM file of trusted CAs, or `system`; unset means the system's roots.
    pub root_cert: Option<String>,
    /// `sslcert`: the client certificate (PEM), with `sslkey`.
    pub cert: Option<String>,
    /// `sslkey`: the client certificate's private key (PEM).
    pub key: Option<String>,
}

/// A TLS setting that cannot be used, or a TLS connection that failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// `sslmode` has a value we do not know.
    #[error(
        "sslmode={0} is not supported: use disable, prefer, require, verify-ca or verify-full"
    )]
    BadMode(String),
    /// `sslrootcert=system` with a mode that would not check the host name.
    #[error("sslrootcert=system needs sslmode=verify-full (as in libpq), not sslmode={0}")]
    WeakSystemRoots(&'static str),
    /// Only one of `sslcert` and `sslkey`.
    #[error(
        "sslcert and sslkey go together: set both (the client certificate and its key) or neither"
    )]
    HalfClientCert,
    /// A certificate or key file that cannot be read or used.
    #[error("{what} '{path}': {reason}")]
    File {
        /// Which parameter.
        what: &'static str,
        /// The file.
        path: String,
        /// Why not.
        reason: String,
    },
    /// No trusted CA to verify against.
    #[error(
        "sslmode={0} without sslrootcert uses the system's root certificates, and none were \
         found: set sslrootcert to the CA's certificate file (or install ca-certificates)"
    )]
    NoSystemRoots(&'static str),
    /// The handshake failed, for the reason given.
    #[error("{0}")]
    Handshake(String),
}

/// The connection string without the TLS parameters tokio-postgres does
/// not know, and those parameters.
pub fn split(url: &str) -> Result<(String, TlsOptions), TlsError> {
    let parsed = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        url_params(url)
    } else {
        key_value_params(url)
    };
    let (mut mode, mut root_cert, mut cert, mut key) = (None, None, None, None);
    let mut kept = Vec::new();
    for param in parsed.params {
        let slot = match param.key.as_str() {
            "sslmode" => &mut mode,
            "sslrootcert" => &mut root_cert,
            "sslcert" => &mut cert,
            "sslkey" => &mut key,
            _ => {
                kept.push(param.raw);
                continue;
            }
        };
        // As in libpq, the last occurrence counts.
        *slot = Some(param.value);
    }
    let mut rest = parsed.head.to_owned();
    if !kept.is_empty() {
        rest.push_str(parsed.lead);
        rest.push_str(&kept.join(parsed.separator));
    }
    let mode = mode
        .as_deref()
        .map_or(Ok(SslMode::Prefer), SslMode::parse)?;
    Ok((
        rest,
        TlsOptions {
            mode,
            root_cert,
            cert,
            key,
        },
    ))
}

/// A connection string taken apart: what comes before the parameters, and
/// each parameter with its text as written, so the others can be put back.
struct Parsed<'a> {
    head: &'a str,
    lead: &'static str,
    separator: &'static str,
    params: Vec<Param<'a>>,
}

/// One `key=value`, decoded, and as written.
struct Param<'a> {
    key: String,
    value: String,
    raw: &'a str,
}

/// The query parameters of a `postgres://…?k=v&…` URL.
fn url_params(url: &str) -> Parsed<'_> {
    let (head, query) = url.split_once('?').unwrap_or((url, ""));
    let params = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|raw| {
            let (key, value) = raw.split_once('=').unwrap_or((raw, ""));
            Param {
                key: percent_decode(key),
                value: percent_decode(value),
                raw,
            }
        })
        .collect();
    Parsed {
        head,
        lead: "?",
        separator: "&",
        params,
    }
}

/// `%XX` decoded (libpq does not read `+` as a space, nor do we).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The pairs of a `key=value key='v a l'` string. Text that does not parse
/// is kept as it is, for tokio-postgres to report.
fn key_value_params(text: &str) -> Parsed<'_> {
    let bytes = text.as_bytes();
    let skip_space = |mut i: usize| {
        while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        i
    };
    let mut params = Vec::new();
    let mut start = skip_space(0);
    while start < bytes.len() {
        match key_value_pair(text, start, skip_space) {
            Some((key, value, end)) => {
                params.push(Param {
                    key,
                    value,
                    raw: &text[start..end],
                });
                start = skip_space(end);
            }
            None => {
                params.push(Param {
                    key: String::new(),
                    value: String::new(),
                    raw: &text[start..],
                });
                break;
            }
        }
    }
    Parsed {
        head: "",
        lead: "",
        separator: " ",
        params,
    }
}

/// The pair at `start`: key, unquoted value, and where it ends.
fn key_value_pair(
    text: &str,
    start: usize,
    skip_space: impl Fn(usize) -> usize,
) -> Option<(String, String, usize)> {
    let bytes = text.as_bytes();
    let mut j = start;
    while bytes
        .get(j)
        .is_some_and(|b| *b != b'=' && !b.is_ascii_whitespace())
    {
        j += 1;
    }
    let key = text[start..j].to_owned();
    j = skip_space(j);
    if key.is_empty() || bytes.get(j) != Some(&b'=') {
        return None;
    }
    j = skip_space(j + 1);
    let quoted = bytes.get(j) == Some(&b'\'');
    if quoted {
        j += 1;
    }
    let mut value = Vec::new();
    loop {
        match bytes.get(j) {
            None if quoted => return None,
            None => break,
            Some(b'\'') if quoted => {
                j += 1;
                break;
            }
            Some(b) if !quoted && b.is_ascii_whitespace() => break,
            Some(b'\\') if j + 1 < bytes.len() => {
                value.push(bytes[j + 1]);
                j += 2;
            }
            Some(b) => {
                value.push(*b);
                j += 1;
            }
        }
    }
    Some((key, String::from_utf8_lossy(&value).into_owned(), j))
}

/// The rustls connector for these options: which certificates it trusts,
/// whether it checks the host name, and the client certificate it shows.
pub fn connector(options: &TlsOptions) -> Result<MakeRustlsConnect, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = match (options.mode, options.root_cert.as_deref()) {
        (SslMode::Disable, _) => None,
        (SslMode::Prefer | SslMode::Require, Some("system")) => {
            return Err(TlsError::WeakSystemRoots(options.mode.name()))
        }
        // libpq: with a root certificate file, require (and prefer) check the CA.
        (SslMode::Prefer | SslMode::Require, None) => None,
        (_, Some(path)) if path != "system" => Some(file_roots(path)?),
        (mode, _) => Some(system_roots(mode)?),
    };
    let verifier = Verifier {
        roots: roots.map(Arc::new),
        check_name: options.mode == SslMode::VerifyFull,
        algorithms: provider.signature_verification_algorithms,
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Handshake(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let config = match (&options.cert, &options.key) {
        _ if options.mode == SslMode::Disable => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain = read_certs("sslcert", cert)?;
            let key_der =
                PrivateKeyDer::from_pem_file(key).map_err(|e| file_error("sslkey", key, e))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| file_error("sslkey", key, e))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err(TlsError::HalfClientCert),
    };
    Ok(MakeRustlsConnect::new(config))
}

fn file_error(what: &'static str, path: &str, reason: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        what,
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

/// Every certificate in a PEM file; none is an error.
fn read_certs(what: &'static str, path: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| file_error(what, path, e))?;
    if certs.is_empty() {
        return Err(file_error(what, path, "no PEM certificate in it"));
    }
    Ok(certs)
}

fn file_roots(path: &str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs("sslrootcert", path)? {
        roots
            .add(cert)
            .map_err(|e| file_error("sslrootcert", path, e))?;
    }
    Ok(roots)
}

fn system_roots(mode: SslMode) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    // Unreadable ones among many are skipped, as the system's own tools do.
    let (added, _ignored) =
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if added == 0 {
        return Err(TlsError::NoSystemRoots(mode.name()));
    }
    Ok(roots)
}

/// libpq's checks: none (`roots` unset), the chain (verify-ca, or a root
/// file with require/prefer), or the chain and the host name (verify-full).
#[derive(Debug)]
struct Verifier {
    roots: Option<Arc<RootCertStore>>,
    check_name: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(roots) = &self.roots else {
            // sslmode=require/prefer: encrypted, but anyone's certificate will do.
            return Ok(ServerCertVerified::assertion());
        };
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        if self.check_name {
            verify_server_name(&cert, server_name)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// What a TLS failure at connect time means and what to set, or `None`
/// when `error` is not about TLS (it may then go away on a retry).
pub fn explain(error: &tokio_postgres::Error, options: &TlsOptions) -> Option<TlsError> {
    let mode = options.mode.name();
    let roots = match options.root_cert.as_deref() {
        Some("system") | None => "the system's root certificates".to_owned(),
        Some(path) => format!("sslrootcert={path}"),
    };
    if let Some(db) = error.as_db_error() {
        // pg_hba.conf refuses plain connections, or wants a client certificate.
        // PostgreSQL's words, and PgBouncer's (client_tls_sslmode=require).
        let plain_refused =
            db.message().contains("no encryption") || db.message() == "SSL required";
        let set = if plain_refused {
            "the server takes only TLS connections here; set sslmode=verify-full (or require)"
        } else if db.message().contains("client certificate") {
            "set sslcert and sslkey to the client certificate and its key"
        } else {
            return None;
        };
        return Some(TlsError::Handshake(format!(
            "{} (sslmode={mode}): {set} in DATABASE_URL",
            db.message()
        )));
    }
    let message = match rustls_error(error)? {
        Found::Rustls(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForNameContext {
                expected,
                presented,
            },
        )) => format!(
            "the database server's certificate is not valid for host {} (it names {}), and \
             sslmode=verify-full checks the host name: connect to a host name the certificate \
             names, or set sslmode=verify-ca to check only the CA",
            expected.to_str(),
            presented
                .iter()
                .map(|name| bare_name(name))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Found::Rustls(rustls::Error::InvalidCertificate(CertificateError::NotValidForName)) => {
            "the database server's certificate is not valid for the host connected to, and \
             sslmode=verify-full checks the host name: connect to a host name the certificate \
             names, or set sslmode=verify-ca to check only the CA"
                .to_owned()
        }
        Found::Rustls(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        )) => format!(
            "the database server's certificate is not signed by a CA in {roots} \
             (sslmode={mode}): set sslrootcert in DATABASE_URL to the PEM file of the CA \
             that signed it"
        ),
        Found::Rustls(rustls::Error::InvalidCertificate(e)) => format!(
            "the database server's certificate is refused (sslmode={mode}, CAs from {roots}): {e:?}"
        ),
        Found::Rustls(e) => format!("the TLS handshake with the database failed: {e}"),
        Found::NoTlsServer => format!(
            "the database server does not accept TLS, and sslmode={mode} needs it: turn on \
             ssl at the server, or set sslmode=prefer (or disable) to connect unencrypted"
        ),
    };
    Some(TlsError::Handshake(message))
}

/// `localhost` of webpki's `DnsName("localhost")` (names come debug-formatted).
fn bare_name(name: &str) -> &str {
    name.split_once('(')
        .and_then(|(_, inner)| inner.strip_suffix(')'))
        .map_or(name, |inner| inner.trim_matches('"'))
}

enum Found<'a> {
    Rustls(&'a rustls::Error),
    NoTlsServer,
}

/// The rustls error in `error`'s chain (io errors wrap it without
/// passing it on as their source), or tokio-postgres's own refusal.
fn rustls_error(error: &tokio_postgres::Error) -> Option<Found<'_>> {
    let mut cause = error.source();
    while let Some(e) = cause {
        let inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|e| e as &(dyn std::error::Error + 'static));
        if let Some(found) = inner.unwrap_or(e).downcast_ref::<rustls::Error>() {
            return Some(Found::Rustls(found));
        }
        // tokio-postgres says so in text only (its error kinds are private).
        if e.to_string() == "server does not support TLS" {
            return Some(Found::NoTlsServer);
        }
        cause = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(
        mode: SslMode,
        root: Option<&str>,
        cert: Option<&str>,
        key: Option<&str>,
    ) -> TlsOptions {
        TlsOptions {
            mode,
            root_cert: root.map(str::to_owned),
            cert: cert.map(str::to_owned),
            key: key.map(str::to_owned),
        }
    }

    #[test]
    fn url_parameters_are_taken_out_and_the_rest_kept() {
        let (rest, o) = split(
            "postgres://u@db.example:5432/x?application_name=a&sslmode=verify-full\
             &sslrootcert=/etc/ca%20root.pem&connect_timeout=5&sslcert=c.pem&sslkey=k.pem",
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://u@db.example:5432/x?application_name=a&connect_timeout=5"
        );
        assert_eq!(
            o,
            opts(
                SslMode::VerifyFull,
                Some("/etc/ca root.pem"),
                Some("c.pem"),
                Some("k.pem")
            )
        );
    }

    #[test]
    fn a_url_whose_first_parameter_goes_keeps_its_question_mark() {
        let (rest, o) = split("postgresql://h/db?sslmode=verify-ca&connect_timeout=3").unwrap();
        assert_eq!(rest, "postgresql://h/db?connect_timeout=3");
        assert_eq!(o.mode, SslMode::VerifyCa);
        let (rest, o) = split("postgres://h/db?sslmode=require").unwrap();
        assert_eq!(rest, "postgres://h/db");
        assert_eq!(o, opts(SslMode::Require, None, None, None));
    }

    #[test]
    fn without_parameters_the_mode_is_prefer() {
        let (rest, o) = split("postgres://u@h:5/db").unwrap();
        assert_eq!(rest, "postgres://u@h:5/db");
        assert_eq!(o, opts(SslMode::Prefer, None, None, None));
        assert_eq!(split("host=h").unwrap().1.mode, SslMode::Prefer);
    }

    #[test]
    fn key_value_strings_with_quotes_and_escapes() {
        let (rest, o) = split(
            "host=h  sslmode = verify-full user=u sslrootcert='/a b/c\\'s.pem' \
             password='x y' sslkey=k\\ 1.pem sslcert=c.pem",
        )
        .unwrap();
        assert_eq!(rest, "host=h user=u password='x y'");
        assert_eq!(
            o,
            opts(
                SslMode::VerifyFull,
                Some("/a b/c's.pem"),
                Some("c.pem"),
                Some("k 1.pem")
            )
        );
    }

    #[test]
    fn the_last_of_a_repeated_parameter_counts() {
        let (_, o) =
            split("host=h sslmode=disable sslrootcert=a sslmode=verify-ca sslrootcert=b").unwrap();
        assert_eq!(o, opts(SslMode::VerifyCa, Some("b"), None, None));
    }

    #[test]
    fn unknown_modes_are_refused_by_name() {
        let e = split("postgres://h/db?sslmode=allow").unwrap_err();
        assert!(
            e.to_string().contains("sslmode=allow is not supported"),
            "{e}"
        );
        assert!(
            matches!(split("host=h sslmode=VERIFY"), Err(TlsError::BadMode(m)) if m == "VERIFY")
        );
    }

    #[test]
    fn presented_names_lose_their_debug_wrapping() {
        assert_eq!(bare_name("DnsName(\"db.example\")"), "db.example");
        assert_eq!(bare_name("IpAddress(127.0.0.1)"), "127.0.0.1");
        assert_eq!(bare_name("plain"), "plain");
    }

    #[test]
    fn the_verify_modes_are_require_on_the_wire() {
        let wire: Vec<_> = [
            SslMode::Disable,
            SslMode::Prefer,
            SslMode::Require,
            SslMode::VerifyCa,
            SslMode::VerifyFull,
        ]
        .map(SslMode::wire)
        .into();
        use WireMode::*;
        assert_eq!(wire, [Disable, Prefer, Require, Require, Require]);
    }

    fn refused(options: TlsOptions) -> String {
        match connector(&options) {
            Ok(_) => panic!("{options:?} should be refused"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn settings_that_cannot_work_are_refused_before_connecting() {
        let e = refused(opts(SslMode::Require, Some("system"), None, None));
        assert!(e.contains("needs sslmode=verify-full"), "{e}");
        let e = refused(opts(SslMode::Require, None, Some("c.pem"), None));
        assert!(e.starts_with("sslcert and sslkey go together"), "{e}");
        let e = refused(opts(
            SslMode::VerifyCa,
            Some("/nonexistent/ca.pem"),
            None,
            None,
        ));
        assert!(e.starts_with("sslrootcert '/nonexistent/ca.pem'"), "{e}");
        assert!(connector(&opts(SslMode::Require, None, None, None)).is_ok());
        // Certificate files are not read when TLS is off.
        assert!(connector(&opts(SslMode::Disable, Some("/nonexistent"), None, None)).is_ok());
    }
}
