//! What the proxy answers on its own, as EC2 would, before anything reaches moto.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::response::Response;

use super::answers::{as_ec2_writes_it, error_response, xml_response};
use super::lookups::{instance_ids, moto_call, offered_zones, subnet_zone};
use super::proxy::{lock, ProfileRefusal, ProxyState, TokenRecord};
use super::{xml, NS, TOKEN_PREFIX};

/// What the proxy answers on its own, as EC2 would, before anything reaches moto.
pub(super) async fn ec2_rules(
    state: &ProxyState,
    action: &str,
    params: &BTreeMap<String, String>,
) -> Option<(Response, Option<String>)> {
    let now = Instant::now();
    let hidden: Vec<String> = {
        let mut ec2 = lock(&state.ec2);
        let hidden: Vec<String> = instance_ids(action, params)
            .into_iter()
            .filter(|id| {
                ec2.unmissed.contains(id) || ec2.hidden_until.get(id).is_some_and(|t| *t > now)
            })
            .collect();
        for id in &hidden {
            ec2.unmissed.remove(id);
        }
        hidden
    };
    if !hidden.is_empty() {
        let ids = hidden.join(", ");
        let message = if hidden.len() == 1 {
            format!("The instance ID '{ids}' does not exist")
        } else {
            format!("The instance IDs '{ids}' do not exist")
        };
        return refuse(400, "InvalidInstanceID.NotFound", &message);
    }
    match action {
        "DescribeInstances" => {
            if let Some(m) = params.get("MaxResults") {
                let ok = m.parse::<i64>().is_ok_and(|n| (5..=1000).contains(&n));
                if !ok {
                    return refuse(
                        400,
                        "InvalidParameterValue",
                        &format!(
                            "Value ( {m} ) for parameter maxResults is invalid. Expecting a value \
                             between 5 and 1000."
                        ),
                    );
                }
            }
            if let Some(t) = params.get("NextToken") {
                if t.strip_prefix(TOKEN_PREFIX)
                    .and_then(|n| n.parse::<usize>().ok())
                    .is_none()
                {
                    return refuse(
                        400,
                        "InvalidParameterValue",
                        "The parameter NextToken is not valid",
                    );
                }
            }
            None
        }
        "RunInstances" => run_instances(state, params).await,
        _ => None,
    }
}

/// The proxy's own EC2 error answer, with its code for the log.
fn refuse(status: u16, code: &str, message: &str) -> Option<(Response, Option<String>)> {
    Some((
        error_response(status, code, message),
        Some(code.to_string()),
    ))
}

/// What the proxy answers on its own to a RunInstances: a repeated ClientToken, an instance profile
/// IAM made a moment ago, a type the subnet's zone does not offer.
async fn run_instances(
    state: &ProxyState,
    params: &BTreeMap<String, String>,
) -> Option<(Response, Option<String>)> {
    if let Some(token) = params.get("ClientToken") {
        let mut compared = params.clone();
        compared.remove("ClientToken");
        let seen = lock(&state.ec2).tokens.get(token).cloned();
        if let Some(rec) = seen {
            if rec.params != compared {
                return refuse(
                    400,
                    "IdempotentParameterMismatch",
                    "Arguments on this idempotent request are inconsistent with arguments \
                     used in previous request(s).",
                );
            }
            return Some((replay(state, &rec).await, None));
        }
    }
    let named = [
        ("IamInstanceProfile.Name", "name"),
        ("IamInstanceProfile.Arn", "arn"),
    ]
    .into_iter()
    .find_map(|(k, field)| params.get(k).map(|v| (v, field)));
    if let Some((profile, field)) = named {
        let refused = {
            let mut ec2 = lock(&state.ec2);
            match ec2.new_profile_refusal {
                // The first request naming a profile opens the window.
                Some(ProfileRefusal::For(d)) => {
                    ec2.new_profile_refusal = Some(ProfileRefusal::Until(Instant::now() + d));
                    true
                }
                Some(ProfileRefusal::Until(t)) => Instant::now() < t,
                None => false,
            }
        };
        if refused {
            return refuse(
                400,
                "InvalidParameterValue",
                &format!(
                    "Value ({profile}) for parameter iamInstanceProfile.{field} is invalid. \
                     Invalid IAM Instance Profile name"
                ),
            );
        }
    }
    if let (Some(t), Some(subnet)) = (params.get("InstanceType"), params.get("SubnetId")) {
        if let (Some(zones), Some(zone)) = (
            offered_zones(state, t).await,
            subnet_zone(state, subnet).await,
        ) {
            if !zones.contains(&zone) {
                return refuse(
                    400,
                    "Unsupported",
                    &format!(
                        "Your requested instance type ({t}) is not supported in your \
                         requested Availability Zone ({zone}). Please retry your request by \
                         not specifying an Availability Zone or choosing {}.",
                        zones.join(", ")
                    ),
                );
            }
        }
    }
    None
}

/// A repeated ClientToken's answer: the first answer's instances as they are now.
pub(super) async fn replay(state: &ProxyState, rec: &TokenRecord) -> Response {
    let mut q: Vec<(String, String)> = vec![
        ("Action".into(), "DescribeInstances".into()),
        ("Version".into(), "2016-11-15".into()),
    ];
    for (n, id) in rec.instances.iter().enumerate() {
        q.push((format!("InstanceId.{}", n + 1), id.clone()));
    }
    let q: Vec<(&str, &str)> = q.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let Some(body) = moto_call(state, &q).await else {
        return error_response(
            500,
            "InternalError",
            "the proxy could not read the instance",
        );
    };
    let body = as_ec2_writes_it(state, &body);
    let all = xml::elements(&body);
    let Some(res) = xml::find(
        &all,
        &["DescribeInstancesResponse", "reservationSet", "item"],
    ) else {
        return error_response(
            500,
            "InternalError",
            "the proxy could not read the reservation",
        );
    };
    xml_response(
        200,
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<RunInstancesResponse xmlns=\"{NS}\">\
             <requestId>replayed-by-client-token</requestId>{}</RunInstancesResponse>",
            xml::text(&body, &all, res)
        ),
    )
}
