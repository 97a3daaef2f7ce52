//! A pooled connection that never goes back to the pool inside a transaction.

use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::Object;

/// Derefs to the connection; if dropped while a transaction may be open, the
/// connection is closed instead of returned (closing ends the transaction).
pub struct TxGuard {
    client: Option<Object>,
    open: AtomicBool,
}

impl TxGuard {
    /// Guard a connection that is not in a transaction.
    pub fn new(client: Object) -> Self {
        TxGuard {
            client: Some(client),
            open: AtomicBool::new(false),
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
            drop(Object::take(client));
        }
    }
}
