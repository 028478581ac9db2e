//! The part of keeper's scenario validation that `core.cloud` needs, and nothing more: a scenario is a
//! list of steps (`name`, `on`, `when`, `module`, `params`); a `core.cloud.*` step must say
//! `on: keeper` (it runs inside keeper: its side effects are at the provider and in keeper's
//! registries, never on a host), its module must be one of the three actions, and its literal
//! parameters must pass the step's own checks. Expressions (`${ ... }`) are not evaluated here: a
//! parameter holding one is checked for its shape only (a parameter the step takes), and the
//! literal parameters beside it are checked as ever. keeper's scenario engine (running
//! scenarios, guards, other modules) is not part of this example.

use serde_json::{json, Value};

use crate::cloud::params::{CreateParams, DestroyParams, ResizeParams};
use crate::cloud::Action;
use crate::error::{Error, Result};

/// The dispatcher `core.cloud` steps must name.
pub const ON_KEEPER: &str = "keeper";

fn has_expression(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains("${"),
        Value::Array(a) => a.iter().any(has_expression),
        Value::Object(m) => m.values().any(has_expression),
        _ => false,
    }
}

/// A value the checks of `action` take for its parameter `key`, standing in for an expression
/// (which is not evaluated here), so that the literal parameters beside it are still checked;
/// `None` for a key the action does not take (it stays, and the step refuses it by name).
fn stand_in(action: Action, key: &str) -> Option<Value> {
    let takes: &[&str] = match action {
        Action::Created => &[
            "provider",
            "profile",
            "count",
            "userdata",
            "generate_userdata",
            "name",
            "self_onboard",
        ],
        Action::Destroyed => &["provider", "vm_ids", "sids"],
        Action::Resized => &["provider", "vm_ids", "machine_type"],
    };
    if !takes.contains(&key) {
        return None;
    }
    Some(match key {
        "provider" | "profile" | "name" | "machine_type" => json!("x"),
        "count" => json!(1),
        "userdata" => json!("#cloud-config"),
        "generate_userdata" | "self_onboard" => json!(false),
        "vm_ids" => json!(["x"]),
        "sids" => json!([]),
        _ => return None,
    })
}

/// `params` with each parameter holding an expression replaced by its stand-in, and the keys
/// replaced.
fn with_stand_ins(action: Action, mut params: Value) -> (Value, Vec<String>) {
    let mut unjudged = Vec::new();
    if let Value::Object(m) = &mut params {
        for (k, v) in m.iter_mut() {
            if let Some(s) = stand_in(action, k).filter(|_| has_expression(v)) {
                *v = s;
                unjudged.push(k.clone());
            }
        }
    }
    (params, unjudged)
}

/// The parameter an error's field names (`vm_ids` of `vm_ids[2]`, `profile` of `profile.disk_gb`).
fn top_key(field: &str) -> &str {
    field.split(['.', '[']).next().unwrap_or(field)
}

/// Parses a scenario from YAML (or JSON): a list of steps, or an object with `steps`.
pub fn parse(text: &str) -> Result<Value> {
    serde_yaml_ng::from_str::<Value>(text).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!(" at line {}, column {}", l.line(), l.column()))
            .unwrap_or_default();
        Error::invalid("scenario", format!("not YAML{at}"))
    })
}

/// Checks every `core.cloud` step of `scenario`; answers how many it checked. The first problem is
/// the error, naming the step (`steps[2].on`).
pub fn validate(scenario: &Value) -> Result<usize> {
    let steps = match scenario {
        Value::Array(s) => s,
        Value::Object(m) => match m.get("steps") {
            Some(Value::Array(s)) => s,
            _ => return Err(Error::invalid("steps", "a list of steps")),
        },
        _ => {
            return Err(Error::invalid(
                "scenario",
                "a list of steps, or an object with steps",
            ))
        }
    };
    let mut checked = 0;
    for (i, step) in steps.iter().enumerate() {
        let at = |f: &str| format!("steps[{i}].{f}");
        let m = step.as_object().ok_or_else(|| {
            Error::invalid(format!("steps[{i}]"), "a step: an object with module")
        })?;
        let module = m
            .get("module")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::invalid(at("module"), "required: the module the step runs"))?;
        if !module.starts_with("core.cloud.") && module != "core.cloud" {
            continue;
        }
        let action =
            Action::from_step(module).map_err(|e| Error::invalid(at("module"), e.message))?;
        let on = m.get("on").and_then(Value::as_str);
        if on != Some(ON_KEEPER) {
            let got = on.map(|o| format!(", got {o:?}")).unwrap_or_default();
            return Err(Error::invalid(
                at("on"),
                format!("{module} runs inside keeper: `on: keeper` is required{got}"),
            ));
        }
        let params = m.get("params").cloned().unwrap_or_else(|| json!({}));
        if !params.is_object() {
            return Err(Error::invalid(at("params"), "a map of parameters"));
        }
        let (params, unjudged) = with_stand_ins(action, params);
        let checked_params = match action {
            Action::Created => CreateParams::parse(&params).map(|_| ()),
            Action::Destroyed => DestroyParams::parse(&params).map(|_| ()),
            Action::Resized => ResizeParams::parse(&params).map(|_| ()),
        };
        if let Err(e) = checked_params {
            let field = e.field.clone().unwrap_or_default();
            // A refusal of an expression's stand-in says nothing of the scenario.
            if !unjudged.iter().any(|k| top_key(&field) == k) {
                return Err(Error::invalid(at(&format!("params.{field}")), e.message));
            }
        }
        checked += 1;
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROVISIONING_SCENARIO: &str = r#"
- name: provision
  on: keeper
  when: has(input.spawn)
  module: core.cloud.created
  params:
    provider: "${ input.spawn.provider }"
    profile:  "${ input.spawn.profile }"
    count:    "${ input.spawn.count }"
"#;

    #[test]
    fn a_provisioning_scenario_on_keeper_is_valid() {
        assert_eq!(validate(&parse(PROVISIONING_SCENARIO).unwrap()).unwrap(), 1);
    }

    #[test]
    fn on_keeper_is_required() {
        for text in [
            "- {name: x, on: web-1, module: core.cloud.destroyed, params: {provider: lab, vm_ids: [m-1]}}",
            "- {name: x, module: core.cloud.destroyed, params: {provider: lab, vm_ids: [m-1]}}",
        ] {
            let e = validate(&parse(text).unwrap()).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("steps[0].on"), "{text}\n{e}");
        }
        let ok = "- {name: x, on: keeper, module: core.cloud.destroyed, params: {provider: lab, vm_ids: [m-1]}}";
        assert_eq!(validate(&parse(ok).unwrap()).unwrap(), 1);
    }

    #[test]
    fn literal_parameters_beside_an_expression_are_still_checked() {
        let text = "- {module: core.cloud.created, on: keeper, params: {provider: \"${ input.p }\", count: 0}}";
        let e = validate(&parse(text).unwrap()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("steps[0].params.count"), "{e}");
        let text = "- {module: core.cloud.destroyed, on: keeper, params: {provider: lab, vm_ids: \"${ input.vms }\", sids: [\"Not A Sid\"]}}";
        let e = validate(&parse(text).unwrap()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("steps[0].params.sids[0]"), "{e}");
        let text = "- {module: core.cloud.resized, on: keeper, params: {provider: lab, vm_ids: \"${ input.vms }\", machine_type: \"${ input.t }\", colour: red}}";
        let e = validate(&parse(text).unwrap()).unwrap_err();
        assert!(
            e.field.as_deref().unwrap().starts_with("steps[0].params"),
            "{e}"
        );
        assert!(e.message.contains("colour"), "{e}");
        // A parameter the action does not take is refused, expression or not.
        let text = "- {module: core.cloud.created, on: keeper, params: {provider: lab, sids: \"${ input.s }\"}}";
        let e = validate(&parse(text).unwrap()).unwrap_err();
        assert!(e.to_string().contains("sids"), "{e}");
        // Expressions alone, of every parameter, stay unjudged.
        let text = "- {module: core.cloud.created, on: keeper, params: {provider: \"${ a }\", profile: \"${ b }\", count: \"${ c }\", name: \"${ d }\", self_onboard: \"${ e }\"}}\n- {module: core.cloud.resized, on: keeper, params: {provider: \"${ a }\", vm_ids: [\"${ b }\"], machine_type: \"${ c }\"}}";
        assert_eq!(validate(&parse(text).unwrap()).unwrap(), 2);
    }

    #[test]
    fn literal_parameters_are_checked_and_other_modules_skipped() {
        let text = "- {module: core.file.present, on: web-1}\n- {module: core.cloud.created, on: keeper, params: {provider: lab, count: 0}}\n";
        let e = validate(&parse(text).unwrap()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("steps[1].params.count"));
        let e =
            validate(&parse("- {module: core.cloud.exploded, on: keeper}").unwrap()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("steps[0].module"));
    }
}
