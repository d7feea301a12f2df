//! What a disk's move, detach, delete and unused removal need of PVE's privileges, as
//! qemu-server checks them (API2/Qemu.pm move_vm_disk and unlink; update_vm's delete;
//! QemuServer.pm try_deallocate_drive).

use super::tests::{existing, from_options, needs_of};

fn vm(config: &[(&str, &str)]) -> super::Current {
    existing(100, "pve1", config, false)
}

fn spoken(needs: &[super::Need]) -> Vec<String> {
    needs.iter().map(ToString::to_string).collect()
}

#[test]
fn a_move_needs_disk_config_and_space_on_its_target() {
    let desired = from_options(serde_json::json!({
        "vmid": 100, "node": "pve1",
        "disks": [{"slot": "scsi0", "storage": "local", "size": "2G"}],
    }));
    let cur = vm(&[("scsi0", "local-lvm:vm-100-disk-0,size=2G")]);
    let needs = spoken(&needs_of(&desired, Some(&cur), None));
    assert_eq!(
        needs,
        [
            "reading the VM needs VM.Audit on /vms/100",
            "move scsi0 from local-lvm to local needs VM.Config.Disk on /vms/100",
            "move scsi0 from local-lvm to local needs Datastore.AllocateSpace on /storage/local",
        ]
    );
}

#[test]
fn a_detach_and_a_delete_need_disk_config_and_the_freed_storage() {
    let desired = from_options(serde_json::json!({
        "vmid": 100, "node": "pve1", "unused_disks": "remove",
        "disks": [{"slot": "scsi1", "state": "absent"}],
    }));
    let cur = vm(&[
        ("scsi0", "local-lvm:vm-100-disk-0,size=2G"),
        ("scsi1", "local-lvm:vm-100-disk-1,size=1G"),
        ("unused0", "local:100/vm-100-disk-2.qcow2"),
    ]);
    let needs = spoken(&needs_of(&desired, Some(&cur), None));
    assert_eq!(
        needs,
        [
            "reading the VM needs VM.Audit on /vms/100",
            "delete scsi1, unused0 with their volumes needs VM.Config.Disk on /vms/100",
            "deleting scsi1 (local-lvm:vm-100-disk-1) needs Datastore.AllocateSpace on /storage/local-lvm",
            "deleting unused0 (local:100/vm-100-disk-2.qcow2) needs Datastore.AllocateSpace on /storage/local",
        ]
    );
    // A plain detach is a config delete: VM.Config.Disk.
    let desired = from_options(serde_json::json!({
        "vmid": 100, "node": "pve1",
        "disks": [{"slot": "scsi1", "state": "absent"}],
    }));
    let needs = spoken(&needs_of(&desired, Some(&cur), None));
    assert_eq!(
        needs,
        [
            "reading the VM needs VM.Audit on /vms/100",
            "removing scsi1 needs VM.Config.Disk on /vms/100",
        ]
    );
}
