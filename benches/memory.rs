//! The in-memory provider's request counts per operation, beside the ideal, and the client's own time
//! per call. The baseline the cloud benches are read against. Run: `cargo bench --bench memory`.

use std::time::Instant;

use orca::memory::MemoryCloud;
use orca::{MachineSpec, Provider};

#[tokio::main(flavor = "current_thread")]
async fn main() -> orca::Result<()> {
    let cloud = MemoryCloud::new();
    let n = 1000usize;
    let page = 50usize;
    let p = cloud.provider("bench")?.with_page_size(page);

    let before = cloud.requests();
    let t = Instant::now();
    for i in 0..n {
        p.create(&MachineSpec::new(
            format!("b-{i}"),
            "amd64-small",
            "zone-a",
            "bench",
        ))
        .await?;
    }
    let create = t.elapsed();
    let create_requests = cloud.requests() - before;

    let before = cloud.requests();
    let t = Instant::now();
    let listed = p.machines("bench").await?;
    let list = t.elapsed();
    let list_requests = cloud.requests() - before;
    assert_eq!(listed.len(), n);
    let ideal = n.div_ceil(page) as u64;

    let before = cloud.requests();
    let t = Instant::now();
    for m in &listed {
        p.delete(&m.id).await?;
    }
    let delete = t.elapsed();
    let delete_requests = cloud.requests() - before;

    println!("memory provider, {n} machines, page size {page}");
    println!(
        "create: {create_requests} requests ({:.2} per machine, ideal 1), {:.1} us per create",
        create_requests as f64 / n as f64,
        create.as_micros() as f64 / n as f64
    );
    println!(
        "list:   {list_requests} requests (ideal ceil({n}/{page}) = {ideal}, ratio {:.2}), {:.1} ms",
        list_requests as f64 / ideal as f64,
        list.as_secs_f64() * 1e3
    );
    println!(
        "delete: {delete_requests} requests ({:.2} per machine: one read of the owner labels, one delete), {:.1} us per delete",
        delete_requests as f64 / n as f64,
        delete.as_micros() as f64 / n as f64
    );
    Ok(())
}
