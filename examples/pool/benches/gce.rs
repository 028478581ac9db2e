//! 100 creates and 100 deletes by the autoscaler on the fake Compute Engine API, whose operations
//! take 10 s of tokio's paused clock: the time as a ratio to the floor, the requests as a ratio to
//! the fewest, the 429s; at `--parallel` 4, 8, 20 and at the default settings. The fake has no rate
//! limit (Compute Engine's are per minute and far above this), so the floor is one call's time.
//! Run: `cargo bench -p orca-pool --bench gce`.

mod common;

use common::{Fake, ACTION_TIME};
use orca_fakes::gce::{FakeGce, NETWORK, PROJECT, SUBNET, ZONE};

fn main() {
    common::main("Compute Engine", None, |_| async move {
        let fake = FakeGce::start().await.expect("fake");
        fake.set_operation_time(ACTION_TIME);
        let dir = tempfile::tempdir().expect("dir");
        let key = dir.path().join("sa.json");
        std::fs::write(&key, fake.service_account_json()).expect("key");
        Fake {
            kind: "gce",
            settings: orca::Settings::new()
                .with("ORCA_GCE_PROJECT", PROJECT)
                .with("ORCA_GCE_ZONE", ZONE)
                .with("ORCA_GCE_NETWORK", NETWORK)
                .with("ORCA_GCE_SUBNET", SUBNET)
                .with("ORCA_GCE_CREDENTIALS_FILE", key.to_string_lossy())
                .with("ORCA_GCE_ENDPOINT", fake.endpoint()),
            offering: format!("e2-small@{ZONE}"),
            control: fake.control().clone(),
            _keep: Box::new((fake, dir)),
        }
    });
}
