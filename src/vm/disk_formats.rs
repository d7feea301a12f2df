//! Whether a new disk's `format` fits its storage, checked before any write: pve-storage's
//! `alloc_image` dies on a format its plugin cannot hold (LvmThinPlugin.pm and
//! ZFSPoolPlugin.pm take raw only, LVMPlugin.pm `alloc_lvm_image` raw, or qcow2 with
//! `snapshot-as-volume-chain`), after the create or update has begun; RBDPlugin.pm makes a
//! raw image whatever was asked, so the disk would never be what `format` says.

use super::desired::Desired;
use super::plan::Current;
use crate::pve::answers::NodeStorage;

/// Whether a storage of plugin type `kind` can hold a new volume of `format`; `None` where
/// the answer is PVE's to give (an LVM storage's qcow2 depends on its
/// `snapshot-as-volume-chain`, which `GET /nodes/{node}/storage` does not show).
fn holds(kind: &str, format: &str) -> Option<bool> {
    match (kind, format) {
        (_, "raw") => Some(true),
        ("lvmthin" | "zfspool" | "rbd", _) => Some(false),
        ("lvm", "qcow2") => None,
        ("lvm", _) => Some(false),
        _ => Some(true),
    }
}

/// The new disks with a `format` (not imported, not the cloud-init drive, in a slot the VM
/// does not have yet), with their index in `disks`.
pub(super) fn formatted_new_disks<'a>(
    desired: &'a Desired,
    cur: Option<&Current>,
) -> Vec<(usize, &'a str, &'a str)> {
    desired
        .disks
        .iter()
        .enumerate()
        .filter(|(_, disk)| !disk.cloudinit && disk.import_from.is_none())
        .filter(|(_, disk)| cur.is_none_or(|c| !c.config.contains_key(&disk.slot)))
        .filter_map(|(i, disk)| Some((i, disk.storage.as_str(), disk.format.as_deref()?)))
        .collect()
}

/// Refuses a new disk whose storage (by its type in `storages`) cannot hold its `format`,
/// naming `disks[N].format`, the storage and its type.
pub(super) fn check(
    disks: &[(usize, &str, &str)],
    storages: &[NodeStorage],
    node: &str,
) -> Result<(), String> {
    for (i, storage, format) in disks {
        let Some(kind) = storages
            .iter()
            .find(|s| s.storage == *storage)
            .and_then(|s| s.kind.as_deref())
        else {
            continue;
        };
        if holds(kind, format) == Some(false) {
            return Err(format!(
                "disks[{i}].format: storage {storage} on node {node} is of type {kind}, which cannot hold a {format} volume (PVE's {kind} plugin allocates raw volumes only): give format: raw, leave format out, or put the disk on a file storage such as a directory"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_storage_type_as_alloc_image_takes_them() {
        assert_eq!(holds("lvmthin", "qcow2"), Some(false));
        assert_eq!(holds("zfspool", "vmdk"), Some(false));
        assert_eq!(holds("rbd", "qcow2"), Some(false));
        assert_eq!(holds("lvm", "vmdk"), Some(false));
        assert_eq!(holds("lvm", "qcow2"), None);
        assert_eq!(holds("lvmthin", "raw"), Some(true));
        assert_eq!(holds("dir", "qcow2"), Some(true));
        assert_eq!(holds("nfs", "vmdk"), Some(true));
    }
}
