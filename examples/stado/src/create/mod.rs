//! `stado cloud host create`: nine steps in order, stopping at the first that fails. A failure removes
//! what the create made and names what could not be removed.
//!
//! The steps live by what they do: `checks.rs` (the request and the provider, before any call),
//! `price.rs` (step 2), `host.rs` (the host's resources, step 6), `enrol.rs` (enrolment and the
//! record, steps 7 and 8), `boot.rs` (the first boot, step 9); this file runs them, with the name,
//! the fleet's addresses and the fleet key (steps 1, 3, 4 and 5).

mod boot;
mod checks;
mod enrol;
mod host;
mod price;
mod report;

use std::path::PathBuf;

pub use report::{CreateReport, CreditReport, PriceReport, StepReport, Versions};

use crate::admission::AdmissionReport;
use crate::cloud::{Progress, Stado, TITLE};
use crate::error::Failure;
use crate::keys::{self, FleetKey};
use crate::profile::Profile;
use crate::registry::{CloudState, Held, Registry};

/// The longest name of a cloud host: Azure's driver's. It names the VM's disk, interface, security
/// group and address by adding a suffix to the VM's name, and refuses a longer name in create and
/// in delete by name alike: a create of one would be refused only after the price, the admission
/// and the key, and what it declared could never be removed by name. `fake` is Azure simulated, and
/// takes the same names.
pub const MAX_NAME: usize = orca::azure::MAX_NAME;

/// What to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    /// The target identifier (also the VM's name).
    pub name: String,
    /// The location.
    pub location: String,
    /// The size.
    pub size: String,
    /// The OS disk, GiB.
    pub disk_gb: u32,
    /// Idle minutes after which reap returns it.
    pub idle_minutes: u32,
}

const STEPS: [&str; 9] = [
    "checking the name",
    "pricing the size and passing the credit gate",
    "asking the fleet's admit_from hosts for their public addresses",
    "admitting those addresses on SSH",
    "minting the fleet key",
    "creating the public address, security group, interface and VM",
    "enrolling the host",
    "recording targets[].cloud",
    "waiting for cloud-init and asking for rustc, node and npm",
];

/// Why a step stopped: what it said before it failed, and the failure.
struct Stop {
    lines: Vec<String>,
    failure: Failure,
}

impl From<Failure> for Stop {
    fn from(failure: Failure) -> Stop {
        Stop {
            lines: Vec::new(),
            failure,
        }
    }
}

/// What a step gives the next ones, and what it said.
type Step<T> = Result<(T, Vec<String>), Stop>;

/// The key files this create wrote: the only ones its failure removes.
#[derive(Debug, Default)]
struct Minted(Vec<PathBuf>);

impl Minted {
    fn remove(&self) {
        let left = keys::remove_files(&self.0);
        if !left.is_empty() {
            tracing::warn!(files = ?left, "could not remove the key files this create minted");
        }
    }
}

/// The steps as they go: each one's progress line as it starts, its report and lines as it ends.
struct Run<'a> {
    report: &'a mut CreateReport,
    step_lines: Option<Progress>,
}

impl Run<'_> {
    fn begin(&mut self, stado: &Stado, n: u8) {
        stado.say(&format!("[{n}/9] {}", STEPS[usize::from(n) - 1]));
    }

    /// Ends step `n`: records what it said (shown as it ends) and passes on what it gives, or the
    /// failure that stops create.
    fn end<T>(&mut self, n: u8, name: &'static str, step: Step<T>) -> Result<T, Failure> {
        let (ok, mut lines, outcome) = match step {
            Ok((value, lines)) => (true, lines, Ok(value)),
            Err(Stop { lines, failure }) => (false, lines, Err(failure)),
        };
        // What the step did is shown; a failure is the command's error, said once, elsewhere.
        if let Some(sink) = &self.step_lines {
            for l in &lines {
                sink(l);
            }
        }
        if let Err(f) = &outcome {
            lines.push(f.message().to_string());
        }
        self.report.steps.push(StepReport {
            step: n,
            name,
            ok,
            lines,
        });
        outcome
    }
}

impl Stado {
    /// Creates a cloud host: nine steps, stopping at the first that fails. A failure removes what was
    /// made and names what could not be removed.
    pub async fn create(&self, req: &CreateRequest) -> CreateReport {
        let mut report = CreateReport {
            command: "create",
            name: req.name.clone(),
            provider: self.kind.clone(),
            location: req.location.clone(),
            size: req.size.clone(),
            disk_gb: req.disk_gb,
            idle_minutes: req.idle_minutes,
            ..CreateReport::default()
        };
        let mut run = Run {
            report: &mut report,
            step_lines: self.step_lines.clone(),
        };
        let outcome = self.create_steps(req, &mut run).await;
        report.ok = outcome.is_ok();
        report.error = outcome.err();
        report
    }

    async fn create_steps(&self, req: &CreateRequest, run: &mut Run<'_>) -> Result<(), Failure> {
        // Held from before the profile is read to the last step: a change of the owner takes it
        // too, so the owner checked here is the one the host is made under; a reap that meets it
        // skips its tick, and a host declared enrolling without a create holding the lock is one
        // whose create stopped.
        let mut registry = self.lock_registry()?;
        let profile = self.gated_profile()?;
        self.check_request(req)?;
        self.check_can_make_hosts()?;
        self.check_channel(req)?;

        run.begin(self, 1);
        let named = self.name_step(req, &mut registry).await;
        run.end(1, "name", named)?;
        run.begin(self, 2);
        let priced = self.price_step(&profile, &registry, req, run.report).await;
        let price = run.end(2, "price", priced)?;
        run.begin(self, 3);
        let measured = self.egress_step(&profile, &mut registry, run.report).await;
        let sources = run.end(3, "egress", measured)?;
        run.begin(self, 4);
        let admitted = self
            .admission_step(req, &registry, &sources, run.report)
            .await;
        run.end(4, "admission", admitted)?;
        run.begin(self, 5);
        let minted = self.fleet_key_step(req, run.report);
        let (fleet, mut minted) = run.end(5, "fleet_key", minted)?;
        run.begin(self, 6);
        let made = self
            .host_step(
                &profile,
                req,
                &price,
                &sources,
                &fleet,
                &minted,
                &mut registry,
            )
            .await;
        let host = run.end(6, "resources", made)?;
        run.begin(self, 7);
        let enrolled = self
            .enrol_step(&host, &fleet, &mut minted, &mut registry)
            .await;
        run.end(7, "enrol", enrolled)?;
        run.begin(self, 8);
        let recorded = self
            .record_step(&host, &minted, &mut registry, run.report)
            .await;
        run.end(8, "record", recorded)?;
        run.begin(self, 9);
        let booted = self.boot_step(&host, &mut registry, run.report).await;
        run.end(9, "first_boot", booted)
    }

    /// Step 1: a target identifier no target holds, with no key of that name (a key this create
    /// did not mint is someone's, and is never replaced or removed). A host of this name that a
    /// create of this home declared and stopped before the cloud answered (`creating`) is removed
    /// first, as delete removes it, and made again.
    async fn name_step(&self, req: &CreateRequest, registry: &mut Held) -> Step<()> {
        // A target identifier is a host name, and so a VM's name: orca's machine name rule.
        if orca::validate_name(&req.name).is_err() {
            return Err(Failure::refused(format!(
                "'{}' is not a target identifier (1 to 63 of a-z, 0-9 and '-', not starting or ending with '-')",
                req.name
            ))
            .into());
        }
        if req.name.len() > MAX_NAME {
            return Err(Failure::refused(format!(
                "'{}' is {} characters long: a cloud host's name is at most {MAX_NAME} on {TITLE} (the names of its VM's pieces add a suffix to it)",
                req.name,
                req.name.len()
            ))
            .into());
        }
        let mut lines = Vec::new();
        let stopped = registry
            .cloud_hosts(&self.kind)
            .into_iter()
            .find(|(t, c)| t.name == req.name && c.state == CloudState::Creating)
            .map(|(_, c)| c.clone());
        if let Some(decl) = stopped {
            let removed = self.remove_host(registry, &req.name, &decl).await?;
            let what = match removed.as_str() {
                "" => "it had made no VM".to_string(),
                id => format!("its VM {id} was deleted"),
            };
            lines.push(format!(
                "name: {} was declared by a create that stopped before {TITLE} answered; {what}, and it is made again",
                req.name
            ));
        }
        if registry.target(&req.name).is_some() {
            return Err(
                Failure::refused(format!("target '{}' is already registered", req.name)).into(),
            );
        }
        keys::refuse_held(&self.home, &req.name, true)?;
        lines.push(format!(
            "name: {} is a target identifier no target holds",
            req.name
        ));
        Ok(((), lines))
    }

    /// Step 3: the fleet's addresses, measured and recorded (with the time each was read).
    async fn egress_step(
        &self,
        profile: &Profile,
        registry: &mut Held,
        report: &mut CreateReport,
    ) -> Step<Vec<String>> {
        let measured = self.measure_egress(profile, registry).await;
        report.egress = registry.cloud_hosts.egress.clone();
        let sources = measured?;
        let read: Vec<String> = registry
            .cloud_hosts
            .egress
            .iter()
            .map(|(h, e)| {
                format!(
                    "{h} {} (read {})",
                    e.address,
                    e.read_at.format("%Y-%m-%dT%H:%M:%SZ")
                )
            })
            .collect();
        Ok((sources, vec![format!("egress: {}", read.join(", "))]))
    }

    /// Step 4: admission on SSH, in the host's location first, then wherever a declared host stands.
    async fn admission_step(
        &self,
        req: &CreateRequest,
        registry: &Registry,
        sources: &[String],
        report: &mut CreateReport,
    ) -> Step<()> {
        let reports = self.admit(registry, Some(&req.location), sources).await?;
        let lines = reports.iter().map(AdmissionReport::line).collect();
        report.admission = reports;
        Ok(((), lines))
    }

    /// Step 5: the host's fleet key, minted as `stado fleet key generate` mints one.
    fn fleet_key_step(
        &self,
        req: &CreateRequest,
        report: &mut CreateReport,
    ) -> Step<(FleetKey, Minted)> {
        let fleet = keys::generate_fleet_key(&self.home, &req.name)?;
        let minted = Minted(vec![fleet.private.clone(), fleet.public.clone()]);
        report.fleet_key = Some(fleet.clone());
        let line = format!(
            "fleet key: {} (ed25519 {})",
            fleet.private.display(),
            fleet.fingerprint
        );
        Ok(((fleet, minted), vec![line]))
    }
}
