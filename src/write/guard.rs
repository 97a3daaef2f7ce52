//! A pooled connection that never goes back to the pool inside a transaction.

use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::Object;
use tokio_postgres_rustls::MakeRustlsConnect;

/// Derefs to the connection; if dropped while a transaction may be open (a
/// request cut short by its deadline or its client), the statement in flight
/// is cancelled and the connection closed instead of returned. Closing alone
/// is not enough: a COMMIT pipelined behind a running statement would still
/// be carried out once the statement ends; cancelled, the statement fails and
/// that COMMIT rolls back.
pub struct TxGuard {
    client: Option<Object>,
    open: AtomicBool,
    /// How a cancel request reaches the server: as the connection did (TLS or not).
    connector: MakeRustlsConnect,
}

impl TxGuard {
    /// Guard a connection that is not in a transaction.
    pub fn new(client: Object, connector: MakeRustlsConnect) -> Self {
        TxGuard {
            client: Some(client),
            open: AtomicBool::new(false),
            connector,
        }
    }

    /// Note that a transaction may be open (BEGIN sent) or is surely closed.
    pub fn set_open(&self, open: bool) {
        self.open.store(open, Ordering::Relaxed);
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
