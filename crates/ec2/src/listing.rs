//! DescribeInstances' successful answers read by the driver itself. The SDK still makes the call
//! (credentials, signing, endpoint, timeouts, error answers), but its XML reader builds every member of
//! every instance (a hundred and more, most of them nested) and drops them again, which was most of a
//! listing's client CPU. [`LeanListing`] swaps the operation's response reader for [`LeanReader`],
//! which reads a successful answer with a streaming XML reader into [`InstanceFields`] (only the members
//! a machine is made of) and hands the SDK a synthetic empty answer; an error answer, and any answer
//! whose shape or XML it does not read (comments, CDATA, processing instructions, unknown entities, a
//! carriage return in a value, a malformed timestamp, ...), goes to the SDK's own reader unchanged, so
//! errors keep their codes and kinds and an odd answer is read as before.
//!
//! What the driver's reader takes from the SDK's: an element is known by its local name (any prefix),
//! a value is the element's text unescaped (the five XML entities and character references), an empty
//! element is the empty value, text between elements is passed over, a member given twice counts the
//! last time, a list is its `item` children. What it does not check: the members it does not read
//! (it passes over them, where the SDK would refuse, say, a malformed number in `cpuOptions`).

use std::sync::{Arc, Mutex, OnceLock};

use aws_sdk_ec2::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimePlugin};
use aws_sdk_ec2::error::BoxError;
use aws_sdk_ec2::operation::describe_instances::{DescribeInstances, DescribeInstancesOutput};
use aws_smithy_runtime_api::client::interceptors::context::OutputOrError;
use aws_smithy_runtime_api::client::orchestrator::{HttpResponse, OrchestratorError};
use aws_smithy_runtime_api::client::ser_de::{DeserializeResponse, SharedResponseDeserializer};
use aws_smithy_types::DateTime as SdkTime;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::FrozenLayer;
use aws_smithy_types::date_time::Format;
use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

use orca_machines::Machine;
use orca_machines::kit;

use crate::model::InstanceFields;

/// One page of DescribeInstances as the driver reads it: its instances, every reservation's in order,
/// and its `nextToken`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Listing {
    pub instances: Vec<InstanceFields>,
    pub next: Option<String>,
}

/// Why the driver's reader left an answer to the SDK's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unread(pub &'static str);

type Read<T> = Result<T, Unread>;

/// What [`LeanReader`] read of the attempt's answer: `Some` when it read it, `None` when the SDK did
/// (an error answer, or one it left to the SDK).
pub(crate) type Slot = Arc<Mutex<Option<Listing>>>;

/// A successful DescribeInstances answer read into a [`Listing`], or why not.
pub(crate) fn read(body: &[u8]) -> Read<Listing> {
    let text = std::str::from_utf8(body).map_err(|_| Unread("not UTF-8"))?;
    let mut x = Xml::new(text);
    let root = x.root()?;
    if local(&root) != "DescribeInstancesResponse" {
        return Err(Unread("another root element"));
    }
    let mut listing = Listing::default();
    while let Some(e) = x.child()? {
        match local(&e) {
            "nextToken" => listing.next = Some(x.text()?),
            // Given twice, the last one counts (as in the SDK).
            "reservationSet" => {
                listing.instances = x.items(reservation)?.into_iter().flatten().collect();
            }
            _ => x.skip(&e)?,
        }
    }
    x.finish()?;
    Ok(listing)
}

/// A reservation's instances.
fn reservation(x: &mut Xml<'_>) -> Read<Vec<InstanceFields>> {
    let mut instances = Vec::new();
    while let Some(e) = x.child()? {
        match local(&e) {
            // Given twice, the last one counts.
            "instancesSet" => instances = x.items(instance)?,
            _ => x.skip(&e)?,
        }
    }
    Ok(instances)
}

/// One instance's members that a machine is made of.
fn instance(x: &mut Xml<'_>) -> Read<InstanceFields> {
    let mut f = InstanceFields::default();
    while let Some(e) = x.child()? {
        match local(&e) {
            "instanceId" => f.id = Some(x.text()?),
            "instanceState" => f.state = x.child_text("name")?,
            "instanceType" => f.machine_type = Some(x.text()?),
            "placement" => f.zone = x.child_text("availabilityZone")?,
            "ipAddress" => f.public_ip = Some(x.text()?),
            "privateIpAddress" => f.private_ip = Some(x.text()?),
            "dnsName" => f.public_dns = Some(x.text()?),
            "privateDnsName" => f.private_dns = Some(x.text()?),
            "launchTime" => f.launch_time = Some(x.time()?),
            "rootDeviceName" => f.root_device = Some(x.text()?),
            "reason" => f.reason = Some(x.text()?),
            "blockDeviceMapping" => f.devices = x.items(device)?,
            "tagSet" => f.tags = x.items(tag)?,
            _ => x.skip(&e)?,
        }
    }
    Ok(f)
}

/// A block device mapping: its device name and its EBS volume's attach time.
fn device(x: &mut Xml<'_>) -> Read<(Option<String>, Option<SdkTime>)> {
    let (mut name, mut attached) = (None, None);
    while let Some(e) = x.child()? {
        match local(&e) {
            "deviceName" => name = Some(x.text()?),
            "ebs" => {
                // A second `ebs` replaces the first, attach time and all (as in the SDK).
                attached = None;
                while let Some(b) = x.child()? {
                    match local(&b) {
                        "attachTime" => attached = Some(x.time()?),
                        _ => x.skip(&b)?,
                    }
                }
            }
            _ => x.skip(&e)?,
        }
    }
    Ok((name, attached))
}

/// A tag: its key and value.
fn tag(x: &mut Xml<'_>) -> Read<(Option<String>, Option<String>)> {
    let (mut key, mut value) = (None, None);
    while let Some(e) = x.child()? {
        match local(&e) {
            "key" => key = Some(x.text()?),
            "value" => value = Some(x.text()?),
            _ => x.skip(&e)?,
        }
    }
    Ok((key, value))
}

/// An element's name without its prefix.
fn local<'e>(e: &'e BytesStart<'_>) -> &'e str {
    let name: &str = e.name().0;
    name.rsplit_once(':').map_or(name, |(_, l)| l)
}

/// A pull reader over one answer, element by element.
struct Xml<'a> {
    r: Reader<&'a [u8]>,
    /// The element [`Xml::child`] answered last was empty (`<a/>`): it has no content and no end.
    empty: bool,
}

impl<'a> Xml<'a> {
    fn new(text: &'a str) -> Self {
        let mut r = Reader::from_str(text);
        let c = r.config_mut();
        c.check_end_names = true;
        c.trim_text_start = false;
        c.trim_text_end = false;
        c.expand_empty_elements = false;
        Xml { r, empty: false }
    }

    fn event(&mut self) -> Read<Event<'a>> {
        self.r.read_event().map_err(|_| Unread("malformed XML"))
    }

    /// The document's root element (after the declaration and white space).
    fn root(&mut self) -> Read<BytesStart<'a>> {
        loop {
            match self.event()? {
                Event::Decl(_) => {}
                Event::Text(t) if t.trim_ascii().is_empty() => {}
                Event::Start(e) => return Ok(e),
                Event::Empty(e) => {
                    self.empty = true;
                    return Ok(e);
                }
                _ => return Err(Unread("something before the root element")),
            }
        }
    }

    /// Nothing but white space after the root element.
    fn finish(&mut self) -> Read<()> {
        loop {
            match self.event()? {
                Event::Eof => return Ok(()),
                Event::Text(t) if t.trim_ascii().is_empty() => {}
                _ => return Err(Unread("something after the root element")),
            }
        }
    }

    /// The current element's next child element, or `None` at its end. Text between elements is
    /// passed over (as the SDK does); anything else is not read here.
    fn child(&mut self) -> Read<Option<BytesStart<'a>>> {
        if std::mem::take(&mut self.empty) {
            return Ok(None);
        }
        loop {
            match self.event()? {
                Event::Start(e) => return Ok(Some(e)),
                Event::Empty(e) => {
                    self.empty = true;
                    return Ok(Some(e));
                }
                Event::End(_) => return Ok(None),
                Event::Text(_) => {}
                _ => return Err(Unread("markup other than elements between elements")),
            }
        }
    }

    /// Passes over element `e` (which [`Xml::child`] answered) and all it holds.
    /// The text of the current element's child `name` (the last, if repeated), the others skipped.
    fn child_text(&mut self, name: &str) -> Read<Option<String>> {
        let mut found = None;
        while let Some(e) = self.child()? {
            if local(&e) == name {
                found = Some(self.text()?);
            } else {
                self.skip(&e)?;
            }
        }
        Ok(found)
    }

    fn skip(&mut self, e: &BytesStart<'_>) -> Read<()> {
        if std::mem::take(&mut self.empty) {
            return Ok(());
        }
        self.r
            .read_to_end(e.name())
            .map(|_| ())
            .map_err(|_| Unread("malformed XML"))
    }

    /// The text of the element [`Xml::child`] answered, unescaped, up to its end.
    fn text(&mut self) -> Read<String> {
        let mut out = String::new();
        if std::mem::take(&mut self.empty) {
            return Ok(out);
        }
        loop {
            match self.event()? {
                Event::Text(t) => {
                    if t.contains('\r') {
                        // XML reads a line end there; the SDK keeps the text as it is.
                        return Err(Unread("a carriage return in a value"));
                    }
                    out.push_str(&t);
                }
                Event::GeneralRef(r) => out.push(entity(&r)?),
                Event::End(_) => return Ok(out),
                _ => return Err(Unread("markup inside a value")),
            }
        }
    }

    /// A timestamp value (ISO 8601, as EC2 writes them and the SDK reads them).
    fn time(&mut self) -> Read<SdkTime> {
        SdkTime::from_str(&self.text()?, Format::DateTime).map_err(|_| Unread("a malformed time"))
    }

    /// The `item` children of a list element, each read by `each`; other children passed over.
    fn items<T>(&mut self, each: fn(&mut Self) -> Read<T>) -> Read<Vec<T>> {
        let mut out = Vec::new();
        while let Some(e) = self.child()? {
            match local(&e) {
                "item" => out.push(each(self)?),
                _ => self.skip(&e)?,
            }
        }
        Ok(out)
    }
}

/// The character an entity reference stands for: the five XML entities, and character references
/// (`&#38;`, `&#x26;`) to characters XML allows.
fn entity(r: &str) -> Read<char> {
    let named = match r {
        "lt" => Some('<'),
        "gt" => Some('>'),
        "amp" => Some('&'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => None,
    };
    if let Some(c) = named {
        return Ok(c);
    }
    let (digits, radix) = match r.strip_prefix("#x") {
        Some(hex) => (hex, 16),
        None => (r.strip_prefix('#').ok_or(Unread("an unknown entity"))?, 10),
    };
    let ok_digit = |b: u8| match radix {
        16 => b.is_ascii_hexdigit(),
        _ => b.is_ascii_digit(),
    };
    if digits.is_empty() || !digits.bytes().all(ok_digit) {
        return Err(Unread("a malformed character reference"));
    }
    u32::from_str_radix(digits, radix)
        .ok()
        .filter(
            |c| matches!(c, 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF),
        )
        .and_then(char::from_u32)
        .ok_or(Unread("a character reference XML does not allow"))
}

/// The DescribeInstances response reader of one call: a successful answer is read by [`read`] into
/// the call's [`Slot`], and the SDK's reader gets the same answer with an empty body (its request id,
/// from the headers, kept); anything else goes to the SDK's reader whole.
#[derive(Debug)]
struct LeanReader {
    slot: Slot,
}

/// The empty answer the SDK's reader is given when the driver read the real one.
const EMPTY_ANSWER: &str = "<DescribeInstancesResponse/>";

impl DeserializeResponse for LeanReader {
    fn deserialize_nonstreaming_with_config(
        &self,
        response: &HttpResponse,
        cfg: &ConfigBag,
    ) -> OutputOrError {
        let Some(sdk) = sdk_reader() else {
            return Err(OrchestratorError::other(
                "the SDK names no reader for DescribeInstances",
            ));
        };
        let lean = match response.body().bytes() {
            Some(body) if response.status().is_success() => read(body),
            _ => Err(Unread("an error answer")),
        };
        let mut slot = kit::lock(&self.slot);
        match lean {
            Ok(listing) => {
                *slot = Some(listing);
                let mut empty = HttpResponse::new(response.status(), SdkBody::from(EMPTY_ANSWER));
                *empty.headers_mut() = response.headers().clone();
                sdk.deserialize_nonstreaming_with_config(&empty, cfg)
            }
            Err(Unread(why)) => {
                *slot = None;
                if response.status().is_success() {
                    tracing::debug!(why, "DescribeInstances answer left to the SDK's reader");
                }
                sdk.deserialize_nonstreaming_with_config(response, cfg)
            }
        }
    }
}

/// The SDK's own reader of DescribeInstances answers, from the operation's configuration (made once).
fn sdk_reader() -> Option<&'static SharedResponseDeserializer> {
    static LAYER: OnceLock<Option<FrozenLayer>> = OnceLock::new();
    LAYER
        .get_or_init(|| DescribeInstances::new().config())
        .as_ref()?
        .load::<SharedResponseDeserializer>()
}

/// The interceptor that puts a [`LeanReader`] in place of DescribeInstances' response reader for one
/// call (`customize().interceptor(...)`), writing into `slot`.
#[derive(Debug)]
pub(crate) struct LeanListing {
    pub slot: Slot,
}

impl Intercept for LeanListing {
    fn name(&self) -> &'static str {
        "orca.lean_listing"
    }

    fn read_before_execution(
        &self,
        _: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // Once per call, before the first attempt; the layer it writes is read before the operation's.
        cfg.interceptor_state()
            .store_put(SharedResponseDeserializer::new(LeanReader {
                slot: self.slot.clone(),
            }));
        Ok(())
    }
}

/// A reader's machines and next token, or why it did not read the answer.
pub type Reading = Result<(Vec<Machine>, Option<String>), String>;

/// A successful DescribeInstances answer read by the driver's reader into machines, as a listing
/// reads it. For the differential tests and the EC2 bench; not part of the driver's interface.
#[doc(hidden)]
pub fn read_listing(body: &[u8]) -> Reading {
    read(body)
        .map(Listing::machines)
        .map_err(|Unread(why)| why.to_string())
}

/// The same answer read by the SDK's reader into machines (what the driver did before it read the
/// answers itself). For the differential tests and the EC2 bench; not part of the driver's interface.
#[doc(hidden)]
pub fn read_listing_by_sdk(body: &[u8]) -> Reading {
    sdk_read(body).map(Listing::machines)
}

/// The SDK's reading of an answer, as the fields the driver reads: the instances are moved out.
impl From<DescribeInstancesOutput> for Listing {
    fn from(out: DescribeInstancesOutput) -> Self {
        Listing {
            instances: out
                .reservations
                .unwrap_or_default()
                .into_iter()
                .flat_map(|r| r.instances.unwrap_or_default())
                .map(InstanceFields::from)
                .collect(),
            next: out.next_token,
        }
    }
}

impl Listing {
    /// Its machines and the next page's token.
    pub(crate) fn machines(self) -> (Vec<Machine>, Option<String>) {
        let m = self.instances.into_iter().map(InstanceFields::machine);
        (m.collect(), self.next)
    }
}

/// The SDK's own reading of a successful answer, as the fields the driver reads.
fn sdk_read(body: &[u8]) -> Result<Listing, String> {
    let status = 200u16.try_into().map_err(|e| format!("{e:?}"))?;
    let response = HttpResponse::new(status, SdkBody::from(body.to_vec()));
    let out = sdk_reader()
        .ok_or("the SDK names no reader for DescribeInstances")?
        .deserialize_nonstreaming_with_config(&response, &ConfigBag::base())
        .map_err(|e| format!("{e:?}"))?
        .downcast::<DescribeInstancesOutput>()
        .map_err(|_| "not DescribeInstances' output".to_string())?;
    Ok(Listing::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::error::ProvideErrorMetadata;
    use aws_sdk_ec2::operation::RequestId;
    use aws_sdk_ec2::operation::describe_instances::DescribeInstancesError;

    /// A machine's members in full: two block devices (the root one second), a network interface
    /// whose nested members reuse the instance's names, and tags with every escape.
    const FULL: &str = r#"<item>
    <instanceId>i-0598c7d356eba48d7</instanceId>
    <imageId>ami-0abcdef1234567890</imageId>
    <instanceState><code>80</code><name>stopped</name></instanceState>
    <privateDnsName>ip-10-0-1-25.eu-west-1.compute.internal</privateDnsName>
    <dnsName>  ec2-203-0-113-25.eu-west-1.compute.amazonaws.com </dnsName>
    <reason>User initiated (2026-03-02 09:15:00 GMT)</reason>
    <instanceType>m7g.large</instanceType>
    <launchTime>2026-03-02T08:30:00.000Z</launchTime>
    <placement><availabilityZone>eu-west-1a</availabilityZone><groupName/><tenancy>default</tenancy></placement>
    <monitoring><state>disabled</state></monitoring>
    <privateIpAddress>10.0.1.25</privateIpAddress>
    <ipAddress>203.0.113.25</ipAddress>
    <groupSet><item><groupId>sg-0123456789abcdef0</groupId><groupName>orca</groupName></item></groupSet>
    <rootDeviceName>/dev/sda1</rootDeviceName>
    <blockDeviceMapping>
        <item><deviceName>/dev/sdf</deviceName><ebs><volumeId>vol-1</volumeId>
            <attachTime>2026-03-02T09:00:00.000Z</attachTime></ebs></item>
        <item><deviceName>/dev/sda1</deviceName><ebs><volumeId>vol-2</volumeId><status>attached</status>
            <attachTime>2026-03-01T10:00:00.123Z</attachTime><deleteOnTermination>true</deleteOnTermination></ebs></item>
    </blockDeviceMapping>
    <tagSet>
        <item><key>Name</key><value>w-1</value></item>
        <item><key>orca</key><value>pool</value></item>
        <item><key>orca-pool</key><value>lab</value></item>
        <item><key>orca-owner</key><value>stack-1</value></item>
        <item><key>note</key><value>a &amp; b &lt;c&gt; &quot;d&quot; &apos;e&apos; &#233;&#x1F600; é 😀</value></item>
        <item><key>empty</key><value/></item>
        <item><key>blank</key><value></value></item>
        <item><key>spaces</key><value>  two  </value></item>
        <item><key>no-value</key></item>
        <item><value>no key</value></item>
    </tagSet>
    <networkInterfaceSet><item>
        <privateIpAddress>10.0.9.9</privateIpAddress><privateDnsName>other.internal</privateDnsName>
        <attachment><attachTime>2020-01-01T00:00:00.000Z</attachTime></attachment>
        <association><publicIp>198.51.100.1</publicIp><publicDnsName>other.example</publicDnsName></association>
        <tagSet><item><key>Name</key><value>not the instance's</value></item></tagSet>
    </item></networkInterfaceSet>
    <stateReason><code>Client.UserInitiatedShutdown</code><message>User initiated shutdown</message></stateReason>
    <cpuOptions><coreCount>1</coreCount><threadsPerCore>2</threadsPerCore></cpuOptions>
    <usageOperationUpdateTime>2026-03-01T10:00:00.000Z</usageOperationUpdateTime>
</item>"#;

    /// What EC2 may show right after RunInstances: optional members absent, no block device yet.
    const SPARSE: &str = "<item><instanceId>i-1</instanceId><instanceState><code>0</code><name>pending</name>\
        </instanceState><dnsName/><reason/><instanceType>t3.micro</instanceType>\
        <launchTime>2026-03-02T08:31:00Z</launchTime><blockDeviceMapping/></item>";

    fn answer(reservations: &str, next: &str) -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeInstancesResponse \
             xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\n  <requestId>8f7724cf</requestId>\n  \
             <reservationSet>{reservations}</reservationSet>{next}\n</DescribeInstancesResponse>\n"
        )
    }

    fn reservation(instances: &str) -> String {
        format!(
            "<item><reservationId>r-1</reservationId><ownerId>123456789012</ownerId><groupSet/>\
             <instancesSet>{instances}</instancesSet></item>"
        )
    }

    fn ok(body: &str) -> HttpResponse {
        HttpResponse::new(200u16.try_into().unwrap(), SdkBody::from(body))
    }

    fn by_sdk(body: &str) -> Result<Listing, String> {
        sdk_read(body.as_bytes())
    }

    /// `body` read both ways: the driver's reader reads it, to the same fields, machines and next
    /// token as the SDK's.
    fn same_both_ways(body: &str) -> Listing {
        let sdk = by_sdk(body).expect("the SDK reads it");
        let lean = read(body.as_bytes()).expect("the driver's reader reads it");
        assert_eq!(lean, sdk, "{body}");
        let machines = |l: &Listing| -> Vec<_> {
            l.instances
                .iter()
                .cloned()
                .map(InstanceFields::machine)
                .collect()
        };
        assert_eq!(machines(&lean), machines(&sdk), "{body}");
        lean
    }

    #[test]
    fn ec2_shaped_answers_read_the_same_both_ways() {
        let full = FULL;
        let two = answer(
            &(reservation(&format!("{full}{SPARSE}")) + &reservation(SPARSE)),
            "<nextToken>eyJ2IjoiMiIsImMiOiJ+K3YvIn0=&amp;x&#61;1</nextToken>",
        );
        let l = same_both_ways(&two);
        assert_eq!(l.instances.len(), 3);
        assert_eq!(l.next.as_deref(), Some("eyJ2IjoiMiIsImMiOiJ+K3YvIn0=&x=1"));
        let m = l.instances[0].clone().machine();
        assert_eq!((m.name.as_str(), m.pool.as_str()), ("w-1", "lab"));
        assert_eq!(m.labels["note"], "a & b <c> \"d\" 'e' é😀 é 😀");
        assert_eq!(
            (m.labels["empty"].as_str(), m.labels["no-value"].as_str()),
            ("", "")
        );
        assert_eq!(m.labels["spaces"], "  two  ");
        assert_eq!(m.fqdn, "ec2-203-0-113-25.eu-west-1.compute.amazonaws.com");
        assert_eq!(
            m.created_at.unwrap().to_rfc3339(),
            "2026-03-01T10:00:00.123+00:00"
        );
        assert_eq!(
            m.stopped_at.unwrap().to_rfc3339(),
            "2026-03-02T09:15:00+00:00"
        );
        assert_eq!(m.address, "203.0.113.25");

        // Empty pages, empty reservations, no token, no reservation set at all.
        for body in [
            answer("", ""),
            answer(&reservation(""), ""),
            answer("<item><instancesSet/></item><item/>", "<nextToken/>"),
            answer(&reservation(SPARSE), "<nextToken>t-2</nextToken>"),
            "<DescribeInstancesResponse/>".to_string(),
            "<DescribeInstancesResponse><requestId>x</requestId></DescribeInstancesResponse>"
                .to_string(),
        ] {
            same_both_ways(&body);
        }
    }

    #[test]
    fn odd_but_valid_shapes_read_the_same_both_ways() {
        for body in [
            // Prefixed names, members given twice (the last counts), unknown members and lists.
            answer(
                &reservation(
                    "<item><ec2:instanceId xmlns:ec2=\"urn:x\">i-a</ec2:instanceId><instanceId>i-b</instanceId>\
                     <tagSet><item><key>Name</key><value>first</value></item></tagSet>\
                     <tagSet><item><key>Name</key><value>second</value><key>Name2</key></item></tagSet>\
                     <instanceState><name>hibernating</name><name>running</name></instanceState>\
                     <unknownSet><item><instanceId>i-nested</instanceId></item></unknownSet>\
                     <placement/><placement><availabilityZone>z-2</availabilityZone></placement></item>",
                ),
                "",
            ),
            // A state the SDK does not know, a stop without a time, the root device without EBS.
            answer(
                &reservation(
                    "<item><instanceId>i-c</instanceId><instanceState><name>hibernated</name></instanceState>\
                     <reason>Server.ScheduledStop</reason><rootDeviceName>/dev/xvda</rootDeviceName>\
                     <launchTime>2026-01-01T00:00:00Z</launchTime>\
                     <blockDeviceMapping><item><deviceName>/dev/xvda</deviceName></item>\
                     <item><deviceName>/dev/xvda</deviceName><ebs><attachTime>2025-01-01T00:00:00Z</attachTime></ebs></item>\
                     </blockDeviceMapping></item>\
                     <item><instanceId>i-d</instanceId><instanceState><name>stopping</name></instanceState>\
                     <reason>User initiated (2026-01-02 03:04:05 UTC)</reason></item>",
                ),
                "",
            ),
            // Two reservation sets (the last counts), white space and newlines everywhere.
            answer(
                &format!(
                    "{}</reservationSet>\n<reservationSet>\n{}\n",
                    reservation(SPARSE),
                    reservation("\n<item>\n<instanceId>\n i-e \n</instanceId>\n</item>\n")
                ),
                "",
            ),
        ] {
            same_both_ways(&body);
        }
    }

    /// Answers the driver's reader leaves to the SDK's: through [`LeanReader`] each reads as the SDK
    /// reads it (the same machines, or the same refusal), with nothing in the slot.
    #[test]
    fn what_the_driver_does_not_read_goes_to_the_sdk() {
        let bodies = [
            answer(
                &reservation("<item><instanceId>i-<!-- c -->1</instanceId></item>"),
                "",
            ),
            answer(
                &reservation("<item><instanceId><![CDATA[i-1]]></instanceId></item>"),
                "",
            ),
            answer(
                &reservation("<item><instanceId>i-1</instanceId></item><?pi x?>"),
                "",
            ),
            answer(
                &reservation("<item><instanceId>i-&nbsp;1</instanceId></item>"),
                "",
            ),
            answer(
                &reservation("<item><instanceId>i-1\r\n</instanceId></item>"),
                "",
            ),
            answer(
                &reservation("<item><instanceId>i-&#0;1</instanceId></item>"),
                "",
            ),
            answer(
                &reservation("<item><launchTime>yesterday</launchTime></item>"),
                "",
            ),
            answer(
                &reservation("<item><instanceId>i-1<x/></instanceId></item>"),
                "",
            ),
            answer(
                &reservation("<item><instanceId>i-1</instanceID></item>"),
                "",
            ),
            "<DescribeImagesResponse/>".to_string(),
            "<!-- c --><DescribeInstancesResponse/>".to_string(),
            "<DescribeInstancesResponse/><x/>".to_string(),
            answer(&reservation("<item><instanceId>i-1"), ""),
            String::new(),
        ];
        for body in bodies {
            assert!(read(body.as_bytes()).is_err(), "{body}");
            let (lean, slot) = through_lean_reader(ok(&body));
            assert_eq!(*slot.lock().unwrap(), None, "{body}");
            let sdk = by_sdk(&body);
            assert_eq!(lean.map_err(|_| ()), sdk.map_err(|_| ()), "{body}");
        }
        // Not UTF-8.
        let bytes = answer(
            &reservation("<item><instanceId>i-\u{1}</instanceId></item>"),
            "",
        )
        .replace('\u{1}', "\u{e9}")
        .into_bytes();
        let mut latin1 = bytes.clone();
        let at = bytes.windows(2).position(|w| w == [0xc3, 0xa9]).unwrap();
        latin1.splice(at..at + 2, [0xe9]);
        assert!(read(&latin1).is_err());
    }

    /// `response` through a [`LeanReader`] in front of the SDK's: the listing it gives (the slot's,
    /// or the SDK's own when the slot is empty), and the slot.
    fn through_lean_reader(response: HttpResponse) -> (Result<Listing, String>, Slot) {
        let slot = Slot::default();
        let reader = LeanReader { slot: slot.clone() };
        let out = reader.deserialize_nonstreaming_with_config(&response, &ConfigBag::base());
        let listing = out.map_err(|e| format!("{e:?}")).map(|o| {
            let o = o.downcast::<DescribeInstancesOutput>().expect("the output");
            let read = slot.lock().unwrap().clone();
            read.unwrap_or_else(|| Listing::from(o))
        });
        (listing, slot)
    }

    #[test]
    fn the_lean_reader_keeps_the_request_id_and_leaves_the_sdk_nothing_to_read() {
        let body = answer(&reservation(FULL), "<nextToken>n</nextToken>");
        let mut response = ok(&body);
        response
            .headers_mut()
            .insert("x-amzn-requestid", "8f7724cf-496f");
        let slot = Slot::default();
        let reader = LeanReader { slot: slot.clone() };
        let out = reader
            .deserialize_nonstreaming_with_config(&response, &ConfigBag::base())
            .expect("read")
            .downcast::<DescribeInstancesOutput>()
            .expect("the output");
        assert_eq!(out.request_id(), Some("8f7724cf-496f"));
        assert_eq!((out.reservations(), out.next_token()), (&[][..], None));
        let read = slot.lock().unwrap().clone().expect("read by the driver");
        assert_eq!(read, by_sdk(&body).unwrap());
    }

    #[test]
    fn an_error_answer_is_the_sdks_with_its_code() {
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>\
            <Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors>\
            <RequestID>req-9</RequestID></Response>";
        let response = HttpResponse::new(503u16.try_into().unwrap(), SdkBody::from(body));
        let slot = Slot::default();
        *slot.lock().unwrap() = Some(Listing::default());
        let reader = LeanReader { slot: slot.clone() };
        let err = reader
            .deserialize_nonstreaming_with_config(&response, &ConfigBag::base())
            .expect_err("an error");
        let err = err
            .as_operation_error()
            .expect("an operation error")
            .downcast_ref::<DescribeInstancesError>()
            .expect("DescribeInstances' error");
        assert_eq!(err.code(), Some("RequestLimitExceeded"));
        assert_eq!(
            *slot.lock().unwrap(),
            None,
            "an earlier attempt's reading is not kept"
        );
    }
}
