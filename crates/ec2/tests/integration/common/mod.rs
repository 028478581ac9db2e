//! What the EC2 tests share: moto and the proxy in front of it ([`orca_fakes::moto`]: seeding, EC2's
//! behaviours where moto is kinder, fault injection, a log of every action), and the driver set up
//! against them.

#![allow(dead_code)]

use std::time::Duration;

use orca_ec2::{Config, ConfigBuilder, Ec2Provider, StaticCredentials};
use orca_machines::RetryPolicy;
use secrecy::SecretString;

pub use orca_fakes::moto::*;

/// A secret the tests give the driver, to show it never appears anywhere.
pub const SECRET: &str = SECRET_ACCESS_KEY;

/// The static test credentials (moto accepts any).
pub fn credentials() -> StaticCredentials {
    StaticCredentials::new(ACCESS_KEY_ID, SecretString::from(SECRET))
}

/// An SDK client straight to `endpoint` (moto, or the proxy), for seeding and for looking behind the
/// driver's back.
pub async fn sdk(endpoint: &str) -> aws_sdk_ec2::Client {
    let conf = aws_sdk_ec2::config::Builder::new()
        .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
        .region(aws_sdk_ec2::config::Region::new(REGION))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            ACCESS_KEY_ID,
            SECRET,
            None,
            None,
            "orca-ec2-tests",
        ))
        .build();
    aws_sdk_ec2::Client::from_conf(conf)
}

/// A config builder for `endpoint` (moto or the proxy) on `seed`, fast to retry and to wait.
pub fn builder(seed: &Seed, endpoint: &str) -> ConfigBuilder {
    let mut b = Config::builder()
        .region(REGION)
        .endpoint(endpoint)
        .credentials(credentials())
        .security_group(&seed.security_group)
        .instance_profile(&seed.instance_profile)
        .retry(RetryPolicy::fast())
        .poll_interval(Duration::from_millis(20))
        .operation_timeout(Duration::from_secs(20))
        .visibility_window(Duration::from_secs(20))
        // Longer than any visibility delay the tests set, short enough for unknown ids.
        .confirm_not_found(Duration::from_millis(1500))
        .connect_timeout(Duration::from_secs(5))
        .request_timeout(Duration::from_secs(30));
    for (zone, subnet) in &seed.subnets {
        b = b.subnet(zone, subnet);
    }
    b
}

/// A provider for `owner` from `builder`.
pub async fn provider(builder: ConfigBuilder, owner: &str) -> orca_machines::Result<Ec2Provider> {
    Ec2Provider::new(builder.build()?, owner).await
}

/// One test's moto seeding, proxy and pool of its own.
pub struct Env {
    pub seed: Seed,
    pub proxy: Proxy,
    pub pool: String,
    /// The moto of a test that has one of its own, stopped with the environment.
    _own: Option<OwnMoto>,
}

/// The test's environment, or `None` (skipped) without moto.
pub async fn env(test: &str) -> Option<Env> {
    let moto = moto(test)?;
    Some(env_on(&moto, None).await)
}

/// The test's environment on a moto of its own, for a test whose time grows with every instance of
/// the region (a filtered listing that EC2 pages by scanning the region): the shared moto holds
/// what every other test made, and more each minute.
pub async fn own_env(test: &str) -> Option<Env> {
    let own = own_moto(test).await?;
    let url = own.url.clone();
    Some(env_on(&url, Some(own)).await)
}

async fn env_on(moto: &str, own: Option<OwnMoto>) -> Env {
    let seed = seed(moto).await;
    let proxy = Proxy::start(moto).await;
    let pool = format!("t{:06x}", fastrand::u32(..0xff_ffff));
    Env {
        seed,
        proxy,
        pool,
        _own: own,
    }
}

impl Env {
    pub fn builder(&self) -> ConfigBuilder {
        builder(&self.seed, &self.proxy.url)
    }

    pub async fn provider(&self, owner: &str) -> Ec2Provider {
        provider(self.builder(), owner).await.unwrap()
    }

    pub fn spec(&self, name: &str) -> orca_machines::MachineSpec {
        orca_machines::MachineSpec::new(name, "t3.micro", ZONE, &self.pool)
    }
}

/// The machine a create made or adopted; panics on no stock.
pub fn made(c: orca_machines::Created) -> orca_machines::Machine {
    match c {
        orca_machines::Created::Machine(m) | orca_machines::Created::Adopted(m) => m,
        orca_machines::Created::NoStock { message, .. } => panic!("no stock: {message}"),
    }
}
