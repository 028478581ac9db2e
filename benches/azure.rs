//! The Azure driver against the fake Resource Manager: requests per create and per delete (each a count
//! of calls, beside the ideal), and listing N VMs (calls beside pages). Run: `cargo bench --bench azure`.
//!
//! Requests measured (60 machines), before contract v2 / after:
//! - create: 12 / 12 per machine (the first create +1 resource SKU page, now filtered by location);
//! - delete: 16 / 11 per machine (the VM takes its interface and address with it; since then +1, the
//!   read that the VM's OS disk went with it);
//! - list: 3 pages of each list before (VMs, the subscription's `statusOnly` list, addresses); now the
//!   resource group's VM, interface and address lists plus one state read per pool VM, since no
//!   resource-group scoped call returns power states (the subscription-wide one needs a
//!   subscription-scoped role, which a resource-group principal lacks).

use std::time::{Duration, Instant};

use orca::azure::{AzureProvider, Config};
use orca::{MachineSpec, Provider, RetryPolicy};
use orca_fakes::azure::{FakeAzure, RESOURCE_GROUP, SUBSCRIPTION, TOKEN};

async fn provider(fake: &FakeAzure, owner: &str) -> orca::Result<AzureProvider> {
    let s = Config::builder()
        .subscription_id(SUBSCRIPTION)
        .resource_group(RESOURCE_GROUP)
        .vnet("orca-net")
        .subnet("hosts")
        .image("Canonical:ubuntu-24_04-lts:server:latest")
        .admin_user("orca")
        .ssh_public_key("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBench orca@bench")
        .ssh_sources(["203.0.113.7/32"])
        .arm_endpoint(fake.url())
        .prices_endpoint(fake.url())
        .token(TOKEN)
        .retry(RetryPolicy::fast())
        .poll_interval(Duration::from_millis(1))
        .build()?;
    AzureProvider::new(s, owner).await
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> orca::Result<()> {
    let fake = FakeAzure::start().await.expect("fake");
    fake.add_subnet(
        RESOURCE_GROUP,
        "orca-net-westeurope",
        "westeurope",
        "hosts",
        None,
    );
    let p = provider(&fake, "bench").await?;
    let c = fake.control();
    let n = 60usize;

    // The first create also reads the resource SKUs once (the architecture cache).
    let before = c.requests();
    p.create(
        &MachineSpec::new("b-0", "Standard_B2s", "westeurope", "bench")
            .with_user_data("#cloud-config\n"),
    )
    .await?;
    let first = c.requests() - before;

    let before = c.requests();
    let t = Instant::now();
    for i in 1..n {
        p.create(&MachineSpec::new(
            format!("b-{i}"),
            "Standard_B2s",
            "westeurope",
            "bench",
        ))
        .await?;
    }
    let create = t.elapsed();
    let create_requests = c.requests() - before;
    let per_create = create_requests as f64 / (n - 1) as f64;

    println!("azure driver against the fake Resource Manager, {n} machines");
    println!(
        "create: {per_create:.2} requests per machine (by design 12: 3 reads that the network resources are not there yet, 4 PUTs, 4 operation polls, 1 read of the VM with its instance view); \
         the first create {first} (+1 page of the location's resource SKUs, cached after); {:.2} ms per create",
        create.as_secs_f64() * 1e3 / (n - 1) as f64
    );

    for page in [1usize, 10, 50] {
        fake.set_page_size(page);
        let before = c.requests();
        let t = Instant::now();
        let listed = p.machines("bench").await?;
        let took = t.elapsed();
        let calls = c.requests() - before;
        assert_eq!(listed.len(), n);
        // The resource group's VM, interface and address lists, each n items, and one state read
        // per pool VM.
        let pages = 3 * n.div_ceil(page) as u64;
        let ideal = pages + n as u64;
        println!(
            "list {n} VMs, page size {page}: {calls} requests (by design {ideal}: {pages} pages of VMs + interfaces + public IPs, and {n} state reads; ratio {:.2}), {:.1} ms",
            calls as f64 / ideal as f64,
            took.as_secs_f64() * 1e3
        );
    }
    fake.set_page_size(100);

    let listed = p.machines("bench").await?;
    let before = c.requests();
    let t = Instant::now();
    for m in &listed {
        p.delete(&m.id).await?;
    }
    let delete = t.elapsed();
    let per_delete = (c.requests() - before) as f64 / n as f64;
    println!(
        "delete: {per_delete:.2} requests per machine (by design 11: read the VM's tags; VM delete (it takes its interface, address and disk), poll, confirm gone; \
         read the OS disk, the interface and the address (gone); the security group: read its tags, delete, poll, confirm gone); {:.2} ms per delete",
        delete.as_secs_f64() * 1e3 / n as f64
    );
    Ok(())
}
