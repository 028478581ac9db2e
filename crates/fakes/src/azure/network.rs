//! Network: public addresses (DNS names), security groups and their rules, interfaces, subnets.

#[allow(unused_imports)]
use super::*;

/// The FQDN Azure gives a public address's DNS label in `location`: `<label>.<location>.cloudapp.azure.com`,
/// or with a label scope `<label>-<hash>.<location>.cloudapp.azure.com`, the hash standing for the
/// scope (here the subscription and resource group, for every scope but `TenantReuse`); an invalid
/// label is the error's message.
pub(super) fn dns_fqdn(
    label: &str,
    scope: Option<&str>,
    rg: &str,
    location: &str,
) -> Result<String, String> {
    let b = label.as_bytes();
    let ok = (3..=63).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && !label.ends_with('-');
    if !ok {
        return Err(format!("The domain name label {label} is invalid. It must conform to the following regular expression: ^[a-z][a-z0-9-]{{1,61}}[a-z0-9]$."));
    }
    let loc = location.to_ascii_lowercase();
    Ok(match scope {
        None | Some("") => format!("{label}.{loc}.cloudapp.azure.com"),
        Some(sc) => {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            let key = if sc == "TenantReuse" {
                String::new()
            } else {
                format!("{SUBSCRIPTION}/{}", rg.to_ascii_lowercase())
            };
            (key, label, sc).hash(&mut h);
            let hash: String = format!("{:016x}", h.finish())
                .chars()
                .map(|c| {
                    if c.is_ascii_digit() {
                        (b'a' + (c as u8 - b'0')) as char
                    } else {
                        c
                    }
                })
                .collect();
            format!("{label}-{hash}.{loc}.cloudapp.azure.com")
        }
    })
}

pub(super) fn nsg_body(
    id: &str,
    name: &str,
    location: &str,
    tags: &Value,
    rules: Vec<Value>,
) -> Value {
    let default = |n: &str, p: u32, dir: &str, access: &str, src: &str| {
        json!({"id": format!("{id}/defaultSecurityRules/{n}"), "name": n,
            "properties": {"provisioningState": "Succeeded", "protocol": "*", "sourcePortRange": "*",
            "destinationPortRange": "*", "sourceAddressPrefix": src, "destinationAddressPrefix": "*",
            "access": access, "priority": p, "direction": dir}})
    };
    json!({
        "id": id, "name": name, "type": Kind::Nsg.type_name(), "location": location, "tags": tags,
        "etag": "W/\"1\"",
        "properties": {
            "provisioningState": "Succeeded",
            "securityRules": rules,
            "defaultSecurityRules": [
                default("AllowVnetInBound", 65000, "Inbound", "Allow", "VirtualNetwork"),
                default("AllowAzureLoadBalancerInBound", 65001, "Inbound", "Allow", "AzureLoadBalancer"),
                default("DenyAllInBound", 65500, "Inbound", "Deny", "*"),
                default("AllowVnetOutBound", 65000, "Outbound", "Allow", "VirtualNetwork"),
                default("AllowInternetOutBound", 65001, "Outbound", "Allow", "*"),
                default("DenyAllOutBound", 65500, "Outbound", "Deny", "*"),
            ]
        }
    })
}

pub(super) fn subnet_get(st: &State, rg: &str, vnet: &str, subnet: &str) -> Response {
    let Some(v) = st.res.get(&key(rg, Kind::Vnet, vnet)) else {
        return not_found(Kind::Vnet, vnet, rg);
    };
    match v.body["properties"]["subnets"]
        .as_array()
        .and_then(|s| s.iter().find(|x| named(x, subnet)))
    {
        Some(s) => ok(s.clone()),
        None => err(
            404,
            "NotFound",
            &format!(
                "Resource {}/subnets/{subnet} not found.",
                v.body["id"].as_str().unwrap_or("")
            ),
        ),
    }
}

/// A security rule of NSG `nsg` (`{nsg}/securityRules/{rule}`): `GET`, `PUT` and `DELETE`, the
/// last two through an operation on the NSG.
pub(super) fn rule_call(
    st: &mut State,
    r: &Req,
    m: &Method,
    rg: &str,
    nsg: &str,
    rule: &str,
) -> Response {
    let nsg_id = rid(rg, Kind::Nsg, nsg);
    let key = nsg_id.to_ascii_lowercase();
    let Some(res) = st.res.get(&key).cloned() else {
        return not_found(Kind::Nsg, nsg, rg);
    };
    let rules = res.body["properties"]["securityRules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let pos = rules.iter().position(|x| named(x, rule));
    let location = location_of(&res.body);
    match *m {
        Method::GET => match pos {
            Some(i) => ok(rules[i].clone()),
            None => err(
                404,
                "NotFound",
                &format!("Resource {nsg_id}/securityRules/{rule} not found."),
            ),
        },
        Method::PUT => {
            if let Some(e) = busy(st, &key, Kind::Nsg) {
                return e;
            }
            let new = match new_rule(st, r, &nsg_id, &rules, rule) {
                Ok(new) => new,
                Err(e) => return e,
            };
            let mut rules = rules;
            let status = match pos {
                Some(i) => {
                    rules[i] = new.clone();
                    200
                }
                None => {
                    rules.push(new.clone());
                    201
                }
            };
            let op = store_rules(st, r, &key, &location, rules);
            let mut shown = new;
            shown["properties"]["provisioningState"] = json!("Updating");
            answer(status, shown, &[("Azure-AsyncOperation", op)])
        }
        Method::DELETE => {
            let Some(i) = pos else {
                return answer(204, Value::Null, &[]);
            };
            if let Some(e) = busy(st, &key, Kind::Nsg) {
                return e;
            }
            let mut rules = rules;
            rules.remove(i);
            let op = store_rules(st, r, &key, &location, rules);
            answer(
                202,
                Value::Null,
                &[("Azure-AsyncOperation", op.clone()), ("Location", op)],
            )
        }
        _ => err(405, "MethodNotAllowed", "method not allowed"),
    }
}

/// Security rule `rule` of NSG `nsg_id` as its `PUT` makes it, beside the NSG's `rules`: its
/// priority (100-4096, unique in its direction) and application security groups checked.
fn new_rule(
    st: &State,
    r: &Req,
    nsg_id: &str,
    rules: &[Value],
    rule: &str,
) -> Result<Value, Response> {
    let mut props = r.body.get("properties").cloned().unwrap_or(json!({}));
    let given = props["priority"].as_u64();
    let Some(priority) = given.filter(|p| (100..=4096).contains(p)) else {
        let given = given.map_or("null".to_string(), |p| p.to_string());
        return Err(err(400, "SecurityRuleInvalidPriority", &format!("Security rule has invalid Priority. Value provided: {given}. Allowed range 100-4096.")));
    };
    let dir = props["direction"].as_str().unwrap_or("Inbound").to_string();
    if let Some(other) = rules.iter().find(|x| {
        !named(x, rule)
            && x["properties"]["priority"].as_u64() == Some(priority)
            && eq(x["properties"]["direction"].as_str().unwrap_or(""), &dir)
    }) {
        return Err(err(400, "SecurityRuleConflict", &format!("Security rule {rule} conflicts with rule {}. Rules cannot have the same Priority and Direction.", other["name"].as_str().unwrap_or(""))));
    }
    if let Some(e) = first_missing(st, &props["destinationApplicationSecurityGroups"], nsg_id) {
        return Err(e);
    }
    props["provisioningState"] = json!("Succeeded");
    let id = format!("{nsg_id}/securityRules/{rule}");
    let kind = "Microsoft.Network/networkSecurityGroups/securityRules";
    Ok(json!({"id": id, "name": rule, "type": kind, "properties": props}))
}

/// Stores `rules` as the security rules of NSG `key` and starts the operation that applies them:
/// its address.
fn store_rules(st: &mut State, r: &Req, key: &str, location: &str, rules: Vec<Value>) -> String {
    if let Some(x) = st.res.get_mut(key) {
        x.body["properties"]["securityRules"] = json!(rules);
    }
    start_op(st, r, key, Kind::Nsg, location, Action::Rule)
}

/// The public address of a `PUT`: its address (kept on update), SKU and DNS name.
pub(super) fn prepare_pip(st: &mut State, p: &Put<'_>, body: &mut Value) -> Result<(), Response> {
    let Put {
        r,
        rg,
        key,
        location,
        props,
        ..
    } = *p;
    let ip = st.res.get(key).and_then(|x| {
        x.body["properties"]["ipAddress"]
            .as_str()
            .map(str::to_string)
    });
    let ip = ip.unwrap_or_else(|| {
        st.next_ip += 1;
        format!("20.61.{}.{}", st.next_ip / 250, st.next_ip % 250 + 1)
    });
    body["properties"]["ipAddress"] = json!(ip);
    body["sku"] = r
        .body
        .get("sku")
        .cloned()
        .unwrap_or(json!({"name": "Basic"}));
    if let Some(label) = props["dnsSettings"]["domainNameLabel"].as_str() {
        let fqdn = match dns_fqdn(
            label,
            props["dnsSettings"]["domainNameLabelScope"].as_str(),
            rg,
            location,
        ) {
            Ok(f) => f,
            Err(e) => return Err(err(400, "InvalidDomainNameLabel", &e)),
        };
        let taken = st.res.iter().any(|(k, x)| {
            *k != key
                && x.kind == Kind::Pip
                && x.body["properties"]["dnsSettings"]["fqdn"]
                    .as_str()
                    .is_some_and(|f| eq(f, &fqdn))
        });
        if taken {
            return Err(err(
                400,
                "DnsRecordInUse",
                &format!("DNS record {fqdn} is already used by another public IP."),
            ));
        }
        body["properties"]["dnsSettings"]["fqdn"] = json!(fqdn);
    }
    if let Some(old) = st.res.get(key) {
        if let Some(c) = old.body["properties"].get("ipConfiguration") {
            body["properties"]["ipConfiguration"] = c.clone();
        }
    }
    Ok(())
}

/// The security group of a `PUT`, with its rules as sub-resources and the default rules.
pub(super) fn prepare_nsg(p: &Put<'_>, body: &mut Value) -> Result<(), Response> {
    let Put {
        name,
        id,
        location,
        tags,
        props,
        ..
    } = *p;
    let rules: Vec<Value> = props["securityRules"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut rule| {
            let rn = rule["name"].as_str().unwrap_or("rule").to_string();
            rule["id"] = json!(format!("{id}/securityRules/{rn}"));
            rule["properties"]["provisioningState"] = json!("Succeeded");
            rule
        })
        .collect();
    *body = nsg_body(id, name, location, tags, rules);
    Ok(())
}

/// The interface of a `PUT`: its references checked, private addresses given, public addresses
/// attached.
pub(super) fn prepare_nic(st: &mut State, p: &Put<'_>, body: &mut Value) -> Result<(), Response> {
    let Put { id, key, props, .. } = *p;
    if let Some(n) = props["networkSecurityGroup"]["id"].as_str() {
        if let Some(e) = must_exist(st, n, id) {
            return Err(e);
        }
    }
    let cfgs = props["ipConfigurations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if cfgs.is_empty() {
        return Err(err(
            400,
            "InvalidRequestFormat",
            "A network interface needs at least one IP configuration.",
        ));
    }
    let mut out = Vec::new();
    for (i, mut c) in cfgs.into_iter().enumerate() {
        let cn = c["name"].as_str().unwrap_or("ipconfig1").to_string();
        for refd in [
            c["properties"]["subnet"]["id"].as_str(),
            c["properties"]["publicIPAddress"]["id"].as_str(),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(e) = must_exist(st, refd, id) {
                return Err(e);
            }
        }
        if c["properties"]["subnet"]["id"].as_str().is_none() {
            return Err(err(
                400,
                "InvalidRequestFormat",
                "Subnet is required in an IP configuration.",
            ));
        }
        if let Some(e) = first_missing(st, &c["properties"]["applicationSecurityGroups"], id) {
            return Err(e);
        }
        c["id"] = json!(format!("{id}/ipConfigurations/{cn}"));
        c["properties"]["privateIPAddress"] =
            json!(format!("10.0.0.{}", 4 + i + (st.next_ip as usize % 200)));
        c["properties"]["provisioningState"] = json!("Succeeded");
        out.push(c);
    }
    body["properties"]["ipConfigurations"] = json!(out);
    if let Some(old) = st.res.get(key) {
        if let Some(vm) = old.body["properties"].get("virtualMachine") {
            body["properties"]["virtualMachine"] = vm.clone();
        }
    }
    // The public addresses now belong to this interface's configurations.
    for c in &out {
        if let Some(pip) = c["properties"]["publicIPAddress"]["id"].as_str() {
            if let Some(p) = st.res.get_mut(&pip.to_ascii_lowercase()) {
                p.body["properties"]["ipConfiguration"] = json!({"id": c["id"]});
            }
        }
    }
    Ok(())
}
