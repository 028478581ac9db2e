//! `create`: the machine's address, security group, interface and VM made (or adopted from an
//! earlier attempt), and what a failed create made removed again.

use super::*;

/// How a create came to hold a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// This call made it: Azure accepted its `PUT`, or the VM carries this call's token.
    Made,
    /// A `PUT` of this call failed passingly: Azure may hold what it made, or nothing at all.
    Maybe,
    /// Found, not made, by this call (an earlier create's, or an existing machine's).
    Adopted,
}

/// A resource a create made or adopted, with its URL.
pub(crate) struct MadeRes {
    pub(crate) res: Res,
    pub(crate) url: String,
    pub(crate) origin: Origin,
}

/// What a create had made or adopted, newest last.
pub(crate) type Made = Vec<MadeRes>;

pub(crate) fn made_res(res: &Res, url: &str, origin: Origin) -> MadeRes {
    MadeRes {
        res: res.clone(),
        url: url.to_string(),
        origin,
    }
}

/// A policy's refusal of the machine's public address (or of an interface carrying one), as the
/// Corp policies of Azure landing zones refuse it: the way out named.
pub(crate) fn public_ip_denied(e: Error) -> Error {
    match e {
        Error::PermissionDenied { .. } if e.code() == Some("RequestDisallowedByPolicy") => e.prefixed(
            "a policy denies the machine's public address (ORCA_AZURE_PUBLIC_IP=false makes machines without one)",
        ),
        e => e,
    }
}

/// Whether network resource `found` serves something: an interface a VM holds, an address an
/// interface holds, a security group interfaces use.
fn is_in_use(found: &Value) -> bool {
    let p = &found["properties"];
    p["virtualMachine"]["id"].is_string()
        || p["ipConfiguration"]["id"].is_string()
        || p["networkInterfaces"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
}

impl AzureProvider {
    /// [`Provider::create`]: the spec checked before any call, then the machine made; what a failed create made is removed.
    pub(crate) async fn create_machine(
        &self,
        spec: &MachineSpec,
        unanswered: &kit::CreateGuard<'_>,
    ) -> Result<Created> {
        spec.validate()?;
        capabilities().check_spec(KIND, spec)?;
        check_name_length(&spec.name)?;
        if let Some(i) = &spec.image {
            ImageUrn::parse(i).map_err(|_| Error::invalid("image", URN_RULE))?;
        }
        if spec.disk_gb.is_some_and(|g| g > MAX_OS_DISK_GB) {
            return Err(Error::invalid(
                "disk_gb",
                format!("at most {MAX_OS_DISK_GB} GiB for an Azure OS disk"),
            ));
        }
        if spec.ssh_keys.is_empty() && self.cfg().ssh_public_key.is_none() {
            return Err(Error::invalid(
                "ssh_keys",
                "at least one SSH key: Azure VMs made here refuse passwords; give the spec a key or set ORCA_AZURE_SSH_PUBLIC_KEY",
            ));
        }
        let mut made = Made::new();
        match self.create_inner(spec, unanswered, &mut made).await {
            Ok(created) => Ok(created),
            Err(e) => {
                if e.is_retryable() {
                    return Err(self.after_passing_failure(&spec.name, &made, e).await);
                }
                let e = e.with_placement(&spec.machine_type, &spec.location);
                kit::no_stock_of(spec, self.undo(&made, e).await)
            }
        }
    }

    /// The answer of a create of VM `name` that failed passingly (`error`) with `made` made or
    /// adopted: when Azure holds the VM, or may (it answers it, or cannot be asked), everything
    /// stays for the retried create to adopt; when it surely holds none, what was made is removed,
    /// and the error stays retryable.
    async fn after_passing_failure(&self, name: &str, made: &Made, error: Error) -> Error {
        let vm_made = made
            .iter()
            .any(|m| m.res.part == Part::Vm && m.origin == Origin::Made);
        if vm_made {
            // A VM whose own create Azure ended `Failed` (preempted, an internal error: codes it
            // marks retryable) is no machine to hand back, and a retried create would adopt it as
            // one: it goes with what this call made for it, and the error stays retryable.
            if self.reads_failed(name).await {
                return self.undo(made, error).await;
            }
            // A delete of the VM preempts its create: the VM is going, not standing for a retry to
            // adopt. What the create made beside it stays for the delete, or delete_named, to take.
            if error.code() == Some("OperationPreempted") && self.reads_going(name).await {
                return error.with_may_have_acted().prefixed(&format!(
                    "VM {name} was deleted while its create ran (Azure preempted the create): a retried create makes a new one once it is gone, and delete_named of its name removes what is left"
                ));
            }
            // Azure accepted the VM's `PUT`: the VM stands, whatever reads show of it during its
            // visibility window (a read then answers 404, and so does its delete).
            return error.with_may_have_acted().prefixed(&format!(
                "VM {name} stands (Azure accepted its create): a retried create adopts it, and delete_named of its name removes it"
            ));
        }
        // A "not found" for a VM that may be new (its interface names it) is waited out before
        // it is believed.
        match self.read_vm(name, false).await {
            Ok(None) => self.undo(made, error).await,
            // The VM stands (or may): never "made nothing", even after a throttled read.
            Ok(Some(_)) | Err(_) => error.with_may_have_acted(),
        }
    }

    /// Whether one read of VM `name` shows it in provisioning state `Failed` (not found, another
    /// state or a failed read: false; nothing is waited for).
    async fn reads_failed(&self, name: &str) -> bool {
        let url = self.vm_url(name, false);
        matches!(
            self.get_vm(name, &url).await,
            Ok(Some(vm)) if vm.properties.provisioning_state.eq_ignore_ascii_case("Failed")
        )
    }

    /// Whether one read of VM `name` shows it being deleted, or gone (a failed read: false).
    async fn reads_going(&self, name: &str) -> bool {
        let url = self.vm_url(name, false);
        match self.get_vm(name, &url).await {
            Ok(Some(vm)) => vm
                .properties
                .provisioning_state
                .eq_ignore_ascii_case("Deleting"),
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// `PUT` of a new network resource in `location`, followed to its end. The network resource
    /// provider's `PUT` has no `If-None-Match` in its specification, so the resource is read first:
    /// one that exists is adopted if it carries this owner's tags of `pool` and is in `location` (a
    /// retried create, or what an earlier create or delete left), and refused as
    /// [`Error::AlreadyExists`] otherwise, untouched. An adopted one that nothing uses (what a
    /// delete or a failed create left) is then given this call's definition: a security group
    /// keeps the SSH sources, and an interface the admission group, it was made with, and the new
    /// machine must be admitted as its spec says, not as an earlier one was. One in use serves a
    /// standing machine (an earlier create's, adopted or refused next) and is left as it is.
    /// `made` learns the URL as soon as Azure may hold the resource.
    pub(crate) async fn put_network(
        &self,
        res: &Res,
        url: &str,
        body: &Value,
        pool: &str,
        made: &mut Made,
    ) -> Result<Value> {
        let what = res.to_string();
        let location = body["location"].as_str().unwrap_or_default();
        if let Some(found) = self
            .client()
            .get::<Value>(&format!("read {what}"), url)
            .await?
        {
            let in_use = is_in_use(&found);
            let tags: Tagged = decode(&what, found)?;
            if !is_in_pool(&tags.tags, pool, &self.inner.owner) {
                return Err(Error::already_exists(format!(
                    "{what} exists and is not this owner's ({:?}) of pool {pool}",
                    self.inner.owner
                )));
            }
            if !same_location(&tags.location, location) {
                return Err(Error::already_exists(format!(
                    "{what} exists in {}, not in {location}: a machine of that name is elsewhere",
                    tags.location
                )));
            }
            made.push(made_res(res, url, Origin::Adopted));
            let settled = self.settle(&what, url).await?;
            if in_use {
                return Ok(settled);
            }
            let op = format!("update {what}");
            let a = self
                .client()
                .call(&op, Method::PUT, url, Some(body), Condition::None)
                .await?;
            self.client().wait(&op, &a).await?;
            return Ok(a.body);
        }
        let op = format!("create {what}");
        match self
            .client()
            .call(&op, Method::PUT, url, Some(body), Condition::None)
            .await
        {
            Ok(a) => {
                made.push(made_res(res, url, Origin::Made));
                self.client().wait(&op, &a).await?;
                Ok(a.body)
            }
            Err(e) => {
                if e.is_retryable() {
                    // The PUT may have been served: clean-up must look.
                    made.push(made_res(res, url, Origin::Maybe));
                }
                Err(e)
            }
        }
    }

    /// Removes what a failed create made or may have made, newest first (the VM first: it takes
    /// its interface, address and disk with it); names what could not be removed. What it adopted
    /// stays unless this call surely made the VM: then those pieces served that VM alone. A
    /// capacity or quota outcome stays what it is, with what remains named in its message
    /// ([`Error::with_leftovers`]): callers fall back on it; any other failure becomes
    /// [`Error::Leftovers`].
    pub(crate) async fn undo(&self, made: &Made, error: Error) -> Error {
        let mut left = Vec::new();
        // What was adopted may be an earlier create's machine and what it uses: it stays. Only
        // once this call has made its own VM were the adopted pieces (what an earlier failed
        // create left) serving that VM alone, and they go with it. A VM `PUT` that failed
        // passingly proves no VM of this call's: it may have made nothing.
        let vm_made = made
            .iter()
            .any(|m| m.origin == Origin::Made && m.res.part == Part::Vm);
        for m in made
            .iter()
            .rev()
            .filter(|m| vm_made || m.origin != Origin::Adopted)
        {
            let what = m.res.to_string();
            let removed = match m.res.part {
                Part::Interface => {
                    self.remove_interface(&what, &m.url, self.cfg().reservation_wait)
                        .await
                }
                Part::Vm => self.remove_new_vm(&m.res.name, &m.url, m.origin).await,
                _ => self.remove(&what, &m.url).await,
            };
            if let Err(e) = removed {
                tracing::warn!(what = %what, error = %e, "clean-up after a failed create failed");
                left.push(Left::because(m.res.clone(), &e));
                if m.res.part == Part::Vm {
                    // A VM that stands keeps the OS disk its create made (its delete would take it).
                    left.push(Left::standing(Res::new(
                        Part::Disk,
                        &Names::of(&m.res.name).disk,
                    )));
                }
            }
        }
        if left.is_empty() {
            error
        } else {
            error.with_leftovers(left.iter().map(Left::to_string).collect())
        }
    }

    pub(crate) fn vm_body(
        &self,
        spec: &MachineSpec,
        names: &Names,
        image: &ImageUrn,
        tags: &Labels,
        nic_id: &str,
        keys: &[String],
    ) -> Value {
        let s = self.cfg();
        let mut os_disk = json!({
            "name": names.disk,
            "createOption": "FromImage",
            "deleteOption": "Delete",
            "caching": "ReadWrite",
            "managedDisk": {"storageAccountType": "StandardSSD_LRS"}
        });
        if let Some(gb) = spec.disk_gb.or(s.os_disk_gb) {
            os_disk["diskSizeGB"] = json!(gb);
        }
        let public_keys: Vec<Value> = keys
            .iter()
            .map(|k| {
                json!({
                    "path": format!("/home/{}/.ssh/authorized_keys", s.admin_user),
                    "keyData": k,
                })
            })
            .collect();
        let mut os_profile = json!({
            "computerName": spec.name,
            "adminUsername": s.admin_user,
            "linuxConfiguration": {
                "disablePasswordAuthentication": true,
                "ssh": {"publicKeys": public_keys}
            }
        });
        if !spec.user_data.is_empty() {
            os_profile["customData"] =
                json!(base64::engine::general_purpose::STANDARD.encode(spec.user_data.as_bytes()));
        }
        json!({
            "location": spec.location,
            "tags": tags,
            "properties": {
                "hardwareProfile": {"vmSize": spec.machine_type},
                "storageProfile": {
                    "imageReference": {
                        "publisher": image.publisher, "offer": image.offer,
                        "sku": image.sku, "version": image.version,
                    },
                    "osDisk": os_disk,
                },
                "osProfile": os_profile,
                "networkProfile": {"networkInterfaces": [
                    {"id": nic_id, "properties": {"primary": true, "deleteOption": "Delete"}}
                ]},
            }
        })
    }

    /// Makes the machine's four resources; answers the machine, made by this call or adopted from
    /// an earlier one.
    pub(crate) async fn create_inner(
        &self,
        spec: &MachineSpec,
        unanswered: &kit::CreateGuard<'_>,
        made: &mut Made,
    ) -> Result<Created> {
        // The size and the image are read before anything is made: a size not offered here, or
        // an image of the other architecture, is answered without a piece to undo.
        let arch = self
            .arch_to_make(&spec.machine_type, &spec.location)
            .await?;
        let image = match &spec.image {
            Some(i) => {
                let urn = ImageUrn::parse(i).map_err(|rule| Error::invalid("image", rule))?;
                let of = self.image_arch(&urn, &spec.location).await?;
                if of != arch {
                    return Err(Error::invalid(
                        "image",
                        format!(
                            "image {urn} is {of}, size {} is {arch}: choose an image of {arch}",
                            spec.machine_type
                        ),
                    ));
                }
                urn
            }
            None => self.cfg().image_for(&arch)?.clone(),
        };
        let names = Names::of(&spec.name);
        let mut tags = ownership_labels(&spec.pool, &self.inner.owner);
        tags.extend(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        let nic_id = self.id("Microsoft.Network/networkInterfaces", &names.nic);
        let mut keys: Vec<String> = self.cfg().ssh_public_key.iter().cloned().collect();
        keys.extend(spec.ssh_keys.iter().cloned());
        // This call's token on its VM alone: the VM is the piece a `PUT` can meet (412) after an
        // attempt of this call whose answer was lost.
        let token = uuid::Uuid::new_v4().to_string();
        let mut vm_tags = tags.clone();
        vm_tags.insert(CREATE_TAG.to_string(), token.clone());
        let vm_body = self.vm_body(spec, &names, &image, &vm_tags, &nic_id, &keys);

        let (pip, nic) = self.make_network(spec, &names, &tags, made).await?;

        // From the VM's `PUT` on, Azure may hold a VM of the name.
        unanswered.sending();
        let origin = self.put_vm(spec, &names, &vm_body, &token, made).await?;
        let what = Res::new(Part::Vm, &names.vm).to_string();
        self.remember(&names.vm);
        // A create answers only once reads show the VM.
        let vm = match self
            .get_vm(&names.vm, &self.vm_url(&names.vm, true))
            .await?
        {
            Some(vm) => vm,
            None => {
                let until = Instant::now() + self.cfg().visibility_window;
                self.wait_visible(&names.vm, true, until)
                    .await?
                    .ok_or_else(|| {
                        Error::transient(format!(
                            "{what} was made but reads do not show it after {} s; a retried create adopts it",
                            self.cfg().visibility_window.as_secs()
                        ))
                    })?
            }
        };
        let mut addr = Addresses::default();
        if let Some(Ok(p)) = pip.map(serde_json::from_value::<PublicIp>) {
            addr.public = p.properties.ip_address.clone();
            addr.fqdn = p.fqdn();
        }
        if let Ok(n) = serde_json::from_value::<Nic>(nic) {
            addr.private = n.private_address();
        }
        let public_missing =
            self.cfg().public_ip && (addr.public.is_empty() || addr.fqdn.is_empty());
        if addr.private.is_empty() || public_missing {
            addr = self.addresses_of(&vm).await?;
        }
        let m = self.machine_of(&vm, None, addr);
        Ok(match origin {
            Origin::Adopted => Created::Adopted(m),
            Origin::Made | Origin::Maybe => Created::Machine(m),
        })
    }

    /// The machine's network resources, each made or adopted ([`AzureProvider::put_network`]): its
    /// public address (unless machines have none), its own security group, and its interface;
    /// answers the address's and the interface's bodies.
    pub(crate) async fn make_network(
        &self,
        spec: &MachineSpec,
        names: &Names,
        tags: &Labels,
        made: &mut Made,
    ) -> Result<(Option<Value>, Value)> {
        let loc = &spec.location;
        let pip_id = self.id("Microsoft.Network/publicIPAddresses", &names.pip);
        let nsg_id = self.id("Microsoft.Network/networkSecurityGroups", &names.nsg);
        let nic_id = self.id("Microsoft.Network/networkInterfaces", &names.nic);
        // Without a public address (ORCA_AZURE_PUBLIC_IP=false) the machine has its private one.
        let pip = if self.cfg().public_ip {
            Some(
                self.put_network(
                    &Res::new(Part::PublicIp, &names.pip),
                    &self.client().url(&pip_id, NETWORK_API),
                    &json!({
                        "location": loc, "tags": tags,
                        "sku": {"name": "Standard", "tier": "Regional"},
                        "properties": {
                            "publicIPAllocationMethod": "Static",
                            "publicIPAddressVersion": "IPv4",
                            "deleteOption": "Delete",
                            "dnsSettings": {
                                "domainNameLabel": dns_label(&spec.name),
                                "domainNameLabelScope": "ResourceGroupReuse",
                            },
                        }
                    }),
                    &spec.pool,
                    made,
                )
                .await
                .map_err(public_ip_denied)?,
            )
        } else {
            None
        };

        let sources = if spec.ssh_sources.is_empty() {
            &self.cfg().ssh_sources
        } else {
            &spec.ssh_sources
        };
        let mut rules = Vec::new();
        if !sources.is_empty() {
            rules.push(json!({"name": SSH_RULE, "properties": ssh_rule(sources, 100)}));
        }
        self.put_network(
            &Res::new(Part::SecurityGroup, &names.nsg),
            &self.client().url(&nsg_id, NETWORK_API),
            &json!({"location": loc, "tags": tags, "properties": {"securityRules": rules}}),
            &spec.pool,
            made,
        )
        .await?;

        let mut ipcfg = json!({
            "name": "ipconfig1",
            "properties": {
                "primary": true,
                "privateIPAllocationMethod": "Dynamic",
                "subnet": {"id": self.subnet_id(loc)},
            }
        });
        if pip.is_some() {
            ipcfg["properties"]["publicIPAddress"] = json!({ "id": pip_id });
        }
        if let Some(group) = &spec.admission_group {
            ipcfg["properties"]["applicationSecurityGroups"] = json!([{"id": self.id(
                "Microsoft.Network/applicationSecurityGroups",
                &format!("{group}-{loc}")
            )}]);
        }
        let nic = self
            .put_network(
                &Res::new(Part::Interface, &names.nic),
                &self.client().url(&nic_id, NETWORK_API),
                &json!({"location": loc, "tags": tags, "properties": {
                    "networkSecurityGroup": {"id": nsg_id},
                    "ipConfigurations": [ipcfg],
                }}),
                &spec.pool,
                made,
            )
            .await
            .map_err(|e| match (&e, &spec.admission_group) {
                (Error::PermissionDenied { .. }, _) if pip.is_some() => public_ip_denied(e),
                (Error::NotFound { .. }, Some(g)) => e.prefixed(&format!(
                    "the admission group {g} of {loc} (application security group {g}-{loc}) must exist: admit_ssh makes it"
                )),
                _ => e,
            })?;

        Ok((pip, nic))
    }

    /// The VM's `PUT` with `If-None-Match: *` (412 when the VM exists), carrying this call's
    /// `token` in its [`CREATE_TAG`], followed to its end; a VM that exists is adopted when it is
    /// this owner's of the pool, of the size and location asked for. Answers whether this call
    /// made the VM ([`Origin::Made`]) or adopted an earlier call's ([`Origin::Adopted`]).
    pub(crate) async fn put_vm(
        &self,
        spec: &MachineSpec,
        names: &Names,
        vm_body: &Value,
        token: &str,
        made: &mut Made,
    ) -> Result<Origin> {
        // The VM: `If-None-Match: *` makes the PUT a create only (412 when the VM exists).
        let vm_res = Res::new(Part::Vm, &names.vm);
        let what = vm_res.to_string();
        let vm_url = self.vm_url(&names.vm, false);
        let op = format!("create {what}");
        let put = self
            .client()
            .call(
                &op,
                Method::PUT,
                &vm_url,
                Some(vm_body),
                Condition::IfNoneMatch,
            )
            .await;
        match put {
            Ok(a) => {
                made.push(made_res(&vm_res, &vm_url, Origin::Made));
                // From here Azure holds the VM: a "not found" for it is not believed until reads
                // had their window to show it, even when following its operation fails.
                self.remember(&names.vm);
                self.client().wait(&op, &a).await?;
                Ok(Origin::Made)
            }
            Err(Error::AlreadyExists { .. }) => {
                // Made by this call's own earlier attempt (whose answer was lost), or by an earlier
                // create: adopt it if it is this owner's of this pool.
                let Some(found) = self.read_vm(&names.vm, false).await? else {
                    return Err(Error::transient(format!(
                        "{what} vanished while being adopted"
                    )));
                };
                let size = &found.properties.hardware_profile.vm_size;
                let refused = if !is_in_pool(&found.tags, &spec.pool, &self.inner.owner) {
                    Some(format!(
                        "{what} exists and is not this owner's ({:?}) of pool {}",
                        self.inner.owner, spec.pool
                    ))
                } else if !size.eq_ignore_ascii_case(&spec.machine_type)
                    || !same_location(&found.location, &spec.location)
                {
                    Some(format!(
                        "{what} exists as {size} in {}, not as {} in {}: not the machine asked for",
                        found.location, spec.machine_type, spec.location
                    ))
                } else {
                    None
                };
                if let Some(why) = refused {
                    // What was adopted on the way belongs to the VM that exists: it stays.
                    made.retain(|m| m.origin != Origin::Adopted);
                    return Err(Error::already_exists(why));
                }
                // Only the VM carrying this call's token is this call's (an attempt whose answer
                // was lost made it), to remove if it fails. An attempt that failed passingly may
                // as well have made nothing: a VM without the token is an earlier create's,
                // adopted and never removed here.
                let ours = made_by(&found.tags, token);
                let origin = if ours { Origin::Made } else { Origin::Adopted };
                made.push(made_res(&vm_res, &vm_url, origin));
                if let Some(failure) = self.settle_vm(&names.vm).await? {
                    if ours {
                        return Err(failure);
                    }
                    // An earlier create's VM that Azure marks Failed (a refused start or resize, a
                    // failed extension) is still that machine: it is answered as it is (its
                    // provisioning state in `cloud_status`), and deleting it is the caller's call.
                    tracing::warn!(vm = %names.vm, error = %failure, "adopted a VM in provisioning state Failed");
                }
                Ok(origin)
            }
            Err(e) => {
                if e.is_retryable() {
                    // The PUT may have been served: clean-up must look.
                    made.push(made_res(&vm_res, &vm_url, Origin::Maybe));
                }
                Err(e)
            }
        }
    }

    /// Deletes VM `name` (at `url`) that a failed create made ([`Origin::Made`]) or may have made
    /// ([`Origin::Maybe`]), confirmed gone. Azure answers a change of a VM that reads do not show
    /// yet with 404 as it answers a read: that is no proof the VM is gone. The VM is then read
    /// until it shows, for at most the visibility window ([`AzureProvider::read_vm`]), and deleted
    /// once it does. A VM whose `PUT` Azure accepted and that reads never showed may still stand:
    /// an error names it.
    pub(crate) async fn remove_new_vm(&self, name: &str, url: &str, origin: Origin) -> Result<()> {
        let what = format!("VM {name}");
        if !self.delete_request(&what, url).await? {
            match self.read_vm(name, false).await? {
                Some(_) => self.remove(&what, url).await?,
                None if origin == Origin::Made => {
                    return Err(Error::transient(format!(
                        "Azure accepted its create, but neither reads nor its delete have shown it within the visibility window ({:?}): it may stand",
                        self.cfg().visibility_window
                    )));
                }
                None => {}
            }
        } else {
            self.confirm_gone(&what, url).await?;
        }
        self.forget(name);
        Ok(())
    }

    /// Reads a VM being adopted until its provisioning state is final; answers the failure of a
    /// failed one.
    pub(crate) async fn settle_vm(&self, name: &str) -> Result<Option<Error>> {
        kit::poll(
            &format!("provisioning of VM {name}"),
            self.cfg().poll_interval,
            self.cfg().operation_timeout,
            || async {
                let Some(vm) = self.read_vm(name, true).await? else {
                    return Err(Error::transient(format!(
                        "VM {name} vanished while being adopted"
                    )));
                };
                match vm.properties.provisioning_state.as_str() {
                    "Succeeded" | "" => Ok(Some(None)),
                    "Failed" => Ok(Some(Some(match vm.failure() {
                        Some((code, message)) => crate::client::map_error(
                            None,
                            &crate::model::ErrorDetail {
                                code,
                                message,
                                ..Default::default()
                            },
                            None,
                        ),
                        None => Error::other(format!("VM {name} is in provisioning state Failed")),
                    }))),
                    _ => Ok(None),
                }
            },
        )
        .await
    }
}

/// Refuses a machine name longer than [`MAX_NAME`]: the names of its resources add a suffix to it.
pub(crate) fn check_name_length(name: &str) -> Result<()> {
    if name.len() > MAX_NAME {
        return Err(Error::invalid(
            "name",
            format!("at most {MAX_NAME} characters on Azure (resource names add a suffix)"),
        ));
    }
    Ok(())
}
