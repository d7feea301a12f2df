//! The shell of the `Seed` step: check the ISO storage (it holds `iso` content, the seed
//! fits its free space), upload the seed unless the storage lists it already, attach it as
//! the VM's CD-ROM (PVE's cloud-init drive and older seeds off, in one config update), and
//! remove the old seeds no VM's config names any more.

use anyhow::{Context, anyhow};

use super::iso;
use super::plan::SeedStep;
use crate::pve::api::Dispatched;
use crate::pve::api::cluster;
use crate::pve::api::qemu::{self, Vm};
use crate::pve::api::storage::{self, Upload};
use crate::vm::plan::Current;
use crate::vm::shell::{Done, Runner};

impl Runner<'_> {
    /// Carries out a `Seed` step on the VM as last read.
    pub(in crate::vm) fn attach_seed(
        &mut self,
        cur: &Current,
        step: &SeedStep,
    ) -> anyhow::Result<Done> {
        let id = format!("VM {} on {}", cur.vmid, cur.node);
        let node = cur.node.as_str();
        let client = &self.session.client;
        let storages = storage::list(client, node).with_context(|| {
            format!("reading the storages of node {node} for the NoCloud seed of {id}")
        })?;
        let Some(target) = storages.iter().find(|s| s.storage == step.storage) else {
            return Err(anyhow!(
                "nocloud.storage {} is not a storage of node {node} (for the NoCloud seed of {id}): give an ISO storage the node has",
                step.storage
            ));
        };
        if !target.holds("iso") {
            return Err(anyhow!(
                "nocloud.storage {} on {node} does not hold ISO images (its content is {}): give a storage with iso in its content, or add iso to it",
                step.storage,
                target.content.as_deref().unwrap_or("not listed")
            ));
        }
        let listed = storage::content(client, node, &step.storage, "iso")
            .with_context(|| format!("listing the ISO images of {} on {node}", step.storage))?;
        if !listed.iter().any(|volume| volume.volid == step.volid) {
            let image = iso::image(&step.seed).map_err(anyhow::Error::msg)?;
            if let Some(avail) = target.avail
                && image.len() as u64 > avail
            {
                return Err(anyhow!(
                    "the NoCloud seed of {id} ({} bytes) is larger than the free space of {} on {node} ({avail} bytes)",
                    image.len(),
                    step.storage
                ));
            }
            let sha256 = sha256_hex(&image);
            let upload = Upload {
                content: "iso",
                filename: &step.file,
                contents: &image,
                sha256: &sha256,
            };
            let what = format!(
                "uploading the NoCloud seed {} of {id} to {}",
                step.file, step.storage
            );
            match storage::upload(client, node, &step.storage, &upload) {
                Ok(Dispatched::Task(task)) => {
                    let _ = self.changes.accepted();
                    self.wait(&task, &what)?;
                }
                Ok(Dispatched::Done) => {
                    let _ = self.changes.accepted();
                }
                Err(e) => return Err(anyhow::Error::new(e).context(what)),
            }
        }
        let mut set = vec![(step.slot.clone(), step.drive.clone())];
        if !step.delete.is_empty() {
            set.push(("delete".into(), step.delete.join(",")));
        }
        let vm = Vm::new(node, cur.vmid);
        let digest = cur.config.get("digest").map(String::as_str);
        let dispatched = qemu::update_config(&self.session.client, &vm, &set, digest);
        let what = format!(
            "attaching the NoCloud seed {} to {id} on {}",
            step.file, step.slot
        );
        let done = self.task(cur, dispatched, &what)?;
        if !matches!(done, Done::Vm(..)) {
            return Ok(done);
        }
        if let Some(slot) = &step.replaces_cloudinit {
            self.session.log.warnings.push(format!(
                "{id} had PVE's cloud-init drive on {slot}: it was removed, and the NoCloud seed on {} replaces it (two cidata volumes confuse cloud-init)",
                step.slot
            ));
        }
        if cur.running {
            self.seed_changed_running = true;
        }
        for old in &step.old_volumes {
            self.remove_unused_seed(cur, old)?;
        }
        Ok(done)
    }

    /// Removes a seed the VM no longer holds, unless another VM's config names it (a clone
    /// keeps its template's seed until it has its own).
    fn remove_unused_seed(&mut self, cur: &Current, volid: &str) -> anyhow::Result<()> {
        let client = &self.session.client;
        let doing = format!("looking for VMs that still use the old NoCloud seed {volid}");
        for listed in cluster::vms(client).with_context(|| doing.clone())? {
            if listed.vmid == cur.vmid {
                continue;
            }
            let Some(config) = qemu::config(client, &Vm::new(&listed.node, listed.vmid))
                .with_context(|| doing.clone())?
            else {
                continue;
            };
            let uses = config
                .strings()
                .values()
                .any(|value| value.split(',').next() == Some(volid));
            if uses {
                return Ok(());
            }
        }
        let Some((storage_id, _)) = volid.split_once(':') else {
            return Ok(());
        };
        let what = format!("removing the old NoCloud seed {volid} of VM {}", cur.vmid);
        match storage::delete_volume(client, &cur.node, storage_id, volid) {
            Ok(Dispatched::Task(task)) => self.wait(&task, &what),
            Ok(Dispatched::Done) => Ok(()),
            Err(e) => Err(anyhow::Error::new(e).context(what)),
        }
    }
}

/// SHA-256 as hex, the checksum the upload's task checks.
fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}
