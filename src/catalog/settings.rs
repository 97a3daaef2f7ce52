//! Per-collection settings from the optional TOML file `FEATUREPIPE_CONFIG`;
//! without it everything is derived from the catalog.
//!
//! ```toml
//! [collections.places]
//! title = "Places"
//! description = "Points of interest"
//! last_modified = "changed_at"    # a timestamptz column, or false for none
//! precondition_required = true    # PUT/PATCH/DELETE need If-Match or If-Unmodified-Since
//! crs = ["http://www.opengis.net/def/crs/EPSG/0/3857"]
//! read_only = true
//! client_keys = true              # PUT on a missing id creates it (default: inferred)
//! read_only_properties = ["checked_by"] # published readOnly; clients may not write them
//! time = "observed"               # JSON-FG `time`: a date/timestamp column, or ["start", "end"]
//! feature_type = "Place"          # JSON-FG `featureType` (default: the collection id)
//! changes = true                  # GET /collections/places/changes (docs/offline-sync.md)
//! null_means_default = true       # a new feature's null takes a column's default, as QGIS needs
//!
//! [auth]
//! anonymous = "read:*"            # what callers without credentials may do
//! audience = "featurepipe"        # JWTs must carry this aud (optional)
//! issuer = "https://login.example" # and this iss (optional)
//! jwt_leeway = 5                  # seconds of clock skew allowed on exp and nbf
//! set_role = true                 # run SQL as the credential's role
//!
//! [api_keys.field-app]            # `featurepipe api-key field-app` makes one
//! sha256 = "9f86d081884c7d65…"     # 64 hex digits: SHA-256 of the key
//! scope = "read:* write:survey_*"
//! role = "field_editor"           # optional, used with set_role
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The whole settings file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Settings by collection id.
    #[serde(default)]
    pub collections: BTreeMap<String, CollectionSettings>,
    /// How callers are authorised.
    #[serde(default)]
    pub auth: AuthSettings,
    /// API keys by name.
    #[serde(default)]
    pub api_keys: BTreeMap<String, ApiKeySettings>,
}

/// The `[auth]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    /// The scope of callers without credentials (default: nothing).
    #[serde(default)]
    pub anonymous: String,
    /// The `aud` a JWT must carry.
    pub audience: Option<String>,
    /// The `iss` a JWT must carry.
    pub issuer: Option<String>,
    /// The seconds a JWT is still taken after its `exp`, and before its
    /// `nbf`, for clocks that disagree a little (default 5).
    #[serde(default = "default_jwt_leeway")]
    pub jwt_leeway: u64,
    /// Run each request's SQL as the credential's database role (`SET ROLE`).
    #[serde(default)]
    pub set_role: bool,
    /// With `set_role`: the database role of callers without credentials
    /// (needed when `anonymous` grants anything).
    pub anonymous_role: Option<String>,
}

fn default_jwt_leeway() -> u64 {
    5
}

impl Default for AuthSettings {
    fn default() -> Self {
        AuthSettings {
            anonymous: String::new(),
            audience: None,
            issuer: None,
            jwt_leeway: default_jwt_leeway(),
            set_role: false,
            anonymous_role: None,
        }
    }
}

/// One API key: only its hash is stored.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeySettings {
    /// SHA-256 of the key, as 64 hex digits.
    pub sha256: String,
    /// What it grants, e.g. `read:* write:survey_*`.
    pub scope: String,
    /// The database role its requests run as, with `set_role`.
    pub role: Option<String>,
}

/// The settings of one collection.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectionSettings {
    /// Human-readable title (default: the id).
    pub title: Option<String>,
    /// Description (default: the table comment).
    pub description: Option<String>,
    /// The last-modified column by name, or `false` for none (default: by convention).
    pub last_modified: Option<LastModified>,
    /// Writes must carry `If-Match` or `If-Unmodified-Since` (428 otherwise).
    #[serde(default)]
    pub precondition_required: bool,
    /// CRS URIs offered besides CRS84, EPSG:4326 and the storage CRS.
    #[serde(default)]
    pub crs: Vec<String>,
    /// Refuse writes even when the table could take them.
    #[serde(default)]
    pub read_only: bool,
    /// Whether clients choose keys: PUT on a missing id creates the feature
    /// (default: inferred, see [`crate::catalog::Collection::client_keys`]).
    pub client_keys: Option<bool>,
    /// Columns clients may not write: published `readOnly`, refused in a new
    /// feature (ignored under `Prefer: handling=lenient`), kept by PUT and PATCH.
    #[serde(default)]
    pub read_only_properties: Vec<String>,
    /// The column(s) JSON-FG's `time` is stored in (default: none).
    pub time: Option<TimeColumns>,
    /// The type JSON-FG's `featureType` names (default: the collection id).
    pub feature_type: Option<String>,
    /// Publish a feed of the table's changes (`GET …/changes`): the service
    /// installs a trigger that logs every change, whoever makes it.
    #[serde(default)]
    pub changes: bool,
    /// In a new feature, `null` for a column with a DEFAULT means the
    /// default, nullable or not (clients such as QGIS send every field,
    /// `null` for those left empty). NOT NULL columns take it always.
    #[serde(default)]
    pub null_means_default: bool,
}

/// `time = "column"` (an instant) or `time = ["start", "end"]` (an interval).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(
    untagged,
    expecting = "time is a column name, or the [start, end] column names of an interval"
)]
pub enum TimeColumns {
    /// An instant: one date or timestamp column.
    Instant(String),
    /// An interval: its start and end columns.
    Interval([String; 2]),
}

/// `last_modified = "column"` or `last_modified = false`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum LastModified {
    /// This column.
    Column(String),
    /// `false`: none (`true` means the convention).
    Convention(bool),
}

impl Settings {
    /// Read the file at `path`; any problem is a one-line message naming it.
    pub fn load(path: &Path) -> Result<Settings, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parse settings from TOML text.
    pub fn parse(text: &str) -> Result<Settings, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects_unknown_keys() {
        let s = Settings::parse(
            "[collections.a]\ntitle = \"A\"\nlast_modified = false\n\
             read_only_properties = [\"x\", \"y\"]\n\
             time = [\"from\", \"to\"]\nfeature_type = \"Site\"\nchanges = true\n\
             [collections.\"s.b\"]\nlast_modified = \"changed\"\nprecondition_required = true\n",
        )
        .unwrap();
        assert_eq!(s.collections["a"].title.as_deref(), Some("A"));
        assert_eq!(
            s.collections["a"].last_modified,
            Some(LastModified::Convention(false))
        );
        assert_eq!(s.collections["a"].read_only_properties, ["x", "y"]);
        assert_eq!(
            s.collections["a"].time,
            Some(TimeColumns::Interval(["from".into(), "to".into()]))
        );
        assert_eq!(s.collections["a"].feature_type.as_deref(), Some("Site"));
        let instant = Settings::parse("[collections.a]\ntime = \"seen\"").unwrap();
        assert_eq!(
            instant.collections["a"].time,
            Some(TimeColumns::Instant("seen".into()))
        );
        assert!(Settings::parse("[collections.a]\ntime = [\"a\", \"b\", \"c\"]").is_err());
        assert!(s.collections["a"].changes && !s.collections["s.b"].changes);
        assert!(s.collections["s.b"].precondition_required);
        assert!(Settings::parse("[collections.a]\ntitel = \"typo\"").is_err());
    }
}
