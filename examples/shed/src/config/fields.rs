//! The fields of the `remote:` block that need no variable: provider, transport, environment,
//! images, sizes, disk, limits, durations and `agent_install`.

use std::collections::BTreeMap;
use std::time::Duration;

use super::file::RemoteFile;
use super::{Limits, Problems, ProviderKind, Size, Transport};
use crate::model::is_name;

const MIN_RUN: Duration = Duration::from_secs(600);
/// The longest run limit, and the longest `max_age` of a client.
pub(super) const MAX_RUN: Duration = Duration::from_secs(2880 * 3600);
const DEFAULT_RUN: Duration = Duration::from_secs(24 * 3600);
const DEFAULT_PASS: Duration = Duration::from_secs(60);

/// The shortest and longest disk a shed may have, in GB.
pub const DISK_GB_RANGE: (u32, u32) = (10, 500);

pub(super) fn provider_kind(r: &RemoteFile, p: &mut Problems) -> ProviderKind {
    let kind = p.word("remote.provider", r.provider.as_deref(), ProviderKind::Gce);
    if kind == ProviderKind::Fake && !r.allow_test_drivers {
        p.add(
            "remote.provider",
            "fake needs remote.allow_test_drivers: true",
        );
    }
    kind
}

pub(super) fn transport(r: &RemoteFile, p: &mut Problems) -> Transport {
    let transport = p.word("remote.transport", r.transport.as_deref(), Transport::Ssh);
    if transport == Transport::Local && !r.allow_test_drivers {
        p.add(
            "remote.transport",
            "local needs remote.allow_test_drivers: true",
        );
    }
    transport
}

/// The environment's name, which is part of every VM name, label and the network tag
/// `shed-<environment>`.
pub(super) fn environment(r: &RemoteFile, p: &mut Problems) -> String {
    let environment = r.environment.clone().unwrap_or_default();
    if r.environment.is_none() {
        p.add("remote.environment", "required");
    } else if !is_name(&environment, 20) {
        p.add(
            "remote.environment",
            format!("1-20 of a-z, 0-9 and -, starting with a letter (and not ending with -, as it is part of a network tag), got {environment:?}"),
        );
    }
    environment
}

/// `default_image` (answered) and the `image_aliases`.
pub(super) fn images(r: &RemoteFile, p: &mut Problems) -> String {
    let default_image = r.default_image.clone().unwrap_or_default();
    if r.default_image.is_none() {
        p.add("remote.default_image", "required");
    } else if !orca::spec::is_image(&default_image) {
        p.add(
            "remote.default_image",
            "an image name or path without spaces",
        );
    }
    for (alias, image) in &r.image_aliases {
        p.label_name(&format!("remote.image_aliases.{alias}"), "an alias", alias);
        if !orca::spec::is_image(image) {
            p.add(
                format!("remote.image_aliases.{alias}"),
                "an image name or path without spaces",
            );
        }
    }
    default_image
}

fn default_sizes(kind: ProviderKind) -> BTreeMap<String, Size> {
    let (small, large) = match kind {
        ProviderKind::Gce => ("e2-standard-2", "e2-standard-8"),
        ProviderKind::Fake => ("amd64-small", "amd64-large"),
    };
    [("standard", small, 2, 8192), ("large", large, 8, 32768)]
        .into_iter()
        .map(|(n, t, c, m)| {
            (
                n.to_string(),
                Size {
                    name: n.into(),
                    machine_type: t.into(),
                    cpus: c,
                    memory_mb: m,
                },
            )
        })
        .collect()
}

pub(super) fn sizes(
    r: &RemoteFile,
    provider: ProviderKind,
    p: &mut Problems,
) -> BTreeMap<String, Size> {
    let Some(written) = &r.sizes else {
        return default_sizes(provider);
    };
    if written.is_empty() {
        p.add("remote.sizes", "at least one size");
    }
    let mut out = BTreeMap::new();
    for (name, sz) in written {
        let field = format!("remote.sizes.{name}");
        p.label_name(&field, "a size name", name);
        if orca::spec::validate_token("machine_type", &sz.machine_type).is_err() {
            p.add(
                format!("{field}.machine_type"),
                "1 to 80 of letters, digits, '.', '_' and '-'",
            );
        }
        if sz.cpus == 0 {
            p.add(format!("{field}.cpus"), "at least 1");
        }
        if sz.memory_mb == 0 {
            p.add(format!("{field}.memory_mb"), "at least 1");
        }
        if let Some(a) = sz.arch.as_deref().filter(|a| *a != "amd64") {
            p.add(
                format!("{field}.arch"),
                format!("only amd64 images are supported, got {a:?}"),
            );
        }
        out.insert(
            name.clone(),
            Size {
                name: name.clone(),
                machine_type: sz.machine_type.clone(),
                cpus: sz.cpus,
                memory_mb: sz.memory_mb,
            },
        );
    }
    out
}

pub(super) fn default_size(
    r: &RemoteFile,
    sizes: &BTreeMap<String, Size>,
    p: &mut Problems,
) -> String {
    let default_size = r.default_size.clone().unwrap_or_else(|| "standard".into());
    if !sizes.is_empty() && !sizes.contains_key(&default_size) {
        p.add(
            "remote.default_size",
            format!(
                "{default_size:?} is not one of the sizes ({})",
                sizes.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        );
    }
    default_size
}

pub(super) fn disk_gb(r: &RemoteFile, p: &mut Problems) -> u32 {
    let disk_gb = r.disk_gb.unwrap_or(50);
    if !(DISK_GB_RANGE.0..=DISK_GB_RANGE.1).contains(&disk_gb) {
        p.add("remote.disk_gb", "10 to 500");
    }
    disk_gb
}

pub(super) fn limits(r: &RemoteFile, p: &mut Problems) -> Limits {
    let written = r.limits.clone().unwrap_or_default();
    let limits = Limits {
        max_running: written.max_running.unwrap_or(2),
        max_sheds: written.max_sheds.unwrap_or(8),
    };
    if limits.max_running == 0 {
        p.add("remote.limits.max_running", "at least 1");
    }
    if limits.max_sheds == 0 {
        p.add("remote.limits.max_sheds", "at least 1");
    }
    limits
}

/// A duration written as text (`24h`, `10m`) or as a number of seconds.
fn yaml_duration(v: &serde_yaml_ng::Value) -> Option<Duration> {
    match v {
        serde_yaml_ng::Value::String(s) => orca::settings::parse_duration(s),
        serde_yaml_ng::Value::Number(n) => n.as_u64().map(Duration::from_secs),
        _ => None,
    }
}

/// The duration of `field` when it is set and within `range` (a problem when it is set otherwise).
pub(super) fn duration_in(
    value: &Option<serde_yaml_ng::Value>,
    range: std::ops::RangeInclusive<Duration>,
    field: &str,
    rule: &str,
    p: &mut Problems,
) -> Option<Duration> {
    let d = yaml_duration(value.as_ref()?).filter(|d| range.contains(d));
    if d.is_none() {
        p.add(field, rule);
    }
    d
}

/// `max_run_duration` (10m to 2880h) and `pass_interval` (1s to 1h).
pub(super) fn durations(r: &RemoteFile, p: &mut Problems) -> (Duration, Duration) {
    let max_run = duration_in(
        &r.max_run_duration,
        MIN_RUN..=MAX_RUN,
        "remote.max_run_duration",
        "a duration from 10m to 2880h (like 24h)",
        p,
    );
    let pass = duration_in(
        &r.pass_interval,
        Duration::from_secs(1)..=Duration::from_secs(3600),
        "remote.pass_interval",
        "a duration from 1s to 1h",
        p,
    );
    (max_run.unwrap_or(DEFAULT_RUN), pass.unwrap_or(DEFAULT_PASS))
}

pub(super) fn agent_install(r: &RemoteFile, p: &mut Problems) -> String {
    let words = ["incompatible", "always", "never"];
    p.one_of("remote.agent_install", r.agent_install.as_deref(), &words)
}
