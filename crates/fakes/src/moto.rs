//! moto (the EC2 emulator, started by `scripts/with-moto`) for orca's tests: its address, its seeding
//! (a security group, an instance profile, the default subnets: [`seed`]), and a proxy in front of it
//! ([`Proxy`]) that makes moto behave as EC2 does where moto is kinder, injects faults (the fakes'
//! shared fault rules, [`crate::control`], picked by the form body's `Action` and parameters:
//! [`rule`]), and logs every EC2 action with its parameters. One file a concern: `seed` (moto's
//! address and seeding), `own` (a moto of a test's own), `proxy` (the server, its settings and its log), `rules` (what the proxy
//! answers on its own), `upstream` (forwarding to moto and reshaping its answers), `lookups`
//! (the proxy's own reads of moto), `answers` (EC2's answer shapes) and `xml`.
//!
//! # What the proxy reproduces of real EC2 (and where it is written down)
//! EC2's Query API posts every action to `/` with the action in the form body, so the proxy reads the
//! form's `Action` and parameters.
//! - **ClientToken idempotency** (EC2 API reference, "Ensuring idempotency": a repeated RunInstances
//!   with the same token and parameters answers the instance made the first time, "the only
//!   information that might vary is the state"; the same token with other parameters is
//!   `IdempotentParameterMismatch`; a token stays valid after the instance is terminated). moto
//!   ignores the token and makes a new instance each time. The proxy keeps every token it saw with
//!   the request's parameters and answers a repeat from moto's current view of that instance.
//!   It compares every parameter, where EC2 lets the availability zone differ.
//! - **Eventual consistency** (EC2 API reference, "Eventual consistency in the Amazon EC2 API": right
//!   after RunInstances, DescribeInstances and the calls that act on the instance may answer
//!   `InvalidInstanceID.NotFound`). With [`Proxy::set_visibility_delay`], an instance made from then
//!   on is, for that long: missing from listings, `InvalidInstanceID.NotFound` to DescribeInstances
//!   by id, and `InvalidInstanceID.NotFound` to TerminateInstances, StartInstances, StopInstances,
//!   ModifyInstanceAttribute, DescribeInstanceAttribute, CreateTags and DeleteTags. (Real EC2 is less
//!   regular: one call may show an instance another does not; the behaviour tests inject such single
//!   "not found" answers on their own.) Tag filters may lag behind reads by id (the same page: a new
//!   resource's tags reach the filters later): with [`Proxy::set_tag_filter_lag`], a listing
//!   filtered on a tag does not find an instance made from then on until that much after reads
//!   by id do. Both windows count time, and a loaded machine can look only after one is over:
//!   [`Proxy::miss_first_look`] makes each hide a new instance from at least the first read it
//!   applies to, for tests that count the looks a wait takes.
//! - **The `client-token` filter** (DescribeInstances: "the idempotency token you provided when
//!   you launched the instance"): moto keeps no token; the proxy answers it from the tokens it saw
//!   made an instance (a filter on ids, so a tag filter's lag does not apply to it, unless the same
//!   listing also filters on a tag, as EC2's tag index would then decide).
//! - **MaxResults 5 to 1000** (DescribeInstances reference: "You cannot specify this parameter and
//!   the instance IDs parameter in the same request"; values outside 5-1000 are refused with
//!   `InvalidParameterValue`). moto accepts any size.
//! - **Paging by instance** (DescribeInstances: `MaxResults` counts instances; moto pages by
//!   reservation). The proxy asks moto for everything and pages itself, with its own `NextToken`.
//!   [`Proxy::paged`] gives a second address on the same state whose listings page by a set number of
//!   instances whatever `MaxResults` says: how the conformance suite gets pages of one instance,
//!   which EC2 itself never serves.
//! - **Short and empty pages when filtering** (several SDKs' issue trackers show a filtered
//!   DescribeInstances answering 6 of 7 matches with a `NextToken`, and an empty page with one: EC2
//!   looks at a number of instances a page, then filters). With [`Proxy::page_by_scan`], a filtered
//!   listing's page holds the matches among the next `n` instances of the region, with a
//!   `NextToken` while any remain.
//! - **A new instance profile is refused for a while** (kops and Packer wait for it: for seconds
//!   after IAM makes an instance profile, RunInstances answers `InvalidParameterValue` "Value (...)
//!   for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name"); moto
//!   takes it at once. [`Proxy::refuse_new_profile`] refuses it so for a while.
//! - **`LaunchTime` is the last start** (Instance reference: "The time that the instance was last
//!   launched"): moto keeps the creation time through a stop and a start; the proxy writes the time
//!   of the last StartInstances.
//! - **`StateTransitionReason`** of a stopped instance is `User initiated (YYYY-MM-DD HH:MM:SS GMT)`;
//!   moto writes `UTC`, the proxy `GMT`.
//! - **Types not offered in a zone**: RunInstances of a type EC2 does not offer in the subnet's zone
//!   is `Unsupported` ("Your requested instance type (...) is not supported in your requested
//!   Availability Zone (...)"); moto makes it anyway. The proxy reads the offerings from moto's own
//!   DescribeInstanceTypeOfferings.
//! - **`pending` lasts** (Instance lifecycle: an instance is `pending` while it boots, seconds to
//!   minutes): moto answers `running` at once after RunInstances answered `pending`. With
//!   [`Proxy::keep_pending`], an instance made from then on reads as `pending` for that long (in
//!   listings, reads by id and a repeated ClientToken's answer), unless it was stopped or
//!   terminated meanwhile. A state filter still matches moto's own state.
//!
//! # What it does not reproduce
//! - Capacity, quota and throttling: moto never answers `InsufficientInstanceCapacity`,
//!   `InstanceLimitExceeded` or `RequestLimitExceeded`; tests inject them ([`ec2_error`]).
//! - The rest of the state machine's timing (`stopping` and `shutting-down` pass at once), and
//!   EC2's refusals of a call in the wrong state (a stop of a `pending` instance).
//! - IAM (every call is allowed; `UnauthorizedOperation` is injected), signatures (moto checks none),
//!   tag-on-create permissions, KMS.
//! - DNS names: moto names every instance `ec2-<ip>.compute-1.amazonaws.com` whatever the VPC's DNS
//!   settings; real EC2 leaves the public name empty without `enableDnsHostnames`.
//! - A repeated token's answer keeps moto's reservation and order, not necessarily EC2's.

mod answers;
mod lookups;
mod own;
mod proxy;
mod rules;
mod seed;
mod upstream;
mod xml;

pub use answers::ec2_error_body;
pub use own::{own_moto, OwnMoto, MOTO_AMIS_ENV, MOTO_SERVER_ENV};
pub use proxy::{Proxy, Seen};
pub use seed::{moto, seed, seed_in, Seed, MOTO_ENV};

/// The fault rules are the fakes' shared ones ([`crate::control`]): a rule picks EC2 requests by the
/// form body's `Action` and parameters ([`Rule::when_form`]).
pub use crate::control::{Fault, Rule};

/// The emulator's region.
pub const REGION: &str = "us-east-1";
/// The availability zone the tests make machines in.
pub const ZONE: &str = "us-east-1a";
/// Its neighbour.
pub const OTHER_ZONE: &str = "us-east-1b";
/// A zone where moto (and EC2) do not offer the Graviton types (`t4g.*`).
pub const ZONE_WITHOUT_T4G: &str = "us-east-1e";
/// EC2's XML namespace, as moto writes it.
const NS: &str = "http://ec2.amazonaws.com/doc/2016-11-15";
/// The prefix of the proxy's own `NextToken`s.
const TOKEN_PREFIX: &str = "orca-proxy-offset-";

/// The access key id [`driver_settings`] gives (moto accepts any).
pub const ACCESS_KEY_ID: &str = "AKIDORCATEST";

/// The secret access key [`driver_settings`] gives: moto checks no signature, so it only shows
/// whether a secret leaks.
pub const SECRET_ACCESS_KEY: &str = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY";

/// What a program hands the EC2 driver (`orca::of_with("ec2", ..)`) to reach moto at `endpoint`
/// (the proxy, or moto itself) on `seed`: region [`REGION`], static credentials, every seeded
/// subnet by zone, the security group and the instance profile.
pub fn driver_settings(seed: &Seed, endpoint: &str) -> orca_machines::Settings {
    let subnets: Vec<String> = seed
        .subnets
        .iter()
        .map(|(zone, subnet)| format!("{zone}={subnet}"))
        .collect();
    orca_machines::Settings::new()
        .with("AWS_REGION", REGION)
        .with("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
        .with("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
        .with("ORCA_EC2_SUBNETS", subnets.join(","))
        .with("ORCA_EC2_SECURITY_GROUP", &seed.security_group)
        .with("ORCA_EC2_INSTANCE_PROFILE", &seed.instance_profile)
        .with("ORCA_EC2_ENDPOINT", endpoint)
}

/// A rule for the next `times` requests of EC2 action `action` (narrowed with
/// [`Rule::when_form`]).
pub fn rule(action: &str, fault: Fault, times: u32) -> Rule {
    Rule::new(Some(axum::http::Method::POST), "", fault, times).when_form("Action", action)
}

/// Answer an EC2 error (`<Response><Errors><Error>...`) with this status and code; the request never
/// reaches moto.
pub fn ec2_error(status: u16, code: &str) -> Fault {
    xml_answer(
        status,
        ec2_error_body(code, &format!("injected by the test proxy: {code}")),
    )
}

/// Answer this XML body with this status; the request never reaches moto (for answers written from
/// the EC2 API reference).
pub fn xml_answer(status: u16, body: impl Into<String>) -> Fault {
    Fault::Text {
        status,
        content_type: "text/xml;charset=UTF-8".into(),
        body: body.into(),
    }
}
