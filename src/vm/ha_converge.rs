//! The shell of the `ha` option: the VM's HA resource converged once the VM's config and power
//! state have, and the VM then brought to that state by the HA stack (waited on as a power
//! step is, see `execute`). Apart from [`super::ha`] (the option and its changes, pure) so that
//! the arrows go one way: `desired` → `ha`, and the shell (`converge` → `ha_converge` →
//! `shell`, `ha`) above both.

use anyhow::{Context, anyhow};
use serde_json::Value;

use super::ha::{HaWanted, changes, shown};
use super::plan::Current;
use super::shell::Runner;
use crate::pve::api::ha;

/// What converging the HA resource did (or, in check mode, would do).
pub(super) struct HaOutcome {
    /// What was changed, for the message (`made it an HA resource (state started)`).
    pub done: Option<String>,
    /// The resource before and after, for the result (`ha`) and the diff.
    pub before: Value,
    pub after: Value,
}

impl Runner<'_> {
    /// Converges the VM's HA resource to the `ha` option; in check mode only says what it
    /// would change. A requested state that changed is then waited for, as the HA stack
    /// carries it out.
    pub(super) fn converge_ha(
        &mut self,
        wanted: &HaWanted,
        cur: &Current,
        check_mode: bool,
    ) -> anyhow::Result<HaOutcome> {
        let id = format!("VM {} on {}", cur.vmid, cur.node);
        let client = &self.session.client;
        let current = ha::resource(client, cur.vmid)
            .with_context(|| format!("reading the HA resource of {id}"))?;
        let set = changes(wanted, current.as_ref(), cur.running);
        let before = current.as_ref().map_or(Value::Null, |c| {
            shown(cur.vmid, c.requested_state(), c.group.as_deref())
        });
        let state = set.state.clone().unwrap_or_else(|| {
            current
                .as_ref()
                .map_or("started", |c| c.requested_state())
                .to_string()
        });
        let group = set
            .group
            .clone()
            .or_else(|| current.as_ref().and_then(|c| c.group.clone()));
        let after = shown(cur.vmid, &state, group.as_deref());
        if set.is_empty() {
            return Ok(HaOutcome {
                done: None,
                before,
                after,
            });
        }
        let listed = set
            .given()
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let done = if current.is_some() {
            format!("set its HA resource's {listed}")
        } else {
            format!("made it an HA resource ({listed})")
        };
        if check_mode {
            return Ok(HaOutcome {
                done: Some(done),
                before,
                after,
            });
        }
        let what = if current.is_some() {
            format!("setting {listed} of the HA resource vm:{}", cur.vmid)
        } else {
            format!("making {id} an HA resource ({listed})")
        };
        let written = match &current {
            Some(c) => ha::update(client, cur.vmid, &set, c.digest.as_deref()),
            None => ha::add(client, cur.vmid, &set),
        };
        let _ = self.changes.accepted();
        if let Err(e) = written {
            let hint = if e.is_ha_groups_migrated() {
                " (PVE 9 replaced HA groups with rules: leave ha.group out, and give the VM a \
                 node-affinity rule with POST /cluster/ha/rules)"
            } else {
                ""
            };
            return Err(anyhow!("{what}: {e}{hint}"));
        }
        match set.state.as_deref() {
            Some("started") if !cur.running => self.reached(cur, true, &what)?,
            Some("stopped" | "disabled") if cur.running => self.reached(cur, false, &what)?,
            _ => {}
        }
        Ok(HaOutcome {
            done: Some(done),
            before,
            after,
        })
    }
}
