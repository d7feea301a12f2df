//! What the guest sees after the config converged, decided in plain data: which changes a
//! running VM has not taken yet (PVE's pending section, and cloud-init options its cloud-init
//! drive does not hold). Which addresses the guest agent reports is the answer's own
//! (`pve::answers::GuestInterfaces::addresses`).

use std::collections::BTreeMap;

use crate::pve::answers::PendingKey;

/// The keys `GET …/pending` lists with a `pending` value or a pending `delete`: changes a
/// running VM takes only at its next start (qemu-server, vmconfig_hotplug_pending).
pub fn pending_keys(listing: &[PendingKey]) -> Vec<String> {
    keys_with_changes(listing)
}

/// The cloud-init options `GET …/cloudinit` lists with a `pending` value or a `delete`: set in
/// the config, not yet on the cloud-init drive the guest reads (regenerated at start or by
/// `PUT …/cloudinit`).
pub fn cloudinit_pending(listing: &[PendingKey]) -> Vec<String> {
    keys_with_changes(listing)
}

fn keys_with_changes(listing: &[PendingKey]) -> Vec<String> {
    let mut out: Vec<String> = listing
        .iter()
        .filter(|key| key.changes())
        .map(|key| key.key.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether the VM has a cloud-init drive (a drive whose volume is a cloud-init image).
pub fn has_cloudinit_drive(config: &BTreeMap<String, String>) -> bool {
    config
        .iter()
        .any(|(k, v)| super::validate::is_drive_slot(k) && v.contains("cloudinit"))
}

/// Whether a change of `key` on a running VM may wait for a restart, for check mode's
/// prediction (a real run reads PVE's pending section instead). Conservative: only the keys
/// PVE always applies at once (its "fast plug" options) and new disks and NICs (hotplugged
/// under PVE's default `hotplug: network,disk,usb`) are assumed to apply at once; cloud-init
/// options reach the guest only with a regenerated drive.
pub fn may_need_restart(key: &str, current: &BTreeMap<String, String>) -> bool {
    const FAST: &[&str] = &[
        "description",
        "name",
        "onboot",
        "protection",
        "startup",
        "tags",
    ];
    if FAST.contains(&key) {
        return false;
    }
    // A CD-ROM's medium changes at once (vmconfig_update_disk: change_medium).
    if current.get(key).is_some_and(|value| {
        crate::pve::values::Drive::parse_stored_any(value)
            .is_ok_and(|drive| drive.is_cdrom() && !drive.is_cloudinit())
    }) {
        return false;
    }
    let new_device = !current.contains_key(key)
        && (key.starts_with("net")
            || (super::validate::is_drive_slot(key)
                && !key.starts_with("ide")
                && !key.starts_with("sata")
                && key != "efidisk0"
                && key != "tpmstate0"));
    !new_device
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pve::answers::lenient_list;
    use serde_json::json;

    #[test]
    fn pending_and_cloudinit_listings() {
        let listing = lenient_list(json!([
            {"key": "cores", "value": 1, "pending": 2},
            {"key": "memory", "value": 1024},
            {"key": "serial0", "value": "socket", "delete": 1},
            {"key": "name", "value": "a"}
        ]));
        assert_eq!(pending_keys(&listing), ["cores", "serial0"]);
        let cloudinit = lenient_list(json!([
            {"key": "ciuser", "value": "old", "pending": "new"},
            {"key": "sshkeys", "pending": "x"},
            {"key": "ipconfig0", "value": "ip=dhcp"}
        ]));
        assert_eq!(cloudinit_pending(&cloudinit), ["ciuser", "sshkeys"]);
        assert!(pending_keys(&lenient_list(json!(null))).is_empty());
    }

    #[test]
    fn restart_prediction() {
        let cur: BTreeMap<String, String> = [("net0".to_string(), "virtio".to_string())].into();
        assert!(!may_need_restart("name", &cur));
        assert!(may_need_restart("cores", &cur));
        assert!(may_need_restart("ciuser", &cur));
        assert!(may_need_restart("net0", &cur));
        assert!(!may_need_restart("net1", &cur));
        assert!(!may_need_restart("scsi1", &cur));
        assert!(may_need_restart("sata1", &cur));
    }
}
