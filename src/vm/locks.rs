//! Waiting out a VM's lock: the task that holds it is waited on by its UPID; a lock no
//! visible task holds is reported, with what the user may do about it.

use std::time::{Duration, Instant};

use anyhow::anyhow;

use super::plan::Current;
use super::shell::{Poll, Runner};
use crate::pve::api::{Task, access, tasks};
use crate::pve::retry::{Awaiting, Step, until};

/// How long a lock no visible task holds may stay before it is reported (its holder may be
/// a task that is starting, not listed yet).
const UNHELD_LOCK_PATIENCE: Duration = Duration::from_secs(10);

impl Runner<'_> {
    /// If the VM is locked, waits for the task holding the lock (say an import from an
    /// earlier, interrupted run), then reads it again. A lock no task holds is reported.
    /// `None` when the VM is gone once the lock is (a destroy held it); a VM a migration moved
    /// meanwhile is read on its new node.
    pub(super) fn settle(&mut self, cur: Option<Current>) -> anyhow::Result<Option<Current>> {
        let Some(mut cur) = cur else { return Ok(None) };
        let vmid = cur.vmid;
        let mut quiet_since: Option<Instant> = None;
        // The lock the last try found: the VM is read again before the next.
        let mut held: Option<String> = None;
        let tried = until(&self.budget(), Awaiting::LockHeld, |_| -> Poll<Settled> {
            if let Some(lock) = held.take() {
                match self.read_again(&cur, &lock)? {
                    Some(again) => cur = again,
                    None => return Ok(Step::Done(Ok(Settled::Gone))),
                }
            }
            let Some(lock) = cur.lock().map(str::to_string) else {
                return Ok(Step::Done(Ok(Settled::Unlocked(cur.clone()))));
            };
            held = Some(lock.clone());
            let running = tasks::running(&self.session.client, &cur.node, Some(cur.vmid), None)
                .map_err(|e| anyhow!("listing tasks of VM {} on {}: {e}", cur.vmid, cur.node))?;
            if let Some(upid) = running.into_iter().next() {
                quiet_since = None;
                let what = format!(
                    "waiting for {} (task {}) that holds VM {}'s lock '{lock}'",
                    upid.task_type, upid, cur.vmid
                );
                self.wait(&Task::found(upid), &what)?;
                return Ok(Step::Now);
            }
            let since = *quiet_since.get_or_insert_with(Instant::now);
            let unheld = Settled::Unheld(cur.clone(), lock);
            Ok(if since.elapsed() > UNHELD_LOCK_PATIENCE {
                Step::Done(Ok(unheld))
            } else {
                Step::Again(Ok(unheld))
            })
        });
        let lock = held.unwrap_or_default();
        let settled = self.ended(tried, &format!("waiting for VM {vmid}'s lock '{lock}'"))?;
        match settled {
            Settled::Unlocked(cur) => Ok(Some(cur)),
            Settled::Gone => Ok(None),
            Settled::Unheld(cur, lock) => Err(anyhow!(self.unheld_lock_message(&cur, &lock))),
        }
    }

    /// The VM read again after a wait for its lock `lock`; `None` when it is gone.
    fn read_again(&self, cur: &Current, lock: &str) -> anyhow::Result<Option<Current>> {
        match self.read(cur.vmid, &cur.node)? {
            Some(again) => Ok(Some(again)),
            // A migration held the lock and moved the VM (QemuMigrate.pm phase3_cleanup
            // moves its config to the target): it is read where it is now.
            None if lock == "migrate" => {
                let moved = self.listing()?.into_iter().find(|v| v.vmid == cur.vmid);
                match moved {
                    Some(v) => self.read(v.vmid, &v.node),
                    None => Ok(None),
                }
            }
            None => Ok(None),
        }
    }

    /// What to say about a lock no visible task holds. Without `Sys.Audit` on the node, PVE
    /// lists only the user's own tasks (pve-manager API2/Tasks.pm, node_tasks), so the holder
    /// (a backup, another admin's job) may simply be hidden: say so instead of advising
    /// `qm unlock` on a VM that something may be using.
    pub(super) fn unheld_lock_message(&self, cur: &Current, lock: &str) -> String {
        let (vmid, node) = (cur.vmid, &cur.node);
        let path = access::node_acl_path(node);
        let audit = access::has_privilege(&self.session.client, &path, "Sys.Audit").ok();
        match audit {
            Some(false) => format!(
                "VM {vmid} on {node} is locked ({lock}) and no task this user can see holds the lock: \
                 another user's task (a backup, say) may hold it, but listing other users' tasks needs \
                 Sys.Audit on {path}; grant it, or wait until the lock is gone and run again"
            ),
            _ => format!(
                "VM {vmid} on {node} is locked ({lock}) but no task on {node} holds the lock; if no operation is in progress, \
                 remove it on the node with `qm unlock {vmid}`"
            ),
        }
    }
}

/// How a wait for a VM's lock ended.
enum Settled {
    /// The VM, unlocked.
    Unlocked(Current),
    /// The VM is gone (a destroy held the lock).
    Gone,
    /// No visible task holds its lock (this one), past the patience or the run's budget.
    Unheld(Current, String),
}
