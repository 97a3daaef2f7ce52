//! The response to an OGC transaction (Part 11 draft, `response.yaml`): how
//! many features each kind of action wrote, links to them, and an
//! exception for each action that failed. Made from the session's report.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::FieldError;
use crate::read::params::{path_segment, percent_encode};
use crate::session::report::{OpStatus, SessionReport};
use crate::session::{Mode, Op, Operation, Step};

/// How a transaction commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Semantic {
    /// All or nothing (featurepipe's `atomic` mode).
    #[default]
    Atomic,
    /// Each action on its own; failed ones are reported (the `skip` mode).
    Batch,
}

impl Semantic {
    /// The session mode it is.
    pub fn mode(self) -> Mode {
        match self {
            Semantic::Atomic => Mode::Atomic,
            Semantic::Batch => Mode::Skip,
        }
    }

    /// The semantic of a session run in `mode` (only `atomic` is all or nothing).
    fn of(mode: Mode) -> Semantic {
        match mode {
            Mode::Atomic => Semantic::Atomic,
            Mode::Batch | Mode::Skip => Semantic::Batch,
        }
    }
}

/// How many features were written, by kind of action.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Features inserted.
    pub total_inserted: usize,
    /// Features replaced.
    pub total_replaced: usize,
    /// Features updated.
    pub total_updated: usize,
    /// Features deleted.
    pub total_deleted: usize,
}

/// Why an action (or the transaction's COMMIT) failed: featurepipe's error
/// (`operation` is the action's index, `pointer` into the request body).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TxException {
    /// The action's `id`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_id: Option<String>,
    /// What went wrong, and where.
    #[serde(flatten)]
    pub error: FieldError,
}

/// The response of `POST /transactions` to an `application/ogc-tx+json` body.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransactionResponse {
    /// The transaction's semantic.
    pub semantic: Semantic,
    /// Features written, by kind of action.
    pub summary: Summary,
    /// Links to the inserted features, in request order.
    pub insert_results: Vec<String>,
    /// Links to the replaced features.
    pub replace_results: Vec<String>,
    /// Links to the updated features.
    pub update_results: Vec<String>,
    /// Links to the deleted features (which are gone).
    pub delete_results: Vec<String>,
    /// One per failed action (with `batch`), or the failure that rolled an
    /// `atomic` transaction back.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exceptions: Vec<TxException>,
}

/// What a response names: actions by their `id`s, features by links under `base`.
#[derive(Debug, Clone, Copy)]
pub struct Names<'a> {
    /// Each action's `id`.
    pub action_ids: &'a [Option<String>],
    /// The service's base URL.
    pub base: &'a str,
}

impl TxException {
    fn of(e: &FieldError, names: Names<'_>) -> Self {
        let action_id = e
            .operation
            .and_then(|k| names.action_ids.get(k).cloned().flatten());
        TxException {
            action_id,
            error: e.clone(),
        }
    }
}

/// The response for a session's `report` (of these `operations` and `steps`).
pub fn response(
    report: &SessionReport,
    operations: &[Operation],
    steps: &[Step],
    names: Names<'_>,
) -> TransactionResponse {
    let (mut inserted, mut replaced, mut updated, mut deleted) = Default::default();
    let mut exceptions = Vec::new();
    for (result, op) in report.results.iter().zip(operations) {
        exceptions.extend(result.error.iter().map(|e| TxException::of(e, names)));
        if result.status != OpStatus::Written {
            continue;
        }
        let link = |id: &str| {
            format!(
                "{}/collections/{}/items/{}",
                names.base,
                percent_encode(&op.collection),
                path_segment(id)
            )
        };
        // Inserts and edits by filter say their keys; the others name theirs.
        let ids: Vec<String> = match &result.ids {
            Some(ids) => (0..ids.len()).filter_map(|i| ids.text(i)).collect(),
            None => steps[op.steps.clone()]
                .iter()
                .filter_map(|s| s.id.clone())
                .collect(),
        };
        let links: &mut Vec<String> = match op.op {
            Op::Insert => &mut inserted,
            Op::Replace => &mut replaced,
            Op::Update => &mut updated,
            Op::Delete => &mut deleted,
        };
        links.extend(ids.iter().map(|id| link(id)));
    }
    exceptions.extend(report.errors.iter().map(|e| TxException::of(e, names)));
    TransactionResponse {
        semantic: Semantic::of(report.mode),
        summary: Summary {
            total_inserted: inserted.len(),
            total_replaced: replaced.len(),
            total_updated: updated.len(),
            total_deleted: deleted.len(),
        },
        insert_results: inserted,
        replace_results: replaced,
        update_results: updated,
        delete_results: deleted,
        exceptions,
    }
}
