//! Running a planned step: each one endpoint call, dispatched once (a lost answer is matched
//! to its task), its task waited on by its UPID; a step PVE refused because the VM changed
//! meanwhile is reported as stale, to be re-planned. Also the restart that applies pending
//! changes.

use anyhow::{Context, anyhow};

use super::encode::format_size;
use super::plan::{Current, Step};
use super::shell::{Done, Poll, Runner};
use crate::pve::api::Dispatched;
use crate::pve::api::qemu::{self, Vm};
use crate::pve::error::{ApiError, task_acted_then_failed};
use crate::pve::retry::{self, Awaiting, until};

/// How many times a task that acted and then failed is tried in all (see
/// [`task_acted_then_failed`]).
const MAX_ACTED_TRIES: u32 = 2;

impl Runner<'_> {
    /// Waits on what a request for the VM dispatched.
    pub(super) fn task(
        &mut self,
        cur: &Current,
        dispatched: Result<Dispatched, ApiError>,
        what: &str,
    ) -> anyhow::Result<Done> {
        let (node, vmid) = (cur.node.clone(), cur.vmid);
        match dispatched {
            Ok(Dispatched::Task(task)) => {
                let mark = self.changes.accepted();
                match self.wait_task(&task, what) {
                    Ok(()) => Ok(Done::Vm(vmid, node)),
                    // The worker re-checked the VM under its file lock and refused before
                    // changing anything (another run changed the config, another operation
                    // holds the VM, or its file lock stayed taken for PVE's 10 s): read the VM
                    // again and re-plan.
                    Err(failed) if failed.refused_before_acting && !self.session.budget.spent() => {
                        self.changes.undo(mark);
                        Ok(Done::Stale)
                    }
                    // The worker acted, then failed (a shutdown the guest ignored, a resize
                    // over PVE's 10 s): tried again a bounded number of times, then reported
                    // with its cause.
                    Err(mut failed) => {
                        let Some(cause) = failed
                            .exitstatus
                            .as_deref()
                            .and_then(task_acted_then_failed)
                        else {
                            return Err(failed.into());
                        };
                        self.acted_failures += 1;
                        let exit = failed.exitstatus.clone().unwrap_or_default();
                        self.session.log.warnings.push(format!(
                            "{what}: PVE's task acted, then failed: {exit} ({cause}); the VM was \
                             read again"
                        ));
                        if self.acted_failures < MAX_ACTED_TRIES && !self.session.budget.spent() {
                            return Ok(Done::Retry);
                        }
                        failed.message = format!(
                            "{} ({cause}; PVE acted each time, tried {} time(s))",
                            failed.message, self.acted_failures
                        );
                        failed.cause = Some(cause.into());
                        Err(failed.into())
                    }
                }
            }
            Ok(Dispatched::Done) => {
                let _ = self.changes.accepted();
                Ok(Done::Vm(vmid, node))
            }
            Err(e) if e.is_checksum_mismatch() => Ok(Done::Stale),
            Err(e) => Err(anyhow::Error::new(e).context(what.to_string())),
        }
    }

    /// Runs one planned step on the VM as last read (`cur`; `None` before a create or clone).
    pub(super) fn execute(&mut self, step: Step, cur: Option<&Current>) -> anyhow::Result<Done> {
        let cur = match (&step, cur) {
            (Step::Create { node, config, pool }, _) => {
                return self.create(node, config, pool.as_deref());
            }
            (Step::Clone { node, source }, _) => return self.clone_vm(node, source),
            (
                Step::Migrate {
                    target,
                    target_storage,
                    ..
                },
                Some(cur),
            ) => return self.migrate_to(cur, target, target_storage.as_deref()),
            (Step::Seed(seed), Some(cur)) => return self.attach_seed(cur, seed),
            (Step::Recreate(step), Some(cur)) => return self.recreate_firmware_disk(cur, step),
            (Step::Disk(disk), Some(cur)) => return self.disk_step(cur, disk),
            (_, Some(cur)) => cur,
            (_, None) => {
                return Err(anyhow!(
                    "internal error: {} planned for a VM that does not exist",
                    step.describe()
                ));
            }
        };
        let id = format!("VM {} on {}", cur.vmid, cur.node);
        let vm = Vm::new(&cur.node, cur.vmid);
        let client = &self.session.client;
        let (dispatched, what) = match &step {
            Step::Create { .. }
            | Step::Clone { .. }
            | Step::Migrate { .. }
            | Step::Seed(_)
            | Step::Recreate(_)
            | Step::Disk(_) => {
                unreachable!("handled above")
            }
            Step::Template => (
                qemu::template(client, &vm),
                format!("converting {id} to a template"),
            ),
            Step::Update { set } => {
                let keys = set
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                let digest = cur.config.get("digest").map(String::as_str);
                (
                    qemu::update_config(client, &vm, set, digest),
                    format!("updating {keys} of {id}"),
                )
            }
            Step::Resize { slot, to, .. } => (
                qemu::resize(client, &vm, slot, &format_size(*to)),
                format!("resizing {slot} of {id} to {}", format_size(*to)),
            ),
            Step::Start => {
                // A start (or a reboot) after the seed was attached boots with it.
                self.seed_changed_running = false;
                (qemu::start(client, &vm), format!("starting {id}"))
            }
            Step::Stop => (qemu::stop(client, &vm), format!("stopping {id}")),
            Step::Reboot => {
                self.seed_changed_running = false;
                (qemu::reboot(client, &vm), format!("rebooting {id}"))
            }
            Step::Shutdown { timeout, force } => (
                qemu::shutdown(client, &vm, *timeout, *force),
                format!("shutting down {id}"),
            ),
            Step::Destroy { purge } => (
                qemu::destroy(client, &vm, *purge),
                format!("destroying {id}"),
            ),
        };
        match (self.task(cur, dispatched, &what)?, &step) {
            (stale @ (Done::Stale | Done::Retry), _) => Ok(stale),
            (_, Step::Destroy { .. }) => Ok(Done::Gone),
            (done, Step::Start) => self.reached(cur, true, &what).map(|()| done),
            (done, Step::Stop | Step::Shutdown { .. }) => {
                self.reached(cur, false, &what).map(|()| done)
            }
            (done, _) => Ok(done),
        }
    }

    /// Verifies the end state of a power step from `status/current`. For a VM the HA stack
    /// manages, qemu-server forked `hastart` or `hastop` instead of the task (API2/Qemu.pm
    /// vm_start, vm_stop, vm_shutdown), which ends once the request is queued; the CRM and
    /// LRM carry it out in a later round of about 10 s. So the state is read again, spaced
    /// out ([`Awaiting::HaRound`]), until it is reached or the run's deadline; the result
    /// then says HA carried the request out.
    pub(super) fn reached(
        &mut self,
        cur: &Current,
        running: bool,
        what: &str,
    ) -> anyhow::Result<()> {
        let vm = Vm::new(&cur.node, cur.vmid);
        let want = if running { "running" } else { "stopped" };
        let mut handed_over = false;
        let tried = until(&self.budget(), Awaiting::HaRound, |_| -> Poll<()> {
            let status = qemu::status(&self.session.client, &vm)
                .with_context(|| format!("{what}: reading its status"))?
                .ok_or_else(|| anyhow!("{what}: the VM disappeared meanwhile"))?;
            handed_over |= status.ha_managed();
            if status.running() == running {
                if handed_over {
                    self.ha_carried.push(format!(
                        "{} VM {} on {} ({})",
                        if running { "started" } else { "stopped" },
                        cur.vmid,
                        cur.node,
                        if running { "hastart" } else { "hastop" }
                    ));
                }
                return Ok(retry::Step::Done(Ok(())));
            }
            if !handed_over {
                // A task that ended OK without the state: re-read and re-planned by the loop.
                return Ok(retry::Step::Done(Ok(())));
            }
            Ok(retry::Step::Again(Err(anyhow!(
                "{what}: the VM is HA-managed, and the HA stack was asked to make it {want} \
                 (its request was queued), but it is not {want} at the run's timeout (HA \
                 service state: {}); check `ha-manager status` on {}, or raise timeout",
                status.ha.state.as_deref().unwrap_or("none yet"),
                cur.node
            ))))
        });
        self.ended(tried, &format!("{what}: waiting for the HA stack"))
    }

    /// Shuts the VM down (gracefully within `shutdown_timeout`, then stopped if `force_stop`) and
    /// starts it, each task waited on by its UPID; a step PVE refused before acting (another
    /// operation held the VM) is tried again, spaced out, within the deadline.
    pub(super) fn restart(&mut self, cur: &Current) -> anyhow::Result<()> {
        let steps = [
            Step::Shutdown {
                timeout: self.desired.shutdown_timeout,
                force: self.desired.force_stop,
            },
            Step::Start,
        ];
        for step in steps {
            let tried = until(&self.budget(), Awaiting::StalePlan, |_| -> Poll<()> {
                let now = self.read(cur.vmid, &cur.node)?.ok_or_else(|| {
                    anyhow!(
                        "VM {} on {} disappeared while restarting it",
                        cur.vmid,
                        cur.node
                    )
                })?;
                let refused = || {
                    Err(anyhow!(
                        "restarting VM {} on {}: PVE refused to {} it until the deadline (another operation holds it)",
                        cur.vmid,
                        cur.node,
                        step.describe()
                    ))
                };
                Ok(match self.execute(step.clone(), Some(&now))? {
                    Done::Stale => retry::Step::Again(refused()),
                    Done::Retry => retry::Step::AgainAs(Awaiting::ActedThenFailed, refused()),
                    Done::Vm(..) | Done::Gone => retry::Step::Done(Ok(())),
                })
            });
            self.ended(tried, &format!("restarting VM {}", cur.vmid))?;
        }
        self.seed_changed_running = false;
        Ok(())
    }
}
