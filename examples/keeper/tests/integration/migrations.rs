//! Versioned migrations on a fresh database: applied once even by keepers starting together, kept in
//! keeper's own schema, refused when changed or newer.

use crate::support;

use std::sync::Arc;

use keeper::db::{migrate, pool, MIGRATIONS};
use support::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepers_starting_together_apply_each_migration_once() {
    let Some(db) = TestDb::create("keepers_starting_together_apply_each_migration_once").await
    else {
        return;
    };
    let starts = (0..4).map(|_| {
        let url = db.url.clone();
        tokio::spawn(async move {
            let p = pool(&url, 2).unwrap();
            migrate(&p).await.unwrap()
        })
    });
    let applied: Vec<Vec<i32>> = futures::future::join_all(starts)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let all: Vec<i32> = MIGRATIONS.iter().map(|m| m.version).collect();
    assert_eq!(
        applied.iter().filter(|a| !a.is_empty()).count(),
        1,
        "one keeper applied them: {applied:?}"
    );
    assert!(applied.contains(&all));
    let c = db.client().await;
    let versions: Vec<i32> = c
        .query(
            "SELECT version FROM keeper.schema_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, all);
    // Every table is in the schema keeper; none in public (another program shares the server).
    let public: i64 = c
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(public, 0);
    let tables: Vec<String> = c
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'keeper' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for t in [
        "audit_events",
        "bootstrap_tokens",
        "cloud_profiles",
        "cloud_providers",
        "cloud_vms",
        "name_counters",
        "schema_migrations",
        "soul_seeds",
        "souls",
    ] {
        assert!(tables.iter().any(|x| x == t), "{t} in {tables:?}");
    }
    // The profiles' foreign key is RESTRICT in the database itself.
    let rule: String = c
        .query_one(
            "SELECT delete_rule::text FROM information_schema.referential_constraints
             WHERE constraint_schema = 'keeper' AND constraint_name = 'cloud_profiles_provider_fkey'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rule, "RESTRICT");
    db.drop_now().await;
}

#[tokio::test]
async fn a_changed_or_newer_migration_stops_keeper() {
    let Some(db) = TestDb::create("a_changed_or_newer_migration_stops_keeper").await else {
        return;
    };
    let p = pool(&db.url, 2).unwrap();
    migrate(&p).await.unwrap();
    assert!(
        migrate(&p).await.unwrap().is_empty(),
        "nothing pending twice"
    );
    let c = db.client().await;
    c.execute(
        "UPDATE keeper.schema_migrations SET checksum = 'edited' WHERE version = 1",
        &[],
    )
    .await
    .unwrap();
    let e = migrate(&p).await.unwrap_err();
    assert_eq!(e.code, "registry.schema");
    assert!(e.message.contains("checksum"), "{e}");
    let e = keeper::Keeper::connect(
        &db.url,
        Arc::new(keeper::vault::FileVault::new("vault")),
        Arc::new(keeper::drivers::OrcaDrivers),
        keeper::cloud::Settings::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "registry.schema", "keeper does not start");
    c.execute("DELETE FROM keeper.schema_migrations", &[])
        .await
        .unwrap();
    c.execute(
        "INSERT INTO keeper.schema_migrations (version, name, checksum) VALUES (99, 'future', 'x')",
        &[],
    )
    .await
    .unwrap();
    let e = migrate(&p).await.unwrap_err();
    assert!(e.message.contains("newer"), "{e}");
    db.drop_now().await;
}

#[tokio::test]
async fn an_unreachable_database_is_a_clear_error_without_its_password() {
    // A closed port on this machine: no server answers there.
    let url = "postgres://keeper:hunter2@127.0.0.1:9/keeper";
    let p = pool(url, 1).unwrap();
    let e = migrate(&p).await.unwrap_err();
    assert_eq!(e.code, "registry.unavailable");
    assert!(!e.to_string().contains("hunter2"), "{e}");
    let e = pool("not a url at all ::", 1).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("DATABASE_URL"));
}

#[tokio::test]
async fn a_caller_waiting_on_a_pool_in_use_fails_naming_the_database_pool() {
    let Some(db) =
        TestDb::create("a_caller_waiting_on_a_pool_in_use_fails_naming_the_database_pool").await
    else {
        return;
    };
    let p = keeper::db::pool_with_wait(&db.url, 1, std::time::Duration::from_millis(200)).unwrap();
    let held = p.get().await.unwrap();
    // A guard against a wait without end (the pool's own wait is 200 ms): not a timed assertion.
    let second = tokio::time::timeout(std::time::Duration::from_secs(60), p.get())
        .await
        .expect("the pool's wait ends");
    let e = second.unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (503, "registry.unavailable"));
    assert!(e.message.contains("database pool"), "{e}");
    drop(held);
    assert!(
        p.get().await.is_ok(),
        "a connection given back serves again"
    );
    drop(p);
    db.drop_now().await;
}

#[tokio::test]
async fn an_unreachable_database_is_named_by_its_host_and_port() {
    // A closed port on this machine: no server answers there.
    let url = "postgres://keeper:hunter2@127.0.0.1:9/keeper";
    let e = keeper::Keeper::connect(
        url,
        Arc::new(keeper::vault::FileVault::new("vault")),
        Arc::new(keeper::drivers::OrcaDrivers),
        keeper::cloud::Settings::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "registry.unavailable");
    assert!(e.message.contains("127.0.0.1:9"), "{e}");
    assert!(!e.to_string().contains("hunter2"), "{e}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_keeper"))
        .arg("migrate")
        .env("DATABASE_URL", url)
        .env("KEEPER_LOG", "trace")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("no PostgreSQL connection to 127.0.0.1:9"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
