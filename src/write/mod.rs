//! The write path: plan the statements, then write through a pipeline.

mod dberror;
mod guard;
mod insert;
mod pipeline;
pub mod plan;
pub mod report;
pub mod sql;

use std::sync::Arc;

use crate::catalog::Collection;
use crate::db::Database;
use crate::error::ApiError;
use crate::feature::FeatureRow;
use dberror::{api_error, feature_error};
use guard::TxGuard;
use insert::Insert;
pub use plan::BatchLimits;
use report::{BatchReport, Tally, WriteReport};

/// How writes are carried out.
#[derive(Debug, Clone, Copy)]
pub struct WriteOptions {
    /// How requests are cut into batches.
    pub limits: BatchLimits,
    /// Send a whole request before reading answers; off writes one statement
    /// at a time, for proxies and PostgreSQL-compatible servers that mishandle
    /// pipelining.
    pub pipeline: bool,
}

/// Write validated rows in one transaction and return their keys in order.
///
/// The work runs on its own task: if the client goes away mid-request, the
/// transaction still ends in a COMMIT or ROLLBACK instead of being abandoned.
pub async fn write_features(
    db: Database,
    coll: Arc<Collection>,
    rows: Vec<FeatureRow>,
    single: bool,
    options: WriteOptions,
) -> Result<WriteReport, ApiError> {
    if rows.is_empty() {
        return Ok(WriteReport {
            ids: Vec::new(),
            batches: Vec::new(),
        });
    }
    tokio::spawn(async move {
        let plan = plan::plan(&rows, options.limits);
        let client = TxGuard::new(db.connection().await?);
        Insert {
            client: &client,
            coll: &coll,
            rows: &rows,
            plan: &plan,
            single,
            pipeline: options.pipeline,
        }
        .run()
        .await
    })
    .await
    .map_err(|e| ApiError::internal(format!("the write task failed: {e}")))?
}

/// The error for a write whose statement for one feature failed.
fn write_failed(coll: &Collection, single: bool, tally: &Tally<'_>) -> ApiError {
    let failure = tally.failure.as_ref().expect("called on failure");
    let at = if single {
        String::new()
    } else {
        format!("/features/{}", failure.feature)
    };
    let (status, field) = feature_error(coll, Some(failure.feature), &at, &failure.error);
    let detail = format!(
        "feature {} was rejected by the database: {}; nothing was written",
        failure.feature, field.message
    );
    api_error(status, detail)
        .with_errors(vec![field])
        .with_batches(tally.reports(false))
}

/// The error for a write refused at COMMIT (deferred constraints).
fn commit_failed(
    coll: &Collection,
    error: &tokio_postgres::Error,
    batches: Vec<BatchReport>,
) -> ApiError {
    let (status, field) = feature_error(coll, None, "", error);
    api_error(
        status,
        "the database refused to commit; nothing was written".into(),
    )
    .with_errors(vec![field])
    .with_batches(batches)
}
