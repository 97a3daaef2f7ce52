//! Who is calling and what they may do. Credentials are API keys (stored as
//! SHA-256 hashes in the settings file) and JWT bearer tokens (HS256 with a
//! shared secret, RS256 with a public key); each grants read and/or write per
//! collection. Without credentials a caller has what `[auth] anonymous` grants.

pub mod grant;
mod token;

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use crate::catalog::settings::Settings;
use crate::error::{Error, ErrorKind};
pub use grant::Grant;
pub use token::{JwtChecks, JwtKeys};

/// The configured credentials; built once at start-up.
pub struct Auth {
    /// `false`: everyone may do everything (`FEATUREPIPE_AUTH=off`).
    enabled: bool,
    /// API keys by the SHA-256 of the key: (name, grant, role).
    keys: HashMap<[u8; 32], Credential>,
    jwt: Option<JwtKeys>,
    anonymous: Grant,
    /// Run each request's SQL as the credential's database role.
    set_role: bool,
    /// With `set_role`: the role of callers without credentials.
    anonymous_role: Option<String>,
}

/// What one API key is.
struct Credential {
    name: String,
    grant: Grant,
    role: Option<String>,
}

/// The caller of a request and its rights.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The API key's name or the token's subject; `None` when anonymous.
    pub name: Option<String>,
    /// Whose Idempotency-Keys these are: the kind of credential and its
    /// name (a token without a subject: the token itself).
    owner: Option<String>,
    grant: Grant,
    /// The database role the request's SQL runs as, when `set_role` is on.
    pub role: Option<String>,
}

impl Auth {
    /// Build from the settings file and the JWT keys; `enabled` is `FEATUREPIPE_AUTH`.
    pub fn new(enabled: bool, settings: &Settings, jwt: Option<JwtKeys>) -> Result<Self, String> {
        let mut keys = HashMap::new();
        for (name, key) in &settings.api_keys {
            let hash = decode_hash(&key.sha256)
                .ok_or_else(|| format!("api_keys.{name}: sha256 must be 64 hex digits"))?;
            let grant = Grant::parse(&key.scope).map_err(|e| format!("api_keys.{name}: {e}"))?;
            let credential = Credential {
                name: name.clone(),
                grant,
                role: key.role.clone(),
            };
            if keys.insert(hash, credential).is_some() {
                return Err(format!("api_keys.{name}: the same key hash appears twice"));
            }
        }
        let anonymous =
            Grant::parse(&settings.auth.anonymous).map_err(|e| format!("auth.anonymous: {e}"))?;
        let auth = &settings.auth;
        if auth.set_role && !anonymous.is_empty() && auth.anonymous_role.is_none() {
            return Err(
                "[auth] set_role with anonymous rights needs anonymous_role: \
                        otherwise callers without credentials would run as the service's \
                        own role, past row-level security"
                    .into(),
            );
        }
        if enabled && keys.is_empty() && jwt.is_none() && anonymous.is_empty() {
            return Err("authentication is on but nobody could do anything: add [api_keys] to \
                        the settings file, set FEATUREPIPE_JWT_SECRET or FEATUREPIPE_JWT_PUBLIC_KEY, \
                        grant [auth] anonymous rights, or set FEATUREPIPE_AUTH=off"
                .into());
        }
        Ok(Auth {
            enabled,
            keys,
            jwt,
            anonymous,
            set_role: settings.auth.set_role,
            anonymous_role: settings.auth.anonymous_role.clone(),
        })
    }

    /// Whether credentials are checked at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The caller presenting credential `presented` (an API key or a JWT),
    /// or none: unauthorized for credentials that are not valid.
    pub fn identify(&self, presented: Option<&str>) -> Result<Caller, Error> {
        if !self.enabled {
            return Ok(Caller {
                name: None,
                owner: None,
                grant: Grant::everything(),
                role: None,
            });
        }
        let Some(presented) = presented else {
            return Ok(Caller {
                name: None,
                owner: None,
                grant: self.anonymous.clone(),
                role: self.anonymous_role(),
            });
        };
        let hash: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let (name, owner, grant, role) = if presented.matches('.').count() == 2 {
            let jwt = self.jwt.as_ref().ok_or_else(|| {
                unauthorized("bearer tokens are not accepted here (no JWT key is configured)")
            })?;
            let claims = jwt.verify(presented).map_err(|e| unauthorized(&e))?;
            let owner = match &claims.sub {
                Some(sub) => format!("jwt:{sub}"),
                None => format!("token:{}", hex(&hash)),
            };
            let name = claims.sub.unwrap_or_else(|| "the bearer token".into());
            (name, owner, claims.grant, claims.role)
        } else {
            let key = self
                .keys
                .get(&hash)
                .ok_or_else(|| unauthorized("the API key is not known"))?;
            let owner = format!("key:{}", key.name);
            (key.name.clone(), owner, key.grant.clone(), key.role.clone())
        };
        Ok(Caller {
            name: Some(name),
            owner: Some(owner),
            // What anyone may do, a credential may do too.
            grant: grant.union(&self.anonymous),
            role: role.filter(|_| self.set_role),
        })
    }

    /// The role of callers without credentials, when roles are on.
    fn anonymous_role(&self) -> Option<String> {
        self.anonymous_role.clone().filter(|_| self.set_role)
    }
}

impl Caller {
    /// Whether collection `id` may be read.
    pub fn can_read(&self, id: &str) -> bool {
        self.grant.can_read(id)
    }

    /// Whether collection `id` may be written.
    pub fn can_write(&self, id: &str) -> bool {
        self.grant.can_write(id)
    }

    /// Unauthorized (anonymous) or forbidden unless collection `id` may be read.
    pub fn check_read(&self, id: &str) -> Result<(), Error> {
        self.check(self.can_read(id), "read", id)
    }

    /// Unauthorized (anonymous) or forbidden unless collection `id` may be written.
    pub fn check_write(&self, id: &str) -> Result<(), Error> {
        self.check(self.can_write(id), "write", id)
    }

    /// An Idempotency-Key made the caller's own, as it is stored.
    pub fn own_key(&self, key: &str) -> String {
        match &self.owner {
            Some(owner) => format!("{owner}\u{1f}{key}"),
            None => key.to_owned(),
        }
    }

    /// Unauthorized (anonymous) or forbidden unless some collection may be written.
    pub fn check_write_any(&self) -> Result<(), Error> {
        self.check(self.grant.writes_any(), "write", "any collection")
    }

    fn check(&self, allowed: bool, what: &str, id: &str) -> Result<(), Error> {
        match (allowed, &self.name) {
            (true, _) => Ok(()),
            (false, None) => Err(unauthorized(&format!(
                "credentials are needed to {what} '{id}' (Authorization: Bearer, or X-API-Key)"
            ))),
            (false, Some(name)) => Err(Error::new(
                ErrorKind::Forbidden,
                format!("'{name}' may not {what} '{id}'"),
            )),
        }
    }
}

/// A caller refused for the credential they presented, or for presenting none.
pub fn unauthorized(why: &str) -> Error {
    Error::new(ErrorKind::Unauthorized, why)
}

/// 64 hex digits as 32 bytes.
fn decode_hash(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

/// A new random API key and the SHA-256 (hex) the settings file stores.
pub fn new_api_key() -> Result<(String, String), String> {
    let mut secret = [0u8; 32];
    getrandom::getrandom(&mut secret).map_err(|e| format!("no randomness available: {e}"))?;
    let key = format!("fp_{}", hex(&secret));
    let hash = hex(&Sha256::digest(key.as_bytes()));
    Ok((key, hash))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
