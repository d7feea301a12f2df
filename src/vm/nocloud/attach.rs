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

/// What the ISO holds beside its files (volume descriptors, directories, Rock Ridge and
/// Joliet records), at most: the estimate checked against free space before a create.
const ISO_OVERHEAD: u64 = 128 << 10;

impl Runner<'_> {
    /// Before any write: the `nocloud` storage exists on the VM's node (or, for a VM to be
    /// created, on `node`), holds `iso` content, and has room for the seed.
    pub(in crate::vm) fn check_seed_storage(&self, cur: Option<&Current>) -> anyhow::Result<()> {
        let Some(wanted) = &self.desired.nocloud else {
            return Ok(());
        };
        let Some(node) = cur
            .map(|c| c.node.as_str())
            .or(self.desired.node.as_deref())
        else {
            return Ok(());
        };
        let parts = &wanted.parts;
        let given: u64 = [
            &parts.user_data,
            &parts.meta_data,
            &parts.network_config,
            &parts.vendor_data,
        ]
        .iter()
        .filter_map(|part| part.as_ref().map(|text| text.len() as u64))
        .sum();
        self.seed_storage(node, &wanted.storage, given + ISO_OVERHEAD)
            .map(drop)
    }

    /// The storage's entry on the node, checked: it exists, holds `iso`, has `size` bytes free.
    fn seed_storage(
        &self,
        node: &str,
        storage_id: &str,
        size: u64,
    ) -> anyhow::Result<crate::pve::answers::NodeStorage> {
        let storages = storage::list(&self.session.client, node)
            .with_context(|| format!("reading the storages of node {node} for the NoCloud seed"))?;
        let Some(target) = storages.into_iter().find(|s| s.storage == storage_id) else {
            return Err(anyhow!(
                "nocloud.storage {storage_id} is not a storage of node {node}: give an ISO storage the node has"
            ));
        };
        if !target.holds("iso") {
            return Err(anyhow!(
                "nocloud.storage {storage_id} on {node} does not hold ISO images (its content is {}): give a storage with iso in its content, or add iso to it",
                target.content.as_deref().unwrap_or("not listed")
            ));
        }
        if let Some(avail) = target.avail
            && size > avail
        {
            return Err(anyhow!(
                "the NoCloud seed ({size} bytes) is larger than the free space of {storage_id} on {node} ({avail} bytes)"
            ));
        }
        Ok(target)
    }

    /// Carries out a `Seed` step on the VM as last read.
    pub(in crate::vm) fn attach_seed(
        &mut self,
        cur: &Current,
        step: &SeedStep,
    ) -> anyhow::Result<Done> {
        let id = format!("VM {} on {}", cur.vmid, cur.node);
        let node = cur.node.as_str();
        let target = self.seed_storage(node, &step.storage, step.seed.size())?;
        let client = &self.session.client;
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
        // The config as it is now: an update or a resize earlier in this round changed its
        // digest. Attached only while it still asks for this seed, with its digest.
        let Some(fresh) = self.config_of(cur.vmid, node)? else {
            return Ok(Done::Stale);
        };
        let fresh = fresh.strings();
        if !step.still_wanted(cur.vmid, &fresh) {
            return Ok(Done::Stale);
        }
        let digest = fresh.get("digest").map(String::as_str);
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
        // A VM with snapshots (`parent` in its config) may name the seed in one of them, and a
        // rollback would then miss it: the seed stays while any such VM is there.
        let kept = |holder: u32| {
            format!(
                "the old NoCloud seed {volid} was kept: VM {holder} has snapshots, which may name it"
            )
        };
        if cur.config.contains_key("parent") {
            self.session.log.warnings.push(kept(cur.vmid));
            return Ok(());
        }
        for listed in cluster::vms(client).with_context(|| doing.clone())? {
            if listed.vmid == cur.vmid {
                continue;
            }
            let Some(config) = qemu::config(client, &Vm::new(&listed.node, listed.vmid))
                .with_context(|| doing.clone())?
            else {
                continue;
            };
            let strings = config.strings();
            if strings.contains_key("parent") {
                self.session.log.warnings.push(kept(listed.vmid));
                return Ok(());
            }
            let uses = strings
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
