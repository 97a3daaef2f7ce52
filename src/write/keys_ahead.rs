//! Keys drawn ahead, on a connection of their own, for a COPY that streams
//! its rows: the COPY sends them with the rows, so nothing is drawn between
//! its batches and nothing read back after them.
//!
//! Only keys drawn from a sequence: a sequence stands outside transactions
//! (a value drawn is never given again, committed or not), so a key drawn
//! on another connection is as fresh as one the COPY's default would draw.
//! The drawing connection runs as the write's role, so it needs the same
//! right to the sequence. Keys drawn and not used (less than two blocks, when
//! the body ends) are skipped, as after a rollback.

use tokio::sync::mpsc;
use tokio_postgres::types::ToSql;
use tokio_postgres::Error as PgError;
use tokio_util::task::AbortOnDropHandle;

use crate::db::statement::{cache_room, prepare_named};
use crate::db::Database;
use crate::error::Error;

/// Blocks drawn (or being drawn) and not yet taken, beyond the one being
/// taken from.
const BLOCKS_AHEAD: usize = 1;

/// Integer keys drawn a block at a time, ahead of the rows that take them.
pub struct KeysAhead {
    blocks: mpsc::Receiver<Result<Vec<i64>, PgError>>,
    /// The block being taken from, and where.
    block: std::vec::IntoIter<i64>,
    _drawing: AbortOnDropHandle<()>,
}

/// The query drawing keys: its SQL, and the table and key column it names
/// when the key is an identity.
#[derive(Clone)]
pub struct DrawQuery {
    /// `SELECT array_agg(…)` of `$1` keys (see `copy::draw_query`).
    pub sql: String,
    /// The table and key column, for `pg_get_serial_sequence`.
    pub names: Option<(String, String)>,
}

impl DrawQuery {
    /// The query's parameters for `n` keys.
    pub fn params<'a>(&'a self, n: &'a i32) -> Vec<&'a (dyn ToSql + Sync)> {
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![n];
        if let Some((table, column)) = &self.names {
            params.extend([table as &(dyn ToSql + Sync), column]);
        }
        params
    }
}

impl KeysAhead {
    /// Start drawing blocks of `block` keys with `query` on a connection
    /// that is free now; `None` when there is none.
    pub async fn start(db: &Database, query: DrawQuery, block: usize) -> Option<KeysAhead> {
        let client = db.free_connection().await?;
        let naming = db.naming();
        let (tx, blocks) = mpsc::channel(BLOCKS_AHEAD);
        let drawing = tokio::spawn(async move {
            let naming = naming.within(cache_room(&client), 0);
            let statement = match prepare_named(&client, &query.sql, naming).await {
                Ok(statement) => statement,
                Err(e) => return drop(tx.send(Err(e)).await),
            };
            let n = i32::try_from(block).unwrap_or(i32::MAX);
            let params = query.params(&n);
            // A block is drawn once there is room for it (so that at most
            // one waits), until the COPY needs no more or a draw fails.
            while let Ok(room) = tx.reserve().await {
                let drawn = client.query_one(&statement, &params).await;
                let failed = drawn.is_err();
                room.send(drawn.map(|row| row.get::<_, Option<Vec<i64>>>(0).unwrap_or_default()));
                if failed {
                    return;
                }
            }
        });
        Some(KeysAhead {
            blocks,
            block: Vec::new().into_iter(),
            _drawing: AbortOnDropHandle::new(drawing),
        })
    }

    /// The next `n` keys, in the order drawn.
    pub async fn take(&mut self, n: usize) -> Result<Vec<i64>, Error> {
        let mut keys = Vec::with_capacity(n);
        while keys.len() < n {
            keys.extend(self.block.by_ref().take(n - keys.len()));
            if keys.len() < n {
                self.block = match self.blocks.recv().await {
                    Some(Ok(block)) if !block.is_empty() => block.into_iter(),
                    Some(Err(e)) => return Err(Error::database("drawing keys ahead", &e)),
                    Some(Ok(_)) | None => {
                        return Err(Error::internal("drawing keys ahead stopped"))
                    }
                };
            }
        }
        Ok(keys)
    }
}
