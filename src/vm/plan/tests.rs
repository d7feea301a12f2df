//! The plan's tests: what `plan(desired, current)` decides, from plain data.

use super::*;
use crate::pve::values::drive::exact_gib;

/// A real public key (tests/keys, made with ssh-keygen).
const TEST_KEY: &str = include_str!("../../../tests/keys/test_ed25519.pub").trim_ascii_end();

pub(super) fn desired() -> Desired {
    let mut config = BTreeMap::new();
    config.insert("name".into(), "web".into());
    config.insert("cores".into(), "2".into());
    config.insert("net0".into(), "virtio,bridge=vmbr0".into());
    config.insert("tags".into(), "a;b".into());
    config.insert("sshkeys".into(), crate::pve::encode::url_encode(TEST_KEY));
    Desired {
        state: State::Present,
        vmid: Some(100),
        name: Some("web".into()),
        node: Some("pve1".into()),
        config,
        create_only: BTreeMap::from([
            ("cipassword".to_string(), "pw".to_string()),
            ("boot".to_string(), "order=scsi0".to_string()),
        ]),
        disks: vec![
            Disk {
                slot: "scsi0".into(),
                storage: "local-lvm".into(),
                import_from: Some("local:import/noble.qcow2".into()),
                size: Some(20 << 30),
                format: None,
                opts: BTreeMap::from([("discard".to_string(), "on".to_string())]),
                cloudinit: false,
                ..Default::default()
            },
            Disk {
                slot: "ide2".into(),
                storage: "local-lvm".into(),
                import_from: None,
                size: None,
                format: None,
                opts: BTreeMap::new(),
                cloudinit: true,
                ..Default::default()
            },
        ],
        pool: None,
        purge: true,
        shutdown_timeout: 180,
        force_stop: true,
        restart_when_needed: false,
        wait_for_ip: None,
        clone: None,
        template: false,
        fixed: BTreeMap::new(),
        recreate: Vec::new(),
        cdroms: Vec::new(),
        migrate: false,
        target_storage: None,
        ha: None,
        snapshot_before_change: None,
        snapshot_retention: 0,
        nocloud: None,
        absent_disks: Vec::new(),
        unused_disks: Default::default(),
    }
}

fn current(pairs: &[(&str, &str)], running: bool) -> Current {
    Current {
        vmid: 100,
        node: "pve1".into(),
        config: pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect(),
        raw: Value::Null,
        running,
    }
}

pub(super) fn matching() -> Current {
    current(
        &[
            ("name", "web"),
            ("cores", "2"),
            ("net0", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0"),
            ("tags", "b;a"),
            (
                "sshkeys",
                "ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIGp1GhsuLNCCP2XBoyqIvjfAGsZ7Xr9FfmT4HYK3r0F8%20test%40sankofa",
            ),
            ("scsi0", "local-lvm:vm-100-disk-0,discard=on,size=20G"),
            ("ide2", "local-lvm:vm-100-cloudinit,media=cdrom"),
            ("cipassword", "**********"),
            ("digest", "abc"),
        ],
        false,
    )
}

#[test]
fn create_carries_everything_in_one_request() {
    let planned = plan(&desired(), None).unwrap();
    let [Step::Create { node, config, .. }] = planned.steps.as_slice() else {
        panic!("{:?}", planned.steps)
    };
    assert_eq!(node, "pve1");
    let get = |key: &str| {
        config
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    };
    assert_eq!(
        get("scsi0"),
        Some("local-lvm:0,discard=on,import-from=local:import/noble.qcow2")
    );
    assert_eq!(get("ide2"), Some("local-lvm:cloudinit"));
    // Hashed as encrypt_pw would (create_vm stores what it is sent), never plain.
    let hash = get("cipassword").unwrap();
    let salt = hash.strip_prefix("$5$").unwrap().split('$').next().unwrap();
    assert_eq!(crypt::sha256_crypt(b"pw", salt, None), hash);
    assert_eq!(get("boot"), Some("order=scsi0"));
    assert!(planned.before.is_empty() && planned.after.contains_key("scsi0"));
}

#[test]
fn cipassword_stays_plain_for_windows_and_a_hash_is_sent_as_it_is() {
    let mut asked = desired();
    asked.config.insert("ostype".into(), "win11".into());
    let planned = plan(&asked, None).unwrap();
    let [Step::Create { config: params, .. }] = planned.steps.as_slice() else {
        panic!("{:?}", planned.steps)
    };
    assert!(
        params.contains(&("cipassword".into(), "pw".into())),
        "{params:?}"
    );
    let mut asked = desired();
    let hash = crypt::sha256_crypt(b"pw", "saltsalt", None);
    asked.create_only.insert("cipassword".into(), hash.clone());
    let planned = plan(&asked, None).unwrap();
    let [Step::Create { config: params, .. }] = planned.steps.as_slice() else {
        panic!("{:?}", planned.steps)
    };
    assert!(params.contains(&("cipassword".into(), hash)), "{params:?}");
    // An update to an existing Windows VM (ostype not given) keeps it plain too.
    let mut asked = desired();
    asked.config.insert("cipassword".into(), "pw".into());
    let mut cur = matching();
    cur.config.insert("ostype".into(), "win10".into());
    let planned = plan(&asked, Some(&cur)).unwrap();
    assert_eq!(
        planned.steps,
        vec![Step::Update {
            set: vec![("cipassword".into(), "pw".into())]
        }]
    );
}

#[test]
fn an_empty_value_is_a_delete() {
    let mut asked = desired();
    asked.config.insert("description".into(), String::new());
    // Nothing to delete: nothing to do.
    assert_eq!(plan(&asked, Some(&matching())).unwrap().steps, vec![]);
    let mut cur = matching();
    cur.config.insert("description".into(), "old".into());
    let planned = plan(&asked, Some(&cur)).unwrap();
    assert_eq!(
        planned.steps,
        vec![Step::Update {
            set: vec![("delete".into(), "description".into())]
        }]
    );
    assert_eq!(planned.steps[0].describe(), "delete description");
    // At create it is not sent.
    let planned = plan(&asked, None).unwrap();
    let [Step::Create { config: params, .. }] = planned.steps.as_slice() else {
        panic!("{:?}", planned.steps)
    };
    assert!(!params.iter().any(|(key, _)| key == "description"));
}

#[test]
fn matching_vm_needs_nothing() {
    assert_eq!(plan(&desired(), Some(&matching())).unwrap().steps, vec![]);
}

#[test]
fn changes_only_what_differs_and_keeps_the_mac() {
    let mut cur = matching();
    cur.config.insert("cores".into(), "1".into());
    cur.config.insert(
        "net0".into(),
        "virtio=BC:24:11:AA:BB:CC,bridge=vmbr1".into(),
    );
    let planned = plan(&desired(), Some(&cur)).unwrap();
    assert_eq!(
        planned.steps,
        vec![Step::Update {
            set: vec![
                ("cores".into(), "2".into()),
                (
                    "net0".into(),
                    "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0".into()
                )
            ]
        }]
    );
    assert_eq!(planned.before["cores"], "1");
    assert_eq!(planned.after["cores"], "2");
}

#[test]
fn new_disks_are_asked_for_in_exact_gib() {
    assert_eq!(exact_gib(20 << 30), "20");
    assert_eq!(exact_gib(3 << 29), "1.5");
    assert_eq!(exact_gib(1 << 20), "0.0009765625");
    assert_eq!(exact_gib((1 << 30) + 1024), "1.00000095367431640625");
}

#[test]
fn check_mode_sees_the_steps_after_a_create() {
    let mut asked = desired();
    asked.state = State::Started;
    let first = plan(&asked, None).unwrap();
    assert!(matches!(first.steps.as_slice(), [Step::Create { .. }]));
    let after = plan(&asked, Some(&predict_created(&asked, 100, "pve1"))).unwrap();
    let labels: Vec<String> = after.steps.iter().map(Step::describe).collect();
    assert_eq!(labels, vec!["resize scsi0 to 20G", "start"], "{labels:?}");
    asked.state = State::Present;
    asked.disks[0].size = None;
    assert!(
        plan(&asked, Some(&predict_created(&asked, 100, "pve1")))
            .unwrap()
            .steps
            .is_empty()
    );
}

#[test]
fn a_disk_rounded_up_to_lvm_extents_is_neither_shrunk_nor_grown() {
    let mut asked = desired();
    asked.disks[0].size = Some(10001 << 20);
    let mut cur = matching();
    cur.config.insert(
        "scsi0".into(),
        "local-lvm:vm-100-disk-0,discard=on,size=10004M".into(),
    );
    let planned = plan(&asked, Some(&cur)).unwrap();
    assert!(
        !planned
            .steps
            .iter()
            .any(|step| matches!(step, Step::Resize { .. })),
        "{:?}",
        planned.steps
    );
}

#[test]
fn grows_but_never_shrinks_or_reimports() {
    let mut cur = matching();
    cur.config.insert(
        "scsi0".into(),
        "local-lvm:vm-100-disk-0,discard=on,size=2G".into(),
    );
    let planned = plan(&desired(), Some(&cur)).unwrap();
    assert_eq!(
        planned.steps,
        vec![Step::Resize {
            slot: "scsi0".into(),
            from: 2 << 30,
            to: 20 << 30
        }]
    );
    cur.config.insert(
        "scsi0".into(),
        "local-lvm:vm-100-disk-0,discard=on,size=40G".into(),
    );
    assert!(
        plan(&desired(), Some(&cur))
            .unwrap_err()
            .contains("refusing to shrink scsi0 from 40G to 20G")
    );
}

#[test]
fn missing_disk_is_added_through_the_config_task() {
    let mut cur = matching();
    cur.config.remove("scsi0");
    let planned = plan(&desired(), Some(&cur)).unwrap();
    assert_eq!(
        planned.steps,
        vec![Step::Update {
            set: vec![(
                "scsi0".into(),
                "local-lvm:0,discard=on,import-from=local:import/noble.qcow2".into()
            )]
        }]
    );
}

#[test]
fn power_states() {
    let mut asked = desired();
    asked.state = State::Started;
    assert_eq!(
        plan(&asked, Some(&matching())).unwrap().steps,
        vec![Step::Start]
    );
    let mut running = matching();
    running.running = true;
    assert_eq!(plan(&asked, Some(&running)).unwrap().steps, vec![]);
    asked.state = State::Stopped;
    assert_eq!(
        plan(&asked, Some(&running)).unwrap().steps,
        vec![Step::Shutdown {
            timeout: 180,
            force: true
        }]
    );
    asked.state = State::Restarted;
    assert_eq!(
        plan(&asked, Some(&running)).unwrap().steps,
        vec![Step::Reboot]
    );
    asked.state = State::Absent;
    assert_eq!(
        plan(&asked, Some(&running)).unwrap().steps,
        vec![Step::Stop, Step::Destroy { purge: true }]
    );
    assert_eq!(plan(&asked, None).unwrap().steps, vec![]);
}

#[test]
fn normalisation() {
    let linux = Guest::default();
    let same = |key: &str, want: &str, have: &str| same(key, want, have, linux).unwrap();
    assert!(same("tags", "a;b", "b,a"));
    assert!(same("memory", "2048", "current=2048"));
    assert!(same("cpu", "host", "cputype=host"));
    assert!(same("agent", "1", "enabled=1,fstrim_cloned_disks=1"));
    assert!(same(
        "ipconfig0",
        "gw=10.0.0.1,ip=10.0.0.5/24",
        "ip=10.0.0.5/24,gw=10.0.0.1"
    ));
    assert!(!same(
        "net0",
        "virtio,bridge=vmbr0,firewall=1",
        "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0"
    ));
    assert!(same(
        "net0",
        "virtio=bc:24:11:aa:bb:cc,bridge=vmbr0",
        "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0"
    ));
    assert_eq!(
        drive_size("local-lvm:vm-100-disk-0,size=3584M"),
        Some(3584 << 20)
    );
}

#[test]
fn a_vm_elsewhere_moves_first_only_when_asked() {
    let mut cur = matching();
    cur.node = "pve2".into();
    cur.running = true;
    cur.config.insert("cores".into(), "1".into());
    // Without migrate: converged where it is.
    let planned = plan(&desired(), Some(&cur)).unwrap();
    assert!(
        !planned
            .steps
            .iter()
            .any(|step| matches!(step, Step::Migrate { .. }))
    );
    let mut asked = desired();
    asked.migrate = true;
    asked.target_storage = Some("local".into());
    let planned = plan(&asked, Some(&cur)).unwrap();
    let labels: Vec<String> = planned.steps.iter().map(Step::describe).collect();
    assert_eq!(
        labels,
        [
            "migrate from pve2 to pve1 (live, disks to local)",
            "update cores"
        ]
    );
    assert_eq!(
        (
            planned.before["node"].as_str(),
            planned.after["node"].as_str()
        ),
        ("pve2", "pve1")
    );
    // A VM to be stopped is shut down first and moves offline.
    asked.state = State::Stopped;
    let labels: Vec<String> = plan(&asked, Some(&cur))
        .unwrap()
        .steps
        .iter()
        .map(Step::describe)
        .collect();
    assert_eq!(
        labels,
        [
            "shut down",
            "migrate from pve2 to pve1 (offline, disks to local)",
            "update cores"
        ]
    );
    // On its node already: nothing moves.
    cur.node = "pve1".into();
    let planned = plan(&asked, Some(&cur)).unwrap();
    assert!(
        !planned
            .steps
            .iter()
            .any(|step| matches!(step, Step::Migrate { .. }))
    );
    assert!(!planned.after.contains_key("node"));
}

#[test]
fn creating_needs_a_node() {
    let mut asked = desired();
    asked.node = None;
    assert!(plan(&asked, None).unwrap_err().contains("node is required"));
}

/// The update a plan sends, as its pairs.
fn update_of(planned: &Plan) -> Vec<(String, String)> {
    planned
        .steps
        .iter()
        .find_map(|step| match step {
            Step::Update { set } => Some(set.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn a_vm_without_a_boot_device_gets_the_first_disk_it_is_given() {
    let asked = desired();
    let without_disk = |boot: Option<&str>| {
        let mut cur = matching();
        cur.config.remove("scsi0");
        if let Some(boot) = boot {
            cur.config.insert("boot".into(), boot.into());
        }
        cur
    };
    // PVE's blank order (" "): the disk and the create's order go in one update.
    let set = update_of(&plan(&asked, Some(&without_disk(Some(" ")))).unwrap());
    assert!(set.iter().any(|(key, _)| key == "scsi0"), "{set:?}");
    assert!(
        set.contains(&("boot".into(), "order=scsi0".into())),
        "{set:?}"
    );
    // An order PVE keeps (or none: the legacy default boots the disk) is left alone, and so
    // is a blank one when the disk is there already or an order is asked for.
    for cur in [without_disk(Some("order=net0")), without_disk(None)] {
        let set = update_of(&plan(&asked, Some(&cur)).unwrap());
        assert!(!set.iter().any(|(key, _)| key == "boot"), "{set:?}");
    }
    let mut blank = matching();
    blank.config.insert("boot".into(), " ".into());
    assert!(plan(&asked, Some(&blank)).unwrap().steps.is_empty());
    let mut ordered = desired();
    ordered.config.insert("boot".into(), "order=net0".into());
    let set = update_of(&plan(&ordered, Some(&without_disk(Some(" ")))).unwrap());
    assert!(
        set.contains(&("boot".into(), "order=net0".into())),
        "{set:?}"
    );
}

#[test]
fn a_balloon_above_the_memory_is_refused_before_the_update() {
    let mut asked = desired();
    asked.config.insert("balloon".into(), "1024".into());
    let mut cur = matching();
    cur.config.insert("memory".into(), "current=512".into());
    let e = plan(&asked, Some(&cur)).unwrap_err();
    assert!(
        e.contains("balloon (1024 MiB)") && e.contains("memory (512 MiB)"),
        "{e}"
    );
    // Lowering the memory under the VM's balloon is refused alike; within it, it is sent.
    let mut asked = desired();
    asked.config.insert("memory".into(), "1024".into());
    cur.config.insert("balloon".into(), "2048".into());
    assert!(
        plan(&asked, Some(&cur))
            .unwrap_err()
            .contains("balloon (2048 MiB)")
    );
    cur.config.insert("balloon".into(), "1024".into());
    let set = update_of(&plan(&asked, Some(&cur)).unwrap());
    assert!(set.contains(&("memory".into(), "1024".into())), "{set:?}");
}

#[test]
fn a_disk_of_another_format_is_reported_not_changed() {
    let mut asked = desired();
    asked.disks[0].format = Some("qcow2".into());
    let planned = plan(&asked, Some(&matching())).unwrap();
    assert!(planned.steps.is_empty(), "{:?}", planned.steps);
    assert!(
        planned
            .notes
            .iter()
            .any(|n| n.contains("scsi0 as a raw volume") && n.contains("not qcow2")),
        "{:?}",
        planned.notes
    );
    asked.disks[0].format = Some("raw".into());
    assert!(plan(&asked, Some(&matching())).unwrap().notes.is_empty());
}
