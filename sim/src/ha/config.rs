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
}
