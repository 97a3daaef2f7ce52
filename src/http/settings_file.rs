//! The settings file read again while the service runs, on SIGHUP and when
//! it changes: API keys, their scopes, the JWT checks and the collections'
//! settings. New settings are taken all at once, only when every part of
//! them holds (the file parses, the credentials build, the catalog reads
//! with them); else the settings in force stay, and the log says why. This
//! is what a key rotation needs: a key added works at once, one removed is
//! refused at once.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use crate::auth::Auth;
use crate::catalog::live::LiveCatalog;
use crate::catalog::settings::Settings;
use crate::config::Config;

/// The credentials in force, replaced whole when the settings change.
pub struct LiveAuth(RwLock<Arc<Auth>>);

impl LiveAuth {
    /// Start with `auth`.
    pub fn new(auth: Auth) -> Self {
        LiveAuth(RwLock::new(Arc::new(auth)))
    }

    /// The credentials in force now: a request keeps these to its end.
    pub fn current(&self) -> Arc<Auth> {
        self.0.read().expect("no panics while locked").clone()
    }

    fn replace(&self, auth: Auth) {
        *self.0.write().expect("no panics while locked") = Arc::new(auth);
    }
}

/// Where the settings come from, and what else building them needs.
pub struct SettingsFile {
    path: PathBuf,
    /// The service's configuration: the JWT keys, whether auth is on.
    config: Config,
    /// `[auth] set_role` as started: it decides how connections are made,
    /// so changing it needs a restart.
    set_role: bool,
    /// The file's modification time and length when last read.
    stamp: Mutex<Option<(SystemTime, u64)>>,
}

impl SettingsFile {
    /// The file of `config`, if it names one, read at start-up as `settings`.
    pub fn of(config: &Config, settings: &Settings) -> Option<Arc<Self>> {
        let path = config.settings.clone()?;
        let stamp = Mutex::new(stamp(&path));
        Some(Arc::new(SettingsFile {
            path,
            config: config.clone(),
            set_role: settings.auth.set_role,
            stamp,
        }))
    }

    /// Read the file again and take what it says, all or nothing.
    pub async fn reload(&self, auth: &LiveAuth, catalog: &LiveCatalog) -> Result<(), String> {
        *self.stamp.lock().expect("no panics while locked") = stamp(&self.path);
        let settings = Settings::load(&self.path)?;
        if settings.auth.set_role != self.set_role {
            return Err(
                "[auth] set_role decides how connections are made: changing it needs a restart"
                    .into(),
            );
        }
        let built = super::app::auth(&self.config, &settings)?;
        catalog.try_settings(settings).await?;
        auth.replace(built);
        Ok(())
    }

    /// Whether the file looks changed since it was last read.
    fn changed(&self) -> bool {
        *self.stamp.lock().expect("no panics while locked") != stamp(&self.path)
    }

    /// Read the file again whenever it changes (looked at every `every`),
    /// logging what came of it.
    pub fn watch(self: Arc<Self>, auth: Arc<LiveAuth>, catalog: Arc<LiveCatalog>, every: Duration) {
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if self.changed() {
                    self.reload_and_log("the settings file changed", &auth, &catalog)
                        .await;
                }
            }
        });
    }

    /// [`SettingsFile::reload`], saying in the log why it was read and how it went.
    pub async fn reload_and_log(&self, why: &str, auth: &LiveAuth, catalog: &LiveCatalog) {
        let path = self.path.display();
        match self.reload(auth, catalog).await {
            Ok(()) => tracing::info!(%path, "{why}: settings read again and in force"),
            Err(error) => tracing::error!(
                %path,
                %error,
                "{why}, but its settings cannot be taken; the settings in force stay"
            ),
        }
    }
}

/// The file's modification time and length, if it can be read.
fn stamp(path: &std::path::Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}
