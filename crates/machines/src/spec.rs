//! What a machine should be ([`MachineSpec`]) and the validation rules every driver applies before any
//! network call ([contract](crate::contract) 1).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::labels::Labels;

/// What to make: a machine `name` of `machine_type` in `location`, booted with `user_data`, in `pool`,
/// with per-machine options set by the `with_*` methods.
///
/// An option a driver cannot honour is refused by its `create` before any call
/// ([`crate::Error::Unsupported`]); [`crate::Capabilities::options`] says which a driver honours.
///
/// ```
/// use std::time::Duration;
/// use orca_machines::MachineSpec;
/// let spec = MachineSpec::new("orca-lab-7", "cax31", "hel1", "lab")
///     .with_user_data("#cloud-config\n")
///     .with_label("shed-state", "creating")
///     .with_disk_gb(50)
///     .with_max_run_duration(Duration::from_secs(24 * 3600));
/// assert!(spec.validate().is_ok());
/// assert_eq!(spec.options_used(), vec!["labels", "disk_gb", "max_run_duration"]);
/// assert!(MachineSpec::new("Bad_Name", "cax31", "hel1", "lab").validate().is_err());
/// assert!(MachineSpec::new("a", "t", "l", "p").with_label("orca-owner", "x").validate().is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MachineSpec {
    /// A host name: 1 to 63 of a-z, 0-9 and `-`, not starting or ending with `-`.
    pub name: String,
    /// The cloud's name for the machine type (`cax31`, `t4g.small`, `e2-small`, `Standard_B2s`).
    pub machine_type: String,
    /// The cloud's name for the location (`hel1`, `eu-west-1a`, `europe-west1-b`, `westeurope`).
    pub location: String,
    /// Data the machine boots with (cloud-init). May be empty. May hold secrets: never printed.
    pub user_data: String,
    /// The pool the machine belongs to: a label value.
    pub pool: String,
    /// Labels (tags) set in the create call beside orca's own ([`MachineSpec::with_label`]).
    #[serde(default)]
    pub labels: Labels,
    /// The boot disk's size in GB; `None`: the provider's setting ([`MachineSpec::with_disk_gb`]).
    #[serde(default)]
    pub disk_gb: Option<u32>,
    /// SSH public keys (OpenSSH one-line form) the machine's login user accepts
    /// ([`MachineSpec::with_ssh_key`]).
    #[serde(default)]
    pub ssh_keys: Vec<String>,
    /// Network tags (firewall targets) ([`MachineSpec::with_network_tag`]).
    #[serde(default)]
    pub network_tags: Vec<String>,
    /// The longest the machine runs after each start before the cloud stops it
    /// ([`MachineSpec::with_max_run_duration`]).
    #[serde(default, with = "opt_secs")]
    pub max_run_duration: Option<Duration>,
    /// The boot image in the cloud's own form; `None`: the provider's image for the type's
    /// architecture ([`MachineSpec::with_image`]).
    #[serde(default)]
    pub image: Option<String>,
    /// Addresses (IPs or CIDR blocks) the machine's own firewall admits on SSH, port 22
    /// ([`MachineSpec::with_ssh_sources`]).
    #[serde(default)]
    pub ssh_sources: Vec<String>,
    /// The SSH admission group the machine joins in its location ([`crate::ext::SshAdmission`],
    /// [`MachineSpec::with_admission_group`]).
    #[serde(default)]
    pub admission_group: Option<String>,
}

mod opt_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_secs))
    }
}

impl std::fmt::Debug for MachineSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("MachineSpec");
        d.field("name", &self.name)
            .field("machine_type", &self.machine_type)
            .field("location", &self.location)
            .field(
                "user_data",
                &format_args!("<{} bytes>", self.user_data.len()),
            )
            .field("pool", &self.pool);
        if !self.labels.is_empty() {
            d.field("labels", &self.labels);
        }
        if let Some(g) = self.disk_gb {
            d.field("disk_gb", &g);
        }
        if !self.ssh_keys.is_empty() {
            d.field(
                "ssh_keys",
                &format_args!("<{} key(s)>", self.ssh_keys.len()),
            );
        }
        if !self.network_tags.is_empty() {
            d.field("network_tags", &self.network_tags);
        }
        if let Some(r) = self.max_run_duration {
            d.field("max_run_duration", &r);
        }
        if let Some(i) = &self.image {
            d.field("image", i);
        }
        if !self.ssh_sources.is_empty() {
            d.field("ssh_sources", &self.ssh_sources);
        }
        if let Some(g) = &self.admission_group {
            d.field("admission_group", g);
        }
        d.finish()
    }
}

/// The names of the per-machine options, as [`MachineSpec::options_used`] and
/// [`crate::SpecOptions::names`] spell them.
pub const OPTION_NAMES: [&str; 8] = [
    "labels",
    "disk_gb",
    "ssh_keys",
    "network_tags",
    "max_run_duration",
    "image",
    "ssh_sources",
    "admission_group",
];

impl MachineSpec {
    /// A spec with empty user data and no options.
    pub fn new(
        name: impl Into<String>,
        machine_type: impl Into<String>,
        location: impl Into<String>,
        pool: impl Into<String>,
    ) -> Self {
        MachineSpec {
            name: name.into(),
            machine_type: machine_type.into(),
            location: location.into(),
            user_data: String::new(),
            pool: pool.into(),
            labels: Labels::new(),
            disk_gb: None,
            ssh_keys: Vec::new(),
            network_tags: Vec::new(),
            max_run_duration: None,
            image: None,
            ssh_sources: Vec::new(),
            admission_group: None,
        }
    }

    /// The same spec with `user_data`.
    pub fn with_user_data(mut self, user_data: impl Into<String>) -> Self {
        self.user_data = user_data.into();
        self
    }

    /// The same spec with the label `key=value` set in the create call (orca's own keys are refused by
    /// [`MachineSpec::validate`]).
    pub fn with_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// The same spec with every label of `labels` added.
    pub fn with_labels<I, K, V>(mut self, labels: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.labels
            .extend(labels.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// The same spec with a boot disk of `gb` GB.
    pub fn with_disk_gb(mut self, gb: u32) -> Self {
        self.disk_gb = Some(gb);
        self
    }

    /// The same spec with the SSH public key `key` (OpenSSH one-line form) added.
    pub fn with_ssh_key(mut self, key: impl Into<String>) -> Self {
        self.ssh_keys.push(key.into());
        self
    }

    /// The same spec with the network tag `tag` added.
    pub fn with_network_tag(mut self, tag: impl Into<String>) -> Self {
        self.network_tags.push(tag.into());
        self
    }

    /// The same spec with every network tag of `tags` added.
    pub fn with_network_tags<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        tags: I,
    ) -> Self {
        self.network_tags.extend(tags.into_iter().map(Into::into));
        self
    }

    /// The same spec with a maximum run duration: the cloud stops the machine this long after each
    /// start.
    pub fn with_max_run_duration(mut self, d: Duration) -> Self {
        self.max_run_duration = Some(d);
        self
    }

    /// The same spec booting `image` (the cloud's own form: a Hetzner image name, an AMI id, an Azure
    /// URN, a Compute Engine image path).
    pub fn with_image(mut self, image: impl Into<String>) -> Self {
        self.image = Some(image.into());
        self
    }

    /// The same spec with its own firewall admitting `sources` (IP addresses or CIDR blocks) on SSH.
    pub fn with_ssh_sources<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        sources: I,
    ) -> Self {
        self.ssh_sources = sources.into_iter().map(Into::into).collect();
        self
    }

    /// The same spec joining the SSH admission group `group` of its location
    /// ([`crate::ext::SshAdmission::admit_ssh`]).
    pub fn with_admission_group(mut self, group: impl Into<String>) -> Self {
        self.admission_group = Some(group.into());
        self
    }

    /// The names of the per-machine options this spec sets, in [`OPTION_NAMES`] order.
    pub fn options_used(&self) -> Vec<&'static str> {
        let set = [
            !self.labels.is_empty(),
            self.disk_gb.is_some(),
            !self.ssh_keys.is_empty(),
            !self.network_tags.is_empty(),
            self.max_run_duration.is_some(),
            self.image.is_some(),
            !self.ssh_sources.is_empty(),
            self.admission_group.is_some(),
        ];
        OPTION_NAMES
            .iter()
            .zip(set)
            .filter_map(|(n, on)| on.then_some(*n))
            .collect()
    }

    /// Checks every field; the error names the first field at fault and the rule it breaks.
    pub fn validate(&self) -> Result<()> {
        validate_name(&self.name)?;
        validate_token("machine_type", &self.machine_type)?;
        validate_token("location", &self.location)?;
        validate_pool(&self.pool)?;
        if self.user_data.len() > MAX_USER_DATA {
            return Err(Error::invalid(
                "user_data",
                format!(
                    "at most {MAX_USER_DATA} bytes, got {}",
                    self.user_data.len()
                ),
            ));
        }
        validate_labels(&self.labels)?;
        if let Some(gb) = self.disk_gb {
            if !(1..=65_536).contains(&gb) {
                return Err(Error::invalid(
                    "disk_gb",
                    format!("1 to 65536 GB, got {gb}"),
                ));
            }
        }
        if self.ssh_keys.len() > 16 {
            return Err(Error::invalid("ssh_keys", "at most 16 keys"));
        }
        for k in &self.ssh_keys {
            validate_ssh_public_key(k)?;
        }
        if self.network_tags.len() > 64 {
            return Err(Error::invalid("network_tags", "at most 64 tags"));
        }
        for t in &self.network_tags {
            validate_network_tag(t)?;
        }
        if let Some(d) = self.max_run_duration {
            if d < MIN_RUN_DURATION || d > MAX_RUN_DURATION {
                return Err(Error::invalid(
                    "max_run_duration",
                    format!("30 seconds to 120 days, got {} s", d.as_secs()),
                ));
            }
        }
        if let Some(i) = self.image.as_deref().filter(|i| !is_image(i)) {
            return Err(Error::invalid(
                "image",
                format!("1 to 1024 characters without spaces, got {}", quoted(i)),
            ));
        }
        if self.ssh_sources.len() > 100 {
            return Err(Error::invalid("ssh_sources", "at most 100 sources"));
        }
        for src in &self.ssh_sources {
            validate_source(src).map_err(|rule| Error::invalid("ssh_sources", rule))?;
        }
        if let Some(g) = &self.admission_group {
            validate_group(g)?;
        }
        Ok(())
    }
}

/// The shortest maximum run duration a spec may ask for (Compute Engine's own floor).
pub const MIN_RUN_DURATION: Duration = Duration::from_secs(30);
/// The longest maximum run duration a spec may ask for (Compute Engine's own ceiling: 120 days).
pub const MAX_RUN_DURATION: Duration = Duration::from_secs(120 * 86_400);

/// The rule for label keys a caller may set: what every cloud accepts.
pub const LABEL_KEY_RULE: &str =
    "1 to 63 of a-z, 0-9, '-' and '_', starting with a letter and ending with a letter or digit, and not one of orca's own (orca, orca-pool, orca-owner)";

/// The rule for label values a caller may set: what every cloud accepts (Hetzner's being the narrowest).
pub const EXTRA_LABEL_VALUE_RULE: &str =
    "0 to 63 of a-z, 0-9, '-' and '_', starting and ending with a letter or digit when not empty";

/// Checks labels a caller sets beside orca's own: keys by [`LABEL_KEY_RULE`], values by
/// [`EXTRA_LABEL_VALUE_RULE`], at most 32 of them.
pub fn validate_labels(labels: &Labels) -> Result<()> {
    if labels.len() > 32 {
        return Err(Error::invalid(
            "labels",
            "at most 32 labels beside orca's own",
        ));
    }
    for (k, v) in labels {
        validate_label_key(k)?;
        if !(v.is_empty() || is_label_value(v)) {
            return Err(Error::invalid(
                "labels",
                format!(
                    "the value of {k}: {EXTRA_LABEL_VALUE_RULE}, got {}",
                    quoted(v)
                ),
            ));
        }
    }
    Ok(())
}

/// Checks a label key a caller may set or remove ([`LABEL_KEY_RULE`]).
pub fn validate_label_key(k: &str) -> Result<()> {
    let ends_well = k
        .bytes()
        .last()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    check_label_key(k, ends_well)
}

/// Checks a label key a caller removes: the rule of [`validate_label_key`] but for its last
/// character, since a key ending in '-' or '_' that some clouds took before it was refused at a
/// set may still stand, and must stay removable. Still of a-z, 0-9, '-' and '_' (nothing that
/// could widen a request), and never one of orca's own.
pub fn validate_label_key_to_remove(k: &str) -> Result<()> {
    check_label_key(k, true)
}

/// A label key's rule but for its last character (`ends_well` says whether that passed).
fn check_label_key(k: &str, ends_well: bool) -> Result<()> {
    let ok = ends_well
        && !k.is_empty()
        && k.len() <= 63
        && k.as_bytes()[0].is_ascii_lowercase()
        && k.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !ok || crate::labels::is_reserved(k) {
        return Err(Error::invalid(
            "labels",
            format!("a key is {LABEL_KEY_RULE}, got {}", quoted(k)),
        ));
    }
    Ok(())
}

fn validate_ssh_public_key(k: &str) -> Result<()> {
    let bad = |why: &str| Error::invalid("ssh_keys", why.to_string());
    if k.len() > 8192 || k.contains(['\n', '\r']) {
        return Err(bad("an OpenSSH public key on one line, at most 8 KiB"));
    }
    let mut parts = k.split_whitespace();
    let (Some(kind), Some(data)) = (parts.next(), parts.next()) else {
        return Err(bad("an OpenSSH public key: '<type> <base64> [comment]'"));
    };
    let known = kind.starts_with("ssh-")
        || kind.starts_with("ecdsa-sha2-")
        || kind.starts_with("sk-ssh-")
        || kind.starts_with("sk-ecdsa-");
    let b64 = data.len() >= 16
        && data
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    if !known || !b64 {
        return Err(Error::invalid(
            "ssh_keys",
            format!("an OpenSSH public key ('ssh-ed25519 AAAA... comment'), got type {kind:?}"),
        ));
    }
    Ok(())
}

/// Whether `s` is 1 to `max` of a-z, 0-9 and '-', starting with a letter and not ending with '-':
/// a network tag, an admission group.
fn is_lower_word(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.as_bytes()[0].is_ascii_lowercase()
        && !s.ends_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn validate_network_tag(t: &str) -> Result<()> {
    valid(is_lower_word(t, 63), "network_tags", || {
        format!("a tag is 1 to 63 of a-z, 0-9 and '-', starting with a letter and not ending with '-', got {}", quoted(t))
    })
}

fn validate_group(g: &str) -> Result<()> {
    valid(is_lower_word(g, 40), "admission_group", || {
        format!(
            "1 to 40 of a-z, 0-9 and '-', starting with a letter, got {}",
            quoted(g)
        )
    })
}

/// `Ok` when `ok`, else an [`Error::InvalidSpec`] of `field` stating the `rule` it breaks.
fn valid(ok: bool, field: &str, rule: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(field, rule()))
    }
}

/// Checks an admitted source: an IPv4 or IPv6 address, or a CIDR block of one. The error is the rule.
pub fn validate_source(s: &str) -> std::result::Result<(), String> {
    let (addr, bits) = match s.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    };
    let ip: std::net::IpAddr = addr
        .parse()
        .map_err(|_| format!("an IP address or CIDR block, got {}", quoted(s)))?;
    if let Some(b) = bits {
        let max = if ip.is_ipv4() { 32 } else { 128 };
        match b.parse::<u8>() {
            Ok(n) if n <= max && !b.starts_with('+') => {}
            _ => return Err(format!("a prefix length of 0 to {max}, got {}", quoted(s))),
        }
    }
    Ok(())
}

/// The largest user data every cloud accepts: the smallest of their limits (EC2 16 KiB, Hetzner 32 KiB,
/// Azure 64 KiB, Compute Engine 256 KiB), so that a spec valid for one cloud is valid for all.
pub const MAX_USER_DATA: usize = 16 * 1024;

/// Checks a machine name: 1 to 63 of a-z, 0-9 and `-`, not starting or ending with `-` (a hostname label).
pub fn validate_name(name: &str) -> Result<()> {
    let rule = "1 to 63 of a-z, 0-9 and '-', not starting or ending with '-'";
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    valid(ok, "name", || format!("{rule}, got {}", quoted(name)))
}

/// The rule for label values (pool and owner), the intersection of what every cloud accepts so that a
/// value can never widen a label selector or filter.
pub const LABEL_VALUE_RULE: &str =
    "1 to 63 of a-z, 0-9, '-' and '_', starting and ending with a letter or digit";

fn is_label_value(value: &str) -> bool {
    let b = value.as_bytes();
    let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_';
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(inner)
        && b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
}

/// Checks a pool name: a label value ([`LABEL_VALUE_RULE`]).
pub fn validate_pool(pool: &str) -> Result<()> {
    valid(is_label_value(pool), "pool", || {
        format!("{LABEL_VALUE_RULE}, got {}", quoted(pool))
    })
}

/// Checks an owner: empty (no owner) or a label value ([`LABEL_VALUE_RULE`]).
pub fn validate_owner(owner: &str) -> Result<()> {
    valid(owner.is_empty() || is_label_value(owner), "owner", || {
        format!("empty, or {LABEL_VALUE_RULE}, got {}", quoted(owner))
    })
}

/// Checks a machine id as given to `delete` and friends: 1 to 255 of ASCII letters, digits, `.`, `_`,
/// `-` and `:`, not dots alone, so that it can go into a URL path or a filter as it is (a path
/// segment `.` or `..` would name another resource).
pub fn validate_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 255
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'))
        && !id.bytes().all(|b| b == b'.');
    valid(ok, "id", || {
        format!(
            "1 to 255 of letters, digits, '.', '_', '-' and ':', not dots alone, got {}",
            quoted(id)
        )
    })
}

/// Whether `image` can name an image (a spec's `image`): 1 to 1024 characters, none of them white
/// space or a control character.
pub fn is_image(image: &str) -> bool {
    !image.is_empty()
        && image.len() <= 1024
        && !image.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Checks a cloud token such as a machine type or a location: 1 to 80 of ASCII letters, digits, `.`,
/// `_` and `-`, not dots alone (drivers put it into a URL path, where `.` or `..` would name another
/// resource).
pub fn validate_token(field: &str, value: &str) -> Result<()> {
    let ok = !value.is_empty()
        && value.len() <= 80
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !value.bytes().all(|b| b == b'.');
    valid(ok, field, || {
        format!(
            "1 to 80 of letters, digits, '.', '_' and '-', not dots alone, got {}",
            quoted(value)
        )
    })
}

/// How many characters of a caller's value an error repeats.
const MAX_QUOTED: usize = 64;

/// A caller's value as an error repeats it: quoted and escaped as `{:?}` writes it, and, past
/// 64 characters, cut there, saying how long it was. A value may be a megabyte, and an error goes
/// to logs and audit trails.
pub fn quoted(value: &str) -> String {
    let (kept, rest) = cut(value);
    format!("{kept:?}{rest}")
}

/// A caller's text as an error repeats it without quotes (a field's name): cut as [`quoted`] cuts
/// it, and its control characters escaped (a terminal showing the log would obey them).
pub fn shown(text: &str) -> String {
    let (kept, rest) = cut(text);
    let mut out = String::with_capacity(kept.len() + rest.len());
    for c in kept.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out + &rest
}

/// Text from elsewhere (a host's output, a server's answer) as a program shows it on a terminal:
/// printable text and line ends as they are, every other control character escaped (`\x1b`,
/// `\r`, `\t`, `\u{9b}`), so that what another side sends can never drive the terminal. Nothing is
/// cut: what is shown whole stays whole.
///
/// ```
/// assert_eq!(orca_machines::spec::printable("ok\x1b[2J\n"), "ok\\x1b[2J\n");
/// ```
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push(c),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() && u32::from(c) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)))
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// The first 64 characters of `value`, and what says it was longer (`…(N bytes)`), if it was.
fn cut(value: &str) -> (&str, String) {
    match value.char_indices().nth(MAX_QUOTED) {
        None => (value, String::new()),
        Some((at, _)) => (&value[..at], format!("…({} bytes)", value.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn printable_text_keeps_line_ends_and_escapes_every_other_control_character() {
        assert_eq!(
            printable("h1\x1b]0;owned\x07 ok\r\nnext\tcol\u{9b}x"),
            "h1\\x1b]0;owned\\x07 ok\\r\nnext\\tcol\\u{9b}x"
        );
        assert_eq!(printable("plain text, ünïcode\n"), "plain text, ünïcode\n");
    }

    #[test]
    fn a_huge_value_is_cut_in_its_error() {
        let huge = "A".repeat(1 << 20);
        for e in [
            validate_name(&huge).unwrap_err(),
            validate_pool(&huge).unwrap_err(),
            validate_id(&huge).unwrap_err(),
            validate_token("machine_type", &huge).unwrap_err(),
        ] {
            let text = e.to_string();
            assert!(text.len() < 400, "{} bytes", text.len());
            assert!(text.contains("…(1048576 bytes)"), "{text}");
        }
        assert_eq!(quoted("Bad_Name"), "\"Bad_Name\"");
    }

    #[test]
    fn tokens_are_plain_and_never_dots_alone() {
        for ok in [
            "cx22",
            "Standard_D2s_v5",
            "n2-standard-2",
            "t3.micro",
            "eu-west-1",
            "a..b",
        ] {
            assert!(validate_token("machine_type", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "...",
            "a/b",
            "a b",
            "x?y",
            "é",
            &"a".repeat(81),
        ] {
            match validate_token("location", bad) {
                Err(Error::InvalidSpec { field, .. }) => assert_eq!(field, "location", "{bad}"),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn names() {
        for ok in ["a", "orca-lab-7", "0", &"a".repeat(63)] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a_b",
            "a.b",
            "a b",
            &"a".repeat(64),
            "é",
        ] {
            let e = validate_name(bad).unwrap_err();
            assert!(e.to_string().starts_with("invalid name:"), "{e}");
        }
    }

    #[test]
    fn label_values_cannot_widen_a_selector() {
        for bad in [
            "", "a,b", "a=b", "!a", "a b", "a)", "in (a", "A", "a.b", "_a", "a_", "-a", "a\n", "*",
            "a|b", "a&b", "\"a\"",
        ] {
            assert!(validate_pool(bad).is_err(), "{bad:?}");
            if !bad.is_empty() {
                assert!(validate_owner(bad).is_err(), "{bad:?}");
            }
        }
        assert!(validate_owner("").is_ok());
        assert!(validate_pool("lab_2-x").is_ok());
    }

    /// A caller's label key is what every cloud takes: Hetzner's keys (as Kubernetes') end with a
    /// letter or digit, so a key ending in '-' or '_' is refused before any call.
    #[test]
    fn label_keys_start_with_a_letter_and_end_with_a_letter_or_digit() {
        for bad in [
            "team-", "team_", "-team", "1team", "Team", "te.am", "a/b", "",
        ] {
            let e = validate_label_key(bad).unwrap_err();
            assert!(
                e.to_string().contains("ending with a letter or digit"),
                "{bad:?}: {e}"
            );
        }
        for good in ["team", "t", "team-2", "cost_centre", "a-b_c9"] {
            assert!(validate_label_key(good).is_ok(), "{good:?}");
        }
        // One that stands from before the rule can still be removed.
        assert!(validate_label_key_to_remove("team-").is_ok());
        assert!(validate_label_key_to_remove("orca-pool").is_err());
        assert!(validate_label_key_to_remove("a,b").is_err());
    }

    #[test]
    fn ids_are_never_dot_segments() {
        // An id goes into a URL path as it is, where `.` and `..` name another resource.
        for id in [".", "..", "..."] {
            let e = validate_id(id).unwrap_err();
            assert!(e.to_string().starts_with("invalid id"), "{id}: {e}");
        }
        for id in ["i-0abc", "vm-1", "a.b", ".a", "a..b", "projects:x"] {
            validate_id(id).unwrap();
        }
    }

    #[test]
    fn spec_validation_names_the_field() {
        let s = MachineSpec::new("ok", "cx22", "hel1", "a,b");
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("invalid pool"));
        let s = MachineSpec::new("ok", "cx 22", "hel1", "p");
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("invalid machine_type"));
        let s = MachineSpec::new("ok", "cx22", "", "p");
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("invalid location"));
        let s = MachineSpec::new("ok", "cx22", "hel1", "p")
            .with_user_data("x".repeat(MAX_USER_DATA + 1));
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("invalid user_data"));
    }

    #[test]
    fn options_are_validated_by_name() {
        let base = || MachineSpec::new("ok", "t", "l", "p");
        let field = |s: MachineSpec| match s.validate() {
            Err(Error::InvalidSpec { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(base().with_label("orca-pool", "x")), "labels");
        assert_eq!(field(base().with_label("Key", "x")), "labels");
        assert_eq!(field(base().with_label("k", "a,b")), "labels");
        assert_eq!(field(base().with_label("k", "-a")), "labels");
        assert!(base().with_label("k", "").validate().is_ok());
        assert_eq!(field(base().with_disk_gb(0)), "disk_gb");
        assert_eq!(field(base().with_ssh_key("not a key")), "ssh_keys");
        assert_eq!(
            field(base().with_ssh_key("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA\nssh-rsa x")),
            "ssh_keys"
        );
        assert!(base()
            .with_ssh_key("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0ZXN0a2V5 stado fleet")
            .validate()
            .is_ok());
        assert_eq!(field(base().with_network_tag("Tag")), "network_tags");
        assert_eq!(
            field(base().with_max_run_duration(Duration::from_secs(5))),
            "max_run_duration"
        );
        assert_eq!(field(base().with_image("a b")), "image");
        assert_eq!(field(base().with_image("x".repeat(1025))), "image");
        assert!(base().with_image("x".repeat(1024)).validate().is_ok());
        assert!(is_image(
            "projects/debian-cloud/global/images/family/debian-12"
        ));
        assert!(!is_image("") && !is_image("a\tb") && !is_image("a\u{7}b"));
        assert_eq!(
            field(base().with_ssh_sources(["1.2.3.4/33"])),
            "ssh_sources"
        );
        assert_eq!(field(base().with_ssh_sources(["host"])), "ssh_sources");
        assert!(base()
            .with_ssh_sources(["203.0.113.7/32", "2001:db8::1"])
            .validate()
            .is_ok());
        assert_eq!(field(base().with_admission_group("Grp")), "admission_group");
    }

    #[test]
    fn debug_hides_user_data() {
        let s = MachineSpec::new("n", "t", "l", "p").with_user_data("password=hunter2");
        let d = format!("{s:?}");
        assert!(!d.contains("hunter2"), "{d}");
        assert!(d.contains("16 bytes"));
    }

    fn reference_name(s: &str) -> bool {
        // The rule restated as a regular language, independently of the implementation.
        let chars: Vec<char> = s.chars().collect();
        (1..=63).contains(&chars.len())
            && chars
                .iter()
                .all(|c| matches!(c, 'a'..='z' | '0'..='9' | '-'))
            && chars[0] != '-'
            && chars[chars.len() - 1] != '-'
    }

    fn reference_label(s: &str) -> bool {
        let chars: Vec<char> = s.chars().collect();
        let edge = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        (1..=63).contains(&chars.len())
            && chars
                .iter()
                .all(|c| matches!(c, 'a'..='z' | '0'..='9' | '-' | '_'))
            && edge(chars[0])
            && edge(chars[chars.len() - 1])
    }

    proptest! {
        #[test]
        fn name_matches_reference(s in "\\PC{0,70}") {
            prop_assert_eq!(validate_name(&s).is_ok(), reference_name(&s));
        }

        #[test]
        fn name_accepts_every_hostname_label(s in "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?") {
            prop_assert!(validate_name(&s).is_ok());
        }

        #[test]
        fn pool_and_owner_match_reference(s in "[a-z0-9_=,! ()A-Z.-]{0,66}") {
            prop_assert_eq!(validate_pool(&s).is_ok(), reference_label(&s));
            prop_assert_eq!(validate_owner(&s).is_ok(), s.is_empty() || reference_label(&s));
        }

        #[test]
        fn valid_label_values_hold_no_selector_syntax(s in "\\PC{0,70}") {
            if validate_pool(&s).is_ok() {
                for c in [',', '=', '!', ' ', '(', ')', '"', '\'', '.', '*', '&', '|', ':', '/'] {
                    prop_assert!(!s.contains(c));
                }
            }
        }
    }
}
