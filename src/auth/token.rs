//! JWT bearer tokens: HS256 with a shared secret, RS256 with a public key.

use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use super::Grant;

/// The keys tokens are checked with, and what a token must say.
pub struct JwtKeys {
    hs256: Option<DecodingKey>,
    rs256: Option<DecodingKey>,
    checks: JwtChecks,
}

/// What a token must say besides its signature.
#[derive(Debug, Clone, Default)]
pub struct JwtChecks {
    /// The `aud` it must carry.
    pub audience: Option<String>,
    /// The `iss` it must carry.
    pub issuer: Option<String>,
    /// The seconds of clock skew allowed on `exp` and `nbf`.
    pub leeway: u64,
}

/// What a valid token grants.
pub struct Claims {
    /// `sub`.
    pub sub: Option<String>,
    /// From `scope`.
    pub grant: Grant,
    /// `role`: the database role to run as.
    pub role: Option<String>,
}

/// The claims featurepipe reads; `exp` is checked by the decoder.
#[derive(Deserialize)]
struct Raw {
    sub: Option<String>,
    #[serde(default)]
    scope: Scope,
    role: Option<String>,
}

/// `scope` as one space-separated string or a list of entries.
#[derive(Deserialize, Default)]
#[serde(untagged)]
enum Scope {
    Text(String),
    List(Vec<String>),
    #[default]
    None,
}

impl JwtKeys {
    /// Keys from a shared secret and/or a PEM public key; `None` when neither is given.
    pub fn new(
        secret: Option<&str>,
        public_pem: Option<&[u8]>,
        checks: JwtChecks,
    ) -> Result<Option<Self>, String> {
        if secret.is_none() && public_pem.is_none() {
            return Ok(None);
        }
        let rs256 = public_pem
            .map(DecodingKey::from_rsa_pem)
            .transpose()
            .map_err(|e| {
                format!("FEATUREPIPE_JWT_PUBLIC_KEY is not an RSA public key in PEM: {e}")
            })?;
        Ok(Some(JwtKeys {
            hs256: secret.map(|s| DecodingKey::from_secret(s.as_bytes())),
            rs256,
            checks,
        }))
    }

    /// Check the signature, expiry, audience and issuer; a message on failure.
    pub fn verify(&self, token: &str) -> Result<Claims, String> {
        let header = decode_header(token).map_err(|e| format!("the token cannot be read: {e}"))?;
        // The algorithm is the key's, never the token's choice alone.
        let key = match header.alg {
            Algorithm::HS256 => self.hs256.as_ref(),
            Algorithm::RS256 => self.rs256.as_ref(),
            _ => None,
        }
        .ok_or_else(|| format!("tokens signed with {:?} are not accepted", header.alg))?;
        let mut validation = Validation::new(header.alg);
        validation.validate_nbf = true;
        // The library allows 60 s past `exp` unless told otherwise.
        validation.leeway = self.checks.leeway;
        // A configured audience or issuer must be in the token, not merely
        // match when present.
        let mut required = vec!["exp"];
        match &self.checks.audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        if let Some(iss) = &self.checks.issuer {
            validation.set_issuer(&[iss]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        let raw = decode::<Raw>(token, key, &validation)
            .map_err(|e| format!("the token is not valid: {e}"))?
            .claims;
        let scope = match raw.scope {
            Scope::Text(text) => text,
            Scope::List(entries) => entries.join(" "),
            Scope::None => String::new(),
        };
        let grant = Grant::parse(&scope).map_err(|e| format!("the token's scope: {e}"))?;
        Ok(Claims {
            sub: raw.sub,
            grant,
            role: raw.role,
        })
    }
}
