//! The convergence loop of the `vm` module: find the VM, wait out whatever holds its lock,
//! plan, carry the steps out, read the VM again and re-plan until nothing is left to do;
//! then the follow-up the guest needs (a restart, a regenerated cloud-init drive, its
//! address). In check mode, the prediction instead.

use anyhow::anyhow;
use serde_json::Value;

use super::desired::State;
use super::disk_formats;
use super::ha_converge::HaOutcome;
use super::migrate::ClonePlacement;
use super::plan::{Current, Plan, Step, plan};
use super::predict::predict;
use super::report::{self, Converged, all_keys, header};
use super::shell::{Done, Poll, Runner};
use crate::ansible::protocol::Outcome;
use crate::pve::api::qemu::Vm;
use crate::pve::api::storage;
use crate::pve::retry::{self, Awaiting, until};

/// Converges the VM (or, in check mode, predicts what converging it would do).
pub(super) fn converge(runner: &mut Runner, check_mode: bool) -> anyhow::Result<Outcome> {
    let desired = runner.desired;
    let mut cur = match runner.find()? {
        Some((vmid, node)) => {
            let c = runner.read(vmid, &node)?;
            if check_mode { c } else { runner.settle(c)? }
        }
        None => None,
    };
    if let (Some(c), Some(n)) = (&cur, &desired.node)
        && c.node != *n
        && desired.state != State::Absent
        && !desired.migrate
        && !desired.ha.as_ref().is_some_and(|ha| ha.placed_on(&c.node))
    {
        runner.session.log.warnings.push(format!(
            "VM {} is on node {}, not {n}; it was left there and converged where it is (give migrate: true to move it to {n})",
            c.vmid, c.node
        ));
    }
    let header = |c: Option<&Current>| header(desired, c);
    // After the first round, "restarted" means "running", and cipassword has been sent.
    let mut effective = desired.clone();
    // nocloud: a clone this run makes without it gets a seed of its own (see
    // nocloud::inherit); a VM that exists already keeps the seed it holds.
    if desired.state != State::Absent {
        match &cur {
            Some(c) => {
                if let Some(note) = runner.foreign_seed_note(c) {
                    runner.session.log.warnings.push(note);
                }
            }
            None => runner.check_clone_seed()?,
        }
    }
    let mut first: Plan = plan(&effective, cur.as_ref()).map_err(anyhow::Error::msg)?;
    // nocloud: the seed's storage checked before anything is written (a create included).
    if desired.state != State::Absent {
        runner.check_seed_storage(cur.as_ref())?;
    }
    // A new disk's format its storage cannot hold is refused before any write: one read of
    // the node's storages, made only when a new disk asks for a format.
    let formatted = disk_formats::formatted_new_disks(desired, cur.as_ref());
    if desired.state != State::Absent
        && !formatted.is_empty()
        && let Some(node) = cur.as_ref().map(|c| &c.node).or(desired.node.as_ref())
    {
        let storages = storage::list(&runner.session.client, node).map_err(|e| {
            anyhow!("reading the storages of node {node} (to check disks' formats): {e}")
        })?;
        disk_formats::check(&formatted, &storages, node).map_err(anyhow::Error::msg)?;
    }
    // An ISO on a storage without iso content is refused before any write: one read of the
    // node's storages, made only when a CD-ROM gets an ISO.
    // A clone writes its CD-ROMs in the round after it is made: checked before it too.
    let after_clone = if first.steps.iter().any(|s| matches!(s, Step::Clone { .. })) {
        super::cdroms::create_values(&desired.cdroms)
    } else {
        Vec::new()
    };
    let isos =
        super::cdroms::inserted_isos(&desired.cdroms, written(&first).chain(after_clone.iter()));
    if let (false, Some(node)) = (
        isos.is_empty(),
        cur.as_ref().map(|c| &c.node).or(desired.node.as_ref()),
    ) {
        let storages = storage::list(&runner.session.client, node).map_err(|e| {
            anyhow!("reading the storages of node {node} (to check the cdroms' ISOs): {e}")
        })?;
        super::cdroms::check_iso_storages(&isos, &storages, node).map_err(anyhow::Error::msg)?;
    }
    // A moved disk whose volume a snapshot holds is refused before any write.
    runner.check_disk_moves(&first, cur.as_ref())?;
    // So is a deleted volume a snapshot holds.
    runner.check_disk_unlinks(&first, cur.as_ref())?;
    // HA rules and failback need PVE 9: told before any write (the run's one /version read).
    if let Some(option) = desired.ha.as_ref().and_then(|ha| ha.needs_rules())
        && desired.state != State::Absent
        && !crate::pve_version::capabilities(&runner.session.client)?.ha_rules
    {
        return Err(anyhow!(
            "{option} needs PVE 9 (HA rules and failback came with pve-ha-manager 5.0), and this \
             PVE has no /cluster/ha/rules: on PVE 8 use ha.group (an HA group's nodes and \
             priorities, restricted, nofailback) for {}",
            header(cur.as_ref())
        ));
    }
    // A clone asked on another node than its source's: made there directly, or made on the
    // source's node and migrated (the move is planned once the clone exists); a linked clone
    // that cannot get there is refused here, before anything is written.
    if let (None, Some(source), Some(node)) = (&cur, &desired.clone, &desired.node)
        && desired.state != State::Absent
        && let ClonePlacement::ThenMigrate { source_node } = runner.clone_placement(source, node)?
    {
        first.steps = vec![
            Step::Clone {
                node: source_node.clone(),
                source: source.clone(),
            },
            Step::Migrate {
                from: source_node.clone(),
                target: node.clone(),
                online: false,
                target_storage: desired.target_storage.clone(),
            },
        ];
        first.before.insert("node".into(), String::new());
        first.after.insert("node".into(), node.clone());
        effective.migrate = true;
    }
    runner
        .session
        .log
        .warnings
        .extend(first.notes.iter().cloned());
    runner.preflight(&effective, &first, cur.as_ref())?;
    if check_mode {
        let untaken = match cur.as_ref().filter(|c| c.running) {
            Some(c) => Some(runner.untaken(c)?),
            None => None,
        };
        let prediction =
            predict(desired, cur.as_ref(), &first, untaken).map_err(anyhow::Error::msg)?;
        let mut outcome = report::predicted(desired, cur.as_ref(), &first, &prediction);
        // snapshot_before_change: the name a change would be preceded by (nothing is taken).
        if let (Some(prefix), Some(_)) = (&desired.snapshot_before_change, &cur)
            && !first.steps.is_empty()
            && desired.state != State::Absent
        {
            outcome.data.insert(
                "snapshot".into(),
                serde_json::json!(super::snapshot_before::predicted(prefix)),
            );
        }
        if let (Some(wanted), Some(c)) = (&desired.ha, &cur) {
            let ha = runner.converge_ha(wanted, c, true)?;
            report_ha(&mut outcome, ha, true);
        }
        return Ok(outcome);
    }
    // snapshot_before_change: an existing VM about to change is snapshotted first.
    let mut taken: Option<String> = None;
    if let (Some(prefix), Some(c)) = (&desired.snapshot_before_change, &cur)
        && !first.steps.is_empty()
        && desired.state != State::Absent
    {
        let vm = Vm::new(&c.node, c.vmid);
        taken = Some(super::snapshot_before::take(
            runner,
            &vm,
            prefix,
            desired.snapshot_retention,
        )?);
    }
    let mut done_steps: Vec<String> = Vec::new();
    let mut pending = first.clone();
    // A round in which PVE refused a step because the VM changed meanwhile (another run, a
    // backup) does not count: it is retried, spaced out, until the deadline.
    let mut round = 0;
    let budget = runner.budget();
    // Where the last round left the VM, and whether it cloned it: read again and planned
    // again at the start of the next round (after the pause a refused round waits).
    let mut after: Option<(Option<(u32, String)>, bool)> = None;
    let tried = until(&budget, Awaiting::StalePlan, |_| -> Poll<()> {
        if let Some((ident, cloned)) = after.take() {
            cur = match ident {
                Some((vmid, node)) => {
                    let c = runner.read(vmid, &node)?;
                    runner.settle(c)?
                }
                None => None,
            };
            // Once per run: a restart, and a password PVE cannot compare (it stores a hash).
            if effective.state == State::Restarted {
                effective.state = State::Started;
            }
            effective.config.remove("cipassword");
            // A clone gets the password a create would have been given, once.
            if cloned && let Some(pw) = desired.create_only.get("cipassword") {
                effective.config.insert("cipassword".into(), pw.clone());
            }
            if cloned && let Some(c) = &cur {
                effective.nocloud = runner.inherited_nocloud(c)?.or(effective.nocloud.take());
            }
            pending = plan(&effective, cur.as_ref()).map_err(anyhow::Error::msg)?;
        }
        if pending.steps.is_empty() {
            return Ok(retry::Step::Done(Ok(())));
        }
        if round == 5 {
            return Err(anyhow!(
                "{} did not converge: still planned after 5 rounds: {} (is something else changing it?)",
                header(cur.as_ref()),
                pending
                    .steps
                    .iter()
                    .map(Step::describe)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut ident = cur.as_ref().map(|c| (c.vmid, c.node.clone()));
        // What a refused step waits for before the round is planned again.
        let mut stale = None;
        let mut cloned = false;
        for step in pending.steps.clone() {
            cloned |= matches!(step, Step::Clone { .. });
            // After a step that makes the VM or moves it, the rest is planned again on the VM
            // as it is then, where it is then; so after a recreated EFI disk or TPM state
            // (two config writes of its own, which leave the round's digest stale).
            let relocates = matches!(
                step,
                Step::Create { .. } | Step::Clone { .. } | Step::Migrate { .. } | Step::Recreate(_)
            );
            let label = step.describe();
            match runner.execute(step, cur.as_ref())? {
                Done::Vm(vmid, node) => {
                    done_steps.push(label);
                    ident = Some((vmid, node));
                    if relocates {
                        break;
                    }
                }
                Done::Gone => {
                    done_steps.push(label);
                    ident = None;
                }
                Done::Stale => {
                    stale = Some(Awaiting::StalePlan);
                    break;
                }
                Done::Retry => {
                    stale = Some(Awaiting::ActedThenFailed);
                    break;
                }
            }
        }
        let next = match stale {
            Some(awaiting) => retry::Step::AgainAs(
                awaiting,
                Err(anyhow!(
                    "{} did not converge before the timeout: PVE refused {} (the VM changed meanwhile)",
                    header(cur.as_ref()),
                    pending
                        .steps
                        .iter()
                        .map(Step::describe)
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            ),
            None => {
                round += 1;
                retry::Step::Now
            }
        };
        after = Some((ident, cloned));
        Ok(next)
    });
    let doing = format!("re-planning {}", header(cur.as_ref()));
    runner.ended(tried, &doing)?;
    // The HA resource the `ha` option asks for, once the VM's config and power state
    // converged; a requested state that changed is carried out by the HA stack, waited for.
    let mut ha = None;
    if let (Some(wanted), Some(c)) = (&desired.ha, &cur) {
        let outcome = runner.converge_ha(wanted, c, false)?;
        if let Some(done) = &outcome.done {
            done_steps.push(done.clone());
            cur = runner.read(c.vmid, outcome.node.as_deref().unwrap_or(&c.node))?;
        }
        ha = Some(outcome);
    }
    // What a running guest has not taken yet: changes pending until a restart, cloud-init
    // options its drive does not hold. Restarted when asked. A stopped VM (a template too)
    // takes both at its start, which generates the cloud-init drive from the config.
    let mut untaken = (Vec::new(), Vec::new());
    let mut restarted = None;
    if let Some(c) = cur.clone() {
        untaken = runner.untaken(&c)?;
        if c.running && !all_keys(&untaken).is_empty() && desired.restart_when_needed {
            let what = all_keys(&untaken).join(", ");
            runner.restart(&c)?;
            done_steps.push(format!("restarted to apply {what}"));
            restarted = Some(what);
            cur = runner.read(c.vmid, &c.node)?;
            if let Some(c) = &cur {
                untaken = runner.untaken(c)?;
            }
        }
    }
    let untaken_keys = all_keys(&untaken);
    let restart_needed = cur.as_ref().is_some_and(|c| c.running) && !untaken_keys.is_empty();
    if restart_needed && let Some(c) = &cur {
        runner.session.log.warnings.push(format!(
            "VM {} on {} runs without its changes to {} until it restarts (PVE applies them at the next start): restart it, or set restart: when_needed",
            c.vmid,
            c.node,
            untaken_keys.join(", ")
        ));
    }
    let mut guest_addresses = None;
    if let Some(limit) = desired.wait_for_ip {
        match &cur {
            Some(c) if c.running || runner.ha_starting(&Vm::new(&c.node, c.vmid))? => {
                guest_addresses = Some(runner.wait_for_ip(c, limit)?)
            }
            Some(c) => {
                return Err(anyhow!(
                    "wait_for_ip: VM {} on {} is not running (state: present does not start it; use state: started)",
                    c.vmid,
                    c.node
                ));
            }
            None => {}
        }
    }
    let mut outcome = report::converged(
        desired,
        &runner.changes,
        Converged {
            first: &first,
            cur: cur.as_ref(),
            done_steps: &done_steps,
            restarted,
            untaken_keys: &untaken_keys,
            restart_needed,
            guest_addresses,
        },
    );
    if let Some(ha) = ha {
        report_ha(&mut outcome, ha, false);
    }
    if let Some(name) = taken {
        outcome
            .data
            .insert("snapshot".into(), serde_json::json!(name));
    }
    // What the HA stack carried out: the power requests it was handed and then applied.
    if !runner.ha_carried.is_empty() {
        outcome.msg.push_str(&format!(
            " (carried out by the HA stack: {})",
            runner.ha_carried.join(", ")
        ));
        outcome.data.insert(
            "ha_carried_out".into(),
            serde_json::json!(runner.ha_carried),
        );
    }
    Ok(outcome)
}

/// The keys the plan's create or updates write.
fn written(plan: &Plan) -> impl Iterator<Item = &(String, String)> {
    plan.steps.iter().flat_map(|step| match step {
        Step::Create { config, .. } => config.as_slice(),
        Step::Update { set } => set.as_slice(),
        _ => &[],
    })
}

/// The HA resource in the result (`ha`) and, when it changes, in the diff (`ha` before and
/// after); check mode's message says what would change.
fn report_ha(outcome: &mut Outcome, ha: HaOutcome, check_mode: bool) {
    if let Some(done) = &ha.done {
        outcome.changed = true;
        if check_mode {
            outcome.msg.push_str(&format!("; would have {done}"));
        }
        if let Some(diff) = outcome.diff.as_mut() {
            for (side, value) in [("before", &ha.before), ("after", &ha.after)] {
                if let Some(map) = diff.get_mut(side).and_then(Value::as_object_mut) {
                    map.insert("ha".into(), value.clone());
                }
            }
        }
    }
    outcome.data.insert("ha".into(), ha.after);
}
