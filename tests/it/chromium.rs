//! Headless Chromium (Debian's, installed by `make test`) opening a page,
//! for tests of what browsers do; killed, with its profile, when dropped.

use std::path::PathBuf;

use tokio::process::{Child, Command};

use crate::support::scratch_dir;

/// A headless Chromium showing one page.
pub struct Chromium {
    child: Child,
    profile: PathBuf,
}

impl Chromium {
    /// Open `url` in a new headless Chromium with an empty profile.
    pub fn open(url: &str) -> Chromium {
        let program = std::env::var("FEATUREPIPE_TEST_CHROMIUM")
            .unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
        let profile = scratch_dir("chromium", 0o700);
        // The machine's network is closed: without the background-networking
        // flags Chromium keeps trying to reach Google, and is refused. The
        // flags are those Playwright starts it with too (tests/clients/browser.py).
        let child = Command::new(&program)
            .args(["--headless", "--disable-dev-shm-usage"])
            .args(include_str!("../clients/chromium-flags.txt").split_whitespace())
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{program} does not start ({e}): run the tests with `make test`")
            });
        Chromium { child, profile }
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
