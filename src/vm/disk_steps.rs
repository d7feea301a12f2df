//! The shell of [`super::disk_life`]: before any write, the refusal that needs reads (a moved
//! disk whose volume a snapshot holds: PVE moves no snapshot and refuses to delete the source
//! of such a disk), and the requests of a disk step (`POST …/move_disk`, its `qmmove` task
//! waited on by its UPID; `PUT …/unlink`).

use anyhow::{Context, anyhow};

use super::disk_life::{DiskMove, DiskStep, drive_file};
use super::plan::{Current, Plan, Step};
use super::shell::{Done, Runner};
use crate::pve::api::disks::{self, DiskMove as MoveRequest};
use crate::pve::api::qemu::Vm;
use crate::pve::api::snapshot;
use crate::pve::values::Drive;

/// The moves of a plan.
fn moves(plan: &Plan) -> impl Iterator<Item = &DiskMove> {
    plan.steps.iter().filter_map(|step| match step {
        Step::Disk(DiskStep::Move(moved)) => Some(moved),
        _ => None,
    })
}

/// Whether a snapshot's config names `volume` on one of its drives (CD-ROMs aside), as
/// qemu-server Drive.pm `is_volume_in_use` scans a snapshot.
fn names_volume(config: &std::collections::BTreeMap<String, String>, volume: &str) -> bool {
    config.iter().any(|(key, value)| {
        crate::pve::values::drive::is_drive_key(key)
            && Drive::parse_stored_any(value)
                .is_ok_and(|drive| !drive.is_cdrom() && drive.file() == volume)
    })
}

impl Runner<'_> {
    /// Refuses, before any write, a move of a disk whose volume a snapshot holds, unless
    /// `keep_source` keeps the source (then warns that its snapshots stay with it). Reads the
    /// snapshots only when a move is planned and the VM has any (`parent` in its config).
    pub(super) fn check_disk_moves(
        &mut self,
        plan: &Plan,
        cur: Option<&Current>,
    ) -> anyhow::Result<()> {
        let Some(cur) = cur else { return Ok(()) };
        // snapshot_before_change's snapshot would hold every disk's volume before the move.
        if let (Some(prefix), Some(moved)) = (
            &self.desired.snapshot_before_change,
            moves(plan).find(|moved| !moved.keep_source),
        ) {
            return Err(anyhow!(
                "refusing to move {} of VM {} on {} to {}: snapshot_before_change ({prefix}…) takes a snapshot first, which holds its volume, and PVE refuses to delete the source of a disk with snapshots: give disks[].keep_source: true (the source stays as unusedN), or leave snapshot_before_change out for this run",
                moved.slot,
                cur.vmid,
                cur.node,
                moved.to
            ));
        }
        if moves(plan).next().is_none() || !cur.config.contains_key("parent") {
            return Ok(());
        }
        let vm = Vm::new(&cur.node, cur.vmid);
        let client = &self.session.client;
        let doing = || {
            format!(
                "reading the snapshots of VM {} on {} (to check its disk moves)",
                cur.vmid, cur.node
            )
        };
        let mut configs = Vec::new();
        for listed in snapshot::list(client, &vm).with_context(doing)? {
            let config = snapshot::config(client, &vm, &listed.name).with_context(doing)?;
            configs.push((listed.name, config.strings()));
        }
        for moved in moves(plan) {
            let Ok(drive) = Drive::parse_stored_any(&moved.value) else {
                continue;
            };
            let volume = drive.file();
            let held: Vec<&str> = configs
                .iter()
                .filter(|(_, config)| names_volume(config, volume))
                .map(|(name, _)| name.as_str())
                .collect();
            if held.is_empty() {
                continue;
            }
            if !moved.keep_source {
                return Err(anyhow!(
                    "refusing to move {} of VM {} on {} to {}: its volume {volume} is in the snapshots {}, and PVE moves no snapshot (it refuses to delete the source of a disk with snapshots): delete those snapshots first (the snapshot module, state: absent), or give disks[].keep_source: true to keep the source, with the snapshots on it, as unusedN",
                    moved.slot,
                    cur.vmid,
                    cur.node,
                    moved.to,
                    held.join(", ")
                ));
            }
            self.session.log.warnings.push(format!(
                "VM {}'s {} moves to {} without its snapshots ({}): PVE moves no snapshot; they stay on the source volume {volume}, kept as unusedN",
                cur.vmid,
                moved.slot,
                moved.to,
                held.join(", ")
            ));
        }
        Ok(())
    }

    /// Refuses, before any write, an unlink (a purged disk, `unused_disks: remove`) of a
    /// volume a snapshot holds: PVE's `try_deallocate_drive` (QemuServer.pm) dies `volume is
    /// still in use (snapshot?)` inside update_vm's delete loop, after the keys before it are
    /// written (or, for a drive, after its delete is written to the pending section). Reads the
    /// snapshots only when an unlink is planned and the VM has any.
    pub(super) fn check_disk_unlinks(
        &self,
        plan: &Plan,
        cur: Option<&Current>,
    ) -> anyhow::Result<()> {
        let Some(cur) = cur else { return Ok(()) };
        let keys: Vec<&String> = plan
            .steps
            .iter()
            .filter_map(|step| match step {
                Step::Disk(DiskStep::Unlink { keys }) => Some(keys),
                _ => None,
            })
            .flatten()
            .collect();
        if keys.is_empty() || !cur.config.contains_key("parent") {
            return Ok(());
        }
        let vm = Vm::new(&cur.node, cur.vmid);
        let client = &self.session.client;
        let doing = || {
            format!(
                "reading the snapshots of VM {} on {} (to check the volumes it would delete)",
                cur.vmid, cur.node
            )
        };
        let mut configs = Vec::new();
        for listed in snapshot::list(client, &vm).with_context(doing)? {
            let config = snapshot::config(client, &vm, &listed.name).with_context(doing)?;
            configs.push((listed.name, config.strings()));
        }
        for key in keys {
            let Some(value) = cur.config.get(key) else {
                continue;
            };
            let volume = match Drive::parse_stored_any(value) {
                Ok(drive) => drive.file().to_string(),
                Err(_) => value.clone(),
            };
            let held: Vec<&str> = configs
                .iter()
                .filter(|(_, config)| names_volume(config, &volume))
                .map(|(name, _)| name.as_str())
                .collect();
            if !held.is_empty() {
                return Err(anyhow!(
                    "refusing to delete {key} of VM {} on {}: its volume {volume} is in the snapshots {}, and PVE deletes no volume a snapshot holds: delete those snapshots first (the snapshot module, state: absent), or keep the volume (disks[].purge: false, unused_disks: keep)",
                    cur.vmid,
                    cur.node,
                    held.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// Runs a disk step on the VM as last read.
    pub(super) fn disk_step(&mut self, cur: &Current, step: &DiskStep) -> anyhow::Result<Done> {
        let vm = Vm::new(&cur.node, cur.vmid);
        let id = format!("VM {} on {}", cur.vmid, cur.node);
        match step {
            DiskStep::Move(moved) => {
                // Earlier steps of the round changed the config (and its digest): the move
                // is sent against the config as it is now, if the disk is still on the volume
                // planned on (its options may have changed in the round's update).
                let Some(now) = self.read(cur.vmid, &cur.node)? else {
                    return Err(anyhow!("{id} disappeared before moving {}", moved.slot));
                };
                if drive_file(now.config.get(&moved.slot)) != drive_file(Some(&moved.value)) {
                    return Ok(Done::Stale);
                }
                let request = MoveRequest {
                    disk: &moved.slot,
                    storage: &moved.to,
                    format: moved.format.as_deref(),
                    delete_source: !moved.keep_source,
                    digest: now.config.get("digest").map(String::as_str),
                };
                let dispatched = disks::move_disk(&self.session.client, &vm, &request);
                let what = format!(
                    "moving {} of {id} from {} to {}",
                    moved.slot, moved.from, moved.to
                );
                self.task(&now, dispatched, &what)
            }
            DiskStep::Unlink { keys } => {
                let dispatched = disks::unlink(&self.session.client, &vm, keys);
                let what = format!("deleting {} of {id} with their volumes", keys.join(", "));
                self.task(cur, dispatched, &what)
            }
        }
    }
}
