//! libpq's environment: what a connection string leaves unsaid is taken,
//! as libpq takes it, from `PGHOST`, `PGPORT`, `PGDATABASE`, `PGUSER`,
//! `PGPASSWORD`, the password file (`PGPASSFILE`, else `~/.pgpass`),
//! `PGSSLMODE`, `PGSSLROOTCERT` (else `~/.postgresql/root.crt` when it
//! exists), `PGAPPNAME` and `PGTARGETSESSIONATTRS`. What the string says
//! always wins. tokio-postgres reads none of these.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tokio_postgres::config::{Host, TargetSessionAttrs};

/// The variables libpq reads, as this process has them.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    vars: HashMap<String, String>,
    home: Option<PathBuf>,
}

/// The variables that say where and how to connect.
const NAMES: [&str; 10] = [
    "PGHOST",
    "PGPORT",
    "PGDATABASE",
    "PGUSER",
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGAPPNAME",
    "PGTARGETSESSIONATTRS",
];

impl Environment {
    /// This process's.
    pub fn of_process() -> Environment {
        Environment::of(
            NAMES
                .iter()
                .filter_map(|name| std::env::var(name).ok().map(|v| (name.to_string(), v))),
            std::env::var_os("HOME").map(PathBuf::from),
        )
    }

    /// These variables (empty ones count as unset, as in libpq), with
    /// `home` as the user's home directory.
    pub fn of(
        vars: impl IntoIterator<Item = (String, String)>,
        home: Option<PathBuf>,
    ) -> Environment {
        Environment {
            vars: vars.into_iter().filter(|(_, v)| !v.is_empty()).collect(),
            home,
        }
    }

    /// A variable's value, if set.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Whether it names a server or a database to connect to.
    pub fn names_a_database(&self) -> bool {
        ["PGHOST", "PGDATABASE", "PGPORT", "PGUSER"]
            .iter()
            .any(|name| self.var(name).is_some())
    }

    /// `PGSSLROOTCERT`, else `~/.postgresql/root.crt` if it exists.
    pub fn root_cert(&self) -> Option<String> {
        if let Some(path) = self.var("PGSSLROOTCERT") {
            return Some(path.to_owned());
        }
        let default = self.home.as_ref()?.join(".postgresql/root.crt");
        default
            .is_file()
            .then(|| default.to_string_lossy().into_owned())
    }

    /// The password file: `PGPASSFILE`, else `~/.pgpass`.
    fn password_file(&self) -> Option<PathBuf> {
        match self.var("PGPASSFILE") {
            Some(path) => Some(PathBuf::from(path)),
            None => self.home.as_ref().map(|home| home.join(".pgpass")),
        }
    }

    /// Fill in what `config` (parsed from `url`) leaves unsaid.
    pub fn complete(&self, config: &mut tokio_postgres::Config, url: &str) {
        if config.get_hosts().is_empty() {
            for host in self
                .var("PGHOST")
                .map_or_else(default_hosts, |h| h.split(',').map(str::to_owned).collect())
            {
                match host.starts_with('/') {
                    true => config.host_path(&host),
                    false => config.host(&host),
                };
            }
        }
        if config.get_ports().is_empty() {
            if let Some(port) = self.var("PGPORT").and_then(|p| p.parse().ok()) {
                config.port(port);
            }
        }
        if config.get_user().is_none() {
            let user = self
                .var("PGUSER")
                .map(str::to_owned)
                .or_else(|| std::env::var("USER").ok())
                .or_else(|| std::env::var("LOGNAME").ok());
            if let Some(user) = user {
                config.user(&user);
            }
        }
        if config.get_dbname().is_none() {
            // libpq: the user's name when no database is named.
            let dbname = self
                .var("PGDATABASE")
                .or(config.get_user())
                .map(str::to_owned);
            if let Some(dbname) = dbname {
                config.dbname(&dbname);
            }
        }
        if config.get_application_name().is_none() {
            if let Some(name) = self.var("PGAPPNAME") {
                config.application_name(name);
            }
        }
        if !url.contains("target_session_attrs") {
            if let Some(attrs) = self.var("PGTARGETSESSIONATTRS") {
                // tokio-postgres knows three: `primary` and `standby` as the
                // nearest of them, `prefer-standby` as any.
                let attrs = match attrs {
                    "read-write" | "primary" => TargetSessionAttrs::ReadWrite,
                    "read-only" | "standby" => TargetSessionAttrs::ReadOnly,
                    "any" => TargetSessionAttrs::Any,
                    other => {
                        tracing::warn!(value = other, "PGTARGETSESSIONATTRS: taken as any");
                        TargetSessionAttrs::Any
                    }
                };
                config.target_session_attrs(attrs);
            }
        }
        if config.get_password().is_none() {
            let password = self
                .var("PGPASSWORD")
                .map(str::to_owned)
                .or_else(|| self.password_from_file(config));
            if let Some(password) = password {
                config.password(password);
            }
        }
    }

    /// The password the password file gives the first host of `config`.
    fn password_from_file(&self, config: &tokio_postgres::Config) -> Option<String> {
        // No file is no password, quietly (peer, trust, certificates).
        let path = self.password_file().filter(|path| path.is_file())?;
        if !readable_by_owner_only(&path) {
            tracing::warn!(file = %path.display(), "the password file is read by others than its owner: ignored, as libpq ignores it (chmod 0600)");
            return None;
        }
        let text = std::fs::read_to_string(&path).ok()?;
        let host = match config.get_hosts().first()? {
            Host::Tcp(host) => host.clone(),
            // A socket is `localhost` to the password file.
            Host::Unix(_) => "localhost".to_owned(),
        };
        let port = config
            .get_ports()
            .first()
            .copied()
            .unwrap_or(5432)
            .to_string();
        let wanted = [
            host.as_str(),
            port.as_str(),
            config.get_dbname().unwrap_or(""),
            config.get_user().unwrap_or(""),
        ];
        password_for(&text, wanted)
    }
}

/// libpq's default host: its socket directory where there is one.
fn default_hosts() -> Vec<String> {
    match Path::new("/var/run/postgresql").is_dir() {
        true => vec!["/var/run/postgresql".to_owned()],
        false => vec!["localhost".to_owned()],
    }
}

/// Whether only its owner may read `path` (libpq ignores other password files).
fn readable_by_owner_only(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 == 0)
}

/// The password of the first line of a password file that matches
/// `wanted` (host, port, database, user; `*` in the file matches any).
fn password_for(text: &str, wanted: [&str; 4]) -> Option<String> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let fields = fields(line);
            let [host, port, db, user, password] = fields.as_slice() else {
                return None;
            };
            let matches = [host, port, db, user]
                .iter()
                .zip(wanted)
                .all(|(field, want)| field.as_str() == "*" || field.as_str() == want);
            matches.then(|| password.clone())
        })
}

/// A password file's line cut at `:`, with `\:` and `\\` unescaped.
fn fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    fields.last_mut().expect("one field").push(next);
                }
            }
            // The password ends at its first unescaped colon, as in libpq.
            ':' if fields.len() == 5 => break,
            ':' => fields.push(String::new()),
            c => fields.last_mut().expect("one field").push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn env(vars: &[(&str, &str)]) -> Environment {
        Environment::of(
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            None,
        )
    }

    #[test]
    fn what_the_string_leaves_unsaid_comes_from_the_environment() {
        let e = env(&[
            ("PGHOST", "db.example,replica.example"),
            ("PGPORT", "6543"),
            ("PGDATABASE", "gis"),
            ("PGUSER", "editor"),
            ("PGPASSWORD", "secret"),
            ("PGAPPNAME", "field"),
            ("PGTARGETSESSIONATTRS", "read-write"),
        ]);
        let mut config = tokio_postgres::Config::from_str("").unwrap();
        e.complete(&mut config, "");
        assert_eq!(
            config.get_hosts(),
            [
                Host::Tcp("db.example".into()),
                Host::Tcp("replica.example".into())
            ]
        );
        assert_eq!(config.get_ports(), [6543]);
        assert_eq!(config.get_dbname(), Some("gis"));
        assert_eq!(config.get_user(), Some("editor"));
        assert_eq!(config.get_password(), Some(&b"secret"[..]));
        assert_eq!(config.get_application_name(), Some("field"));
        assert_eq!(
            config.get_target_session_attrs(),
            TargetSessionAttrs::ReadWrite
        );
    }

    #[test]
    fn the_string_wins() {
        let e = env(&[
            ("PGHOST", "elsewhere"),
            ("PGDATABASE", "other"),
            ("PGPASSWORD", "no"),
        ]);
        let url = "postgres://me:pw@here:5433/mine?target_session_attrs=any";
        let mut config = tokio_postgres::Config::from_str(url).unwrap();
        e.complete(&mut config, url);
        assert_eq!(config.get_hosts(), [Host::Tcp("here".into())]);
        assert_eq!(config.get_dbname(), Some("mine"));
        assert_eq!(config.get_password(), Some(&b"pw"[..]));
    }

    #[test]
    fn a_password_file_matches_host_port_database_and_user() {
        let text =
            "# comment\nother:5432:*:*:nope\nhere:5433:gis:me:first\n*:*:*:me:pa\\:ss\\\\w:rd\n";
        assert_eq!(
            password_for(text, ["here", "5433", "gis", "me"]).as_deref(),
            Some("first")
        );
        assert_eq!(
            password_for(text, ["x", "1", "y", "me"]).as_deref(),
            Some("pa:ss\\w")
        );
        assert_eq!(password_for(text, ["x", "1", "y", "you"]), None);
    }

    #[test]
    fn empty_variables_are_unset() {
        let e = env(&[("PGHOST", ""), ("PGSSLMODE", "")]);
        assert!(!e.names_a_database());
        assert_eq!(e.var("PGSSLMODE"), None);
    }
}
