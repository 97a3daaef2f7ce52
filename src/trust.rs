//! What both TLS clients, the database's (`db::tls`) and `featurepipe
//! push`'s, share: the CA certificates they trust, read from a PEM file or
//! the system, and the rustls error behind a failed connection, so that
//! each can say what to set.

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

/// Every certificate in the PEM file at `path`; why not when it cannot be
/// read or holds none.
pub fn pem_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| match e {
            pem::Error::Io(e) => format!("cannot read it: {e}"),
            e => format!("not a PEM file of certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err("no PEM certificate in it".into());
    }
    Ok(certs)
}

/// The CAs of the PEM file at `path`, as the only roots trusted; why not
/// when it cannot be read, holds none, or holds one rustls cannot use.
pub fn file_roots(path: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in pem_certs(path)? {
        roots.add(cert).map_err(|e| e.to_string())?;
    }
    Ok(roots)
}

/// The system's root certificates (rustls-native-certs: `SSL_CERT_FILE` or
/// `SSL_CERT_DIR` when set, else the platform's store); `None` when there
/// are none.
pub fn system_roots() -> Option<RootCertStore> {
    let mut roots = RootCertStore::empty();
    // Unreadable ones among many are skipped, as the system's own tools do.
    let (added, _ignored) =
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    (added > 0).then_some(roots)
}

/// `error` and its causes, outermost first.
pub fn causes<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |e| e.source())
}

/// The rustls error among `error`'s causes. An io error does not pass the
/// error it wraps on as its source (only that error's own source), and
/// io errors wrap each other (hyper-rustls wraps tokio-rustls's), so the
/// errors inside them are looked into too.
pub fn rustls_cause<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    causes(error).find_map(|mut e| {
        while let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            e = inner;
        }
        e.downcast_ref::<rustls::Error>()
    })
}

/// The names a certificate presents (webpki gives them debug-formatted:
/// `DnsName("db.example")`), bare and joined: `db.example, 127.0.0.1`.
pub fn presented_names(presented: &[String]) -> String {
    presented
        .iter()
        .map(|name| bare_name(name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `localhost` of webpki's `DnsName("localhost")`.
fn bare_name(name: &str) -> &str {
    name.split_once('(')
        .and_then(|(_, inner)| inner.strip_suffix(')'))
        .map_or(name, |inner| inner.trim_matches('"'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presented_names_lose_their_debug_wrapping() {
        assert_eq!(bare_name("DnsName(\"db.example\")"), "db.example");
        assert_eq!(bare_name("IpAddress(127.0.0.1)"), "127.0.0.1");
        assert_eq!(bare_name("plain"), "plain");
        let names = ["DnsName(\"a\")".to_owned(), "IpAddress(::1)".to_owned()];
        assert_eq!(presented_names(&names), "a, ::1");
    }

    #[test]
    fn a_rustls_error_is_found_inside_io_errors() {
        let rustls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io =
            std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, rustls));
        assert!(matches!(
            rustls_cause(&io),
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            ))
        ));
        let plain = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(rustls_cause(&plain).is_none());
    }

    #[test]
    fn a_roots_file_that_holds_no_certificate_is_refused() {
        let e = file_roots("/nonexistent/ca.pem").unwrap_err();
        assert!(e.starts_with("cannot read it: No such file"), "{e}");
        let empty = std::env::temp_dir().join(format!("fp-trust-{}.pem", std::process::id()));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = file_roots(empty.to_str().unwrap()).unwrap_err();
        std::fs::remove_file(&empty).unwrap();
        assert_eq!(e, "no PEM certificate in it");
    }
}
