//! `arch` and `hourly_price`: the locations' size catalogues (resource SKUs) and retail prices.

use super::*;

impl AzureProvider {
    /// `machine_type`'s architecture: from a catalogue read so far, else `ORCA_AZURE_LOCATION`'s.
    pub(crate) async fn arch_of(&self, machine_type: &str) -> Result<Arch> {
        validate_token("machine_type", machine_type)?;
        let key = machine_type.to_ascii_lowercase();
        let read: Vec<Arc<HashMap<String, Arch>>> =
            lock(&self.inner.skus).values().cloned().collect();
        if let Some(a) = read.iter().find_map(|m| m.get(&key)) {
            return Ok(a.clone());
        }
        let location = self.cfg().location.clone();
        self.arch_in(machine_type, &location).await
    }

    /// The size catalogue of `location` (`$filter=location eq '<location>'`), read once and cached.
    pub(crate) async fn catalogue(&self, location: &str) -> Result<Arc<HashMap<String, Arch>>> {
        let key = location.to_ascii_lowercase();
        if let Some(c) = lock(&self.inner.skus).get(&key).cloned() {
            return Ok(c);
        }
        let filter: String =
            url::form_urlencoded::byte_serialize(format!("location eq '{location}'").as_bytes())
                .collect();
        let url = format!(
            "{}&$filter={filter}",
            self.client().url(
                &format!(
                    "{}/providers/Microsoft.Compute/skus",
                    self.client().sub_path()
                ),
                SKUS_API,
            )
        );
        let skus: Vec<Sku> = self.client().list("list resource SKUs", &url).await?;
        let map: HashMap<String, Arch> = skus
            .into_iter()
            .filter(|s| s.resource_type == "virtualMachines" && !s.name.is_empty())
            .map(|s| {
                let arch = s.architecture().map(docker_arch).unwrap_or(Arch::Amd64);
                (s.name.to_ascii_lowercase(), arch)
            })
            .collect();
        let map = Arc::new(map);
        lock(&self.inner.skus).insert(key, map.clone());
        Ok(map)
    }

    /// `machine_type`'s architecture from `location`'s catalogue.
    pub(crate) async fn arch_in(&self, machine_type: &str, location: &str) -> Result<Arch> {
        let map = self.catalogue(location).await?;
        map.get(&machine_type.to_ascii_lowercase())
            .cloned()
            .ok_or_else(|| {
                Error::not_found(format!(
                    "virtual machine size {machine_type} (not offered in {location}: not among its resource SKUs)"
                ))
            })
    }

    /// The hourly Linux on-demand price of `machine_type` in `location` (both validated tokens:
    /// they go into an OData filter).
    pub(crate) async fn price(&self, machine_type: &str, location: &str) -> Result<Price> {
        let filter = format!(
            "serviceName eq 'Virtual Machines' and armRegionName eq '{location}' and armSkuName eq '{machine_type}' and priceType eq 'Consumption'"
        );
        let rows = self.client().prices(&filter).await?;
        rows.iter()
            .filter(|r| r.is_linux_on_demand())
            .filter(|r| r.arm_sku_name.eq_ignore_ascii_case(machine_type))
            .min_by(|a, b| {
                a.retail_price
                    .partial_cmp(&b.retail_price)
                    .unwrap_or(std::cmp::Ordering::Equal)
            })
            .map(|r| {
                Price::new(
                    r.retail_price.unwrap_or(0.0),
                    if r.currency_code.is_empty() {
                        "USD"
                    } else {
                        r.currency_code.as_str()
                    },
                )
            })
            .ok_or_else(|| {
                Error::not_found(format!(
                    "an on-demand Linux price of {machine_type} in {location}"
                ))
            })
    }
}
