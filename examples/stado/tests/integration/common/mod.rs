//! A stado home with a complete profile and a fleet host, on a provider and a simulated fleet.
#![allow(dead_code)]

use std::sync::Arc;

use stado::channel::FakeFleet;
use stado::profile::Profile;
use stado::registry::{Registry, Target};
use stado::{CreateReport, CreateRequest, Home, Stado};

pub const WORDS: &str = "Keep twenty dollars for the month's last builds.";

/// Writes the profile every command needs: `kind` enabled, every binding, the floor ruling, api.url
/// (keeping what the profile holds already).
pub fn profile(home: &Home, kind: &str) {
    let mut p = Profile::load(home).unwrap();
    for (k, v) in [
        ("providers", kind),
        (
            "azure.subscription_id",
            "00000000-0000-4000-8000-0000000000a2",
        ),
        ("azure.resource_group", "orca-rg"),
        ("azure.vnet", "stado-net"),
        ("azure.subnet", "hosts"),
        (
            "azure.image_urn",
            "Canonical:ubuntu-24_04-lts:server:latest",
        ),
        ("azure.vm_username", "stado"),
        ("azure.credit_floor.amount", "20"),
        ("azure.credit_floor.currency", "USD"),
        ("azure.credit_floor.ruling", "R-1"),
        ("azure.credit_floor.words", WORDS),
        ("api.url", "https://stado.example"),
    ] {
        p.set(k, v).unwrap();
    }
    p.save(home).unwrap();
}

/// Registers the fleet host `build-host` and names it in `cloud_hosts.admit_from`.
pub fn fleet_host(home: &Home) {
    let mut r = Registry::load(home).unwrap();
    let mut t = Target::new("build-host", "192.0.2.10");
    t.user = Some("ci".into());
    r.put_target(t);
    r.cloud_hosts.admit_from = Some(vec!["build-host".into()]);
    save_registry(home, &r);
}

pub fn request(name: &str, location: &str, size: &str) -> CreateRequest {
    CreateRequest {
        name: name.into(),
        location: location.into(),
        size: size.into(),
        disk_gb: 64,
        idle_minutes: 30,
    }
}

/// A fresh home under `dir` with the profile and the fleet host.
pub fn home(dir: &std::path::Path, kind: &str) -> Home {
    let home = Home::open(dir.join("home")).unwrap();
    profile(&home, kind);
    fleet_host(&home);
    home
}

/// The owner the home's machines are made under.
pub fn owner(home: &Home) -> String {
    Profile::load(home).unwrap().owner()
}

/// stado in `home` on `provider` with the simulated fleet `fleet`.
pub fn stado_on(
    home: Home,
    kind: &str,
    provider: Arc<dyn orca::Provider>,
    fleet: &FakeFleet,
) -> Stado {
    let mut s = Stado::with(home, kind, provider, Arc::new(fleet.clone()));
    s.sim = Some(fleet.clone());
    s
}

/// Writes `r` as `home`'s registry, atomically, under the registry's write lock taken for this write
/// alone (a command that writes it holds it throughout: `registry::Held`).
pub fn save_registry(home: &Home, r: &Registry) {
    let _lock = home.lock(&home.registry_path()).unwrap();
    stado::files::write_json(&home.registry_path(), r).unwrap();
}

/// The lines a person reads of a create, step by step.
pub fn lines(r: &CreateReport) -> Vec<String> {
    r.steps
        .iter()
        .flat_map(|s| s.lines.iter().cloned())
        .collect()
}

/// Every text a command showed: its JSON and its lines.
pub fn shown(report: &impl serde::Serialize, lines: &[String]) -> String {
    format!(
        "{}\n{}",
        serde_json::to_string(report).unwrap(),
        lines.join("\n")
    )
}

/// The cloud hosts the registry declares, as (name, vm id), sorted.
pub fn declared(s: &Stado) -> Vec<(String, String)> {
    let r = Registry::load(&s.home).unwrap();
    let mut v: Vec<(String, String)> = r
        .cloud_hosts(&s.kind)
        .into_iter()
        .map(|(t, c)| (t.name.clone(), c.vm_id.clone()))
        .collect();
    v.sort();
    v
}
