//! Step 9: the first boot. cloud-init must finish cleanly, and the toolchain it installed must
//! answer; a host whose first boot did not is refused naming cloud-init's log on the host, and stays
//! declared (as `first_boot_failed`), so that list shows it and delete and reap return it.

use super::host::Host;
use super::{CreateReport, Step, Versions};
use crate::channel::commands;
use crate::cloud::{Stado, CLOUD_INIT_LOG};
use crate::error::Failure;
use crate::registry::{CloudDecl, CloudState, Held};

/// The version probes, with the words that name each.
const PROBES: [(&str, &str); 3] = [
    ("$HOME/.cargo/bin/rustc --version", commands::RUSTC_VERSION),
    ("node --version", commands::NODE_VERSION),
    ("npm --version", commands::NPM_VERSION),
];

impl Stado {
    /// Step 9: waits for cloud-init and asks for rustc, node and npm.
    pub(super) async fn boot_step(
        &self,
        host: &Host,
        registry: &mut Held,
        report: &mut CreateReport,
    ) -> Step<()> {
        match self.first_boot(host).await {
            Ok(v) => {
                let line = format!(
                    "first boot: cloud-init done; {}, node {}, npm {}",
                    v.rustc, v.node, v.npm
                );
                report.versions = Some(v);
                Ok(((), vec![line]))
            }
            Err(f) => Err(self.boot_failed(host, registry, report, f).into()),
        }
    }

    /// Records that the host's first boot failed; `f`, and whether the record could not be kept.
    fn boot_failed(
        &self,
        host: &Host,
        registry: &mut Held,
        report: &mut CreateReport,
        f: Failure,
    ) -> Failure {
        let mut failed = host.target.clone();
        failed.cloud = Some(CloudDecl {
            state: CloudState::FirstBootFailed,
            ..host.decl.clone()
        });
        registry.put_target(failed.clone());
        report.host = Some(failed);
        match registry.save() {
            Ok(()) => f,
            Err(e) => f.adding(&format!(
                "the registry could not record that its first boot failed: {e}"
            )),
        }
    }

    /// cloud-init's end and the three version probes.
    async fn first_boot(&self, host: &Host) -> Result<Versions, Failure> {
        let (name, ep) = (&host.name, &host.target);
        let unclean = |what: String| {
            Failure::new(format!(
                "the first boot of cloud host {name} did not finish cleanly ({what}); see {CLOUD_INIT_LOG} on the host. {name} stays declared: stado cloud host delete {name} returns it"
            ))
            .with_code("first_boot")
        };
        match self
            .channel
            .run(ep, commands::CLOUD_INIT_WAIT, self.timing.cloud_init)
            .await
        {
            Ok(out) if out.status == 0 && out.stdout.contains("status: done") => {}
            Ok(out) => {
                let status = out
                    .stdout
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("status:"))
                    .map(|s| orca::spec::printable(s.trim()))
                    .unwrap_or_else(|| format!("exit {}", out.status));
                return Err(unclean(format!("cloud-init status: {status}")));
            }
            Err(e) => {
                return Err(unclean(format!(
                    "cloud-init status --wait could not be asked: {e}"
                )))
            }
        }
        let mut answers = Vec::new();
        for (what, cmd) in PROBES {
            match self.channel.run(ep, cmd, self.timing.command).await {
                Ok(out) if out.status == 0 && !out.stdout.trim().is_empty() => {
                    answers.push(orca::spec::printable(out.stdout.trim()))
                }
                Ok(out) => return Err(unclean(format!("{what} answered: {}", out.last_words()))),
                Err(e) => return Err(unclean(format!("{what} could not be asked: {e}"))),
            }
        }
        let [rustc, node, npm] = <[String; 3]>::try_from(answers)
            .map_err(|_| Failure::new("the version probes did not all answer"))?;
        Ok(Versions { rustc, node, npm })
    }
}
