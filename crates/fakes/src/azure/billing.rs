//! Billing and the rest outside Resource Manager's resources: Retail Prices, credit balance
//! summaries and the instance metadata service's probe answer.

#[allow(unused_imports)]
use super::*;

pub(super) fn seed_prices() -> Vec<Value> {
    let mut v = Vec::new();
    for (name, family, _, _, base) in SIZES {
        let short = name.trim_start_matches("Standard_").replace('_', " ");
        let series = family
            .trim_start_matches("standard")
            .trim_end_matches("Family");
        for (loc, display, factor) in LOCATIONS {
            let rounded = |x: f64| (x * 10_000.0).round() / 10_000.0;
            let p = rounded(base * factor);
            let row = |price: f64, sku: String, product: &str, ty: &str| {
                json!({
                    "currencyCode": "USD",
                    "tierMinimumUnits": 0.0,
                    "retailPrice": price,
                    "unitPrice": price,
                    "armRegionName": loc,
                    "location": display,
                    "effectiveStartDate": "2024-01-01T00:00:00Z",
                    "meterId": format!("{name}-{loc}-{sku}"),
                    "meterName": sku,
                    "productId": "DZH318Z0BQPS",
                    "skuId": "DZH318Z0BQPS/00TG",
                    "productName": product,
                    "skuName": sku,
                    "serviceName": "Virtual Machines",
                    "serviceId": "DZH313Z7MMC8",
                    "serviceFamily": "Compute",
                    "unitOfMeasure": "1 Hour",
                    "type": ty,
                    "isPrimaryMeterRegion": true,
                    "armSkuName": name
                })
            };
            let product = format!("Virtual Machines {series} Series");
            let windows = format!("{product} Windows");
            for (price, sku_suffix, product, ty) in [
                (p * 2.1, "", &windows, "Consumption"),
                (rounded(p * 0.2), " Spot", &product, "Consumption"),
                (rounded(p * 0.25), " Low Priority", &product, "Consumption"),
                (p * 5000.0, "", &product, "Reservation"),
                (p, "", &product, "Consumption"),
            ] {
                let mut row = row(price, format!("{short}{sku_suffix}"), product, ty);
                if ty == "Reservation" {
                    row["reservationTerm"] = json!("1 Year");
                }
                v.push(row);
            }
        }
    }
    v
}

pub(super) fn prices(st: &State, r: &Req) -> Response {
    let mut conds: Vec<(String, String)> = Vec::new();
    if let Some(f) = r.q("$filter") {
        for part in f.split(" and ") {
            let Some((k, v)) = part.trim().split_once(" eq ") else {
                return answer(
                    400,
                    json!({"Error": {"Code": "InvalidFilter", "Message": format!("cannot parse {part:?}")}}),
                    &[],
                );
            };
            conds.push((
                k.trim().to_string(),
                v.trim().trim_matches('\'').to_string(),
            ));
        }
    }
    let items: Vec<Value> = st
        .prices
        .iter()
        .filter(|p| {
            conds.iter().all(|(k, v)| {
                // The filter's `priceType` is the row's `type`.
                let field = if k == "priceType" { "type" } else { k.as_str() };
                p[field].as_str().is_some_and(|x| eq(x, v))
            })
        })
        .cloned()
        .collect();
    let (got, next) = page(&items, r, st.page_size, "$skip");
    ok(
        json!({"BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
            "Items": got, "NextPageLink": next, "Count": got.len()}),
    )
}

/// `Microsoft.Consumption/credits/balanceSummary` of a billing profile.
pub(super) fn credits(st: &State, account: &str, profile: &str) -> Response {
    let Some((amount, currency)) = st.credits.get(&(account.to_string(), profile.to_string()))
    else {
        return err(
            404,
            "NotFound",
            &format!("Billing profile {profile} of billing account {account} was not found."),
        );
    };
    let money = |v: f64| json!({"currency": currency, "value": v});
    let base = format!(
        "/providers/Microsoft.Billing/billingAccounts/{account}/billingProfiles/{profile}/providers/Microsoft.Consumption/credits/balanceSummary"
    );
    ok(json!({
        "id": format!("{base}/00000000-0000-4000-8000-0000000000c7"),
        "name": "00000000-0000-4000-8000-0000000000c7",
        "type": "Microsoft.Consumption/credits/balanceSummary",
        "eTag": null,
        "properties": {
            "balanceSummary": {"estimatedBalance": money(*amount), "currentBalance": money(*amount)},
            "pendingCreditAdjustments": money(0.0),
            "expiredCredit": money(0.0),
            "pendingEligibleCharges": money(0.0),
            "creditCurrency": currency,
            "billingCurrency": currency,
            "isEstimatedBalance": false,
        }
    }))
}

/// The instance metadata service's token endpoint, as a VM sees it: without the `Metadata: true`
/// header it refuses at once (what a client's probe looks for); with it, the VM's managed identity's
/// token ([`FakeAzure::set_managed_identity`], the token endpoint's JSON: `access_token`,
/// `expires_in`, `expires_on`, `resource`, `token_type`, as strings), or 400 "Identity not found"
/// for a VM without one.
/// The client id of the VM's system-assigned identity.
const SYSTEM_IDENTITY: &str = "00000000-0000-4000-8000-00000000c11e";

pub(super) fn imds(st: &State, r: &Req) -> Response {
    let refuse = |why: &str| {
        let body = json!({"error": "invalid_request", "error_description": why});
        answer(400, body, &[])
    };
    if r.headers.get("metadata").and_then(|v| v.to_str().ok()) != Some("true") {
        return refuse("Required metadata header not specified");
    }
    let not_found = || refuse("Identity not found");
    // `client_id` names a user-assigned identity; without it the system-assigned identity answers,
    // else the only user-assigned one; with several and no system-assigned one the service
    // refuses to choose.
    let client_id = match r.q("client_id").filter(|c| !c.is_empty()) {
        Some(c) => match st.user_assigned.iter().find(|u| u.eq_ignore_ascii_case(c)) {
            Some(u) => u.clone(),
            None => return not_found(),
        },
        None if st.managed_identity => SYSTEM_IDENTITY.to_string(),
        None => match st.user_assigned.as_slice() {
            [] => return not_found(),
            [one] => one.clone(),
            _ => return refuse("Multiple user assigned identities exist, please specify the clientId / resourceId of the identity in the token request"),
        },
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    ok(json!({
        "access_token": TOKEN,
        "client_id": client_id,
        "expires_in": "86399",
        "expires_on": (now + 86_399).to_string(),
        "ext_expires_in": "86399",
        "not_before": now.to_string(),
        "resource": r.q("resource").unwrap_or("https://management.azure.com/"),
        "token_type": "Bearer",
    }))
}
