//! The extensions this driver answers through `dyn Provider`:
//!
//! - [`MachineLabels`]: tag changes with the Tags API (`PATCH {vm}/providers/Microsoft.Resources/
//!   tags/default`, operation `Merge` for what is set, `Delete` for what is removed), which changes
//!   only the tags named, so a concurrent change of another tag is never lost;
//! - [`SshAdmission`]: what the admission needs (the location's subnet, its own security group and a
//!   free priority there) read first, then the location's application security group
//!   `<group>-<location>`, the inbound
//!   rule `<group>` on the subnet's own security group at the first free priority from 100 (written
//!   as its own sub-resource: no other rule is rewritten), and each named VM's own security-group
//!   rule set to the same sources; every named VM (and its security group) is read and checked to be
//!   this owner's before anything is written, so a refusal changes nothing;
//! - [`CreditBalance`]: the billing profile's credit (`Microsoft.Consumption/credits/
//!   balanceSummary`), when the settings name a billing account and profile.

use async_trait::async_trait;
use orca_machines::ext::{
    check_admission_input, first_free_priority, FIRST_ADMISSION_PRIORITY, LAST_ADMISSION_PRIORITY,
};
use orca_machines::kit::check_owned;
use orca_machines::labels::Labels;
use orca_machines::spec::{validate_label_key_to_remove, validate_labels};
use orca_machines::{
    validate_id, Admission, AdmissionRule, Balance, CreditBalance, Error, Machine, MachineLabels,
    Result, SshAdmission,
};
use reqwest::Method;
use serde_json::json;

use crate::client::{decode, Condition, CONSUMPTION_API, NETWORK_API, TAGS_API};
use crate::model::{CreditSummary, Nsg, SecurityRule, Subnet, TagsResource};
use crate::provider::{ssh_rule, AzureProvider, Names, SSH_RULE};

#[async_trait]
impl MachineLabels for AzureProvider {
    async fn set_labels(&self, id: &str, set: &Labels, remove: &[String]) -> Result<Machine> {
        validate_id(id)?;
        validate_labels(set)?;
        for k in remove {
            validate_label_key_to_remove(k)?;
        }
        let vm = self.owned_existing(id, false).await?;
        let url = self.client().url(
            &format!(
                "{}/providers/Microsoft.Resources/tags/default",
                self.vm_id(id)
            ),
            TAGS_API,
        );
        if !set.is_empty() {
            self.patch_tags("merge VM tags", &url, "Merge", set).await?;
        }
        // Delete by name and the value read: a value another writer set since is theirs to keep.
        let gone: Labels = remove
            .iter()
            .filter(|k| !set.contains_key(*k))
            .filter_map(|k| vm.tags.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        if !gone.is_empty() {
            self.patch_tags("delete VM tags", &url, "Delete", &gone)
                .await?;
        }
        self.machine_now(id).await
    }
}

/// The priority an inbound rule `name` takes on a group holding `rules`: its own when it exists,
/// else the first from 100 that no other inbound rule holds.
fn priority_for(rules: &[SecurityRule], name: &str, what: &str) -> Result<u32> {
    if let Some(p) = rules
        .iter()
        .find(|r| r.name.eq_ignore_ascii_case(name) && r.is_inbound())
        .and_then(|r| r.properties.priority)
    {
        return Ok(p);
    }
    first_free_priority(
        rules
            .iter()
            .filter(|r| r.is_inbound() && !r.name.eq_ignore_ascii_case(name))
            .filter_map(|r| r.properties.priority),
        FIRST_ADMISSION_PRIORITY,
        LAST_ADMISSION_PRIORITY,
    )
    .ok_or_else(|| {
        Error::quota(format!(
            "{what} has no free inbound priority from {FIRST_ADMISSION_PRIORITY} to {LAST_ADMISSION_PRIORITY}"
        ))
    })
}

impl AzureProvider {
    /// One `PATCH` of the Tags API at `url`: `operation` (`Merge`, `Delete`) of `tags`.
    async fn patch_tags(&self, op: &str, url: &str, operation: &str, tags: &Labels) -> Result<()> {
        let body = json!({"operation": operation, "properties": {"tags": tags}});
        let a = self
            .client()
            .call(op, Method::PATCH, url, Some(&body), Condition::None)
            .await?;
        let _: TagsResource = decode(op, a.body)?;
        Ok(())
    }

    /// `PUT` of a sub-resource or resource, followed to its end; a failure is prefixed with `what`
    /// (`the application security group x was not made`).
    async fn put_and_wait(
        &self,
        op: &str,
        url: &str,
        body: &serde_json::Value,
        what: &str,
    ) -> Result<()> {
        let a = self
            .client()
            .call(op, Method::PUT, url, Some(body), Condition::None)
            .await
            .map_err(|e| e.prefixed(what))?;
        self.client()
            .wait(op, &a)
            .await
            .map_err(|e| e.prefixed(what))
    }

    /// What re-admitting VM `id` will write, read and checked before any write: its own security
    /// group (this owner's, as the VM is) and the priority its SSH rule takes there; `None` when
    /// there is no such VM. Another owner's VM or security group is `NotOwned`.
    async fn readmit_target(&self, id: &str) -> Result<Option<Readmit>> {
        if self.owned_vm(id, false).await?.is_none() {
            return Ok(None);
        }
        let names = Names::of(id);
        let nsg_id = self.id("Microsoft.Network/networkSecurityGroups", &names.nsg);
        let Some(nsg) = self
            .client()
            .get::<Nsg>(
                "read security group",
                &self.client().url(&nsg_id, NETWORK_API),
            )
            .await?
        else {
            return Err(Error::not_found(format!(
                "security group {} of machine {id}",
                names.nsg
            )));
        };
        check_owned(id, &nsg.tags, self.owner_name())?;
        let priority = priority_for(
            &nsg.properties.security_rules,
            SSH_RULE,
            &format!("security group {}", names.nsg),
        )?;
        Ok(Some(Readmit {
            id: id.to_string(),
            nsg_name: names.nsg,
            nsg_id,
            priority,
        }))
    }

    /// The security group the location's subnet carries, with the priority the admission's rule
    /// `group` takes there; `None` when the subnet carries none. A subnet or security group that
    /// does not exist, or a group with no free priority, is refused.
    async fn subnet_rule(&self, group: &str, location: &str) -> Result<Option<(String, u32)>> {
        let client = self.client();
        let subnet_id = self.subnet_id(location);
        let Some(subnet) = client
            .get::<Subnet>("read subnet", &client.url(&subnet_id, NETWORK_API))
            .await?
        else {
            return Err(Error::not_found(format!(
                "subnet {subnet_id} (orca creates no virtual network)"
            )));
        };
        if let Some(nsg_id) = subnet
            .properties
            .network_security_group
            .map(|n| n.id)
            .filter(|n| !n.is_empty())
        {
            let Some(nsg) = client
                .get::<Nsg>(
                    "read subnet security group",
                    &client.url(&nsg_id, NETWORK_API),
                )
                .await?
            else {
                return Err(Error::not_found(format!(
                    "security group {nsg_id} named by the subnet"
                )));
            };
            let priority = priority_for(
                &nsg.properties.security_rules,
                group,
                &format!("security group {nsg_id}"),
            )?;
            return Ok(Some((nsg_id, priority)));
        }
        Ok(None)
    }

    /// Sets the SSH rule of a re-admitted VM's own security group to `sources`.
    async fn readmit(&self, target: &Readmit, sources: &[String]) -> Result<()> {
        let rule_url = self.client().url(
            &format!("{}/securityRules/{SSH_RULE}", target.nsg_id),
            NETWORK_API,
        );
        self.put_and_wait(
            "put security rule",
            &rule_url,
            &json!({"properties": ssh_rule(sources, target.priority)}),
            &format!(
                "the rule {SSH_RULE} of security group {} was not written",
                target.nsg_name
            ),
        )
        .await
    }
}

/// A VM to re-admit, checked to be this owner's before any write.
struct Readmit {
    id: String,
    nsg_name: String,
    nsg_id: String,
    priority: u32,
}

#[async_trait]
impl SshAdmission for AzureProvider {
    async fn admit_ssh(
        &self,
        group: &str,
        location: &str,
        sources: &[String],
        readmit: &[String],
    ) -> Result<Admission> {
        check_admission_input(group, location, sources, readmit)?;
        // Contract 2: another owner's machine is refused and nothing changes. Every machine to
        // re-admit is read and checked first; only then is anything written.
        let mut targets = Vec::new();
        let mut missing = Vec::new();
        for id in readmit {
            match self.readmit_target(id).await? {
                Some(t) => targets.push(t),
                None => missing.push(id.clone()),
            }
        }
        let client = self.client();
        let asg_name = format!("{group}-{location}");
        let asg_id = self.id("Microsoft.Network/applicationSecurityGroups", &asg_name);
        // What the admission needs is read before anything is made: a refusal here made nothing,
        // and says so as a failure of the group's own step does.
        let subnet_rule = self.subnet_rule(group, location).await.map_err(|e| {
            e.prefixed(&format!(
                "the application security group {asg_name} was not made"
            ))
        })?;
        self.put_and_wait(
            &format!("put application security group {asg_name}"),
            &client.url(&asg_id, NETWORK_API),
            &json!({"location": location, "tags": {"orca-admission": group}, "properties": {}}),
            &format!("the application security group {asg_name} was not made"),
        )
        .await?;
        let mut admission = Admission::new(&asg_id);
        if let Some((nsg_id, priority)) = subnet_rule {
            let rule_url = client.url(&format!("{nsg_id}/securityRules/{group}"), NETWORK_API);
            self.put_and_wait(
                &format!("put security rule {group}"),
                &rule_url,
                &json!({"properties": {
                    "description": format!("SSH to the members of {asg_name}"),
                    "protocol": "Tcp",
                    "sourcePortRange": "*",
                    "destinationPortRange": "22",
                    "sourceAddressPrefixes": sources,
                    "destinationApplicationSecurityGroups": [{"id": asg_id}],
                    "access": "Allow",
                    "priority": priority,
                    "direction": "Inbound",
                }}),
                &format!("the rule {group} of security group {nsg_id} was not written"),
            )
            .await?;
            admission.rule = Some(AdmissionRule::new(&nsg_id, group, priority));
        }
        for t in &targets {
            self.readmit(t, sources).await?;
            admission.readmitted.push(t.id.clone());
        }
        admission.missing = missing;
        Ok(admission)
    }
}

#[async_trait]
impl CreditBalance for AzureProvider {
    async fn balance(&self) -> Result<Balance> {
        let Some((account, profile)) = &self.cfg().billing else {
            return Err(Error::unsupported(
                "azure",
                "credit balance without a billing profile",
            ));
        };
        let url = self.client().url(
            &format!(
                "/providers/Microsoft.Billing/billingAccounts/{account}/billingProfiles/{profile}/providers/Microsoft.Consumption/credits/balanceSummary"
            ),
            CONSUMPTION_API,
        );
        let op = "read credit balance";
        let a = self
            .client()
            .call(op, Method::GET, &url, None, Condition::None)
            .await?;
        if a.status == 204 || a.body.is_null() {
            return Err(Error::not_found(format!(
                "a credit on billing profile {profile} of account {account} (Azure answered none)"
            )));
        }
        let summary: CreditSummary = decode(op, a.body)?;
        let p = summary.properties;
        let amount = p
            .balance_summary
            .and_then(|b| b.estimated_balance.or(b.current_balance))
            .filter(|a| a.value.is_some());
        let Some(amount) = amount else {
            return Err(Error::other(format!(
                "{op}: Azure's answer holds no balance"
            )));
        };
        let currency = [amount.currency, p.credit_currency, p.billing_currency]
            .into_iter()
            .find(|c| !c.is_empty())
            .unwrap_or_else(|| "USD".to_string());
        Ok(Balance::new(amount.value.unwrap_or(0.0), currency))
    }
}
