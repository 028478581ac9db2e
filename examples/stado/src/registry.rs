//! The registry: the fleet's targets (a cloud host is one with a `cloud` declaration) and
//! `cloud_hosts` (`admit_from`: the fleet hosts whose addresses cloud hosts admit on SSH; `egress`: the
//! addresses those hosts were last measured at, with the time).
//!
//! `stado registry set --path P --value JSON` sets one value; fields stado does not know are kept.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;

use orca::fs::FileLock;
use orca::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::Failure;
use crate::files::{read_json, write_json};
use crate::home::Home;

/// The registry file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Registry {
    /// Every target of the fleet.
    #[serde(default)]
    pub targets: Vec<Target>,
    /// What cloud hosts need from the fleet.
    #[serde(default)]
    pub cloud_hosts: CloudHosts,
    /// Fields stado does not know, kept as they are.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `cloud_hosts` in the registry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CloudHosts {
    /// The fleet hosts whose public addresses cloud hosts admit on SSH; `None` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admit_from: Option<Vec<String>>,
    /// Each admit_from host's public address as last read, with when.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub egress: BTreeMap<String, Egress>,
    /// Fields stado does not know.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// A fleet host's public address as read over its host channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Egress {
    /// The address the product site saw the request come from.
    pub address: String,
    /// When it was read.
    pub read_at: Timestamp,
}

/// A fleet target: a host stado reaches over SSH.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// Its identifier.
    pub name: String,
    /// Its address (IP or DNS name).
    #[serde(default)]
    pub address: String,
    /// The account stado logs in as (default: the local account's name, as ssh does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The SSH port (default 22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The private key stado logs in with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<PathBuf>,
    /// The known_hosts file pinning its host key (under the target's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_hosts: Option<PathBuf>,
    /// The cloud declaration of a cloud host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud: Option<CloudDecl>,
    /// Fields stado does not know.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `targets[].cloud`: what stado made for a cloud host and how to judge it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloudDecl {
    /// The provider kind (`azure`, `fake`).
    pub provider: String,
    /// Its location.
    pub location: String,
    /// Its size.
    pub size: String,
    /// Its OS disk, GiB.
    pub disk_gb: u32,
    /// The priced hour, USD.
    pub hourly_usd: f64,
    /// Where that hour was priced.
    pub priced_in: String,
    /// Idle minutes after which reap returns it.
    pub idle_minutes: u32,
    /// Its public address.
    pub address: String,
    /// The VM's id.
    pub vm_id: String,
    /// When the cloud made it.
    pub created_at: Timestamp,
    /// Whether its create recorded it whole (`ready`); or it is declared before the cloud is asked
    /// for its VM (`creating`: no VM id or address yet, its VM found by its name) and from the
    /// moment its VM was made until the create enrols and records it (`enrolling`), either of which
    /// stays when the create stopped half-way (list, delete and reap see it and can remove it); or
    /// its first boot did not finish cleanly (`first_boot_failed`). Absent (a registry written
    /// before this field): `ready`.
    #[serde(default)]
    pub state: CloudState,
}

/// How far a cloud host's create went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloudState {
    /// Its create is asking the cloud for its VM, or stopped while it did: the VM may stand, and
    /// the create never learnt its id (`vm_id` and `address` are empty). It is found by its name in
    /// stado's pool.
    Creating,
    /// Its VM is made and billed; the create has not enrolled and recorded it (yet).
    Enrolling,
    /// Enrolled and recorded whole (step 8).
    #[default]
    Ready,
    /// Enrolled and recorded, but its first boot did not finish cleanly (step 9): it is billed and
    /// reachable, and delete and reap return it as any other.
    FirstBootFailed,
}

impl Target {
    /// A target `name` at `address`.
    pub fn new(name: impl Into<String>, address: impl Into<String>) -> Target {
        Target {
            name: name.into(),
            address: address.into(),
            ..Target::default()
        }
    }
}

impl Registry {
    /// The registry in `home` (empty when there is none yet).
    pub fn load(home: &Home) -> Result<Registry, Failure> {
        read_json(&home.registry_path())
    }

    /// The target `name`.
    pub fn target(&self, name: &str) -> Option<&Target> {
        self.targets.iter().find(|t| t.name == name)
    }

    /// The cloud hosts of provider `kind`, in registry order.
    pub fn cloud_hosts(&self, kind: &str) -> Vec<(&Target, &CloudDecl)> {
        self.targets
            .iter()
            .filter_map(|t| t.cloud.as_ref().map(|c| (t, c)))
            .filter(|(_, c)| c.provider == kind)
            .collect()
    }

    /// Puts `t` in place of the target of its name, or adds it.
    pub fn put_target(&mut self, t: Target) {
        match self.targets.iter_mut().find(|x| x.name == t.name) {
            Some(x) => *x = t,
            None => self.targets.push(t),
        }
    }

    /// Removes the target `name`; false when there was none.
    pub fn remove_target(&mut self, name: &str) -> bool {
        let before = self.targets.len();
        self.targets.retain(|t| t.name != name);
        before != self.targets.len()
    }

    /// This registry with `value` set at `path` (`cloud_hosts`, `cloud_hosts.admit_from`,
    /// `targets.build-host`, `targets.build-host.address`, `targets.0.port`): a segment on a list
    /// selects the element of that `name` (made when missing) or that index.
    ///
    /// A change to a cloud host's declaration is refused: create and delete keep those.
    pub fn with_set(&self, path: &str, value: Value) -> Result<Registry, Failure> {
        let segments: Vec<&str> = path.split('.').collect();
        if path.is_empty() || segments.iter().any(|s| s.is_empty()) {
            return Err(Failure::invalid(format!(
                "--path {path:?}: dot-separated names, like cloud_hosts.admit_from or targets.build-host.address"
            )));
        }
        let mut root = serde_json::to_value(self).map_err(|e| Failure::new(e.to_string()))?;
        set_at(&mut root, &segments, value, path)?;
        let next: Registry = serde_json::from_value(root).map_err(|e| {
            Failure::invalid(format!(
                "--path {path}: the registry would not be valid: {e}; nothing was changed"
            ))
        })?;
        if next.targets.iter().any(|t| t.name.is_empty()) {
            return Err(Failure::invalid(format!(
                "--path {path}: a target needs a name"
            )));
        }
        // A new target is made with its address: a mistyped name under `targets.` would otherwise
        // make a target of that name with nothing but the one field set.
        if let Some(t) = next
            .targets
            .iter()
            .find(|t| t.address.is_empty() && self.target(&t.name).is_none())
        {
            let known: Vec<&str> = self.targets.iter().map(|t| t.name.as_str()).collect();
            return Err(Failure::invalid(format!(
                "--path {path}: there is no target {:?} (targets: {}), and a new one needs its address: set targets.{}.address first; nothing was changed",
                t.name,
                if known.is_empty() { "none".to_string() } else { known.join(", ") },
                t.name
            )));
        }
        let clouds = |r: &Registry| -> BTreeMap<String, (Target, CloudDecl)> {
            r.targets
                .iter()
                .filter_map(|t| t.cloud.clone().map(|c| (t.name.clone(), (t.clone(), c))))
                .collect()
        };
        let (was, now) = (clouds(self), clouds(&next));
        if let Some(name) = was
            .keys()
            .chain(now.keys())
            .find(|n| was.get(*n) != now.get(*n))
        {
            return Err(Failure::refused(format!(
                "--path {path} would change the cloud host {name}: stado cloud host create and delete keep cloud hosts; nothing was changed"
            )));
        }
        Ok(next)
    }
}

/// The registry loaded under its write lock, which it holds until dropped: what a command that reads
/// the registry, acts and writes it holds from its first step to its last.
///
/// Each write first checks that the lock is still this process's ([`FileLock::still_held`]): an
/// operator who removes the lock file lets another stado lock a new one at the same path, and a
/// write after that would put back what this one read over what the other wrote. Such a write is
/// refused, and the command stops.
#[derive(Debug)]
pub struct Held {
    registry: Registry,
    lock: FileLock,
    path: PathBuf,
}

impl Held {
    /// Takes the registry's write lock (refused at once when another stado holds it) and loads it.
    pub fn take(home: &Home) -> Result<Held, Failure> {
        let lock = home.lock(&home.registry_path())?;
        Ok(Held {
            registry: Registry::load(home)?,
            lock,
            path: home.registry_path(),
        })
    }

    /// Writes the registry back, atomically, while the lock is still this process's; else writes
    /// nothing and refuses.
    pub fn save(&self) -> Result<(), Failure> {
        self.lock.still_held().map_err(|e| {
            Failure::new(format!("{} was not written: {e}", self.path.display()))
                .with_code("lock_lost")
        })?;
        write_json(&self.path, &self.registry)
    }
}

impl Deref for Held {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        &self.registry
    }
}

impl DerefMut for Held {
    fn deref_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }
}

fn set_at(node: &mut Value, segments: &[&str], value: Value, path: &str) -> Result<(), Failure> {
    let Some((first, rest)) = segments.split_first() else {
        *node = value;
        return Ok(());
    };
    if node.is_null() {
        *node = Value::Object(Map::new());
    }
    match node {
        Value::Object(map) => {
            let child = map.entry(first.to_string()).or_insert(Value::Null);
            set_at(child, rest, value, path)
        }
        Value::Array(items) => {
            let by_name = items
                .iter()
                .position(|i| i.get("name").and_then(Value::as_str) == Some(first));
            let index = match (by_name, first.parse::<usize>()) {
                (Some(i), _) => i,
                (None, Ok(i)) if i < items.len() => i,
                (None, Ok(_)) => {
                    return Err(Failure::invalid(format!(
                        "--path {path}: no element {first}"
                    )))
                }
                (None, Err(_)) => {
                    items.push(serde_json::json!({ "name": first }));
                    items.len() - 1
                }
            };
            let child = &mut items[index];
            let mut value = value;
            if rest.is_empty() {
                // An element set whole keeps its name.
                let name = child.get("name").and_then(Value::as_str);
                if let (Value::Object(m), Some(name)) = (&mut value, name) {
                    m.insert("name".into(), Value::String(name.to_string()));
                }
            }
            set_at(child, rest, value, path)
        }
        other => Err(Failure::invalid(format!(
            "--path {path}: {first} is inside a {} value, not an object",
            match other {
                Value::String(_) => "text",
                Value::Number(_) => "number",
                Value::Bool(_) => "true/false",
                _ => "plain",
            }
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_documented_admit_from_example_sets_cloud_hosts() {
        let r = Registry::default()
            .with_set(
                "cloud_hosts",
                json!({"admit_from": ["build-host", "always-on-mac"]}),
            )
            .unwrap();
        assert_eq!(
            r.cloud_hosts.admit_from.as_deref(),
            Some(&["build-host".to_string(), "always-on-mac".to_string()][..])
        );
    }

    #[test]
    fn targets_are_addressed_by_name_and_unknown_fields_kept() {
        let r = Registry::default()
            .with_set(
                "targets.build-host",
                json!({"address": "192.0.2.10", "user": "ci", "labels": ["x"]}),
            )
            .unwrap()
            .with_set("targets.build-host.port", json!(2222))
            .unwrap();
        let t = r.target("build-host").unwrap();
        assert_eq!((t.address.as_str(), t.port), ("192.0.2.10", Some(2222)));
        assert_eq!(t.other["labels"], json!(["x"]));
        let e = r
            .with_set("targets.build-host.port", json!("many"))
            .unwrap_err();
        assert!(e.message().contains("would not be valid"), "{e}");
    }

    #[test]
    fn a_field_of_a_target_that_does_not_exist_is_refused_naming_the_targets() {
        let r = Registry::default()
            .with_set("targets.build-host.address", json!("192.0.2.10"))
            .unwrap();
        let e = r.with_set("targets.nope.port", json!(2222)).unwrap_err();
        let m = e.message();
        assert!(
            m.contains("no target \"nope\"") && m.contains("build-host"),
            "{m}"
        );
        assert!(r.target("nope").is_none());
        // Set with its address, a new target is made.
        let r = r
            .with_set("targets.mac.address", json!("192.0.2.11"))
            .unwrap();
        assert_eq!(r.target("mac").unwrap().address, "192.0.2.11");
    }

    #[test]
    fn a_cloud_hosts_declaration_cannot_be_changed_by_set() {
        let mut r = Registry::default();
        let mut t = Target::new("h1", "198.51.100.2");
        t.cloud = Some(CloudDecl {
            provider: "fake".into(),
            location: "zone-a".into(),
            size: "amd64-small".into(),
            disk_gb: 64,
            hourly_usd: 0.0832,
            priced_in: "zone-a".into(),
            idle_minutes: 30,
            address: "198.51.100.2".into(),
            vm_id: "m-1".into(),
            created_at: chrono::Utc::now(),
            state: CloudState::Ready,
        });
        r.put_target(t);
        for (path, v) in [
            ("targets.h1.address", json!("192.0.2.1")),
            ("targets", json!([])),
            ("targets.h1.cloud.idle_minutes", json!(5)),
        ] {
            let e = r.with_set(path, v).unwrap_err();
            assert!(
                e.message().contains("would change the cloud host h1"),
                "{path}: {e}"
            );
        }
        assert!(r.with_set("cloud_hosts.admit_from", json!(["a"])).is_ok());
    }
}
