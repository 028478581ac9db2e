//! The configuration: defaults, `*_env` variables read once, and every refusal naming its field.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use base64::Engine as _;
use shed::config::{ConfigError, FirewallMode, ProviderKind, Role, Transport};
use shed::{Config, FileConfig};

const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n";

fn gce_env() -> HashMap<String, String> {
    let mut m: HashMap<String, String> = [
        ("SHED_GCE_PROJECT", "proj-1"),
        ("SHED_GCE_ZONE", "europe-west1-b"),
        ("SHED_GCE_NETWORK", "shed-net"),
        ("SHED_GCE_SUBNET", "shed-subnet"),
        ("GOOGLE_CREDENTIALS_BASE64", "e30="),
        ("SHED_REMOTE_SOURCE_RANGES", "203.0.113.7/32"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    m.insert(
        "SHED_REMOTE_SSH_KEY".into(),
        base64::engine::general_purpose::STANDARD.encode(KEY),
    );
    m
}

fn resolve(yaml: &str, env: &HashMap<String, String>) -> Result<Config, ConfigError> {
    FileConfig::parse(yaml)?.resolve(&|k| env.get(k).cloned())
}

const MINIMAL: &str =
    "default_backend: remote\nremote:\n  environment: dev\n  default_image: shed-img\n";

fn with(extra: &str) -> String {
    format!("{MINIMAL}{extra}")
}

/// Whether a problem of `e` names `field`.
fn names(e: &ConfigError, field: &str) -> bool {
    e.problems.iter().any(|(f, _)| f == field)
}

fn refused(yaml: &str, env: &HashMap<String, String>, field: &str) -> String {
    let e = resolve(yaml, env).expect_err("refused");
    assert!(names(&e, field), "{field} not named in: {e}");
    e.to_string()
}

#[test]
fn only_environment_and_default_image_are_required_and_every_default_is_the_documented_one() {
    let c = resolve(MINIMAL, &gce_env()).unwrap();
    assert_eq!(c.provider, ProviderKind::Gce);
    assert_eq!(c.transport, Transport::Ssh);
    assert_eq!(c.environment, "dev");
    assert_eq!(c.default_size, "standard");
    assert_eq!(c.sizes["standard"].machine_type, "e2-standard-2");
    assert_eq!(
        (c.sizes["standard"].cpus, c.sizes["standard"].memory_mb),
        (2, 8192)
    );
    assert_eq!(c.sizes["large"].machine_type, "e2-standard-8");
    assert_eq!(
        (c.sizes["large"].cpus, c.sizes["large"].memory_mb),
        (8, 32768)
    );
    assert_eq!(c.disk_gb, 50);
    assert_eq!((c.limits.max_running, c.limits.max_sheds), (2, 8));
    assert_eq!(c.max_run_duration, Duration::from_secs(24 * 3600));
    assert_eq!(c.pass_interval, Duration::from_secs(60));
    assert_eq!(c.agent_install, "incompatible");
    assert_eq!(c.firewall.mode, FirewallMode::Static);
    assert_eq!(c.firewall.source_ranges[0].to_string(), "203.0.113.7/32");
    assert_eq!(c.rule_name(), "shed-dev-ssh");
    assert_eq!(c.network_tag(), "shed-dev");
    assert_eq!(c.location, "europe-west1-b");
    // The variables are mapped onto the Compute Engine driver's own settings.
    let s = &c.provider_settings;
    assert_eq!(s.get("ORCA_GCE_PROJECT"), Some("proj-1"));
    assert_eq!(s.get("ORCA_GCE_ZONE"), Some("europe-west1-b"));
    assert_eq!(s.get("ORCA_GCE_NETWORK"), Some("shed-net"));
    assert_eq!(s.get("ORCA_GCE_SUBNET"), Some("shed-subnet"));
    assert_eq!(s.get("ORCA_GCE_CREDENTIALS_BASE64"), Some("e30="));
    assert!(
        c.state_dir.ends_with("shed/remote"),
        "{}",
        c.state_dir.display()
    );
    assert!(c.ssh_key.is_some());
    let dbg = format!("{c:?}");
    assert!(!dbg.contains("e30=") && !dbg.contains("OPENSSH"), "{dbg}");
}

/// A state directory written `~/...` (as the README's own example is) is under HOME, not a folder
/// named `~` where the server happens to start; a relative one would move with that too.
#[test]
fn a_state_dir_under_home_is_expanded_and_a_relative_one_is_refused() {
    let mut env = gce_env();
    env.insert("HOME".into(), "/home/op".into());
    let c = resolve(&with("state_dir: ~/.local/state/shed\n"), &env).unwrap();
    assert_eq!(
        c.state_dir,
        std::path::Path::new("/home/op/.local/state/shed/remote")
    );
    let c = resolve(&with("  state_dir: ~/shed-records\n"), &env).unwrap();
    assert_eq!(c.state_dir, std::path::Path::new("/home/op/shed-records"));
    for (yaml, field) in [
        ("state_dir: shed-state\n", "state_dir"),
        ("state_dir: ~op/shed\n", "state_dir"),
        ("  state_dir: ./records\n", "remote.state_dir"),
    ] {
        let msg = refused(&with(yaml), &env, field);
        assert!(msg.contains("absolute"), "{msg}");
    }
    env.remove("HOME");
    let msg = refused(&with("state_dir: ~/.local/state/shed\n"), &env, "state_dir");
    assert!(msg.contains("HOME"), "{msg}");
}

#[test]
fn every_variable_is_read_once_and_a_missing_one_is_named() {
    let env = gce_env();
    let reads: RefCell<HashMap<String, usize>> = RefCell::default();
    FileConfig::parse(MINIMAL)
        .unwrap()
        .resolve(&|k| {
            *reads.borrow_mut().entry(k.to_string()).or_default() += 1;
            env.get(k).cloned()
        })
        .unwrap();
    for (k, n) in reads.borrow().iter() {
        assert_eq!(*n, 1, "{k} read {n} times");
    }
    for var in [
        "SHED_GCE_PROJECT",
        "SHED_GCE_ZONE",
        "SHED_GCE_NETWORK",
        "SHED_GCE_SUBNET",
    ] {
        let mut e = gce_env();
        e.remove(var);
        let msg = refused(MINIMAL, &e, var);
        assert!(msg.contains(var), "{msg}");
    }
    // Renamed variables are the ones read.
    let mut e = gce_env();
    let p = e.remove("SHED_GCE_PROJECT").unwrap();
    e.insert("MY_PROJECT".into(), p);
    let c = resolve(&with("  gce:\n    project_env: MY_PROJECT\n"), &e).unwrap();
    assert_eq!(c.provider_settings.get("ORCA_GCE_PROJECT"), Some("proj-1"));
}

#[test]
fn credentials_and_ssh_keys_need_exactly_one_source() {
    let mut e = gce_env();
    e.insert("SHED_GCE_CREDENTIALS_FILE".into(), "/k.json".into());
    refused(MINIMAL, &e, "GOOGLE_CREDENTIALS_BASE64");
    e.remove("GOOGLE_CREDENTIALS_BASE64");
    let c = resolve(MINIMAL, &e).unwrap();
    assert_eq!(
        c.provider_settings.get("ORCA_GCE_CREDENTIALS_FILE"),
        Some("/k.json")
    );
    e.remove("SHED_GCE_CREDENTIALS_FILE");
    refused(MINIMAL, &e, "GOOGLE_CREDENTIALS_BASE64");

    let mut e = gce_env();
    e.remove("SHED_REMOTE_SSH_KEY");
    refused(MINIMAL, &e, "SHED_REMOTE_SSH_KEY");
    e.insert("SHED_REMOTE_SSH_KEY".into(), "bm90IGEga2V5".into());
    refused(MINIMAL, &e, "SHED_REMOTE_SSH_KEY");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("id");
    std::fs::write(&path, KEY).unwrap();
    // A private key's file is its owner's alone, as ssh itself asks.
    #[cfg(unix)]
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    e.remove("SHED_REMOTE_SSH_KEY");
    e.insert(
        "SHED_REMOTE_SSH_KEY_FILE".into(),
        path.display().to_string(),
    );
    assert!(resolve(MINIMAL, &e).unwrap().ssh_key.is_some());
}

/// The SSH key file is read as a private key's file must be: this user's, closed to others, a
/// regular file (never through a symbolic link) of a key's size; each refusal names the variable.
#[cfg(unix)]
#[test]
fn an_ssh_key_file_open_to_others_linked_or_oversized_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("id");
    std::fs::write(&key, KEY).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut e = gce_env();
    e.remove("SHED_REMOTE_SSH_KEY");
    let mut with_file = |path: &std::path::Path| {
        e.insert(
            "SHED_REMOTE_SSH_KEY_FILE".into(),
            path.display().to_string(),
        );
        e.clone()
    };
    let msg = refused(MINIMAL, &with_file(&key), "SHED_REMOTE_SSH_KEY_FILE");
    assert!(msg.contains("open to other users"), "{msg}");
    assert!(!msg.contains("AAAA"), "{msg}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&key, &link).unwrap();
    let msg = refused(MINIMAL, &with_file(&link), "SHED_REMOTE_SSH_KEY_FILE");
    assert!(msg.contains("symbolic link"), "{msg}");
    let big = dir.path().join("big");
    let mut bytes = KEY.as_bytes().to_vec();
    bytes.resize(1 << 20, b'\n');
    std::fs::write(&big, &bytes).unwrap();
    std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o600)).unwrap();
    let msg = refused(MINIMAL, &with_file(&big), "SHED_REMOTE_SSH_KEY_FILE");
    assert!(msg.contains("larger than"), "{msg}");
    assert!(resolve(MINIMAL, &with_file(&key))
        .unwrap()
        .ssh_key
        .is_some());
}

#[test]
fn the_backend_blocks_and_required_fields() {
    let env = gce_env();
    refused(
        "remote:\n  environment: dev\n  default_image: x\n",
        &env,
        "remote",
    );
    refused(
        "default_backend: firecracker\nremote:\n  environment: dev\n  default_image: x\n",
        &env,
        "remote",
    );
    refused("default_backend: firecracker\n", &env, "default_backend");
    refused("default_backend: remote\n", &env, "remote");
    refused(
        "default_backend: remote\nremote:\n  default_image: x\n",
        &env,
        "remote.environment",
    );
    refused(
        "default_backend: remote\nremote:\n  environment: dev\n",
        &env,
        "remote.default_image",
    );
    for bad in ["Dev", "1dev", "a_b", "this-name-is-far-too-long", "dev-"] {
        refused(
            &format!(
                "default_backend: remote\nremote:\n  environment: {bad}\n  default_image: x\n"
            ),
            &env,
            "remote.environment",
        );
    }
    let e = FileConfig::parse(&with("  flavour: x\n")).unwrap_err();
    assert!(e.to_string().contains("flavour"), "{e}");
}

#[test]
fn what_cannot_stand_beside_default_backend_remote() {
    let env = gce_env();
    for (yaml, field) in [
        ("firecracker: {}\n", "firecracker"),
        ("vz: {}\n", "vz"),
        ("env_file: .env\n", "env_file"),
        ("mounts: [cache]\n", "mounts"),
        ("egress:\n  enabled: true\n", "egress.enabled"),
        (
            "network:\n  allow_cidrs: [10.0.0.0/8]\n",
            "network.allow_cidrs",
        ),
        ("extensions:\n  enabled: true\n", "extensions.enabled"),
        (
            "clients:\n  ci:\n    token_env: T\n    policy:\n      server_mounts: [src]\n",
            "clients.ci.policy.server_mounts",
        ),
        (
            "clients:\n  ci:\n    token_env: T\n    policy:\n      images: [ubuntu]\n",
            "clients.ci.policy.images",
        ),
    ] {
        let mut e = env.clone();
        e.insert("T".into(), "token".into());
        refused(&format!("{MINIMAL}{yaml}"), &e, field);
    }
    let mut e = env.clone();
    e.insert("T".into(), "token".into());
    let ok = format!("{MINIMAL}  image_aliases: {{cloud: img}}\nclients:\n  ci:\n    token_env: T\n    policy:\n      images: [cloud]\n");
    resolve(&ok, &e).unwrap();
}

#[test]
fn test_drivers_need_allow_test_drivers() {
    let env = gce_env();
    refused(&with("  provider: fake\n"), &env, "remote.provider");
    refused(&with("  transport: local\n"), &env, "remote.transport");
    refused(&with("  provider: aws\n"), &env, "remote.provider");
    let c = resolve(
        &with("  provider: fake\n  transport: local\n  allow_test_drivers: true\n"),
        &HashMap::from([(
            "SHED_REMOTE_SOURCE_RANGES".to_string(),
            "203.0.113.7/32".to_string(),
        )]),
    )
    .unwrap();
    assert_eq!(
        (c.provider, c.transport),
        (ProviderKind::Fake, Transport::Local)
    );
    assert_eq!(
        c.sizes["standard"].machine_type, "amd64-small",
        "the in-memory catalogue's types"
    );
    assert!(c.ssh_key.is_none() && c.provider_settings.get("ORCA_GCE_PROJECT").is_none());
}

#[test]
fn static_sources_are_one_list_of_public_ipv4_cidrs() {
    let env = gce_env();
    let c = resolve(
        &with("  firewall:\n    source_ranges: [203.0.113.7/32, 198.51.100.0/24]\n"),
        &env,
    )
    .unwrap();
    assert_eq!(c.firewall.source_ranges.len(), 2);
    refused(
        &with("  firewall:\n    source_ranges: [203.0.113.7/32]\n    source_ranges_env: X\n"),
        &env,
        "remote.firewall.source_ranges",
    );
    let mut e = env.clone();
    e.remove("SHED_REMOTE_SOURCE_RANGES");
    refused(MINIMAL, &e, "SHED_REMOTE_SOURCE_RANGES");
    e.insert("MY_RANGES".into(), "203.0.113.9/32, 198.51.100.0/24".into());
    let c = resolve(&with("  firewall:\n    source_ranges_env: MY_RANGES\n"), &e).unwrap();
    assert_eq!(c.firewall.source_ranges.len(), 2);
    for (list, why) in [
        ("[0.0.0.0/0]", "wider than a /24"),
        ("[203.0.112.0/23]", "wider than a /24"),
        ("[2001:db8::/32]", "IPv4"),
        ("[10.1.1.1/32]", "private"),
        ("[100.64.0.1/32]", "carrier-grade NAT"),
        ("[127.0.0.1/32]", "loopback"),
        ("[169.254.1.1/32]", "link-local"),
        ("[198.18.0.1/32]", "benchmarking"),
        ("[192.0.0.1/32]", "protocol-assignment"),
        ("[250.0.0.1/32]", "reserved"),
        ("[]", "empty"),
    ] {
        let mut e = env.clone();
        e.remove("SHED_REMOTE_SOURCE_RANGES");
        let msg = if list == "[]" {
            e.insert("SHED_REMOTE_SOURCE_RANGES".into(), " , ".into());
            refused(MINIMAL, &e, "SHED_REMOTE_SOURCE_RANGES")
        } else {
            refused(
                &with(&format!("  firewall:\n    source_ranges: {list}\n")),
                &e,
                "remote.firewall.source_ranges",
            )
        };
        assert!(msg.contains(why), "{list}: {msg}");
    }
    // A wide range with the acknowledgement.
    let c = resolve(
        &with("  firewall:\n    source_ranges: [0.0.0.0/0]\n    acknowledge_any: true\n"),
        &env,
    )
    .unwrap();
    assert!(c.firewall.acknowledge_any && !c.isolated_available());
}

#[test]
fn any_mode_needs_the_acknowledgement_and_is_refused_beside_service_clients_or_an_isolated_default()
{
    let mut env = gce_env();
    env.insert("T".into(), "tok".into());
    refused(
        &with("  firewall:\n    mode: any\n"),
        &env,
        "remote.firewall.acknowledge_any",
    );
    resolve(
        &with("  firewall:\n    mode: any\n    acknowledge_any: true\n"),
        &env,
    )
    .unwrap();
    let service = "clients:\n  ci:\n    token_env: T\n";
    refused(
        &format!("{MINIMAL}  firewall:\n    mode: any\n    acknowledge_any: true\n{service}"),
        &env,
        "remote.firewall.mode",
    );
    refused(
        &format!("{MINIMAL}  firewall:\n    source_ranges: [203.0.113.7/32]\n    acknowledge_any: true\n{service}"),
        &env,
        "remote.firewall.mode",
    );
    refused(
        &format!("{MINIMAL}  firewall:\n    mode: any\n    acknowledge_any: true\nnetwork:\n  default_profile: isolated\n"),
        &env,
        "remote.firewall.mode",
    );
    let admin = "clients:\n  me:\n    role: admin\n    token_env: T\n";
    resolve(
        &format!("{MINIMAL}  firewall:\n    mode: any\n    acknowledge_any: true\n{admin}"),
        &env,
    )
    .unwrap();
}

#[test]
fn auto_mode_needs_two_https_echo_services_on_different_hosts() {
    let env = gce_env();
    let auto = |urls: &str| {
        with(&format!(
            "  firewall:\n    mode: auto\n    echo_urls: {urls}\n"
        ))
    };
    let c = resolve(&auto("[https://a.example/, https://b.example/ip]"), &env).unwrap();
    assert_eq!(c.firewall.mode, FirewallMode::Auto);
    for (urls, why) in [
        ("[https://a.example/]", "at least two"),
        (
            "[https://a.example/, https://A.example:8443/x]",
            "different host",
        ),
        ("[https://a.example/, http://b.example/]", "not https"),
        (
            "[https://a.example/, \"https://bücher.example/\"]",
            "punycode",
        ),
    ] {
        let msg = refused(&auto(urls), &env, "remote.firewall.echo_urls");
        assert!(msg.contains(why), "{urls}: {msg}");
    }
    refused(&with("  firewall:\n    echo_urls: [https://a.example/]\n    source_ranges: [203.0.113.7/32]\n"), &env, "remote.firewall.echo_urls");
    refused(
        &with("  firewall:\n    mode: sometimes\n"),
        &env,
        "remote.firewall.mode",
    );
}

#[test]
fn sizes_limits_durations_and_the_rest() {
    let env = gce_env();
    for (yaml, field) in [
        ("  default_size: huge\n", "remote.default_size"),
        ("  sizes: {}\n", "remote.sizes"),
        ("  sizes:\n    arm: {machine_type: t2a-standard-1, cpus: 1, memory_mb: 4096, arch: arm64}\n  default_size: arm\n", "remote.sizes.arm.arch"),
        ("  sizes:\n    zero: {machine_type: e2-micro, cpus: 0, memory_mb: 1024}\n  default_size: zero\n", "remote.sizes.zero.cpus"),
        ("  disk_gb: 5\n", "remote.disk_gb"),
        ("  disk_gb: 501\n", "remote.disk_gb"),
        ("  limits: {max_running: 0}\n", "remote.limits.max_running"),
        ("  limits: {max_sheds: 0}\n", "remote.limits.max_sheds"),
        ("  max_run_duration: 5m\n", "remote.max_run_duration"),
        ("  max_run_duration: 2881h\n", "remote.max_run_duration"),
        ("  max_run_duration: soon\n", "remote.max_run_duration"),
        ("  agent_install: sometimes\n", "remote.agent_install"),
        ("  pass_interval: 0s\n", "remote.pass_interval"),
    ] {
        refused(&with(yaml), &env, field);
    }
    let c = resolve(
        &with("  max_run_duration: 10m\n  agent_install: always\n  limits: {max_running: 4}\n"),
        &env,
    )
    .unwrap();
    assert_eq!(c.max_run_duration, Duration::from_secs(600));
    assert_eq!((c.limits.max_running, c.limits.max_sheds), (4, 8));
    assert_eq!(c.agent_install, "always");
    let c = resolve(&with("  max_run_duration: 2880h\n"), &env).unwrap();
    assert_eq!(c.max_run_duration, Duration::from_secs(2880 * 3600));
}

#[test]
fn a_network_of_another_project_is_refused() {
    let mut env = gce_env();
    env.insert(
        "SHED_GCE_NETWORK".into(),
        "projects/host-proj/global/networks/shared".into(),
    );
    let msg = refused(MINIMAL, &env, "gce.network_env");
    assert!(msg.contains("Shared VPC"), "{msg}");
    let mut env = gce_env();
    env.insert(
        "SHED_GCE_SUBNET".into(),
        "projects/host-proj/regions/europe-west1/subnetworks/s".into(),
    );
    refused(MINIMAL, &env, "gce.subnet_env");
    let mut env = gce_env();
    env.insert(
        "SHED_GCE_NETWORK".into(),
        "projects/proj-1/global/networks/shed-net".into(),
    );
    resolve(MINIMAL, &env).unwrap();
}

#[test]
fn every_problem_is_reported_at_once() {
    let e = resolve(
        "default_backend: remote\nremote:\n  provider: fake\n  disk_gb: 1\n",
        &HashMap::new(),
    )
    .unwrap_err();
    for f in [
        "remote.provider",
        "remote.environment",
        "remote.default_image",
        "remote.disk_gb",
    ] {
        assert!(names(&e, f), "{f}: {e}");
    }
}

#[test]
fn clients_and_their_tokens() {
    let mut env = gce_env();
    refused(&with("clients:\n  ci: {}\n"), &env, "clients.ci.token_env");
    refused(
        &with("clients:\n  ci:\n    token_env: CI_TOKEN\n"),
        &env,
        "CI_TOKEN",
    );
    env.insert("CI_TOKEN".into(), "s3cret".into());
    refused(
        &with("clients:\n  ci:\n    token_env: CI_TOKEN\n    role: root\n"),
        &env,
        "clients.ci.role",
    );
    let c = resolve(&with("clients:\n  ci:\n    token_env: CI_TOKEN\n    policy:\n      max_age: 48h\n      max_cpus: 4\n"), &env).unwrap();
    let ci = &c.clients["ci"];
    assert_eq!(ci.caller.max_age, Some(Duration::from_secs(48 * 3600)));
    assert!(!format!("{c:?}{ci:?}").contains("s3cret"));
    assert!(c
        .clients
        .values()
        .any(|client| client.caller.role == Role::Service));
}

/// A caller is known by its token alone: two clients with one token would let either act as the
/// other (with the other's role and policy), so they are refused, naming both and never the token.
#[test]
fn two_clients_with_equal_tokens_are_refused_naming_both() {
    let mut env = gce_env();
    env.insert("OPS_TOKEN".into(), "s3cret-shared".into());
    env.insert("CI_TOKEN".into(), " s3cret-shared\n".into());
    let two = "clients:\n  ops:\n    role: admin\n    token_env: OPS_TOKEN\n  ci:\n    token_env: CI_TOKEN\n";
    let msg = refused(&with(two), &env, "clients.ops.token_env");
    assert!(msg.contains("ci") && msg.contains("ops"), "{msg}");
    assert!(!msg.contains("s3cret"), "{msg}");
    // One variable named by both is the same token too.
    let one = "clients:\n  ops:\n    role: admin\n    token_env: OPS_TOKEN\n  ci:\n    token_env: OPS_TOKEN\n";
    let msg = refused(&with(one), &env, "clients.ops.token_env");
    assert!(!msg.contains("s3cret"), "{msg}");
    env.insert("CI_TOKEN".into(), "s3cret-ci".into());
    let c = resolve(&with(two), &env).unwrap();
    assert_eq!(c.clients.len(), 2);
}

#[test]
fn a_server_without_clients_listens_on_a_loopback_address_only() {
    // Without clients every caller is the local admin: an open port would let anyone who reaches it
    // create billed VMs and read the server log.
    let mut env = gce_env();
    for listen in [
        "0.0.0.0:8421",
        "[::]:8421",
        "192.0.2.10:8421",
        "[::ffff:192.0.2.10]:8421",
    ] {
        let msg = refused(&format!("listen: \"{listen}\"\n{MINIMAL}"), &env, "listen");
        assert!(msg.contains("clients"), "{msg}");
    }
    for listen in [
        "127.0.0.1:8421",
        "127.0.0.2:9000",
        "[::1]:8421",
        "[::ffff:127.0.0.1]:8421",
    ] {
        let c = resolve(&format!("listen: \"{listen}\"\n{MINIMAL}"), &env).unwrap();
        assert_eq!(c.listen, listen.parse().unwrap());
    }
    // With clients (each with a token) the API may listen on any address.
    env.insert("CI_TOKEN".into(), "s3cret".into());
    let c = resolve(
        &format!("listen: \"0.0.0.0:8421\"\n{MINIMAL}clients:\n  ci:\n    token_env: CI_TOKEN\n"),
        &env,
    )
    .unwrap();
    assert_eq!(c.listen, "0.0.0.0:8421".parse().unwrap());
}

#[test]
fn the_readme_names_the_directory_that_holds_the_records_of_the_fake_walkthrough() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let yaml = std::fs::read_to_string(format!("{dir}/shed.fake.yaml")).unwrap();
    let cfg = resolve(&yaml, &HashMap::new()).unwrap();
    let records = cfg.state_dir.join("sheds");
    let readme = std::fs::read_to_string(format!("{dir}/README.md")).unwrap();
    let named = format!("`{}`", records.display());
    assert!(
        readme.contains(&named),
        "the README does not say the records are in {named}"
    );
}
