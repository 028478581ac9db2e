//! Cloud-init user data that keeper generates (`generate_userdata`, `self_onboard`).
//!
//! keeper's `cloud_init` setting (a template file named by `KEEPER_CLOUD_INIT`) is a cloud-init
//! document with placeholders that keeper fills per VM: `${hostname}` (`<name>-<index>`), `${fqdn}`
//! and `${sid}` (the predicted FQDN `<name>-<index>.<fqdn_suffix>`), `${keeper_url}`, and
//! `${bootstrap_token}` (the VM's plain one-time token: only with `self_onboard`, which bakes it into
//! each VM's user data). Any other `${...}` is an error when the template is loaded. Without a
//! template, `self_onboard` uses [`SELF_ONBOARD`].

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
            out = out.replace(&needle, value);
        }
        Ok(out)
    }
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
}
