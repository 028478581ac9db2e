//! What creates of a name made in a pool, found by that name for `delete_named`.
//!
//! A create that fails after RunInstances (its instance not shown to a listing within the
//! visibility window, its answer lost) leaves an instance that tag filters may not show yet: EC2's
//! tag filters catch up with a new instance later than reads by id do. A read of `machine_named`
//! alone would answer "nothing there" while the instance stands, and a caller would give the name
//! up with a machine under it. The create's ClientToken does not lag that way (it is the
//! instance's own, not a tag), and the driver derives it from owner, pool and name: so the
//! instances of a name are read by their tokens as well as by their tags.

use std::collections::HashSet;

use super::*;

impl Ec2Provider {
    /// The instances EC2 made for the ClientTokens a create of `name` in `pool` sends, in every
    /// state: the first generation's token, then, as long as the token names an instance that is
    /// gone or going, the next generation's (derived from that instance's id), as a create moves
    /// on ([`Provider::create`]). A generation salted after `IdempotentParameterMismatch` (a
    /// digest of the create's request) cannot be derived here: the tag listing finds those.
    pub(super) async fn made_for_tokens(&self, pool: &str, name: &str) -> Result<Vec<Instance>> {
        let mut found = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..MAX_TOKEN_GENERATIONS {
            let token = client_token(&self.owner, pool, name, after.as_deref());
            let named = self
                .list(&[filter("client-token", [token.as_str()])])
                .await?;
            let next = match named.first() {
                Some(i) if going(state_of(i)) => i.instance_id().map(str::to_string),
                _ => None,
            };
            found.extend(named);
            match next {
                Some(id) => after = Some(id),
                None => break,
            }
        }
        Ok(found)
    }

    /// This owner's instances of `pool` named `name` that are not terminated, each once: those the
    /// create's ClientTokens name and those the tag-filtered listing shows, both read at once. An
    /// instance is kept only when its own tags say it is this owner's, of `pool` and named `name`
    /// (a token is the caller's to give: anyone may send this name's). One found by the token that
    /// shows no tags at all is an error: EC2 may not show the tags of a new instance to a read yet,
    /// and it may be this create's.
    async fn instances_named(&self, pool: &str, name: &str) -> Result<Vec<Instance>> {
        let mut filters = self.pool_filters(pool, &LISTED_STATES);
        filters.push(filter(&format!("tag:{NAME_TAG}"), [name]));
        let (by_token, by_tags) =
            tokio::try_join!(self.made_for_tokens(pool, name), self.list(&filters))?;
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for inst in by_token.into_iter().chain(by_tags) {
            let id = inst.instance_id().unwrap_or_default().to_string();
            if state_of(&inst) == "terminated" || !seen.insert(id.clone()) {
                continue;
            }
            let labels = labels_of(&inst);
            if labels.is_empty() {
                return Err(Error::transient(format!(
                    "delete_named({pool}, {name}): EC2 holds {id} for this name's ClientToken but \
                     shows none of its tags yet; try again later"
                ))
                .with_operation("delete_named"));
            }
            let named = labels.get(NAME_TAG).map(String::as_str) == Some(name);
            if named && is_in_pool(&labels, pool, &self.owner) {
                out.push((id, inst));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out.into_iter().map(|(_, i)| i).collect())
    }

    /// [`Provider::delete_named`]: every instance of [`Ec2Provider::instances_named`] terminated and
    /// followed to its end (its root volume goes with it). An instance that could not be removed
    /// fails the call with [`Error::Leftovers`] naming it, once every other one was tried.
    pub(super) async fn remove_named(&self, pool: &str, name: &str) -> Result<bool> {
        validate_pool(pool)?;
        validate_name(name)?;
        let mut removed = false;
        let mut failed = None;
        let mut left = Vec::new();
        // A create of this name stopped lately may have made an instance that neither read shows
        // yet: then "none" is read again within the visibility window.
        let found = self
            .stopped
            .find(
                pool,
                name,
                |n| self.pause(n),
                || self.instances_named(pool, name),
            )
            .await?;
        for inst in found {
            let id = inst.instance_id().unwrap_or_default();
            match self.terminate(id, state_of(&inst)).await {
                Ok(_) => removed = true,
                Err(e) => {
                    tracing::warn!(id, error = %e, "could not remove an instance by name");
                    failed.get_or_insert(e);
                    left.push(format!("instance {id}"));
                }
            }
        }
        match failed {
            Some(e) => Err(Error::leftovers(e, left)),
            None => {
                self.stopped.forget(pool, name);
                Ok(removed)
            }
        }
    }
}
