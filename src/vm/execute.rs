//! Running a planned step: each one request, dispatched once (a lost answer is matched to
//! its task by the task's type), its task waited on by its UPID; a step PVE refused because
//! the VM changed meanwhile is reported as stale, to be re-planned. Also the restart that
//! applies pending changes.

use std::time::Instant;

use super::encode::format_size;
use super::plan::{Current, Step};
use super::shell::{Done, Runner, imports, params};
use crate::ansible::protocol::Failure;
use crate::pve::client::{Method, Params};
use crate::pve::ops::{Dispatched, backoff, dispatch};
use crate::pve::paths::{Node, Vm};

impl Runner<'_> {
    /// Dispatches a task-starting request for the VM and waits on it.
    pub(super) fn task(
        &mut self,
        cur: &Current,
        method: Method,
        path: fn(&Vm) -> String,
        params: Params,
        ttype: &str,
        what: &str,
    ) -> Result<Done, Failure> {
        let (node, vmid) = (cur.node.clone(), cur.vmid);
        let copies = imports(&params);
        let result = dispatch(
            &self.session.client,
            method,
            &path(&Node::new(&node).vm(vmid)),
            &params,
            self.session.deadline,
            || self.recover(&node, vmid, ttype),
        );
        match result {
            Ok(Dispatched::Task(upid)) => {
                let mark = self.changes.accepted();
                match self.wait_copy(upid, what, copies) {
                    Ok(()) => Ok(Done::Vm(vmid, node)),
                    // The worker re-checked the VM under its file lock and refused before
                    // changing anything (another run changed the config, another operation
                    // holds the VM, or its file lock stayed taken for PVE's 10 s): read the VM
                    // again and re-plan.
                    Err(t) if t.refused_before_acting && Instant::now() < self.session.deadline => {
                        self.changes.undo(mark);
                        Ok(Done::Stale)
                    }
                    Err(t) => Err(t.failure),
                }
            }
            Ok(Dispatched::Done) => {
                let _ = self.changes.accepted();
                Ok(Done::Vm(vmid, node))
            }
            Err(e) if e.is_checksum_mismatch() => Ok(Done::Stale),
            Err(e) => Err(self.fail(format!("{what}: {e}"))),
        }
    }

    /// Runs one planned step on the VM as last read (`cur`; `None` before a create or clone).
    pub(super) fn execute(&mut self, step: Step, cur: Option<&Current>) -> Result<Done, Failure> {
        if let Step::Create { node, params } = &step {
            return self.create(node, params);
        }
        if let Step::Clone { node, source } = &step {
            return self.clone_vm(node, source);
        }
        let cur = cur.ok_or_else(|| {
            self.fail(format!(
                "internal error: {} planned for a VM that does not exist",
                step.describe()
            ))
        })?;
        let id = format!("VM {} on {}", cur.vmid, cur.node);
        match step {
            Step::Create { .. } | Step::Clone { .. } => unreachable!("handled above"),
            Step::Template => self.task(
                cur,
                Method::Post,
                Vm::template,
                Vec::new(),
                "qmtemplate",
                &format!("converting {id} to a template"),
            ),
            Step::Update { set } => {
                let mut params = set.clone();
                if let Some(d) = cur.config.get("digest") {
                    params.push(("digest".into(), d.clone()));
                }
                let keys = set
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                self.task(
                    cur,
                    Method::Post,
                    Vm::config,
                    params,
                    "qmconfig",
                    &format!("updating {keys} of {id}"),
                )
            }
            Step::Resize { slot, to, .. } => {
                let params = params(&[("disk", slot.clone()), ("size", format_size(to))]);
                self.task(
                    cur,
                    Method::Put,
                    Vm::resize,
                    params,
                    "resize",
                    &format!("resizing {slot} of {id} to {}", format_size(to)),
                )
            }
            Step::Start => self.task(
                cur,
                Method::Post,
                |v| v.power("start"),
                Vec::new(),
                "qmstart",
                &format!("starting {id}"),
            ),
            Step::Stop => self.task(
                cur,
                Method::Post,
                |v| v.power("stop"),
                Vec::new(),
                "qmstop",
                &format!("stopping {id}"),
            ),
            Step::Reboot => self.task(
                cur,
                Method::Post,
                |v| v.power("reboot"),
                Vec::new(),
                "qmreboot",
                &format!("rebooting {id}"),
            ),
            Step::Shutdown { timeout, force } => {
                let params = params(&[
                    ("timeout", timeout.to_string()),
                    ("forceStop", if force { "1" } else { "0" }.into()),
                ]);
                self.task(
                    cur,
                    Method::Post,
                    |v| v.power("shutdown"),
                    params,
                    "qmshutdown",
                    &format!("shutting down {id}"),
                )
            }
            Step::Destroy { purge } => {
                let params = params(&[
                    ("purge", if purge { "1" } else { "0" }.into()),
                    ("destroy-unreferenced-disks", "1".into()),
                ]);
                match self.task(
                    cur,
                    Method::Delete,
                    |v| v.path().to_string(),
                    params,
                    "qmdestroy",
                    &format!("destroying {id}"),
                )? {
                    Done::Stale => Ok(Done::Stale),
                    _ => Ok(Done::Gone),
                }
            }
        }
    }

    /// Shuts the VM down (gracefully within `shutdown_timeout`, then stopped if `force_stop`) and
    /// starts it, each task waited on by its UPID; a step PVE refused before acting (another
    /// operation held the VM) is tried again, spaced out, within the deadline.
    pub(super) fn restart(&mut self, c: &Current) -> Result<(), Failure> {
        let steps = [
            Step::Shutdown {
                timeout: self.desired.shutdown_timeout,
                force: self.desired.force_stop,
            },
            Step::Start,
        ];
        for step in steps {
            let mut refused = 0u32;
            loop {
                let now = self.read(c.vmid, &c.node)?.ok_or_else(|| {
                    self.fail(format!(
                        "VM {} on {} disappeared while restarting it",
                        c.vmid, c.node
                    ))
                })?;
                match self.execute(step.clone(), Some(&now))? {
                    Done::Stale if Instant::now() < self.session.deadline => {
                        refused += 1;
                        let pause = backoff(refused.min(4), self.seed.wrapping_add(refused as u64))
                            .min(
                                self.session
                                    .deadline
                                    .saturating_duration_since(Instant::now()),
                            );
                        if !crate::interrupt::sleep(pause) {
                            return Err(self.fail(format!(
                                "interrupted by {} while restarting VM {}",
                                crate::interrupt::received().unwrap_or("a signal"),
                                c.vmid
                            )));
                        }
                    }
                    Done::Stale => {
                        return Err(self.fail(format!(
                            "restarting VM {} on {}: PVE refused to {} it until the deadline (another operation holds it)",
                            c.vmid,
                            c.node,
                            step.describe()
                        )));
                    }
                    Done::Vm(..) | Done::Gone => break,
                }
            }
        }
        Ok(())
    }
}
