//! What creates of a name made in a pool, found by that name: this owner's instances of it, and
//! the boot disks of it. `machine_named` reads the first; `delete_named` removes both.
//!
//! A boot disk is made before its instance: an insert that finds no room (or whose operation fails
//! later) leaves it unattached, and when the create's clean-up cannot remove it, only its name
//! (the instance's stem and 8 hex digits, [`boot_disk_name`]) and its labels (this owner's and this
//! pool's, given in the insert) tie it to the create: no listing of machines shows it, and
//! `delete(id)` has no instance to go by.

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

    /// [`Provider::delete_named`]: the instances first, then the boot disks still standing.
    pub(super) async fn remove_named(&self, pool: &str, name: &str) -> Result<bool> {
        validate_pool(pool)?;
        orca_machines::validate_name(name)?;
        if !valid_resource_name(name) {
            // A create refuses such a name before any call: nothing of it can stand.
            return Ok(false);
        }
        let mut removal = Removal::default();
        for vm in self.instances_named(pool, name).await? {
            let r = InstanceRef {
                zone: last_segment(&vm.zone).to_string(),
                name: vm.name,
            };
            let outcome = self.delete_instance(&r).await;
            if outcome.is_ok() {
                self.inner.recent.forget(r.id().as_str());
            }
            removal.note(outcome, format!("instance {}", r.id()));
        }
        // Read once the instances are gone: a boot disk went with its instance (autoDelete), and
        // one whose autoDelete was turned off is unattached now.
        for (zone, disk) in self.loose_boot_disks(pool, name).await? {
            let path = self.client().zonal(&zone, &format!("disks/{}", disk.name));
            let outcome = self.delete_path("disks.delete", &path).await;
            removal.note(outcome, format!("disk {zone}:{}", disk.name));
        }
        removal.answer()
    }

    /// The boot disks of instance name `name` (by their name) with this owner's and `pool`'s
    /// labels that no instance holds, with their zones. A disk an instance holds goes with that
    /// instance; one held by an instance of another name is that one's (two names that the cut to
    /// 54 characters makes equal share their disks' names).
    async fn loose_boot_disks(&self, pool: &str, name: &str) -> Result<Vec<(String, Disk)>> {
        let owner = &self.inner.owner;
        let mut found = self.list_disks(self.pool_filter(pool)).await?;
        found.retain(|(_, d)| {
            is_boot_disk_of(&d.name, name)
                && is_in_pool(&d.labels, pool, owner)
                && d.users.is_empty()
        });
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
}
