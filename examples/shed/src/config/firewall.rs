//! The `firewall:` block: its mode, the static sources or the echo services of mode auto, and the
//! refusals of a firewall that admits any address where sheds must be isolated.

use super::file::{FirewallFile, RemoteFile};
use super::resolve::Vars;
use super::{FirewallConfig, FirewallMode, Problems};
use crate::netaddr::{check_static_range, Cidr};

/// The firewall block: its mode, the sources or echo services that mode uses, and the refusals of
/// an `any`-like firewall beside service clients or an isolated default profile (neither would be
/// isolated from the other sheds).
pub(super) fn firewall(
    r: &RemoteFile,
    has_service: bool,
    default_profile: &str,
    var: &Vars<'_>,
    p: &mut Problems,
) -> FirewallConfig {
    let fw = r.firewall.clone().unwrap_or_default();
    let mode = p.word(
        "remote.firewall.mode",
        fw.mode.as_deref(),
        FirewallMode::Static,
    );
    let source_ranges = if mode == FirewallMode::Static {
        static_sources(&fw, var, p)
    } else {
        if !fw.source_ranges.is_empty() || fw.source_ranges_env.is_some() {
            p.add(
                "remote.firewall.source_ranges",
                format!(
                    "only static mode uses source ranges (mode {})",
                    mode.as_str()
                ),
            );
        }
        Vec::new()
    };
    echo_urls(&fw, mode, p);
    if mode == FirewallMode::Any && !fw.acknowledge_any {
        p.add(
            "remote.firewall.acknowledge_any",
            "must be true for mode: any",
        );
    }
    let any_like = mode == FirewallMode::Any || fw.acknowledge_any;
    if any_like && has_service {
        p.add(
            "remote.firewall.mode",
            "firewall.mode: any (or acknowledge_any: true) is refused beside service clients",
        );
    }
    if any_like && default_profile == "isolated" {
        p.add(
            "remote.firewall.mode",
            "firewall.mode: any (or acknowledge_any: true) is refused beside an isolated default profile",
        );
    }
    FirewallConfig {
        mode,
        source_ranges,
        acknowledge_any: fw.acknowledge_any,
        echo_urls: fw.echo_urls.clone(),
    }
}

/// Static mode's sources: exactly one of the list and the variable (`SHED_REMOTE_SOURCE_RANGES`
/// when neither is set), not empty, each an IPv4 CIDR a rule may name; sorted, without repeats.
fn static_sources(fw: &FirewallFile, var: &Vars<'_>, p: &mut Problems) -> Vec<Cidr> {
    let (field, list): (String, Vec<String>) = match (&fw.source_ranges[..], &fw.source_ranges_env)
    {
        ([_, ..], Some(_)) => {
            p.add(
                "remote.firewall.source_ranges",
                "set exactly one of source_ranges and source_ranges_env",
            );
            return Vec::new();
        }
        ([_, ..], None) => (
            "remote.firewall.source_ranges".into(),
            fw.source_ranges.clone(),
        ),
        ([], configured) => match var.named(configured, "SHED_REMOTE_SOURCE_RANGES") {
            (name, Some(v)) => (
                name,
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect(),
            ),
            (name, None) => {
                p.add(
                    name,
                    "not set: static mode needs remote.firewall.source_ranges or this variable (comma-separated IPv4 CIDRs)",
                );
                return Vec::new();
            }
        },
    };
    if list.is_empty() {
        p.add(&field, "the list is empty");
    }
    let mut ranges = Vec::new();
    for s in &list {
        match check_static_range(s, fw.acknowledge_any) {
            Ok(c) => ranges.push(c),
            Err(e) => p.add(&field, e),
        }
    }
    ranges.sort();
    ranges.dedup();
    ranges
}

/// Auto mode's echo services: at least two, each https on a host of its own (one service alone
/// must never move the rule); no other mode takes any.
fn echo_urls(fw: &FirewallFile, mode: FirewallMode, p: &mut Problems) {
    if mode != FirewallMode::Auto {
        if !fw.echo_urls.is_empty() {
            p.add(
                "remote.firewall.echo_urls",
                format!("only auto mode uses echo services (mode {})", mode.as_str()),
            );
        }
        return;
    }
    if fw.echo_urls.len() < 2 {
        p.add(
            "remote.firewall.echo_urls",
            "auto mode needs at least two https services on different hosts",
        );
    }
    let mut hosts: Vec<String> = Vec::new();
    for u in &fw.echo_urls {
        match check_echo_url(u) {
            Ok(host) => {
                if hosts.contains(&host) {
                    p.add(
                        "remote.firewall.echo_urls",
                        format!("two entries on the host {host}: each service must be on a different host"),
                    );
                }
                hosts.push(host);
            }
            Err(e) => p.add("remote.firewall.echo_urls", e),
        }
    }
}

/// Checks an echo service URL: https, a host name in ASCII (punycode for others), no user or
/// password. Answers its host name, lower-case.
pub fn check_echo_url(u: &str) -> Result<String, String> {
    if !u.is_ascii() {
        return Err(format!(
            "{u:?}: write a host name outside ASCII in its punycode form, so that it has one spelling"
        ));
    }
    let url = url::Url::parse(u).map_err(|e| format!("{u:?} is not a URL: {e}"))?;
    if url.scheme() != "https" {
        return Err(format!("{u:?} is not https"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("{u:?} holds a user or password"));
    }
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| format!("{u:?} has no host"))?;
    Ok(host.trim_end_matches('.').to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_urls() {
        assert_eq!(
            check_echo_url("https://Echo.Example/").unwrap(),
            "echo.example"
        );
        assert!(check_echo_url("http://echo.example/").is_err());
        assert!(check_echo_url("https://bücher.example/").is_err());
        assert_eq!(
            check_echo_url("https://xn--bcher-kva.example/").unwrap(),
            "xn--bcher-kva.example"
        );
        assert!(check_echo_url("https://u:p@echo.example/").is_err());
    }
}
