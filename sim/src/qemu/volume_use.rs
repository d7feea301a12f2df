//! Whether a VM still uses a volume, as qemu-server's `Drive.pm` `is_volume_in_use` answers
//! it: a drive of the config (but the one being moved or freed) or of any snapshot section
//! names it. `move_vm_disk` asks it of the disk it moves (a disk with snapshots), and
//! `try_deallocate_drive` before it frees an `unusedN` (or a forced delete). A leaf on data.

use std::collections::BTreeMap;

use crate::qemu::snapshot_sections::Snapshots;
use crate::schema;

/// Whether `volid` is a drive's volume in `conf` (skipping the key `skip`) or in any of
/// `snapshots`' sections (none skipped). A CD-ROM drive does not count (`drive_is_cdrom`
/// without the cloud-init drive), nor an `unusedN` (not a valid drive name).
pub fn is_volume_in_use(
    conf: &BTreeMap<String, String>,
    snapshots: &Snapshots,
    skip: Option<&str>,
    volid: &str,
) -> bool {
    let names = |section: &BTreeMap<String, String>, skip: Option<&str>| {
        section.iter().any(|(key, value)| {
            if !schema::is_drive_key(key) || skip == Some(key.as_str()) {
                return false;
            }
            let Ok(drive) = schema::parse_drive(value) else {
                return false;
            };
            let cdrom = drive.get("media").is_some_and(|m| m == "cdrom");
            !cdrom && drive.get("file").is_some_and(|f| f == volid)
        })
    };
    names(conf, skip) || snapshots.values().any(|snap| names(snap, None))
}

#[cfg(test)]
mod unit {
    use super::*;

    fn section(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn snapshots_and_other_drives_use_a_volume() {
        let conf = section(&[
            ("scsi0", "local-lvm:vm-100-disk-0,size=1G"),
            ("ide2", "local:iso/debian.iso,media=cdrom"),
            ("unused0", "local-lvm:vm-100-disk-1"),
        ]);
        let mut snaps = Snapshots::new();
        assert!(!is_volume_in_use(
            &conf,
            &snaps,
            Some("scsi0"),
            "local-lvm:vm-100-disk-0"
        ));
        assert!(is_volume_in_use(
            &conf,
            &snaps,
            None,
            "local-lvm:vm-100-disk-0"
        ));
        assert!(!is_volume_in_use(
            &conf,
            &snaps,
            None,
            "local:iso/debian.iso"
        ));
        assert!(!is_volume_in_use(
            &conf,
            &snaps,
            None,
            "local-lvm:vm-100-disk-1"
        ));
        snaps.insert(
            "before".into(),
            section(&[("scsi0", "local-lvm:vm-100-disk-0,size=1G")]),
        );
        assert!(is_volume_in_use(
            &conf,
            &snaps,
            Some("scsi0"),
            "local-lvm:vm-100-disk-0"
        ));
    }
}
