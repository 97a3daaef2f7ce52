//! TLS to PostgreSQL (or PgBouncer) with libpq's meanings of `sslmode`,
//! `sslrootcert`, `sslcert` and `sslkey`, through rustls.
//!
//! The parameters are read in `params`; here they become a rustls client
//! configuration, and TLS failures become start-up messages that say what
//! to set.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, ServerName, SubjectPublicKeyInfoDer, UnixTime,
};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::trust;

mod fallback;
mod params;

pub use fallback::{connect, Connected, LibpqConnect};
pub use params::{split, split_in, SslMode, TlsOptions};

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

fn read_certs(what: &'static str, path: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    trust::pem_certs(path).map_err(|e| file_error(what, path, e))
}

fn file_roots(path: &str) -> Result<RootCertStore, TlsError> {
    trust::file_roots(path).map_err(|e| file_error("sslrootcert", path, e))
}

fn system_roots(mode: SslMode) -> Result<RootCertStore, TlsError> {
    trust::system_roots().ok_or(TlsError::NoSystemRoots(mode.name()))
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
        match self.roots {
            Some(_) => verify_tls12_signature(message, cert, dss, &self.algorithms),
            None => self.signed_with_key_of(cert, message, dss),
        }
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match self.roots {
            Some(_) => verify_tls13_signature(message, cert, dss, &self.algorithms),
            None if !in_tls13(dss.scheme) => Err(unadvertised()),
            None => self.signed_with_key_of(cert, message, dss),
        }
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

impl Verifier {
    /// The handshake's signature checked with the public key of `cert`,
    /// whatever else the certificate is: where nothing about the certificate
    /// is checked (require, prefer), one that webpki does not take (an
    /// X.509 v1 certificate, such as `openssl x509 -req -signkey` makes, and
    /// Citus generates) must still connect, as it does with libpq.
    fn signed_with_key_of(
        &self,
        cert: &CertificateDer<'_>,
        message: &[u8],
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let bad = || rustls::Error::InvalidCertificate(CertificateError::BadEncoding);
        let (_, parsed) = x509_parser::parse_x509_certificate(cert).map_err(|_| bad())?;
        let spki = SubjectPublicKeyInfoDer::from(parsed.tbs_certificate.subject_pki.raw);
        let key = webpki::RawPublicKeyEntity::try_from(&spki).map_err(|_| bad())?;
        let candidates = self
            .algorithms
            .mapping
            .iter()
            .find(|(scheme, _)| *scheme == dss.scheme)
            .map(|(_, algorithms)| *algorithms)
            .ok_or_else(unadvertised)?;
        // TLS 1.2's schemes may stand for several algorithms: any one.
        candidates
            .iter()
            .find(|algorithm| {
                key.verify_signature(**algorithm, message, dss.signature())
                    .is_ok()
            })
            .map(|_| HandshakeSignatureValid::assertion())
            .ok_or(rustls::Error::InvalidCertificate(
                CertificateError::BadSignature,
            ))
    }
}

/// Whether TLS 1.3 allows signature scheme `scheme` (RFC 8446 4.2.3: no
/// PKCS #1 v1.5 nor SHA-1 in handshake signatures).
fn in_tls13(scheme: rustls::SignatureScheme) -> bool {
    use rustls::SignatureScheme as S;
    !matches!(
        scheme,
        S::RSA_PKCS1_SHA1
            | S::RSA_PKCS1_SHA256
            | S::RSA_PKCS1_SHA384
            | S::RSA_PKCS1_SHA512
            | S::ECDSA_SHA1_Legacy
    )
}

/// A signature in a scheme the client did not offer.
fn unadvertised() -> rustls::Error {
    rustls::Error::PeerMisbehaved(rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme)
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
            trust::presented_names(presented)
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

enum Found<'a> {
    Rustls(&'a rustls::Error),
    NoTlsServer,
}

/// The rustls error in `error`'s chain, or tokio-postgres's own refusal.
fn rustls_error(error: &tokio_postgres::Error) -> Option<Found<'_>> {
    if let Some(found) = trust::rustls_cause(error) {
        return Some(Found::Rustls(found));
    }
    // tokio-postgres says so in text only (its error kinds are private).
    trust::causes(error)
        .any(|e| e.to_string() == "server does not support TLS")
        .then_some(Found::NoTlsServer)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The connector for the TLS parameters of a key-value string.
    fn connector_for(params: &str) -> Result<MakeRustlsConnect, TlsError> {
        connector(&split(&format!("host=h {params}")).unwrap().1)
    }

    fn refused(params: &str) -> String {
        match connector_for(params) {
            Ok(_) => panic!("{params} should be refused"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn settings_that_cannot_work_are_refused_before_connecting() {
        let e = refused("sslmode=require sslrootcert=system");
        assert!(e.contains("needs sslmode=verify-full"), "{e}");
        let e = refused("sslmode=require sslcert=c.pem");
        assert!(e.starts_with("sslcert and sslkey go together"), "{e}");
        let e = refused("sslmode=verify-ca sslrootcert=/nonexistent/ca.pem");
        assert!(e.starts_with("sslrootcert '/nonexistent/ca.pem'"), "{e}");
        assert!(connector_for("sslmode=require").is_ok());
        // Certificate files are not read when TLS is off.
        assert!(connector_for("sslmode=disable sslrootcert=/nonexistent").is_ok());
    }
}
