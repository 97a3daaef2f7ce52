//! Database errors → their class and a feature-level report entry.

use tokio_postgres::error::SqlState;

use crate::catalog::Collection;
use crate::error::{FieldError, Refusal};
use crate::feature::escape_pointer;

fn code_name(code: &SqlState) -> &'static str {
    match code.code() {
        "23505" => "unique_violation",
        "23503" => "foreign_key_violation",
        "23502" => "not_null_violation",
        "23514" => "check_violation",
        "23P01" => "exclusion_violation",
        "P0001" => "raised_exception",
        "P0002" => "not_found",
        "21000" => "more_than_one_feature",
        "FP412" => "precondition_failed",
        "FP422" => "skipped_by_trigger",
        "40P01" => "deadlock_detected",
        "40001" => "serialization_failure",
        c if c.starts_with("22") => "data_exception",
        _ => "database_error",
    }
}

/// PostGIS could not transform a written geometry into the column's CRS: the
/// coordinates are outside what the input CRS describes (a client mistake).
fn untransformable(db: &tokio_postgres::error::DbError) -> bool {
    db.code().code() == "XX000" && db.message().starts_with("transform:")
}

/// Whether the error's DETAIL is the failing row ("Failing row contains
/// (…)": every column, secrets and geometry included). It is never told: the
/// pointer, the constraint and the column already say what is wrong. NOT
/// NULL, CHECK, partition and view CHECK OPTION violations carry it; the
/// text is checked too, for any other error that quotes the row (in English).
fn quotes_the_row(db: &tokio_postgres::error::DbError) -> bool {
    matches!(db.code().code(), "23502" | "23514" | "44000")
        || db
            .detail()
            .is_some_and(|d| d.starts_with("Failing row contains"))
}

/// Describe the failure of feature `feature` (pointer prefix `at`) as reported by the
/// database; a column of `coll` named by the database extends the pointer.
pub fn feature_error(
    coll: Option<&Collection>,
    feature: Option<usize>,
    at: &str,
    err: &tokio_postgres::Error,
) -> (Refusal, FieldError) {
    let Some(db) = err.as_db_error() else {
        // The error's text (addresses, TLS details) is for the log only.
        tracing::warn!(error = %err, "database connection lost during a write");
        let lost = "the database connection was lost".to_owned();
        let mut e = FieldError::new(0, at.to_owned(), "connection_lost", lost);
        e.feature = feature;
        return (Refusal::Busy, e);
    };
    if untransformable(db) {
        let mut e = FieldError::new(
            0,
            format!("{at}/geometry"),
            "invalid_coordinates",
            format!(
                "the coordinates cannot be transformed into the column's CRS ({}); \
                 are they in the CRS the request says (Content-Crs, CRS84 by default)?",
                db.message()
            ),
        );
        e.feature = feature;
        e.sqlstate = Some(db.code().code().to_owned());
        return (Refusal::Unfit, e);
    }
    // Citus passes on a worker's message, not its fields.
    let (worker_column, worker_constraint) = match coll {
        Some(coll) if coll.distributed && db.column().is_none() && db.constraint().is_none() => {
            named_by_worker(db.message())
        }
        _ => (None, None),
    };
    let column = db.column().map(str::to_owned).or(worker_column);
    let place = coll.and_then(|coll| Some((coll, coll.column_index(column.as_deref()?)?)));
    let pointer = match place {
        Some((coll, ci)) if ci == coll.geometry => format!("{at}/geometry"),
        Some((coll, ci)) => format!("{at}/properties/{}", escape_pointer(&coll.columns[ci].name)),
        None => at.to_owned(),
    };
    let field = FieldError {
        operation: None,
        feature,
        pointer,
        code: code_name(db.code()).to_owned(),
        message: db.message().to_owned(),
        sqlstate: Some(db.code().code().to_owned()),
        constraint: db.constraint().map(str::to_owned).or(worker_constraint),
        column,
        detail: db
            .detail()
            .filter(|_| !quotes_the_row(db))
            .map(str::to_owned),
    };
    (Refusal::of(db.code().code()), field)
}

/// The column and the constraint a Citus worker's error names in its
/// message alone: Citus passes on a worker's message, detail, hint and
/// context, not its fields (`column`, `constraint`), so that an error on a
/// distributed table named neither. Read from PostgreSQL's own messages in
/// English (in another language they stay unnamed), the shard's suffix
/// taken off a constraint's name (`sites_pkey_102009`).
fn named_by_worker(message: &str) -> (Option<String>, Option<String>) {
    const COLUMN: &str = "null value in column \"";
    const CONSTRAINT: [&str; 4] = [
        "violates check constraint \"",
        "violates unique constraint \"",
        "violates foreign key constraint \"",
        "violates exclusion constraint \"",
    ];
    let quoted_after = |marker: &str| {
        let (_, rest) = message.split_once(marker)?;
        rest.split_once('"').map(|(name, _)| name.to_owned())
    };
    let constraint = CONSTRAINT.iter().find_map(|m| quoted_after(m));
    (
        quoted_after(COLUMN),
        constraint.map(|c| without_shard_id(&c)),
    )
}

/// `name` without the `_<shard id>` Citus appends to a shard's indexes and
/// constraints (shard ids have six digits or more).
fn without_shard_id(name: &str) -> String {
    match name.rsplit_once('_') {
        Some((base, id)) if id.len() >= 6 && id.bytes().all(|b| b.is_ascii_digit()) => {
            base.to_owned()
        }
        _ => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workers_message_names_the_column_and_the_constraint() {
        let named = |m: &str| named_by_worker(m);
        assert_eq!(
            named(
                "new row for relation \"sites_104913\" violates check constraint \"kind_allowed\""
            ),
            (None, Some("kind_allowed".to_owned()))
        );
        assert_eq!(
            named("duplicate key value violates unique constraint \"sites_pkey_102009\""),
            (None, Some("sites_pkey".to_owned()))
        );
        assert_eq!(
            named("null value in column \"name\" of relation \"sites_102010\" violates not-null constraint"),
            (Some("name".to_owned()), None)
        );
        // Digits that are not a shard's id stay.
        assert_eq!(without_shard_id("code_2024"), "code_2024");
        assert_eq!(named("une autre langue"), (None, None));
    }
}
