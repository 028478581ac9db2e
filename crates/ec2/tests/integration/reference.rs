//! Answers written from the EC2 API reference (the `DescribeInstances`, `RunInstances`,
//! `DescribeInstanceTypes`, `DescribeImages` and `DescribeInstanceTypeOfferings` response shapes, the
//! `Instance` data type with its optional members, and "Error codes for the Amazon EC2 API"), served
//! by the proxy with nothing behind it, that the driver must read or classify. No emulator: these run
//! everywhere, and prove what moto never says (fields it always fills, states it never has, capacity
//! and permission errors in EC2's own words).

use crate::common;

use std::time::Duration;

use common::{Proxy, ec2_error_body, rule, xml_answer};
use orca_ec2::{Config, ConfigBuilder, Ec2Provider, SecretString, StaticCredentials};
use orca_machines::{Created, Error, ErrorKind, MachineSpec, Provider, RetryPolicy, Status};

const ZONE: &str = "eu-west-1a";
const SUBNET: &str = "subnet-0a1b2c3d4e5f60718";
const ID: &str = "i-0598c7d356eba48d7";
const POOL: &str = "ref";
const OWNER: &str = "stack-1";

/// A proxy in front of nothing: every answer is injected.
async fn proxy() -> Proxy {
    Proxy::start("http://127.0.0.1:9").await
}

async fn provider(proxy: &Proxy) -> Ec2Provider {
    Ec2Provider::new(builder(proxy).build().unwrap(), OWNER)
        .await
        .unwrap()
}

fn builder(proxy: &Proxy) -> ConfigBuilder {
    Config::builder()
        .region("eu-west-1")
        .credentials(StaticCredentials::new(
            "AKIDORCAREF",
            SecretString::from("not-a-secret"),
        ))
        .endpoint(&proxy.url)
        .subnet(ZONE, SUBNET)
        .security_group("sg-0123456789abcdef0")
        .instance_profile("orca-node")
        .retry(RetryPolicy::fast())
        .poll_interval(Duration::from_millis(10))
        .operation_timeout(Duration::from_secs(5))
        .visibility_window(Duration::from_millis(300))
        .confirm_not_found(Duration::from_millis(300))
}

fn answer(proxy: &Proxy, action: &str, status: u16, body: impl Into<String>) {
    proxy.inject(rule(action, xml_answer(status, body), 1));
}

fn error(proxy: &Proxy, action: &str, status: u16, code: &str, message: &str) {
    answer(proxy, action, status, ec2_error_body(code, message));
}

/// The tags of an instance of this owner's pool, named `name`.
fn tags(name: &str) -> String {
    format!(
        "<tagSet><item><key>Name</key><value>{name}</value></item>\
         <item><key>orca</key><value>pool</value></item>\
         <item><key>orca-pool</key><value>{POOL}</value></item>\
         <item><key>orca-owner</key><value>{OWNER}</value></item>\
         <item><key>shed-state</key><value></value></item></tagSet>"
    )
}

/// A running instance with every member the reference lists (those the driver reads, and many it
/// does not).
fn full_instance(id: &str, name: &str) -> String {
    format!(
        r#"<item>
    <instanceId>{id}</instanceId>
    <imageId>ami-0abcdef1234567890</imageId>
    <instanceState><code>16</code><name>running</name></instanceState>
    <privateDnsName>ip-10-0-1-25.eu-west-1.compute.internal</privateDnsName>
    <dnsName>ec2-203-0-113-25.eu-west-1.compute.amazonaws.com</dnsName>
    <reason/>
    <keyName>ops</keyName>
    <amiLaunchIndex>0</amiLaunchIndex>
    <productCodes/>
    <instanceType>t3.micro</instanceType>
    <launchTime>2026-03-02T08:30:00.000Z</launchTime>
    <placement>
        <availabilityZone>{ZONE}</availabilityZone>
        <groupName/>
        <tenancy>default</tenancy>
    </placement>
    <monitoring><state>disabled</state></monitoring>
    <subnetId>{SUBNET}</subnetId>
    <vpcId>vpc-1a2b3c4d</vpcId>
    <privateIpAddress>10.0.1.25</privateIpAddress>
    <ipAddress>203.0.113.25</ipAddress>
    <sourceDestCheck>true</sourceDestCheck>
    <groupSet><item><groupId>sg-0123456789abcdef0</groupId><groupName>orca</groupName></item></groupSet>
    <architecture>x86_64</architecture>
    <rootDeviceType>ebs</rootDeviceType>
    <rootDeviceName>/dev/sda1</rootDeviceName>
    <blockDeviceMapping>
        <item>
            <deviceName>/dev/sdf</deviceName>
            <ebs><volumeId>vol-0f0e0d0c0b0a09081</volumeId><status>attached</status>
                <attachTime>2026-03-02T09:00:00.000Z</attachTime><deleteOnTermination>false</deleteOnTermination></ebs>
        </item>
        <item>
            <deviceName>/dev/sda1</deviceName>
            <ebs><volumeId>vol-1234567890abcdef0</volumeId><status>attached</status>
                <attachTime>2026-03-01T10:00:00.000Z</attachTime><deleteOnTermination>true</deleteOnTermination></ebs>
        </item>
    </blockDeviceMapping>
    <virtualizationType>hvm</virtualizationType>
    <clientToken>orca-0123456789abcdef0123456789abcdef01234567</clientToken>
    {tags}
    <hypervisor>xen</hypervisor>
    <networkInterfaceSet>
        <item>
            <networkInterfaceId>eni-0a1b2c3d4e5f67890</networkInterfaceId>
            <subnetId>{SUBNET}</subnetId>
            <vpcId>vpc-1a2b3c4d</vpcId>
            <description/>
            <ownerId>123456789012</ownerId>
            <status>in-use</status>
            <macAddress>02:1a:2b:3c:4d:5e</macAddress>
            <privateIpAddress>10.0.1.25</privateIpAddress>
            <privateDnsName>ip-10-0-1-25.eu-west-1.compute.internal</privateDnsName>
            <sourceDestCheck>true</sourceDestCheck>
            <groupSet><item><groupId>sg-0123456789abcdef0</groupId><groupName>orca</groupName></item></groupSet>
            <attachment><attachmentId>eni-attach-0a1b2c3d</attachmentId><deviceIndex>0</deviceIndex>
                <status>attached</status><attachTime>2026-03-01T10:00:00.000Z</attachTime>
                <deleteOnTermination>true</deleteOnTermination><networkCardIndex>0</networkCardIndex></attachment>
            <association><publicIp>203.0.113.25</publicIp>
                <publicDnsName>ec2-203-0-113-25.eu-west-1.compute.amazonaws.com</publicDnsName>
                <ipOwnerId>amazon</ipOwnerId></association>
            <privateIpAddressesSet><item><privateIpAddress>10.0.1.25</privateIpAddress>
                <privateDnsName>ip-10-0-1-25.eu-west-1.compute.internal</privateDnsName><primary>true</primary></item></privateIpAddressesSet>
            <ipv6AddressesSet/>
            <interfaceType>interface</interfaceType>
        </item>
    </networkInterfaceSet>
    <iamInstanceProfile><arn>arn:aws:iam::123456789012:instance-profile/orca-node</arn><id>AIPAEXAMPLE</id></iamInstanceProfile>
    <ebsOptimized>true</ebsOptimized>
    <enaSupport>true</enaSupport>
    <cpuOptions><coreCount>1</coreCount><threadsPerCore>2</threadsPerCore></cpuOptions>
    <capacityReservationSpecification><capacityReservationPreference>open</capacityReservationPreference></capacityReservationSpecification>
    <hibernationOptions><configured>false</configured></hibernationOptions>
    <metadataOptions><state>applied</state><httpTokens>required</httpTokens><httpPutResponseHopLimit>2</httpPutResponseHopLimit>
        <httpEndpoint>enabled</httpEndpoint><httpProtocolIpv6>disabled</httpProtocolIpv6><instanceMetadataTags>disabled</instanceMetadataTags></metadataOptions>
    <enclaveOptions><enabled>false</enabled></enclaveOptions>
    <bootMode>uefi</bootMode>
    <platformDetails>Linux/UNIX</platformDetails>
    <usageOperation>RunInstances</usageOperation>
    <usageOperationUpdateTime>2026-03-01T10:00:00.000Z</usageOperationUpdateTime>
    <privateDnsNameOptions><hostnameType>ip-name</hostnameType><enableResourceNameDnsARecord>false</enableResourceNameDnsARecord>
        <enableResourceNameDnsAAAARecord>false</enableResourceNameDnsAAAARecord></privateDnsNameOptions>
    <maintenanceOptions><autoRecovery>default</autoRecovery></maintenanceOptions>
    <currentInstanceBootMode>uefi</currentInstanceBootMode>
</item>"#,
        tags = tags(name)
    )
}

/// An instance as EC2 may show it right after RunInstances: `pending`, no public address or DNS
/// name, no block device listed yet, and nothing optional.
fn sparse_instance(id: &str, name: &str, state: (u16, &str)) -> String {
    format!(
        "<item><instanceId>{id}</instanceId><imageId>ami-0abcdef1234567890</imageId>\
         <instanceState><code>{}</code><name>{}</name></instanceState>\
         <privateDnsName>ip-10-0-1-26.eu-west-1.compute.internal</privateDnsName><dnsName/>\
         <reason/><amiLaunchIndex>0</amiLaunchIndex><productCodes/>\
         <instanceType>t3.micro</instanceType><launchTime>2026-03-02T08:31:00.000Z</launchTime>\
         <placement><availabilityZone>{ZONE}</availabilityZone><tenancy>default</tenancy></placement>\
         <privateIpAddress>10.0.1.26</privateIpAddress><architecture>x86_64</architecture>\
         <rootDeviceType>ebs</rootDeviceType><rootDeviceName>/dev/sda1</rootDeviceName>\
         <blockDeviceMapping/>{}</item>",
        state.0,
        state.1,
        tags(name)
    )
}

fn describe(instances: &[String], next: Option<&str>) -> String {
    let items: String = instances
        .iter()
        .enumerate()
        .map(|(n, i)| {
            format!(
                "<item><reservationId>r-0{n}a1b2c3d4e5f6789</reservationId><ownerId>123456789012</ownerId>\
                 <groupSet/><instancesSet>{i}</instancesSet></item>"
            )
        })
        .collect();
    let next = next
        .map(|t| format!("<nextToken>{t}</nextToken>"))
        .unwrap_or_default();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeInstancesResponse \
         xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
         <requestId>8f7724cf-496f-496e-8fe3-example</requestId>\
         <reservationSet>{items}</reservationSet>{next}</DescribeInstancesResponse>"
    )
}

fn run_answer(instance: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<RunInstancesResponse \
         xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
         <requestId>7a62c49f-347e-4fc4-9331-example</requestId>\
         <reservationId>r-1234567890abcdef0</reservationId><ownerId>123456789012</ownerId>\
         <groupSet/><instancesSet>{instance}</instancesSet></RunInstancesResponse>"
    )
}

/// DescribeInstanceTypes and DescribeImages answers for a create of a `t3.micro`.
fn catalogue(proxy: &Proxy) {
    answer(
        proxy,
        "DescribeInstanceTypes",
        200,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeInstanceTypesResponse \
         xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>r-1</requestId>\
         <instanceTypeSet><item><instanceType>t3.micro</instanceType><currentGeneration>true</currentGeneration>\
         <supportedUsageClasses><item>on-demand</item><item>spot</item></supportedUsageClasses>\
         <supportedRootDeviceTypes><item>ebs</item></supportedRootDeviceTypes>\
         <bareMetal>false</bareMetal><hypervisor>nitro</hypervisor>\
         <processorInfo><supportedArchitectures><item>x86_64</item></supportedArchitectures>\
         <sustainedClockSpeedInGhz>2.5</sustainedClockSpeedInGhz></processorInfo>\
         <vCpuInfo><defaultVCpus>2</defaultVCpus></vCpuInfo><memoryInfo><sizeInMiB>1024</sizeInMiB></memoryInfo>\
         </item></instanceTypeSet></DescribeInstanceTypesResponse>",
    );
    answer(
        proxy,
        "DescribeImages",
        200,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeImagesResponse \
         xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>r-2</requestId><imagesSet>\
         <item><imageId>ami-0abcdef1234567890</imageId>\
         <imageLocation>amazon/ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20260301</imageLocation>\
         <imageState>available</imageState><imageOwnerId>099720109477</imageOwnerId>\
         <creationDate>2026-03-01T12:00:00.000Z</creationDate><isPublic>true</isPublic>\
         <architecture>x86_64</architecture><imageType>machine</imageType>\
         <name>ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20260301</name>\
         <rootDeviceType>ebs</rootDeviceType><rootDeviceName>/dev/sda1</rootDeviceName>\
         <blockDeviceMapping><item><deviceName>/dev/sda1</deviceName><ebs>\
         <snapshotId>snap-0123456789abcdef0</snapshotId><volumeSize>8</volumeSize>\
         <deleteOnTermination>true</deleteOnTermination><volumeType>gp3</volumeType>\
         <encrypted>false</encrypted></ebs></item></blockDeviceMapping>\
         <virtualizationType>hvm</virtualizationType><hypervisor>xen</hypervisor>\
         <enaSupport>true</enaSupport><sriovNetSupport>simple</sriovNetSupport>\
         <bootMode>uefi-preferred</bootMode><platformDetails>Linux/UNIX</platformDetails>\
         <usageOperation>RunInstances</usageOperation></item></imagesSet></DescribeImagesResponse>",
    );
}

fn spec(name: &str) -> MachineSpec {
    MachineSpec::new(name, "t3.micro", ZONE, POOL)
}

#[tokio::test]
async fn a_full_instance_reads_into_every_fact() {
    let proxy = proxy().await;
    let p = provider(&proxy).await;
    answer(
        &proxy,
        "DescribeInstances",
        200,
        describe(&[full_instance(ID, "ref-1")], None),
    );
    let m = p.machine(ID).await.unwrap().expect("the instance");
    assert_eq!(
        (m.id.as_str(), m.name.as_str(), m.pool.as_str()),
        (ID, "ref-1", POOL)
    );
    assert_eq!(
        (m.status, m.cloud_status.as_str()),
        (Status::Running, "running")
    );
    assert_eq!(
        (m.machine_type.as_str(), m.location.as_str()),
        ("t3.micro", ZONE)
    );
    assert_eq!(
        (m.address.as_str(), m.private_address.as_str()),
        ("203.0.113.25", "10.0.1.25")
    );
    assert_eq!(m.fqdn, "ec2-203-0-113-25.eu-west-1.compute.amazonaws.com");
    // Made when its root volume (not the other one) was attached; last started at LaunchTime.
    assert_eq!(
        m.created_at.unwrap().to_rfc3339(),
        "2026-03-01T10:00:00+00:00"
    );
    assert_eq!(
        m.started_at.unwrap().to_rfc3339(),
        "2026-03-02T08:30:00+00:00"
    );
    assert_eq!(m.stopped_at, None);
    assert_eq!(m.labels.get("shed-state").map(String::as_str), Some(""));
    let q = &proxy.of("DescribeInstances")[0].params;
    assert_eq!(q.get("InstanceId.1").map(String::as_str), Some(ID));
    assert!(
        !q.contains_key("MaxResults"),
        "EC2 refuses MaxResults with ids"
    );
}

#[tokio::test]
async fn a_sparse_instance_reads_with_what_is_there() {
    let proxy = proxy().await;
    let p = provider(&proxy).await;
    answer(
        &proxy,
        "DescribeInstances",
        200,
        describe(&[sparse_instance(ID, "ref-2", (0, "pending"))], None),
    );
    let m = p.machine(ID).await.unwrap().expect("the instance");
    assert_eq!(m.status, Status::Starting);
    assert_eq!(m.address, "", "no public address yet");
    assert_eq!(
        m.fqdn, "ip-10-0-1-26.eu-west-1.compute.internal",
        "the private DNS name"
    );
    assert_eq!(
        m.created_at.unwrap().to_rfc3339(),
        "2026-03-02T08:31:00+00:00",
        "no block device listed: LaunchTime"
    );
}

#[tokio::test]
async fn an_unknown_state_is_kept_as_ec2s_word_and_a_stop_says_when() {
    let proxy = proxy().await;
    let p = provider(&proxy).await;
    let stopped = sparse_instance("i-0aaaaaaaaaaaaaaa1", "ref-3", (80, "stopped")).replace(
        "<reason/>",
        "<reason>User initiated (2026-03-02 09:15:42 GMT)</reason>\
         <stateReason><code>Client.UserInitiatedShutdown</code>\
         <message>Client.UserInitiatedShutdown: User initiated shutdown</message></stateReason>",
    );
    let odd = sparse_instance("i-0aaaaaaaaaaaaaaa2", "ref-4", (96, "hibernating"));
    // A stop whose reason gives no time.
    let scheduled = sparse_instance("i-0aaaaaaaaaaaaaaa3", "ref-5", (80, "stopped"))
        .replace("<reason/>", "<reason>Server.ScheduledStop</reason>");
    answer(
        &proxy,
        "DescribeInstances",
        200,
        describe(&[stopped, odd, scheduled], None),
    );
    let ms = p.machines(POOL).await.unwrap();
    assert_eq!(ms.len(), 3);
    assert_eq!(ms[0].status, Status::Stopped);
    assert_eq!(
        ms[0].stopped_at.unwrap().to_rfc3339(),
        "2026-03-02T09:15:42+00:00"
    );
    assert_eq!(
        (ms[1].status, ms[1].cloud_status.as_str()),
        (Status::Unknown, "hibernating")
    );
    assert_eq!((ms[2].status, ms[2].stopped_at), (Status::Stopped, None));
    let q = &proxy.of("DescribeInstances")[0].params;
    assert_eq!(q["MaxResults"], "1000");
    assert_eq!(q["Filter.1.Name"], "tag:orca");
}

#[tokio::test]
async fn listings_follow_next_token() {
    let proxy = proxy().await;
    let p = provider(&proxy).await;
    // EC2's tokens are opaque: the second page is asked with the first page's, as it stands.
    let token = "eyJ2IjoiMiIsImMiOiJ0eGd3Y0RxT0VOb3RBV1NBSWQ9IiwicyI6IjEifQ==";
    proxy.inject(
        rule(
            "DescribeInstances",
            xml_answer(
                200,
                describe(&[full_instance("i-0bbbbbbbbbbbbbbb2", "ref-7")], None),
            ),
            1,
        )
        .when_form("NextToken", token),
    );
    answer(
        &proxy,
        "DescribeInstances",
        200,
        describe(
            &[full_instance("i-0bbbbbbbbbbbbbbb1", "ref-6")],
            Some(token),
        ),
    );
    let ms = p.machines(POOL).await.unwrap();
    assert_eq!(
        ms.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
        ["ref-6", "ref-7"]
    );
    let pages = proxy.of("DescribeInstances");
    assert_eq!(pages.len(), 2);
    assert_eq!(pages[1].params["NextToken"], token);
}

#[tokio::test]
async fn capacity_quota_and_configuration_errors_are_told_apart() {
    let proxy = proxy().await;
    let p = provider(&proxy).await;
    catalogue(&proxy);
    error(
        &proxy,
        "RunInstances",
        500,
        "InsufficientInstanceCapacity",
        "We currently do not have sufficient t3.micro capacity in the Availability Zone you \
         requested (eu-west-1a). Our system will be working on provisioning additional capacity. \
         You can currently get t3.micro capacity by not specifying an Availability Zone in your \
         request or choosing eu-west-1b, eu-west-1c.",
    );
    match p.create(&spec("cap-1")).await.unwrap() {
        Created::NoStock {
            machine_type,
            location,
            message,
            ..
        } => {
            assert_eq!(
                (machine_type.as_str(), location.as_str()),
                ("t3.micro", ZONE)
            );
            assert!(
                message.contains("sufficient t3.micro capacity"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    error(
        &proxy,
        "RunInstances",
        400,
        "InstanceLimitExceeded",
        "You have requested more instances (21) than your current instance limit of 20 allows \
         for the specified instance type.",
    );
    let e = p.create(&spec("quota-1")).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.code()),
        (ErrorKind::Quota, Some("InstanceLimitExceeded"))
    );
    // Unsupported for a type the zone does not offer (an empty offering list) is no stock there.
    error(
        &proxy,
        "RunInstances",
        400,
        "Unsupported",
        "Your requested instance type (t3.micro) is not supported in your requested Availability \
         Zone (eu-west-1a). Please retry your request by not specifying an Availability Zone or \
         choosing eu-west-1b, eu-west-1c.",
    );
    answer(
        &proxy,
        "DescribeInstanceTypeOfferings",
        200,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeInstanceTypeOfferingsResponse \
         xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>r-3</requestId>\
         <instanceTypeOfferingSet/></DescribeInstanceTypeOfferingsResponse>",
    );
    assert!(matches!(
        p.create(&spec("unsup-1")).await.unwrap(),
        Created::NoStock { .. }
    ));
    // Unsupported for a type the zone offers is the configuration.
    error(
        &proxy,
        "RunInstances",
        400,
        "Unsupported",
        "The requested configuration is currently not supported. Please check the documentation \
         for supported configurations.",
    );
    answer(
        &proxy,
        "DescribeInstanceTypeOfferings",
        200,
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeInstanceTypeOfferingsResponse \
             xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>r-4</requestId>\
             <instanceTypeOfferingSet><item><instanceType>t3.micro</instanceType>\
             <locationType>availability-zone</locationType><location>{ZONE}</location></item>\
             </instanceTypeOfferingSet></DescribeInstanceTypeOfferingsResponse>"
        ),
    );
    let e = p.create(&spec("unsup-2")).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.code()),
        (ErrorKind::Other, Some("Unsupported"))
    );
    assert!(
        e.to_string()
            .contains("requested configuration is currently not supported"),
        "{e}"
    );
    // Each RunInstances was sent once: none of these is retried.
    assert_eq!(proxy.count("RunInstances"), 4);
}

/// `instance` launched during the create about to be called (a new instance's answer), not at the
/// example's time. The answer is written before the call, and the driver makes its own lookups before
/// it first sends its token, so a time read now may fall in a second before the call began: that
/// instance would be an earlier call's. A minute ahead is after the call began however slow the
/// machine is (EC2's clock may as well run ahead of ours).
fn launched_during_the_call(instance: &str) -> String {
    let now = (orca_machines::chrono::Utc::now() + orca_machines::chrono::Duration::minutes(1))
        .format("%Y-%m-%dT%H:%M:%S.000Z")
        .to_string();
    instance.replace("2026-03-02T08:31:00.000Z", &now)
}

#[tokio::test]
async fn a_create_reads_its_answer_and_waits_for_the_instance() {
    let proxy = proxy().await;
    let p = provider(&proxy).await;
    catalogue(&proxy);
    let pending = launched_during_the_call(&sparse_instance(ID, "ref-8", (0, "pending")));
    answer(&proxy, "RunInstances", 200, run_answer(&pending));
    // Right after RunInstances, EC2 does not show the instance yet: a listing filtered on its id
    // and the pool's tags answers no instance (a filter, unlike an id, is never "not found").
    answer(&proxy, "DescribeInstances", 200, describe(&[], None));
    answer(&proxy, "DescribeInstances", 200, describe(&[pending], None));
    match p.create(&spec("ref-8")).await.unwrap() {
        Created::Machine(m) => assert_eq!((m.id.as_str(), m.status), (ID, Status::Starting)),
        other => panic!("{other:?}"),
    }
    let looks = proxy.of("DescribeInstances");
    assert_eq!(looks.len(), 2, "looked again after no instance");
    for q in looks.iter().map(|s| &s.params) {
        assert!(
            q.values().any(|v| v == "instance-id") && q.values().any(|v| v == ID),
            "{q:?}"
        );
        assert!(q.values().any(|v| v == "tag:orca-owner"), "{q:?}");
    }
    // The same spec again: EC2 answers the token with the instance, now running: adopted.
    answer(
        &proxy,
        "RunInstances",
        200,
        run_answer(&full_instance(ID, "ref-8")),
    );
    answer(
        &proxy,
        "DescribeInstances",
        200,
        describe(&[full_instance(ID, "ref-8")], None),
    );
    assert!(p.create(&spec("ref-8")).await.unwrap().is_adopted());
    let runs = proxy.of("RunInstances");
    assert_eq!(runs[0].params["ClientToken"], runs[1].params["ClientToken"]);
    // A provider that never saw it (a restarted process), answered the instance still pending but
    // launched before its call began (EC2's example time): an earlier call's, adopted.
    let restarted = provider(&proxy).await;
    catalogue(&proxy);
    let old = sparse_instance(ID, "ref-8", (0, "pending"));
    answer(&proxy, "RunInstances", 200, run_answer(&old));
    answer(&proxy, "DescribeInstances", 200, describe(&[old], None));
    match restarted.create(&spec("ref-8")).await.unwrap() {
        Created::Adopted(m) => assert_eq!((m.id.as_str(), m.status), (ID, Status::Starting)),
        other => panic!("a pending instance launched before the call gave {other:?}"),
    }
}

#[tokio::test]
async fn a_token_used_with_other_parameters_adopts_the_live_machine() {
    let proxy = proxy().await;
    let p = provider(&proxy).await;
    catalogue(&proxy);
    error(
        &proxy,
        "RunInstances",
        400,
        "IdempotentParameterMismatch",
        "Arguments on this idempotent request are inconsistent with arguments used in previous \
         request(s).",
    );
    // EC2 holds an instance for the token: read by the token, then shown by the pool's listing.
    for _ in 0..2 {
        answer(
            &proxy,
            "DescribeInstances",
            200,
            describe(&[full_instance(ID, "ref-9")], None),
        );
    }
    match p.create(&spec("ref-9")).await.unwrap() {
        Created::Adopted(m) => assert_eq!(m.id, ID),
        other => panic!("{other:?}"),
    }
    // The lookup was by the create's ClientToken, then by this owner's tags and the instance id.
    let token = proxy.of("RunInstances")[0].params["ClientToken"].clone();
    let reads = proxy.of("DescribeInstances");
    let q = &reads[0].params;
    assert!(q.values().any(|v| v == "client-token"), "{q:?}");
    assert!(q.values().any(|v| *v == token), "{q:?}");
    let q = &reads[1].params;
    assert!(q.values().any(|v| v == "tag:orca-pool"), "{q:?}");
    assert!(q.values().any(|v| v == ID), "{q:?}");
}

/// An instance EC2 holds for the name's ClientToken but shows without tags (a read that has not
/// caught up with the tags of its create call): `delete_named` can tell neither that it is this
/// owner's nor that it is not, so it answers a passing failure naming it and terminates nothing.
#[tokio::test]
async fn delete_named_of_an_instance_shown_without_its_tags_is_transient() {
    let proxy = proxy().await;
    let p = provider(&proxy).await;
    let untagged = sparse_instance(ID, "ref-10", (0, "pending")).replace(&tags("ref-10"), "");
    proxy.inject(
        rule(
            "DescribeInstances",
            xml_answer(200, describe(&[untagged], None)),
            1,
        )
        .when_form("Filter.1.Name", "client-token"),
    );
    // The tag-filtered listing does not show it yet.
    answer(&proxy, "DescribeInstances", 200, describe(&[], None));
    let err = p.delete_named(POOL, "ref-10").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert!(err.to_string().contains(ID), "{err}");
    assert!(err.is_retryable(), "{err}");
    assert_eq!(proxy.count("TerminateInstances"), 0);
}

#[tokio::test]
async fn throttling_permission_and_not_found_answers_have_their_meaning() {
    let proxy = proxy().await;
    let p = provider(&proxy).await;
    // RequestLimitExceeded (503) is retried, and the listing goes through.
    for _ in 0..2 {
        error(
            &proxy,
            "DescribeInstances",
            503,
            "RequestLimitExceeded",
            "Request limit exceeded.",
        );
    }
    answer(&proxy, "DescribeInstances", 200, describe(&[], None));
    assert!(p.machines(POOL).await.unwrap().is_empty());
    assert_eq!(proxy.count("DescribeInstances"), 3);
    // UnauthorizedOperation (403) is a permission, with EC2's words (the encoded message names the
    // action for `aws sts decode-authorization-message`).
    error(
        &proxy,
        "DescribeInstances",
        403,
        "UnauthorizedOperation",
        "You are not authorized to perform this operation. User: \
         arn:aws:sts::123456789012:assumed-role/orca/ci is not authorized to perform: \
         ec2:DescribeInstances because no identity-based policy allows the ec2:DescribeInstances \
         action. Encoded authorization failure message: 4Gm_example",
    );
    let e = p.machines(POOL).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.code()),
        (ErrorKind::PermissionDenied, Some("UnauthorizedOperation"))
    );
    assert!(e.to_string().contains("ec2:DescribeInstances"), "{e}");
    assert!(
        std::error::Error::source(&e).is_some(),
        "the SDK error is kept"
    );
    // AuthFailure (401) is unauthenticated.
    error(
        &proxy,
        "DescribeInstances",
        401,
        "AuthFailure",
        "AWS was not able to validate the provided access credentials",
    );
    assert_eq!(
        p.machines(POOL).await.unwrap_err().kind(),
        ErrorKind::Unauthenticated
    );
    // InvalidInstanceID.NotFound is "none" once reads within the confirmation window agree.
    let before = proxy.count("DescribeInstances");
    proxy.inject(
        rule(
            "DescribeInstances",
            xml_answer(
                400,
                ec2_error_body(
                    "InvalidInstanceID.NotFound",
                    "The instance ID 'i-0123456789abcdef0' does not exist",
                ),
            ),
            u32::MAX,
        )
        .when_form("InstanceId.1", "i-0123456789abcdef0"),
    );
    assert_eq!(p.machine("i-0123456789abcdef0").await.unwrap(), None);
    assert!(proxy.count("DescribeInstances") >= before + 2, "confirmed");
    proxy.clear("DescribeInstances");
    // And an instance of another owner is refused, not read.
    let theirs = full_instance(ID, "ref-10")
        .replace(&format!("<value>{OWNER}</value>"), "<value>stack-2</value>");
    answer(&proxy, "DescribeInstances", 200, describe(&[theirs], None));
    assert!(matches!(p.machine(ID).await, Err(Error::NotOwned { .. })));
}

#[tokio::test]
async fn a_wait_that_outlasts_the_waiting_time_is_transient() {
    let proxy = proxy().await;
    // A waiting time long enough for a second look however slowly a loaded machine answers the
    // first, and an interval that keeps the looks within it at most 21.
    let config = builder(&proxy)
        .poll_interval(Duration::from_millis(100))
        .operation_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let p = Ec2Provider::new(config, OWNER).await.unwrap();
    // Running when read; StopInstances accepted; then stopping for longer than the waiting time.
    answer(
        &proxy,
        "DescribeInstances",
        200,
        describe(&[full_instance(ID, "ref-11")], None),
    );
    answer(
        &proxy,
        "StopInstances",
        200,
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<StopInstancesResponse \
             xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>r-5</requestId>\
             <instancesSet><item><instanceId>{ID}</instanceId><currentState><code>64</code>\
             <name>stopping</name></currentState><previousState><code>16</code><name>running</name>\
             </previousState></item></instancesSet></StopInstancesResponse>"
        ),
    );
    let stopping = full_instance(ID, "ref-11").replace(
        "<instanceState><code>16</code><name>running</name></instanceState>",
        "<instanceState><code>64</code><name>stopping</name></instanceState>",
    );
    assert!(stopping.contains("stopping"));
    proxy.inject(rule(
        "DescribeInstances",
        xml_answer(200, describe(&[stopping], None)),
        u32::MAX,
    ));
    let e = p.stop(ID).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    assert!(
        e.to_string().contains(ID) && e.to_string().contains("goes on"),
        "{e}"
    );
    // Read every interval within the waiting time: a bounded number of looks.
    let looks = proxy.count("DescribeInstances") - 1;
    assert!((2..=25).contains(&looks), "{looks} looks");
    assert_eq!(proxy.count("StopInstances"), 1);
}

/// An upstream in place of moto that answers every request with a RunInstances of a new instance,
/// `delay` after reading it, and counts the RunInstances it was sent.
async fn slow_upstream(
    delay: Duration,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                // Headers and a form body: read until the body's length has come.
                loop {
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if got.len() >= end + 4 + len {
                            break;
                        }
                    }
                    if n == 0 {
                        return;
                    }
                }
                let n = if String::from_utf8_lossy(&got).contains("Action=RunInstances") {
                    counted.fetch_add(1, Ordering::SeqCst)
                } else {
                    0
                };
                tokio::time::sleep(delay).await;
                let body = run_answer(&sparse_instance(
                    &format!("i-0598c7d356eba48{n:02}"),
                    "ref-9",
                    (0, "pending"),
                ));
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/xml\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(body.as_bytes()).await;
            });
        }
    });
    (url, runs)
}

/// Sends a RunInstances with ClientToken `token` to `url` and reads its answer, or hangs up
/// `hang_up_after` after sending it.
async fn send_run(url: &str, token: &str, hang_up_after: Option<Duration>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = format!(
        "Action=RunInstances&Version=2016-11-15&ImageId=ami-0abcdef1234567890&MinCount=1&\
         MaxCount=1&ClientToken={token}"
    );
    let req = format!(
        "POST / HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/x-www-form-urlencoded\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    match hang_up_after {
        Some(d) => tokio::time::sleep(d).await,
        None => {
            let mut answer = Vec::new();
            let _ = s.read_to_end(&mut answer).await;
        }
    }
}

/// EC2 makes one instance for a ClientToken however its requests arrive: a request whose client
/// hung up while the instance was being made still records the token, so its retry makes nothing
/// new (the driver's timeout, or a process that died mid-call, does exactly this).
#[tokio::test]
async fn a_token_whose_first_request_was_hung_up_on_makes_one_instance() {
    let (upstream, runs) = slow_upstream(Duration::from_millis(300)).await;
    let proxy = Proxy::start(&upstream).await;
    send_run(&proxy.url, "orca-hung-up", Some(Duration::from_millis(100))).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    send_run(&proxy.url, "orca-hung-up", None).await;
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// Two requests of one ClientToken that overlap (a retry sent while the first is still served)
/// make one instance, as on EC2.
#[tokio::test]
async fn two_overlapping_requests_of_a_token_make_one_instance() {
    let (upstream, runs) = slow_upstream(Duration::from_millis(300)).await;
    let proxy = Proxy::start(&upstream).await;
    tokio::join!(
        send_run(&proxy.url, "orca-overlap", None),
        send_run(&proxy.url, "orca-overlap", None)
    );
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
}
