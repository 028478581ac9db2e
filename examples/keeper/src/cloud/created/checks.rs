//! The checks of a `created` step: what it can check before any cloud call (the profile, the user
//! data, the spec as the driver checks it), and what makes a VM made usable.

use super::super::params::{CreateParams, ProfileParam, UserData};
use super::super::Keeper;
use super::Batch;
use crate::error::{from_orca, Error, Result};
use crate::registry::{self, CloudProvider, ProfileSpec, PROFILE_SPEC_FIELDS};
use crate::tokens::PlainToken;
use crate::userdata::{Template, Vars};

impl Keeper {
    /// Every check the driver makes before a call, on a VM of this batch (named past any index the
    /// batch can take), before anything is made.
    pub(super) fn check_probe(&self, b: &Batch) -> Result<()> {
        let probe = format!("{}-{}", b.base, i64::MAX / 1_000_000_000);
        let token = PlainToken::generate()?;
        let fqdn = b.row.fqdn_suffix.as_ref().map(|s| format!("{probe}.{s}"));
        let ud = self.user_data(
            &b.params,
            b.template.as_ref(),
            &probe,
            fqdn.as_deref(),
            &token,
        )?;
        let spec = b.machine_spec(&probe, &self.settings.pool, &ud);
        spec.validate()
            .and_then(|()| b.cloud.capabilities().check_spec(b.cloud.kind(), &spec))
            .map_err(|e| spec_error(&e, &b.params.userdata))
    }

    /// The VM spec of the step: the inline map, the named profile (of this provider), or, without
    /// `profile`, the provider's only profile (refused naming `profile` when it has none or several).
    pub(super) async fn profile_of(
        &self,
        p: &CreateParams,
        row: &CloudProvider,
    ) -> Result<ProfileSpec> {
        match &p.profile {
            Some(ProfileParam::Inline(s)) => Ok(s.clone()),
            Some(ProfileParam::Named(name)) => {
                let client = self.pool.get().await?;
                let prof = registry::get_profile(&client, name)
                    .await?
                    .ok_or_else(|| registry::unregistered("profile", name))?;
                if prof.provider != row.name {
                    return Err(Error::invalid(
                        "profile",
                        format!(
                            "profile {name} is for provider {}, not {}",
                            prof.provider, row.name
                        ),
                    ));
                }
                Ok(prof.spec)
            }
            // Without `profile`, the provider's only profile, when it has one.
            None => {
                let client = self.pool.get().await?;
                let mut of_provider: Vec<_> = registry::list_profiles(&client)
                    .await?
                    .into_iter()
                    .filter(|prof| prof.provider == row.name)
                    .collect();
                match of_provider.len() {
                    1 => Ok(of_provider.remove(0).spec),
                    0 => Err(Error::invalid(
                        "profile",
                        format!(
                            "not given, and provider {} has no profile to use instead: give a profile map with at least machine_type, or register a profile for it (keeper has no default VM size)",
                            row.name
                        ),
                    )),
                    _ => Err(Error::invalid(
                        "profile",
                        format!(
                            "not given, and provider {} has {} profiles ({}): name one",
                            row.name,
                            of_provider.len(),
                            of_provider
                                .iter()
                                .map(|prof| prof.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )),
                }
            }
        }
    }

    pub(super) fn template_for(&self, p: &CreateParams) -> Result<Option<Template>> {
        match p.userdata {
            UserData::Empty | UserData::Given(_) => Ok(None),
            UserData::Generate => match &self.settings.cloud_init {
                Some(t) => Ok(Some(t.clone())),
                None => Err(Error::invalid(
                    "generate_userdata",
                    "keeper has no cloud_init template to generate user data from (set KEEPER_CLOUD_INIT)",
                )),
            },
            UserData::SelfOnboard => {
                let t = self
                    .settings
                    .cloud_init
                    .clone()
                    .unwrap_or_else(Template::self_onboard);
                if !t.uses("bootstrap_token") {
                    return Err(Error::invalid(
                        "self_onboard",
                        "keeper's cloud_init template has no ${bootstrap_token}: a self-onboarding VM could not register",
                    ));
                }
                Ok(Some(t))
            }
        }
    }

    pub(super) fn user_data(
        &self,
        p: &CreateParams,
        template: Option<&Template>,
        hostname: &str,
        fqdn: Option<&str>,
        token: &PlainToken,
    ) -> Result<String> {
        // Only a self-onboarding VM gets its token; an FQDN only when keeper names the batch.
        let onboard = p.userdata == UserData::SelfOnboard;
        let vars = Vars {
            hostname,
            fqdn: fqdn.filter(|_| onboard || p.name.is_some()),
            keeper_url: &self.settings.keeper_url,
            bootstrap_token: onboard.then(|| token.expose()),
        };
        match (&p.userdata, template) {
            (UserData::Given(s), _) => Ok(s.clone()),
            (UserData::Generate, Some(t)) => t.render("generate_userdata", &vars),
            (UserData::SelfOnboard, Some(t)) => t.render("self_onboard", &vars),
            _ => Ok(String::new()),
        }
    }
}

/// keeper's error for the driver's refusal `e` of a batch's spec, naming the step's parameter:
/// `profile.<field>` for a profile's field, the user data's source for the user data.
fn spec_error(e: &orca::Error, userdata: &UserData) -> Error {
    let mut e = from_orca(e);
    e.field = e.field.map(|f| match f.as_str() {
        p if PROFILE_SPEC_FIELDS.contains(&p) => format!("profile.{p}"),
        "user_data" => match userdata {
            UserData::Generate => "generate_userdata",
            UserData::SelfOnboard => "self_onboard",
            _ => "userdata",
        }
        .to_string(),
        _ => f,
    });
    e
}

pub(super) fn check_self_onboard(p: &CreateParams, row: &CloudProvider) -> Result<()> {
    if p.userdata == UserData::SelfOnboard && row.fqdn_suffix.is_none() {
        return Err(Error::invalid(
            "self_onboard",
            format!(
                "provider {} has no fqdn_suffix: keeper cannot predict the FQDNs to bake",
                row.name
            ),
        ));
    }
    Ok(())
}

/// A VM made is usable only with an FQDN (its SID), and with `self_onboard` only with the FQDN that
/// was baked into it.
pub(super) fn check_made(
    m: &orca::Machine,
    predicted: Option<&str>,
    self_onboard: bool,
) -> Result<()> {
    if m.fqdn.is_empty() {
        return Err(Error::new(
            502,
            "vm.no_fqdn",
            format!(
                "the provider returned VM {} ({}) without an FQDN: it cannot be a SID",
                m.id, m.name
            ),
        ));
    }
    if let Some(p) = predicted.filter(|p| self_onboard && !m.fqdn.eq_ignore_ascii_case(p)) {
        return Err(Error::new(
            502,
            "vm.fqdn_mismatch",
            format!(
                "VM {} has the FQDN {}, not the {p} keeper predicted and baked into it: check the provider's fqdn_suffix",
                m.id, m.fqdn
            ),
        ));
    }
    Ok(())
}
