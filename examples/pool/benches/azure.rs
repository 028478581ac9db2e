//! 100 creates and 100 deletes by the autoscaler on the fake Azure API, whose operations take 10 s
//! of tokio's paused clock: the time as a ratio to the floor, the requests as a ratio to the fewest,
//! the 429s; at `--parallel` 4, 8, 20 and at the default settings. The fake names a 5 s pause
//! before each poll and has no rate limit, so the floor is one call's time. Run: `cargo bench -p orca-pool --bench azure`.

mod common;

use std::time::Duration;

use common::{Fake, ACTION_TIME};
use orca_fakes::azure::{FakeAzure, RESOURCE_GROUP, SUBSCRIPTION, TOKEN};

/// The `Retry-After` of a running operation.
const POLL_PAUSE: Duration = Duration::from_secs(5);

fn main() {
    common::main("Azure", None, |_| async move {
        let fake = FakeAzure::start().await.expect("fake");
        fake.add_subnet(
            RESOURCE_GROUP,
            "orca-net-westeurope",
            "westeurope",
            "hosts",
            None,
        );
        fake.set_operation_time(ACTION_TIME);
        // Azure names a pause before each poll; the fake names none unless told.
        fake.set_poll_pause(POLL_PAUSE);
        let settings: orca::Settings = [
            ("ORCA_AZURE_SUBSCRIPTION_ID", SUBSCRIPTION.to_string()),
            ("ORCA_AZURE_RESOURCE_GROUP", RESOURCE_GROUP.to_string()),
            ("ORCA_AZURE_VNET", "orca-net".to_string()),
            ("ORCA_AZURE_SUBNET", "hosts".to_string()),
            (
                "ORCA_AZURE_IMAGE",
                "Canonical:ubuntu-24_04-lts:server:latest".to_string(),
            ),
            ("ORCA_AZURE_ADMIN_USER", "orca".to_string()),
            (
                "ORCA_AZURE_SSH_PUBLIC_KEY",
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTheFake orca@bench".to_string(),
            ),
            ("ORCA_AZURE_ACCESS_TOKEN", TOKEN.to_string()),
            ("ORCA_AZURE_ENDPOINT", fake.url()),
            ("ORCA_AZURE_PRICES_ENDPOINT", fake.url()),
        ]
        .into_iter()
        .collect();
        Fake {
            kind: "azure",
            settings,
            offering: "Standard_B2s@westeurope".into(),
            control: fake.control().clone(),
            _keep: Box::new(fake),
        }
    });
}
