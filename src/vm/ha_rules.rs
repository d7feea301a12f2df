//! The HA rules of the `ha` option (PVE 9, pve-ha-manager API2/HA/Rules.pm): which rules a
//! VM's `node_affinity` and `resource_affinity` ask for, what to create, update or delete to
//! get there from the rules PVE lists for the VM, and where the CRM will then want the VM.
//! Pure, beside [`super::ha`]; the shell is `ha_converge`.
//!
//! Names: the node-affinity rule is `ha.rule`, else `sankofa-vm-<vmid>`; the resource-affinity
//! rules are that name with `-positive` or `-negative`. Only rules under the module's own
//! default names (`sankofa-vm-<vmid>`, `…-positive`, `…-negative`) are deleted when the option
//! that made them is dropped: a rule `ha.rule` names may be an admin's.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::ha::HaWanted;
use crate::pve::api::ha_rules::{HaRule, RuleKind, RuleSpec};

/// A write to the VM's HA rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleChange {
    /// `POST /cluster/ha/rules`.
    Create(RuleSpec),
    /// `PUT /cluster/ha/rules/{rule}`, at the listed digest.
    Update(RuleSpec, Option<String>),
    /// `DELETE /cluster/ha/rules/{rule}`.
    Delete(String),
}

impl RuleChange {
    /// What the change does, for the message (`created HA rule sankofa-vm-100`).
    pub fn told(&self) -> String {
        match self {
            RuleChange::Create(spec) => {
                format!("created {} rule {}", spec.kind.type_name(), spec.rule)
            }
            RuleChange::Update(spec, _) => {
                format!("updated {} rule {}", spec.kind.type_name(), spec.rule)
            }
            RuleChange::Delete(rule) => format!("deleted HA rule {rule}"),
        }
    }

    /// What the change was doing, for an error (`creating node-affinity rule …`).
    pub fn doing(&self) -> String {
        match self {
            RuleChange::Create(spec) => {
                format!("creating the {} rule {}", spec.kind.type_name(), spec.rule)
            }
            RuleChange::Update(spec, _) => {
                format!("updating the {} rule {}", spec.kind.type_name(), spec.rule)
            }
            RuleChange::Delete(rule) => format!("deleting the HA rule {rule}"),
        }
    }
}

/// The module's own name of the VM's node-affinity rule.
pub fn default_rule(vmid: u32) -> String {
    format!("sankofa-vm-{vmid}")
}

fn sid(vmid: u32) -> String {
    format!("vm:{vmid}")
}

/// The rules the option asks for.
pub fn wanted_rules(vmid: u32, wanted: &HaWanted) -> Vec<RuleSpec> {
    let base = wanted.rule.clone().unwrap_or_else(|| default_rule(vmid));
    let mut out = Vec::new();
    if let Some(na) = &wanted.node_affinity {
        out.push(RuleSpec {
            rule: base.clone(),
            kind: RuleKind::NodeAffinity {
                nodes: na.nodes.clone(),
                strict: na.strict,
            },
            resources: vec![sid(vmid)],
        });
    }
    for ra in &wanted.resource_affinity {
        let mut resources: BTreeSet<String> = ra.vms.iter().map(|v| sid(*v)).collect();
        resources.insert(sid(vmid));
        let kind = if ra.positive { "positive" } else { "negative" };
        out.push(RuleSpec {
            rule: format!("{base}-{kind}"),
            kind: RuleKind::ResourceAffinity {
                positive: ra.positive,
            },
            resources: resources.into_iter().collect(),
        });
    }
    out
}

/// The writes that bring `current` (the rules that name the VM) to what `wanted` asks for;
/// refused, before any write, where PVE would refuse: the VM in another node-affinity rule
/// (NodeAffinity.pm check_single_resource_reference), or a rule of that name of another type.
pub fn rule_changes(
    vmid: u32,
    wanted: &HaWanted,
    current: &[HaRule],
) -> Result<Vec<RuleChange>, String> {
    let specs = wanted_rules(vmid, wanted);
    let mut changes = Vec::new();
    for spec in &specs {
        if let RuleKind::NodeAffinity { .. } = spec.kind
            && let Some(other) = current
                .iter()
                .find(|r| r.kind == "node-affinity" && r.rule != spec.rule && r.disable != Some(1))
        {
            return Err(format!(
                "VM {vmid} is already in the node-affinity rule '{}' (PVE allows one per \
                 resource): name it with ha.rule, or remove the VM from it",
                other.rule
            ));
        }
        match current.iter().find(|r| r.rule == spec.rule) {
            None => changes.push(RuleChange::Create(spec.clone())),
            Some(existing) if existing.kind != spec.kind.type_name() => {
                return Err(format!(
                    "the HA rule '{}' is a {} rule, not {}: give ha.rule another name",
                    spec.rule,
                    existing.kind,
                    spec.kind.type_name()
                ));
            }
            Some(existing) => {
                // A named rule keeps the other resources an admin gave it.
                let mut merged = spec.clone();
                if wanted.rule.is_some() {
                    let mut all: BTreeSet<String> = existing.resource_ids().into_iter().collect();
                    all.extend(spec.resources.iter().cloned());
                    merged.resources = all.into_iter().collect();
                }
                if !merged.matches(existing) {
                    changes.push(RuleChange::Update(merged, existing.digest.clone()));
                }
            }
        }
    }
    let ours = default_rule(vmid);
    for own in [
        ours.clone(),
        format!("{ours}-positive"),
        format!("{ours}-negative"),
    ] {
        if current.iter().any(|r| r.rule == own) && !specs.iter().any(|s| s.rule == own) {
            changes.push(RuleChange::Delete(own));
        }
    }
    Ok(changes)
}

/// The rules as the result reports them (`ha.rules`): one entry per rule, by id.
pub fn shown_rules(specs: &[RuleSpec]) -> Value {
    Value::Array(
        specs
            .iter()
            .map(|s| {
                let mut v =
                    json!({"rule": s.rule, "type": s.kind.type_name(), "resources": s.resources});
                match &s.kind {
                    RuleKind::NodeAffinity { nodes, strict } => {
                        v["nodes"] = json!(nodes);
                        v["strict"] = json!(strict);
                    }
                    RuleKind::ResourceAffinity { positive } => {
                        v["affinity"] = json!(if *positive { "positive" } else { "negative" });
                    }
                }
                v
            })
            .collect(),
    )
}

/// The rules PVE lists, as [`shown_rules`] shows them, of those `wanted` or the module named.
pub fn shown_current(vmid: u32, wanted: &HaWanted, current: &[HaRule]) -> Value {
    let names: BTreeSet<String> = wanted_rules(vmid, wanted)
        .into_iter()
        .map(|s| s.rule)
        .chain([
            default_rule(vmid),
            format!("{}-positive", default_rule(vmid)),
            format!("{}-negative", default_rule(vmid)),
        ])
        .collect();
    let specs: Vec<RuleSpec> = current
        .iter()
        .filter(|r| names.contains(&r.rule))
        .map(|r| RuleSpec {
            rule: r.rule.clone(),
            kind: if r.kind == "node-affinity" {
                RuleKind::NodeAffinity {
                    nodes: r.node_priorities(),
                    strict: r.strict == Some(1),
                }
            } else {
                RuleKind::ResourceAffinity {
                    positive: r.affinity.as_deref() == Some("positive"),
                }
            },
            resources: {
                let mut ids = r.resource_ids();
                ids.sort();
                ids
            },
        })
        .collect();
    shown_rules(&specs)
}

/// The nodes the CRM will want the VM on once its node-affinity rule is written, with every
/// node online (Manager.pm select_service_node): the highest priority nodes; with `failback`
/// off, its current node too where the rule allows it. `None`: anywhere.
pub fn destinations(wanted: &HaWanted, current_node: &str) -> Option<BTreeSet<String>> {
    let na = wanted.node_affinity.as_ref()?;
    let allowed = !na.strict || na.nodes.contains_key(current_node);
    if wanted.failback == Some(false) && allowed {
        return None;
    }
    let top = na.nodes.values().max().copied()?;
    Some(
        na.nodes
            .iter()
            .filter(|(_, p)| **p == top)
            .map(|(n, _)| n.clone())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::ha::{NodeAffinity, ResourceAffinity};
    use std::collections::BTreeMap;

    fn wanted(na: Option<(&[(&str, u64)], bool)>, ra: Vec<(bool, Vec<u32>)>) -> HaWanted {
        HaWanted {
            state: None,
            group: None,
            failback: None,
            max_restart: None,
            max_relocate: None,
            rule: None,
            node_affinity: na.map(|(nodes, strict)| NodeAffinity {
                nodes: nodes.iter().map(|(n, p)| (n.to_string(), *p)).collect(),
                strict,
            }),
            resource_affinity: ra
                .into_iter()
                .map(|(positive, vms)| ResourceAffinity { positive, vms })
                .collect(),
        }
    }

    fn listed(rule: &str, kind: &str, resources: &str, nodes: Option<&str>) -> HaRule {
        HaRule {
            rule: rule.into(),
            kind: kind.into(),
            resources: resources.into(),
            nodes: nodes.map(str::to_string),
            affinity: (kind == "resource-affinity").then(|| "negative".to_string()),
            digest: Some("d".into()),
            ..Default::default()
        }
    }

    #[test]
    fn rules_created_updated_and_removed_by_name() {
        let want = wanted(
            Some((&[("pve1", 2), ("pve2", 1)], false)),
            vec![(false, vec![101])],
        );
        let changes = rule_changes(100, &want, &[]).unwrap();
        assert_eq!(changes.len(), 2);
        assert!(matches!(&changes[0], RuleChange::Create(s) if s.rule == "sankofa-vm-100"));
        assert!(matches!(&changes[1], RuleChange::Create(s)
            if s.rule == "sankofa-vm-100-negative" && s.resources == ["vm:100", "vm:101"]));
        let current = [
            listed(
                "sankofa-vm-100",
                "node-affinity",
                "vm:100",
                Some("pve1:2,pve2:1"),
            ),
            listed(
                "sankofa-vm-100-negative",
                "resource-affinity",
                "vm:100,vm:101",
                None,
            ),
        ];
        assert_eq!(rule_changes(100, &want, &current).unwrap(), []);
        let moved = wanted(Some((&[("pve3", 0)], true)), vec![]);
        let changes = rule_changes(100, &moved, &current).unwrap();
        assert!(
            matches!(&changes[0], RuleChange::Update(s, Some(d)) if s.rule == "sankofa-vm-100" && d == "d")
        );
        assert_eq!(
            changes[1],
            RuleChange::Delete("sankofa-vm-100-negative".into())
        );
        // Another rule holds the VM: refused before any write.
        let admins = [listed(
            "web",
            "node-affinity",
            "vm:100,vm:102",
            Some("pve1"),
        )];
        let refused = rule_changes(100, &moved, &admins).unwrap_err();
        assert!(refused.contains("'web'"), "{refused}");
        // Named with ha.rule: the admin's rule keeps its other VMs, and is never deleted.
        let mut named = moved.clone();
        named.rule = Some("web".into());
        let changes = rule_changes(100, &named, &admins).unwrap();
        assert!(
            matches!(&changes[0], RuleChange::Update(s, _) if s.resources == ["vm:100", "vm:102"])
        );
        assert_eq!(
            rule_changes(100, &wanted(None, vec![]), &admins).unwrap(),
            []
        );
    }

    #[test]
    fn where_the_crm_will_want_the_vm() {
        let want = wanted(
            Some((&[("pve2", 2), ("pve3", 2), ("pve1", 1)], false)),
            vec![],
        );
        assert_eq!(
            destinations(&want, "pve1"),
            Some(BTreeSet::from(["pve2".to_string(), "pve3".to_string()]))
        );
        let mut stay = want.clone();
        stay.failback = Some(false);
        assert_eq!(destinations(&stay, "pve1"), None);
        let strict = HaWanted {
            node_affinity: Some(NodeAffinity {
                nodes: BTreeMap::from([("pve2".to_string(), 0)]),
                strict: true,
            }),
            failback: Some(false),
            ..want
        };
        assert_eq!(
            destinations(&strict, "pve1"),
            Some(BTreeSet::from(["pve2".to_string()]))
        );
    }
}
