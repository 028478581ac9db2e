//! A host that marks the settings it hands a plugin as explicit gets what `orca::of_with` gives: a
//! missing or misspelled credential is refused by name, never taken from the host's own files (the
//! plugin gets the host's `HOME`); a plugin started without the mark reads its environment as
//! `orca::of` does. The host's `HOME` here holds AWS credentials and a region, as a keeper host's
//! might; every endpoint is 127.0.0.1 and no test makes a cloud call.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::common;

use orca_machines::{ErrorKind, Provider, Settings};
use orca_plugin::{PluginCommand, PluginProvider};

/// Points this process's `HOME` (which a plugin is passed) at a directory whose `.aws` holds
/// credentials and a region, once for every test of this binary: tests in one process share it.
fn home_with_aws_credentials() -> &'static PathBuf {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| {
        let home = tempfile::tempdir().unwrap().keep();
        let aws = home.join(".aws");
        std::fs::create_dir_all(&aws).unwrap();
        std::fs::write(
            aws.join("credentials"),
            "[default]\naws_access_key_id = AKIAHOSTSOWNACCOUNT1\n\
             aws_secret_access_key = the-hosts-own-secret-not-the-vaults\n",
        )
        .unwrap();
        std::fs::write(aws.join("config"), "[default]\nregion = eu-west-1\n").unwrap();
        std::env::set_var("HOME", &home);
        home
    })
}

/// Everything `soul-cloud-ec2` needs but the credentials, its endpoint on 127.0.0.1.
fn without_credentials() -> Settings {
    Settings::new()
        .with("AWS_REGION", "eu-west-1")
        .with("ORCA_EC2_SUBNETS", "eu-west-1a=subnet-0123456789abcdef0")
        .with("ORCA_EC2_SECURITY_GROUP", "sg-0123456789abcdef0")
        .with("ORCA_EC2_INSTANCE_PROFILE", "orca-machines")
        .with("ORCA_EC2_ENDPOINT", "http://127.0.0.1:9")
}

#[tokio::test]
async fn explicit_settings_without_credentials_never_take_the_hosts_own() {
    home_with_aws_credentials();
    let command = PluginCommand::new(common::EC2, "stack-1")
        .settings(without_credentials())
        .explicit_settings();
    let e = PluginProvider::start(command).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidSettings, "{e}");
    let text = e.to_string();
    assert!(text.contains("AWS_ACCESS_KEY_ID"), "{text}");
    assert!(text.contains("AWS_SECRET_ACCESS_KEY"), "{text}");
    assert!(!text.contains("the-hosts-own-secret"), "{text}");
}

#[tokio::test]
async fn a_misspelled_explicit_credential_is_refused_by_its_name() {
    home_with_aws_credentials();
    let command = PluginCommand::new(common::EC2, "stack-1")
        .settings(
            without_credentials()
                .with("AWS_ACCES_KEY_ID", "AKIAVAULTSACCOUNT001")
                .with("AWS_SECRET_ACCESS_KEY", "the-vaults-secret"),
        )
        .explicit_settings();
    let e = PluginProvider::start(command).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidSettings, "{e}");
    assert!(e.to_string().contains("AWS_ACCES_KEY_ID"), "{e}");
}

#[tokio::test]
async fn explicit_settings_with_credentials_make_the_provider() {
    home_with_aws_credentials();
    let command = PluginCommand::new(common::EC2, "stack-1")
        .settings(
            without_credentials()
                .with("AWS_ACCESS_KEY_ID", "AKIAVAULTSACCOUNT001")
                .with("AWS_SECRET_ACCESS_KEY", "the-vaults-secret"),
        )
        .explicit_settings();
    let p = PluginProvider::start(command).await.unwrap();
    assert_eq!(p.kind(), "ec2");
}

#[tokio::test]
async fn without_the_mark_a_plugin_reads_its_environment_as_before() {
    home_with_aws_credentials();
    // No credentials among the settings: the plugin takes them by aws-config's chain, as
    // `orca::of` does (here from the host's `HOME`).
    let command = PluginCommand::new(common::EC2, "stack-1").settings(without_credentials());
    let p = PluginProvider::start(command).await.unwrap();
    assert_eq!(p.kind(), "ec2");
}
