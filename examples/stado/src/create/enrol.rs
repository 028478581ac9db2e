//! Steps 7 and 8: enrolment through the verified path (the host key stado minted is pinned before
//! the first connection, and stado connects strictly with it and the fleet key), and the record.
//! A host that cannot be enrolled or recorded is deleted again, since nothing would return it.

use super::host::Host;
use super::{CreateReport, Minted, Step};
use crate::channel::commands;
use crate::cloud::{usd, Stado};
use crate::keys::{self, FleetKey};
use crate::registry::{CloudDecl, CloudState, Held, Target};
use orca::spec::printable;

impl Stado {
    /// Step 7: pins the host key and connects until the host answers as itself.
    pub(super) async fn enrol_step(
        &self,
        host: &Host,
        fleet: &FleetKey,
        minted: &mut Minted,
        registry: &mut Held,
    ) -> Step<()> {
        let name = &host.name;
        let public = host.host_key.public_key_only();
        let enrolled = match keys::pin_host_key(&self.home, name, &public) {
            Ok(pinned) => {
                minted.0.push(pinned);
                self.enrol(host, fleet).await
            }
            Err(f) => Err(f.message().to_string()),
        };
        let hostname = match enrolled {
            Ok(h) => h,
            Err(cause) => {
                let cause = format!("cloud host {name} could not be enrolled: {cause}");
                let f = self.undo_host(registry, host, &host.decl, minted, cause);
                return Err(f.await.into());
            }
        };
        let line = format!(
            "enrolled: {}@{} answers as {hostname}; its host key {} is pinned in {}",
            host.user,
            host.decl.address,
            host.host_key.fingerprint(),
            self.home.pinned_host_key(name).display()
        );
        Ok(((), vec![line]))
    }

    /// Connects with the pinned host key and the fleet key until the host answers (its name), or
    /// enrolment's time is up; a host presenting another key than the pinned one stops it at once.
    async fn enrol(&self, host: &Host, fleet: &FleetKey) -> Result<String, String> {
        let public = host.host_key.public_key_only();
        if let Some(sim) = &self.sim {
            // The simulated host's cloud-init installs the host key stado gave it.
            sim.boot(&host.name, &public, &fleet.public_line)
                .map_err(|e| e.to_string())?;
        }
        let deadline = tokio::time::Instant::now() + self.timing.enrol;
        loop {
            let last = match self
                .channel
                .run(&host.target, commands::ENROL, self.timing.command)
                .await
            {
                // The host's own words: shown, so escaped.
                Ok(out) if out.status == 0 => return Ok(printable(out.stdout.trim())),
                Ok(out) => format!("uname exited {}: {}", out.status, out.last_words()),
                Err(e) if self.cannot_reach(&host.target) => return Err(e),
                Err(e) => e,
            };
            // A changed host key is no passing failure: stop at once.
            if last.contains("Host key verification failed")
                || tokio::time::Instant::now() >= deadline
            {
                return Err(last);
            }
            tokio::time::sleep(self.timing.enrol_interval).await;
        }
    }

    /// Whether no attempt could reach `ep` now, however long enrolment waits: its pinned host key
    /// is gone, or the channel cannot run with its files (the ssh client, their paths).
    fn cannot_reach(&self, ep: &Target) -> bool {
        let pinned = ep.known_hosts.as_deref();
        let paths: Vec<&std::path::Path> =
            pinned.into_iter().chain(ep.identity.as_deref()).collect();
        !pinned.is_some_and(std::path::Path::is_file) || self.channel.can_run(&paths).is_err()
    }

    /// Step 8: records the host whole (`ready`).
    pub(super) async fn record_step(
        &self,
        host: &Host,
        minted: &Minted,
        registry: &mut Held,
        report: &mut CreateReport,
    ) -> Step<()> {
        let decl = CloudDecl {
            state: CloudState::Ready,
            ..host.decl.clone()
        };
        let mut declared = host.target.clone();
        declared.cloud = Some(decl.clone());
        registry.put_target(declared.clone());
        if let Err(e) = registry.save() {
            let cause = format!("cloud host {} could not be recorded: {e}", host.name);
            let f = self.undo_host(registry, host, &decl, minted, cause);
            return Err(f.await.into());
        }
        report.host = Some(declared);
        let line = format!(
            "recorded: targets[{}].cloud ({} {} in {}, {} USD an hour priced in {}, idle after {} minutes)",
            host.name,
            self.kind,
            decl.size,
            decl.location,
            usd(decl.hourly_usd),
            decl.priced_in,
            decl.idle_minutes
        );
        Ok(((), vec![line]))
    }
}
