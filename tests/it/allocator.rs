//! mimalloc's arenas are committed as they are used (a lower peak for large
//! bodies), set in the process itself: no restart with a changed environment.

use crate::support::{ServiceProcess, TestDb};

const OPTION: &str = "MIMALLOC_ARENA_EAGER_COMMIT";

/// The largest anonymous mapping of process `pid` with permissions `perms`
/// (`rw-p`: committed, `---p`: only reserved), in MiB.
fn largest_anonymous_mib(pid: u32, perms: &str) -> u64 {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        // address, perms, offset, device, inode: no path.
        .filter(|fields| fields.len() == 5 && fields[1] == perms)
        .map(|fields| {
            let (start, end) = fields[0].split_once('-').unwrap();
            let bytes =
                u64::from_str_radix(end, 16).unwrap() - u64::from_str_radix(start, 16).unwrap();
            bytes >> 20
        })
        .max()
        .unwrap_or(0)
}

/// The running service on a fresh database, with `env` set.
async fn service(env: &[(&str, &str)]) -> (TestDb, ServiceProcess) {
    let db =
        TestDb::new("CREATE TABLE t (id serial PRIMARY KEY, geom geometry(Point, 4326))").await;
    let service = ServiceProcess::start(&db.url, env).await;
    (db, service)
}

#[tokio::test]
async fn arenas_are_committed_as_used_without_a_restart() {
    assert!(
        std::env::var_os(OPTION).is_none(),
        "this test is about the default: unset {OPTION}"
    );
    let (_db, service) = service(&[]).await;
    let pid = service.child.id().unwrap();
    // mimalloc's first arena (1 GiB) is reserved, not committed as a whole.
    let reserved = largest_anonymous_mib(pid, "---p");
    let committed = largest_anonymous_mib(pid, "rw-p");
    assert!(
        reserved >= 512 && committed < 512,
        "largest reserved mapping {reserved} MiB, largest committed {committed} MiB"
    );
    // The setting is not an environment the process restarted itself with.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let set = environ
        .split(|b| *b == 0)
        .any(|var| var.starts_with(format!("{OPTION}=").as_bytes()));
    assert!(!set, "the service restarted itself with {OPTION} set");
}

#[tokio::test]
async fn an_operators_mimalloc_setting_still_wins() {
    let (_db, service) = service(&[(OPTION, "1")]).await;
    let pid = service.child.id().unwrap();
    let committed = largest_anonymous_mib(pid, "rw-p");
    assert!(
        committed >= 1024,
        "largest committed mapping {committed} MiB"
    );
}
