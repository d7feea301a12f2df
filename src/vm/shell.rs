//! The state one `vm` run shares across its concerns (the session, the desired VM, what it
//! changed) and the primitives each of them uses: a failed result, a wait on a task, the
//! deadline.
//!
//! The concerns are `impl Runner` blocks in their own files: [`super::find`] (finding the
//! VM), [`super::locks`] (waiting out a lock), [`super::create`] (create and clone),
//! [`super::execute`] (running a step), [`super::guest`] (what the guest has not taken),
//! and [`super::converge`] (the loop over them).

use std::cell::RefCell;
use std::time::Instant;

use anyhow::anyhow;

use super::desired::Desired;
use super::report::Changes;
use crate::pve::answers::VmConfig;
use crate::pve::api::Task;
use crate::pve::retry::Interrupted;
use crate::runner::{Session, TaskFailed};

/// What a step led to.
pub(super) enum Done {
    /// The VM exists as (vmid, node).
    Vm(u32, String),
    /// The VM is gone.
    Gone,
    /// PVE refused because the config changed meanwhile: read again and re-plan.
    Stale,
}

/// One run of the `vm` module.
pub(super) struct Runner<'a> {
    pub(super) session: Session,
    pub(super) desired: &'a Desired,
    /// Whether anything was changed: the one place `changed` is decided.
    pub(super) changes: Changes,
    /// The seed of the run's jittered pauses.
    pub(super) seed: u64,
    /// A config [`Runner::find`] read while looking: (vmid, node, config).
    pub(super) prefetched: RefCell<Option<(u32, String, VmConfig)>>,
    /// Warnings found while looking (leftovers of killed creates), each once; added to the
    /// result's warnings when the run ends.
    pub(super) notes: RefCell<Vec<String>>,
    /// The power requests the HA stack carried out (`started VM 100 on pve1 (hastart)`).
    pub(super) ha_carried: Vec<String>,
    /// How many tasks acted and then failed (see `execute`): tried again a bounded number of
    /// times.
    pub(super) acted_failures: u32,
}

impl Runner<'_> {
    /// Waits for a task; every way it can end badly becomes a failed result with context.
    pub(super) fn wait(&mut self, task: &Task, what: &str) -> anyhow::Result<()> {
        self.wait_task(task, what).map_err(anyhow::Error::from)
    }

    /// [`Runner::wait`], telling how the task ended badly (a refusal before acting, an exit
    /// status that calls for another vmid).
    pub(super) fn wait_task(&mut self, task: &Task, what: &str) -> Result<(), TaskFailed> {
        self.session.wait(task, what).map(|_| ())
    }

    /// The run's deadline.
    pub(super) fn deadline(&self) -> Instant {
        self.session.client.deadline()
    }

    /// The error of a pause a signal ended, saying what was being waited for.
    pub(super) fn interrupted(
        &self,
        Interrupted(signal): Interrupted,
        doing: &str,
    ) -> anyhow::Error {
        anyhow!("interrupted by {signal} while {doing}")
    }
}
