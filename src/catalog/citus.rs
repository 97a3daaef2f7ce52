//! Tables Citus distributes (or replicates as reference tables): their rows
//! live on the workers, so what one server's COPY check reads (the
//! coordinator's row counters, the transaction's `xmin`) says nothing of
//! them.

use std::collections::HashSet;

use tokio_postgres::GenericClient;

/// What changes when Citus distributes a table, or stops: for the catalog's
/// fingerprint, where the `citus` extension is installed.
pub async fn fingerprint(client: &impl GenericClient) -> Result<String, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT ' citus ' || coalesce(string_agg(logicalrelid::oid::text, ',' ORDER BY logicalrelid), '') \
             FROM pg_catalog.pg_dist_partition",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// `(schema, table)` of every table in Citus's metadata, none without Citus.
pub async fn distributed_tables(
    client: &impl GenericClient,
) -> Result<HashSet<(String, String)>, tokio_postgres::Error> {
    // The metadata table exists only where the extension is installed.
    let citus = client
        .query_one(
            "SELECT to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL",
            &[],
        )
        .await?;
    if !citus.get::<_, bool>(0) {
        return Ok(HashSet::new());
    }
    let rows = client
        .query(
            "SELECT n.nspname::text, c.relname::text FROM pg_catalog.pg_dist_partition p \
             JOIN pg_class c ON c.oid = p.logicalrelid JOIN pg_namespace n ON n.oid = c.relnamespace",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
