//! The shell of the `snapshot` module: find the VM, list its snapshots, carry out the plan
//! (each task waited on by its UPID), and report `changed`, the snapshots and the tasks.

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::plan::{Step, plan};
use super::spec::{Desired, State, desired};
use crate::ansible::protocol::{Failure, Invocation, Outcome};
use crate::privileges::{explain_refusal, preflight, snapshot_needs};
use crate::pve::answers::{SnapshotListed, Vmid};
use crate::pve::api::named::{self, Confirm};
use crate::pve::api::qemu::Vm;
use crate::pve::api::{Dispatched, cluster, snapshot};
use crate::pve::error::task_lacks_snapshot_feature;
use crate::runner::{Session, TaskFailed, failure};

/// Runs the `snapshot` module.
pub fn run(inv: &Invocation) -> Result<Outcome, Failure> {
    let desired = desired(inv).map_err(|e| failure(anyhow::Error::msg(e)))?;
    let mut session = Session::start(inv).map_err(failure)?;
    let mut changed = false;
    let result =
        converge(&mut session, &desired, inv.ctx.check_mode, &mut changed).map_err(explain_refusal);
    let keys = [
        ("vmid", json!(desired.vm.vmid)),
        ("snapname", json!(desired.snapname)),
    ];
    session.finish(result, changed, &keys)
}

/// The VM the options name: by vmid (on `node`, or where the cluster lists it) or by name
/// (one VM of that name in the cluster, its name confirmed on every node:
/// [`named::named`]).
pub fn locate(session: &Session, desired: &Desired) -> anyhow::Result<Vm> {
    let selector = &desired.vm;
    if let (Some(vmid), Some(node)) = (selector.vmid, &selector.node) {
        return Ok(Vm::new(node, vmid));
    }
    let listed = cluster::vms(&session.client).context("listing the cluster's VMs")?;
    let found: Vec<(Vmid, String)> = match &selector.name {
        Some(name) => named::named(&session.client, name, listed, Confirm::EveryNode)?.carriers,
        None => listed.into_iter().map(|vm| (vm.vmid, vm.node)).collect(),
    };
    let found: Vec<(Vmid, String)> = found
        .into_iter()
        .filter(|(vmid, node)| {
            selector.vmid.is_none_or(|id| id == *vmid)
                && selector.node.as_ref().is_none_or(|n| n == node)
        })
        .collect();
    let what = match (selector.vmid, &selector.name) {
        (Some(id), _) => format!("VM {id}"),
        (None, Some(name)) => format!("a VM named {name:?}"),
        (None, None) => "the VM".to_string(),
    };
    match found.as_slice() {
        [(vmid, node)] => Ok(Vm::new(node, *vmid)),
        [] => bail!("{what} is not in the cluster (give vmid, and node, of an existing VM)"),
        many => bail!(
            "{what} is ambiguous: VMs {} have it; give vmid",
            many.iter()
                .map(|(vmid, _)| vmid.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn names(snapshots: &[SnapshotListed]) -> Vec<String> {
    snapshots.iter().map(|s| s.name.clone()).collect()
}

/// A list for the result: each snapshot's name, time, description, parent and whether it has
/// the guest's RAM.
pub fn snapshots_json(snapshots: &[SnapshotListed]) -> Value {
    json!(
        snapshots
            .iter()
            .map(|s| json!({
                "name": s.name, "snaptime": s.snaptime, "description": s.description.clone().unwrap_or_default(),
                "parent": s.parent, "vmstate": s.vmstate.unwrap_or(0) == 1,
            }))
            .collect::<Vec<_>>()
    )
}

/// What a failed `qmsnapshot` means when PVE says `snapshot feature is not available`.
const NO_SNAPSHOT_HINT: &str = "a disk of the VM is on a storage or in a format that cannot \
    snapshot (a raw file on a directory storage cannot; qcow2 files and LVM-thin, ZFS or Ceph \
    volumes can): move the disk (qcow2 or LVM-thin) and try again";

/// Carries out one step, waiting on its task; `what` names it in errors.
fn execute(session: &mut Session, vm: &Vm, desired: &Desired, step: &Step) -> anyhow::Result<()> {
    let on = format!("VM {} on {}", vm.vmid, vm.node);
    let (what, sent) = match step {
        Step::Create(name) => (
            format!("taking snapshot {name} of {on}"),
            snapshot::create(
                &session.client,
                vm,
                name,
                desired.vmstate,
                desired.description.as_deref(),
            ),
        ),
        Step::Describe(name, text) => (
            format!("setting the description of snapshot {name} of {on}"),
            snapshot::set_description(&session.client, vm, name, text),
        ),
        Step::Rollback(name) => (
            format!("rolling {on} back to snapshot {name}"),
            snapshot::rollback(&session.client, vm, name, desired.start),
        ),
        Step::Delete(name) => (
            format!("removing snapshot {name} of {on}"),
            snapshot::delete(&session.client, vm, name),
        ),
    };
    match sent {
        Ok(Dispatched::Task(task)) => match session.wait(&task, &what) {
            Ok(_) => Ok(()),
            Err(failed) => Err(hinted(failed)),
        },
        Ok(Dispatched::Done) => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(what)),
    }
}

fn hinted(failed: TaskFailed) -> anyhow::Error {
    let cannot = failed
        .exitstatus
        .as_deref()
        .is_some_and(task_lacks_snapshot_feature);
    if cannot {
        anyhow::Error::new(failed).context(NO_SNAPSHOT_HINT)
    } else {
        anyhow::Error::new(failed)
    }
}

/// Looks, plans, and (unless in check mode) carries out the plan.
fn converge(
    session: &mut Session,
    desired: &Desired,
    check_mode: bool,
    changed: &mut bool,
) -> anyhow::Result<Outcome> {
    let vm = locate(session, desired)?;
    let on = format!("VM {} on {}", vm.vmid, vm.node);
    let before = snapshot::list(&session.client, &vm)
        .with_context(|| format!("listing the snapshots of {on}"))?;
    let steps = plan(desired, &before).map_err(|e| anyhow::anyhow!("{e} ({on})"))?;
    if !steps.is_empty() {
        preflight(&session.client, &snapshot_needs(vm.vmid, &steps))?;
    }
    let removed: Vec<String> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Delete(n) if desired.state == State::Present => Some(n.clone()),
            _ => None,
        })
        .collect();
    let header = format!("snapshots of {on}");
    let predicted: Vec<String> = {
        let mut after = names(&before);
        for step in &steps {
            match step {
                Step::Create(n) => after.push(n.clone()),
                Step::Delete(n) => after.retain(|x| x != n),
                _ => {}
            }
        }
        after
    };
    let mut o = Outcome::default();
    o.data.insert("vmid".into(), json!(vm.vmid));
    o.data.insert("node".into(), json!(vm.node));
    o.data.insert("snapname".into(), json!(desired.snapname));
    o.data.insert("removed".into(), json!(removed));
    let describe = |steps: &[Step]| -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::Create(n) => format!("take {n}"),
                Step::Describe(n, _) => format!("describe {n}"),
                Step::Rollback(n) => format!("roll back to {n}"),
                Step::Delete(n) => format!("remove {n}"),
            })
            .collect()
    };
    if check_mode || steps.is_empty() {
        o.changed = !steps.is_empty();
        o.diff = Some(
            json!({"before": {"snapshots": names(&before)}, "after": {"snapshots": predicted},
                             "before_header": header, "after_header": header}),
        );
        o.data.insert("snapshots".into(), snapshots_json(&before));
        o.msg = if steps.is_empty() {
            format!("{on}: nothing to do")
        } else {
            format!("{on}: would {}", describe(&steps).join(", "))
        };
        return Ok(o);
    }
    for step in &steps {
        execute(session, &vm, desired, step)?;
        *changed = true;
    }
    let after = snapshot::list(&session.client, &vm)
        .with_context(|| format!("listing the snapshots of {on}"))?;
    o.changed = true;
    o.diff = Some(
        json!({"before": {"snapshots": names(&before)}, "after": {"snapshots": names(&after)},
                         "before_header": header, "after_header": header}),
    );
    o.data.insert("snapshots".into(), snapshots_json(&after));
    o.msg = format!("{on}: {}", describe(&steps).join(", "));
    Ok(o)
}
