//! The feasibility checks of HA rules, after pve-ha-manager PVE/HA/Rules.pm
//! (`check_feasibility` and its global checks), Rules/NodeAffinity.pm and
//! Rules/ResourceAffinity.pm (their `register_check`s): which rules the set makes infeasible,
//! with PVE's message per option. Pure: the API (`rules.rs`) refuses a write that makes its
//! own rule infeasible, and lists the others' errors.

use std::collections::{BTreeMap, BTreeSet};

use crate::ha::config::{Rule, RuleKind};

/// The errors of each infeasible rule: rule id → option → messages.
pub type RuleErrors = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn blame(errors: &mut RuleErrors, id: &str, message: &str) {
    errors
        .entry(id.to_string())
        .or_default()
        .entry("resources".into())
        .or_default()
        .push(message.to_string());
}

fn disjoint(a: &BTreeSet<String>, b: &BTreeSet<String>) -> bool {
    a.intersection(b).next().is_none()
}

/// Rules/Helpers.pm find_disjoint_rules_resource_sets: the positive rules merged where they
/// share a resource, each with the ids it came from.
fn disjoint_positive_sets<'a>(
    positive: &[(&'a str, &'a Rule)],
) -> Vec<(Vec<&'a str>, BTreeSet<String>)> {
    let mut sets: Vec<(Vec<&str>, BTreeSet<String>)> = Vec::new();
    for (id, rule) in positive {
        let mut merged = (vec![*id], rule.resources.clone());
        let mut kept = Vec::new();
        for set in sets {
            if disjoint(&set.1, &merged.1) {
                kept.push(set);
            } else {
                merged.0.extend(set.0);
                merged.1.extend(set.1);
            }
        }
        kept.push(merged);
        sets = kept;
    }
    sets
}

/// Rules.pm check_feasibility: every check, on the rules that are not disabled, against
/// the cluster's `nodes`.
pub fn check_feasibility(rules: &BTreeMap<String, Rule>, nodes: &[String]) -> RuleErrors {
    let mut errors = RuleErrors::new();
    let active: Vec<(&str, &Rule)> = rules
        .iter()
        .filter(|(_, r)| !r.disable)
        .map(|(id, r)| (id.as_str(), r))
        .collect();
    let node_affinity: Vec<(&str, &Rule, &BTreeMap<String, u64>)> = active
        .iter()
        .filter_map(|(id, r)| match &r.kind {
            RuleKind::NodeAffinity { nodes, .. } => Some((*id, *r, nodes)),
            _ => None,
        })
        .collect();
    let affinity = |want: bool| -> Vec<(&str, &Rule)> {
        active
            .iter()
            .filter(|(_, r)| matches!(r.kind, RuleKind::ResourceAffinity { positive } if positive == want))
            .copied()
            .collect()
    };
    let (positive, negative) = (affinity(true), affinity(false));

    // NodeAffinity.pm check_single_resource_reference.
    let mut users: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, rule, _) in &node_affinity {
        for sid in &rule.resources {
            users.entry(sid).or_default().push(id);
        }
    }
    for (sid, ids) in &users {
        if ids.len() > 1 {
            for id in ids {
                blame(
                    &mut errors,
                    id,
                    &format!("resource '{sid}' is already used in another node affinity rule"),
                );
            }
        }
    }
    // ResourceAffinity.pm check_resource_affinity_resources_count.
    for (id, rule) in positive.iter().chain(&negative) {
        if rule.resources.len() < 2 {
            blame(
                &mut errors,
                id,
                "rule is ineffective as there are less than two resources",
            );
        }
    }
    // check_negative_resource_affinity_resources_count.
    for (id, rule) in &negative {
        if rule.resources.len() > nodes.len() {
            blame(
                &mut errors,
                id,
                "rule defines more resources than available nodes",
            );
        }
    }
    let merged = disjoint_positive_sets(&positive);
    // check_inter_resource_affinity_rules_consistency.
    for (ids, resources) in &merged {
        for (negative_id, rule) in &negative {
            if resources.intersection(&rule.resources).count() < 2 {
                continue;
            }
            blame(
                &mut errors,
                negative_id,
                "rule shares two or more resources with a positive resource affinity rule",
            );
            for id in ids {
                blame(
                    &mut errors,
                    id,
                    "rule shares two or more resources with a negative resource affinity rule",
                );
            }
        }
    }
    // Rules.pm check_single_priority_node_affinity_in_resource_affinity_rules.
    for (id, rule) in positive.iter().chain(&negative) {
        let paired: Vec<_> = node_affinity
            .iter()
            .filter(|(_, na, _)| !disjoint(&rule.resources, &na.resources))
            .collect();
        let multiple = paired
            .iter()
            .any(|(_, _, nodes)| nodes.values().collect::<BTreeSet<_>>().len() > 1);
        if multiple {
            blame(
                &mut errors,
                id,
                "resources are in node affinity rules with multiple priorities",
            );
            for (na_id, _, _) in paired {
                blame(
                    &mut errors,
                    na_id,
                    "resources are in a resource affinity rule and cannot be in a node affinity \
                     rule with multiple priorities",
                );
            }
        }
    }
    // check_single_node_affinity_per_positive_resource_affinity_rule.
    for (ids, resources) in &merged {
        let paired: Vec<&str> = node_affinity
            .iter()
            .filter(|(_, na, _)| !disjoint(resources, &na.resources))
            .map(|(id, _, _)| *id)
            .collect();
        if paired.len() > 1 {
            for id in ids {
                blame(
                    &mut errors,
                    id,
                    "resources are in multiple node affinity rules",
                );
            }
            for id in paired {
                blame(
                    &mut errors,
                    id,
                    "at least one resource is in a positive resource affinity rule and there \
                     are other resources in at least one other node affinity rule already",
                );
            }
        }
    }
    // check_negative_resource_affinity_node_affinity_consistency.
    for (negative_id, rule) in &negative {
        let mut allowed: BTreeSet<&String> = BTreeSet::new();
        let mut located: BTreeSet<&String> = BTreeSet::new();
        let mut paired = Vec::new();
        for (id, na, nodes) in &node_affinity {
            let common: Vec<&String> = rule.resources.intersection(&na.resources).collect();
            if common.is_empty() {
                continue;
            }
            located.extend(common);
            allowed.extend(nodes.keys());
            paired.push(*id);
        }
        if allowed.len() < located.len() {
            blame(
                &mut errors,
                negative_id,
                "two or more resources are restricted to less nodes than available to the \
                 resources",
            );
            for id in paired {
                blame(
                    &mut errors,
                    id,
                    "at least one resource is in a negative resource affinity rule and this \
                     rule would restrict these to less nodes than available to the resources",
                );
            }
        }
    }
    for options in errors.values_mut() {
        for messages in options.values_mut() {
            messages.dedup();
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(kind: RuleKind, resources: &[&str]) -> Rule {
        Rule {
            kind,
            resources: resources.iter().map(|r| r.to_string()).collect(),
            disable: false,
            comment: None,
            order: 1,
        }
    }

    fn nodes(list: &[(&str, u64)]) -> RuleKind {
        RuleKind::NodeAffinity {
            nodes: list.iter().map(|(n, p)| (n.to_string(), *p)).collect(),
            strict: false,
        }
    }

    #[test]
    fn conflicts_are_blamed_on_every_rule_involved() {
        let three: Vec<String> = ["pve1", "pve2", "pve3"].map(String::from).to_vec();
        let mut rules = BTreeMap::from([
            ("a".to_string(), rule(nodes(&[("pve1", 0)]), &["vm:100"])),
            (
                "b".to_string(),
                rule(nodes(&[("pve2", 0)]), &["vm:100", "vm:101"]),
            ),
        ]);
        let errors = check_feasibility(&rules, &three);
        let text = "resource 'vm:100' is already used in another node affinity rule";
        assert_eq!(errors["a"]["resources"], [text]);
        assert_eq!(errors["b"]["resources"], [text]);
        rules.get_mut("a").unwrap().disable = true;
        assert!(check_feasibility(&rules, &three).is_empty());

        let apart = RuleKind::ResourceAffinity { positive: false };
        let together = RuleKind::ResourceAffinity { positive: true };
        let rules = BTreeMap::from([
            ("lonely".to_string(), rule(together.clone(), &["vm:100"])),
            (
                "spread".to_string(),
                rule(apart.clone(), &["vm:1", "vm:2", "vm:3", "vm:4"]),
            ),
            ("p".to_string(), rule(together, &["vm:1", "vm:2"])),
        ]);
        let errors = check_feasibility(&rules, &three);
        assert_eq!(
            errors["lonely"]["resources"],
            ["rule is ineffective as there are less than two resources"]
        );
        assert_eq!(
            errors["spread"]["resources"],
            [
                "rule defines more resources than available nodes",
                "rule shares two or more resources with a positive resource affinity rule"
            ]
        );
        assert!(errors.contains_key("p"));
    }
}
