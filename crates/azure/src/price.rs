//! Hourly on-demand prices from the public Azure Retail Prices API
//! (`GET {prices}/api/retail/prices?api-version=2023-01-01-preview&$filter=...`, no credentials).

use orca_machines::{Error, Price, Result};
use serde_json::Value;

use crate::client::Arm;

/// Whether a price row is the Linux pay-as-you-go hour (not Windows, Spot, Low Priority or a
/// reservation).
pub fn is_linux_on_demand(row: &Value) -> bool {
    let s = |k: &str| row[k].as_str().unwrap_or("");
    s("type") == "Consumption"
        && s("unitOfMeasure") == "1 Hour"
        && !s("productName").contains("Windows")
        && !s("skuName").contains("Spot")
        && !s("skuName").contains("Low Priority")
        && row["retailPrice"].as_f64().is_some_and(|p| p > 0.0)
}

/// The hourly Linux on-demand price of `machine_type` in `location`. Both must be validated tokens
/// already (they go into an OData filter).
pub async fn hourly(arm: &Arm, machine_type: &str, location: &str) -> Result<Price> {
    let filter = format!(
        "serviceName eq 'Virtual Machines' and armRegionName eq '{location}' and armSkuName eq '{machine_type}' and priceType eq 'Consumption'"
    );
    let rows = arm.prices(&filter).await?;
    rows.iter()
        .filter(|r| is_linux_on_demand(r))
        .filter(|r| {
            r["armSkuName"]
                .as_str()
                .is_some_and(|s| s.eq_ignore_ascii_case(machine_type))
        })
        .min_by(|a, b| {
            a["retailPrice"]
                .as_f64()
                .partial_cmp(&b["retailPrice"].as_f64())
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .map(|r| {
            Price::new(
                r["retailPrice"].as_f64().unwrap_or(0.0),
                r["currencyCode"].as_str().unwrap_or("USD"),
            )
        })
        .ok_or_else(|| {
            Error::not_found(format!(
                "an on-demand Linux price of {machine_type} in {location}"
            ))
        })
}
