//! `LISTEN` on a connection of its own: a pooled connection goes back to
//! the pool after each use, and its notifications with it.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use super::{quote_ident, Database, DbError};

/// A connection that listens on one channel; closed when dropped.
pub struct Listening {
    /// Keeps the connection open: it closes when its last client goes.
    _client: tokio_postgres::Client,
    notified: mpsc::UnboundedReceiver<String>,
}

impl Listening {
    /// Wait for the next notification, its payload; `None` once the
    /// connection is lost.
    pub async fn next(&mut self) -> Option<String> {
        self.notified.recv().await
    }
}

impl Database {
    /// Open a connection of its own (outside the pool, as the service's
    /// role) and `LISTEN` on `channel`.
    pub async fn listen(&self, channel: &str) -> Result<Listening, DbError> {
        let failed = |source| DbError::Query {
            doing: "listening for notifications",
            source,
        };
        let (client, mut connection) = super::tls::connect(&self.config, &self.connector)
            .await
            .map_err(failed)?;
        let (notify, notified) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            // Ends when the connection does: on an error, or once the client is dropped.
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notification(note) = message {
                    if notify.send(note.payload().to_owned()).is_err() {
                        break;
                    }
                }
            }
        });
        client
            .batch_execute(&format!("LISTEN {}", quote_ident(channel)))
            .await
            .map_err(failed)?;
        Ok(Listening {
            _client: client,
            notified,
        })
    }
}

/// How long a lost `LISTEN` connection waits before it is made again.
const RELISTEN_WAIT: Duration = Duration::from_secs(5);

/// What a [`relay`] hears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard<'a> {
    /// A notification, with its payload.
    Notification(&'a str),
    /// The connection was lost: nothing is heard until it is back.
    Lost,
    /// The connection is made again: notifications sent meanwhile were missed.
    Back,
}

impl Database {
    /// [`Database::listen`], or `None` when it cannot (logged).
    pub async fn listen_or_warn(&self, channel: &str) -> Option<Listening> {
        match self.listen(channel).await {
            Ok(listening) => Some(listening),
            Err(e) => {
                tracing::warn!(error = %e, "cannot LISTEN {channel}; trying again");
                None
            }
        }
    }
}

/// Tell `heard` of each notification on `channel`, from `listening` (or a
/// connection made when there is none); a lost connection is made again
/// every few seconds. Runs until dropped.
pub async fn relay(
    db: Database,
    channel: &str,
    mut listening: Option<Listening>,
    mut heard: impl FnMut(Heard<'_>),
) {
    loop {
        if let Some(mut connection) = listening.take() {
            while let Some(payload) = connection.next().await {
                heard(Heard::Notification(&payload));
            }
            tracing::warn!("the LISTEN {channel} connection was lost; making it again");
            heard(Heard::Lost);
        }
        while listening.is_none() {
            tokio::time::sleep(RELISTEN_WAIT).await;
            listening = db.listen_or_warn(channel).await;
        }
        heard(Heard::Back);
    }
}
