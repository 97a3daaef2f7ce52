//! A pooled connection that never goes back to the pool inside a transaction.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use deadpool_postgres::Object;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::db::costs::{Costs, Writing};

/// Derefs to the connection; if dropped while a transaction may be open (a
/// request cut short by its deadline or its client), the statement in flight
/// is cancelled and the connection closed instead of returned. Closing alone
/// is not enough: a COMMIT pipelined behind a running statement would still
/// be carried out once the statement ends; cancelled, the statement fails and
/// that COMMIT rolls back.
///
/// A new guard counts as open too, until the end of a transaction has been
/// seen: a connection whose backend was terminated while statements were
/// being prepared fails that request, and must not fail the next one too
/// (tokio-postgres may not have seen the socket close yet when the pool
/// checks it).
pub struct TxGuard {
    client: Option<Object>,
    open: AtomicBool,
    /// How a cancel request reaches the server: as the connection did (TLS or not).
    connector: MakeRustlsConnect,
    /// The write this connection serves, counted as under way.
    _writing: Option<Writing>,
}

impl TxGuard {
    /// Guard a connection that is not in a transaction.
    pub fn new(client: Object, connector: MakeRustlsConnect) -> Self {
        TxGuard {
            client: Some(client),
            open: AtomicBool::new(true),
            connector,
            _writing: None,
        }
    }

    /// The same, counted as a write under way in `costs` while it lives.
    pub fn writing(mut self, costs: &Arc<Costs>) -> Self {
        self._writing = Some(costs.writing());
        self
    }

    /// Note that a transaction may be open (BEGIN sent) or is surely closed.
    pub fn set_open(&self, open: bool) {
        self.open.store(open, Ordering::Relaxed);
    }

    /// Whether a transaction may be open: not known to be over.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }
}

impl std::ops::Deref for TxGuard {
    type Target = Object;
    fn deref(&self) -> &Object {
        self.client.as_ref().expect("present until drop")
    }
}

impl Drop for TxGuard {
    fn drop(&mut self) {
        if let (true, Some(client)) = (*self.open.get_mut(), self.client.take()) {
            if client.is_closed() {
                // Nothing runs on a closed connection: nothing to cancel.
                drop(Object::take(client));
                return;
            }
            let cancel = client.cancel_token();
            let connector = self.connector.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    if let Err(e) = cancel.cancel_query(connector).await {
                        tracing::warn!(error = %e, "cancelling the statement of an abandoned transaction failed");
                    }
                });
            }
            drop(Object::take(client));
        }
    }
}
