//! The state one `vm` run shares across its concerns (the session, the desired VM, what it
//! changed) and the primitives each of them uses: a failed result, a wait on a task, the
//! run's budget.
//!
//! The concerns are `impl Runner` blocks in their own files: [`super::find`] (finding the
//! VM), [`super::locks`] (waiting out a lock), [`super::create`] (create and clone),
//! [`super::execute`] (running a step), [`super::guest`] (what the guest has not taken),
//! and [`super::converge`] (the loop over them).

use anyhow::anyhow;
use std::cell::RefCell;
use std::collections::BTreeMap;

use super::desired::Desired;
use super::plan::{Current, Plan, Step};
use super::privileges::{CloneSourceConfig, Run, needs};
use super::report::Changes;
use crate::pve::answers::VmConfig;
use crate::pve::api::Task;
use crate::pve::budget::Budget;
use crate::pve::retry::Interrupted;
use crate::runner::{Session, TaskFailed};

/// What a step led to.
pub(super) enum Done {
    /// The VM exists as (vmid, node).
    Vm(u32, String),
    /// The VM is gone.
    Gone,
    /// PVE refused because the config changed meanwhile: read again and re-plan
    /// ([`crate::pve::retry::Awaiting::StalePlan`]).
    Stale,
    /// The task acted, then failed, and is worth one more try: read again and re-plan
    /// ([`crate::pve::retry::Awaiting::ActedThenFailed`]).
    Retry,
}

/// What one try of a loop of the run led to (see [`crate::pve::retry::until`]): the loop's
/// end or another try, each with the run's result should the budget end it; or an error
/// that ends it at once.
pub(super) type Poll<T> = anyhow::Result<crate::pve::retry::Step<anyhow::Result<T>>>;

/// One run of the `vm` module.
pub(super) struct Runner<'a> {
    pub(super) session: Session,
    pub(super) desired: &'a Desired,
    /// Whether anything was changed: the one place `changed` is decided.
    pub(super) changes: Changes,
    /// A config [`Runner::find`] read while looking: (vmid, node, config).
    pub(super) prefetched: RefCell<Option<(u32, String, VmConfig)>>,
    /// The vmids of the cluster's last listing ([`Runner::listing`]), once there was one:
    /// the ids a new VM's id is chosen around.
    pub(super) listed_ids: RefCell<Option<Vec<u32>>>,
    /// The names the nodes' own lists gave while finding the VM (vmid → name): a claim after
    /// the create takes them as known and confirms only the VMs that came since.
    pub(super) confirmed_names: RefCell<BTreeMap<u32, String>>,
    /// Warnings found while looking (leftovers of killed creates), each once; added to the
    /// result's warnings when the run ends.
    pub(super) notes: RefCell<Vec<String>>,
    /// The power requests the HA stack carried out (`started VM 100 on pve1 (hastart)`).
    pub(super) ha_carried: Vec<String>,
    /// How many tasks acted and then failed (see `execute`): tried again a bounded number of
    /// times.
    pub(super) acted_failures: u32,
    /// A new NoCloud seed was attached to the running VM: its guest reads it at its next
    /// boot (see `nocloud`), so the change waits for a restart.
    pub(super) seed_changed_running: bool,
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

    /// The run's budget, as the session made it (a handle: its loops borrow the runner).
    pub(super) fn budget(&self) -> Budget {
        self.session.budget.clone()
    }

    /// The end of one of the run's loops (its tries are [`Poll`]s): its result, or the
    /// error of a pause a signal ended, saying what was being waited for (`doing`).
    pub(super) fn ended<T>(
        &self,
        tried: Result<anyhow::Result<anyhow::Result<T>>, Interrupted>,
        doing: &str,
    ) -> anyhow::Result<T> {
        match tried {
            Ok(Ok(result)) => result,
            Ok(Err(error)) => Err(error),
            Err(signal) => Err(self.interrupted(signal, doing)),
        }
    }

    /// Before the run's first write (and in check mode alike): what the first plan needs of
    /// PVE's privileges against what the token holds, in one `GET /access/permissions`
    /// ([`crate::privileges::preflight`]); a clone's source config is read for its disks'
    /// storages and its bridges. `desired` is the round's effective one (a clone's inherited
    /// nocloud seed included), so what it uploads counts too.
    pub(super) fn preflight(
        &self,
        desired: &Desired,
        plan: &Plan,
        cur: Option<&Current>,
    ) -> anyhow::Result<()> {
        let mut source = None;
        if let Some(Step::Clone { source: from, .. }) =
            plan.steps.iter().find(|s| matches!(s, Step::Clone { .. }))
        {
            let (vmid, node, _) = self.clone_source(from)?;
            if let Some(config) = self.config_of(vmid, &node)? {
                let config = config.strings();
                super::firmware_disks::check_clone_source(desired, vmid, &config)
                    .map_err(anyhow::Error::msg)?;
                // The clone gets its source's drives: a CD-ROM slot one of them holds (a disk,
                // PVE's cloud-init drive, a seed) is refused now, not after the clone.
                super::cdroms::plan_media(
                    &desired.cdroms,
                    (vmid, &config),
                    &mut Vec::new(),
                    &mut Vec::new(),
                    &mut BTreeMap::new(),
                    &mut BTreeMap::new(),
                )
                .map_err(anyhow::Error::msg)?;
                source = Some((vmid, config));
            }
        }
        let run = Run {
            desired,
            plan,
            cur,
            clone_source: source.as_ref().map(|(vmid, config)| CloneSourceConfig {
                vmid: *vmid,
                config,
            }),
        };
        crate::privileges::preflight(&self.session.client, &needs(&run))
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
