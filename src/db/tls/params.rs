//! libpq's TLS parameters, read from a connection string (URL or
//! `key=value`) and removed from it: tokio-postgres knows only `sslmode`
//! disable, prefer and require, and refuses the rest.

use crate::db::environment::Environment;
use tokio_postgres::config::SslMode as WireMode;

use super::TlsError;

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

    /// The mode as written in a connection string.
    pub(super) fn name(self) -> &'static str {
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

/// The connection string without the TLS parameters tokio-postgres does
/// not know, and those parameters.
pub fn split(url: &str) -> Result<(String, TlsOptions), TlsError> {
    split_in(url, &Environment::default())
}

/// [`split`], the TLS parameters the string leaves unsaid taken from `env`
/// (`PGSSLMODE`, `PGSSLROOTCERT` or `~/.postgresql/root.crt`), as libpq does.
pub fn split_in(url: &str, env: &Environment) -> Result<(String, TlsOptions), TlsError> {
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
        .or(env.var("PGSSLMODE"))
        .map_or(Ok(SslMode::Prefer), SslMode::parse)?;
    let root_cert = root_cert.or_else(|| env.root_cert());
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
}
