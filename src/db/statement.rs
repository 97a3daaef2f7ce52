//! Statements as the connection takes them: prepared once per connection
//! (named, cached), or, behind a transaction-mode pooler such as PgBouncer,
//! sent unnamed with every execution. A pooler of that kind hands each
//! transaction whichever server connection is free, where a statement named
//! on another would not exist; an unnamed statement lives only as long as
//! its own execution, and costs no extra round trip.

use std::sync::Arc;

use deadpool_postgres::ClientWrapper;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Error, Row, Statement};

/// A statement ready to execute on one connection.
#[derive(Debug, Clone)]
pub enum Stmt {
    /// Prepared on the connection.
    Named(Statement),
    /// Its text and parameter types, sent with each execution.
    Unnamed(Arc<str>, Arc<[Type]>),
}

/// How statements are prepared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// Prepared and cached on the connection (`prepare_cached`).
    Cached,
    /// Prepared for this use only (past the cache's limit).
    Once,
    /// Never prepared: sent unnamed (transaction-mode poolers).
    Unnamed,
}

impl Naming {
    /// The naming of the `n`th new statement of a request when the
    /// connection's cache has `room` left: beyond it, statements are prepared
    /// for one use, so that the cache (here and in the server) stays bounded.
    pub fn within(self, room: usize, n: usize) -> Naming {
        match self {
            Naming::Cached if n >= room => Naming::Once,
            other => other,
        }
    }
}

/// Prepared statements kept per connection; further ones live for one request.
pub const STATEMENT_CACHE_LIMIT: usize = 64;

/// How many more statements the connection's cache may keep
/// ([`STATEMENT_CACHE_LIMIT`] in all).
pub fn cache_room(client: &ClientWrapper) -> usize {
    STATEMENT_CACHE_LIMIT.saturating_sub(client.statement_cache.size())
}

/// Get `sql` ready on `client`: a round trip unless it is cached or unnamed.
pub async fn prepare(client: &ClientWrapper, sql: &str, naming: Naming) -> Result<Stmt, Error> {
    let before = client.statement_cache.size();
    // The per-connection cache stays bounded here too (reads and single
    // features whose filters or property sets vary).
    let naming = naming.within(cache_room(client), 0);
    let statement = prepare_in_flight(client, sql, naming).await?;
    count_preparing(client, before, naming);
    Ok(statement)
}

/// Two statements got ready in one flight.
pub async fn prepare_both(
    client: &ClientWrapper,
    (first, second): (&str, &str),
    naming: Naming,
) -> Result<(Stmt, Stmt), Error> {
    let before = client.statement_cache.size();
    let naming = naming.within(cache_room(client), 1);
    let both = tokio::try_join!(
        prepare_in_flight(client, first, naming),
        prepare_in_flight(client, second, naming)
    )?;
    count_preparing(client, before, naming);
    Ok(both)
}

/// Preparing cost a round trip when a statement was new to the connection.
fn count_preparing(client: &ClientWrapper, cached_before: usize, naming: Naming) {
    if naming == Naming::Once || client.statement_cache.size() > cached_before {
        super::round_trips::round_trip();
    }
}

/// [`prepare`], as one call of a pipelined flight (which counts its round trip).
pub async fn prepare_in_flight(
    client: &ClientWrapper,
    sql: &str,
    naming: Naming,
) -> Result<Stmt, Error> {
    match naming {
        Naming::Unnamed => Ok(Stmt::Unnamed(sql.into(), param_types(sql).into())),
        named => prepare_named(client, sql, named).await.map(Stmt::Named),
    }
}

/// A statement prepared on the connection, as COPY needs one: cached, or
/// (`Once`, and `Unnamed`, which COPY is never run with) for this use only.
pub async fn prepare_named(
    client: &ClientWrapper,
    sql: &str,
    naming: Naming,
) -> Result<Statement, Error> {
    match naming {
        Naming::Cached => client.prepare_cached(sql).await,
        Naming::Once | Naming::Unnamed => client.prepare(sql).await,
    }
}

impl Stmt {
    /// Every row it answers (one round trip, unless pipelined with others).
    pub async fn query(
        &self,
        client: &Client,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error> {
        match self {
            Stmt::Named(statement) => client.query(statement, params).await,
            Stmt::Unnamed(sql, types) => client.query_typed(sql, &typed(params, types)).await,
        }
    }

    /// The one row it answers, or none (more is an error).
    pub async fn query_opt(
        &self,
        client: &Client,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error> {
        match self {
            Stmt::Named(statement) => client.query_opt(statement, params).await,
            Stmt::Unnamed(sql, types) => client.query_typed_opt(sql, &typed(params, types)).await,
        }
    }

    /// Run it for its effect.
    pub async fn execute(
        &self,
        client: &Client,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<(), Error> {
        match self {
            Stmt::Named(statement) => client.execute(statement, params).await.map(drop),
            Stmt::Unnamed(sql, types) => client
                .query_typed(sql, &typed(params, types))
                .await
                .map(drop),
        }
    }

    /// The one row it answers (none or more is an error).
    pub async fn query_one(
        &self,
        client: &Client,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Error> {
        match self {
            Stmt::Named(statement) => client.query_one(statement, params).await,
            Stmt::Unnamed(sql, types) => client.query_typed_one(sql, &typed(params, types)).await,
        }
    }
}

/// Parameters with their types (unknown ones as `text`, which the casts of
/// our SQL never leave).
fn typed<'a>(
    params: &[&'a (dyn ToSql + Sync)],
    types: &[Type],
) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params
        .iter()
        .enumerate()
        .map(|(i, p)| (*p, types.get(i).cloned().unwrap_or(Type::TEXT)))
        .collect()
}

/// The type of each parameter `$n`, from the first cast written after it
/// (`$3::int4`, `$2::text[]`): every parameter of featurepipe's SQL has one,
/// so an unnamed statement needs no round trip to learn them.
pub fn param_types(sql: &str) -> Vec<Type> {
    let mut types: Vec<Option<Type>> = Vec::new();
    let bytes = sql.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'$' {
            i += 1;
            continue;
        }
        let digits = bytes[i + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let Ok(n) = sql[i + 1..i + 1 + digits].parse::<usize>() else {
            i += 1;
            continue;
        };
        i += 1 + digits;
        let Some(rest) = sql[i..].strip_prefix("::") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '[' || *c == ']')
            .collect();
        if types.len() < n {
            types.resize(n, None);
        }
        if types[n - 1].is_none() {
            types[n - 1] = type_named(&name);
        }
    }
    types.into_iter().map(|t| t.unwrap_or(Type::TEXT)).collect()
}

/// The type a cast names (the types featurepipe binds).
fn type_named(name: &str) -> Option<Type> {
    Some(match name {
        "bool" | "boolean" => Type::BOOL,
        "int2" | "smallint" => Type::INT2,
        "int4" | "integer" => Type::INT4,
        "int8" | "bigint" => Type::INT8,
        "float4" | "real" => Type::FLOAT4,
        "float8" => Type::FLOAT8,
        "text" => Type::TEXT,
        "bytea" => Type::BYTEA,
        "uuid" => Type::UUID,
        "date" => Type::DATE,
        "timestamp" => Type::TIMESTAMP,
        "timestamptz" => Type::TIMESTAMPTZ,
        "json" => Type::JSON,
        "jsonb" => Type::JSONB,
        "bool[]" => Type::BOOL_ARRAY,
        "int2[]" => Type::INT2_ARRAY,
        "int4[]" => Type::INT4_ARRAY,
        "int8[]" => Type::INT8_ARRAY,
        "float4[]" => Type::FLOAT4_ARRAY,
        "float8[]" => Type::FLOAT8_ARRAY,
        "text[]" => Type::TEXT_ARRAY,
        "bytea[]" => Type::BYTEA_ARRAY,
        "uuid[]" => Type::UUID_ARRAY,
        "date[]" => Type::DATE_ARRAY,
        "timestamp[]" => Type::TIMESTAMP_ARRAY,
        "timestamptz[]" => Type::TIMESTAMPTZ_ARRAY,
        "json[]" => Type::JSON_ARRAY,
        "jsonb[]" => Type::JSONB_ARRAY,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_types_come_from_the_first_cast() {
        let sql = "SELECT $2::text[], $1::int4, $3::timestamptz IS NULL OR x <= $3, \
                   $4::text::numeric, ST_GeomFromEWKB($5::bytea), $6::jsonb, $10::int8";
        let types = param_types(sql);
        assert_eq!(
            types[..6],
            [
                Type::INT4,
                Type::TEXT_ARRAY,
                Type::TIMESTAMPTZ,
                Type::TEXT,
                Type::BYTEA,
                Type::JSONB
            ]
        );
        assert_eq!(types.len(), 10);
        assert_eq!(types[9], Type::INT8);
        assert_eq!(param_types("SELECT 1"), []);
    }
}
