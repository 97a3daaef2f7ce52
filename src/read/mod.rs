//! Reading features back as GeoJSON in CRS84: the queries behind the OGC API
//! read endpoints. PostgreSQL assembles each feature's JSON, so a page is
//! one query and no row is decoded into Rust values.

pub mod cover;
pub mod extent;
pub mod filter;
pub mod jsonfg;
pub mod params;
pub mod reach;
pub mod sql;

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;

use crate::catalog::Collection;
use crate::db::statement::{prepare, prepare_both};
use crate::db::Database;
use crate::error::{Current, Error, ErrorKind};
use crate::geometry::Crs;
use params::ItemsQuery;

/// How features are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// GeoJSON (RFC 7946), the geometry in the asked CRS.
    #[default]
    GeoJson,
    /// JSON-FG: `place` in the asked CRS, `geometry` in WGS 84, `time`.
    JsonFg,
}

/// How a feature is answered: its encoding, and the CRS of its geometry
/// (in JSON-FG, of `place`).
#[derive(Debug, Clone, PartialEq)]
pub struct Rendering {
    /// GeoJSON or JSON-FG.
    pub encoding: Encoding,
    /// The CRS of the geometry.
    pub crs: Crs,
}

impl Rendering {
    /// GeoJSON, the geometry in `crs`.
    pub fn geojson(crs: &Crs) -> Rendering {
        Rendering {
            encoding: Encoding::GeoJson,
            crs: crs.clone(),
        }
    }
}

/// One stored feature as GeoJSON text with its validators.
#[derive(Debug, Clone)]
pub struct StoredFeature {
    /// The Feature object, as JSON text.
    pub json: String,
    /// Strong entity tag: md5 of the stored row.
    pub etag: String,
    /// The last-modified column's value, when the table has one.
    pub last_modified: Option<DateTime<Utc>>,
}

impl From<StoredFeature> for Current {
    fn from(feature: StoredFeature) -> Self {
        Current {
            feature: feature.json,
            etag: feature.etag,
        }
    }
}

/// The content codings an entity tag may name (`<tag>-gzip`), as the
/// compressed answers that carry it.
pub const TAGGED_CODINGS: [&str; 3] = ["gzip", "br", "zstd"];

/// The feature's own entity tag in `tag`: one that names a content coding
/// ([`TAGGED_CODINGS`]) names the same stored feature.
pub fn plain_etag(tag: &str) -> &str {
    TAGGED_CODINGS
        .into_iter()
        .find_map(|coding| tag.strip_suffix(coding)?.strip_suffix('-'))
        .unwrap_or(tag)
}

impl From<tokio_postgres::Row> for StoredFeature {
    fn from(row: tokio_postgres::Row) -> Self {
        StoredFeature {
            json: row.get(0),
            etag: row.get(1),
            last_modified: row.get(2),
        }
    }
}

/// One page of an items query.
#[derive(Debug)]
pub struct Page {
    /// The features, in key order.
    pub features: Vec<StoredFeature>,
    /// How many features match the query in all.
    pub number_matched: i64,
}

type Params = Vec<Box<dyn ToSql + Sync + Send>>;

/// ` WHERE …` for the query's filters, appending their parameters; each
/// part of the bbox with its [`reach`] in the geometry column's SRID, when
/// it has one.
fn conditions(
    coll: &Collection,
    query: &ItemsQuery,
    reaches: &[Option<reach::Reach>],
    params: &mut Params,
) -> String {
    let mut conds = Vec::new();
    if let Some(bbox) = &query.bbox {
        let parts: Vec<String> = bbox
            .parts()
            .into_iter()
            .enumerate()
            .map(|(k, b)| {
                let reach = reaches.get(k).copied().flatten();
                let n = params.len() + 1;
                let (cond, covered) = sql::bbox_intersects(coll, n, bbox.srid, reach.is_some());
                params.extend(b.map(|v| Box::new(v) as Box<dyn ToSql + Sync + Send>));
                if covered {
                    params.push(Box::new(cover::covering_points(b)));
                }
                for v in reach
                    .map(|r| sql::bbox_reach_values(coll, &r))
                    .unwrap_or_default()
                {
                    params.push(Box::new(v));
                }
                cond
            })
            .collect();
        conds.push(format!("({})", parts.join(" OR ")));
    }
    if let (Some(datetime), Some(t)) = (&query.datetime, coll.time) {
        conds.push(sql::time_meets(coll, t, params.len() + 1));
        params.extend(
            datetime
                .bounds
                .map(|b| Box::new(b) as Box<dyn ToSql + Sync + Send>),
        );
    }
    for (ci, value) in &query.filters {
        conds.push(sql::column_equals(coll, *ci, params.len() + 1));
        params.push(Box::new(value.clone()));
    }
    if let Some(filter) = &query.filter {
        let (cond, values) = filter.sql(params.len() + 1);
        conds.push(cond);
        params.extend(values);
    }
    if conds.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conds.join(" AND "))
    }
}

/// A filter value that is not of its column's type is the client's mistake.
pub fn read_error(doing: &str, err: &tokio_postgres::Error) -> Error {
    match err.code() {
        Some(code) if code.code().starts_with("22") => Error::new(
            ErrorKind::InvalidParameter,
            format!(
                "a filter value does not fit its column: {}",
                err.as_db_error()
                    .map_or(String::new(), |e| e.message().to_owned())
            ),
        ),
        _ => Error::database(doing, err),
    }
}

/// One page of features matching `query`, with the total count, in one round trip.
pub async fn items(db: &Database, coll: &Collection, query: &ItemsQuery) -> Result<Page, Error> {
    let client = db.connection().await?;
    let mut reaches = Vec::new();
    if let Some((bbox, to)) = query
        .bbox
        .as_ref()
        .and_then(|b| Some((b, sql::bbox_reach_srid(coll, b.srid)?)))
    {
        for part in bbox.parts() {
            reaches.push(reach::reach_of(&client, db.naming(), part, bbox.srid, to).await);
        }
    }
    let mut params: Params = Vec::new();
    let filter = conditions(coll, query, &reaches, &mut params);
    let order = sql::order_by(coll, query.sortby.as_ref().map_or(&[][..], |(by, _)| by));
    let hidden: Vec<usize> = match &query.properties {
        Some((shown, _)) => sql::property_columns(coll)
            .filter(|ci| !shown.contains(ci))
            .collect(),
        None => Vec::new(),
    };
    let n = params.len();
    let select = format!(
        "{}{filter} ORDER BY {order} LIMIT ${}::int8 OFFSET ${}::int8",
        sql::select_features_but(
            coll,
            &query.crs,
            query.encoding,
            sql::Shown {
                hidden: &hidden,
                with_etags: query.with_etags,
            }
        ),
        n + 1,
        n + 2
    );
    let count = format!(
        "SELECT count(*) FROM {} AS t{filter}",
        coll.qualified_name()
    );
    let (select, count) = prepare_both(&client, (&select, &count), db.naming())
        .await
        .map_err(|e| read_error("preparing the items query", &e))?;
    let filter_params: Vec<&(dyn ToSql + Sync)> = params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let mut page_params = filter_params.clone();
    page_params.push(&query.limit);
    page_params.push(&query.offset);
    // Both queries are sent before either answer is read: one round trip.
    crate::db::round_trips::round_trip();
    let (rows, total) = tokio::try_join!(
        select.query(&client, &page_params),
        count.query_one(&client, &filter_params)
    )
    .map_err(|e| read_error("reading features", &e))?;
    Ok(Page {
        features: rows.into_iter().map(StoredFeature::from).collect(),
        number_matched: total.get(0),
    })
}

/// The feature with key `id` in `crs` as `encoding` has it, if there is one.
pub async fn item_as(
    db: &Database,
    coll: &Collection,
    id: &str,
    crs: &Crs,
    encoding: Encoding,
) -> Result<Option<StoredFeature>, Error> {
    let Some(sql) = sql::select_item(coll, crs, encoding) else {
        return Ok(None);
    };
    let client = db.connection().await?;
    let statement = prepare(&client, &sql, db.naming())
        .await
        .map_err(|e| Error::database("preparing the item query", &e))?;
    crate::db::round_trips::round_trip();
    match statement.query_opt(&client, &[&id]).await {
        Ok(row) => Ok(row.map(StoredFeature::from)),
        // An id that cannot be a key of this type names no feature.
        Err(e) if e.code().is_some_and(|c| c.code().starts_with("22")) => Ok(None),
        Err(e) => Err(Error::database("reading a feature", &e)),
    }
}

/// The feature with key `id` as `rendering` has it, as the transaction open
/// on `client` sees it: an unnamed statement, sent whole when first polled,
/// so that it keeps its place in a pipelined flight.
pub async fn item_in(
    client: &tokio_postgres::Client,
    coll: &Collection,
    id: &str,
    rendering: &Rendering,
) -> Result<Option<StoredFeature>, tokio_postgres::Error> {
    let Some(sql) = sql::select_item(coll, &rendering.crs, rendering.encoding) else {
        return Ok(None);
    };
    let rows = client
        .query_typed(&sql, &[(&id, tokio_postgres::types::Type::TEXT)])
        .await?;
    Ok(rows.into_iter().next().map(StoredFeature::from))
}

/// The collection's extent in CRS84 (min lon, min lat, max lon, max lat), if
/// it has features, computed rather than estimated when `exact`
/// ([`sql::extent`]); [`extent::ExtentCache`] keeps it.
pub async fn extent(
    db: &Database,
    coll: &Collection,
    exact: bool,
) -> Result<Option<[f64; 4]>, Error> {
    let client = db.connection().await?;
    let sql = sql::extent(coll, exact);
    let names = [&coll.schema, &coll.table, &coll.columns[coll.geometry].name];
    let params: Vec<&(dyn ToSql + Sync)> = if coll.geometry_column().geography {
        Vec::new()
    } else {
        names.iter().map(|n| *n as &(dyn ToSql + Sync)).collect()
    };
    let statement = prepare(&client, &sql, db.naming())
        .await
        .map_err(|e| Error::database("preparing the extent query", &e))?;
    crate::db::round_trips::round_trip();
    let row = statement
        .query_one(&client, &params)
        .await
        .map_err(|e| Error::database("computing the extent", &e))?;
    let b: [Option<f64>; 4] = [row.get(0), row.get(1), row.get(2), row.get(3)];
    Ok(match b {
        [Some(a), Some(b), Some(c), Some(d)] => Some([a, b, c, d]),
        _ => None,
    })
}
