//! HA rules (PVE 9), after pve-ha-manager PVE/API2/HA/Rules.pm: `/cluster/ha/rules` index
//! (with its `type` and `resource` filters), read_rule, create_rule, update_rule,
//! delete_rule, on `rules.cfg` as [`crate::ha::config::Rule`]s. The options are checked as
//! SectionConfig.pm `check_config` checks them for the rule's plugin (Rules/NodeAffinity.pm,
//! Rules/ResourceAffinity.pm), the resources and nodes as `$assert_valid_resources_param` and
//! `$assert_valid_nodes_param`, and the rule set as `$assert_feasibility`
//! ([`super::rule_checks`]). Errors inside `lock_ha_domain` carry its prefix
//! (`create ha rule failed: …`); a feasibility error there is PVE::Exception stringified into
//! that text (`400 Rule 'x' is invalid.`), so it reaches the client as a plain 500, as PVE's
//! does.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::ha::config::{HaState, Rule, RuleKind};
use crate::ha::rule_checks::{RuleErrors, check_feasibility};
use crate::http::handler::{ApiErr, ApiResult, Params};
use crate::state::Sim;

/// JSONSchema.pm pve_verify_configid: a letter, then letters, digits, `-` or `_`.
pub fn is_config_id(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Tools.pm parse_node_priority: `node[:priority]`, priority 0 when not given.
pub fn parse_node_priority(entry: &str) -> Option<(String, u64)> {
    let (node, priority) = match entry.split_once(':') {
        Some((node, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
            (node, p.parse().ok()?)
        }
        Some(_) => return None,
        None => (entry, 0),
    };
    let bytes = node.as_bytes();
    let valid = !bytes.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-');
    valid.then(|| (node.to_string(), priority))
}

/// Tools.pm pve_verify_ha_resource_id: `type:name`.
fn is_resource_id(sid: &str) -> bool {
    sid.split_once(':').is_some_and(|(kind, name)| {
        !kind.is_empty()
            && kind.bytes().all(|b| b.is_ascii_lowercase())
            && !name.is_empty()
            && !name.contains(char::is_whitespace)
    })
}

/// The formats of the rule endpoints' parameters (pve-configid, pve-ha-resource-id-list,
/// pve-ha-node-list), checked as JSONSchema.pm check_format does, before the handler.
pub fn check_formats(params: &Params) -> Result<(), ApiErr> {
    if let Some(id) = params.get("rule")
        && !is_config_id(id)
    {
        return Err(ApiErr::param(
            "rule",
            format!("invalid format - invalid configuration ID '{id}'"),
        ));
    }
    if let Some(list) = params.get("resources")
        && !crate::tools::split_list(list)
            .iter()
            .all(|s| is_resource_id(s))
    {
        return Err(ApiErr::param(
            "resources",
            "invalid format - value does not look like a valid ha resource id",
        ));
    }
    if let Some(list) = params.get("nodes")
        && !crate::tools::split_list(list)
            .iter()
            .all(|n| parse_node_priority(n).is_some())
    {
        return Err(ApiErr::param(
            "nodes",
            "invalid format - value does not look like a valid ha node",
        ));
    }
    Ok(())
}

/// The options each rule type takes (the plugins' `options`), required ones first.
fn options(kind: &str) -> (&'static [&'static str], &'static [&'static str]) {
    if kind == "node-affinity" {
        (&["resources", "nodes"], &["strict", "disable", "comment"])
    } else {
        (&["resources", "affinity"], &["disable", "comment"])
    }
}

fn boolean(value: &str) -> bool {
    matches!(value, "1" | "true" | "yes" | "on")
}

/// Rules.pm encode_value for `nodes` (NodeAffinity.pm encode_plugin_value): sorted, a
/// priority only where it is not 0.
fn encode_nodes(nodes: &BTreeMap<String, u64>) -> String {
    nodes
        .iter()
        .map(|(node, p)| match p {
            0 => node.clone(),
            p => format!("{node}:{p}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `rules.cfg` as write_rules_config writes it, for its digest.
fn digest(ha: &HaState) -> String {
    let mut ordered: Vec<(&String, &Rule)> = ha.rules.iter().collect();
    ordered.sort_by_key(|(id, r)| (r.order, id.to_string()));
    let text: String = ordered
        .iter()
        .map(|(id, r)| {
            let mut s = format!("{}: {id}\n", r.kind.type_name());
            let resources: Vec<&str> = r.resources.iter().map(String::as_str).collect();
            s.push_str(&format!("\tresources {}\n", resources.join(",")));
            match &r.kind {
                RuleKind::NodeAffinity { nodes, strict } => {
                    s.push_str(&format!("\tnodes {}\n", encode_nodes(nodes)));
                    if *strict {
                        s.push_str("\tstrict 1\n");
                    }
                }
                RuleKind::ResourceAffinity { positive } => {
                    let a = if *positive { "positive" } else { "negative" };
                    s.push_str(&format!("\taffinity {a}\n"));
                }
            }
            if r.disable {
                s.push_str("\tdisable 1\n");
            }
            if let Some(c) = &r.comment {
                s.push_str(&format!("\tcomment {c}\n"));
            }
            s + "\n"
        })
        .collect();
    crate::tools::sha1_hex(&text)
}

/// The nodes the CRM knows (`manager_status` → `node_status`): the cluster's.
fn cluster_nodes(sim: &Sim) -> Vec<String> {
    sim.opts.nodes.clone()
}

/// `$get_api_ha_rule`: a rule as the API answers it.
fn api_rule(ha: &HaState, id: &str, errors: &RuleErrors) -> Result<Value, ApiErr> {
    let r = ha
        .rules
        .get(id)
        .ok_or_else(|| ApiErr::die(format!("no such ha rule '{id}'")))?;
    let resources: Vec<&str> = r.resources.iter().map(String::as_str).collect();
    let mut v = json!({
        "rule": id, "type": r.kind.type_name(), "digest": digest(ha), "order": r.order,
        "resources": resources.join(","),
    });
    match &r.kind {
        RuleKind::NodeAffinity { nodes, strict } => {
            v["nodes"] = json!(encode_nodes(nodes));
            if *strict {
                v["strict"] = json!(1);
            }
        }
        RuleKind::ResourceAffinity { positive } => {
            v["affinity"] = json!(if *positive { "positive" } else { "negative" });
        }
    }
    if r.disable {
        v["disable"] = json!(1);
    }
    if let Some(c) = &r.comment {
        v["comment"] = json!(c);
    }
    if let Some(e) = errors.get(id) {
        let joined: BTreeMap<&String, String> =
            e.iter().map(|(opt, m)| (opt, m.join(", "))).collect();
        v["errors"] = json!(joined);
    }
    Ok(v)
}

/// `GET /cluster/ha/rules` (index): the rules in their order, of a `type` and naming a
/// `resource` when asked, each with its feasibility errors.
pub fn index(sim: &Sim, params: &Params) -> ApiResult {
    let st = sim.lock();
    let errors = check_feasibility(&st.ha.rules, &cluster_nodes(sim));
    let mut ids: Vec<(&String, &Rule)> = st.ha.rules.iter().collect();
    ids.sort_by_key(|(id, r)| (r.order, id.to_string()));
    let mut out = Vec::new();
    for (id, r) in ids {
        if params.get("type").is_some_and(|t| t != r.kind.type_name())
            || params
                .get("resource")
                .is_some_and(|sid| !r.resources.contains(sid))
        {
            continue;
        }
        out.push(api_rule(&st.ha, id, &errors)?);
    }
    Ok(json!(out))
}

/// `GET /cluster/ha/rules/{rule}` (read_rule).
pub fn read(sim: &Sim, id: &str) -> ApiResult {
    let st = sim.lock();
    let errors = check_feasibility(&st.ha.rules, &cluster_nodes(sim));
    api_rule(&st.ha, id, &errors)
}

/// SectionConfig.pm check_config for the rule's plugin: every option one the type takes
/// (`unexpected property`), the required ones present on create, then decode_value.
fn check_config(
    kind: &str,
    params: &BTreeMap<&str, &str>,
    create: bool,
) -> Result<BTreeMap<String, String>, String> {
    let (required, optional) = options(kind);
    let mut settings = BTreeMap::new();
    for (k, v) in params {
        if *k == "type" && *v == kind {
            continue;
        }
        if !required.contains(k) && !optional.contains(k) {
            return Err(format!("unexpected property '{k}'"));
        }
        settings.insert(k.to_string(), v.to_string());
    }
    if create && let Some(k) = required.iter().find(|k| !params.contains_key(*k)) {
        return Err(format!("missing value for required option '{k}'"));
    }
    Ok(settings)
}

fn decode_resources(list: &str) -> BTreeSet<String> {
    crate::tools::split_list(list)
        .into_iter()
        .filter(|s| is_resource_id(s))
        .collect()
}

fn decode_nodes(list: &str) -> BTreeMap<String, u64> {
    crate::tools::split_list(list)
        .iter()
        .filter_map(|n| parse_node_priority(n))
        .collect()
}

/// `$assert_valid_resources_param` and `$assert_valid_nodes_param`.
fn assert_valid(
    ha: &HaState,
    nodes: &[String],
    settings: &BTreeMap<String, String>,
) -> Result<(), String> {
    if let Some(list) = settings.get("resources") {
        let resources = decode_resources(list);
        if resources.is_empty() {
            return Err("no resources were specified".into());
        }
        let unmanaged: Vec<&str> = resources
            .iter()
            .filter(|sid| !ha.resources.contains_key(*sid))
            .map(String::as_str)
            .collect();
        if !unmanaged.is_empty() {
            return Err(format!(
                "cannot use unmanaged resource(s) {}.",
                unmanaged.join(", ")
            ));
        }
    }
    if let Some(list) = settings.get("nodes") {
        let given = decode_nodes(list);
        if given.is_empty() {
            return Err("no nodes were specified".into());
        }
        let missing: Vec<&str> = given
            .keys()
            .filter(|n| !nodes.contains(n))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "cannot use non-existent node(s) {}.",
                missing.join(", ")
            ));
        }
    }
    Ok(())
}

/// The settings applied to a rule (new: from defaults).
fn apply(rule: &mut Rule, settings: &BTreeMap<String, String>) {
    for (k, v) in settings {
        match (k.as_str(), &mut rule.kind) {
            ("resources", _) => rule.resources = decode_resources(v),
            ("disable", _) => rule.disable = boolean(v),
            ("comment", _) => rule.comment = Some(v.clone()),
            ("nodes", RuleKind::NodeAffinity { nodes, .. }) => *nodes = decode_nodes(v),
            ("strict", RuleKind::NodeAffinity { strict, .. }) => *strict = boolean(v),
            ("affinity", RuleKind::ResourceAffinity { positive }) => *positive = v == "positive",
            _ => {}
        }
    }
}

/// `$assert_feasibility`: the rule set with this rule, refused when it makes the rule
/// infeasible (the exception, stringified by lock_ha_domain).
fn assert_feasibility(
    rules: &BTreeMap<String, Rule>,
    nodes: &[String],
    id: &str,
) -> Result<(), String> {
    if check_feasibility(rules, nodes).contains_key(id) {
        return Err(format!("400 Rule '{id}' is invalid."));
    }
    Ok(())
}

/// The parameters a handler's code sees: the `disable` of a falsy value dropped ("ignore
/// disable parameter if it is set to a falsy value"), the extracted ones left out.
fn given<'a>(params: &'a Params, extracted: &[&str]) -> BTreeMap<&'a str, &'a str> {
    params
        .iter()
        .filter(|(k, v)| !extracted.contains(&k.as_str()) && (*k != "disable" || boolean(v)))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// `POST /cluster/ha/rules` (create_rule).
pub fn create(sim: &Sim, params: &Params) -> ApiResult {
    let kind = params.get("type").cloned().unwrap_or_default();
    let id = params.get("rule").cloned().unwrap_or_default();
    let settings =
        check_config(&kind, &given(params, &["type", "rule"]), true).map_err(ApiErr::die)?;
    let nodes = cluster_nodes(sim);
    let mut st = sim.lock();
    let ha = &mut st.ha;
    let outcome = (|| {
        if ha.rules.contains_key(&id) {
            return Err(format!("HA rule '{id}' already defined"));
        }
        assert_valid(ha, &nodes, &settings)?;
        let order = ha.rules.values().map(|r| r.order).min().unwrap_or(0) + 1;
        let mut rule = Rule {
            kind: if kind == "node-affinity" {
                RuleKind::NodeAffinity {
                    nodes: BTreeMap::new(),
                    strict: false,
                }
            } else {
                RuleKind::ResourceAffinity { positive: false }
            },
            resources: BTreeSet::new(),
            disable: false,
            comment: None,
            order,
        };
        apply(&mut rule, &settings);
        let mut rules = ha.rules.clone();
        rules.insert(id.clone(), rule);
        assert_feasibility(&rules, &nodes, &id)?;
        ha.rules = rules;
        Ok(())
    })();
    outcome.map_err(|e| ApiErr::die(format!("create ha rule failed: {e}")))?;
    Ok(Value::Null)
}

/// `PUT /cluster/ha/rules/{rule}` (update_rule): the digest asserted, the options checked
/// for the rule's own type, `delete` as SectionConfig.pm delete_from_config.
pub fn update(sim: &Sim, id: &str, params: &Params) -> ApiResult {
    let wanted = given(params, &["rule", "digest", "delete"]);
    let deletes: Vec<String> = params
        .get("delete")
        .map(|d| crate::tools::split_list(d))
        .unwrap_or_default();
    let nodes = cluster_nodes(sim);
    let mut st = sim.lock();
    let current = digest(&st.ha);
    let ha = &mut st.ha;
    let outcome = (|| {
        if params.get("digest").is_some_and(|d| *d != current) {
            return Err(
                "detected modified configuration - file changed by other user? Try again."
                    .to_string(),
            );
        }
        let rule = ha
            .rules
            .get(id)
            .ok_or_else(|| format!("HA rule '{id}' does not exist"))?;
        let kind = rule.kind.type_name();
        let settings = check_config(kind, &wanted, false)?;
        assert_valid(ha, &nodes, &settings)?;
        let (required, optional) = options(kind);
        let mut rule = rule.clone();
        for k in &deletes {
            if required.contains(&k.as_str()) {
                return Err(format!("unable to delete required option '{k}'"));
            }
            if !optional.contains(&k.as_str()) {
                return Err(format!("no such option '{k}'"));
            }
            if settings.contains_key(k) {
                return Err(format!(
                    "cannot set and delete property '{k}' at the same time!"
                ));
            }
            match (k.as_str(), &mut rule.kind) {
                ("disable", _) => rule.disable = false,
                ("comment", _) => rule.comment = None,
                ("strict", RuleKind::NodeAffinity { strict, .. }) => *strict = false,
                _ => {}
            }
        }
        apply(&mut rule, &settings);
        let mut rules = ha.rules.clone();
        rules.insert(id.to_string(), rule);
        assert_feasibility(&rules, &nodes, id)?;
        ha.rules = rules;
        Ok(())
    })();
    outcome.map_err(|e| ApiErr::die(format!("update HA rules failed: {e}")))?;
    Ok(Value::Null)
}

/// `DELETE /cluster/ha/rules/{rule}` (delete_rule): removed if there, no error if not.
pub fn delete(sim: &Sim, id: &str) -> ApiResult {
    sim.lock().ha.rules.remove(id);
    Ok(Value::Null)
}

/// Config.pm delete_service_from_config with `purge`: the resource leaves every rule, and a
/// rule left without resources is removed.
pub fn forget_resource(ha: &mut HaState, sid: &str) {
    for rule in ha.rules.values_mut() {
        rule.resources.remove(sid);
    }
    ha.rules.retain(|_, r| !r.resources.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_entries_and_their_priorities() {
        assert_eq!(parse_node_priority("pve1:2"), Some(("pve1".into(), 2)));
        assert_eq!(parse_node_priority("pve-2"), Some(("pve-2".into(), 0)));
        assert_eq!(parse_node_priority("pve1:"), None);
        assert_eq!(parse_node_priority("-pve"), None);
        let nodes = BTreeMap::from([("pve2".to_string(), 0), ("pve1".to_string(), 2)]);
        assert_eq!(encode_nodes(&nodes), "pve1:2,pve2");
    }

    #[test]
    fn options_of_the_rule_type() {
        let p = BTreeMap::from([("resources", "vm:1"), ("affinity", "positive")]);
        assert_eq!(
            check_config("node-affinity", &p, true),
            Err("unexpected property 'affinity'".into())
        );
        let p = BTreeMap::from([("resources", "vm:1")]);
        assert_eq!(
            check_config("node-affinity", &p, true),
            Err("missing value for required option 'nodes'".into())
        );
        assert!(check_config("node-affinity", &p, false).is_ok());
    }
}
