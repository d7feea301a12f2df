//! The `cdroms` option: CD-ROM drives with ISO media (`<iso>,media=cdrom`), an empty drive
//! (`none,media=cdrom`), or no drive at all, checked and planned in plain data. PVE changes a
//! running VM's medium at once (qemu-server QemuServer.pm `vmconfig_update_disk`: an existing
//! CD-ROM takes `change_medium`); a new IDE or SATA drive, or one removed, waits for the next
//! start (`vmconfig_hotplug_pending` skips them), which the run reports as pending. The
//! drives this module does not own are never touched: PVE's cloud-init drive and the NoCloud
//! seed's CD-ROM.

use std::collections::BTreeMap;

use serde_json::Value;

use super::disks::Disk;
use super::nocloud::seed::is_seed_volume;
use crate::ansible::protocol::Invocation;
use crate::ansible::text::quote;
use crate::ids::storage_id;
use crate::pve::answers::NodeStorage;
use crate::pve::values::Drive;
use crate::pve::values::drive::slot_takes_cdrom;

/// What a CD-ROM drive holds.
#[derive(Clone, Debug, PartialEq)]
pub enum Media {
    /// An ISO volume (`local:iso/debian-12.iso`).
    Iso(String),
    /// No medium: an empty drive (`none`).
    Empty,
}

impl Media {
    /// The drive's volume as PVE stores it.
    pub fn file(&self) -> &str {
        match self {
            Media::Iso(volid) => volid,
            Media::Empty => "none",
        }
    }

    /// The storage of an ISO volume.
    pub fn storage(&self) -> Option<&str> {
        match self {
            Media::Iso(volid) => volid.split_once(':').map(|(storage, _)| storage),
            Media::Empty => None,
        }
    }
}

/// One item of `cdroms`: the drive in `slot` with `media`, or (`None`) no drive there.
#[derive(Clone, Debug, PartialEq)]
pub struct Cdrom {
    pub slot: String,
    pub media: Option<Media>,
}

impl Cdrom {
    /// The drive value written (`local:iso/x.iso,media=cdrom`, `none,media=cdrom`).
    pub fn value(&self) -> Option<String> {
        self.media
            .as_ref()
            .map(|media| format!("{},media=cdrom", media.file()))
    }
}

/// An ISO volume id as pve-storage's `parse_volname` reads one (`<storage>:iso/<name>` with
/// `$ISO_EXT_RE_0`, `.iso` or `.img`), or `none`.
fn media(option: &str, value: &str) -> Result<Media, String> {
    if value == "none" {
        return Ok(Media::Empty);
    }
    let bad = || {
        format!(
            "{option} must be an ISO volume such as local:iso/debian-12.iso (a storage, then iso/ and a file name ending in .iso or .img), or none for an empty drive; got {}",
            quote(value)
        )
    };
    let (storage, name) = value.split_once(':').ok_or_else(bad)?;
    storage_id(option, storage).map_err(|_| bad())?;
    let file = name.strip_prefix("iso/").ok_or_else(bad)?;
    let lower = file.to_ascii_lowercase();
    let plain = !file.is_empty()
        && !file.contains('/')
        && !file
            .chars()
            .any(|c| matches!(c, ',' | '=' | ';' | '\0') || c.is_control() || c.is_whitespace());
    if !plain || !(lower.ends_with(".iso") || lower.ends_with(".img")) || file.len() <= 4 {
        return Err(bad());
    }
    Ok(Media::Iso(value.to_string()))
}

/// The `cdroms` option, checked: each slot one that holds a CD-ROM (IDE, SATA, SCSI), given
/// once, and not a slot `disks` (or the cloud-init drive, `cloudinit_slot`) takes.
pub fn wanted(inv: &Invocation, disks: &[Disk]) -> Result<Vec<Cdrom>, String> {
    let mut out: Vec<Cdrom> = Vec::new();
    for (i, item) in inv
        .params
        .get("cdroms")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let item = item.as_object().ok_or("cdroms items must be dicts")?;
        let option = |key: &str| format!("cdroms[{i}].{key}");
        let slot = item["slot"].as_str().unwrap_or_default().to_string();
        if !slot_takes_cdrom(&slot) {
            return Err(format!(
                "{} must be a slot that holds a CD-ROM (ide0-ide3, sata0-sata5, scsi0-scsi30), got {}",
                option("slot"),
                quote(&slot)
            ));
        }
        if out.iter().any(|cdrom| cdrom.slot == slot) {
            return Err(format!("{}: slot {slot} is given twice", option("slot")));
        }
        if let Some(disk) = disks.iter().find(|disk| disk.slot == slot) {
            let whose = if disk.cloudinit {
                "the cloud-init drive's (cloudinit_slot)"
            } else {
                "a disk's in disks"
            };
            return Err(format!(
                "{}: slot {slot} is {whose}; give the CD-ROM another slot",
                option("slot")
            ));
        }
        let present = item["state"].as_str().unwrap_or("present") == "present";
        let media = match (present, item["iso"].as_str()) {
            (true, Some(iso)) => Some(media(&option("iso"), iso)?),
            (true, None) => {
                return Err(format!(
                    "{} is required with state: present (an ISO volume, or none for an empty drive)",
                    option("iso")
                ));
            }
            (false, _) => None,
        };
        out.push(Cdrom { slot, media });
    }
    Ok(out)
}

/// The drive values a create sends for the CD-ROMs to be there.
pub fn create_values(cdroms: &[Cdrom]) -> Vec<(String, String)> {
    cdroms
        .iter()
        .filter_map(|cdrom| Some((cdrom.slot.clone(), cdrom.value()?)))
        .collect()
}

/// The slots a create's default boot order lists after the first disk: the CD-ROMs with a
/// medium or an empty drive. PVE's update_vm appends a CD-ROM it writes to a boot order that
/// lists devices (a pending change on a running VM), so a drive left out at create would
/// change the boot order on its first medium change.
pub fn boot_devices(cdroms: &[Cdrom]) -> impl Iterator<Item = &str> {
    cdroms
        .iter()
        .filter(|cdrom| cdrom.media.is_some())
        .map(|cdrom| cdrom.slot.as_str())
}

/// Refuses a slot of VM `vmid` whose drive this option must not touch: a disk, PVE's
/// cloud-init drive, the NoCloud seed.
fn check_slot(vmid: u32, slot: &str, have: &str) -> Result<Option<Drive>, String> {
    let Ok(drive) = Drive::parse_stored(slot, have).or_else(|_| Drive::parse_stored_any(have))
    else {
        return Err(format!(
            "cdroms: VM {vmid} has {slot}: {have}, which is not a drive PVE reads; leave the slot out of cdroms"
        ));
    };
    if drive.is_cloudinit() {
        return Err(format!(
            "cdroms: {slot} of VM {vmid} holds PVE's cloud-init drive ({have}), which cdroms never changes; give the CD-ROM another slot (the cloud-init drive is cloudinit_slot's)"
        ));
    }
    if drive.is_cdrom() && is_seed_volume(drive.file()) {
        return Err(format!(
            "cdroms: {slot} of VM {vmid} holds the NoCloud seed ({}), which the nocloud option manages; give the CD-ROM another slot",
            drive.file()
        ));
    }
    if !drive.is_cdrom() {
        return Err(format!(
            "cdroms: {slot} of VM {vmid} is a disk ({have}), not a CD-ROM drive; give the CD-ROM a free slot (PVE cannot change a disk into a CD-ROM; detach the disk first)"
        ));
    }
    Ok(Some(drive))
}

/// Plans the CD-ROMs of the existing VM `vmid` with `config`: a medium inserted, changed or
/// ejected (the slot set), a drive removed (the slot deleted); `before`/`after` get what the
/// diff shows. A drive that holds the medium asked for is left, its other options too.
pub fn plan_media(
    cdroms: &[Cdrom],
    (vmid, config): (u32, &BTreeMap<String, String>),
    set: &mut Vec<(String, String)>,
    delete: &mut Vec<String>,
    before: &mut BTreeMap<String, String>,
    after: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    for cdrom in cdroms {
        let have = config.get(&cdrom.slot);
        let drive = match have {
            Some(have) => check_slot(vmid, &cdrom.slot, have)?,
            None => None,
        };
        match (&cdrom.media, drive) {
            (Some(media), Some(drive)) if drive.file() == media.file() => {}
            (Some(_), _) => {
                let value = cdrom.value().unwrap_or_default();
                before.insert(cdrom.slot.clone(), have.cloned().unwrap_or_default());
                after.insert(cdrom.slot.clone(), value.clone());
                set.push((cdrom.slot.clone(), value));
            }
            (None, Some(_)) => {
                before.insert(cdrom.slot.clone(), have.cloned().unwrap_or_default());
                after.insert(cdrom.slot.clone(), String::new());
                delete.push(cdrom.slot.clone());
            }
            (None, None) => {}
        }
    }
    Ok(())
}

/// The ISO volumes a write of `set` inserts (slot, storage), for the check of their storages.
pub fn inserted_isos<'a>(
    cdroms: &'a [Cdrom],
    set: impl IntoIterator<Item = &'a (String, String)>,
) -> Vec<(&'a str, &'a str)> {
    let written: Vec<&str> = set.into_iter().map(|(key, _)| key.as_str()).collect();
    cdroms
        .iter()
        .filter(|cdrom| written.contains(&cdrom.slot.as_str()))
        .filter_map(|cdrom| {
            Some((
                cdrom.slot.as_str(),
                cdrom.media.as_ref().and_then(Media::storage)?,
            ))
        })
        .collect()
}

/// Refuses an ISO on a storage of node `node` that holds no ISO images (its `content` has no
/// `iso`): PVE's `parse_volname` would read the volume, and the storage would not serve it.
/// A storage the node does not list is left to PVE to answer for.
pub fn check_iso_storages(
    isos: &[(&str, &str)],
    storages: &[NodeStorage],
    node: &str,
) -> Result<(), String> {
    for (slot, storage) in isos {
        if let Some(found) = storages.iter().find(|s| s.storage == *storage)
            && found.content.is_some()
            && !found.holds("iso")
        {
            return Err(format!(
                "cdroms: the ISO for {slot} is on storage {storage}, which on node {node} holds no ISO images (its content is {}); put the ISO on a storage with iso content, such as local",
                found.content.as_deref().unwrap_or_default()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn iso(slot: &str, volid: &str) -> Cdrom {
        Cdrom {
            slot: slot.into(),
            media: Some(if volid == "none" {
                Media::Empty
            } else {
                Media::Iso(volid.into())
            }),
        }
    }

    /// The slots set and the slots deleted.
    type Planned = (Vec<(String, String)>, Vec<String>);

    fn planned(cdroms: &[Cdrom], cur: &BTreeMap<String, String>) -> Result<Planned, String> {
        let (mut set, mut delete) = (Vec::new(), Vec::new());
        let (mut before, mut after) = (BTreeMap::new(), BTreeMap::new());
        plan_media(
            cdroms,
            (100, cur),
            &mut set,
            &mut delete,
            &mut before,
            &mut after,
        )?;
        Ok((set, delete))
    }

    #[test]
    fn iso_volume_ids_are_read_as_pve_reads_them() {
        assert_eq!(
            media("iso", "local:iso/debian-12.iso"),
            Ok(Media::Iso("local:iso/debian-12.iso".into()))
        );
        assert_eq!(media("iso", "none"), Ok(Media::Empty));
        assert!(media("iso", "local:iso/virtio-win.IMG").is_ok());
        for bad in [
            "debian.iso",
            "local:debian.iso",
            "local:iso/debian.qcow2",
            "local:iso/a/b.iso",
            "local:iso/x.iso,media=disk",
            "l:iso/x.iso",
            "local:iso/.iso",
            "/var/lib/vz/template/iso/x.iso",
            "cdrom",
        ] {
            let err = media("cdroms[0].iso", bad).unwrap_err();
            assert!(
                err.starts_with("cdroms[0].iso must be an ISO volume"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn media_are_inserted_changed_ejected_and_drives_removed() {
        let cur = current(&[
            ("ide0", "local:iso/old.iso,media=cdrom,size=4M"),
            ("ide1", "none,media=cdrom"),
            ("sata0", "local:iso/keep.iso,media=cdrom"),
        ]);
        let (set, delete) = planned(
            &[
                iso("ide0", "local:iso/new.iso"),
                iso("ide1", "local:iso/new.iso"),
                iso("sata0", "local:iso/keep.iso"),
                iso("sata1", "none"),
            ],
            &cur,
        )
        .unwrap();
        assert_eq!(
            set,
            [
                (
                    "ide0".to_string(),
                    "local:iso/new.iso,media=cdrom".to_string()
                ),
                (
                    "ide1".to_string(),
                    "local:iso/new.iso,media=cdrom".to_string()
                ),
                ("sata1".to_string(), "none,media=cdrom".to_string()),
            ]
        );
        assert!(delete.is_empty());
        let (set, delete) = planned(
            &[
                iso("ide0", "none"),
                Cdrom {
                    slot: "sata0".into(),
                    media: None,
                },
                Cdrom {
                    slot: "sata3".into(),
                    media: None,
                },
            ],
            &cur,
        )
        .unwrap();
        assert_eq!(set, [("ide0".to_string(), "none,media=cdrom".to_string())]);
        assert_eq!(delete, ["sata0"]);
    }

    #[test]
    fn disks_the_cloud_init_drive_and_the_seed_are_refused_by_name() {
        let cur = current(&[
            ("scsi0", "local-lvm:vm-100-disk-0,size=2G"),
            ("ide2", "local-lvm:vm-100-cloudinit,media=cdrom"),
            (
                "ide3",
                "local:iso/sankofa-100-0000000000111111111122222222223333333333.iso,media=cdrom",
            ),
        ]);
        let err = planned(&[iso("scsi0", "none")], &cur).unwrap_err();
        assert!(err.contains("scsi0 of VM 100 is a disk"), "{err}");
        let err = planned(&[iso("ide2", "local:iso/x.iso")], &cur).unwrap_err();
        assert!(
            err.contains("ide2 of VM 100 holds PVE's cloud-init drive"),
            "{err}"
        );
        let err = planned(
            &[Cdrom {
                slot: "ide3".into(),
                media: None,
            }],
            &cur,
        )
        .unwrap_err();
        assert!(
            err.contains("ide3 of VM 100 holds the NoCloud seed"),
            "{err}"
        );
    }

    #[test]
    fn only_inserted_isos_are_checked_against_storages_without_iso_content() {
        let cdroms = [iso("ide0", "local-lvm:iso/x.iso"), iso("ide1", "none")];
        let set = [
            (
                "ide0".to_string(),
                "local-lvm:iso/x.iso,media=cdrom".to_string(),
            ),
            ("ide1".to_string(), "none,media=cdrom".to_string()),
        ];
        let isos = inserted_isos(&cdroms, &set);
        assert_eq!(isos, [("ide0", "local-lvm")]);
        assert!(inserted_isos(&cdroms, &[]).is_empty());
        let storages: Vec<NodeStorage> = serde_json::from_value(serde_json::json!([
            {"storage": "local", "content": "iso,images"},
            {"storage": "local-lvm", "content": "images,rootdir"}
        ]))
        .unwrap();
        let err = check_iso_storages(&isos, &storages, "pve1").unwrap_err();
        assert!(
            err.contains("storage local-lvm, which on node pve1 holds no ISO images"),
            "{err}"
        );
        assert!(check_iso_storages(&[("ide0", "local")], &storages, "pve1").is_ok());
    }
}
