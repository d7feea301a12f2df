//! The plan's tests of a disk's life after its create: moves, detaches, deletes and unused
//! volumes, from plain data (the `disk_life` part of `plan`).

use super::tests::{desired, matching};
use super::*;
use crate::vm::disk_life::{DiskMove, DiskStep};
use crate::vm::disk_life_options::UnusedDisks;

fn on_local(mut asked: Desired) -> Desired {
    asked.disks[0].storage = "local".into();
    asked
}

fn absent(slot: &str, purge: bool) -> Disk {
    Disk {
        slot: slot.into(),
        absent: true,
        purge,
        ..Default::default()
    }
}

#[test]
fn a_disk_on_another_storage_is_moved_never_imported_again() {
    let planned = plan(&on_local(desired()), Some(&matching())).unwrap();
    assert_eq!(
        planned.steps,
        vec![Step::Disk(DiskStep::Move(DiskMove {
            slot: "scsi0".into(),
            value: "local-lvm:vm-100-disk-0,discard=on,size=20G".into(),
            from: "local-lvm".into(),
            to: "local".into(),
            format: None,
            keep_source: false,
        }))]
    );
    assert_eq!(planned.before["scsi0.storage"], "local-lvm");
    assert_eq!(planned.after["scsi0.storage"], "local");
    assert_eq!(
        planned.steps[0].describe(),
        "move scsi0 from local-lvm to local"
    );
    // The import_from of the disk that exists is not sent again, and a warning says so.
    assert!(
        !planned
            .steps
            .iter()
            .any(|step| matches!(step, Step::Update { .. }))
    );
    assert!(
        planned.notes[0].contains("not imported again from local:import/noble.qcow2"),
        "{:?}",
        planned.notes
    );
}

#[test]
fn a_move_carries_a_new_format_and_may_keep_its_source() {
    let mut asked = on_local(desired());
    asked.disks[0].format = Some("qcow2".into());
    asked.disks[0].keep_source = true;
    let planned = plan(&asked, Some(&matching())).unwrap();
    let [Step::Disk(DiskStep::Move(moved))] = planned.steps.as_slice() else {
        panic!("{:?}", planned.steps)
    };
    assert_eq!(moved.format.as_deref(), Some("qcow2"));
    assert!(moved.keep_source);
    // The format differs only because the disk moves: no note that it was left.
    assert!(
        !planned
            .notes
            .iter()
            .any(|note| note.contains("so it was left")),
        "{:?}",
        planned.notes
    );
    // A format the volume has already is not sent.
    let mut cur = matching();
    cur.config.insert(
        "scsi0".into(),
        "local-lvm:vm-100-disk-0,discard=on,size=20G".into(),
    );
    asked.disks[0].format = Some("raw".into());
    let planned = plan(&asked, Some(&cur)).unwrap();
    let [Step::Disk(DiskStep::Move(moved))] = planned.steps.as_slice() else {
        panic!("{:?}", planned.steps)
    };
    assert_eq!(moved.format, None);
}

#[test]
fn a_templates_disks_and_base_volumes_are_never_moved() {
    let mut cur = matching();
    cur.config.insert("template".into(), "1".into());
    let refused = plan(&on_local(desired()), Some(&cur)).unwrap_err();
    assert!(
        refused.contains(
            "refusing to move scsi0 of VM 100 from local-lvm to local: VM 100 is a template"
        ),
        "{refused}"
    );
    assert!(
        refused.contains("clone: {vmid: 100, full: true, storage: local}"),
        "{refused}"
    );
    let mut cur = matching();
    cur.config.insert(
        "scsi0".into(),
        "local-lvm:base-100-disk-0,discard=on,size=20G".into(),
    );
    let refused = plan(&on_local(desired()), Some(&cur)).unwrap_err();
    assert!(
        refused.contains("is a base volume that linked clones read"),
        "{refused}"
    );
    // A linked clone's own disk moves, as a full copy: said in a note.
    cur.config.insert(
        "scsi0".into(),
        "local-lvm:base-90-disk-0/vm-100-disk-0,discard=on,size=20G".into(),
    );
    let planned = plan(&on_local(desired()), Some(&cur)).unwrap();
    assert!(matches!(
        planned.steps.as_slice(),
        [Step::Disk(DiskStep::Move(_))]
    ));
    assert!(
        planned
            .notes
            .iter()
            .any(|note| note.contains("linked clone of base-90-disk-0")),
        "{:?}",
        planned.notes
    );
}

#[test]
fn a_clones_disk_without_storage_stays_where_it_is() {
    let mut asked = desired();
    asked.disks[0].storage = String::new();
    assert_eq!(plan(&asked, Some(&matching())).unwrap().steps, vec![]);
}

#[test]
fn an_absent_disk_is_detached_in_the_config_update() {
    let mut asked = desired();
    asked.absent_disks = vec![absent("scsi1", false)];
    let mut cur = matching();
    cur.config
        .insert("scsi1".into(), "local-lvm:vm-100-disk-1,size=1G".into());
    let planned = plan(&asked, Some(&cur)).unwrap();
    assert_eq!(
        planned.steps,
        vec![Step::Update {
            set: vec![("delete".into(), "scsi1".into())]
        }]
    );
    assert_eq!(planned.before["scsi1"], "local-lvm:vm-100-disk-1,size=1G");
    assert_eq!(planned.after["scsi1"], "");
    // Once detached, nothing is left to do.
    cur.config.remove("scsi1");
    cur.config
        .insert("unused0".into(), "local-lvm:vm-100-disk-1".into());
    assert_eq!(plan(&asked, Some(&cur)).unwrap().steps, vec![]);
}

#[test]
fn an_absent_disk_with_purge_is_deleted_with_its_volume() {
    let mut asked = desired();
    asked.absent_disks = vec![absent("scsi1", true)];
    let mut cur = matching();
    cur.config
        .insert("scsi1".into(), "local-lvm:vm-100-disk-1,size=1G".into());
    let planned = plan(&asked, Some(&cur)).unwrap();
    assert_eq!(
        planned.steps,
        vec![Step::Disk(DiskStep::Unlink {
            keys: vec!["scsi1".into()]
        })]
    );
    assert_eq!(planned.before["scsi1.volume"], "local-lvm:vm-100-disk-1");
    assert_eq!(planned.after["scsi1.volume"], "");
}

#[test]
fn the_boot_disk_is_detached_only_when_boot_no_longer_names_it() {
    let mut asked = desired();
    asked.disks.remove(0);
    asked.absent_disks = vec![absent("scsi0", false)];
    let mut cur = matching();
    cur.config.insert("boot".into(), "order=scsi0;net0".into());
    let refused = plan(&asked, Some(&cur)).unwrap_err();
    assert!(
        refused.contains(
            "refusing to detach scsi0 of VM 100: its boot order (order=scsi0;net0) names it"
        ),
        "{refused}"
    );
    asked.config.insert("boot".into(), "order=scsi0".into());
    assert!(plan(&asked, Some(&cur)).is_err());
    asked.config.insert("boot".into(), "order=net0".into());
    let planned = plan(&asked, Some(&cur)).unwrap();
    assert_eq!(
        planned.steps,
        vec![Step::Update {
            set: vec![
                ("boot".into(), "order=net0".into()),
                ("delete".into(), "scsi0".into())
            ]
        }]
    );
    // The legacy bootdisk names it too.
    let mut cur = matching();
    cur.config.insert("bootdisk".into(), "scsi0".into());
    asked.config.remove("boot");
    assert!(
        plan(&asked, Some(&cur))
            .unwrap_err()
            .contains("refusing to detach scsi0")
    );
}

#[test]
fn a_cd_rom_is_not_detached_as_a_disk() {
    let mut asked = desired();
    asked.disks.retain(|disk| !disk.cloudinit);
    asked.absent_disks = vec![absent("ide2", false)];
    let refused = plan(&asked, Some(&matching())).unwrap_err();
    assert!(
        refused.contains("is a CD-ROM or cloud-init drive"),
        "{refused}"
    );
}

#[test]
fn unused_volumes_are_removed_only_when_the_vm_owns_them() {
    let mut cur = matching();
    cur.config
        .insert("unused0".into(), "local-lvm:vm-100-disk-3".into());
    cur.config
        .insert("unused1".into(), "local-lvm:vm-200-disk-0".into());
    let mut asked = desired();
    assert_eq!(plan(&asked, Some(&cur)).unwrap().steps, vec![]);
    asked.unused_disks = UnusedDisks::Remove;
    let planned = plan(&asked, Some(&cur)).unwrap();
    assert_eq!(
        planned.steps,
        vec![Step::Disk(DiskStep::Unlink {
            keys: vec!["unused0".into()]
        })]
    );
    assert!(planned.notes[0].contains("unused1 (local-lvm:vm-200-disk-0) is not its own volume"));
    // With unused_disks: remove, a disk detached is deleted at once (not left unused).
    asked.absent_disks = vec![absent("scsi1", false)];
    cur.config
        .insert("scsi1".into(), "local-lvm:vm-100-disk-1,size=1G".into());
    let planned = plan(&asked, Some(&cur)).unwrap();
    assert_eq!(
        planned.steps,
        vec![Step::Disk(DiskStep::Unlink {
            keys: vec!["scsi1".into(), "unused0".into()]
        })]
    );
}

#[test]
fn a_smaller_size_fails_before_any_step_even_with_a_move() {
    // bpg#2385: a smaller size on an imported disk never detaches, re-imports or deletes.
    let mut cur = matching();
    cur.config.insert(
        "scsi0".into(),
        "local-lvm:vm-100-disk-0,discard=on,size=40G".into(),
    );
    for asked in [desired(), on_local(desired())] {
        let refused = plan(&asked, Some(&cur)).unwrap_err();
        assert!(
            refused.contains("refusing to shrink scsi0 from 40G to 20G"),
            "{refused}"
        );
    }
    let mut asked = desired();
    asked.unused_disks = UnusedDisks::Remove;
    cur.config
        .insert("unused0".into(), "local-lvm:vm-100-disk-3".into());
    assert!(plan(&asked, Some(&cur)).is_err());
}

#[test]
fn moves_and_deletes_come_after_the_update_and_resizes() {
    let mut asked = on_local(desired());
    asked.absent_disks = vec![absent("scsi1", true)];
    asked.config.insert("cores".into(), "4".into());
    let mut cur = matching();
    cur.config.insert(
        "scsi0".into(),
        "local-lvm:vm-100-disk-0,discard=on,size=2G".into(),
    );
    cur.config
        .insert("scsi1".into(), "local-lvm:vm-100-disk-1,size=1G".into());
    let described: Vec<String> = plan(&asked, Some(&cur))
        .unwrap()
        .steps
        .iter()
        .map(Step::describe)
        .collect();
    assert_eq!(
        described,
        [
            "update cores",
            "resize scsi0 to 20G",
            "move scsi0 from local-lvm to local",
            "delete scsi1 with its volume"
        ]
    );
}

#[test]
fn target_storage_decides_where_a_migrations_disks_go() {
    let mut asked = on_local(desired());
    asked.migrate = true;
    asked.target_storage = Some("local-lvm".into());
    assert_eq!(plan(&asked, Some(&matching())).unwrap().steps, vec![]);
}
