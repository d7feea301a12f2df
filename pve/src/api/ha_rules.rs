//! HA rules (PVE 9, pve-ha-manager API2/HA/Rules.pm): the rules that name a resource, and
//! their create, update and delete. Each write is answered at once (`null`), under the HA
//! domain lock; one refused on that lock is sent again within the deadline (as
//! [`super::ha`]'s writes). PVE 8 has no rules API: its `501` is told as
//! [`RulesListed::NoRulesApi`], so that callers decide the version from what PVE answers.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::answers::{Vmid, lenient_list, optional_number};
use crate::client::{Client, Method, Params};
use crate::error::ApiError;
use crate::ops;

/// `/cluster/ha/rules`.
pub const HA_RULES: &str = "/cluster/ha/rules";

/// One rule as `GET /cluster/ha/rules` lists it (Rules.pm `$get_api_ha_rule`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct HaRule {
    /// The rule's id.
    #[serde(default)]
    pub rule: String,
    /// `node-affinity` or `resource-affinity`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The resources, `vm:100,vm:101`.
    #[serde(default)]
    pub resources: String,
    /// A node-affinity rule's nodes, `pve1:2,pve2` (sorted; priority 0 not written).
    #[serde(default)]
    pub nodes: Option<String>,
    /// A node-affinity rule's `strict` (1), absent when not set.
    #[serde(default, deserialize_with = "optional_number")]
    pub strict: Option<u64>,
    /// A resource-affinity rule's `positive` or `negative`.
    #[serde(default)]
    pub affinity: Option<String>,
    /// `disable` (1), absent when not set.
    #[serde(default, deserialize_with = "optional_number")]
    pub disable: Option<u64>,
    /// The digest of `rules.cfg`.
    #[serde(default)]
    pub digest: Option<String>,
}

impl HaRule {
    /// The resources as a list.
    pub fn resource_ids(&self) -> Vec<String> {
        self.resources
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// A node-affinity rule's nodes with their priorities (0 when not given).
    pub fn node_priorities(&self) -> BTreeMap<String, u64> {
        self.nodes
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|entry| match entry.split_once(':') {
                Some((node, p)) => (node.to_string(), p.parse().unwrap_or(0)),
                None => (entry.to_string(), 0),
            })
            .collect()
    }
}

/// What `GET /cluster/ha/rules?resource=vm:N` answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RulesListed {
    /// The rules that name the VM.
    Rules(Vec<HaRule>),
    /// PVE has no rules API (`501`: PVE 8, pve-ha-manager 4.x, which has HA groups).
    NoRulesApi,
}

/// `GET /cluster/ha/rules?resource=vm:N` (a read).
pub fn rules_of(client: &Client, vmid: Vmid) -> Result<RulesListed, ApiError> {
    let params: Params = vec![("resource".into(), format!("vm:{vmid}"))];
    match ops::read(client, HA_RULES, &params) {
        Ok(answer) => Ok(RulesListed::Rules(lenient_list(answer))),
        Err(e) if e.status() == Some(501) => Ok(RulesListed::NoRulesApi),
        Err(e) => Err(e),
    }
}

/// `GET /cluster/ha/rules` (a read): every rule, for a rule named by id that may not name the
/// VM yet (Rules.pm `index` filters `resource` by the rules' own resources).
pub fn all(client: &Client) -> Result<Vec<HaRule>, ApiError> {
    ops::read(client, HA_RULES, &Params::new()).map(lenient_list)
}

/// What a rule is to be: its id, type and the options of that type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSpec {
    /// The rule's id (a `pve-configid`).
    pub rule: String,
    /// What the rule constrains.
    pub kind: RuleKind,
    /// The HA resources (`vm:N`), sorted.
    pub resources: Vec<String>,
}

/// A rule's type with its options (Rules/NodeAffinity.pm, Rules/ResourceAffinity.pm).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleKind {
    /// `node-affinity`: the nodes with their priorities; `strict`: only these.
    NodeAffinity {
        nodes: BTreeMap<String, u64>,
        strict: bool,
    },
    /// `resource-affinity`: together (`positive`) or apart (`negative`).
    ResourceAffinity { positive: bool },
}

impl RuleKind {
    /// The type as the API names it.
    pub fn type_name(&self) -> &'static str {
        match self {
            RuleKind::NodeAffinity { .. } => "node-affinity",
            RuleKind::ResourceAffinity { .. } => "resource-affinity",
        }
    }
}

impl RuleSpec {
    /// Whether the listed rule already is this.
    pub fn matches(&self, current: &HaRule) -> bool {
        let mut resources = current.resource_ids();
        resources.sort();
        if current.kind != self.kind.type_name() || resources != self.resources {
            return false;
        }
        match &self.kind {
            RuleKind::NodeAffinity { nodes, strict } => {
                current.node_priorities() == *nodes && (current.strict == Some(1)) == *strict
            }
            RuleKind::ResourceAffinity { positive } => {
                current.affinity.as_deref() == Some(if *positive { "positive" } else { "negative" })
            }
        }
    }

    /// The `nodes` value (`pve1:2,pve2`), sorted, priority 0 not written.
    pub fn nodes_text(&self) -> Option<String> {
        match &self.kind {
            RuleKind::NodeAffinity { nodes, .. } => Some(
                nodes
                    .iter()
                    .map(|(n, p)| {
                        if *p == 0 {
                            n.clone()
                        } else {
                            format!("{n}:{p}")
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            RuleKind::ResourceAffinity { .. } => None,
        }
    }

    /// The body keys of a create or update (`type` is required by both).
    fn params(&self) -> Params {
        let mut p: Params = vec![
            ("type".into(), self.kind.type_name().into()),
            ("resources".into(), self.resources.join(",")),
        ];
        match &self.kind {
            RuleKind::NodeAffinity { strict, .. } => {
                p.push(("nodes".into(), self.nodes_text().unwrap_or_default()));
                p.push(("strict".into(), if *strict { "1" } else { "0" }.into()));
            }
            RuleKind::ResourceAffinity { positive } => {
                let a = if *positive { "positive" } else { "negative" };
                p.push(("affinity".into(), a.into()));
            }
        }
        p
    }
}

/// `POST /cluster/ha/rules`: creates the rule.
pub fn create(client: &Client, spec: &RuleSpec) -> Result<(), ApiError> {
    let mut params: Params = vec![("rule".into(), spec.rule.clone())];
    params.extend(spec.params());
    ops::write_unless_locked(client, Method::Post, HA_RULES, &params)
}

/// `PUT /cluster/ha/rules/{rule}`: sets the rule's options, only if `rules.cfg` is still at
/// `digest`.
pub fn update(client: &Client, spec: &RuleSpec, digest: Option<&str>) -> Result<(), ApiError> {
    let mut params = spec.params();
    if let Some(d) = digest {
        params.push(("digest".into(), d.to_string()));
    }
    ops::write_unless_locked(
        client,
        Method::Put,
        &format!("{HA_RULES}/{}", spec.rule),
        &params,
    )
}

/// `DELETE /cluster/ha/rules/{rule}`.
pub fn delete(client: &Client, rule: &str) -> Result<(), ApiError> {
    ops::write_unless_locked(
        client,
        Method::Delete,
        &format!("{HA_RULES}/{rule}"),
        &Vec::new(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_matches_the_rule_pve_lists() {
        let spec = RuleSpec {
            rule: "sankofa-vm-100".into(),
            kind: RuleKind::NodeAffinity {
                nodes: BTreeMap::from([("pve1".into(), 2), ("pve2".into(), 0)]),
                strict: true,
            },
            resources: vec!["vm:100".into()],
        };
        assert_eq!(spec.nodes_text().as_deref(), Some("pve1:2,pve2"));
        let listed = HaRule {
            rule: "sankofa-vm-100".into(),
            kind: "node-affinity".into(),
            resources: "vm:100".into(),
            nodes: Some("pve1:2,pve2".into()),
            strict: Some(1),
            ..Default::default()
        };
        assert!(spec.matches(&listed));
        let loose = HaRule {
            strict: None,
            ..listed.clone()
        };
        assert!(!spec.matches(&loose));
        assert_eq!(
            spec.params(),
            vec![
                ("type".to_string(), "node-affinity".to_string()),
                ("resources".to_string(), "vm:100".to_string()),
                ("nodes".to_string(), "pve1:2,pve2".to_string()),
                ("strict".to_string(), "1".to_string()),
            ]
        );
    }
}
