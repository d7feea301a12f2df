//! Moving a VM to the node it is asked on, and placing a clone there: a `qmigrate` task
//! (qemu-server API2/Qemu.pm migrate_vm, PVE::QemuMigrate) waited on by its UPID, its copy
//! followed as an import's; and, for a clone asked on another node than its source's, where
//! PVE can make it (directly when the source's disks are on shared storage; a full clone on
//! the source's node and then migrated; a linked clone not at all, since PVE cannot migrate
//! one).

use anyhow::anyhow;

use super::desired::CloneSource;
use super::plan::Current;
use super::shell::{Done, Poll, Runner};
use crate::pve::api::qemu::{self, MigrateRequest, Vm};
use crate::pve::api::{Dispatched, Task, storage};
use crate::pve::error::{migration_reason, task_refused_before_acting};
use crate::pve::retry::{Awaiting, Step, until};

/// Where a clone asked on `node` is made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ClonePlacement {
    /// Made on `node` by the clone itself (the same node, or a source on shared storage).
    Direct,
    /// A full clone made on the source's node, then migrated to `node`.
    ThenMigrate { source_node: String },
}

impl Runner<'_> {
    /// Migrates the VM to `target` (live when it runs, its local disks with it, onto
    /// `target_storage` when given) and waits for the `qmigrate` task. For an HA-managed VM
    /// PVE starts a `hamigrate` that hands the move to the HA stack (API2/Qemu.pm
    /// migrate_vm: `ha-manager migrate`); its LRM then runs the `qmigrate`, which is found
    /// and waited for in turn. A migration PVE refused because another operation held the VM
    /// is re-planned.
    pub(super) fn migrate_to(
        &mut self,
        cur: &Current,
        target: &str,
        target_storage: Option<&str>,
    ) -> anyhow::Result<Done> {
        let what = format!("migrating VM {} from {} to {target}", cur.vmid, cur.node);
        let request = MigrateRequest {
            target,
            target_storage,
        };
        let vm = Vm::new(&cur.node, cur.vmid);
        let task = match qemu::migrate(&self.session.client, &vm, &request) {
            Ok(Dispatched::Task(task)) => task,
            Ok(Dispatched::Done) => {
                let _ = self.changes.accepted();
                return Ok(Done::Vm(cur.vmid, target.to_string()));
            }
            Err(e) if e.is_checksum_mismatch() => return Ok(Done::Stale),
            Err(e) => return Err(anyhow::Error::new(e).context(what)),
        };
        let mark = self.changes.accepted();
        let handed_to_ha = task.handed_to_ha();
        let task = if handed_to_ha {
            self.wait(&task, &format!("{what} (asking the HA stack)"))?;
            match self.ha_migration(cur, target, task.upid.starttime, &what)? {
                Some(task) => task,
                None => return Ok(Done::Vm(cur.vmid, target.to_string())),
            }
        } else {
            task
        };
        match self.wait_task(&task, &what) {
            Ok(()) => Ok(Done::Vm(cur.vmid, target.to_string())),
            Err(mut failed) => {
                // A failed migration leaves the VM where it was (phase1_cleanup).
                let reason = migration_reason(&failed.log_tail());
                let refused = reason.as_deref().is_some_and(task_refused_before_acting);
                if refused && !handed_to_ha && !self.session.budget.spent() {
                    self.changes.undo(mark);
                    return Ok(Done::Stale);
                }
                if let Some(why) = reason {
                    self.changes.undo(mark);
                    failed.message = format!("{}: {why}", failed.message);
                }
                Err(failed.into())
            }
        }
    }

    /// The `qmigrate` the HA stack's LRM starts for an HA-managed VM after `hamigrate`
    /// (pve-ha-manager Manager.pm, LRM.pm; Resources/PVEVM.pm migrate, on the VM's node), or
    /// `None` when the VM is on `target` already (moved between two looks).
    fn ha_migration(
        &self,
        cur: &Current,
        target: &str,
        since: u64,
        what: &str,
    ) -> anyhow::Result<Option<Task>> {
        let client = &self.session.client;
        let vm = Vm::new(&cur.node, cur.vmid);
        let tried = until(
            &self.budget(),
            Awaiting::HaMotion,
            |_| -> Poll<Option<Task>> {
                if let Some(task) = qemu::migration_by_ha(client, &vm, since) {
                    return Ok(Step::Done(Ok(Some(task))));
                }
                if self
                    .config_of(cur.vmid, target)?
                    .is_some_and(|c| !c.strings().contains_key("lock"))
                {
                    return Ok(Step::Done(Ok(None)));
                }
                Ok(Step::Again(Err(anyhow!(
                    "{what}: the HA stack did not start the migration before the timeout (see `ha-manager status`)"
                ))))
            },
        );
        self.ended(tried, what)
    }

    /// Where the clone asked on `node` is made. PVE clones to another node only when every
    /// disk of the source is on shared storage (API2/Qemu.pm clone_vm: `can't clone VM to
    /// node '…' (VM uses local storage)`); otherwise a full clone is made on the source's node
    /// and migrated, and a linked clone is refused here, before anything is written: a linked
    /// clone's disks are thin copies of the template's base volumes and cannot leave its node
    /// (QemuMigrate.pm, scan_local_volumes: `can't migrate '…' as it's a clone of '…'`).
    pub(super) fn clone_placement(
        &self,
        source: &CloneSource,
        node: &str,
    ) -> anyhow::Result<ClonePlacement> {
        let (src, src_node, is_template) = self.clone_source(source)?;
        if node.is_empty() || node == src_node {
            return Ok(ClonePlacement::Direct);
        }
        let config = self
            .config_of(src, &src_node)?
            .ok_or_else(|| anyhow!("clone: the source VM {src} is no longer on {src_node}"))?;
        let storages = storage::list(&self.session.client, &src_node).map_err(|e| {
            anyhow::Error::new(e).context(format!("clone: listing the storages of {src_node}"))
        })?;
        let shared = |sid: &str| storages.iter().any(|s| s.storage == sid && s.is_shared());
        let mut local: Vec<String> = source_storages(&config.strings())
            .into_iter()
            .filter(|sid| !shared(sid))
            .collect();
        local.dedup();
        if local.is_empty() {
            return Ok(ClonePlacement::Direct);
        }
        let full = source.full.unwrap_or(!is_template);
        if !full {
            return Err(anyhow!(
                "clone: a linked clone of VM {src} on {src_node} cannot be made on {node}: its disks are on storage local to {src_node} ({}), \
                 a linked clone shares them and PVE cannot migrate it (\"can't migrate '…' as it's a clone of '…'\"). \
                 Set clone.full: true (a full copy, made on {src_node} and migrated to {node}), clone a template that is on {node}, \
                 or keep the template's disks on a shared storage",
                local.join(", ")
            ));
        }
        Ok(ClonePlacement::ThenMigrate {
            source_node: src_node,
        })
    }
}

/// The storages of a config's volumes as PVE's clone checks them (API2/Qemu.pm,
/// `$check_storage_access_clone`): every drive's, CD-ROM images included, but no empty drive
/// and no physical CD-ROM, sorted.
fn source_storages(config: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    let drive = |k: &str| {
        ["scsi", "virtio", "ide", "sata", "efidisk", "tpmstate"]
            .iter()
            .any(|p| {
                k.strip_prefix(p)
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
    };
    let mut out: Vec<String> = config
        .iter()
        .filter(|(k, _)| drive(k))
        .filter_map(|(_, v)| {
            let file = v.split(',').next()?;
            let file = file.strip_prefix("file=").unwrap_or(file);
            let (sid, _) = file.split_once(':')?;
            Some(sid.to_string())
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_storages_a_clone_checks() {
        let config = [
            ("scsi0", "local-lvm:base-9000-disk-0/vm-9001-disk-0,size=2G"),
            ("ide2", "local-lvm:vm-9000-cloudinit,media=cdrom"),
            ("ide0", "none,media=cdrom"),
            ("ide1", "cdrom,media=cdrom"),
            ("efidisk0", "nfs:9000/vm-9000-disk-1.raw,efitype=4m"),
            ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(source_storages(&config), ["local-lvm", "local-lvm", "nfs"]);
    }
}
