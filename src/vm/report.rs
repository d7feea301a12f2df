//! The `vm` module's result: whether the run changed anything (owned here, by [`Changes`]),
//! its message, its keys (vmid, node, status, config, pending, restart_needed, addresses)
//! and its diff, for a real run and for check mode's prediction alike.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::desired::Desired;
use super::encode::format_size;
use super::plan::{Current, Plan, Step};
use super::predict::Prediction;
use crate::ansible::protocol::Outcome;
use crate::pve::answers::GuestInterface;

/// Whether the run changed anything: a change is recorded when PVE accepted a request that
/// changes the VM, and withdrawn when PVE undid it (a failed create or clone removes what
/// it made; a worker that refused before acting changed nothing).
#[derive(Debug, Default)]
pub struct Changes {
    changed: bool,
}

/// What [`Changes`] held before a change was recorded, to withdraw it.
#[must_use]
pub struct Mark(bool);

impl Changes {
    /// Records that PVE accepted a request that changes the VM.
    pub fn accepted(&mut self) -> Mark {
        let mark = Mark(self.changed);
        self.changed = true;
        mark
    }

    /// Withdraws the change recorded at `mark`: PVE undid it.
    pub fn undo(&mut self, mark: Mark) {
        self.changed = mark.0;
    }

    /// Whether anything was changed.
    pub fn any(&self) -> bool {
        self.changed
    }
}

/// How results name the VM: `VM 100 on pve1`, or the vmid or name asked for.
pub fn header(desired: &Desired, cur: Option<&Current>) -> String {
    match cur {
        Some(vm) => format!("VM {} on {}", vm.vmid, vm.node),
        None => format!(
            "VM {}",
            desired
                .vmid
                .map(|v| v.to_string())
                .unwrap_or_else(|| desired.name.clone().unwrap_or_default())
        ),
    }
}

/// The keys of (pending changes, cloud-init changes), sorted, each once.
pub fn all_keys(untaken: &(Vec<String>, Vec<String>)) -> Vec<String> {
    let mut keys: Vec<String> = untaken.0.iter().chain(&untaken.1).cloned().collect();
    keys.sort();
    keys.dedup();
    keys
}

fn diff_value(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    header: &str,
) -> Value {
    json!({"before": before, "after": after, "before_header": header, "after_header": header})
}

/// The final value of a planned key, read from the VM (for diff mode's "after").
fn observed(cur: Option<&Current>, key: &str) -> String {
    let Some(vm) = cur else { return String::new() };
    if key == "state" {
        return if vm.running { "running" } else { "stopped" }.into();
    }
    if key == "node" {
        return vm.node.clone();
    }
    if let Some(slot) = key.strip_suffix(".storage") {
        return super::disk_life::drive_storage(vm.config.get(slot));
    }
    if let Some(slot) = key.strip_suffix(".volume") {
        return super::disk_life::drive_file(vm.config.get(slot));
    }
    if let Some(slot) = key.strip_suffix(".size") {
        return vm
            .config
            .get(slot)
            .and_then(|v| super::plan::drive_size(v))
            .map(format_size)
            .unwrap_or_default();
    }
    vm.config.get(key).cloned().unwrap_or_default()
}

/// Check mode's result from its prediction.
pub fn predicted(
    desired: &Desired,
    cur: Option<&Current>,
    first: &Plan,
    prediction: &Prediction,
) -> Outcome {
    let Prediction {
        steps,
        restart_keys,
        stays_running,
        imports_resized,
    } = prediction;
    let header = header(desired, cur);
    let mut outcome = Outcome {
        changed: !steps.is_empty(),
        ..Default::default()
    };
    outcome.msg = if steps.is_empty() {
        format!("{header} is up to date")
    } else {
        format!(
            "would {} {header}{}",
            steps
                .iter()
                .map(Step::describe)
                .collect::<Vec<_>>()
                .join(", then "),
            if *imports_resized {
                " (an imported disk is grown only if the image is smaller than its size)"
            } else {
                ""
            }
        )
    };
    outcome.data.insert(
        "planned".into(),
        json!(steps.iter().map(Step::describe).collect::<Vec<_>>()),
    );
    if let Some(vm) = cur {
        outcome.data.insert("vmid".into(), json!(vm.vmid));
        outcome.data.insert("node".into(), json!(vm.node));
        outcome.data.insert(
            "unused_disks".into(),
            super::disk_life::unused_report(vm.vmid, &vm.config),
        );
        outcome.data.insert("pending".into(), json!(restart_keys));
        outcome.data.insert(
            "restart_needed".into(),
            json!(!restart_keys.is_empty() && *stays_running),
        );
    }
    let (mut before, mut after) = (first.before.clone(), first.after.clone());
    if desired.restart_when_needed && *stays_running && !restart_keys.is_empty() {
        before.insert("not running yet".into(), restart_keys.join(", "));
        after.insert("not running yet".into(), String::new());
    }
    outcome.diff = Some(diff_value(&before, &after, &header));
    outcome
}

/// How a real run ended, for its result.
pub struct Converged<'a> {
    /// The first plan (the diff's "before" and the keys it shows).
    pub first: &'a Plan,
    /// The VM as last read; `None` when it is absent.
    pub cur: Option<&'a Current>,
    /// What was done, in order.
    pub done_steps: &'a [String],
    /// The keys a restart was made to apply.
    pub restarted: Option<String>,
    /// The keys the guest has not taken yet.
    pub untaken_keys: &'a [String],
    /// Whether the VM runs without some of its changes.
    pub restart_needed: bool,
    /// (addresses, the agent's answer), when `wait_for_ip` waited for them.
    pub guest_addresses: Option<(Vec<String>, Vec<GuestInterface>)>,
}

/// A real run's result.
pub fn converged(desired: &Desired, changes: &Changes, end: Converged) -> Outcome {
    let Converged {
        first,
        cur,
        done_steps,
        restarted,
        untaken_keys,
        restart_needed,
        guest_addresses,
    } = end;
    let mut before = first.before.clone();
    let mut after: BTreeMap<String, String> = first
        .before
        .keys()
        .chain(first.after.keys())
        .map(|k| match cur {
            Some(vm) if k.starts_with("nocloud.") => (
                k.clone(),
                super::nocloud::plan::observed(desired.nocloud.as_ref(), vm.vmid, &vm.config, k),
            ),
            _ => (k.clone(), observed(cur, k)),
        })
        .collect();
    if let Some(what) = restarted {
        before.insert("not running yet".into(), what);
        after.insert("not running yet".into(), untaken_keys.join(", "));
    }
    let mut outcome = Outcome {
        changed: changes.any(),
        ..Default::default()
    };
    outcome.diff = Some(diff_value(&before, &after, &header(desired, cur)));
    match cur {
        Some(vm) => {
            outcome.msg = if done_steps.is_empty() {
                format!("VM {} on {} is up to date", vm.vmid, vm.node)
            } else {
                format!("VM {} on {}: {}", vm.vmid, vm.node, done_steps.join(", "))
            };
            outcome.data.insert("vmid".into(), json!(vm.vmid));
            outcome.data.insert("node".into(), json!(vm.node));
            outcome.data.insert(
                "status".into(),
                json!(if vm.running { "running" } else { "stopped" }),
            );
            outcome.data.insert("config".into(), vm.raw.clone());
            outcome.data.insert(
                "unused_disks".into(),
                super::disk_life::unused_report(vm.vmid, &vm.config),
            );
            outcome.data.insert("pending".into(), json!(untaken_keys));
            outcome
                .data
                .insert("restart_needed".into(), json!(restart_needed));
            if let Some((ips, interfaces)) = guest_addresses {
                outcome.data.insert("ip_addresses".into(), json!(ips));
                outcome.data.insert("interfaces".into(), json!(interfaces));
            }
        }
        None => {
            outcome.msg = if done_steps.is_empty() {
                "VM is absent".to_string()
            } else {
                format!("{}: {}", header(desired, None), done_steps.join(", "))
            };
            outcome.data.insert("status".into(), json!("absent"));
        }
    }
    outcome
}
