//! What every request gets, whatever its handler does: an answer to a
//! panic, and an end.

use std::any::Any;
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::problem::{ApiError, Wrong};
use crate::error::Error;

/// The answer to a handler that panicked: a problem+json 500 instead of a
/// dropped connection. The panic is logged; its text stays in the log, since
/// it may describe internals.
pub fn panicked(panic: Box<dyn Any + Send + 'static>) -> Response {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(panic = what, "a request handler panicked");
    ApiError::from(Error::failed()).into_response()
}

/// A request that takes longer than `deadline` (zero: no limit) is answered
/// 504. Its handler is dropped, and with it any open transaction: the
/// statement in flight is cancelled and the connection closed (see
/// `TxGuard`), so the transaction rolls back unless COMMIT was already done.
pub async fn deadline(deadline: Duration, request: Request, next: Next) -> Response {
    if deadline.is_zero() {
        return next.run(request).await;
    }
    match tokio::time::timeout(deadline, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            Wrong::DeadlineExceeded,
            format!(
                "the request did not finish within {deadline:?} (FEATUREPIPE_REQUEST_TIMEOUT): \
                 it was stopped, and its open transaction cancelled and rolled back. A write \
                 whose COMMIT had already been carried out stays written: check, or send it \
                 again with an Idempotency-Key"
            ),
        )
        .into_response(),
    }
}
