//! HTTPS for push: rustls (with ring, as for the database) trusting the
//! system's root certificates or the CAs of `--ca-file`, and what a
//! certificate the service presents and push refuses means for the user.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::{CertificateError, ClientConfig, RootCertStore};

use crate::trust;

/// Which CAs push trusts for an https:// service.
#[derive(Debug, Clone)]
pub enum Roots {
    /// The system's (rustls-native-certs: `SSL_CERT_FILE` or `SSL_CERT_DIR`
    /// when set, else the platform's store).
    System,
    /// Only those of a PEM file (`--ca-file`).
    File(PathBuf),
}

impl Roots {
    /// The rustls configuration that trusts these roots.
    pub fn client_config(&self) -> Result<ClientConfig, String> {
        let roots = match self {
            Roots::System => trust::system_roots().ok_or(
                "no system root certificates were found to check the service's certificate: \
                 give the CA that signed it with --ca-file (or FEATUREPIPE_CA_FILE), \
                 or install the system's CA certificates",
            )?,
            Roots::File(path) => trust::file_roots(&path.to_string_lossy())
                .map_err(|e| format!("--ca-file {}: {e}", path.display()))?,
        };
        config(roots)
    }

    /// What push trusts, in words.
    fn described(&self) -> String {
        match self {
            Roots::System => "the system's root certificates".into(),
            Roots::File(path) => format!("--ca-file {}", path.display()),
        }
    }
}

/// A configuration with no roots, for a plain http:// service: it never
/// makes a TLS connection, so it trusts no one.
pub fn plain_config() -> Result<ClientConfig, String> {
    config(RootCertStore::empty())
}

fn config(roots: RootCertStore) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Why the TLS connection to `url` failed, said so that the user knows
/// what to change; `None` when `error` is not about TLS. Trying again
/// would fail the same way.
pub fn explain(
    error: &(dyn std::error::Error + 'static),
    url: &str,
    roots: &Roots,
) -> Option<String> {
    let refused = |why: String| format!("cannot reach {url}: {why}");
    let message = match trust::rustls_cause(error)? {
        rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        ) => refused(format!(
            "the certificate it presents is not trusted: no CA in {} signed it. \
             Give the PEM file of the CA that did with --ca-file (or FEATUREPIPE_CA_FILE)",
            roots.described()
        )),
        rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected,
            presented,
        }) => refused(format!(
            "the certificate it presents is not valid for {} (it names {}): \
             use a --url with a host name the certificate names",
            expected.to_str(),
            trust::presented_names(presented)
        )),
        rustls::Error::InvalidCertificate(CertificateError::NotValidForName) => refused(
            "the certificate it presents is not valid for the host name of --url: \
             use a --url with a host name the certificate names"
                .into(),
        ),
        rustls::Error::InvalidCertificate(e) => {
            refused(format!("the certificate it presents is refused: {e}"))
        }
        rustls::Error::InvalidMessage(_) => refused(
            "what it answers is not TLS: is it an http:// service? (then say so in --url)".into(),
        ),
        e => refused(format!("the TLS handshake failed: {e}")),
    };
    Some(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_that_cannot_be_used_is_named() {
        let e = Roots::File("/nonexistent/ca.pem".into())
            .client_config()
            .unwrap_err();
        assert!(e.starts_with("--ca-file /nonexistent/ca.pem: "), "{e}");
        let empty = std::env::temp_dir().join(format!("fp-push-ca-{}.pem", std::process::id()));
        std::fs::write(&empty, "").unwrap();
        let e = Roots::File(empty.clone()).client_config().unwrap_err();
        std::fs::remove_file(&empty).unwrap();
        assert!(e.ends_with(": no PEM certificate in it"), "{e}");
    }

    #[test]
    fn refused_certificates_say_what_to_change() {
        let io = |e: rustls::Error| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
        let untrusted = io(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer,
        ));
        let url = "https://example.test/collections/c/items";
        let said = explain(&untrusted, url, &Roots::System).unwrap();
        assert!(said.starts_with(&format!("cannot reach {url}: ")), "{said}");
        assert!(said.contains("not trusted: no CA in the system's root certificates"));
        assert!(
            said.contains("--ca-file (or FEATUREPIPE_CA_FILE)"),
            "{said}"
        );
        let said = explain(&untrusted, url, &Roots::File("ca.pem".into())).unwrap();
        assert!(
            said.contains("no CA in --ca-file ca.pem signed it"),
            "{said}"
        );
        let not_tls = io(rustls::Error::InvalidMessage(
            rustls::InvalidMessage::InvalidContentType,
        ));
        let said = explain(&not_tls, url, &Roots::System).unwrap();
        assert!(said.contains("is it an http:// service?"), "{said}");
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(explain(&refused, url, &Roots::System).is_none());
    }
}
