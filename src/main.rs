//! The `featurepipe` command line: `serve`, `migrate`, `openapi`, `api-key` and `push`.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use featurepipe::config::{Config, DatabaseArgs};
use featurepipe::db::{migrate, Database};
use featurepipe::push::args::PushArgs;
use featurepipe::AppState;
use tracing_subscriber::EnvFilter;

// Parsing allocates many small values; mimalloc is markedly faster at that than glibc's malloc.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    version,
    about = "GeoJSON features into PostGIS in the fewest round trips"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP service (migrates first).
    Serve(Box<Config>),
    /// Apply pending migrations to the service's own schema and exit.
    Migrate(DatabaseArgs),
    /// Print the OpenAPI document (as committed in openapi/featurepipe.json).
    Openapi,
    /// Make a new API key: prints the key (give it to the client) and the
    /// lines to add to the settings file, which hold only its hash.
    ApiKey {
        /// A name for the key, shown in logs and 403 messages.
        name: String,
        /// What it grants, e.g. "read:* write:survey_*".
        #[arg(long, default_value = "read:*")]
        scope: String,
    },
    /// Send a GeoJSON file to a running service in batches; running it again
    /// after a failure writes only what was not written.
    Push(Box<PushArgs>),
}

/// mimalloc reserves its first arena before `main` runs, committing it whole
/// by default, which put the peak of a 64 MiB request ~35 MiB higher. So the
/// default becomes "commit as used" before anything allocates: an ELF
/// constructor of priority 99 runs ahead of mimalloc's own (101) and of every
/// default one. `MIMALLOC_ARENA_EAGER_COMMIT` in the environment still wins:
/// mimalloc reads it afterwards and a default does not override it.
#[cfg(target_os = "linux")]
mod lazy_allocator_commit {
    use std::ffi::{c_int, c_long};

    /// `mi_option_arena_eager_commit` in mimalloc 3's `mi_option_t` (mimalloc.h).
    const ARENA_EAGER_COMMIT: c_int = 4;

    extern "C" {
        // In the mimalloc that the `mimalloc` crate links statically.
        fn mi_option_set_default(option: c_int, value: c_long);
    }

    extern "C" fn set() {
        // SAFETY: writes one entry of mimalloc's static option table; it
        // allocates nothing and needs no initialised runtime.
        unsafe { mi_option_set_default(ARENA_EAGER_COMMIT, 0) }
    }

    #[used]
    #[link_section = ".init_array.00099"]
    static SET: extern "C" fn() = set;
}

fn main() -> ExitCode {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime")
        .block_on(run())
}

async fn run() -> ExitCode {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("featurepipe=info,warn"));
    // JSON lines for log collectors; each carries its request's span (id, route).
    match std::env::var("FEATUREPIPE_LOG_FORMAT").as_deref() {
        Ok("json") => tracing_subscriber::fmt()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_env_filter(filter)
            .init(),
        // Colours for a terminal only: a log file or a journal keeps the
        // escape codes, and writing them is work for every line.
        _ => tracing_subscriber::fmt()
            .with_ansi(std::io::stdout().is_terminal())
            .with_env_filter(filter)
            .init(),
    }
    let result = match Cli::parse().command {
        Command::Serve(config) => serve(*config).await,
        Command::Migrate(args) => migrate_only(args).await,
        Command::Openapi => {
            print!("{}", featurepipe::http::openapi::document_json());
            Ok(())
        }
        Command::ApiKey { name, scope } => api_key(&name, &scope),
        Command::Push(args) => featurepipe::push::run(*args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("featurepipe: {e}");
            ExitCode::FAILURE
        }
    }
}

fn api_key(name: &str, scope: &str) -> Result<(), Box<dyn std::error::Error>> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err("a key's name is letters, digits, '-' and '_'".into());
    }
    featurepipe::auth::Grant::parse(scope)?;
    let (key, hash) = featurepipe::auth::new_api_key()?;
    println!("# The key, for the client (it is not stored anywhere):\n{key}\n");
    println!("# For the settings file (FEATUREPIPE_CONFIG):");
    println!("[api_keys.{name}]\nsha256 = \"{hash}\"\nscope = \"{scope}\"");
    Ok(())
}

async fn serve(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    let state = AppState::start(&config).await?;
    // Before the port opens: from then on a SIGHUP reloads, and no longer ends the process.
    #[cfg(unix)]
    reload_on_hangup(&state)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    tracing::info!("listening on http://{}", listener.local_addr()?);
    if let Some(address) = config.metrics_listen {
        let metrics = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|e| format!("cannot listen on {address} (FEATUREPIPE_METRICS_LISTEN): {e}"))?;
        tracing::info!("metrics on http://{address}/metrics");
        let router = featurepipe::metrics_router(state.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(metrics, router).await {
                tracing::error!(error = %e, "the metrics listener stopped");
            }
        });
    }
    // On SIGTERM: stop accepting, let requests in flight finish, but not for
    // longer than the deadline (a write cut short is rolled back by PostgreSQL
    // when its connection closes: nothing is left half-done).
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        shutdown_signal().await;
        let _ = stopping.send(());
    };
    let deadline = config.shutdown_timeout;
    tokio::select! {
        served = featurepipe::serve(listener, state, signal) => served?,
        () = async move {
            if stopped.await.is_ok() {
                tokio::time::sleep(deadline).await;
            } else {
                std::future::pending::<()>().await;
            }
        } => {
            tracing::warn!(?deadline, "requests still in flight at the shutdown deadline; exiting");
        }
    }
    Ok(())
}

async fn migrate_only(args: DatabaseArgs) -> Result<(), Box<dyn std::error::Error>> {
    let url = featurepipe::db::url_or_environment(args.database_url.as_deref())?;
    let db = Database::new(url, 1, args.startup_timeout, Duration::ZERO, args.pooler)?;
    let mut client = db.wait_until_ready(args.startup_timeout).await?;
    let applied = migrate::run(&mut client).await?;
    println!("applied {} migration(s): {applied:?}", applied.len());
    Ok(())
}

/// On each SIGHUP, read the settings file and the catalog again.
#[cfg(unix)]
fn reload_on_hangup(state: &AppState) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup())?;
    let state = state.clone();
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            tracing::info!("SIGHUP: reading the settings and the catalog again");
            state.reload().await;
        }
    });
    Ok(())
}

/// Ctrl-C or SIGTERM: stop accepting, finish in-flight requests.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}
