//! Answers written from Azure's published API references and examples (Azure/azure-rest-api-specs:
//! compute 2024-07-01 `VirtualMachine_Get`, `VirtualMachine_Get_InstanceView`; network 2024-05-01
//! `NetworkInterfaceGet`, `PublicIpAddressGet`; resource SKUs 2021-07-01
//! `ListAvailableResourceSkusForARegion`; consumption 2023-05-01 `CreditSummaryByBillingProfile`;
//! the Retail Prices and Tags API references; the `CloudError` and long-running operation forms),
//! that the driver must read or classify: full objects, objects with every optional field absent,
//! values Azure may add later, pages whose links carry an explicit port, and error bodies of each
//! documented kind. They go through the same decoding and the same error mapping as the transport.

use orca_machines::{ErrorKind, Status};
use serde_json::{json, Value};

use crate::client::{map_error, same_origin};
use crate::model::{
    CloudError, CreditSummary, InstanceView, ListPage, Nic, OperationStatus, PricePage, PublicIp,
    Sku, TagsResource, Vm,
};

fn read<T: serde::de::DeserializeOwned>(v: Value) -> T {
    crate::client::decode("published answer", v).expect("the published answer reads")
}

/// The VM of `VirtualMachine_Get` (a Windows VM with data disks, an availability set, extensions
/// and a display-name location), as published.
fn vm_get() -> Value {
    json!({
        "name": "myVM",
        "id": "/subscriptions/{subscription-id}/resourceGroups/myResourceGroup/providers/Microsoft.Compute/virtualMachines/myVM",
        "type": "Microsoft.Compute/virtualMachines",
        "location": "West US",
        "tags": {"myTag1": "tagValue1"},
        "etag": "\"1\"",
        "properties": {
            "vmId": "0f47b100-583c-48e3-a4c0-aefc2c9bbcc1",
            "availabilitySet": {"id": "/subscriptions/{subscription-id}/resourceGroups/myResourceGroup/providers/Microsoft.Compute/availabilitySets/my-AvailabilitySet"},
            "hardwareProfile": {"vmSize": "Standard_DS3_v2"},
            "storageProfile": {
                "imageReference": {"publisher": "MicrosoftWindowsServer", "offer": "WindowsServer", "sku": "2016-Datacenter", "version": "latest"},
                "osDisk": {"osType": "Windows", "name": "myOsDisk", "createOption": "FromImage", "caching": "ReadWrite",
                    "managedDisk": {"storageAccountType": "Premium_LRS", "id": "/subscriptions/{subscription-id}/resourceGroups/myResourceGroup/providers/Microsoft.Compute/disks/myOsDisk"},
                    "diskSizeGB": 30},
                "dataDisks": [{"lun": 0, "name": "myDataDisk0", "createOption": "Empty", "caching": "ReadWrite", "diskSizeGB": 30}]
            },
            "userData": "RXhhbXBsZSBVc2VyRGF0YQ==",
            "osProfile": {"computerName": "myVM", "adminUsername": "admin",
                "windowsConfiguration": {"provisionVMAgent": true, "enableAutomaticUpdates": false}, "secrets": []},
            "networkProfile": {"networkInterfaces": [{"id": "/subscriptions/{subscription-id}/resourceGroups/myResourceGroup/providers/Microsoft.Network/networkInterfaces/{myNIC}"}]},
            "diagnosticsProfile": {"bootDiagnostics": {"enabled": true, "storageUri": "http://{myStorageAccount}.blob.core.windows.net"}},
            "extensionsTimeBudget": "PT50M",
            "provisioningState": "Succeeded",
            "timeCreated": "2021-06-27T01:02:38.3138469+00:00"
        },
        "resources": [{"name": "CustomScriptExtension-DSC", "type": "Microsoft.Compute/virtualMachines/extensions",
            "location": "west us", "tags": {"displayName": "CustomScriptExtension-DSC"},
            "properties": {"autoUpgradeMinorVersion": true, "provisioningState": "Succeeded", "settings": {}}}],
        "managedBy": "/subscriptions/{subscription-id}/resourceGroups/myResourceGroup/providers/Microsoft.Compute/virtualMachineScaleSets/{MyVmss}"
    })
}

#[test]
fn a_vm_as_published_reads_its_facts() {
    let vm: Vm = read(vm_get());
    assert_eq!(vm.name, "myVM");
    assert_eq!(vm.location, "West US");
    assert_eq!(vm.tags["myTag1"], "tagValue1");
    assert_eq!(vm.properties.hardware_profile.vm_size, "Standard_DS3_v2");
    assert_eq!(
        vm.created_at().unwrap().to_rfc3339(),
        "2021-06-27T01:02:38.313846900+00:00"
    );
    assert!(vm.properties.network_profile.network_interfaces[0]
        .id
        .ends_with("/networkInterfaces/{myNIC}"));
    // The model alone holds no power state: a succeeded VM without its instance view is unknown.
    assert_eq!(
        vm.power(None),
        (Status::Unknown, "ProvisioningState/Succeeded".into())
    );
}

#[test]
fn a_vm_with_every_optional_field_absent_or_null_reads() {
    let vm: Vm = read(json!({"id": "/x", "name": "bare", "location": "westus", "properties": {}}));
    assert_eq!(vm.properties.hardware_profile.vm_size, "");
    assert_eq!(vm.created_at(), None);
    assert!(vm.tags.is_empty());
    assert_eq!(vm.power(None).0, Status::Starting);
    let vm: Vm = read(
        json!({"name": "n", "tags": null, "location": null, "properties": {
        "hardwareProfile": null, "networkProfile": {"networkInterfaces": null},
        "timeCreated": "not a time", "instanceView": null, "provisioningState": null}}),
    );
    assert_eq!(vm.created_at(), None, "an unreadable time is no time");
    assert!(vm.properties.network_profile.network_interfaces.is_empty());
    let vm: Vm = read(json!({"name": "n", "tags": {"a": "1", "b": 2, "c": null}}));
    assert_eq!(vm.tags.len(), 1, "non-string tag values are skipped");
}

#[test]
fn an_instance_view_as_published_and_power_states_azure_may_add() {
    let view: InstanceView = read(json!({
        "platformUpdateDomain": 1, "platformFaultDomain": 1, "computerName": "myVM",
        "osName": "Windows Server 2016 Datacenter", "osVersion": "Microsoft Windows NT 10.0.14393.0",
        "vmAgent": {"vmAgentVersion": "2.7.41491.949", "statuses": [{"code": "ProvisioningState/succeeded",
            "level": "Info", "displayStatus": "Ready", "message": "GuestAgent is running and accepting new configurations.",
            "time": "2019-10-14T23:11:22+00:00"}], "extensionHandlers": []},
        "disks": [{"name": "myOsDisk", "statuses": [{"code": "ProvisioningState/succeeded", "level": "Info",
            "displayStatus": "Provisioning succeeded", "time": "2019-10-14T21:29:47.477089+00:00"}]}],
        "hyperVGeneration": "V1",
        "patchStatus": {"availablePatchSummary": {"status": "Succeeded", "error": null}},
        "isVMInStandbyPool": false,
        "statuses": [
            {"code": "ProvisioningState/succeeded", "level": "Info", "displayStatus": "Provisioning succeeded",
                "time": "2019-10-14T21:30:12.8051917+00:00"},
            {"code": "PowerState/running", "level": "Info", "displayStatus": "VM running"}
        ]
    }));
    let vm: Vm = read(json!({"name": "myVM", "properties": {"provisioningState": "Succeeded"}}));
    assert_eq!(
        vm.power(Some(&view)),
        (Status::Running, "PowerState/running".into())
    );
    // A power state or provisioning state added later is kept as Azure's word, never a failure.
    for (code, ps, want, word) in [
        (
            "PowerState/hibernated",
            "Succeeded",
            Status::Unknown,
            "PowerState/hibernated",
        ),
        (
            "PowerState/Deallocated",
            "Succeeded",
            Status::Stopped,
            "PowerState/Deallocated",
        ),
        (
            "OSState/Generalized",
            "Migrating",
            Status::Unknown,
            "ProvisioningState/Migrating",
        ),
    ] {
        let vm: Vm = read(json!({"name": "v", "properties": {"provisioningState": ps,
            "instanceView": {"statuses": [{"code": code}]}}}));
        assert_eq!(vm.power(None), (want, word.to_string()), "{code} {ps}");
    }
    // A failed provisioning names its code and message.
    let vm: Vm = read(
        json!({"name": "v", "properties": {"provisioningState": "Failed",
        "instanceView": {"statuses": [{"code": "ProvisioningState/failed/AllocationFailed", "level": "Error",
            "displayStatus": "Provisioning failed", "message": "Allocation failed. We do not have sufficient capacity."}]}}}),
    );
    assert_eq!(
        vm.failure(),
        Some((
            "AllocationFailed".into(),
            "Allocation failed. We do not have sufficient capacity.".into()
        ))
    );
}

#[test]
fn an_interface_and_public_addresses_as_published() {
    let nic: Nic = read(json!({
        "name": "test-nic",
        "id": "/subscriptions/subid/resourceGroups/rg1/providers/Microsoft.Network/networkInterfaces/test-nic",
        "location": "eastus",
        "properties": {
            "provisioningState": "Succeeded",
            "ipConfigurations": [
                {"name": "ipconfig2", "id": "/subscriptions/subid/resourceGroups/rg1/providers/Microsoft.Network/networkInterfaces/test-nic/ipConfigurations/ipconfig2",
                    "properties": {"provisioningState": "Succeeded", "privateIPAddress": "172.20.2.16/28",
                        "privateIPAddressPrefixLength": 28, "privateIPAllocationMethod": "Dynamic", "primary": false}},
                {"name": "ipconfig1", "id": "/subscriptions/subid/resourceGroups/rg1/providers/Microsoft.Network/networkInterfaces/test-nic/ipConfigurations/ipconfig1",
                    "properties": {"provisioningState": "Succeeded", "privateIPAddress": "172.20.2.4",
                        "privateIPAllocationMethod": "Dynamic",
                        "publicIPAddress": {"id": "/subscriptions/subid/resourceGroups/rg1/providers/Microsoft.Network/publicIPAddresses/test-ip"},
                        "primary": true, "privateIPAddressVersion": "IPv4"}}
            ],
            "dnsSettings": {"dnsServers": [], "appliedDnsServers": [], "internalDomainNameSuffix": "test.bx.internal.cloudapp.net"},
            "macAddress": "00-0D-3A-1B-C7-21",
            "enableAcceleratedNetworking": true,
            "networkSecurityGroup": {"id": "/subscriptions/subid/resourceGroups/rg1/providers/Microsoft.Network/networkSecurityGroups/nsg"},
            "primary": true,
            "virtualMachine": {"id": "/subscriptions/subid/resourceGroups/rg1/providers/Microsoft.Compute/virtualMachines/vm1"},
            "vnetEncryptionSupported": false
        },
        "type": "Microsoft.Network/networkInterfaces"
    }));
    assert_eq!(
        nic.private_address(),
        "172.20.2.4",
        "the primary configuration's"
    );
    assert!(nic.vm_id().unwrap().ends_with("/virtualMachines/vm1"));
    let detached: Nic = read(json!({"name": "n", "properties": {"ipConfigurations": []}}));
    assert_eq!(
        (detached.private_address().as_str(), detached.vm_id()),
        ("", None)
    );

    // PublicIpAddressGet: dynamic, no address yet, no DNS settings.
    let pip: PublicIp = read(json!({
        "name": "testDNS-ip",
        "id": "/subscriptions/subid/resourceGroups/rg1/providers/Microsoft.Network/publicIPAddresses/testDNS-ip",
        "location": "westus",
        "properties": {
            "provisioningState": "Succeeded", "publicIPAddressVersion": "IPv4", "publicIPAllocationMethod": "Dynamic",
            "idleTimeoutInMinutes": 4,
            "ipConfiguration": {"id": "/subscriptions/subid/resourceGroups/rg1/providers/Microsoft.Network/networkInterfaces/testDNS649/ipConfigurations/ipconfig1"},
            "ddosSettings": {"protectionMode": "Enabled"},
            "ipTags": [{"ipTagType": "FirstPartyUsage", "tag": "SQL"}]
        },
        "type": "Microsoft.Network/publicIPAddresses"
    }));
    assert_eq!(
        (pip.properties.ip_address.as_str(), pip.fqdn().as_str()),
        ("", "")
    );
    assert_eq!(
        pip.nic_id().as_deref(),
        Some("/subscriptions/subid/resourcegroups/rg1/providers/microsoft.network/networkinterfaces/testdns649")
    );
    // With a scoped DNS label: Azure's hashed name.
    let pip: PublicIp = read(json!({"name": "x", "properties": {"ipAddress": "20.1.2.3",
        "dnsSettings": {"domainNameLabel": "web", "domainNameLabelScope": "ResourceGroupReuse",
            "fqdn": "web-e0hfe2btbegbewe4.westus.cloudapp.azure.com"}}}));
    assert_eq!(pip.fqdn(), "web-e0hfe2btbegbewe4.westus.cloudapp.azure.com");
}

#[test]
fn pages_whose_links_carry_an_explicit_port() {
    let page: ListPage<Vm> = read(json!({
        "value": [vm_get()],
        "nextLink": "https://management.azure.com:443/subscriptions/00000000-0000-4000-8000-0000000000a2/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines?api-version=2024-07-01&%24skiptoken=Z2lkOjEyMw%3d%3d"
    }));
    assert_eq!(page.value.len(), 1);
    let next = page.next_link.unwrap();
    assert!(
        same_origin(&next, "https://management.azure.com"),
        "Azure's own next page is refused: {next}"
    );
    let last: ListPage<Vm> = read(json!({"value": [], "nextLink": null}));
    assert_eq!(last.next_link, None);
    let prices: PricePage = read(json!({
        "BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
        "Items": [{"currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": 0.0416, "unitPrice": 0.0416,
            "armRegionName": "westeurope", "location": "EU West", "effectiveStartDate": "2021-05-01T00:00:00Z",
            "meterId": "000a794b-bdb0-58be-a0cd-0c3a0f222923", "meterName": "B2s", "productId": "DZH318Z0BQ4W",
            "skuId": "DZH318Z0BQ4W/00C4", "productName": "Virtual Machines BS Series", "skuName": "B2s",
            "serviceName": "Virtual Machines", "serviceId": "DZH313Z7MMC8", "serviceFamily": "Compute",
            "unitOfMeasure": "1 Hour", "type": "Consumption", "isPrimaryMeterRegion": true,
            "armSkuName": "Standard_B2s", "savingsPlan": [{"unitPrice": 0.03, "retailPrice": 0.03, "term": "1 Year"}]}],
        "NextPageLink": "https://prices.azure.com:443/api/retail/prices?api-version=2023-01-01-preview&$filter=serviceName%20eq%20%27Virtual%20Machines%27&$skip=100",
        "Count": 1
    }));
    assert!(prices.items[0].is_linux_on_demand());
    assert!(same_origin(
        prices.next_page_link.as_deref().unwrap(),
        "https://prices.azure.com"
    ));
    let end: PricePage = read(json!({"Items": [], "NextPageLink": null, "Count": 0}));
    assert!(end.next_page_link.is_none());
}

#[test]
fn a_region_s_size_catalogue_as_published() {
    let page: ListPage<Sku> = read(json!({"value": [
        {"resourceType": "virtualMachines", "locations": ["westus"],
            "capabilities": [{"name": "MaxResourceVolumeMB", "value": "20480"}, {"name": "vCPUs", "value": "1"},
                {"name": "HyperVGenerations", "value": "V1"}, {"name": "MemoryGB", "value": "0.75"}],
            "locationInfo": [{"location": "westus", "zones": ["2", "1"],
                "zoneDetails": [{"name": ["2"], "capabilities": [{"name": "UltraSSDAvailable", "value": "True"}]}]}],
            "name": "Standard_A0", "tier": "Standard", "size": "A0", "family": "standardA0_A7Family"},
        {"resourceType": "virtualMachines", "locations": ["westus"], "name": "Standard_D2ps_v5",
            "capabilities": [{"name": "CpuArchitectureType", "value": "Arm64"}],
            "restrictions": [{"type": "Location", "values": ["westus"], "reasonCode": "NotAvailableForSubscription",
                "restrictionInfo": {"locations": ["westus"]}}]},
        {"resourceType": "disks", "name": "Premium_LRS", "capabilities": null}
    ], "nextLink": null}));
    let arch: Vec<(String, Option<String>)> = page
        .value
        .iter()
        .map(|s| (s.name.clone(), s.architecture().map(str::to_string)))
        .collect();
    assert_eq!(
        arch,
        [
            ("Standard_A0".to_string(), None),
            ("Standard_D2ps_v5".to_string(), Some("Arm64".to_string())),
            ("Premium_LRS".to_string(), None)
        ]
    );
}

fn classify(status: u16, body: Value) -> orca_machines::Error {
    let detail = serde_json::from_value::<CloudError>(body)
        .unwrap_or_default()
        .detail();
    map_error(Some(status), &detail, None)
}

#[test]
fn error_bodies_of_each_documented_kind() {
    let policy = json!({"error": {"code": "RequestDisallowedByPolicy", "target": "vm-1-ip",
        "message": "Resource 'vm-1-ip' was disallowed by policy. Policy identifiers: '[{\"policyAssignment\":{\"name\":\"Deny public IPs\",\"id\":\"/subscriptions/s/providers/Microsoft.Authorization/policyAssignments/deny-pip\"}}]'.",
        "additionalInfo": [{"type": "PolicyViolation", "info": {"evaluationDetails": {"evaluatedExpressions": []},
            "policyDefinitionId": "/providers/Microsoft.Authorization/policyDefinitions/6c112d4e-5bc7-47ae-a041-ea2d9dccd749",
            "policyDefinitionName": "6c112d4e-5bc7-47ae-a041-ea2d9dccd749", "policyDefinitionEffect": "deny",
            "policyAssignmentId": "/subscriptions/s/providers/Microsoft.Authorization/policyAssignments/deny-pip",
            "policyAssignmentName": "deny-pip", "policyAssignmentDisplayName": "Deny public IPs",
            "policyAssignmentScope": "/subscriptions/s", "policyAssignmentParameters": {}}}]}});
    let cases: Vec<(u16, Value, ErrorKind, &str)> = vec![
        (
            404,
            json!({"error": {"code": "ResourceNotFound", "message": "The Resource 'Microsoft.Compute/virtualMachines/x' under resource group 'rg' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix"}}),
            ErrorKind::NotFound,
            "ResourceNotFound",
        ),
        (
            404,
            json!({"error": {"code": "ResourceGroupNotFound", "message": "Resource group 'rg' could not be found."}}),
            ErrorKind::NotFound,
            "ResourceGroupNotFound",
        ),
        (
            401,
            json!({"error": {"code": "ExpiredAuthenticationToken", "message": "The access token expiry UTC time is earlier than current UTC time."}}),
            ErrorKind::Unauthenticated,
            "ExpiredAuthenticationToken",
        ),
        (
            403,
            json!({"error": {"code": "AuthorizationFailed", "message": "The client 'c' with object id 'o' does not have authorization to perform action 'Microsoft.Compute/virtualMachines/read' over scope '/subscriptions/s'."}}),
            ErrorKind::PermissionDenied,
            "AuthorizationFailed",
        ),
        (
            403,
            policy,
            ErrorKind::PermissionDenied,
            "RequestDisallowedByPolicy",
        ),
        (
            409,
            json!({"error": {"code": "OperationNotAllowed", "message": "Operation could not be completed as it results in exceeding approved Total Regional Cores quota. Additional details - Deployment Model: Resource Manager, Location: westeurope, Current Limit: 10, Current Usage: 8, Additional Required: 4, (Minimum) New Limit Required: 12.", "details": []}}),
            ErrorKind::Quota,
            "OperationNotAllowed",
        ),
        (
            409,
            json!({"error": {"code": "QuotaExceeded", "message": "Operation could not be completed as it results in exceeding approved standardDSv5Family Cores quota."}}),
            ErrorKind::Quota,
            "QuotaExceeded",
        ),
        (
            409,
            json!({"error": {"code": "SkuNotAvailable", "message": "The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: Standard_D2s_v5' is currently not available in location 'westeurope'."}}),
            ErrorKind::NoStock,
            "SkuNotAvailable",
        ),
        (
            409,
            json!({"error": {"code": "AnotherOperationInProgress", "message": "Another operation on this or dependent resource is in progress. To retrieve status of the operation use uri: https://management.azure.com/subscriptions/s/providers/Microsoft.Network/locations/westeurope/operations/o?api-version=2024-05-01.", "details": []}}),
            ErrorKind::Busy,
            "AnotherOperationInProgress",
        ),
        (
            400,
            json!({"error": {"code": "NicReservedForAnotherVm", "message": "Nic(s) in request is reserved for another Virtual Machine for 180 seconds. Please provide another nic(s) or retry after 180 seconds. Reserved VM: /subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm", "details": []}}),
            ErrorKind::Other,
            "NicReservedForAnotherVm",
        ),
        (
            400,
            json!({"error": {"code": "InvalidParameter", "target": "vmSize", "message": "The value Standard_X provided for the VM size is not valid."}}),
            ErrorKind::Other,
            "InvalidParameter",
        ),
        (
            412,
            json!({"error": {"code": "PreconditionFailed", "message": "The resource exists."}}),
            ErrorKind::AlreadyExists,
            "PreconditionFailed",
        ),
        (
            429,
            json!({"error": {"code": "TooManyRequests", "message": "The request is being throttled."}}),
            ErrorKind::Throttled,
            "TooManyRequests",
        ),
        (
            500,
            json!({"error": {"code": "InternalServerError", "message": "An internal error occurred."}}),
            ErrorKind::Transient,
            "InternalServerError",
        ),
        (
            409,
            json!({"error": {"code": "SomethingNew", "message": "A code Azure adds later."}}),
            ErrorKind::Other,
            "SomethingNew",
        ),
        (
            400,
            json!({"Error": {"Code": "InvalidFilter", "Message": "Invalid OData filter."}}),
            ErrorKind::Other,
            "InvalidFilter",
        ),
    ];
    for (status, body, kind, code) in cases {
        let e = classify(status, body);
        assert_eq!((e.kind(), e.code()), (kind, Some(code)), "{e}");
    }
    let deny = classify(
        403,
        json!({"error": {"code": "RequestDisallowedByPolicy", "message": "m",
        "additionalInfo": [{"type": "PolicyViolation", "info": {"policyAssignmentName": "deny-pip",
            "policyAssignmentDisplayName": "Deny public IPs", "policyAssignmentId": "/a/deny-pip"}}]}}),
    );
    assert!(
        deny.to_string()
            .contains("deny-pip (Deny public IPs; /a/deny-pip)"),
        "{deny}"
    );
    // Bodies with nothing Azure promised: the status decides, nothing is lost.
    for (status, body, kind) in [
        (503, json!({}), ErrorKind::Transient),
        (502, json!({"error": null}), ErrorKind::Transient),
        (
            404,
            json!({"error": {"code": null, "message": null, "details": null}}),
            ErrorKind::NotFound,
        ),
        (418, json!("teapot"), ErrorKind::Other),
    ] {
        assert_eq!(classify(status, body.clone()).kind(), kind, "{body}");
    }
}

#[test]
fn long_running_operation_statuses() {
    let failed: OperationStatus = read(json!({"startTime": "2024-07-01T00:00:00.0000000+00:00",
        "endTime": "2024-07-01T00:01:00.0000000+00:00", "status": "Failed", "name": "op",
        "error": {"code": "AllocationFailed", "message": "Allocation failed. We do not have sufficient capacity for the requested VM size in this region.", "details": []}}));
    assert_eq!(failed.status, "Failed");
    let e = map_error(None, &failed.error.unwrap(), None);
    assert_eq!(
        (e.kind(), e.code()),
        (ErrorKind::NoStock, Some("AllocationFailed"))
    );
    let later: OperationStatus = read(json!({"status": "Paused", "percentComplete": 50}));
    assert_eq!(
        (later.status.as_str(), later.error.is_none()),
        ("Paused", true)
    );
}

#[test]
fn a_credit_summary_and_a_tags_answer_as_published() {
    let c: CreditSummary = read(json!({
        "id": "/providers/Microsoft.Billing/billingAccounts/1234:5678/billingProfiles/2468/providers/Microsoft.Consumption/credits/balanceSummary1",
        "name": "balanceSummary1", "type": "Microsoft.Consumption/credits/balanceSummary",
        "properties": {"creditCurrency": "USD", "billingCurrency": "USD",
            "balanceSummary": {"estimatedBalance": {"currency": "USD", "value": 600.00}, "currentBalance": {"currency": "USD", "value": 100.00}},
            "pendingCreditAdjustments": {"currency": "USD", "value": 500.00}, "expiredCredit": {"currency": "USD", "value": 0.00},
            "pendingEligibleCharges": {"currency": "USD", "value": 0.00},
            "reseller": {"resellerId": "/providers/Microsoft.Billing/billingAccounts/1234:5678/billingProfiles/2468/providers/Microsoft.Consumption/reseller/reseller1", "resellerDescription": "Reseller information."},
            "isEstimatedBalance": false}
    }));
    let b = c.properties.balance_summary.unwrap();
    assert_eq!(b.estimated_balance.unwrap().value, Some(600.0));
    assert_eq!(b.current_balance.unwrap().currency, "USD");
    let older: CreditSummary = read(json!({"eTag": null, "properties": {"balanceSummary": {
        "currentBalance": {"currency": "EUR", "value": 12.5}}}}));
    assert!(older
        .properties
        .balance_summary
        .unwrap()
        .estimated_balance
        .is_none());
    let t: TagsResource = read(
        json!({"id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/v/providers/Microsoft.Resources/tags/default",
        "name": "default", "type": "Microsoft.Resources/tags", "properties": {"tags": {"tagKey1": "tag-value-1", "tagKey2": "tag-value-2"}}}),
    );
    assert_eq!(t.properties.tags.len(), 2);
}
