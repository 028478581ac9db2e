//! What create checks before any call to the cloud: the request, the location where the cloud can
//! say which it has, and that the provider can make what a cloud host needs.

use super::CreateRequest;
use crate::cloud::Stado;
use crate::error::Failure;

/// The OS disk sizes a host may have, GiB (the image needs 30; Azure's largest OS disk is 4095).
const DISK_GB: std::ops::RangeInclusive<u32> = 30..=4095;

/// The machine options a cloud host is made with.
const OPTIONS: [&str; 4] = ["ssh_keys", "ssh_sources", "admission_group", "disk_gb"];

impl Stado {
    /// Refuses a request whose size, location, disk or idle minutes cannot be a cloud host's.
    pub(super) fn check_request(&self, req: &CreateRequest) -> Result<(), Failure> {
        orca::spec::validate_token("size", &req.size)
            .map_err(|_| Failure::invalid(format!("--size {:?} is not a size name", req.size)))?;
        if orca::spec::validate_token("location", &req.location).is_err() {
            return Err(Failure::invalid(format!(
                "--location {:?} is not a location name",
                req.location
            )));
        }
        if !DISK_GB.contains(&req.disk_gb) {
            return Err(Failure::invalid(format!(
                "--disk-gb {}: an OS disk of 30 to 4095 GiB (the image needs 30)",
                req.disk_gb
            )));
        }
        if req.idle_minutes == 0 {
            return Err(Failure::invalid("--idle-minutes 0: at least one minute"));
        }
        let known = self.known_locations();
        if let Some(known) = known.filter(|k| !k.contains(&req.location.as_str())) {
            return Err(self.unknown_location(
                &req.location,
                &format!("its locations are {}", known.join(", ")),
            ));
        }
        Ok(())
    }

    /// Refuses a provider that cannot make what a cloud host needs (its machine options, SSH
    /// admission): otherwise the admission would be made for a host that never can be.
    pub(super) fn check_can_make_hosts(&self) -> Result<(), Failure> {
        let caps = self.provider.capabilities();
        let lacking: Vec<&str> = OPTIONS
            .into_iter()
            .filter(|o| !caps.options.honours(o))
            .collect();
        if !lacking.is_empty() {
            return Err(Failure::new(format!(
                "the {} provider cannot make a cloud host: it does not honour the machine option(s) {}",
                self.kind,
                lacking.join(", ")
            )));
        }
        self.ssh_admission().map(|_| ())
    }

    /// Refuses a create whose host the channel could never reach (the ssh client does not run, or
    /// the paths of the host's fleet key and pinned host key cannot be given to it): found after
    /// its VM is made, enrolment would fail and the VM be deleted again, billed meanwhile.
    pub(super) fn check_channel(&self, req: &CreateRequest) -> Result<(), Failure> {
        let key = self.home.fleet_key(&req.name);
        let pinned = self.home.pinned_host_key(&req.name);
        self.channel
            .can_run(&[key.as_path(), pinned.as_path()])
            .map_err(|e| {
                Failure::refused(format!(
                    "cloud host {} cannot be reached over SSH from here: {e}",
                    req.name
                ))
            })
    }

    /// The locations of the cloud, when stado can know them before any call: the in-memory cloud's.
    fn known_locations(&self) -> Option<&'static [&'static str]> {
        (self.provider.kind() == "fake").then_some(&orca::memory::LOCATIONS[..])
    }

    /// The refusal of a location the cloud does not have; `known` says what it has, or why not.
    pub(super) fn unknown_location(&self, location: &str, known: &str) -> Failure {
        Failure::invalid(format!(
            "--location {location}: the {} cloud has no such location; {known}",
            self.kind
        ))
    }
}
