//! A traced run (every level, every crate) shows a span per Resource Manager call with its request id,
//! and never the token, the client secret or the user data.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use orca_fakes::azure::TOKEN;
use orca_machines::{MachineSpec, Provider};

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn traces_name_calls_and_hide_secrets() {
    let buf = Buf::default();
    let out = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_ansi(false)
        .with_writer(move || out.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let f = fake().await;
    let p = provider(&f, "stack-1").await;
    let user_data = "#cloud-config\nwrite_files: [{path: /etc/k, content: user-data-secret-42}]\n";
    let m = p
        .create(&MachineSpec::new("vm-t", AMD, LOCATION, "lab").with_user_data(user_data))
        .await
        .unwrap()
        .machine()
        .unwrap();
    p.machines("lab").await.unwrap();
    p.delete(&m.id).await.unwrap();
    let e = orca_azure::AzureProvider::new(
        settings(&f)
            .credential(orca_azure::Credential::ClientSecret {
                tenant_id: "72f988bf-86f1-41af-91ab-2d7cd011db47".into(),
                client_id: "app".into(),
                secret: "client-secret-hunter2".to_string().into(),
            })
            .build()
            .unwrap(),
        "stack-1",
    )
    .await
    .unwrap();
    tracing::info!(provider = ?e, "built");

    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("orca.call") && text.contains("provider=\"azure\""),
        "no span per call:\n{text}"
    );
    assert!(
        text.contains("request_id=\"fake-"),
        "no request id:\n{text}"
    );
    assert!(text.contains("operation=\"create VM vm-t\""), "{text}");
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(user_data);
    for secret in [
        TOKEN,
        "client-secret-hunter2",
        "user-data-secret-42",
        b64.as_str(),
    ] {
        assert!(!text.contains(secret), "{secret} in the trace");
    }
}
