//! The answers of Azure this driver reads, as typed `serde` models written from the REST
//! specifications (compute 2024-07-01, network 2024-05-01, resource SKUs 2021-07-01, resources
//! 2021-04-01, consumption 2023-05-01, Retail Prices 2023-01-01-preview).
//!
//! Read leniently, as Azure's own SDKs do: every field the driver does not need is ignored, every
//! field may be absent or `null` (it then reads as its default), and enumerations are kept as the
//! cloud's words (`String`), so a value added to Azure later never fails a read.

use std::collections::BTreeMap;

use orca_machines::chrono;
use orca_machines::{Status, Timestamp};
use serde::{Deserialize, Deserializer};

/// `null` or absent reads as the default.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Tags: a map of strings; `null`, absent, or a value that is not a string are tolerated (the
/// value is then skipped).
fn tags<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let raw = Option::<BTreeMap<String, serde_json::Value>>::deserialize(d)?.unwrap_or_default();
    Ok(raw
        .into_iter()
        .filter_map(|(k, v)| match v {
            serde_json::Value::String(s) => Some((k, s)),
            _ => None,
        })
        .collect())
}

/// A reference to another resource (`{"id": "..."}`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct SubResource {
    #[serde(deserialize_with = "nullable")]
    pub id: String,
}

/// One page of a Resource Manager list.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "T: Deserialize<'de>"))]
pub(crate) struct ListPage<T> {
    #[serde(default = "Vec::new", deserialize_with = "nullable")]
    pub value: Vec<T>,
    #[serde(default)]
    pub next_link: Option<String>,
}

/// A virtual machine (`VirtualMachine`), what the driver reads of it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Vm {
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub location: String,
    #[serde(deserialize_with = "tags")]
    pub tags: BTreeMap<String, String>,
    #[serde(deserialize_with = "nullable")]
    pub properties: VmProperties,
}

/// `VirtualMachineProperties`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct VmProperties {
    #[serde(deserialize_with = "nullable")]
    pub hardware_profile: HardwareProfile,
    #[serde(deserialize_with = "nullable")]
    pub provisioning_state: String,
    /// When the VM was made (`timeCreated`, compute 2021-11-01 and later).
    pub time_created: Option<String>,
    pub instance_view: Option<InstanceView>,
    #[serde(deserialize_with = "nullable")]
    pub network_profile: NetworkProfile,
    #[serde(deserialize_with = "nullable")]
    pub storage_profile: StorageProfile,
}

/// `StorageProfile`: what the driver reads of it is the OS disk.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct StorageProfile {
    #[serde(deserialize_with = "nullable")]
    pub os_disk: OsDisk,
}

/// `OSDisk`: its name, the managed disk's id, and what the VM's delete does to it (`Delete`,
/// `Detach`; absent is `Detach`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct OsDisk {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub managed_disk: SubResource,
    #[serde(deserialize_with = "nullable")]
    pub delete_option: String,
}

/// `HardwareProfile`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct HardwareProfile {
    #[serde(deserialize_with = "nullable")]
    pub vm_size: String,
}

/// `NetworkProfile`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct NetworkProfile {
    #[serde(deserialize_with = "nullable")]
    pub network_interfaces: Vec<SubResource>,
}

/// `VirtualMachineInstanceView` (and the answer of `.../instanceView`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct InstanceView {
    #[serde(deserialize_with = "nullable")]
    pub statuses: Vec<InstanceViewStatus>,
}

/// `InstanceViewStatus`: `code` is `ProvisioningState/<state>[/<reason>]` or `PowerState/<state>`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct InstanceViewStatus {
    #[serde(deserialize_with = "nullable")]
    pub code: String,
    #[serde(deserialize_with = "nullable")]
    pub level: String,
    #[serde(deserialize_with = "nullable")]
    pub display_status: String,
    #[serde(deserialize_with = "nullable")]
    pub message: String,
}

impl Vm {
    /// `timeCreated` as a timestamp; `None` when absent or not RFC 3339.
    pub fn created_at(&self) -> Option<Timestamp> {
        let t = self.properties.time_created.as_deref()?;
        chrono::DateTime::parse_from_rfc3339(t)
            .ok()
            .map(|t| t.with_timezone(&chrono::Utc))
    }

    /// The VM's state in orca's set and Azure's own word, from its provisioning state and its
    /// instance view (`view` when read apart from the model).
    pub fn power(&self, view: Option<&InstanceView>) -> (Status, String) {
        let ps = self.properties.provisioning_state.as_str();
        if ps.eq_ignore_ascii_case("Deleting") {
            return (Status::Deleting, "ProvisioningState/deleting".into());
        }
        let view = view.or(self.properties.instance_view.as_ref());
        let power = view.and_then(|v| {
            v.statuses
                .iter()
                .find_map(|s| s.code.strip_prefix("PowerState/"))
        });
        // A failed VM keeps a power state (running, when its OS provisioning timed out): it is no
        // healthy machine whatever that says, and both words are kept.
        if ps.eq_ignore_ascii_case("Failed") {
            let word = match power {
                Some(p) => format!("ProvisioningState/{ps} PowerState/{p}"),
                None => format!("ProvisioningState/{ps}"),
            };
            return (Status::Unknown, word);
        }
        match power {
            Some(p) => {
                let status = match p.to_ascii_lowercase().as_str() {
                    "running" => Status::Running,
                    "starting" => Status::Starting,
                    "stopping" | "deallocating" => Status::Stopping,
                    "stopped" | "deallocated" => Status::Stopped,
                    _ => Status::Unknown,
                };
                (status, format!("PowerState/{p}"))
            }
            None => match ps.to_ascii_lowercase().as_str() {
                "creating" | "updating" | "" => (
                    Status::Starting,
                    format!(
                        "ProvisioningState/{}",
                        if ps.is_empty() { "unknown" } else { ps }
                    ),
                ),
                _ => (Status::Unknown, format!("ProvisioningState/{ps}")),
            },
        }
    }

    /// The failure a failed VM carries in its instance view: (code, message).
    pub fn failure(&self) -> Option<(String, String)> {
        let v = self.properties.instance_view.as_ref()?;
        let s = v.statuses.iter().find(|s| {
            s.level.eq_ignore_ascii_case("Error")
                || s.code
                    .to_ascii_lowercase()
                    .starts_with("provisioningstate/failed")
        })?;
        let code = s.code.rsplit('/').next().unwrap_or("").to_string();
        let message = if s.message.is_empty() {
            s.display_status.clone()
        } else {
            s.message.clone()
        };
        Some((code, message))
    }
}

/// A network interface (`NetworkInterface`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Nic {
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    #[serde(deserialize_with = "tags")]
    pub tags: BTreeMap<String, String>,
    #[serde(deserialize_with = "nullable")]
    pub properties: NicProperties,
}

/// `NetworkInterfacePropertiesFormat`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct NicProperties {
    #[serde(deserialize_with = "nullable")]
    pub ip_configurations: Vec<IpConfiguration>,
    pub virtual_machine: Option<SubResource>,
    #[serde(deserialize_with = "nullable")]
    pub provisioning_state: String,
}

/// `NetworkInterfaceIPConfiguration`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct IpConfiguration {
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    #[serde(deserialize_with = "nullable")]
    pub properties: IpConfigurationProperties,
}

/// `NetworkInterfaceIPConfigurationPropertiesFormat`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct IpConfigurationProperties {
    #[serde(rename = "privateIPAddress", deserialize_with = "nullable")]
    pub private_ip_address: String,
    #[serde(rename = "publicIPAddress")]
    pub public_ip_address: Option<SubResource>,
    pub primary: Option<bool>,
}

impl Nic {
    /// The private address of the primary configuration (the first when none says).
    pub fn private_address(&self) -> String {
        let cfgs = &self.properties.ip_configurations;
        cfgs.iter()
            .find(|c| c.properties.primary == Some(true))
            .or(cfgs.first())
            .map(|c| c.properties.private_ip_address.clone())
            .unwrap_or_default()
    }

    /// The VM this interface is attached to, if any.
    pub fn vm_id(&self) -> Option<&str> {
        self.properties
            .virtual_machine
            .as_ref()
            .map(|v| v.id.as_str())
            .filter(|v| !v.is_empty())
    }
}

/// A public IP address (`PublicIPAddress`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct PublicIp {
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    #[serde(deserialize_with = "tags")]
    pub tags: BTreeMap<String, String>,
    #[serde(deserialize_with = "nullable")]
    pub properties: PublicIpProperties,
}

/// `PublicIPAddressPropertiesFormat`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct PublicIpProperties {
    #[serde(deserialize_with = "nullable")]
    pub ip_address: String,
    pub dns_settings: Option<DnsSettings>,
    pub ip_configuration: Option<SubResource>,
    #[serde(deserialize_with = "nullable")]
    pub provisioning_state: String,
}

/// `PublicIPAddressDnsSettings`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct DnsSettings {
    #[serde(deserialize_with = "nullable")]
    pub fqdn: String,
}

impl PublicIp {
    /// The fully qualified name of its DNS record, or empty.
    pub fn fqdn(&self) -> String {
        self.properties
            .dns_settings
            .as_ref()
            .map(|d| d.fqdn.clone())
            .unwrap_or_default()
    }

    /// The interface (id, lower case, without the configuration) it is attached to.
    pub fn nic_id(&self) -> Option<String> {
        let cfg = self
            .properties
            .ip_configuration
            .as_ref()?
            .id
            .to_ascii_lowercase();
        cfg.split("/ipconfigurations/")
            .next()
            .map(str::to_string)
            .filter(|s| !s.is_empty())
    }
}

/// A resource whose tags and provisioning state are all that is read (security groups,
/// application security groups, the resource a `PUT` answered).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Tagged {
    #[serde(deserialize_with = "nullable")]
    pub location: String,
    #[serde(deserialize_with = "tags")]
    pub tags: BTreeMap<String, String>,
    #[serde(deserialize_with = "nullable")]
    pub properties: Provisioned,
}

/// `{"provisioningState": ...}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct Provisioned {
    #[serde(deserialize_with = "nullable")]
    pub provisioning_state: String,
}

/// A network security group (`NetworkSecurityGroup`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Nsg {
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    #[serde(deserialize_with = "tags")]
    pub tags: BTreeMap<String, String>,
    #[serde(deserialize_with = "nullable")]
    pub properties: NsgProperties,
}

/// `NetworkSecurityGroupPropertiesFormat`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct NsgProperties {
    #[serde(deserialize_with = "nullable")]
    pub security_rules: Vec<SecurityRule>,
}

/// `SecurityRule`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct SecurityRule {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub properties: SecurityRuleProperties,
}

/// `SecurityRulePropertiesFormat`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct SecurityRuleProperties {
    pub priority: Option<u32>,
    #[serde(deserialize_with = "nullable")]
    pub direction: String,
}

impl SecurityRule {
    /// Whether the rule is inbound (a rule without a direction counts as inbound: it may hold a
    /// priority an inbound rule needs).
    pub fn is_inbound(&self) -> bool {
        self.properties.direction.is_empty()
            || self.properties.direction.eq_ignore_ascii_case("Inbound")
    }
}

/// A subnet (`Subnet`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Subnet {
    #[serde(deserialize_with = "nullable")]
    pub properties: SubnetProperties,
}

/// `SubnetPropertiesFormat`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct SubnetProperties {
    pub network_security_group: Option<SubResource>,
}

/// A size a VM can be resized to (`VirtualMachineSize`, the items of `{vm}/vmSizes`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct VmSize {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
}

/// A resource SKU (`ResourceSku`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct Sku {
    #[serde(deserialize_with = "nullable")]
    pub resource_type: String,
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub capabilities: Vec<SkuCapability>,
}

/// `ResourceSkuCapabilities`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct SkuCapability {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub value: String,
}

impl Sku {
    /// The `CpuArchitectureType` capability (`x64`, `Arm64`), if the SKU states it.
    pub fn architecture(&self) -> Option<&str> {
        self.capabilities
            .iter()
            .find(|c| c.name == "CpuArchitectureType")
            .map(|c| c.value.as_str())
    }
}

/// The body of an error answer: `{"error": {...}}` (Resource Manager) or `{"Error": {"Code",
/// "Message"}}` (Retail Prices).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct CloudError {
    pub error: Option<ErrorDetail>,
    #[serde(rename = "Error")]
    pub pascal: Option<PascalError>,
}

/// `ErrorDetail` / `CloudErrorBody`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct ErrorDetail {
    #[serde(deserialize_with = "nullable")]
    pub code: String,
    #[serde(deserialize_with = "nullable")]
    pub message: String,
    #[serde(deserialize_with = "nullable")]
    pub target: String,
    #[serde(deserialize_with = "nullable")]
    pub details: Vec<ErrorDetail>,
    #[serde(deserialize_with = "nullable")]
    pub additional_info: Vec<ErrorAdditionalInfo>,
}

/// `ErrorAdditionalInfo`: for a policy deny, `info` names the assignment.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ErrorAdditionalInfo {
    #[serde(rename = "type", deserialize_with = "nullable")]
    pub kind: String,
    #[serde(deserialize_with = "nullable")]
    pub info: PolicyInfo,
}

/// The policy fields of `ErrorAdditionalInfo.info` (`PolicyViolation`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct PolicyInfo {
    #[serde(deserialize_with = "nullable")]
    pub policy_assignment_name: String,
    #[serde(deserialize_with = "nullable")]
    pub policy_assignment_display_name: String,
    #[serde(deserialize_with = "nullable")]
    pub policy_assignment_id: String,
}

/// The Retail Prices API's error form.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct PascalError {
    #[serde(rename = "Code", deserialize_with = "nullable")]
    pub code: String,
    #[serde(rename = "Message", deserialize_with = "nullable")]
    pub message: String,
}

impl CloudError {
    /// The error detail, whichever form the body took.
    pub fn detail(self) -> ErrorDetail {
        match (self.error, self.pascal) {
            (Some(e), _) => e,
            (None, Some(p)) => ErrorDetail {
                code: p.code,
                message: p.message,
                ..ErrorDetail::default()
            },
            (None, None) => ErrorDetail::default(),
        }
    }
}

/// An `Azure-AsyncOperation` status (`status`: `InProgress`, `Succeeded`, `Failed`, `Canceled`, or
/// a value the driver does not know, read as still running).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct OperationStatus {
    #[serde(deserialize_with = "nullable")]
    pub status: String,
    pub error: Option<ErrorDetail>,
}

/// One page of the Retail Prices API.
#[derive(Debug, Deserialize)]
pub(crate) struct PricePage {
    #[serde(rename = "Items", default, deserialize_with = "nullable")]
    pub items: Vec<PriceRow>,
    #[serde(rename = "NextPageLink", default)]
    pub next_page_link: Option<String>,
}

/// A Retail Prices row.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct PriceRow {
    #[serde(deserialize_with = "nullable")]
    pub currency_code: String,
    pub retail_price: Option<f64>,
    #[serde(deserialize_with = "nullable")]
    pub arm_sku_name: String,
    #[serde(deserialize_with = "nullable")]
    pub product_name: String,
    #[serde(deserialize_with = "nullable")]
    pub sku_name: String,
    #[serde(deserialize_with = "nullable")]
    pub unit_of_measure: String,
    #[serde(rename = "type", deserialize_with = "nullable")]
    pub kind: String,
}

impl PriceRow {
    /// Whether the row is the Linux pay-as-you-go hour (not Windows, Spot, Low Priority or a
    /// reservation).
    pub fn is_linux_on_demand(&self) -> bool {
        self.kind == "Consumption"
            && self.unit_of_measure == "1 Hour"
            && !self.product_name.contains("Windows")
            && !self.sku_name.contains("Spot")
            && !self.sku_name.contains("Low Priority")
            && self.retail_price.is_some_and(|p| p > 0.0)
    }
}

/// The Tags API's answer (`TagsResource`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct TagsResource {
    #[serde(deserialize_with = "nullable")]
    pub properties: TagsProperties,
}

/// `Tags`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct TagsProperties {
    #[serde(deserialize_with = "tags")]
    pub tags: BTreeMap<String, String>,
}

/// A credit balance summary (`CreditSummary`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct CreditSummary {
    #[serde(deserialize_with = "nullable")]
    pub properties: CreditSummaryProperties,
}

/// `CreditSummaryProperties`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct CreditSummaryProperties {
    pub balance_summary: Option<CreditBalanceSummary>,
    #[serde(deserialize_with = "nullable")]
    pub credit_currency: String,
    #[serde(deserialize_with = "nullable")]
    pub billing_currency: String,
}

/// `CreditBalanceSummary`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct CreditBalanceSummary {
    pub estimated_balance: Option<Amount>,
    pub current_balance: Option<Amount>,
}

/// `Amount`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Amount {
    #[serde(deserialize_with = "nullable")]
    pub currency: String,
    pub value: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vm_with_nulls_and_unknown_fields_reads() {
        let vm: Vm = serde_json::from_value(serde_json::json!({
            "name": "a", "tags": null, "future": {"x": 1},
            "properties": {"hardwareProfile": null, "timeCreated": "2021-06-27T01:02:38.3138469+00:00",
                "instanceView": {"statuses": [{"code": "PowerState/hibernated"}]}}
        }))
        .unwrap();
        assert!(vm.tags.is_empty());
        assert_eq!(vm.properties.hardware_profile.vm_size, "");
        assert_eq!(
            vm.created_at().unwrap().to_rfc3339(),
            "2021-06-27T01:02:38.313846900+00:00"
        );
        assert_eq!(
            vm.power(None),
            (Status::Unknown, "PowerState/hibernated".into())
        );
    }

    #[test]
    fn power_states_map() {
        for (code, want) in [
            ("running", Status::Running),
            ("deallocated", Status::Stopped),
            ("stopped", Status::Stopped),
            ("starting", Status::Starting),
            ("stopping", Status::Stopping),
            ("deallocating", Status::Stopping),
        ] {
            let vm: Vm = serde_json::from_value(serde_json::json!({"properties": {
                "provisioningState": "Succeeded", "instanceView": {"statuses": [
                {"code": "ProvisioningState/succeeded"}, {"code": format!("PowerState/{code}")}]}}}))
            .unwrap();
            let (s, word) = vm.power(None);
            assert_eq!(s, want, "{code}");
            assert_eq!(word, format!("PowerState/{code}"));
        }
        let deleting: Vm = serde_json::from_value(
            serde_json::json!({"properties": {"provisioningState": "Deleting"}}),
        )
        .unwrap();
        assert_eq!(deleting.power(None).0, Status::Deleting);
    }
}

/// A marketplace image version (`VirtualMachineImages_List` items, `VirtualMachineImages_Get`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ImageVersion {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(default)]
    pub properties: ImageVersionProperties,
}

/// What a marketplace image version says of itself.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ImageVersionProperties {
    /// `x64` or `Arm64` (absent on older images, which are x64).
    #[serde(default)]
    pub architecture: Option<String>,
}
