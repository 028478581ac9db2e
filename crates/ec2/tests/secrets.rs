//! Secrets (the secret key, user data) in no Debug, error or trace, at every level. Its own test
//! binary: its subscriber is the thread's default, and tests running beside it on other threads made
//! `tracing`'s callsite interest race, so that its spans were sometimes not recorded at all.

mod support;

use orca_machines::Provider;
use support::{ec2_error, env, made, rule, Fault};

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

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

#[tokio::test]
async fn secrets_never_show() {
    let Some(e) = env("secrets_never_show").await else {
        return;
    };
    // Everything logged while this test runs (on this thread: a current-thread runtime), at every level.
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let p = e.provider("owner-1").await;
    let shown = format!("{p:?} {:?}", e.builder());
    assert!(!shown.contains(support::SECRET), "{shown}");
    let user_data = format!("password={}", support::SECRET);
    let spec = e.spec("sec-1").with_user_data(&user_data);
    assert!(!format!("{spec:?}").contains(support::SECRET));
    e.proxy.inject(rule(
        "RunInstances",
        ec2_error(400, "InvalidParameterValue"),
        1,
    ));
    let err = p.create(&spec).await.unwrap_err();
    assert!(
        !format!("{err} {err:?}").contains(support::SECRET),
        "{err:?}"
    );
    e.proxy.inject(rule("RunInstances", Fault::DropAnswer, 1));
    let m = made(p.create(&spec).await.unwrap());
    assert!(p.delete(&m.id).await.unwrap());

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("orca.call") && logs.contains("RunInstances"),
        "the calls were traced"
    );
    let encoded = aws_smithy_types::base64::encode(user_data.as_bytes());
    for secret in [support::SECRET, encoded.as_str()] {
        assert!(!logs.contains(secret), "a secret was logged");
    }
}
