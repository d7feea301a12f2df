//! The `ha` option: the VM as an HA resource (pve-ha-manager's `resources.cfg`, through
//! `/cluster/ha/resources`), its requested state, group (PVE 8), `failback` (PVE 9),
//! `max_restart`, `max_relocate`, and its HA rules (PVE 9, [`super::ha_rules`]). The option
//! is checked here
//! ([`wanted`], part of [`super::desired::Desired`]); what to change is decided in plain data
//! ([`changes`]). Pure: it sits beside `desired`/`spec`, and the shell that writes the changes
//! (`ha_converge`) uses it, never the reverse.

use serde_json::{Value, json};

use super::spec::State;
use crate::ansible::protocol::Invocation;
use crate::pve::api::ha::{HaOptions, HaResource};

/// The HA resource the `ha` option asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HaWanted {
    /// The requested state; `None` keeps an existing resource's, and gives a new one the
    /// VM's power state (`state: present`).
    pub state: Option<String>,
    /// The HA group (PVE 8).
    pub group: Option<String>,
    /// `failback` (PVE 9).
    pub failback: Option<bool>,
    /// `max_restart`.
    pub max_restart: Option<u64>,
    /// `max_relocate`.
    pub max_relocate: Option<u64>,
    /// The id of the VM's node-affinity rule (`ha.rule`); `None`: `sankofa-vm-<vmid>`.
    pub rule: Option<String>,
    /// The nodes the VM is to run on (PVE 9).
    pub node_affinity: Option<NodeAffinity>,
    /// The VMs it is to run with, or apart from (PVE 9); at most one of each.
    pub resource_affinity: Vec<ResourceAffinity>,
}

/// `ha.node_affinity`: a node-affinity rule's nodes with their priorities (the higher, the
/// more preferred; 0 when given as `~` or empty), and `strict` (only these nodes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAffinity {
    pub nodes: std::collections::BTreeMap<String, u64>,
    pub strict: bool,
}

/// One `ha.resource_affinity` entry: the VM together with (`positive`) or apart from
/// (`negative`) these others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceAffinity {
    pub positive: bool,
    pub vms: Vec<u32>,
}

impl HaWanted {
    /// Whether `node` is one of the nodes its node affinity names: where the HA stack may
    /// have placed the VM, so that a VM found there, not on `node`, is where it should be.
    pub fn placed_on(&self, node: &str) -> bool {
        self.node_affinity
            .as_ref()
            .is_some_and(|na| na.nodes.contains_key(node))
    }

    /// Whether the option asks for what only PVE 9 has (HA rules, `failback`), by name.
    pub fn needs_rules(&self) -> Option<&'static str> {
        if self.node_affinity.is_some() {
            Some("ha.node_affinity")
        } else if !self.resource_affinity.is_empty() {
            Some("ha.resource_affinity")
        } else if self.failback.is_some() {
            Some("ha.failback")
        } else if self.rule.is_some() {
            Some("ha.rule")
        } else {
            None
        }
    }
}

/// `ha.node_affinity`, checked: each node a PVE node name (pve-ha-node), each priority a
/// whole number 0 or more.
fn node_affinity(ha: &serde_json::Map<String, Value>) -> Result<Option<NodeAffinity>, String> {
    let Some(given) = ha.get("node_affinity").and_then(Value::as_object) else {
        return Ok(None);
    };
    let mut nodes = std::collections::BTreeMap::new();
    for (node, priority) in given
        .get("nodes")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let bytes = node.as_bytes();
        let valid = !bytes.is_empty()
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric()
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-');
        if !valid {
            return Err(format!(
                "ha.node_affinity.nodes: {} is not a node name",
                crate::ansible::text::quote(node)
            ));
        }
        let text = priority.as_str().unwrap_or_default().trim();
        let priority = if text.is_empty() {
            0
        } else {
            text.parse::<u64>().map_err(|_| {
                format!(
                    "ha.node_affinity.nodes.{node}: the priority must be a whole number 0 or more, got {}",
                    crate::ansible::text::quote(text)
                )
            })?
        };
        nodes.insert(node.clone(), priority);
    }
    if nodes.is_empty() {
        return Err("ha.node_affinity.nodes must name at least one node".into());
    }
    let strict = given
        .get("strict")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(Some(NodeAffinity { nodes, strict }))
}

/// `ha.resource_affinity`, checked: at most one entry per affinity, each naming other VMs.
fn resource_affinity(ha: &serde_json::Map<String, Value>) -> Result<Vec<ResourceAffinity>, String> {
    let mut out: Vec<ResourceAffinity> = Vec::new();
    for entry in ha
        .get("resource_affinity")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let positive = entry.get("affinity").and_then(Value::as_str) == Some("positive");
        let mut vms: Vec<u32> = entry
            .get("vms")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect();
        vms.sort_unstable();
        vms.dedup();
        if vms.is_empty() {
            return Err(
                "ha.resource_affinity: each entry's vms must name at least one other VM".into(),
            );
        }
        if out.iter().any(|r| r.positive == positive) {
            return Err(format!(
                "ha.resource_affinity: give one {} entry, with all its VMs",
                if positive { "positive" } else { "negative" }
            ));
        }
        out.push(ResourceAffinity { positive, vms });
    }
    Ok(out)
}

/// The requested states of an HA resource (Resources.pm, `state` of its schema; `enabled` is
/// `started`).
const STATES: &[&str] = &["started", "stopped", "disabled", "ignored"];

/// The `ha` option, checked against `state`: its requested state follows `state` unless
/// given, and may not contradict it.
pub fn wanted(inv: &Invocation, state: State) -> Result<Option<HaWanted>, String> {
    let Some(ha) = inv.params.get("ha").and_then(Value::as_object) else {
        return Ok(None);
    };
    let given = ha.get("state").and_then(Value::as_str).map(str::to_string);
    if let Some(s) = &given
        && !STATES.contains(&s.as_str())
    {
        return Err(format!(
            "ha.state: '{s}' is not one of {}",
            STATES.join(", ")
        ));
    }
    let group = ha
        .get("group")
        .and_then(Value::as_str)
        .map(|g| config_id("ha.group", g))
        .transpose()?;
    let rule = ha
        .get("rule")
        .and_then(Value::as_str)
        .map(|r| config_id("ha.rule", r))
        .transpose()?;
    let count = |key: &str| ha.get(key).and_then(Value::as_u64);
    let node_affinity = node_affinity(ha)?;
    let resource_affinity = resource_affinity(ha)?;
    if let Some(na) = &node_affinity
        && !resource_affinity.is_empty()
        && na
            .nodes
            .values()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 1
    {
        return Err(
            "ha.resource_affinity cannot be combined with an ha.node_affinity of more than one \
             priority (PVE refuses both rules: Rules.pm \
             check_single_priority_node_affinity_in_resource_affinity_rules); give its nodes \
             one priority"
                .into(),
        );
    }
    let implied = match state {
        State::Started | State::Restarted => Some("started"),
        State::Stopped => Some("stopped"),
        State::Present => None,
        State::Absent => {
            return Err(
                "ha cannot be combined with state: absent (purge removes the VM's HA resource)"
                    .into(),
            );
        }
    };
    let agrees = |given: &str, implied: &str| {
        given == implied || given == "ignored" || (given == "disabled" && implied == "stopped")
    };
    let state = match (given, implied) {
        (Some(g), Some(i)) if !agrees(&g, i) => {
            return Err(format!(
                "ha.state: {g} contradicts state: {} (the HA stack would undo it)",
                inv.str("state").unwrap_or_default()
            ));
        }
        (Some(g), _) => Some(g),
        (None, implied) => implied.map(str::to_string),
    };
    Ok(Some(HaWanted {
        state,
        group,
        failback: ha.get("failback").and_then(Value::as_bool),
        max_restart: count("max_restart"),
        max_relocate: count("max_relocate"),
        rule,
        node_affinity,
        resource_affinity,
    }))
}

/// An HA group's or rule's id as PVE's `pve-configid` format has it (pve-common
/// JSONSchema.pm, parse_config_id: a letter, then letters, digits, `-` or `_`).
fn config_id(option: &str, value: &str) -> Result<String, String> {
    if crate::ids::is_config_id(value) {
        Ok(value.to_string())
    } else {
        let what = if option == "ha.group" {
            "an HA group name"
        } else {
            "an HA rule id"
        };
        Err(format!(
            "{option} must be {what} (a letter, then letters, digits, '-' or '_'), got {}",
            crate::ansible::text::quote(value)
        ))
    }
}

/// The options to write to bring `current` (`None`: not an HA resource yet) to `wanted`, for
/// a VM whose power state is `running`; empty when nothing is to change.
pub fn changes(wanted: &HaWanted, current: Option<&HaResource>, running: bool) -> HaOptions {
    let state = match (&wanted.state, current) {
        (Some(s), Some(c)) if s == c.requested_state() => None,
        (Some(s), _) => Some(s.clone()),
        (None, Some(_)) => None,
        (None, None) => Some(if running { "started" } else { "stopped" }.to_string()),
    };
    let group = wanted
        .group
        .clone()
        .filter(|g| current.and_then(|c| c.group.as_ref()) != Some(g));
    // PVE's defaults when not set: failback 1, max_restart 1, max_relocate 1 (Resources.pm).
    let differs = |want: Option<u64>, have: Option<u64>| {
        want.filter(|w| *w != have.unwrap_or(1))
            .map(|w| w.to_string())
    };
    HaOptions {
        state,
        group,
        failback: differs(
            wanted.failback.map(u64::from),
            current.and_then(|c| c.failback),
        ),
        max_restart: differs(wanted.max_restart, current.and_then(|c| c.max_restart)),
        max_relocate: differs(wanted.max_relocate, current.and_then(|c| c.max_relocate)),
    }
}

/// The resource as the result reports it (`ha`): its sid, state, and the options set
/// (`group`, `failback`, `max_restart`, `max_relocate`).
pub(super) fn shown(vmid: u32, state: &str, options: &[(&str, Value)]) -> Value {
    let mut v = json!({"sid": format!("vm:{vmid}"), "state": state});
    for (key, value) in options {
        if !value.is_null() {
            v[*key] = value.clone();
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(state: &str, group: Option<&str>) -> HaResource {
        HaResource {
            state: Some(state.into()),
            group: group.map(str::to_string),
            ..Default::default()
        }
    }

    fn wanted(state: Option<&str>, group: Option<&str>) -> HaWanted {
        HaWanted {
            state: state.map(str::to_string),
            group: group.map(str::to_string),
            failback: None,
            max_restart: None,
            max_relocate: None,
            rule: None,
            node_affinity: None,
            resource_affinity: Vec::new(),
        }
    }

    #[test]
    fn failback_and_the_restart_counts_against_pves_defaults() {
        let mut want = wanted(None, None);
        want.max_restart = Some(1);
        want.failback = Some(true);
        assert!(changes(&want, Some(&resource("started", None)), true).is_empty());
        want.max_relocate = Some(3);
        want.failback = Some(false);
        let set = changes(&want, Some(&resource("started", None)), true);
        assert_eq!(set.given(), [("failback", "0"), ("max_relocate", "3")]);
    }

    #[test]
    fn what_to_write() {
        let started = wanted(Some("started"), None);
        assert_eq!(
            changes(&started, None, false),
            HaOptions {
                state: Some("started".into()),
                ..Default::default()
            }
        );
        assert!(changes(&started, Some(&resource("started", None)), true).is_empty());
        // PVE reads `enabled` as `started`.
        assert!(changes(&started, Some(&resource("enabled", None)), true).is_empty());
        let keep = wanted(None, Some("fast"));
        assert_eq!(
            changes(&keep, None, true),
            HaOptions {
                state: Some("started".into()),
                group: Some("fast".into()),
                ..Default::default()
            }
        );
        assert_eq!(
            changes(&keep, Some(&resource("stopped", Some("slow"))), false),
            HaOptions {
                group: Some("fast".into()),
                ..Default::default()
            }
        );
        assert!(changes(&keep, Some(&resource("stopped", Some("fast"))), false).is_empty());
    }
}
