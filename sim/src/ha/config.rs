//! The HA part of the cluster file system as data (`resources.cfg`, the CRM's
//! `manager_status`, its queued `crm_commands`), held in [`crate::state::State`].
//!
//! Apart from `manager` (the API handlers and the CRM/LRM loop, which use the state, the tasks and
//! the VMs) so that `state` uses this leaf and never `manager` back: `manager` → `state` →
//! `config`.

use std::collections::BTreeMap;

/// One resource of `resources.cfg`: the options given, as given.
#[derive(Clone, Default)]
pub struct Resource {
    pub opts: BTreeMap<String, String>,
}

impl Resource {
    /// The requested state (read_and_check_resources_config: unset and `enabled` are
    /// `started`).
    pub fn state(&self) -> &str {
        match self.opts.get("state").map(String::as_str) {
            None | Some("enabled") => "started",
            Some(s) => s,
        }
    }
}

/// What the CRM knows of a service (`manager_status` → `service_status`).
#[derive(Clone)]
pub struct Service {
    /// `started`, `request_stop`, `stopped`.
    pub state: String,
    pub node: String,
    pub running: bool,
    /// The stop timeout of a pending `crm-command stop` (0: a hard stop).
    pub timeout: Option<u64>,
    /// The LRM's task for this service, while it runs.
    pub upid: Option<String>,
}

/// The HA part of the cluster file system.
#[derive(Default)]
pub struct HaState {
    pub resources: BTreeMap<String, Resource>,
    pub services: BTreeMap<String, Service>,
    /// `crm_commands`: queued `stop SID TIMEOUT` lines.
    pub commands: Vec<(String, u64)>,
    /// `crm_commands`: queued `migrate SID NODE` lines (`ha-manager migrate`; see
    /// `migrate/ha_handoff.rs`, which carries them out).
    pub migrations: Vec<(String, String)>,
    /// The last CRM/LRM round (`manager_status` timestamp), once the stack runs.
    pub round: Option<u64>,
    /// The CRM/LRM daemons work in rounds (`ha/rounds.rs`), set once there is something to
    /// manage ([`crate::ha::manager::ensure_loop`]).
    pub running: bool,
    /// `rules.cfg` (PVE 9): the HA rules by id, each with its place in the file's order.
    pub rules: BTreeMap<String, Rule>,
    /// `groups.cfg` (PVE 8): the HA groups by id.
    pub groups: BTreeMap<String, Group>,
}

/// One section of `rules.cfg` (pve-ha-manager PVE/HA/Rules.pm and its plugins), decoded as
/// `decode_value` decodes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// What the rule constrains, with the options of its type.
    pub kind: RuleKind,
    /// `resources`: the HA resource ids (`vm:100`).
    pub resources: std::collections::BTreeSet<String>,
    /// `disable`: kept, but not applied (`foreach_rule` with `exclude_disabled_rules`).
    pub disable: bool,
    pub comment: Option<String>,
    /// `$rules->{order}`: where the rule stands in the file (`get_next_ordinal`).
    pub order: u64,
}

/// A rule's type and the options only that type takes.
#[derive(Clone, Debug, PartialEq)]
pub enum RuleKind {
    /// `node-affinity` (Rules/NodeAffinity.pm): `nodes` with their priorities (0 when not
    /// given, parse_node_priority), `strict`.
    NodeAffinity {
        nodes: BTreeMap<String, u64>,
        strict: bool,
    },
    /// `resource-affinity` (Rules/ResourceAffinity.pm): `affinity` positive (together) or
    /// negative (apart).
    ResourceAffinity { positive: bool },
}

impl RuleKind {
    /// The section type as `rules.cfg` and the API name it.
    pub fn type_name(&self) -> &'static str {
        match self {
            RuleKind::NodeAffinity { .. } => "node-affinity",
            RuleKind::ResourceAffinity { .. } => "resource-affinity",
        }
    }
}

/// One section of `groups.cfg` (pve-ha-manager PVE/HA/Groups.pm): `nodes` as given
/// (`node[:priority]`), `restricted`, `nofailback`, `comment`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Group {
    pub nodes: Vec<String>,
    pub restricted: bool,
    pub nofailback: bool,
    pub comment: Option<String>,
}
