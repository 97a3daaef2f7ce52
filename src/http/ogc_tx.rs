//! The OpenAPI description of an OGC transaction body
//! (`application/ogc-tx+json`, OGC API - Features Part 11 draft), which
//! [`crate::session::ogc`] reads.

use serde::Serialize;
use utoipa::ToSchema;

use super::model::Feature;
use crate::session::ogc::report::Semantic;

/// An OGC API - Features Part 11 (draft) transaction.
#[derive(Debug, Serialize, ToSchema)]
pub struct OgcTransaction {
    /// `atomic` (the default): all or nothing; `batch`: each action on its
    /// own, failed ones reported in `exceptions` (featurepipe's `skip` mode).
    pub semantic: Option<Semantic>,
    /// The actions, carried out in this order.
    pub transaction: Vec<OgcAction>,
    /// Names the transaction (not kept).
    pub id: Option<String>,
}

/// One action of an OGC transaction.
#[derive(Debug, Serialize, ToSchema)]
pub struct OgcAction {
    /// `insert`, `replace`, `update` or `delete`.
    pub action: String,
    /// The collection's id.
    pub collection: String,
    /// Names the action in `exceptions`.
    pub id: Option<String>,
    /// insert: the features, in order.
    pub items: Option<Vec<Feature>>,
    /// replace: the whole feature (also taken as `properties: {"feature": …}`).
    pub feature: Option<Feature>,
    /// update: `{"add": [{"name", "value"}], "modify": [{"name", "value"}],
    /// "delete": ["name"]}`; the name `geometry` is the feature's geometry.
    #[schema(value_type = Option<Object>)]
    pub properties: Option<serde_json::Value>,
    /// replace, update, delete: which features, by id, in CQL2 JSON:
    /// `{"op": "=", "args": [{"property": "id"}, 7]}` or
    /// `{"op": "in", "args": [{"property": "id"}, [7, 8]]}` (the property is
    /// `id` or the key column); also `{"ids": [7, 8]}`. A replace without a
    /// filter replaces the feature its `id` names.
    #[schema(value_type = Option<Object>)]
    pub filter: Option<serde_json::Value>,
    /// `cql2-json`, the only one taken.
    #[serde(rename = "filter-lang")]
    pub filter_lang: Option<String>,
}
