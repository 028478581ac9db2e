//! Step 6: the host's resources (its public address, security group, interface and VM, which the
//! driver makes in one create and removes again when a later one fails), declared at once; and the
//! removal of a host a later step could not finish.

use orca::{Created, Error, ErrorKind, Machine, MachineSpec};

use super::{CreateRequest, Minted, PriceReport, Step};
use crate::cloud::{Stado, GROUP, HOME_LABEL, POOL, TITLE};
use crate::cloudinit;
use crate::error::Failure;
use crate::keys::{FleetKey, KeyPair};
use crate::profile::Profile;
use crate::registry::{CloudDecl, CloudState, Held, Target};

/// A host made and declared: what the later steps reach it with.
pub(super) struct Host {
    /// The host's name.
    pub name: String,
    /// Its registry target, without the declaration.
    pub target: Target,
    /// Its declaration (`enrolling` until step 8 records it whole).
    pub decl: CloudDecl,
    /// The host key stado minted and gave it through cloud-init.
    pub host_key: KeyPair,
    /// The account stado logs in as.
    pub user: String,
}

/// A step 6 that made no host: why, and whether the cloud may still hold something of its name
/// (then the host stays declared `creating`, and delete, list and reap resolve it by its name).
struct NotMade {
    failure: Failure,
    may_hold: bool,
}

impl NotMade {
    /// A failure after which nothing of the name stands.
    fn clean(failure: Failure) -> NotMade {
        NotMade {
            failure,
            may_hold: false,
        }
    }

    /// A failure after which the cloud may still hold something of the name.
    fn holding(failure: Failure) -> NotMade {
        NotMade {
            failure,
            may_hold: true,
        }
    }
}

/// What a sweep found of a name in stado's pool, and removed.
#[derive(Debug, Default)]
struct Swept {
    /// This home's VM of that name, removed with the pieces beside it.
    vm: Option<String>,
    /// Whether anything of that name was removed: the VM, or pieces that stood without one.
    removed: bool,
    /// The VM of that name when it is another home's: left alone, and what stands beside it too.
    foreign: Option<String>,
}

impl Stado {
    /// Step 6: declares the host `creating`, makes its VM (with its address, security group and
    /// interface) and declares it `enrolling`: the VM is billed from now on, so that a create stopped before step 8 (killed, or
    /// its machine gone down while enrolment waits) leaves a host that list, delete and reap see and
    /// can remove, never an untracked one.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn host_step(
        &self,
        profile: &Profile,
        req: &CreateRequest,
        price: &PriceReport,
        sources: &[String],
        fleet: &FleetKey,
        minted: &Minted,
        registry: &mut Held,
    ) -> Step<Host> {
        let user = profile.get("azure.vm_username").unwrap_or_default();
        self.declare_intent(req, price, fleet, minted, &user, registry)?;
        let made = async {
            // Both before any call to the cloud: their failure made nothing.
            let host_key =
                KeyPair::generate(&format!("stado-host-{}", req.name)).map_err(NotMade::clean)?;
            let spec = self
                .host_spec(profile, req, &user, fleet, &host_key, sources)
                .map_err(NotMade::clean)?;
            let machine = self.make_vm(req, &spec).await?;
            Ok::<_, NotMade>((machine, host_key))
        }
        .await;
        let (machine, host_key) = match made {
            Ok(made) => made,
            Err(not_made) => return Err(self.end_intent(req, minted, registry, not_made).into()),
        };
        let host = self.declared_host(req, price, fleet, &machine, host_key, user);
        let mut provisional = host.target.clone();
        provisional.cloud = Some(host.decl.clone());
        registry.put_target(provisional);
        if let Err(e) = registry.save() {
            registry.remove_target(&req.name);
            let cause = format!("cloud host {} could not be declared: {e}", req.name);
            let f = self.undo_host(registry, &host, &host.decl, minted, cause);
            return Err(f.await.into());
        }
        let lines = vec![
            format!(
                "host: VM {} at {} in {} ({}, {} GiB), made {}: its public address, security group, interface and VM",
                machine.id,
                machine.address,
                req.location,
                req.size,
                req.disk_gb,
                host.decl.created_at.format("%Y-%m-%dT%H:%M:%SZ")
            ),
            format!(
                "declared: targets[{}].cloud as enrolling until the host is enrolled and recorded",
                req.name
            ),
        ];
        Ok((host, lines))
    }

    /// Declares the host `creating` before the cloud is asked for its VM: the VM is billed from the
    /// moment the cloud makes it, which can be minutes before the create hears so (on Azure), and a
    /// create stopped meanwhile leaves this declaration, which list, delete and reap resolve by the
    /// VM's name. When it cannot be written, the keys go and nothing is made.
    fn declare_intent(
        &self,
        req: &CreateRequest,
        price: &PriceReport,
        fleet: &FleetKey,
        minted: &Minted,
        user: &str,
        registry: &mut Held,
    ) -> Result<(), Failure> {
        let mut intent = self.host_target(req, fleet, "", user);
        intent.cloud = Some(self.host_decl(req, price, None));
        registry.put_target(intent);
        if let Err(e) = registry.save() {
            registry.remove_target(&req.name);
            minted.remove();
            return Err(Failure::new(format!(
                "cloud host {} could not be declared before its VM was asked for: {e}; nothing was made",
                req.name
            )));
        }
        Ok(())
    }

    /// Ends the intent of a step 6 that made no host: the keys it minted go (a host that is never
    /// enrolled is never reached with them), and so does its declaration once nothing of the name
    /// stands. When the cloud may still hold something of it, the declaration stays `creating`, so
    /// that delete, list and reap find what is left by the name, and the failure says so.
    fn end_intent(
        &self,
        req: &CreateRequest,
        minted: &Minted,
        registry: &mut Held,
        not_made: NotMade,
    ) -> Failure {
        minted.remove();
        let NotMade { failure, may_hold } = not_made;
        if may_hold {
            let name = &req.name;
            return failure.adding(&format!(
                "{name} stays declared (creating): stado cloud host delete {name} removes what {TITLE} may hold of it"
            ));
        }
        registry.remove_target(&req.name);
        if let Err(e) = registry.save() {
            tracing::warn!(host = %req.name, error = %e, "could not remove the declaration of a create that made nothing");
        }
        failure
    }

    /// The machine spec of the host: its cloud-init (holding the host key stado minted for it), the
    /// fleet key's public half, the admitted addresses, the admission group, its disk and labels.
    fn host_spec(
        &self,
        profile: &Profile,
        req: &CreateRequest,
        user: &str,
        fleet: &FleetKey,
        host_key: &KeyPair,
        sources: &[String],
    ) -> Result<MachineSpec, Failure> {
        let host_private = host_key.private_openssh()?;
        let user_data = cloudinit::user_data(user, &host_private, &host_key.public_key_only());
        let mut spec = MachineSpec::new(&req.name, &req.size, &req.location, POOL)
            .with_user_data(user_data)
            .with_ssh_key(&fleet.public_line)
            .with_ssh_sources(sources.iter().cloned())
            .with_admission_group(GROUP)
            .with_disk_gb(req.disk_gb)
            .with_label("stado-target", &req.name)
            .with_label(HOME_LABEL, self.home.id());
        if self.provider.capabilities().options.honours("image") {
            if let Some(image) = profile.get("azure.image_urn") {
                spec = spec.with_image(image);
            }
        }
        Ok(spec)
    }

    /// The registry's target and declaration of the host on `machine`.
    fn declared_host(
        &self,
        req: &CreateRequest,
        price: &PriceReport,
        fleet: &FleetKey,
        machine: &Machine,
        host_key: KeyPair,
        user: String,
    ) -> Host {
        Host {
            name: req.name.clone(),
            target: self.host_target(req, fleet, &machine.address, &user),
            decl: self.host_decl(req, price, Some(machine)),
            host_key,
            user,
        }
    }

    /// The host's target at `address`, without its declaration.
    fn host_target(
        &self,
        req: &CreateRequest,
        fleet: &FleetKey,
        address: &str,
        user: &str,
    ) -> Target {
        let mut target = Target::new(&req.name, address);
        target.user = Some(user.to_string());
        target.identity = Some(fleet.private.clone());
        target.known_hosts = Some(self.home.pinned_host_key(&req.name));
        target
    }

    /// The host's declaration: `enrolling` on `machine`, or `creating` before there is one.
    fn host_decl(
        &self,
        req: &CreateRequest,
        price: &PriceReport,
        machine: Option<&Machine>,
    ) -> CloudDecl {
        CloudDecl {
            provider: self.kind.clone(),
            location: req.location.clone(),
            size: req.size.clone(),
            disk_gb: req.disk_gb,
            hourly_usd: price.hourly_usd,
            priced_in: price.priced_in.clone(),
            idle_minutes: req.idle_minutes,
            address: machine.map(|m| m.address.clone()).unwrap_or_default(),
            vm_id: machine.map(|m| m.id.clone()).unwrap_or_default(),
            created_at: machine
                .and_then(|m| m.created_at)
                .unwrap_or_else(chrono::Utc::now),
            state: machine.map_or(CloudState::Creating, |_| CloudState::Enrolling),
        }
    }

    /// Makes the VM of `spec`. A VM of this name left by an earlier create of this home that did not
    /// finish is deleted and made again (its fleet key is lost); one that is not this home's is
    /// refused and left alone.
    async fn make_vm(&self, req: &CreateRequest, spec: &MachineSpec) -> Result<Machine, NotMade> {
        for attempt in 0..2 {
            let m = match self.provider.create(spec).await {
                Ok(Created::Machine(m)) => return self.with_address(req, m).await,
                Ok(Created::Adopted(m)) => m,
                Ok(Created::NoStock { message, .. }) => {
                    return Err(self.no_stock(req, &message).await)
                }
                Err(e) => return Err(self.not_made(req, e).await),
            };
            if !self.is_this_homes(&m) {
                // The owner's, but not this home's (homes given the same owner): left alone, and
                // nothing of this create's stands beside it.
                let what = format!("VM {}; {}", m.id, Self::whose(&m));
                return Err(NotMade::clean(self.not_this_homes(&req.name, &what)));
            }
            if attempt > 0 {
                return Err(NotMade::holding(Failure::new(format!(
                    "a VM named {} ({}) keeps coming back from an earlier create; nothing new was made",
                    req.name, m.id
                ))));
            }
            tracing::warn!(host = %req.name, vm = %m.id, "a VM of this name was left by a create of this home that did not finish; deleting it");
            if let Err(left) = self.delete_vm(&m.id).await {
                return Err(NotMade::holding(Failure::new(format!(
                    "a VM named {} was left by an earlier create that did not finish, and it could not be deleted: {TITLE} still holds {left}",
                    req.name
                ))));
            }
        }
        Err(NotMade::holding(Failure::new(format!(
            "cloud host {} was not made",
            req.name
        ))))
    }

    /// `m` when it has a public address (stado reaches hosts by it); else it is deleted again.
    async fn with_address(&self, req: &CreateRequest, m: Machine) -> Result<Machine, NotMade> {
        if !m.address.is_empty() {
            return Ok(m);
        }
        let cause = format!("cloud host {} was made without a public address", req.name);
        Err(match self.delete_vm(&m.id).await {
            Ok(()) => NotMade::clean(Failure::new(format!("{cause}; it was deleted again"))),
            Err(left) => NotMade::holding(Failure::new(format!(
                "{cause}; {TITLE} still holds: {left}"
            ))),
        })
    }

    /// No stock. A driver whose clean-up could not remove everything still answers no stock (so
    /// that callers fall back on another offering), naming what remains in its message (Azure:
    /// "the clean-up could not remove: ..."), which is quoted whole; what stands of the name is
    /// then looked for and removed, so that the host stays declared only while something may.
    async fn no_stock(&self, req: &CreateRequest, message: &str) -> NotMade {
        let mut msg = format!(
            "{TITLE} has no {} to give in {} right now: {message} (try another size or location)",
            req.size, req.location
        );
        let may_hold = add_swept(&mut msg, &self.sweep(&req.name).await);
        NotMade {
            failure: Failure::new(msg).with_code("no_stock"),
            may_hold,
        }
    }

    /// The failure of a create that answered `e`. The create may have made the VM all the same (its
    /// answer lost on the last try), or pieces beside it that its clean-up could not remove: what
    /// this home made of that name is removed, a VM of another home is named and left alone.
    /// Nothing stands of the name once the sweep removed what it found, or found nothing after an
    /// error that says the cloud made nothing; after any other error a cloud may not show yet what
    /// it made, and the host stays declared.
    async fn not_made(&self, req: &CreateRequest, e: Error) -> NotMade {
        if let Error::AlreadyExists { .. } = &e {
            // Another owner's VM (or resource) of this name: the driver touched nothing.
            let f = self.not_this_homes(&req.name, &e.to_string());
            return match self.sweep(&req.name).await {
                Ok(_) => NotMade::clean(f),
                Err(left) => NotMade::holding(f.adding(&format!("{TITLE} still holds: {left}"))),
            };
        }
        let mut msg = format!(
            "cloud host {} was not made: {}",
            req.name,
            self.cloud_error(&e)
        );
        if e.made_nothing()
            && matches!(
                e.kind(),
                ErrorKind::InvalidSpec | ErrorKind::InvalidSettings
            )
        {
            // The driver's own checks refused the spec before any call: nothing of the name was
            // made, and a sweep by the name may be refused the same way (or fail to read), which
            // would keep a declaration nothing could remove.
            return NotMade::clean(Failure::new(msg).with_code("refused"));
        }
        let code = match &e {
            Error::PermissionDenied { .. } => "denied",
            Error::Leftovers { .. } => "leftovers",
            _ => "failed",
        };
        let swept = self.sweep(&req.name).await;
        let may_hold = match &swept {
            Ok(Swept {
                foreign: Some(vm), ..
            }) => {
                // The name is held by a VM of another home (of the same owner).
                let what = format!("{vm}; the create answered: {e}");
                return NotMade::clean(self.not_this_homes(&req.name, &what));
            }
            Ok(Swept { vm: Some(_), .. }) => {
                msg.push_str("; 1 VM(s) of that name it made after all were deleted");
                false
            }
            Ok(Swept { removed: false, .. }) => !e.made_nothing(),
            // Pieces that stood without a VM were removed, or the cloud still holds something.
            _ => add_swept(&mut msg, &swept),
        };
        NotMade {
            failure: Failure::new(msg).with_code(code),
            may_hold,
        }
    }

    /// The refusal of a name a VM that is not this home's holds.
    fn not_this_homes(&self, name: &str, what: &str) -> Failure {
        Failure::refused(format!(
            "a VM named {name} already stands in {TITLE} and is not this stado home's ({what}; this home is {}, owner {}); it was left alone and nothing was made: choose another name",
            self.home.id(),
            self.provider.owner()
        ))
        .with_code("exists")
    }

    /// Removes what a failed create of this home may have left of `name` in stado's pool: the VM of
    /// that name when it carries this home's label, and the pieces beside it (which stand without a
    /// VM when the create stopped before it). A VM of that name that is not this home's is left
    /// alone, and so is what stands beside it: that is its home's. Else what the cloud still holds.
    async fn sweep(&self, name: &str) -> Result<Swept, String> {
        let vm = self.vm_named(name).await?;
        if let Some(m) = vm.as_ref().filter(|m| !self.is_this_homes(m)) {
            tracing::info!(vm = %m.id, "a VM of this name that is not this home's: left alone");
            return Ok(Swept {
                foreign: Some(format!("VM {}; {}", m.id, Self::whose(m))),
                ..Swept::default()
            });
        }
        let vm = vm.map(|m| m.id);
        let removed = self.remove_named(name, vm.as_deref()).await?;
        Ok(Swept {
            vm,
            removed,
            foreign: None,
        })
    }

    /// The VM of stado's pool named `name`, in every state but gone; the read is tried three times,
    /// since a create that just failed may have failed for the same passing cause.
    async fn vm_named(&self, name: &str) -> Result<Option<Machine>, String> {
        let mut last = String::new();
        for _ in 0..3 {
            match self.provider.machine_named(POOL, name).await {
                Ok(m) => return Ok(m),
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!(
            "whatever VM named {name} it made (the pool could not be read: {last})"
        ))
    }

    /// Removes a host a later step could not finish, and its declaration; the failure, `cause` first.
    /// When its VM cannot be deleted, it stays declared (as `decl`), so that delete retries.
    pub(super) async fn undo_host(
        &self,
        registry: &mut Held,
        host: &Host,
        decl: &CloudDecl,
        minted: &Minted,
        cause: String,
    ) -> Failure {
        let name = &host.name;
        if let Err(left) = self.delete_vm(&decl.vm_id).await {
            let mut t = host.target.clone();
            t.cloud = Some(decl.clone());
            registry.put_target(t);
            let kept = match registry.save() {
                Ok(()) => format!("it stays declared: stado cloud host delete {name} retries"),
                Err(_) => "and the registry could not record it either".to_string(),
            };
            return Failure::new(format!(
                "{cause}; deleting it again failed, {TITLE} still holds: {left}; {kept}"
            ))
            .with_code("leftovers");
        }
        registry.remove_target(name);
        let unsaved = registry.save().err();
        minted.remove();
        if let Some(sim) = &self.sim {
            let _ = sim.forget(name);
        }
        let mut msg = format!("{cause}; it was deleted again, since nothing would return it");
        if let Some(e) = unsaved {
            msg.push_str(&format!(
                ", but its declaration could not be removed ({e}): stado cloud host delete {name} removes it"
            ));
        }
        Failure::new(msg)
    }
}

/// Adds to a failed create's `msg` what its sweep did: removed what was left of the name, or could
/// not remove what the cloud still holds. Whether the cloud may still hold something of the name.
fn add_swept(msg: &mut String, swept: &Result<Swept, String>) -> bool {
    match swept {
        Ok(s) if s.removed => msg.push_str("; what it had left of that name was removed after all"),
        Ok(_) => {}
        Err(left) => msg.push_str(&format!("; {TITLE} still holds: {left}")),
    }
    swept.is_err()
}
