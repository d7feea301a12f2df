//! The `ha` option: the VM as an HA resource (pve-ha-manager's `resources.cfg`, through
//! `/cluster/ha/resources`), its requested state and group. The option is checked here
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
        .map(config_id)
        .transpose()?;
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
    Ok(Some(HaWanted { state, group }))
}

/// An HA group's name as PVE's `pve-configid` format has it (pve-common JSONSchema.pm,
/// parse_config_id: a letter, then letters, digits, `-` or `_`).
fn config_id(value: &str) -> Result<String, String> {
    if crate::ids::is_config_id(value) {
        Ok(value.to_string())
    } else {
        Err(format!(
            "ha.group must be an HA group name (a letter, then letters, digits, '-' or '_'), got {}",
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
    HaOptions { state, group }
}

/// The resource as the result reports it (`ha`).
pub(super) fn shown(vmid: u32, state: &str, group: Option<&str>) -> Value {
    let mut v = json!({"sid": format!("vm:{vmid}"), "state": state});
    if let Some(g) = group {
        v["group"] = json!(g);
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
            digest: None,
        }
    }

    #[test]
    fn what_to_write() {
        let started = HaWanted {
            state: Some("started".into()),
            group: None,
        };
        assert_eq!(
            changes(&started, None, false),
            HaOptions {
                state: Some("started".into()),
                group: None
            }
        );
        assert!(changes(&started, Some(&resource("started", None)), true).is_empty());
        // PVE reads `enabled` as `started`.
        assert!(changes(&started, Some(&resource("enabled", None)), true).is_empty());
        let keep = HaWanted {
            state: None,
            group: Some("fast".into()),
        };
        assert_eq!(
            changes(&keep, None, true),
            HaOptions {
                state: Some("started".into()),
                group: Some("fast".into())
            }
        );
        assert_eq!(
            changes(&keep, Some(&resource("stopped", Some("slow"))), false),
            HaOptions {
                state: None,
                group: Some("fast".into())
            }
        );
        assert!(changes(&keep, Some(&resource("stopped", Some("fast"))), false).is_empty());
    }
}
