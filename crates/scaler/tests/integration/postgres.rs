//! The PostgreSQL store: migrations, one acting replica per pool, a replica that loses the lock stops
//! at once, every intent and outcome in the event log. Each test makes a fresh database (and drops
//! it); without a PostgreSQL it prints SKIPPED and passes, unless `CI` is set.

use crate::support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use orca::memory::MemoryCloud;
use orca_scaler::{Action, PgStore, Role, Scaler, Store};
use support::{ids, settings, TestDb, Wrap};

const A: &str = "amd64-small@zone-a";

async fn admin(db: &TestDb) -> tokio_postgres::Client {
    let (c, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    c
}

async fn replica(db: &TestDb, name: &str, size: usize) -> Scaler {
    Scaler::new(
        settings(size, &[A]),
        Box::new(PgStore::connect(&db.url, name).await.unwrap()),
    )
}

#[tokio::test]
async fn migrations_run_once_in_their_own_schema() {
    let Some(db) = TestDb::create("migrations_run_once_in_their_own_schema").await else {
        return;
    };
    let (a, b) = tokio::join!(
        PgStore::connect(&db.url, "a"),
        PgStore::connect(&db.url, "b")
    );
    a.unwrap();
    b.unwrap();
    PgStore::connect(&db.url, "c").await.unwrap();
    let c = admin(&db).await;
    let versions: Vec<i32> = c
        .query("SELECT version FROM orca_pool.schema_migrations", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, [1, 2, 3, 4]);
    let tables: Vec<String> = c
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'orca_pool' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        tables,
        [
            "cooling",
            "events",
            "machines",
            "records",
            "schema_migrations"
        ]
    );
    let public: i64 = c
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(public, 0, "nothing outside the orca_pool schema");
}

#[tokio::test]
async fn one_replica_acts_the_other_stands_by() {
    let Some(db) = TestDb::create("one_replica_acts_the_other_stands_by").await else {
        return;
    };
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    let mut r1 = replica(&db, "r1", 2).await;
    let mut r2 = replica(&db, "r2", 2).await;
    let a = r1.pass(&p, cloud.now()).await;
    assert_eq!(a.role, Role::Leader);
    assert_eq!(ids(&cloud).len(), 2);
    let before = cloud.requests();
    let b = r2.pass(&p, cloud.now()).await;
    assert_eq!(
        b.role,
        Role::Standby {
            leader: "r1".into()
        }
    );
    assert!(b.actions.is_empty());
    assert_eq!(cloud.requests(), before, "a standby makes no cloud call");
    assert!(
        b.lines()[0].contains("standby, replica r1 leads"),
        "{:?}",
        b.lines()
    );
    // The leader stays the leader; its record is the database's.
    let a = r1.pass(&p, cloud.now()).await;
    assert_eq!(a.role, Role::Leader);
    assert!(a.actions.is_empty(), "{:?}", a.actions);
    // The leader goes away: the standby takes over with the same record, deleting nothing.
    drop(r1);
    let mut took = None;
    for _ in 0..50 {
        let b = r2.pass(&p, cloud.now()).await;
        if b.role == Role::Leader {
            took = Some(b);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b = took.expect("the standby takes the lead once the leader's session is gone");
    assert!(b.actions.is_empty(), "{:?}", b.actions);
    assert_eq!(b.serving, 2);
}

#[tokio::test]
async fn a_replica_that_loses_the_lock_stops_at_once() {
    let Some(db) = TestDb::create("a_replica_that_loses_the_lock_stops_at_once").await else {
        return;
    };
    let cloud = MemoryCloud::new();
    let mut w = Wrap::new(cloud.provider("s1").unwrap());
    w.create_delay = Duration::from_millis(300);
    // The second create waits, once begun, until the session is gone: the kill lands mid-pass however
    // slowly a loaded machine runs it.
    w.hold_at = 2;
    let release = w.release.clone();
    let mut r1 = replica(&db, "r1", 4).await;
    r1.settings.parallel = 1;
    let admin = admin(&db).await;
    let creates = w.creates.clone();
    let layered = w.layered();
    let (report, started_at_kill) = tokio::join!(r1.pass(&layered, cloud.now()), async {
        while creates.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Kill the session that holds the lead (what a database failover or a network cut does),
        // waiting until its backend has ended (pg_terminate_backend only signals it, unless given a
        // time to wait; 30 s is a guard).
        let killed = admin
            .query(
                // Only this test's database: the server is shared with other tests.
                "SELECT pg_terminate_backend(pid, 30000) FROM pg_locks WHERE locktype = 'advisory' \
                 AND granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[],
            )
            .await
            .unwrap();
        let ended: Vec<bool> = killed.iter().map(|r| r.get(0)).collect();
        assert!(
            !ended.is_empty() && ended.iter().all(|e| *e),
            "the session that holds the lead ended: {ended:?}"
        );
        let at_kill = creates.load(Ordering::SeqCst);
        release.notify_one();
        at_kill
    });
    let stopped = report.stopped.clone().expect("the pass stops");
    assert!(stopped.contains("lost the lead"), "{stopped}");
    assert_eq!(
        w.creates.load(Ordering::SeqCst),
        started_at_kill,
        "no create begins after the lock is lost"
    );
    assert!(report.failures() > 0, "a stopped pass is a failed one");
    // Another replica takes over and converges: the interrupted create's name is adopted or retried,
    // nothing is deleted, nothing is made twice.
    let mut r2 = replica(&db, "r2", 4).await;
    let b = r2.pass(&cloud.provider("s1").unwrap(), cloud.now()).await;
    assert_eq!(b.role, Role::Leader, "{:?}", b);
    assert!(
        !b.actions
            .iter()
            .any(|a| matches!(a, Action::Deleted { .. })),
        "{:?}",
        b.actions
    );
    assert_eq!(ids(&cloud).len(), 4, "{:?}", b.actions);
    let names: std::collections::BTreeSet<String> =
        cloud.all_machines().into_iter().map(|m| m.name).collect();
    assert_eq!(names.len(), 4);
    // The old leader, back, is a standby.
    let a = r1.pass(&w.layered(), cloud.now()).await;
    assert_eq!(
        a.role,
        Role::Standby {
            leader: "r2".into()
        },
        "{a:?}"
    );
}

#[tokio::test]
async fn every_intent_and_outcome_is_in_the_event_log() {
    let Some(db) = TestDb::create("every_intent_and_outcome_is_in_the_event_log").await else {
        return;
    };
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    let mut r1 = replica(&db, "r1", 2).await;
    r1.pass(&p, cloud.now()).await;
    r1.settings.size = 1;
    r1.pass(&p, cloud.now()).await;
    let c = admin(&db).await;
    let rows = c
        .query(
            "SELECT event, coalesce(name, ''), replica FROM orca_pool.events ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    let events: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert!(rows.iter().all(|r| r.get::<_, String>(2) == "r1"));
    for name in cloud.all_machines().iter().map(|m| &m.name) {
        let intent = events
            .iter()
            .position(|e| e.0 == "intend_create" && e.1 == *name);
        let live = events.iter().position(|e| e.0 == "live" && e.1 == *name);
        assert!(intent.unwrap() < live.unwrap(), "{events:?}");
    }
    let del = events.iter().position(|e| e.0 == "intend_delete").unwrap();
    let gone = events.iter().position(|e| e.0 == "gone").unwrap();
    assert!(del < gone, "{events:?}");
    assert_eq!(events[0].0, "leader");
    let phases: Vec<(String, String)> = c
        .query(
            "SELECT name, phase FROM orca_pool.machines ORDER BY name",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(phases.len(), 2);
    assert!(phases.iter().any(|(_, p)| p == "live"), "{phases:?}");
    assert!(phases.iter().any(|(_, p)| p == "gone"), "{phases:?}");
}

#[tokio::test]
async fn the_store_names_itself_without_the_password() {
    let s = format!(
        "{:?}",
        orca_scaler::store::postgres::redact("postgres://pool:s3cret@db.example:5432/orca")
    );
    assert!(!s.contains("s3cret"), "{s}");
    assert!(s.contains("pool:***@db.example:5432/orca"), "{s}");
    let Some(db) = TestDb::create("the_store_names_itself_without_the_password").await else {
        return;
    };
    let st = PgStore::connect(&db.url, "r").await.unwrap();
    assert!(st.describe().starts_with("postgres "));
}

/// A conflict with another writer (a copy with its own record made the machines of the names this
/// replica picks) is kept in the database: a replica that starts again holds too, and the other
/// writer's machine is not in the record.
#[tokio::test]
async fn a_conflict_with_another_writer_is_kept_in_the_database() {
    let Some(db) = TestDb::create("a_conflict_with_another_writer_is_kept_in_the_database").await
    else {
        return;
    };
    let cloud = MemoryCloud::new();
    let p = cloud.provider("s1").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut other = support::scaler(dir.path(), 1, &[A]);
    assert_eq!(other.pass(&p, cloud.now()).await.serving, 1);

    let w = Wrap::new(cloud.provider("s1").unwrap());
    w.stale_listings.store(1, Ordering::SeqCst);
    let mut r1 = replica(&db, "r1", 1).await;
    let r = r1.pass(&w.layered(), cloud.now()).await;
    assert!(
        r.actions
            .iter()
            .any(|a| matches!(a, Action::Conflict { .. })),
        "{:?}",
        r.actions
    );
    drop(r1);
    let c = admin(&db).await;
    let row = c
        .query_one(
            "SELECT conflict, (SELECT count(*) FROM orca_pool.machines) FROM orca_pool.records",
            &[],
        )
        .await
        .unwrap();
    let conflict: Option<String> = row.get(0);
    assert!(
        conflict
            .as_deref()
            .is_some_and(|c| c.contains("another writer")),
        "{conflict:?}"
    );
    assert_eq!(
        row.get::<_, i64>(1),
        0,
        "the other writer's machine is not recorded"
    );

    let mut again = None;
    for _ in 0..50 {
        let mut r2 = replica(&db, "r2", 1).await;
        let r = r2.pass(&w.layered(), cloud.now()).await;
        if r.role == Role::Leader {
            again = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = again.expect("r2 leads once r1 is gone");
    assert!(
        r.stopped
            .as_deref()
            .is_some_and(|s| s.contains("another writer")),
        "{r:?}"
    );
    assert!(w.deleted.lock().unwrap().is_empty());
    assert_eq!(ids(&cloud).len(), 1);
}
