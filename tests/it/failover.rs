//! A failover as operators run one: a primary with a synchronous streaming
//! standby, featurepipe on both hosts with `target_session_attrs=read-write`,
//! a writer posting batches with Idempotency-Keys and retrying each until it
//! is acknowledged, the primary killed and the standby promoted. Nothing
//! acknowledged is lost, nothing is written twice, and writes resume within
//! seconds of the promotion.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{collection, config, connect, point, OwnCluster, TestApp, TestDb};

/// Points per batch.
const BATCH: usize = 100;

/// How long writes may take to resume after the promotion.
const RESUMES_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_promoted_standby_loses_nothing_and_writes_resume_within_seconds() {
    let primary = OwnCluster::start_durable().await;
    let client = connect(&primary.url()).await;
    client
        .batch_execute(
            "CREATE EXTENSION postgis;
             CREATE TABLE pts (id serial PRIMARY KEY, batch int NOT NULL, n int NOT NULL,
                               geom geometry(Point, 4326));",
        )
        .await
        .unwrap();
    let standby = OwnCluster::standby_of(&primary).await;
    client
        .batch_execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        .await
        .unwrap();
    client
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        let sync = client
            .query_one(
                "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0);
        if sync == 1 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the standby never became synchronous"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let mut config = config(&url);
    config.pool_wait = Duration::from_secs(2);
    let app = TestApp::on(
        TestDb {
            url: primary.url(),
            client,
        },
        config,
    )
    .await;

    // The writer: batch after batch, each retried with its key until a 201.
    let post = |b: usize| {
        let app = &app;
        async move {
            let features = (0..BATCH)
                .map(|n| {
                    point(
                        n as f64 * 0.001,
                        b as f64 * 0.001,
                        json!({"batch": b, "n": n}),
                    )
                })
                .collect();
            let key = format!("failover-batch-{b}");
            let headers = [
                ("content-type", "application/geo+json"),
                ("idempotency-key", key.as_str()),
            ];
            app.send(
                "POST",
                "/collections/pts/items",
                &headers,
                Some(collection(features).to_string()),
            )
            .await
        }
    };
    // A few batches in, while one is in flight, the primary dies and the
    // standby takes over.
    let acked = AtomicUsize::new(0);
    let promoted = OnceLock::new();
    let failover = async {
        while acked.load(Ordering::Relaxed) < 10 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        primary.kill().await;
        standby.promote().await;
        promoted.set(Instant::now()).unwrap();
    };
    let writer = async {
        let mut acknowledged = BTreeSet::new();
        let mut refusals = Vec::new();
        let mut resumed_after = None;
        let mut b = 0;
        while acknowledged.len() < 40 || resumed_after.is_none() {
            let r = post(b).await;
            match r.status.as_u16() {
                201 => {
                    assert_eq!(r.body["ids"].as_array().map(Vec::len), Some(BATCH), "{r:?}");
                    acknowledged.insert(b);
                    acked.store(acknowledged.len(), Ordering::Relaxed);
                    if let (Some(at), None) = (promoted.get(), resumed_after) {
                        resumed_after = Some(at.elapsed());
                    }
                    b += 1;
                }
                // The outcome of a batch cut off by the failover, a database
                // not reachable yet, a key still held: the same key again.
                500 | 502 | 503 | 409 => {
                    refusals.push(r.status.as_u16());
                    if let Some(at) = promoted.get() {
                        assert!(
                            at.elapsed() < RESUMES_WITHIN * 3,
                            "writes never resumed: {refusals:?}"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ => panic!("batch {b}: {r:?}"),
            }
        }
        (acknowledged, refusals, resumed_after)
    };
    let ((), (acknowledged, refusals, resumed_after)) = tokio::join!(failover, writer);
    let resumed_after = resumed_after.unwrap();
    assert!(
        resumed_after < RESUMES_WITHIN,
        "writes resumed {resumed_after:?} after the promotion ({refusals:?})"
    );

    // What the new primary holds: every acknowledged batch, each once.
    let check = connect(&standby.url()).await;
    let rows = check
        .query(
            "SELECT batch, count(*), count(DISTINCT n) FROM pts GROUP BY batch ORDER BY batch",
            &[],
        )
        .await
        .unwrap();
    let stored: BTreeSet<usize> = rows.iter().map(|r| r.get::<_, i32>(0) as usize).collect();
    assert_eq!(stored, acknowledged, "lost or unacknowledged batches");
    for row in &rows {
        let (batch, all, distinct): (i32, i64, i64) = (row.get(0), row.get(1), row.get(2));
        assert_eq!(
            (all, distinct),
            (BATCH as i64, BATCH as i64),
            "batch {batch} written twice or in part"
        );
    }
    eprintln!(
        "failover: {} batches acknowledged, writes resumed {resumed_after:?} after the promotion, \
         refusals meanwhile: {refusals:?}",
        acknowledged.len()
    );
}
