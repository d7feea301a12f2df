//! Where the CRM wants a started service, after pve-ha-manager Manager.pm
//! `select_service_node` (with `node_preference` `none`, as `next_state_started` asks each
//! round), Rules/NodeAffinity.pm `get_node_affinity` and `plugin_compile`,
//! Rules/ResourceAffinity.pm `get_resource_affinity` and `apply_*_resource_affinity`, and
//! Usage/Basic.pm (a node's score is the number of services on it). On PVE 8 the groups are
//! compiled as PVE 9 migrates them (Groups.pm `migrate_groups_to_rules`: a group's nodes and
//! priorities, `restricted` as `strict`; `migrate_groups_to_resources`: `failback` is
//! `!nofailback`). Pure: the rounds (`rounds.rs`) ask it and queue the migration.

use std::collections::{BTreeMap, BTreeSet};

use crate::ha::config::{HaState, RuleKind};
use crate::ha::rules::parse_node_priority;

/// The rules as the CRM applies them (Rules.pm `compile`), disabled ones left out.
#[derive(Default, Debug)]
pub struct Compiled {
    /// sid → the nodes it may run on, with their priorities; a non-strict rule adds every
    /// other node at priority -1.
    node_affinity: BTreeMap<String, BTreeMap<String, i64>>,
    /// sid → the services it must run with.
    together: BTreeMap<String, BTreeSet<String>>,
    /// sid → the services it must run apart from.
    apart: BTreeMap<String, BTreeSet<String>>,
    /// sid → `failback` (the resource's, or on PVE 8 its group's `!nofailback`).
    failback: BTreeMap<String, bool>,
}

fn node_affinity(
    nodes: &BTreeMap<String, u64>,
    strict: bool,
    all: &[String],
) -> BTreeMap<String, i64> {
    let mut effective: BTreeMap<String, i64> =
        nodes.iter().map(|(n, p)| (n.clone(), *p as i64)).collect();
    if !strict {
        for n in all {
            effective.entry(n.clone()).or_insert(-1);
        }
    }
    effective
}

/// The compiled rules of PVE 9's `rules.cfg`, or of PVE 8's groups.
pub fn compile(ha: &HaState, has_rules: bool, all: &[String]) -> Compiled {
    let mut compiled = Compiled::default();
    for (sid, r) in &ha.resources {
        let failback = match r.opts.get("group").and_then(|g| ha.groups.get(g)) {
            Some(group) if !has_rules => !group.nofailback,
            _ => r.opts.get("failback").is_none_or(|f| f != "0"),
        };
        compiled.failback.insert(sid.clone(), failback);
        if has_rules {
            continue;
        }
        if let Some(group) = r.opts.get("group").and_then(|g| ha.groups.get(g)) {
            let nodes = group
                .nodes
                .iter()
                .filter_map(|n| parse_node_priority(n))
                .collect();
            compiled
                .node_affinity
                .insert(sid.clone(), node_affinity(&nodes, group.restricted, all));
        }
    }
    if !has_rules {
        return compiled;
    }
    for rule in ha.rules.values().filter(|r| !r.disable) {
        match &rule.kind {
            RuleKind::NodeAffinity { nodes, strict } => {
                for sid in &rule.resources {
                    compiled
                        .node_affinity
                        .insert(sid.clone(), node_affinity(nodes, *strict, all));
                }
            }
            RuleKind::ResourceAffinity { positive } => {
                let set = if *positive {
                    &mut compiled.together
                } else {
                    &mut compiled.apart
                };
                for sid in &rule.resources {
                    let others = rule.resources.iter().filter(|c| *c != sid).cloned();
                    set.entry(sid.clone()).or_default().extend(others);
                }
            }
        }
    }
    compiled
}

/// `select_service_node($compiled, $usage, $sid, $cd, $ss, 'none')`: the node `sid` should
/// run on, given where each service is (`placed`, sid → node) and the nodes online; `None`
/// when node affinity allows no online node.
pub fn select_node(
    compiled: &Compiled,
    sid: &str,
    online: &[String],
    placed: &BTreeMap<String, String>,
) -> Option<String> {
    let current = placed.get(sid)?;
    // get_node_affinity: the allowed nodes, and those of the highest priority.
    let (allowed, mut preferred): (BTreeSet<String>, BTreeSet<String>) =
        match compiled.node_affinity.get(sid) {
            None => (
                online.iter().cloned().collect(),
                online.iter().cloned().collect(),
            ),
            Some(nodes) => {
                let up: Vec<(&String, i64)> = nodes
                    .iter()
                    .filter(|(n, _)| online.contains(n))
                    .map(|(n, p)| (n, *p))
                    .collect();
                let top = up.iter().map(|(_, p)| *p).max();
                (
                    up.iter().map(|(n, _)| (*n).clone()).collect(),
                    up.iter()
                        .filter(|(_, p)| Some(*p) == top)
                        .map(|(n, _)| (*n).clone())
                        .collect(),
                )
            }
        };
    if preferred.is_empty() {
        return None;
    }
    // get_resource_affinity: the nodes of the services to be with (and how many), and apart.
    let mut together: BTreeMap<&String, usize> = BTreeMap::new();
    for other in compiled.together.get(sid).into_iter().flatten() {
        if let Some(n) = placed.get(other).filter(|n| online.contains(n)) {
            *together.entry(n).or_default() += 1;
        }
    }
    let apart: BTreeSet<&String> = compiled
        .apart
        .get(sid)
        .into_iter()
        .flatten()
        .filter_map(|other| placed.get(other))
        .collect();
    let allowed_here = |node: &String| {
        !apart.contains(node) && (together.is_empty() || together.contains_key(node))
    };
    let failback = compiled.failback.get(sid).copied().unwrap_or(true);
    if !failback && allowed.contains(current) && allowed_here(current) {
        return Some(current.clone());
    }
    // apply_negative_resource_affinity, then apply_positive_resource_affinity (the node with
    // most of the services to be with).
    preferred.retain(|n| !apart.contains(n));
    if let Some(majority) = together
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(n, _)| (*n).clone())
    {
        preferred.retain(|n| *n == majority);
    }
    if preferred.contains(current) {
        return Some(current.clone());
    }
    // Usage/Basic.pm: the node with the fewest services, by name on a tie.
    let load = |node: &String| {
        placed
            .iter()
            .filter(|(s, n)| *n == node && *s != sid)
            .count()
    };
    preferred
        .into_iter()
        .min_by(|a, b| load(a).cmp(&load(b)).then(a.cmp(b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ha::config::{Resource, Rule};

    fn three() -> Vec<String> {
        ["pve1", "pve2", "pve3"].map(String::from).to_vec()
    }

    fn ha_with(rules: Vec<(&str, RuleKind, &[&str])>, failback: Option<&str>) -> HaState {
        let mut ha = HaState::default();
        for sid in ["vm:100", "vm:101"] {
            let mut opts = BTreeMap::new();
            if let Some(f) = failback {
                opts.insert("failback".to_string(), f.to_string());
            }
            ha.resources.insert(sid.into(), Resource { opts });
        }
        for (i, (id, kind, resources)) in rules.into_iter().enumerate() {
            ha.rules.insert(
                id.into(),
                Rule {
                    kind,
                    resources: resources.iter().map(|s| s.to_string()).collect(),
                    disable: false,
                    comment: None,
                    order: i as u64 + 1,
                },
            );
        }
        ha
    }

    fn on(list: &[(&str, &str)]) -> BTreeMap<String, String> {
        list.iter()
            .map(|(s, n)| (s.to_string(), n.to_string()))
            .collect()
    }

    #[test]
    fn node_affinity_picks_the_highest_priority_online_node() {
        let nodes = BTreeMap::from([("pve2".to_string(), 2), ("pve3".to_string(), 1)]);
        let kind = RuleKind::NodeAffinity {
            nodes,
            strict: true,
        };
        let ha = ha_with(vec![("r", kind, &["vm:100"])], None);
        let compiled = compile(&ha, true, &three());
        let placed = on(&[("vm:100", "pve1")]);
        assert_eq!(
            select_node(&compiled, "vm:100", &three(), &placed).as_deref(),
            Some("pve2")
        );
        // pve2 offline: the next priority; none of them online: nowhere (strict).
        let up = ["pve1".to_string(), "pve3".to_string()];
        assert_eq!(
            select_node(&compiled, "vm:100", &up, &placed).as_deref(),
            Some("pve3")
        );
        assert_eq!(
            select_node(&compiled, "vm:100", &["pve1".to_string()], &placed),
            None
        );
        // A service without rules stays.
        let placed = on(&[("vm:100", "pve2"), ("vm:101", "pve1")]);
        assert_eq!(
            select_node(&compiled, "vm:101", &three(), &placed).as_deref(),
            Some("pve1")
        );
    }

    #[test]
    fn failback_off_stays_on_an_allowed_node_and_negative_affinity_separates() {
        let nodes = BTreeMap::from([("pve2".to_string(), 2)]);
        let kind = RuleKind::NodeAffinity {
            nodes,
            strict: false,
        };
        let ha = ha_with(vec![("r", kind, &["vm:100"])], Some("0"));
        let compiled = compile(&ha, true, &three());
        let placed = on(&[("vm:100", "pve1")]);
        assert_eq!(
            select_node(&compiled, "vm:100", &three(), &placed).as_deref(),
            Some("pve1")
        );
        let apart = RuleKind::ResourceAffinity { positive: false };
        let ha = ha_with(vec![("apart", apart, &["vm:100", "vm:101"])], None);
        let compiled = compile(&ha, true, &three());
        let placed = on(&[("vm:100", "pve1"), ("vm:101", "pve1")]);
        assert_eq!(
            select_node(&compiled, "vm:101", &three(), &placed).as_deref(),
            Some("pve2")
        );
    }
}
