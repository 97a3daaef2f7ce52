//! The capture side of a collection's change feed: the triggers that log
//! every change to its table into `featurepipe.changes` (migration 7),
//! installed when the catalog is read for collections with `changes = true`.
//!
//! Installing is idempotent and versioned: what is installed is checked
//! first (the trigger function's comment names its version and key), and
//! only what is missing or outdated is made again. Each time the triggers
//! are created, the feed's epoch goes up: changes may have been made
//! without them, so cursors of an earlier epoch are refused (410).

use std::sync::Arc;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use super::{Catalog, Collection};
use crate::db::said::said;
use crate::db::{quote_ident, StartupError};

/// A collection's change feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeFeed {
    /// Not asked for: no `changes = true`.
    Off,
    /// Installed: changes to the table are logged under its oid.
    On {
        /// The table's oid (`featurepipe.changes.relid`).
        relid: u32,
    },
    /// Asked for, but not installed; why, and what to run (for the log).
    NotInstalled(String),
}

/// The channel the triggers notify, with the table's oid as the payload.
pub const CHANNEL: &str = "featurepipe_changes";

/// The triggers that log each statement's changed keys, by event, with
/// the transition tables each names.
const STATEMENT_TRIGGERS: [(&str, &str, &str); 3] = [
    (
        "featurepipe_changes_insert",
        "INSERT",
        "REFERENCING NEW TABLE AS new_rows",
    ),
    (
        "featurepipe_changes_update",
        "UPDATE",
        "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows",
    ),
    (
        "featurepipe_changes_delete",
        "DELETE",
        "REFERENCING OLD TABLE AS old_rows",
    ),
];
/// The trigger that starts a new epoch when the table is truncated.
const TRUNCATE_TRIGGER: &str = "featurepipe_changes_truncate";
/// The row trigger of version 1, dropped when version 2 is installed.
const OLD_ROW_TRIGGER: &str = "featurepipe_changes";

/// The version of what is installed; a new one is installed over the old.
const VERSION: u32 = 2;

/// Most keys in one log entry: a page reads only the entries it needs,
/// and an entry is read whole.
const KEYS_PER_ENTRY: u32 = 1000;

/// How long installing waits for a table's writers (`CREATE TRIGGER` waits
/// for every transaction that wrote it to end): a table busy longer is
/// tried again at the next poll, rather than keep the catalog waiting.
const LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '2s'";

/// What came of installing the change feeds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Installing {
    /// Something was made: the tables' fingerprint is another now.
    pub made: bool,
    /// A table was busy: try again soon, although nothing else changes.
    pub again: bool,
}

/// Why a feed was not installed.
enum Unmade {
    /// The role may not; what to run, and as whom.
    Refused(String),
    /// The table's writers held it longer than [`LOCK_TIMEOUT`].
    Busy(String),
}

/// What is installed for one table, as the database says.
const STATUS: &str = "
SELECT c.oid::int8 AS relid,
       pg_get_userbyid(c.relowner)::text AS table_owner,
       (SELECT pg_get_userbyid(n.nspowner)::text FROM pg_namespace n
         WHERE n.nspname = 'featurepipe') AS schema_owner,
       current_user::text AS role,
       -- What the trigger functions, which run as their owner (this role),
       -- and the installing need of the log.
       has_table_privilege('featurepipe.changes', 'INSERT')
         AND has_table_privilege('featurepipe.change_feeds', 'SELECT, INSERT, UPDATE')
         AS log_writable,
       (SELECT pg_get_userbyid(l.relowner)::text FROM pg_class l
         WHERE l.oid = 'featurepipe.changes'::regclass) AS log_owner,
       obj_description(f.oid, 'pg_proc') AS function_comment,
       -- A write straight into a partition fires only the partition's
       -- statement triggers: each has its own.
       -- Foreign tables take no transition tables: a write straight into
       -- one is not logged (docs/offline-sync.md, Limitations).
       ARRAY(SELECT format('%I.%I', pn.nspname, pc.relname)
               FROM pg_partition_tree(c.oid) AS pt
               JOIN pg_class pc ON pc.oid = pt.relid
               JOIN pg_namespace pn ON pn.oid = pc.relnamespace
              WHERE pt.relid <> c.oid AND pc.relkind <> 'f'
              ORDER BY pt.level, pc.relname) AS partitions,
       -- Every trigger, on the table and each partition, fires for ordinary
       -- writes (enabled: O or A; one enabled for replicas only does not).
       -- (IS NOT DISTINCT FROM: an absent transition table is NULL, and
       -- NULL = NULL would count no trigger that has one.)
       NOT EXISTS (
           SELECT FROM (SELECT c.oid AS relid
                        UNION SELECT pt.relid FROM pg_partition_tree(c.oid) AS pt
                                JOIN pg_class pc ON pc.oid = pt.relid AND pc.relkind <> 'f') AS r
            WHERE (SELECT count(*) FROM pg_trigger t
                     JOIN (VALUES ('featurepipe_changes_insert', 4, NULL, 'new_rows'),
                                  ('featurepipe_changes_update', 16, 'old_rows', 'new_rows'),
                                  ('featurepipe_changes_delete', 8, 'old_rows', NULL),
                                  ('featurepipe_changes_truncate', 32, NULL, NULL))
                          AS w(name, type, old, new)
                       ON t.tgname = w.name AND t.tgtype = w.type
                      AND t.tgoldtable IS NOT DISTINCT FROM w.old
                      AND t.tgnewtable IS NOT DISTINCT FROM w.new
                    WHERE t.tgrelid = r.relid AND t.tgfoid = f.oid
                      AND t.tgenabled IN ('O', 'A')) <> 4)
       AND EXISTS (SELECT FROM featurepipe.change_feeds r WHERE r.relid = c.oid)
         AS triggers
  FROM pg_class c
  LEFT JOIN pg_proc f
    ON f.oid = to_regprocedure(format('featurepipe.%I()', 'changes_' || c.oid))
 WHERE c.oid = $1::text::regclass";

/// The trigger function of the table with oid `relid`, keyed by `key`.
fn function_name(relid: u32) -> String {
    format!("featurepipe.{}", quote_ident(&format!("changes_{relid}")))
}

/// The comment that says which version of the function is installed, for
/// which key and key type (the settings it fixes depend on the type).
fn function_comment(key: &str, key_type: &str) -> String {
    format!("featurepipe change feed v{VERSION}, key {key} {key_type}")
}

/// The settings a key of type `key_type` is written as text in, that any
/// session reads back as the same value: none for the types whose text
/// depends on no setting (the most common keys, and the cheapest, since
/// each setting costs a trigger call a save and a restore).
fn key_settings(key_type: &str) -> &'static str {
    match key_type {
        "smallint" | "integer" | "bigint" | "text" | "character varying" | "character"
        | "bpchar" | "uuid" | "numeric" | "boolean" => "",
        _ => {
            "SET DateStyle = 'ISO, YMD' SET TimeZone = 'UTC' SET IntervalStyle = 'postgres' \
             SET extra_float_digits = 3 SET bytea_output = 'hex' SET lc_monetary = 'C'"
        }
    }
}

/// The trigger function of every trigger of the feed of table `relid`
/// keyed by column `key`, on the table and on each of its partitions.
///
/// After each statement it logs the keys the statement changed, in one
/// `INSERT ... SELECT` from the transition tables: the new keys of an
/// INSERT, the old of a DELETE, the old and new of an UPDATE (both, when
/// it changed a key); then a notification (one per transaction: PostgreSQL
/// folds equal ones). A TRUNCATE starts a new epoch instead.
///
/// - SECURITY DEFINER: whoever writes the table logs, and nobody can write
///   the log directly. EXECUTE is the owner's alone (CREATE TRIGGER needs
///   it), and the function refuses to log for any other table.
/// - The keys are written as text in fixed settings, not the writer's, so
///   that the reader casts them back to the same values: a date in
///   `DateStyle = 'SQL, DMY'`, or a `timestamptz` in another TimeZone,
///   read otherwise.
fn function_sql(relid: u32, key: &str, key_type: &str) -> String {
    let k = quote_ident(key);
    // One array of the statement's keys, cut into entries: a plan cheap
    // enough that a statement of one row costs less than a row trigger did.
    let keys_of = |rows: &str| {
        format!(
            "INSERT INTO featurepipe.changes (relid, keys)
        SELECT {relid}, a.keys[s:s + {last}]
          FROM (SELECT ARRAY({rows}) AS keys) AS a,
               generate_series(1, cardinality(a.keys), {KEYS_PER_ENTRY}) AS s;",
            last = KEYS_PER_ENTRY - 1
        )
    };
    let body = format!(
        "BEGIN
    -- Only the feed's own table and its partitions are logged. Another
    -- table (a partition since detached, which keeps its triggers) is
    -- written as usual and logs nothing.
    IF TG_RELID <> {relid}
       AND NOT EXISTS (SELECT FROM pg_partition_ancestors(TG_RELID) AS a WHERE a.relid = {relid}::oid) THEN
        RAISE WARNING 'featurepipe: the change feed of % logs only its own table, not %',
            {relid}::oid::regclass, TG_RELID::regclass;
        RETURN NULL;
    END IF;
    IF TG_OP = 'TRUNCATE' THEN
        UPDATE featurepipe.change_feeds SET epoch = epoch + 1 WHERE relid = {relid};
    ELSIF TG_OP = 'INSERT' THEN
        {insert}
    ELSIF TG_OP = 'DELETE' THEN
        {delete}
    ELSE
        {update}
    END IF;
    IF TG_OP = 'TRUNCATE' OR FOUND THEN
        PERFORM pg_notify('{CHANNEL}', '{relid}');
    END IF;
    RETURN NULL;
END",
        insert = keys_of(&format!("SELECT n.{k}::text FROM new_rows AS n")),
        delete = keys_of(&format!("SELECT o.{k}::text FROM old_rows AS o")),
        update = keys_of(&format!(
            "SELECT o.{k}::text FROM old_rows AS o UNION SELECT n.{k}::text FROM new_rows AS n"
        )),
    );
    // A dollar quote that the body (a column name, at worst) does not contain.
    let quote = (0..)
        .map(|n| format!("$featurepipe{n}$"))
        .find(|q| !body.contains(q.as_str()))
        .expect("some quote is free");
    format!(
        "CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql \
         SECURITY DEFINER SET search_path = pg_catalog, pg_temp {settings} \
         AS {quote}{body}{quote};
         REVOKE EXECUTE ON FUNCTION {name}() FROM PUBLIC;
         COMMENT ON FUNCTION {name}() IS {comment}",
        name = function_name(relid),
        settings = key_settings(key_type),
        comment = quote_literal(&function_comment(key, key_type)),
    )
}

/// The triggers on `table` and its `partitions` (new: a new epoch of its
/// feed begins). The table's first: dropping its row trigger of version 1
/// drops the partitions' clones of it.
fn triggers_sql(relid: u32, table: &str, partitions: &[String]) -> String {
    let function = function_name(relid);
    let mut sql = String::new();
    for rel in std::iter::once(table).chain(partitions.iter().map(String::as_str)) {
        let names = STATEMENT_TRIGGERS.iter().map(|(name, _, _)| *name);
        for name in names.chain([TRUNCATE_TRIGGER, OLD_ROW_TRIGGER]) {
            sql += &format!("DROP TRIGGER IF EXISTS {name} ON {rel};\n");
        }
        for (name, event, transitions) in STATEMENT_TRIGGERS {
            sql += &format!(
                "CREATE TRIGGER {name} AFTER {event} ON {rel} {transitions} \
                 FOR EACH STATEMENT EXECUTE FUNCTION {function}();\n"
            );
        }
        sql += &format!(
            "CREATE TRIGGER {TRUNCATE_TRIGGER} AFTER TRUNCATE ON {rel} \
             FOR EACH STATEMENT EXECUTE FUNCTION {function}();\n"
        );
    }
    sql += &format!(
        "INSERT INTO featurepipe.change_feeds (relid) VALUES ({relid})
             ON CONFLICT (relid) DO UPDATE SET epoch = change_feeds.epoch + 1"
    );
    sql
}

/// A string literal of `text`.
fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// What [`status`] read.
struct Status {
    relid: u32,
    table_owner: String,
    schema_owner: String,
    role: String,
    log_writable: bool,
    log_owner: String,
    function_current: bool,
    /// The table's partitions, schema-qualified and quoted.
    partitions: Vec<String>,
    triggers: bool,
}

/// What is installed for the feed of `coll`, keyed by the column `key`
/// (its name and type).
async fn status(
    client: &impl GenericClient,
    coll: &Collection,
    (key, key_type): (&str, &str),
) -> Result<Status, tokio_postgres::Error> {
    let row = client
        .query_typed_one(STATUS, &[(&coll.qualified_name(), Type::TEXT)])
        .await?;
    let comment: Option<String> = row.get("function_comment");
    Ok(Status {
        relid: u32::try_from(row.get::<_, i64>("relid")).expect("an oid is 32 bits"),
        table_owner: row.get("table_owner"),
        schema_owner: row
            .get::<_, Option<String>>("schema_owner")
            .unwrap_or_default(),
        role: row.get("role"),
        log_writable: row.get("log_writable"),
        log_owner: row.get("log_owner"),
        function_current: comment.as_deref() == Some(function_comment(key, key_type).as_str()),
        partitions: row.get("partitions"),
        triggers: row.get("triggers"),
    })
}

impl Catalog {
    /// Install what the change feeds of the collections with `changes =
    /// true` need and is not there yet; say for each whether it is on.
    /// A feed the service's role may not install is logged with the
    /// statement that lets it, and left off; the other collections are
    /// served as usual; so is one whose table was busy, tried again soon.
    pub async fn install_feeds(
        &mut self,
        client: &impl GenericClient,
    ) -> Result<Installing, StartupError> {
        let failed = |source| StartupError::Query {
            doing: "installing a change feed",
            source,
        };
        let mut installing = Installing::default();
        for coll in self.collections.values_mut() {
            if coll.changes == ChangeFeed::Off {
                continue;
            }
            let Some(pk) = coll.primary_key else {
                let why =
                    "its primary key has several columns; a change feed logs a single-column key";
                tracing::error!(collection = %coll.id, "change feed not installed: {why}");
                Arc::make_mut(coll).changes = ChangeFeed::NotInstalled(why.into());
                continue;
            };
            let column = &coll.columns[pk];
            let key = (column.name.clone(), column.exact_type_sql.clone());
            let key = (key.0.as_str(), key.1.as_str());
            let found = status(client, coll, key).await.map_err(failed)?;
            let relid = found.relid;
            let feed = if found.function_current && found.triggers {
                ChangeFeed::On { relid }
            } else {
                match install(client, coll, key, &found).await.map_err(failed)? {
                    Ok(()) => {
                        installing.made = true;
                        ChangeFeed::On { relid }
                    }
                    Err(Unmade::Refused(why)) => {
                        tracing::error!(collection = %coll.id, "{why}");
                        ChangeFeed::NotInstalled(why)
                    }
                    Err(Unmade::Busy(why)) => {
                        tracing::warn!(collection = %coll.id, "{why}");
                        installing.again = true;
                        ChangeFeed::NotInstalled(why)
                    }
                }
            };
            if feed != coll.changes {
                Arc::make_mut(coll).changes = feed;
            }
        }
        Ok(installing)
    }
}

/// Make what `found` lacks, under a savepoint; why not when the service's
/// role may not, or the table is busy (nothing is then left half-made).
async fn install(
    client: &impl GenericClient,
    coll: &Collection,
    (key, key_type): (&str, &str),
    found: &Status,
) -> Result<Result<(), Unmade>, tokio_postgres::Error> {
    let table = coll.qualified_name();
    let role = quote_ident(&found.role);
    if !found.log_writable {
        // Else the trigger would be made, and fail every write to the table.
        let grant = format!(
            "GRANT INSERT ON featurepipe.changes TO {role}; \
             GRANT SELECT, INSERT, UPDATE ON featurepipe.change_feeds TO {role}"
        );
        return Ok(Err(Unmade::Refused(not_installed(
            coll,
            found,
            "write the change log",
            &found.log_owner,
            &grant,
        ))));
    }
    let function = (
        function_sql(found.relid, key, key_type),
        "create its trigger function in the schema featurepipe",
        format!("GRANT CREATE ON SCHEMA featurepipe TO {role}"),
        &found.schema_owner,
    );
    // New triggers with a new function too: a function replaced for a
    // renamed key failed every write since, and logged nothing.
    let triggers = (
        triggers_sql(found.relid, &table, &found.partitions),
        "create triggers on the table",
        format!(
            "GRANT TRIGGER ON {} TO {role}",
            std::iter::once(&table)
                .chain(&found.partitions)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        &found.table_owner,
    );
    let steps = (!found.function_current).then_some(function);
    client
        .batch_execute(&format!("SAVEPOINT featurepipe_feed; {LOCK_TIMEOUT}"))
        .await?;
    for (sql, what, grant, owner) in steps.into_iter().chain([triggers]) {
        let unmade = match client.batch_execute(&sql).await {
            Ok(()) => continue,
            Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
                let message = e.as_db_error().map_or("", |d| d.message());
                let what = format!("{what} ({message})");
                Unmade::Refused(not_installed(coll, found, &what, owner, &grant))
            }
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => Unmade::Busy(format!(
                "the change feed of '{}' is not installed yet: its table's writers held it \
                 (a transaction open on it); tried again at the next poll of the catalog",
                coll.id
            )),
            // Whatever else the database says (on Citus: a trigger on a
            // distributed table), the feed is declined, the rest served.
            Err(e) if e.as_db_error().is_some() => Unmade::Refused(format!(
                "the change feed of '{}' is not installed: the database refused to {what}: {}; \
                 its /changes answers 503 until it is",
                coll.id,
                said(&e)
            )),
            Err(e) => return Err(e),
        };
        client
            .batch_execute("ROLLBACK TO SAVEPOINT featurepipe_feed")
            .await?;
        return Ok(Err(unmade));
    }
    client
        .batch_execute("RELEASE SAVEPOINT featurepipe_feed")
        .await?;
    tracing::info!(collection = %coll.id, "change feed installed");
    Ok(Ok(()))
}

/// Why the feed of `coll` is not installed: the role may not do `what`;
/// `grant`, run as `owner`, lets it.
fn not_installed(
    coll: &Collection,
    found: &Status,
    what: &str,
    owner: &str,
    grant: &str,
) -> String {
    format!(
        "the change feed of '{}' is not installed: the database role '{}' may not {what}. \
         As '{owner}', run: {grant}; the feed is installed when the catalog is read again \
         (at once after a GRANT on the table; else send NOTIFY featurepipe_reload or SIGHUP)",
        coll.id, found.role
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_function_body_is_quoted_past_any_column_name() {
        let sql = function_sql(42, "odd$featurepipe0$name", "integer");
        assert!(sql.contains("AS $featurepipe1$BEGIN"), "{sql}");
        assert!(sql.contains("n.\"odd$featurepipe0$name\"::text"), "{sql}");
        assert!(sql.contains("'featurepipe change feed v2, key odd$featurepipe0$name integer'"));
        assert!(!sql.contains("DateStyle"), "{sql}");
        let dated = function_sql(42, "day", "date");
        assert!(
            dated.contains("SET DateStyle = 'ISO, YMD' SET TimeZone = 'UTC'"),
            "{dated}"
        );
        assert!(sql.contains("REVOKE EXECUTE ON FUNCTION featurepipe.\"changes_42\"() FROM PUBLIC"));
    }
}
