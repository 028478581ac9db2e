//! `stado cloud host create`: the nine steps of the seed, in order, stopping at the first that fails.

use std::collections::BTreeMap;

use orca::{Created, Error, MachineSpec};
use serde::Serialize;

use crate::channel::{commands, Endpoint};
use crate::cloud::{usd, AdmissionReport, Stado, CLOUD_INIT_LOG, GROUP, HOME_LABEL, POOL};
use crate::cloudinit;
use crate::error::Failure;
use crate::keys::{self, KeyPair};
use crate::profile::Profile;
use crate::registry::{CloudDecl, CloudState, Egress, Registry, Target};

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

/// One step of create as it went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepReport {
    /// Its number, 1 to 9.
    pub step: u8,
    /// Its name.
    pub name: &'static str,
    /// Whether it succeeded.
    pub ok: bool,
    /// What it said.
    pub lines: Vec<String>,
}

/// The price step's findings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PriceReport {
    /// The size's priced hour, USD.
    pub hourly_usd: f64,
    /// The location that quoted it (the highest).
    pub priced_in: String,
    /// Every location's quote.
    pub quotes: BTreeMap<String, f64>,
    /// The cloud hosts already declared.
    pub running: usize,
    /// Their recorded hours, USD.
    pub running_usd: f64,
    /// The projected hourly burn, USD.
    pub projected_burn_usd: f64,
}

/// The credit gate's findings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CreditReport {
    /// The balance.
    pub balance: f64,
    /// Its currency.
    pub currency: String,
    /// What remains after one hour of all of them.
    pub after: f64,
    /// The floor.
    pub floor: f64,
    /// The floor's currency.
    pub floor_currency: String,
    /// The operator's ruling id.
    pub ruling: String,
}

/// The versions the first boot answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Versions {
    /// `$HOME/.cargo/bin/rustc --version`.
    pub rustc: String,
    /// `node --version`.
    pub node: String,
    /// `npm --version`.
    pub npm: String,
}

/// What create did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CreateReport {
    /// `create`.
    pub command: &'static str,
    /// Whether every step succeeded.
    pub ok: bool,
    /// The host's name.
    pub name: String,
    /// The provider kind.
    pub provider: String,
    /// The location.
    pub location: String,
    /// The size.
    pub size: String,
    /// The OS disk, GiB.
    pub disk_gb: u32,
    /// Its idle minutes.
    pub idle_minutes: u32,
    /// Each step that ran.
    pub steps: Vec<StepReport>,
    /// The price step.
    pub price: Option<PriceReport>,
    /// The credit gate.
    pub credit: Option<CreditReport>,
    /// The fleet's addresses as measured.
    pub egress: BTreeMap<String, Egress>,
    /// The admission in each location.
    pub admission: Vec<AdmissionReport>,
    /// The fleet key's public half and fingerprint.
    pub fleet_key: Option<FleetKeyReport>,
    /// The registry's target for the host, once recorded.
    pub host: Option<Target>,
    /// The first boot's versions.
    pub versions: Option<Versions>,
    /// Why it stopped.
    pub error: Option<ErrorReport>,
}

/// A fleet key's public facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FleetKeyReport {
    /// The private half's path (its content is never shown).
    pub path: String,
    /// The public key.
    pub public_key: String,
    /// Its fingerprint.
    pub fingerprint: String,
}

/// A failure as a report carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorReport {
    /// Its short code.
    pub code: &'static str,
    /// The message.
    pub message: String,
}

impl From<&Failure> for ErrorReport {
    fn from(f: &Failure) -> Self {
        ErrorReport {
            code: f.code(),
            message: f.message().to_string(),
        }
    }
}

impl CreateReport {
    /// The lines a person reads, step by step.
    pub fn lines(&self) -> Vec<String> {
        self.steps
            .iter()
            .flat_map(|s| s.lines.iter().cloned())
            .collect()
    }
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

/// Whether `name` is a target identifier: 1 to 63 of a-z, 0-9 and '-', not starting or ending with
/// '-' (a host name, and so a VM's name).
pub fn is_target_identifier(name: &str) -> bool {
    orca::validate_name(name).is_ok()
}

fn token_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 80
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The key files this create wrote: the only ones its failure removes.
struct Minted(Vec<std::path::PathBuf>);

impl Minted {
    fn remove(&self) {
        let left = keys::remove_files(&self.0);
        if !left.is_empty() {
            tracing::warn!(files = ?left, "could not remove the key files this create minted");
        }
    }
}

struct Run<'a> {
    report: &'a mut CreateReport,
    step_lines: Option<crate::cloud::Progress>,
}

impl Run<'_> {
    fn begin(&mut self, stado: &Stado, n: u8) {
        stado.say(&format!("[{n}/9] {}", STEPS[usize::from(n) - 1]));
    }
    /// Shows what a step did as it ends.
    fn show(&self, lines: &[String]) {
        if let Some(sink) = &self.step_lines {
            for l in lines {
                sink(l);
            }
        }
    }
    fn done(&mut self, n: u8, name: &'static str, lines: Vec<String>) {
        self.show(&lines);
        self.report.steps.push(StepReport {
            step: n,
            name,
            ok: true,
            lines,
        });
    }
    fn failed(&mut self, n: u8, name: &'static str, f: Failure) -> Failure {
        self.failed_after(n, name, Vec::new(), f)
    }
    fn failed_after(
        &mut self,
        n: u8,
        name: &'static str,
        mut lines: Vec<String>,
        f: Failure,
    ) -> Failure {
        // What the step did before it failed is shown; the failure itself is the command's error.
        self.show(&lines);
        lines.push(f.message().to_string());
        self.report.steps.push(StepReport {
            step: n,
            name,
            ok: false,
            lines,
        });
        f
    }
}

impl Stado {
    /// Creates a cloud host: the nine steps of the seed, stopping at the first that fails. A failure
    /// removes what was made and names what could not be removed.
    pub async fn create(&self, req: &CreateRequest) -> CreateReport {
        let mut report = CreateReport {
            command: "create",
            ok: false,
            name: req.name.clone(),
            provider: self.kind.clone(),
            location: req.location.clone(),
            size: req.size.clone(),
            disk_gb: req.disk_gb,
            idle_minutes: req.idle_minutes,
            steps: Vec::new(),
            price: None,
            credit: None,
            egress: BTreeMap::new(),
            admission: Vec::new(),
            fleet_key: None,
            host: None,
            versions: None,
            error: None,
        };
        let result = self
            .create_steps(
                req,
                &mut Run {
                    report: &mut report,
                    step_lines: self.step_lines.clone(),
                },
            )
            .await;
        match result {
            Ok(()) => report.ok = true,
            Err(f) => report.error = Some(ErrorReport::from(&f)),
        }
        report
    }

    async fn create_steps(&self, req: &CreateRequest, run: &mut Run<'_>) -> Result<(), Failure> {
        let profile = self.gated_profile()?;
        if !token_ok(&req.size) {
            return Err(
                Failure::refused(format!("--size {:?} is not a size name", req.size))
                    .with_code("invalid"),
            );
        }
        if !token_ok(&req.location) {
            return Err(Failure::refused(format!(
                "--location {:?} is not a location name",
                req.location
            ))
            .with_code("invalid"));
        }
        if !(30..=4095).contains(&req.disk_gb) {
            return Err(Failure::refused(format!(
                "--disk-gb {}: an OS disk of 30 to 4095 GiB (the image needs 30)",
                req.disk_gb
            ))
            .with_code("invalid"));
        }
        if req.idle_minutes == 0 {
            return Err(
                Failure::refused("--idle-minutes 0: at least one minute").with_code("invalid")
            );
        }
        if let Some(known) = self.known_locations() {
            if !known.contains(&req.location.as_str()) {
                return Err(self.unknown_location(
                    &req.location,
                    &format!("its locations are {}", known.join(", ")),
                ));
            }
        }
        self.check_can_make_hosts()?;
        let _lock = self.lock_registry()?;
        let mut registry = Registry::load(&self.home)?;

        // 1. The name.
        run.begin(self, 1);
        if !is_target_identifier(&req.name) {
            return Err(run.failed(1, "name", Failure::refused(format!(
                "'{}' is not a target identifier (1 to 63 of a-z, 0-9 and '-', not starting or ending with '-')",
                req.name
            ))));
        }
        if registry.target(&req.name).is_some() {
            return Err(run.failed(
                1,
                "name",
                Failure::refused(format!("target '{}' is already registered", req.name)),
            ));
        }
        // A key of this name that this create did not mint is someone's: never replaced or removed.
        let held = keys::existing_key_files(&self.home, &req.name, true);
        if !held.is_empty() {
            return Err(run.failed(1, "name", keys::key_held(&req.name, &held)));
        }
        run.done(
            1,
            "name",
            vec![format!(
                "name: {} is a target identifier no target holds",
                req.name
            )],
        );

        // 2. The price and the credit gate.
        run.begin(self, 2);
        let mut lines = Vec::new();
        if let Err(f) = self
            .price_and_gate(&profile, &registry, req, run.report, &mut lines)
            .await
        {
            return Err(run.failed_after(2, "price", lines, f));
        }
        run.done(2, "price", lines);
        let price = run
            .report
            .price
            .clone()
            .ok_or_else(|| Failure::new("no price"))?;

        // 3. The fleet's addresses.
        run.begin(self, 3);
        let measured = self.measure_egress(&profile, &mut registry).await;
        run.report.egress = registry.cloud_hosts.egress.clone();
        let sources = match measured {
            Ok(s) => s,
            Err(f) => return Err(run.failed(3, "egress", f)),
        };
        let egress_line = format!(
            "egress: {}",
            registry
                .cloud_hosts
                .egress
                .iter()
                .map(|(h, e)| format!(
                    "{h} {} (read {})",
                    e.address,
                    e.read_at.format("%Y-%m-%dT%H:%M:%SZ")
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        run.done(3, "egress", vec![egress_line]);

        // 4. Admission on SSH, here first, then wherever a declared host stands.
        run.begin(self, 4);
        let mut locations = vec![req.location.clone()];
        for (_, c) in registry.cloud_hosts(&self.kind) {
            if !locations.contains(&c.location) {
                locations.push(c.location.clone());
            }
        }
        match self.admit(&registry, &locations, &sources).await {
            Ok(reports) => {
                let lines = reports.iter().map(AdmissionReport::line).collect();
                run.report.admission = reports;
                run.done(4, "admission", lines);
            }
            Err(f) => return Err(run.failed(4, "admission", f)),
        }

        // 5. The fleet key.
        run.begin(self, 5);
        let fleet = match keys::generate_fleet_key(&self.home, &req.name) {
            Ok(k) => k,
            Err(f) => return Err(run.failed(5, "fleet_key", f)),
        };
        let mut minted = Minted(vec![fleet.private.clone(), fleet.public.clone()]);
        run.report.fleet_key = Some(FleetKeyReport {
            path: fleet.private.display().to_string(),
            public_key: fleet.public_line.clone(),
            fingerprint: fleet.fingerprint.clone(),
        });
        run.done(
            5,
            "fleet_key",
            vec![format!(
                "fleet key: {} (ed25519 {})",
                fleet.private.display(),
                fleet.fingerprint
            )],
        );

        // 6. The host's resources.
        run.begin(self, 6);
        let user = profile.get("azure.vm_username").unwrap_or_default();
        let host_key = KeyPair::generate(&format!("stado-host-{}", req.name))?;
        let machine = match self
            .make_vm(
                &profile,
                req,
                &user,
                &fleet.public_line,
                &host_key,
                &sources,
            )
            .await
        {
            Ok(m) => m,
            Err(f) => {
                minted.remove();
                return Err(run.failed(6, "resources", f));
            }
        };
        let created_at = machine.created_at.unwrap_or_else(chrono::Utc::now);
        let decl = CloudDecl {
            provider: self.kind.clone(),
            location: req.location.clone(),
            size: req.size.clone(),
            disk_gb: req.disk_gb,
            hourly_usd: price.hourly_usd,
            priced_in: price.priced_in.clone(),
            idle_minutes: req.idle_minutes,
            address: machine.address.clone(),
            vm_id: machine.id.clone(),
            created_at,
            state: CloudState::Enrolling,
        };
        let mut target = Target::new(&req.name, &machine.address);
        target.user = Some(user.clone());
        target.identity = Some(fleet.private.clone());
        target.known_hosts = Some(self.home.pinned_host_key(&req.name));
        // The VM is billed from now on: declare it at once (enrolling), so that a create stopped
        // before step 8 (killed, or the machine gone down while enrolment waits) leaves a host that
        // list, delete and reap see and can remove, never an untracked one.
        let mut provisional = target.clone();
        provisional.cloud = Some(decl.clone());
        registry.put_target(provisional);
        if let Err(e) = registry.save(&self.home) {
            registry.remove_target(&req.name);
            let f = self
                .undo_host(
                    &mut registry,
                    &target,
                    &decl,
                    &minted,
                    format!("cloud host {} could not be declared: {e}", req.name),
                )
                .await;
            return Err(run.failed(6, "resources", f));
        }
        run.done(6, "resources", vec![
            format!(
                "host: VM {} at {} in {} ({}, {} GiB), made {}: its public address, security group, interface and VM",
                machine.id,
                machine.address,
                req.location,
                req.size,
                req.disk_gb,
                created_at.format("%Y-%m-%dT%H:%M:%SZ")
            ),
            format!(
                "declared: targets[{}].cloud as enrolling until the host is enrolled and recorded",
                req.name
            ),
        ]);

        // 7. Enrolment through the verified path: the host key stado minted and pinned, strictly.
        run.begin(self, 7);
        let enrolled = match keys::pin_host_key(&self.home, &req.name, &host_key.public_key_only())
        {
            Ok(pinned) => {
                minted.0.push(pinned);
                self.enrol(&req.name, &target, &host_key, &fleet.public_line)
                    .await
            }
            Err(f) => Err(f.message().to_string()),
        };
        let hostname = match enrolled {
            Ok(h) => h,
            Err(cause) => {
                let f = self
                    .undo_host(
                        &mut registry,
                        &target,
                        &decl,
                        &minted,
                        format!("cloud host {} could not be enrolled: {cause}", req.name),
                    )
                    .await;
                return Err(run.failed(7, "enrol", f));
            }
        };
        run.done(
            7,
            "enrol",
            vec![format!(
                "enrolled: {}@{} answers as {hostname}; its host key {} is pinned in {}",
                user,
                machine.address,
                host_key.fingerprint(),
                self.home.pinned_host_key(&req.name).display()
            )],
        );

        // 8. The record, whole.
        run.begin(self, 8);
        let decl = CloudDecl {
            state: CloudState::Ready,
            ..decl
        };
        let mut declared = target.clone();
        declared.cloud = Some(decl.clone());
        registry.put_target(declared.clone());
        if let Err(e) = registry.save(&self.home) {
            let f = self
                .undo_host(
                    &mut registry,
                    &target,
                    &decl,
                    &minted,
                    format!("cloud host {} could not be recorded: {e}", req.name),
                )
                .await;
            return Err(run.failed(8, "record", f));
        }
        run.report.host = Some(declared);
        run.done(8, "record", vec![format!(
            "recorded: targets[{}].cloud ({} {} in {}, {} USD an hour priced in {}, idle after {} minutes)",
            req.name,
            self.kind,
            req.size,
            req.location,
            usd(decl.hourly_usd),
            decl.priced_in,
            decl.idle_minutes
        )]);

        // 9. The first boot.
        run.begin(self, 9);
        match self.first_boot(&req.name, &target).await {
            Ok(v) => {
                let line = format!(
                    "first boot: cloud-init done; {}, node {}, npm {}",
                    v.rustc, v.node, v.npm
                );
                run.report.versions = Some(v);
                run.done(9, "first_boot", vec![line]);
                Ok(())
            }
            Err(f) => {
                // The host stays declared (delete and reap return it); list shows its boot failed.
                let mut failed = target.clone();
                failed.cloud = Some(CloudDecl {
                    state: CloudState::FirstBootFailed,
                    ..decl
                });
                registry.put_target(failed.clone());
                run.report.host = Some(failed);
                let f = match registry.save(&self.home) {
                    Ok(()) => f,
                    Err(e) => Failure::new(format!(
                        "{}; the registry could not record that its first boot failed: {e}",
                        f.message()
                    ))
                    .with_code(f.code()),
                };
                Err(run.failed(9, "first_boot", f))
            }
        }
    }

    async fn price_and_gate(
        &self,
        profile: &Profile,
        registry: &Registry,
        req: &CreateRequest,
        report: &mut CreateReport,
        lines: &mut Vec<String>,
    ) -> Result<(), Failure> {
        let title = self.cloud_title();
        // What the gate needs from the profile and the provider, before any call to the cloud.
        let floor = profile.floor()?;
        let Some(credit) = self.provider.credit_balance() else {
            if self.kind == "azure" {
                // The Azure driver reads a credit only when its settings name the billing account
                // and profile it belongs to.
                return Err(Failure::refused(format!(
                    "the {title} credit gate has no balance to read: a real subscription's credit is read from a billing profile of a billing account, and this deployment names none; stado config set azure.billing_account <account id> and stado config set azure.billing_profile <profile id> declare them"
                )));
            }
            return Err(Failure::new(format!(
                "the {title} credit gate cannot read a balance from the {} provider",
                self.kind
            )));
        };
        let locations = profile.price_locations(&req.location);
        let mut quotes = BTreeMap::new();
        for loc in &locations {
            match self.provider.hourly_price(&req.size, loc).await {
                Ok(p) if p.currency != "USD" => {
                    return Err(Failure::new(format!(
                        "{} quotes {} in {loc} in {}, and stado prices hours in USD",
                        title, req.size, p.currency
                    )))
                }
                Ok(p) => {
                    quotes.insert(loc.clone(), p.hourly);
                }
                Err(e @ (Error::NotFound { .. } | Error::InvalidSpec { .. }))
                    if loc != &req.location =>
                {
                    tracing::info!(location = %loc, error = %e, "the size has no price there");
                }
                Err(Error::InvalidSpec { field, rule }) if field == "location" => {
                    return Err(self.unknown_location(loc, &rule))
                }
                Err(e) => {
                    return Err(Failure::new(format!(
                        "{} {} has no on-demand price in {loc} (Retail Prices): {}",
                        title,
                        req.size,
                        self.cloud_error(&e)
                    ))
                    .with_code("refused"))
                }
            }
        }
        let (priced_in, hour) = quotes
            .iter()
            .fold(None::<(&String, f64)>, |best, (l, h)| match best {
                Some((_, bh)) if bh >= *h => best,
                _ => Some((l, *h)),
            })
            .map(|(l, h)| (l.clone(), h))
            .ok_or_else(|| Failure::new(format!("{} quotes no price for {}", title, req.size)))?;
        let others = registry.cloud_hosts(&self.kind);
        let running = others.len();
        let running_usd = others.iter().fold(0.0, |a, (_, c)| a + c.hourly_usd);
        let total = hour + running_usd;
        let where_priced = if quotes.len() > 1 {
            format!(
                "priced in {priced_in}, the highest of {}",
                quotes.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        } else {
            format!("priced in {priced_in}")
        };
        report.price = Some(PriceReport {
            hourly_usd: hour,
            priced_in: priced_in.clone(),
            quotes: quotes.clone(),
            running,
            running_usd,
            projected_burn_usd: total,
        });
        let burn = format!(
            "projected hourly burn: {} USD ({} {} at {} USD, {where_priced}; {running} cloud host(s) already running at {} USD)",
            usd(total),
            req.name,
            req.size,
            usd(hour),
            usd(running_usd)
        );
        lines.push(burn);

        let balance = credit.balance().await.map_err(|e| {
            Failure::new(format!(
                "the {title} credit balance could not be read: {}",
                self.cloud_error(&e)
            ))
        })?;
        if balance.currency != "USD" {
            return Err(Failure::refused(format!(
                "the {title} credit balance is kept in {}, and stado prices hours in USD; the credit gate cannot compare them",
                balance.currency
            )));
        }
        if floor.currency != balance.currency {
            return Err(Failure::refused(format!(
                "the operator's floor is in {} and the {title} credit balance in {}; the credit gate cannot compare them (the operator's ruling {}: \"{}\")",
                floor.currency, balance.currency, floor.ruling, floor.words
            )));
        }
        let after = balance.amount - hour - running_usd;
        report.credit = Some(CreditReport {
            balance: balance.amount,
            currency: balance.currency.clone(),
            after,
            floor: floor.amount,
            floor_currency: floor.currency.clone(),
            ruling: floor.ruling.clone(),
        });
        if after.partial_cmp(&floor.amount) != Some(std::cmp::Ordering::Greater) {
            return Err(Failure::refused(format!(
                "creating cloud host {} ({}) in {} is refused: the {title} credit balance {} USD less one hour of {} ({} USD) and one hour of the machines already running ({} USD) is not above the floor {} {} (the operator's ruling {}: \"{}\"); {} USD would remain",
                req.name,
                req.size,
                req.location,
                usd(balance.amount),
                req.size,
                usd(hour),
                usd(running_usd),
                usd(floor.amount),
                floor.currency,
                floor.ruling,
                floor.words,
                usd(after)
            ))
            .with_code("credit"));
        }
        lines.push(format!(
            "credit: balance {} USD, {} USD after one hour of all of them, above the floor {} {} (the operator's ruling {}: \"{}\")",
            usd(balance.amount),
            usd(after),
            usd(floor.amount),
            floor.currency,
            floor.ruling,
            floor.words
        ));
        Ok(())
    }

    /// Step 6: the VM with its address, security group and interface (the driver makes them and
    /// removes them again when a later one fails). A VM of this name left by an earlier create that
    /// did not finish is deleted and made again: its fleet key is lost.
    async fn make_vm(
        &self,
        profile: &Profile,
        req: &CreateRequest,
        user: &str,
        fleet_public: &str,
        host_key: &KeyPair,
        sources: &[String],
    ) -> Result<orca::Machine, Failure> {
        let title = self.cloud_title();
        let caps = self.provider.capabilities();
        let host_private = host_key.private_openssh()?;
        let mut spec = MachineSpec::new(&req.name, &req.size, &req.location, POOL)
            .with_user_data(cloudinit::user_data(
                user,
                &host_private,
                &host_key.public_key_only(),
            ))
            .with_ssh_key(fleet_public)
            .with_ssh_sources(sources.iter().cloned())
            .with_admission_group(GROUP)
            .with_disk_gb(req.disk_gb)
            .with_label("stado-target", &req.name)
            .with_label(HOME_LABEL, self.home.id());
        if caps.options.honours("image") {
            if let Some(image) = profile.get("azure.image_urn") {
                spec = spec.with_image(image);
            }
        }
        for attempt in 0..2 {
            match self.provider.create(&spec).await {
                Ok(Created::Machine(m)) => {
                    if m.address.is_empty() {
                        let cause = format!("cloud host {} was made without a public address", req.name);
                        return Err(match self.delete_vm(&m.id).await {
                            Ok(()) => Failure::new(format!("{cause}; it was deleted again")),
                            Err(left) => Failure::new(format!("{cause}; {title} still holds: {left}")),
                        });
                    }
                    return Ok(m);
                }
                Ok(Created::Adopted(m)) if !self.is_this_homes(&m) => {
                    // The owner's, but not this home's (homes given the same owner): left alone.
                    return Err(self.not_this_homes(&req.name, &format!("VM {}; {}", m.id, Self::whose(&m))));
                }
                Ok(Created::Adopted(m)) if attempt == 0 => {
                    tracing::warn!(host = %req.name, vm = %m.id, "a VM of this name was left by a create of this home that did not finish; deleting it");
                    if let Err(left) = self.delete_vm(&m.id).await {
                        return Err(Failure::new(format!(
                            "a VM named {} was left by an earlier create that did not finish, and it could not be deleted: {title} still holds {left}",
                            req.name
                        )));
                    }
                }
                Ok(Created::Adopted(m)) => {
                    return Err(Failure::new(format!(
                        "a VM named {} ({}) keeps coming back from an earlier create; nothing new was made",
                        req.name, m.id
                    )))
                }
                Ok(Created::NoStock { message, .. }) => {
                    // No claim that nothing was left: a driver whose clean-up could not remove
                    // everything still answers no stock (so that callers fall back on another
                    // offering), naming what remains in its message (Azure: "the clean-up could not
                    // remove: ..."), which is quoted whole.
                    return Err(Failure::new(format!(
                        "{title} has no {} to give in {} right now: {message} (try another size or location)",
                        req.size, req.location
                    ))
                    .with_code("no_stock"))
                }
                Err(e) => {
                    let code = match &e {
                        Error::PermissionDenied { .. } => "denied",
                        Error::Leftovers { .. } => "leftovers",
                        _ => "failed",
                    };
                    let mut msg =
                        format!("cloud host {} was not made: {}", req.name, self.cloud_error(&e));
                    if let Error::AlreadyExists { .. } = &e {
                        // Another owner's VM (or resource) of this name: the driver touched nothing.
                        let mut f = self.not_this_homes(&req.name, &e.to_string());
                        if let Err(left) = self.sweep(&req.name).await.map(|_| ()) {
                            f = Failure::new(format!("{}; {title} still holds: {left}", f.message()))
                                .with_code("exists");
                        }
                        return Err(f);
                    }
                    // The create may have made the VM all the same (its answer lost on the last try).
                    match self.sweep(&req.name).await {
                        Ok((_, foreign)) if !foreign.is_empty() => {
                            // The name is held by a VM of another home (of the same owner).
                            return Err(self.not_this_homes(
                                &req.name,
                                &format!("{}; the create answered: {e}", foreign.join(", ")),
                            ));
                        }
                        Ok((0, _)) => {}
                        Ok((n, _)) => msg.push_str(&format!("; {n} VM(s) of that name it made after all were deleted")),
                        Err(left) => msg.push_str(&format!("; {title} still holds: {left}")),
                    }
                    return Err(Failure::new(msg).with_code(code));
                }
            }
        }
        Err(Failure::new(format!(
            "cloud host {} was not made",
            req.name
        )))
    }

    /// Refuses a provider that cannot make what a cloud host needs (its machine options, SSH
    /// admission), before any call: otherwise the admission would be made for a host that never can.
    fn check_can_make_hosts(&self) -> Result<(), Failure> {
        let caps = self.provider.capabilities();
        let lacking: Vec<&str> = ["ssh_keys", "ssh_sources", "admission_group", "disk_gb"]
            .into_iter()
            .filter(|o| !caps.options.honours(o))
            .collect();
        if !lacking.is_empty() {
            return Err(Failure::new(format!(
                "the {} provider cannot make a cloud host: it does not honour the machine option(s) {}",
                self.kind,
                lacking.join(", ")
            )));
        }
        if self.provider.ssh_admission().is_none() {
            return Err(Failure::new(format!(
                "the {} provider cannot admit addresses on SSH, which cloud hosts need",
                self.kind
            )));
        }
        Ok(())
    }

    /// The locations of the cloud, when stado can know them before any call: the in-memory cloud's.
    fn known_locations(&self) -> Option<&'static [&'static str]> {
        (self.provider.kind() == "fake").then_some(&orca::memory::LOCATIONS[..])
    }

    /// The refusal of a location the cloud does not have; `known` says what it has, or why not.
    fn unknown_location(&self, location: &str, known: &str) -> Failure {
        Failure::refused(format!(
            "--location {location}: the {} cloud has no such location; {known}",
            self.kind
        ))
        .with_code("invalid")
    }

    /// The refusal of a name a VM that is not this home's holds.
    fn not_this_homes(&self, name: &str, what: &str) -> Failure {
        Failure::refused(format!(
            "a VM named {name} already stands in {} and is not this stado home's ({what}; this home is {}, owner {}); it was left alone and nothing was made: choose another name",
            self.cloud_title(),
            self.home.id(),
            self.provider.owner()
        ))
        .with_code("exists")
    }

    /// Deletes every VM named `name` in stado's pool that carries this home's label (what a failed
    /// create of this home may have left): how many, and the VMs of that name that are not this
    /// home's, which are left alone.
    async fn sweep(&self, name: &str) -> Result<(usize, Vec<String>), String> {
        let mut last = String::new();
        for _ in 0..3 {
            match self.provider.machines(POOL).await {
                Ok(ms) => {
                    let mut n = 0;
                    let mut foreign = Vec::new();
                    for m in ms.iter().filter(|m| m.name == name) {
                        if !self.is_this_homes(m) {
                            tracing::info!(vm = %m.id, "a VM of this name that is not this home's: left alone");
                            foreign.push(format!("VM {}; {}", m.id, Self::whose(m)));
                            continue;
                        }
                        self.delete_vm(&m.id).await?;
                        n += 1;
                    }
                    return Ok((n, foreign));
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!(
            "whatever VM named {name} it made (the pool could not be read: {last})"
        ))
    }

    /// Step 7: connects with the pinned host key and the fleet key until the host answers.
    async fn enrol(
        &self,
        name: &str,
        target: &Target,
        host_key: &KeyPair,
        fleet_public: &str,
    ) -> Result<String, String> {
        if let Some(sim) = &self.sim {
            // The simulated host's cloud-init installs the host key stado gave it.
            sim.boot(name, &host_key.public_key_only(), fleet_public)
                .map_err(|e| e.to_string())?;
        }
        let ep = Endpoint::of(target);
        let deadline = tokio::time::Instant::now() + self.timing.enrol;
        loop {
            let last = match self
                .channel
                .run(&ep, commands::ENROL, self.timing.command)
                .await
            {
                Ok(out) if out.status == 0 => return Ok(out.stdout.trim().to_string()),
                Ok(out) => format!("uname exited {}: {}", out.status, out.last_words()),
                Err(e) => e,
            };
            // A changed host key is no passing failure: stop at once.
            if last.contains("Host key verification failed")
                || tokio::time::Instant::now() >= deadline
            {
                return Err(last);
            }
            tokio::time::sleep(self.timing.enrol_interval).await;
        }
    }

    /// Removes a host that could not be enrolled or recorded, and its declaration. When its VM cannot
    /// be deleted, it stays declared, so that delete retries.
    async fn undo_host(
        &self,
        registry: &mut Registry,
        target: &Target,
        decl: &CloudDecl,
        minted: &Minted,
        cause: String,
    ) -> Failure {
        match self.delete_vm(&decl.vm_id).await {
            Ok(()) => {
                registry.remove_target(&target.name);
                let unsaved = registry.save(&self.home).err();
                minted.remove();
                if let Some(sim) = &self.sim {
                    let _ = sim.forget(&target.name);
                }
                match unsaved {
                    None => Failure::new(format!(
                        "{cause}; it was deleted again, since nothing would return it"
                    )),
                    Some(e) => Failure::new(format!(
                        "{cause}; it was deleted again, since nothing would return it, but its declaration could not be removed ({e}): stado cloud host delete {} removes it",
                        target.name
                    )),
                }
            }
            Err(left) => {
                let mut t = target.clone();
                t.cloud = Some(decl.clone());
                registry.put_target(t);
                let kept = registry.save(&self.home).is_ok();
                Failure::new(format!(
                    "{cause}; deleting it again failed, {} still holds: {left}; {}",
                    self.cloud_title(),
                    if kept {
                        format!(
                            "it stays declared: stado cloud host delete {} retries",
                            target.name
                        )
                    } else {
                        "and the registry could not record it either".to_string()
                    }
                ))
                .with_code("leftovers")
            }
        }
    }

    /// Step 9: cloud-init's end and the three version probes.
    async fn first_boot(&self, name: &str, target: &Target) -> Result<Versions, Failure> {
        let ep = Endpoint::of(target);
        let unclean = |what: String| {
            Failure::new(format!(
                "the first boot of cloud host {name} did not finish cleanly ({what}); see {CLOUD_INIT_LOG} on the host. {name} stays declared: stado cloud host delete {name} returns it"
            ))
            .with_code("first_boot")
        };
        match self
            .channel
            .run(&ep, commands::CLOUD_INIT_WAIT, self.timing.cloud_init)
            .await
        {
            Ok(out) if out.status == 0 && out.stdout.contains("status: done") => {}
            Ok(out) => {
                let status = out
                    .stdout
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("status:"))
                    .map(|s| s.trim().to_string())
                    .unwrap_or_else(|| format!("exit {}", out.status));
                return Err(unclean(format!("cloud-init status: {status}")));
            }
            Err(e) => {
                return Err(unclean(format!(
                    "cloud-init status --wait could not be asked: {e}"
                )))
            }
        }
        let mut answers = Vec::new();
        for (what, cmd) in [
            ("$HOME/.cargo/bin/rustc --version", commands::RUSTC_VERSION),
            ("node --version", commands::NODE_VERSION),
            ("npm --version", commands::NPM_VERSION),
        ] {
            match self.channel.run(&ep, cmd, self.timing.command).await {
                Ok(out) if out.status == 0 && !out.stdout.trim().is_empty() => {
                    answers.push(out.stdout.trim().to_string())
                }
                Ok(out) => return Err(unclean(format!("{what} answered: {}", out.last_words()))),
                Err(e) => return Err(unclean(format!("{what} could not be asked: {e}"))),
            }
        }
        Ok(Versions {
            rustc: answers[0].clone(),
            node: answers[1].clone(),
            npm: answers[2].clone(),
        })
    }
}
