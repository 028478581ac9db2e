//! keeper under a least-privilege role: after the first start (the migrations, by the owner), keeper
//! runs with USAGE on its schema and SELECT, INSERT, UPDATE on its tables; revoking INSERT on the audit
//! table fails every step (`audit.failed`), and deletes of audit events are refused.

use crate::support;

use std::sync::Arc;

use keeper::vault::FileVault;
use keeper::Keeper;
use serde_json::json;
use support::{hosts, TestDrivers, World};

/// A login role made for one test, dropped at its end.
struct Role {
    name: String,
}

impl Role {
    async fn create(w: &World) -> Role {
        let mut b = [0u8; 4];
        getrandom::fill(&mut b).unwrap();
        let name = format!("keeper_test_app_{}", hex::encode(b));
        let c = w.client().await;
        c.batch_execute(&format!(
            "CREATE ROLE {name} LOGIN;
             GRANT CONNECT ON DATABASE {db} TO {name};
             GRANT USAGE ON SCHEMA keeper TO {name};
             GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA keeper TO {name};
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA keeper TO {name};",
            db = w.db.name
        ))
        .await
        .unwrap();
        Role { name }
    }

    fn url(&self, w: &World) -> String {
        let mut u = url::Url::parse(&w.db.url).unwrap();
        u.set_username(&self.name).unwrap();
        u.set_password(None).unwrap();
        u.to_string()
    }

    /// Drops the role; its test database must be gone already (with the grants in it).
    async fn drop_now(self) {
        let admin = support::admin().await;
        admin
            .batch_execute(&format!("DROP ROLE IF EXISTS {}", self.name))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn keeper_runs_with_least_privilege_and_a_revoked_audit_insert_fails_steps() {
    let Some(w) =
        World::new("keeper_runs_with_least_privilege_and_a_revoked_audit_insert_fails_steps").await
    else {
        return;
    };
    let role = Role::create(&w).await;
    let app = Keeper::connect(
        &role.url(&w),
        Arc::new(FileVault::new(&w.vault)),
        Arc::new(TestDrivers {
            cloud: w.cloud.clone(),
            state: w.state.clone(),
            knobs: w.knobs.clone(),
            plugins: w.plugins.clone(),
        }),
        keeper::cloud::Settings::default(),
    )
    .await
    .expect("keeper starts without any privilege to create");
    let out = app
        .run_step(
            "core.cloud.created",
            &json!({"provider": "lab", "profile": "small", "count": 2}),
            "app",
        )
        .await
        .unwrap();
    let ids: Vec<_> = hosts(&out).iter().map(|h| h["vm_id"].clone()).collect();
    let sids: Vec<_> = hosts(&out).iter().map(|h| h["sid"].clone()).collect();

    // The application's role cannot erase the trail.
    let e = tokio_postgres::connect(&role.url(&w), tokio_postgres::NoTls)
        .await
        .map(|(c, conn)| {
            tokio::spawn(conn);
            c
        })
        .unwrap()
        .execute("DELETE FROM keeper.audit_events", &[])
        .await
        .unwrap_err();
    assert!(e.as_db_error().is_some(), "{e}");

    // A revoked grant on the audit table: the step fails, and the cascade does not commit.
    w.client()
        .await
        .batch_execute(&format!(
            "REVOKE INSERT ON keeper.audit_events FROM {}",
            role.name
        ))
        .await
        .unwrap();
    let f = app
        .run_step(
            "core.cloud.destroyed",
            &json!({"provider": "lab", "vm_ids": ids, "sids": sids}),
            "app",
        )
        .await
        .unwrap_err();
    assert_eq!(f.error.code, "audit.failed", "{}", f.error);
    assert!(f.error.message.contains("permission denied"), "{}", f.error);
    assert_eq!(
        w.count("SELECT 1 FROM keeper.souls WHERE status = 'pending'")
            .await,
        2
    );
    drop(app);
    w.finish().await;
    role.drop_now().await;
}
