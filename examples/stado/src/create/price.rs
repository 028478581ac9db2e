//! Step 2: the size's hour, the projected hourly burn, and the credit gate.
//!
//! The size is priced at the highest on-demand hour any configured location quotes (the host's and
//! `azure.locations`); the burn adds the recorded hour of every cloud host already declared. The gate
//! takes one hour of all of them from the balance and refuses unless what remains is above the
//! operator's floor.

use std::collections::BTreeMap;

use orca::{CreditBalance, Error};

use super::{CreateReport, CreateRequest, CreditReport, PriceReport, Step, Stop};
use crate::cloud::{usd, Stado, TITLE};
use crate::error::Failure;
use crate::profile::{FloorRuling, Profile};
use crate::registry::Registry;

impl Stado {
    /// Step 2: prices the size, says the projected burn, and passes the credit gate.
    pub(super) async fn price_step(
        &self,
        profile: &Profile,
        registry: &Registry,
        req: &CreateRequest,
        report: &mut CreateReport,
    ) -> Step<PriceReport> {
        // What the gate needs from the profile and the provider, before any call to the cloud.
        let floor = profile.floor()?;
        let credit = self.credit_source()?;
        let mut price = self.quote(profile, req).await?;
        let declared = registry.cloud_hosts(&self.kind);
        // Folded from 0.0: an empty `sum()` of f64 is -0.0, which would be shown as -0.00.
        price.running_usd = declared.iter().fold(0.0, |a, (_, c)| a + c.hourly_usd);
        price.running = declared.len();
        price.projected_burn_usd = price.hourly_usd + price.running_usd;
        report.price = Some(price.clone());
        let lines = vec![burn_line(req, &price)];
        match self.gate(credit, &floor, req, &price, report).await {
            Ok(line) => Ok((price, [lines, vec![line]].concat())),
            Err(failure) => Err(Stop { lines, failure }),
        }
    }

    /// The provider's credit balance, or why the gate has none to read.
    fn credit_source(&self) -> Result<&dyn CreditBalance, Failure> {
        if let Some(credit) = self.provider.credit_balance() {
            return Ok(credit);
        }
        if self.kind == "azure" {
            // The Azure driver reads a credit only when its settings name the billing account
            // and profile it belongs to.
            return Err(Failure::refused(format!(
                "the {TITLE} credit gate has no balance to read: a real subscription's credit is read from a billing profile of a billing account, and this deployment names none; stado config set azure.billing_account <account id> and stado config set azure.billing_profile <profile id> declare them"
            )));
        }
        Err(Failure::new(format!(
            "the {TITLE} credit gate cannot read a balance from the {} provider",
            self.kind
        )))
    }

    /// The size's hour in every configured location, and the highest: the price step's findings
    /// before the hosts already declared are counted (none running).
    async fn quote(&self, profile: &Profile, req: &CreateRequest) -> Result<PriceReport, Failure> {
        let mut quotes = BTreeMap::new();
        for loc in &profile.price_locations(&req.location) {
            match self.provider.hourly_price(&req.size, loc).await {
                Ok(p) if p.currency != "USD" => {
                    return Err(Failure::new(format!(
                        "{TITLE} quotes {} in {loc} in {}, and stado prices hours in USD",
                        req.size, p.currency
                    )))
                }
                Ok(p) => {
                    quotes.insert(loc.clone(), p.hourly);
                }
                // Another configured location may not offer the size: it quotes nothing.
                Err(e @ (Error::NotFound { .. } | Error::InvalidSpec { .. }))
                    if loc != &req.location =>
                {
                    tracing::info!(location = %loc, error = %e, "the size has no price there");
                }
                Err(Error::InvalidSpec { field, rule }) if field == "location" => {
                    return Err(self.unknown_location(loc, &rule))
                }
                // Only an answer that the size has no price there refuses it.
                Err(e @ (Error::NotFound { .. } | Error::InvalidSpec { .. })) => {
                    return Err(Failure::new(format!(
                        "{TITLE} {} has no on-demand price in {loc} (Retail Prices): {}",
                        req.size,
                        self.cloud_error(&e)
                    ))
                    .with_code("refused"))
                }
                // Any other failure says nothing of the size: it keeps its meaning, and one that
                // may pass says so.
                Err(e) => {
                    let mut msg = format!(
                        "the price of {} in {loc} could not be read from {TITLE} (Retail Prices): {}",
                        req.size,
                        self.cloud_error(&e)
                    );
                    let code = if e.is_retryable() {
                        msg.push_str("; this may pass when tried again");
                        "unavailable"
                    } else {
                        "failed"
                    };
                    return Err(Failure::new(msg).with_code(code));
                }
            }
        }
        // The first of the highest, in location order.
        let (priced_in, hour) = quotes
            .iter()
            .map(|(l, h)| (l.clone(), *h))
            .reduce(|best, q| if best.1 >= q.1 { best } else { q })
            .ok_or_else(|| Failure::new(format!("{TITLE} quotes no price for {}", req.size)))?;
        Ok(PriceReport {
            hourly_usd: hour,
            priced_in,
            quotes,
            running: 0,
            running_usd: 0.0,
            projected_burn_usd: hour,
        })
    }

    /// The credit gate: one hour of the new host and of every declared one, taken from the balance,
    /// must leave more than the floor. The line it says when it passes.
    async fn gate(
        &self,
        credit: &dyn CreditBalance,
        floor: &FloorRuling,
        req: &CreateRequest,
        price: &PriceReport,
        report: &mut CreateReport,
    ) -> Result<String, Failure> {
        let balance = credit.balance().await.map_err(|e| {
            Failure::new(format!(
                "the {TITLE} credit balance could not be read: {}",
                self.cloud_error(&e)
            ))
        })?;
        if balance.currency != "USD" {
            return Err(Failure::refused(format!(
                "the {TITLE} credit balance is kept in {}, and stado prices hours in USD; the credit gate cannot compare them",
                balance.currency
            )));
        }
        if floor.currency != balance.currency {
            return Err(Failure::refused(format!(
                "the operator's floor is in {} and the {TITLE} credit balance in {}; the credit gate cannot compare them (the operator's ruling {}: \"{}\")",
                floor.currency, balance.currency, floor.ruling, floor.words
            )));
        }
        let after = balance.amount - price.hourly_usd - price.running_usd;
        report.credit = Some(CreditReport {
            balance: balance.amount,
            currency: balance.currency.clone(),
            after,
            floor: floor.amount,
            floor_currency: floor.currency.clone(),
            ruling: floor.ruling.clone(),
        });
        if after.partial_cmp(&floor.amount) != Some(std::cmp::Ordering::Greater) {
            return Err(Failure::refused(format!(
                "creating cloud host {} ({}) in {} is refused: the {TITLE} credit balance {} USD less one hour of {} ({} USD) and one hour of the machines already running ({} USD) is not above the floor {} {} (the operator's ruling {}: \"{}\"); {} USD would remain",
                req.name,
                req.size,
                req.location,
                usd(balance.amount),
                req.size,
                usd(price.hourly_usd),
                usd(price.running_usd),
                usd(floor.amount),
                floor.currency,
                floor.ruling,
                floor.words,
                usd(after)
            ))
            .with_code("credit"));
        }
        Ok(format!(
            "credit: balance {} USD, {} USD after one hour of all of them, above the floor {} {} (the operator's ruling {}: \"{}\")",
            usd(balance.amount),
            usd(after),
            usd(floor.amount),
            floor.currency,
            floor.ruling,
            floor.words
        ))
    }
}

/// `projected hourly burn: <total> USD (<name> <size> at <hour> USD, <where priced>; <n> cloud
/// host(s) already running at <hours> USD)`.
fn burn_line(req: &CreateRequest, price: &PriceReport) -> String {
    let mut where_priced = format!("priced in {}", price.priced_in);
    if price.quotes.len() > 1 {
        let all: Vec<&str> = price.quotes.keys().map(String::as_str).collect();
        where_priced.push_str(&format!(", the highest of {}", all.join(", ")));
    }
    format!(
        "projected hourly burn: {} USD ({} {} at {} USD, {where_priced}; {} cloud host(s) already running at {} USD)",
        usd(price.projected_burn_usd),
        req.name,
        req.size,
        usd(price.hourly_usd),
        price.running,
        usd(price.running_usd)
    )
}
