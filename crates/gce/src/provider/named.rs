//! What creates of a name made in a pool, found by that name: this owner's instances of it, and
//! the boot disks of it. `machine_named` reads the first; `delete_named` removes both.
//!
//! A boot disk is made before its instance: an insert that finds no room (or whose operation fails
//! later) leaves it unattached, and when the create's clean-up cannot remove it, only its labels
//! (this owner's, this pool's and [`MACHINE_LABEL`] naming the instance, given in the insert) and
//! its name (the instance's stem and 8 hex digits, [`boot_disk_name`]) tie it to the create: no
//! listing of machines shows it, and `delete(id)` has no instance to go by.

use super::*;
use crate::model::DiskAggregatedList;

/// What a removal by name did: whether it removed anything, and what it could not remove (with
/// the first failure).
#[derive(Default)]
struct Removal {
    removed: bool,
    failed: Option<Error>,
    left: Vec<String>,
}

impl Removal {
    fn note(&mut self, outcome: Result<()>, piece: String) {
        match outcome {
            Ok(()) => self.removed = true,
            Err(e) => {
                tracing::warn!(%piece, error = %e, "could not remove a piece of a create by name");
                self.failed.get_or_insert(e);
                self.left.push(piece);
            }
        }
    }

    fn answer(self) -> Result<bool> {
        match self.failed {
            Some(e) => Err(Error::leftovers(e, self.left)),
            None => Ok(self.removed),
        }
    }
}

impl GceProvider {
    /// This owner's instances of `name` in `pool`: one listing filtered on the pool's labels and
    /// the name (in every zone, the aggregated listing: a name is unique in its zone only).
    pub(super) async fn instances_named(&self, pool: &str, name: &str) -> Result<Vec<Instance>> {
        let owner = &self.inner.owner;
        let filter = format!("{} (name = \"{name}\")", self.pool_filter(pool));
        let mut found = self.list_instances(filter).await?;
        found.retain(|vm| vm.name == name && is_in_pool(&vm.labels, pool, owner));
        Ok(found)
    }

    /// [`Provider::delete_named`]: the instances first, then the boot disks still standing, and
    /// the instances that hold a boot disk of the name but that the listing did not show.
    pub(super) async fn remove_named(&self, pool: &str, name: &str) -> Result<bool> {
        validate_pool(pool)?;
        orca_machines::validate_name(name)?;
        if !valid_resource_name(name) {
            // A create refuses such a name before any call: nothing of it can stand.
            return Ok(false);
        }
        let mut removal = Removal::default();
        // A create of this name stopped lately may have made an instance the listing does not show
        // yet: then "none" is read again within the window.
        let retry = &self.client().retry;
        let pause = |n| retry.backoff(n).max(Duration::from_millis(20));
        let shown = self
            .inner
            .stopped
            .find(pool, name, pause, || self.instances_named(pool, name))
            .await?;
        let mut zones_shown = Vec::new();
        for vm in shown {
            let r = InstanceRef {
                zone: last_segment(&vm.zone).to_string(),
                name: vm.name,
            };
            let outcome = self.delete_instance(&r).await;
            if outcome.is_ok() {
                self.inner.recent.forget(r.id().as_str());
            }
            removal.note(outcome, format!("instance {}", r.id()));
            zones_shown.push(r.zone);
        }
        // Read once the instances are gone: a boot disk went with its instance (autoDelete), and
        // one whose autoDelete was turned off is unattached now. One still held by an instance of
        // the name that the listing did not show proves that instance exists (a create stopped
        // before it answered, in this process or another): it is read directly.
        for (zone, disk) in self.boot_disks(pool, name).await? {
            if is_loose_boot_disk_of(&disk, name) {
                let path = self.client().zonal(&zone, &format!("disks/{}", disk.name));
                let outcome = self.delete_path("disks.delete", &path).await;
                removal.note(outcome, format!("disk {zone}:{}", disk.name));
            } else if is_held_by(&disk, name) && !zones_shown.contains(&zone) {
                self.remove_unshown(pool, &zone, name, &disk, &mut removal)
                    .await;
            }
        }
        if removal.failed.is_none() {
            self.inner.stopped.forget(pool, name);
        }
        removal.answer()
    }

    /// Removes instance `name` of `zone`, which holds this owner's boot `disk` of that name in
    /// `pool` but which the listing did not show: read (again until it shows, within the visibility
    /// window), deleted when it is this owner's machine of `pool`, and its disk after it when the
    /// disk stayed. Not shown within the window, it is named `instance <zone>:<name> (not shown
    /// yet)`, as a failed create's clean-up names it, so that the caller calls again.
    async fn remove_unshown(
        &self,
        pool: &str,
        zone: &str,
        name: &str,
        disk: &Disk,
        removal: &mut Removal,
    ) {
        let r = InstanceRef {
            zone: zone.to_string(),
            name: name.to_string(),
        };
        match self.read_fresh(&r, Instant::now()).await {
            Ok(Some(vm)) if is_in_pool(&vm.labels, pool, &self.inner.owner) => {
                let outcome = self.delete_instance(&r).await;
                let removed = outcome.is_ok();
                removal.note(outcome, format!("instance {}", r.id()));
                if removed {
                    self.inner.recent.forget(r.id().as_str());
                    // A disk whose autoDelete was turned off outlives its instance.
                    let outcome = self.delete_disk_if_ours(zone, &disk.name, None).await;
                    if outcome.is_err() {
                        removal.note(outcome, format!("disk {zone}:{}", disk.name));
                    }
                }
            }
            // Another pool's or owner's machine now (its labels changed): not this name's to remove.
            Ok(Some(_)) => {}
            Ok(None) => removal.note(
                Err(Error::transient(format!(
                    "instance {} holds boot disk {zone}:{} but is not shown yet",
                    r.id(),
                    disk.name
                ))),
                format!("instance {} (not shown yet)", r.id()),
            ),
            Err(e) => removal.note(Err(e), format!("instance {} (unknown)", r.id())),
        }
    }

    /// The boot disks of instance name `name` with this owner's and `pool`'s labels, held or not,
    /// with their zones. A disk an instance holds goes with that instance.
    ///
    /// One listing: filtered on [`MACHINE_LABEL`] too when `name` is cut in its disks' names (the
    /// label alone tells its disks from those of a name alike in its first 54 characters); for a
    /// name held whole, on the pool's labels alone, so that the disks of versions before the label
    /// are found as well ([`is_boot_disk_named`] decides).
    async fn boot_disks(&self, pool: &str, name: &str) -> Result<Vec<(String, Disk)>> {
        let owner = &self.inner.owner;
        let mut filter = self.pool_filter(pool);
        if name.len() > BOOT_DISK_STEM_MAX {
            // `name` is a checked instance name: it cannot widen the filter.
            filter.push_str(&format!(" (labels.{MACHINE_LABEL} = \"{name}\")"));
        }
        let mut found = self.list_disks(filter).await?;
        found.retain(|(_, d)| is_in_pool(&d.labels, pool, owner) && is_boot_disk_named(d, name));
        Ok(found)
    }

    /// Every disk matching `filter`, with its zone: the zone's `disks.list` for a single-zone
    /// provider, else one paged `disks.aggregatedList` (the driver makes zonal disks only, so
    /// other scopes are passed over). A listing that could not read every zone is an error.
    async fn list_disks(&self, filter: String) -> Result<Vec<(String, Disk)>> {
        let page_size = self.inner.config.page_size;
        let query = [("filter", filter)];
        if let Some(z) = &self.inner.config.zone {
            let path = self.client().zonal(z, "disks");
            let disks: Vec<Disk> = self
                .client()
                .list_all("disks.list", &path, &query, page_size)
                .await?;
            return Ok(disks.into_iter().map(|d| (z.clone(), d)).collect());
        }
        let path = self.client().aggregated("disks");
        self.client()
            .pages(
                "disks.aggregatedList",
                &path,
                &query,
                page_size,
                |a: DiskAggregatedList| {
                    let scopes = a.items.iter().map(|(k, s)| (k, s.warning.as_ref()));
                    check_reachable("disks.aggregatedList", &a.unreachables, scopes)?;
                    let items = a
                        .items
                        .into_iter()
                        .filter_map(|(scope, s)| {
                            let zone = scope.strip_prefix("zones/")?.to_string();
                            Some(s.disks.into_iter().map(move |d| (zone.clone(), d)))
                        })
                        .flatten()
                        .collect();
                    Ok(Page {
                        items,
                        next: a.next_page_token,
                    })
                },
            )
            .await
    }
}

/// Whether `disk`, with this owner's and the pool's labels, is a boot disk of instance `name`:
/// named as [`boot_disk_name`] names `name`'s disks, and with [`MACHINE_LABEL`] naming `name`. A
/// disk made before that label has only its name to go by, which tells the machine only when
/// `name` is held whole in it (at most 54 characters): a longer name's disk could be any name's
/// alike in its first 54, and is left alone.
fn is_boot_disk_named(disk: &Disk, name: &str) -> bool {
    is_boot_disk_of(&disk.name, name)
        && match disk.labels.get(MACHINE_LABEL) {
            Some(machine) => machine == name,
            None => name.len() <= BOOT_DISK_STEM_MAX,
        }
}

/// Whether `disk`, with this owner's and the pool's labels, is a loose boot disk of instance
/// `name`: one of its boot disks ([`is_boot_disk_named`]) that no instance holds.
fn is_loose_boot_disk_of(disk: &Disk, name: &str) -> bool {
    disk.users.is_empty() && is_boot_disk_named(disk, name)
}

/// Whether an instance named `name` holds `disk` (its `users` are instance URLs, the instance's
/// zone the disk's own: a zonal disk is attached in its zone only).
fn is_held_by(disk: &Disk, name: &str) -> bool {
    disk.users
        .iter()
        .any(|u| u.contains("/instances/") && last_segment(u) == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_disks_are_known_by_the_names_a_create_gives_them() {
        for _ in 0..20 {
            assert!(is_boot_disk_of(&boot_disk_name("lab-1"), "lab-1"));
        }
        assert!(is_boot_disk_of("lab-1-0123abcd", "lab-1"));
        for other in [
            "lab-1",
            "lab-1-",
            "lab-1-0123abc",
            "lab-1-0123abcde",
            "lab-1-0123ABCD",
            "lab-1-0123abcg",
            "lab-1-2-0123abcd",
            "lab-10-0123abcd",
            "lab-0123abcd",
            "xlab-1-0123abcd",
        ] {
            assert!(!is_boot_disk_of(other, "lab-1"), "{other}");
        }
        // A long name's disks carry its first 54 characters.
        let long = format!("v{}", "x".repeat(62));
        assert!(is_boot_disk_of(&boot_disk_name(&long), &long));
        let cut = format!("{}-{}", "a".repeat(53), "b".repeat(9));
        assert!(is_boot_disk_of(&boot_disk_name(&cut), &cut));
        assert!(is_boot_disk_of(
            &format!("{}-0123abcd", "a".repeat(53)),
            &cut
        ));
    }
    fn disk(name: &str, machine: Option<&str>, users: &[&str]) -> Disk {
        let mut labels = orca_machines::labels::ownership_labels("lab", "s1");
        if let Some(m) = machine {
            labels.insert(MACHINE_LABEL.to_string(), m.to_string());
        }
        Disk {
            name: name.to_string(),
            labels,
            users: users.iter().map(|u| u.to_string()).collect(),
        }
    }

    #[test]
    fn a_loose_boot_disk_is_its_machines_by_its_label_and_an_older_one_by_a_whole_name() {
        let one = format!("vm-{}-one", "x".repeat(51));
        let two = format!("vm-{}-two", "x".repeat(51));
        let cut = boot_disk_name(&one);
        assert!(is_boot_disk_of(&cut, &two));
        assert!(is_loose_boot_disk_of(&disk(&cut, Some(&one), &[]), &one));
        assert!(!is_loose_boot_disk_of(&disk(&cut, Some(&one), &[]), &two));
        // Held by an instance: it goes with that instance.
        assert!(!is_loose_boot_disk_of(
            &disk(&cut, Some(&one), &["vm"]),
            &one
        ));
        // Without the label (an older version's), a cut name tells nothing; a whole one does.
        assert!(!is_loose_boot_disk_of(&disk(&cut, None, &[]), &one));
        assert!(is_loose_boot_disk_of(
            &disk("lab-1-0123abcd", None, &[]),
            "lab-1"
        ));
        let whole = "w".repeat(54);
        assert!(is_loose_boot_disk_of(
            &disk(&boot_disk_name(&whole), None, &[]),
            &whole
        ));
        // The label never makes a disk of another name's shape this name's.
        assert!(!is_loose_boot_disk_of(
            &disk("lab-2-0123abcd", Some("lab-1"), &[]),
            "lab-1"
        ));
        // A name that is a short one and hyphens up to its 54th character shares its disk names.
        let hyphens = format!("lab-1{}x", "-".repeat(49));
        assert!(is_boot_disk_of("lab-1-0123abcd", &hyphens));
        assert!(!is_loose_boot_disk_of(
            &disk("lab-1-0123abcd", Some(&hyphens), &[]),
            "lab-1"
        ));
        assert!(is_loose_boot_disk_of(
            &disk("lab-1-0123abcd", Some(&hyphens), &[]),
            &hyphens
        ));
    }
}
