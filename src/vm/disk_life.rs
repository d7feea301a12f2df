//! An existing VM's disks after their create, decided: a disk whose `disks[].storage` is not
//! where it lives is moved (qemu-server API2/Qemu.pm `move_vm_disk`), a disk given
//! `state: absent` is detached (update_vm's `delete`: it becomes `unusedN`) or, with `purge`,
//! deleted with its volume (`unlink` with `force`), and with `unused_disks: remove` the
//! `unusedN` volumes the VM owns are deleted. Pure, beside [`super::plan`], which puts these
//! steps in its plan; what needs a read (the snapshots a moved disk's volume is in) is
//! checked by [`super::disk_steps`] before any write.

use std::collections::BTreeMap;

use super::desired::{Desired, Disk};
use super::disk_life_options::UnusedDisks;
use crate::pve::values::drive::volume_format;
use crate::pve::values::{Boot, Drive};

/// A disk step of the plan.
#[derive(Clone, Debug, PartialEq)]
pub enum DiskStep {
    /// `POST …/move_disk` (`qmmove`): `slot`'s volume copied from `from` to `to`.
    Move(DiskMove),
    /// `PUT …/unlink` with `force=1`: these drives and `unusedN` entries taken off the VM,
    /// their volumes freed.
    Unlink { keys: Vec<String> },
}

/// One disk moved to another storage.
#[derive(Clone, Debug, PartialEq)]
pub struct DiskMove {
    pub slot: String,
    /// The drive's value as planned on (a move of a disk changed meanwhile is planned again).
    pub value: String,
    pub from: String,
    pub to: String,
    /// The target format, when it differs from the volume's.
    pub format: Option<String>,
    /// `disks[].keep_source`: the source stays as `unusedN` (PVE's `delete=0`).
    pub keep_source: bool,
}

impl DiskStep {
    /// A short description for messages (`move scsi0 from local-lvm to local`).
    pub fn describe(&self) -> String {
        match self {
            DiskStep::Move(moved) => format!(
                "move {} from {} to {}{}{}",
                moved.slot,
                moved.from,
                moved.to,
                moved
                    .format
                    .as_ref()
                    .map(|format| format!(" as {format}"))
                    .unwrap_or_default(),
                if moved.keep_source {
                    " (keeping the source as unused)"
                } else {
                    ""
                }
            ),
            DiskStep::Unlink { keys } => format!(
                "delete {} with {}",
                keys.join(", "),
                if keys.len() == 1 {
                    "its volume"
                } else {
                    "their volumes"
                }
            ),
        }
    }
}

/// A config update's `delete` in words: its drives detached (they become `unusedN`), its
/// other keys deleted (`detach scsi1, delete tags`).
pub fn describe_deleted(keys: &str) -> String {
    let (drives, others): (Vec<&str>, Vec<&str>) = keys
        .split(',')
        .filter(|key| !key.is_empty())
        .partition(|key| crate::pve::values::drive::is_drive_key(key));
    [("detach", drives), ("delete", others)]
        .into_iter()
        .filter(|(_, keys)| !keys.is_empty())
        .map(|(verb, keys)| format!("{verb} {}", keys.join(",")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the disks' life asks of an existing VM: the keys to detach (sent as `delete` in the
/// plan's config update), the steps after it, what changes (for diff mode) and notes.
#[derive(Debug, Default)]
pub struct DiskLife {
    pub detach: Vec<String>,
    pub steps: Vec<DiskStep>,
    pub before: BTreeMap<String, String>,
    pub after: BTreeMap<String, String>,
    pub notes: Vec<String>,
}

impl DiskLife {
    /// Whether `slot` is moved.
    pub fn moves(&self, slot: &str) -> bool {
        self.steps
            .iter()
            .any(|step| matches!(step, DiskStep::Move(moved) if moved.slot == slot))
    }
}

/// The storage a volume is on (`local-lvm` of `local-lvm:vm-100-disk-0`), if it names one.
pub fn volume_storage(file: &str) -> Option<&str> {
    file.split_once(':')
        .map(|(storage, _)| storage)
        .filter(|s| !s.is_empty() && !s.contains('/'))
}

/// The storage of a drive value, for diff mode's `slot.storage` (empty when it names none).
pub fn drive_storage(value: Option<&String>) -> String {
    value
        .and_then(|v| Drive::parse_stored_any(v).ok())
        .and_then(|drive| drive.storage().map(str::to_string))
        .unwrap_or_default()
}

/// The volume of a drive value, for diff mode's `slot.volume` (empty when there is none).
pub fn drive_file(value: Option<&String>) -> String {
    value
        .and_then(|v| Drive::parse_stored_any(v).ok())
        .map(|drive| drive.file().to_string())
        .unwrap_or_default()
}

/// The last part of a volume's name (`vm-100-disk-0.qcow2` of
/// `local:100/vm-100-disk-0.qcow2`, `vm-101-disk-0` of `base-100-disk-0/vm-101-disk-0`).
fn volume_leaf(file: &str) -> &str {
    let name = file.split_once(':').map_or(file, |(_, name)| name);
    name.rsplit('/').next().unwrap_or(name)
}

/// Whether the volume is one VM `vmid` owns by its name (`vm-<vmid>-…`): the only
/// `unusedN` volumes `unused_disks: remove` deletes.
pub fn owned_by(vmid: u32, file: &str) -> bool {
    volume_leaf(file).starts_with(&format!("vm-{vmid}-"))
}

/// Whether the volume is a base volume (`base-100-disk-0`), which linked clones read.
fn is_base(file: &str) -> bool {
    volume_leaf(file).starts_with("base-")
}

/// Whether the volume is a linked clone's, on a base (`base-100-disk-0/vm-101-disk-0`).
fn linked_to_base(file: &str) -> Option<&str> {
    let name = file.split_once(':').map_or(file, |(_, name)| name);
    name.split('/')
        .find(|part| part.starts_with("base-"))
        .filter(|_| !is_base(file))
}

/// The `unusedN` entries of a config, in key order: (key, volume).
pub fn unused(config: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut found: Vec<(u32, String, String)> = config
        .iter()
        .filter_map(|(key, value)| {
            let n = key.strip_prefix("unused")?.parse::<u32>().ok()?;
            Some((n, key.clone(), value.clone()))
        })
        .collect();
    found.sort();
    found
        .into_iter()
        .map(|(_, key, value)| (key, value))
        .collect()
}

/// The result's `unused_disks`: each `unusedN` with its volume and whether the VM owns it.
pub fn unused_report(vmid: u32, config: &BTreeMap<String, String>) -> serde_json::Value {
    serde_json::Value::Array(
        unused(config)
            .into_iter()
            .map(|(key, volume)| {
                serde_json::json!({
                    "key": key,
                    "owned": owned_by(vmid, &volume),
                    "volume": volume,
                })
            })
            .collect(),
    )
}

/// The devices the VM boots from as its config says (`boot: order=…`, or the legacy
/// `bootdisk`).
fn boot_devices(boot: Option<&String>, bootdisk: Option<&String>) -> Vec<String> {
    let mut devices: Vec<String> = boot
        .and_then(|b| b.parse::<Boot>().ok())
        .and_then(|b| b.devices().map(<[String]>::to_vec))
        .unwrap_or_default();
    let legacy = boot.is_none_or(|b| !b.contains("order="));
    if legacy && let Some(disk) = bootdisk {
        devices.push(disk.clone());
    }
    devices
}

/// The move of an existing disk to `disks[].storage`, refused where PVE would break what
/// depends on it. `None` when it stays.
fn planned_move(
    disk: &Disk,
    drive: &Drive,
    value: &str,
    vmid: u32,
    template: bool,
    notes: &mut Vec<String>,
) -> Result<Option<DiskMove>, String> {
    let file = drive.file();
    let Some(from) = volume_storage(file) else {
        return Ok(None);
    };
    if disk.storage.is_empty() || disk.storage == from {
        return Ok(None);
    }
    let slot = &disk.slot;
    let to = &disk.storage;
    if template {
        return Err(format!(
            "refusing to move {slot} of VM {vmid} from {from} to {to}: VM {vmid} is a template, and its disks are the base volumes its linked clones read (PVE would leave them on the old base): make a full clone on {to} (clone: {{vmid: {vmid}, full: true, storage: {to}}}) and convert that, or give disks[].storage: {from}"
        ));
    }
    if is_base(file) {
        return Err(format!(
            "refusing to move {slot} of VM {vmid} from {from} to {to}: its volume {file} is a base volume that linked clones read: move the linked clones' own disks instead, or give disks[].storage: {from}"
        ));
    }
    if let Some(source) = &disk.import_from {
        notes.push(format!(
            "VM {vmid}'s {slot} exists, so it is moved to {to} as it is, not imported again from {source} (import_from counts only when a disk is created)"
        ));
    }
    if let Some(base) = linked_to_base(file) {
        notes.push(format!(
            "VM {vmid}'s {slot} is a linked clone of {base}: moving it to {to} makes it a full copy of its own"
        ));
    }
    let format = disk
        .format
        .clone()
        .filter(|want| volume_format(file) != Some(want.as_str()));
    Ok(Some(DiskMove {
        slot: slot.clone(),
        value: value.to_string(),
        from: from.to_string(),
        to: to.clone(),
        format,
        keep_source: disk.keep_source,
    }))
}

/// Refuses detaching a disk the boot order names, unless `boot` is given without it.
fn check_boot(
    desired: &Desired,
    config: &BTreeMap<String, String>,
    slot: &str,
    vmid: u32,
) -> Result<(), String> {
    let now = boot_devices(config.get("boot"), config.get("bootdisk"));
    if !now.iter().any(|device| device == slot) {
        return Ok(());
    }
    let asked = desired.config.get("boot");
    let still = asked.is_none_or(|boot| boot_devices(Some(boot), None).iter().any(|d| d == slot));
    if still {
        return Err(format!(
            "refusing to detach {slot} of VM {vmid}: its boot order ({}) names it, so it would boot from what is left: give boot without {slot} (boot: order=…) in the same task, or keep the disk",
            config
                .get("boot")
                .or_else(|| config.get("bootdisk"))
                .cloned()
                .unwrap_or_default()
        ));
    }
    Ok(())
}

/// What the disks' life asks of the VM `vmid` with this config.
pub fn plan(
    desired: &Desired,
    vmid: u32,
    config: &BTreeMap<String, String>,
    template: bool,
) -> Result<DiskLife, String> {
    let mut life = DiskLife::default();
    let mut unlink: Vec<String> = Vec::new();
    for disk in desired
        .disks
        .iter()
        .chain(&desired.absent_disks)
        .filter(|disk| !disk.cloudinit)
    {
        let Some(value) = config.get(&disk.slot) else {
            continue;
        };
        let drive = Drive::parse_stored(&disk.slot, value)
            .or_else(|_| Drive::parse_stored_any(value))
            .map_err(|e| {
                format!(
                    "VM {vmid} has {}: {value}, which is not a drive PVE reads ({e})",
                    disk.slot
                )
            })?;
        if drive.is_cdrom() || drive.is_cloudinit() {
            if disk.absent {
                return Err(format!(
                    "disks: {} of VM {vmid} is a CD-ROM or cloud-init drive ({value}), not a disk: disks[].state: absent detaches disks only",
                    disk.slot
                ));
            }
            continue;
        }
        if disk.absent {
            check_boot(desired, config, &disk.slot, vmid)?;
            life.before.insert(disk.slot.clone(), value.clone());
            life.after.insert(disk.slot.clone(), String::new());
            if disk.purge || desired.unused_disks == UnusedDisks::Remove {
                // PVE frees only a volume the VM owns (try_deallocate_drive,
                // vm_is_volid_owner); another's is only taken off the config.
                if owned_by(vmid, drive.file()) {
                    life.before
                        .insert(format!("{}.volume", disk.slot), drive.file().to_string());
                    life.after
                        .insert(format!("{}.volume", disk.slot), String::new());
                } else {
                    life.notes.push(format!(
                        "VM {vmid}'s {} ({}) is not its own volume (its name is not vm-{vmid}-…): PVE takes it off the config and keeps the volume",
                        disk.slot,
                        drive.file()
                    ));
                }
                unlink.push(disk.slot.clone());
            } else {
                life.detach.push(disk.slot.clone());
            }
            continue;
        }
        // target_storage says where a migration puts the disks: disks[].storage moves none.
        if desired.target_storage.is_some() {
            continue;
        }
        if let Some(moved) = planned_move(disk, &drive, value, vmid, template, &mut life.notes)? {
            life.before
                .insert(format!("{}.storage", disk.slot), moved.from.clone());
            life.after
                .insert(format!("{}.storage", disk.slot), moved.to.clone());
            life.steps.push(DiskStep::Move(moved));
        }
    }
    if desired.unused_disks == UnusedDisks::Remove {
        for (key, volume) in unused(config) {
            if owned_by(vmid, &volume) {
                life.before.insert(key.clone(), volume);
                life.after.insert(key.clone(), String::new());
                unlink.push(key);
            } else {
                life.notes.push(format!(
                    "VM {vmid}'s {key} ({volume}) is not its own volume (its name is not vm-{vmid}-…), so unused_disks: remove left it"
                ));
            }
        }
    }
    if !unlink.is_empty() {
        life.steps.push(DiskStep::Unlink { keys: unlink });
    }
    Ok(life)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_drive_is_told_as_detached() {
        assert_eq!(
            describe_deleted("tags,description"),
            "delete tags,description"
        );
        assert_eq!(describe_deleted("scsi1"), "detach scsi1");
        assert_eq!(describe_deleted("scsi1,tags"), "detach scsi1, delete tags");
    }

    #[test]
    fn volumes_are_owned_by_their_names() {
        assert!(owned_by(100, "local-lvm:vm-100-disk-1"));
        assert!(owned_by(100, "local:100/vm-100-disk-1.qcow2"));
        assert!(owned_by(101, "local-lvm:base-100-disk-0/vm-101-disk-0"));
        assert!(!owned_by(100, "local-lvm:vm-1000-disk-1"));
        assert!(!owned_by(100, "local-lvm:base-100-disk-0"));
        assert!(!owned_by(100, "local:iso/debian.iso"));
    }

    #[test]
    fn base_volumes_and_linked_clones_are_told_apart() {
        assert!(is_base("local-lvm:base-100-disk-0"));
        assert!(is_base("local:100/base-100-disk-0.qcow2"));
        assert!(!is_base("local-lvm:base-100-disk-0/vm-101-disk-0"));
        assert_eq!(
            linked_to_base("local-lvm:base-100-disk-0/vm-101-disk-0"),
            Some("base-100-disk-0")
        );
        assert_eq!(linked_to_base("local-lvm:base-100-disk-0"), None);
        assert_eq!(linked_to_base("local-lvm:vm-101-disk-0"), None);
    }

    #[test]
    fn unused_entries_are_listed_in_their_order() {
        let config = BTreeMap::from([
            (
                "unused10".to_string(),
                "local:100/vm-100-disk-9.raw".to_string(),
            ),
            ("unused2".to_string(), "local-lvm:vm-100-disk-2".to_string()),
            (
                "scsi0".to_string(),
                "local-lvm:vm-100-disk-0,size=2G".to_string(),
            ),
        ]);
        assert_eq!(
            unused(&config),
            [
                ("unused2".to_string(), "local-lvm:vm-100-disk-2".to_string()),
                (
                    "unused10".to_string(),
                    "local:100/vm-100-disk-9.raw".to_string()
                )
            ]
        );
    }

    #[test]
    fn the_boot_order_and_the_legacy_bootdisk_name_devices() {
        let order = "order=scsi0;net0".to_string();
        assert_eq!(boot_devices(Some(&order), None), ["scsi0", "net0"]);
        let legacy = "cdn".to_string();
        let disk = "virtio0".to_string();
        assert_eq!(boot_devices(Some(&legacy), Some(&disk)), ["virtio0"]);
        assert_eq!(boot_devices(Some(&order), Some(&disk)), ["scsi0", "net0"]);
    }
}
