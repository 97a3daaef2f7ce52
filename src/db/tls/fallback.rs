//! Connecting as libpq does with `sslmode=prefer`: TLS first, and when the
//! TLS handshake fails (no version or cipher in common, a certificate
//! refused against `~/.postgresql/root.crt`), the same connection again
//! unencrypted. tokio-postgres falls back only when the server declines
//! TLS outright.

use deadpool_postgres::Connect;
use futures_util::future::BoxFuture;
use tokio_postgres::config::SslMode as WireMode;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Connection, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::trust;

/// A connection and the task-to-be that drives it.
pub type Connected = (
    Client,
    Connection<Socket, <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream>,
);

/// Connect with `config` through `connector`, falling back to an
/// unencrypted connection under `sslmode=prefer` when TLS cannot be set
/// up. When that fails too, the error is TLS's, which says more.
pub async fn connect(
    config: &tokio_postgres::Config,
    connector: &MakeRustlsConnect,
) -> Result<Connected, tokio_postgres::Error> {
    let tls = match config.connect(connector.clone()).await {
        Err(e)
            if config.get_ssl_mode() == WireMode::Prefer && trust::rustls_cause(&e).is_some() =>
        {
            e
        }
        done => return done,
    };
    tracing::warn!(error = %tls, "sslmode=prefer: the TLS handshake with the database failed; connecting unencrypted, as libpq does");
    let mut plain = config.clone();
    plain.ssl_mode(WireMode::Disable);
    plain.connect(connector.clone()).await.map_err(|_| tls)
}

/// The pool's way to connect: [`connect`].
pub struct LibpqConnect {
    /// The TLS connector of the connection string's options.
    pub connector: MakeRustlsConnect,
}

impl Connect for LibpqConnect {
    fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> BoxFuture<'_, Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>> {
        let config = config.clone();
        Box::pin(async move {
            let (client, connection) = connect(&config, &self.connector).await?;
            let task = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!(error = %e, "database connection error");
                }
            });
            Ok((client, task))
        })
    }
}
