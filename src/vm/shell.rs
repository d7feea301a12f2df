//! The state one `vm` run shares across its concerns (the session, the desired VM, what it
//! changed) and the primitives each of them uses: a failed result, a wait on a task, and
//! the look for a task a lost answer may have started.
//!
//! The concerns are `impl Runner` blocks in their own files: [`super::find`] (finding the
//! VM), [`super::locks`] (waiting out a lock), [`super::create`] (create and clone),
//! [`super::execute`] (running a step), [`super::guest`] (what the guest has not taken),
//! and [`super::converge`] (the loop over them).

use std::cell::RefCell;

use serde_json::Value;

use super::desired::Desired;
use super::report::Changes;
use crate::ansible::protocol::Failure;
use crate::pve::client::Params;
use crate::pve::tasks::active_tasks;
use crate::pve::upid::Upid;
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
    pub(super) prefetched: RefCell<Option<(u32, String, Value)>>,
}

/// Request parameters from (key, value) pairs.
pub(super) fn params(pairs: &[(&str, String)]) -> Params {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// Whether a create or config request imports a disk (its task copies and reports progress).
pub(super) fn imports(params: &[(String, String)]) -> bool {
    params.iter().any(|(_, v)| v.contains("import-from="))
}

/// Seconds since the epoch, as UPIDs count them.
pub(super) fn epoch_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_secs())
        .unwrap_or(0)
}

impl Runner<'_> {
    /// A failed result saying `msg`; whether anything changed is added when the run ends
    /// ([`Session::finish`] with [`Changes::any`]).
    pub(super) fn fail(&self, msg: impl Into<String>) -> Failure {
        Failure::msg(msg)
    }

    /// Waits for a task; every way it can end badly becomes a failed result with context.
    pub(super) fn wait(&mut self, upid: Upid, what: &str) -> Result<(), Failure> {
        self.wait_copy(upid, what, false).map_err(Failure::from)
    }

    /// [`Runner::wait`] for a task that may copy a disk (`copies`: it imports one).
    pub(super) fn wait_copy(
        &mut self,
        upid: Upid,
        what: &str,
        copies: bool,
    ) -> Result<(), TaskFailed> {
        self.session.wait(&upid, what, copies).map(|_| ())
    }

    /// Finds a running task of `ttype` for the VM: the one a lost answer may have started.
    pub(super) fn recover(&self, node: &str, vmid: u32, ttype: &str) -> Option<Upid> {
        active_tasks(&self.session.client, node, Some(vmid), Some(ttype))
            .ok()?
            .into_iter()
            .next()
    }
}
