//! Traces of the driver carry no key, token or user data. Its own test binary: tracing caches callsite
//! interest process-wide, so a test that installs a subscriber must not share a process with others.

use orca_fakes::gce::{FakeGce, NETWORK, PROJECT, SUBNET, TEST_ONLY_RSA_KEY_PEM, ZONE};
use orca_fakes::{Fault, Rule};
use orca_gce::{Config, GceProvider};
use orca_machines::{MachineSpec, Provider, RetryPolicy};
use reqwest::Method;
use serde_json::json;

async fn provider(fake: &FakeGce, owner: &str) -> GceProvider {
    let config = Config::builder()
        .project(PROJECT)
        .zone(ZONE)
        .network(NETWORK)
        .subnet(SUBNET)
        .credentials_json(fake.service_account_json())
        .endpoint(fake.endpoint())
        .retry(RetryPolicy::fast())
        .build()
        .unwrap();
    GceProvider::new(config, owner).await.unwrap()
}

#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn traces_carry_no_key_no_token_and_no_user_data() {
    let fake = FakeGce::start().await.unwrap();
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let p = provider(&fake, "stack-1").await;
    let spec = MachineSpec::new("vm-t", "e2-small", ZONE, "lab").with_user_data("password=hunter2");
    p.create(&spec).await.unwrap();
    fake.control().inject(Rule::new(
        Some(Method::GET),
        "/instances?",
        Fault::Status {
            status: 503,
            body: json!({"error": {"code": 503, "message": "backend", "errors": [{"reason": "backendError", "domain": "global", "message": "backend"}]}}),
            headers: vec![],
        },
        1,
    ));
    p.machines("lab").await.unwrap();
    p.delete("vm-t").await.unwrap();
    drop(_guard);
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("orca.call") && text.contains("provider=\"gce\""),
        "spans were traced: {text}"
    );
    assert!(
        text.contains("instances.insert") && text.contains("request_id"),
        "{text}"
    );
    let key_line = TEST_ONLY_RSA_KEY_PEM.lines().nth(3).unwrap();
    for secret in [key_line, "ya29.fake-", "hunter2", "PRIVATE KEY"] {
        assert!(!text.contains(secret), "{secret} appeared in the traces");
    }
}
