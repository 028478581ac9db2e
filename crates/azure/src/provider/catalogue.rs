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

    /// Whether Azure sells virtual machine size `size` in any region (its retail prices name it),
    /// read once a size and cached: what tells a size offered elsewhere from one Azure does not
    /// have, in one small query (the resource SKUs of every region are a very long list). `None`
    /// when the prices could not be read.
    async fn sold_anywhere(&self, size: &str) -> Option<bool> {
        let key = size.to_ascii_lowercase();
        if let Some(sold) = lock(&self.inner.sold).get(&key).copied() {
            return Some(sold);
        }
        let filter = format!(
            "serviceName eq 'Virtual Machines' and armSkuName eq '{size}' and priceType eq 'Consumption'"
        );
        match self.client().prices(&filter).await {
            Ok(rows) => {
                let sold = rows
                    .iter()
                    .any(|r| r.arm_sku_name.eq_ignore_ascii_case(size));
                lock(&self.inner.sold).insert(key, sold);
                Some(sold)
            }
            Err(e) => {
                tracing::warn!(size, error = %e, "could not read whether Azure sells the size elsewhere");
                None
            }
        }
    }

    /// `machine_type`'s architecture for a create in `location`, from the location's catalogue. A
    /// size the location does not list is no stock there (as a location without room, so that a
    /// caller moves on to another offering), unless no region sells it: bad input naming the
    /// machine type; a location whose catalogue lists no size at all is
    /// none of the subscription's, bad input naming the location.
    pub(crate) async fn arch_to_make(&self, machine_type: &str, location: &str) -> Result<Arch> {
        // Both go into OData filters.
        validate_token("machine_type", machine_type)?;
        validate_token("location", location)?;
        let size = machine_type.to_ascii_lowercase();
        let here = self.catalogue(location).await?;
        if let Some(a) = here.get(&size) {
            return Ok(a.clone());
        }
        if here.is_empty() {
            return Err(Error::invalid(
                "location",
                format!("Azure lists no virtual machine sizes in {location}: no location of this subscription"),
            ));
        }
        // Azure not selling the size anywhere says it has none; a failed read of that is taken as
        // no stock here (as the catalogue of the location says), never as bad input.
        if self.sold_anywhere(machine_type).await == Some(false) {
            return Err(Error::invalid(
                "machine_type",
                format!("Azure has no virtual machine size {machine_type} (no region sells it)"),
            ));
        }
        Err(Error::no_stock(
            machine_type,
            location,
            format!("virtual machine size {machine_type} is not offered in {location} (not among its resource SKUs)"),
        ))
    }

    /// The architecture of marketplace image `image` in `location` (`latest`: of its newest
    /// version; every version of one SKU has the same), read once and cached. An image the
    /// marketplace does not hold is bad input naming the image.
    pub(crate) async fn image_arch(&self, image: &ImageUrn, location: &str) -> Result<Arch> {
        let key = format!("{location}/{image}").to_ascii_lowercase();
        if let Some(a) = lock(&self.inner.image_archs).get(&key).cloned() {
            return Ok(a);
        }
        // Every part is a validated token (letters, digits, '.', '_', '-'): safe in a path.
        let versions = format!(
            "{}/providers/Microsoft.Compute/locations/{location}/publishers/{}/artifacttypes/vmimage/offers/{}/skus/{}/versions",
            self.client().sub_path(),
            image.publisher,
            image.offer,
            image.sku
        );
        let missing = || {
            Error::invalid(
                "image",
                format!("the marketplace of {location} has no image {image}"),
            )
        };
        let version = if image.version.eq_ignore_ascii_case("latest") {
            let url = format!(
                "{}&$orderby=name%20desc&$top=1",
                self.client().url(&versions, COMPUTE_API)
            );
            let newest: Option<Vec<ImageVersion>> =
                self.client().get("list image versions", &url).await?;
            match newest.and_then(|v| v.into_iter().next()) {
                Some(v) => v.name,
                None => return Err(missing()),
            }
        } else {
            image.version.clone()
        };
        let url = self
            .client()
            .url(&format!("{versions}/{version}"), COMPUTE_API);
        let Some(got) = self.client().get::<ImageVersion>("get image", &url).await? else {
            return Err(missing());
        };
        let arch = got
            .properties
            .architecture
            .as_deref()
            .map_or(Arch::Amd64, docker_arch);
        lock(&self.inner.image_archs).insert(key, arch.clone());
        Ok(arch)
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
