//! The service's own schema, `featurepipe`, versioned by the files in `migrations/`.

use tokio_postgres::types::Type;
use tokio_postgres::{Client, IsolationLevel, Transaction};

use super::StartupError;

/// Migrations in order: (version, name, SQL). Applied ones are never edited.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "featurepipe_schema",
        include_str!("../../migrations/0001_featurepipe_schema.sql"),
    ),
    (
        2,
        "fail_function",
        include_str!("../../migrations/0002_fail_function.sql"),
    ),
    (
        3,
        "idempotency",
        include_str!("../../migrations/0003_idempotency.sql"),
    ),
    (
        4,
        "idempotency_headers",
        include_str!("../../migrations/0004_idempotency_headers.sql"),
    ),
    (
        5,
        "idempotency_functions",
        include_str!("../../migrations/0005_idempotency_functions.sql"),
    ),
    (
        6,
        "idempotency_privileges",
        include_str!("../../migrations/0006_idempotency_privileges.sql"),
    ),
    (
        7,
        "changes",
        include_str!("../../migrations/0007_changes.sql"),
    ),
    (
        8,
        "copy_checks",
        include_str!("../../migrations/0008_copy_checks.sql"),
    ),
    (
        9,
        "feed_statements",
        include_str!("../../migrations/0009_feed_statements.sql"),
    ),
];

/// The idempotency functions the service runs as its own role.
const BOOKKEEPING: [&str; 4] = [
    "featurepipe.idempotency_expire(float8)",
    "featurepipe.idempotency_claim(text, text)",
    "featurepipe.idempotency_store(text, int4, bytea, text, jsonb)",
    "featurepipe.idempotency_lookup(text, float8)",
];

/// Refuse to start when the service's login may not run the idempotency
/// functions (a service logging in as another role than the one that ran
/// the migrations): said at start-up, with the GRANT that fixes it, rather
/// than as a 403 on the first keyed write.
pub async fn check_bookkeeping_rights(client: &Client) -> Result<(), StartupError> {
    // One unnamed statement: behind a transaction-mode pooler, a named one
    // and its execution could reach different server connections.
    let rows = client
        .query_typed(
            "SELECT session_user::text, f FROM unnest($1::text[]) AS f \
              WHERE NOT has_function_privilege(session_user, f, 'EXECUTE')",
            &[(&BOOKKEEPING.as_slice(), Type::TEXT_ARRAY)],
        )
        .await
        .map_err(query_error(
            "checking the rights on the idempotency functions",
        ))?;
    let Some(first) = rows.first() else {
        return Ok(());
    };
    let functions: Vec<&str> = rows.iter().map(|r| r.get(1)).collect();
    Err(StartupError::Bookkeeping {
        role: first.get(0),
        functions: functions.join(", "),
    })
}

/// Arbitrary constant: replicas starting together take turns on this lock.
const LOCK_KEY: i64 = 0x6665_6174_7572_6570; // "featurep"

fn query_error(doing: &'static str) -> impl Fn(tokio_postgres::Error) -> StartupError {
    move |source| StartupError::Query { doing, source }
}

/// Apply pending migrations, all in one transaction under a
/// transaction-scoped advisory lock: replicas starting together take turns,
/// a failed migration leaves nothing half-applied, and (unlike a session
/// lock) it works behind a transaction-mode pooler. Returns the versions
/// applied now.
pub async fn run(client: &mut Client) -> Result<Vec<i32>, StartupError> {
    // Read committed whatever the database's default: a replica that waited
    // for the lock must see the migrations the other one just committed.
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::ReadCommitted)
        .start()
        .await
        .map_err(query_error("starting the migrations"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1::int8)", &[&LOCK_KEY])
        .await
        .map_err(query_error("taking the migration lock"))?;
    let applied = apply_pending(&tx).await?;
    tx.commit()
        .await
        .map_err(query_error("committing the migrations"))?;
    for &(version, name, _) in MIGRATIONS.iter().filter(|m| applied.contains(&m.0)) {
        tracing::info!(version, name, "applied migration");
    }
    Ok(applied)
}

async fn apply_pending(tx: &Transaction<'_>) -> Result<Vec<i32>, StartupError> {
    tx.batch_execute(
        "CREATE SCHEMA IF NOT EXISTS featurepipe;
             CREATE TABLE IF NOT EXISTS featurepipe.schema_migrations (
                 version    integer PRIMARY KEY,
                 name       text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now()
             );",
    )
    .await
    .map_err(query_error("creating the migrations table"))?;
    let applied: Vec<i32> = tx
        .query("SELECT version FROM featurepipe.schema_migrations", &[])
        .await
        .map_err(query_error("reading applied migrations"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut now_applied = Vec::new();
    for &(version, name, sql) in MIGRATIONS {
        if applied.contains(&version) {
            continue;
        }
        tx.batch_execute(sql)
            .await
            .map_err(query_error("applying a migration"))?;
        tx.execute(
            "INSERT INTO featurepipe.schema_migrations (version, name) VALUES ($1::int4, $2::text)",
            &[&version, &name],
        )
        .await
        .map_err(query_error("recording a migration"))?;
        now_applied.push(version);
    }
    Ok(now_applied)
}
