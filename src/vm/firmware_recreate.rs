//! Carrying out a `Recreate` step (`efidisk.force` / `tpmstate.force`): the old drive
//! deleted in one `POST …/config` (PVE keeps its volume as an `unusedN` disk; on a running VM
//! the delete waits for the next start, as `vmconfig_hotplug_pending` skips both slots), the
//! VM read again, then the new drive added in another, allocated as at create.

use anyhow::anyhow;

use super::firmware_disks::Recreate;
use super::plan::Current;
use super::shell::{Done, Runner};
use crate::pve::api::qemu::{self, Vm};

impl Runner<'_> {
    /// Recreates `step.slot` on the VM as last read.
    pub(super) fn recreate_firmware_disk(
        &mut self,
        cur: &Current,
        step: &Recreate,
    ) -> anyhow::Result<Done> {
        let id = format!("VM {} on {}", cur.vmid, cur.node);
        let vm = Vm::new(&cur.node, cur.vmid);
        let digest = cur.config.get("digest").map(String::as_str);
        let delete = vec![("delete".to_string(), step.slot.clone())];
        let dispatched = qemu::update_config(&self.session.client, &vm, &delete, digest);
        let what = format!(
            "detaching {} of {id} to recreate it ({})",
            step.slot,
            step.differs.join(", ")
        );
        let done = self.task(cur, dispatched, &what)?;
        if !matches!(done, Done::Vm(..)) {
            return Ok(done);
        }
        let now = self.read(cur.vmid, &cur.node)?.ok_or_else(|| {
            anyhow!(
                "{id} disappeared while recreating {} (its old {} was detached)",
                step.slot,
                step.slot
            )
        })?;
        let add = vec![(step.slot.clone(), step.value.clone())];
        let digest = now.config.get("digest").map(String::as_str);
        let dispatched = qemu::update_config(&self.session.client, &vm, &add, digest);
        let what = format!(
            "adding the new {} ({}) to {id} after detaching the old one",
            step.slot, step.value
        );
        // A refusal here leaves the VM without the drive: the next round plans its add.
        self.task(&now, dispatched, &what)
    }
}
