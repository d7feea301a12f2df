//! The `vm` module's disks through their life against `pve-sim`, for a stopped and a running
//! VM: moved to another storage (`qmmove`), detached (`state: absent`, it becomes `unusedN`),
//! deleted (`purge`, `PUT …/unlink`), `unused_disks`; the refusals before any write (a
//! template's disks, a disk with snapshots, the boot disk, a shrink); check and diff mode.
//! The equivalents of community.proxmox's `proxmox_disk` move, detach and delete tasks.

use std::path::PathBuf;

use crate::support::*;
use serde_json::{Value, json};

/// A VM with an imported boot disk and an empty second one, both on `local-lvm`.
fn args(sim: &Sim, state: &str, disks: Value, extra: Value) -> Value {
    merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 100, "name": "disks1", "cores": 1, "memory": 512,
               "scsihw": "virtio-scsi-pci", "state": state, "disks": disks}),
        extra,
    ])
}

fn two_disks(scsi0: &str, scsi1: Value) -> Value {
    let mut disks = vec![json!({"slot": "scsi0", "storage": scsi0,
                                "import_from": "local:import/small.qcow2", "size": "2G"})];
    if !scsi1.is_null() {
        disks.push(scsi1);
    }
    Value::Array(disks)
}

fn second(extra: Value) -> Value {
    merge(&[
        json!({"slot": "scsi1", "storage": "local-lvm", "size": "1G"}),
        extra,
    ])
}

/// The file behind a volume of `local-lvm` or `local` on pve1.
fn volume_file(sim: &Sim, volid: &str) -> PathBuf {
    let (storage, name) = volid.split_once(':').unwrap();
    match storage {
        "local-lvm" => sim.lvm_file("pve1", name),
        "local" => sim
            .data()
            .join("nodes/pve1/local/images")
            .join(name.split_once('/').unwrap().0)
            .join(name.rsplit('/').next().unwrap()),
        other => panic!("no file for storage {other}"),
    }
}

fn config(sim: &Sim) -> Value {
    sim.get("/nodes/pve1/qemu/100/config")["data"].clone()
}

fn volume(value: &Value) -> String {
    value
        .as_str()
        .unwrap_or_default()
        .split(',')
        .next()
        .unwrap()
        .to_string()
}

/// Creates the VM (two disks on local-lvm) as `state` asks.
fn made(sim: &Sim, state: &str) {
    let r = ok(run(args(
        sim,
        state,
        two_disks("local-lvm", second(json!({}))),
        json!({}),
    )));
    assert_eq!(r["config"]["scsi0"], "local-lvm:vm-100-disk-0,size=2G");
}

/// proxmox_disk's move: `storage` on another storage moves the disk (its source deleted), for
/// a stopped and a running VM; the re-run changes nothing.
#[test]
fn a_disk_moves_to_another_storage_stopped_and_running() {
    let img = small_image();
    for state in ["stopped", "started"] {
        let sim = Sim::start(&[&img], &[]);
        made(&sim, state);
        let old = sim.lvm_file("pve1", "vm-100-disk-0");
        assert!(old.exists());
        let moved = args(
            &sim,
            state,
            two_disks("local", second(json!({}))),
            json!({"_ansible_diff": true}),
        );
        let r = ok(run(moved.clone()));
        assert_eq!(r["changed"], true, "{state}");
        assert_eq!(task_types(&r), ["qmmove"], "{state}");
        let want_status = if state == "started" {
            "running"
        } else {
            "stopped"
        };
        assert_eq!(r["status"], want_status);
        let now = volume(&r["config"]["scsi0"]);
        assert!(now.starts_with("local:100/vm-100-disk-"), "{state}: {now}");
        assert!(volume_file(&sim, &now).exists(), "{state}: {now}");
        assert_eq!(virtual_size(&volume_file(&sim, &now), "raw"), 2 << 30);
        // delete=1: the source is gone, no unusedN left.
        assert!(!old.exists(), "{state}: the source stayed");
        assert!(r["config"].get("unused0").is_none(), "{}", r["config"]);
        assert_eq!(r["unused_disks"], json!([]));
        assert_eq!(r["diff"]["before"]["scsi0.storage"], "local-lvm");
        assert_eq!(r["diff"]["after"]["scsi0.storage"], "local");
        // The move request, as PVE takes it.
        let sent: Vec<Value> = sim
            .writes()
            .into_iter()
            .filter(|w| w["path"].as_str().unwrap().ends_with("/move_disk"))
            .collect();
        assert_eq!(sent.len(), 1, "{sent:?}");
        // The disk exists: its import_from is not sent again, as a warning says.
        assert!(
            r["warnings"].as_array().unwrap().iter().any(|w| w
                .as_str()
                .unwrap()
                .contains("not imported again from local:import/small.qcow2")),
            "{}",
            r["warnings"]
        );
        let again = ok(run(moved));
        assert_eq!(again["changed"], false, "{state}: {}", again["msg"]);
        assert_eq!(sim.task_count("qmcreate"), 1, "never imported again");
    }
}

/// `keep_source: true` keeps the source as `unusedN`, which the result lists; `unused_disks:
/// remove` then deletes it (the VM owns it).
#[test]
fn a_kept_source_is_reported_and_removed_by_unused_disks() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    made(&sim, "stopped");
    let disks = json!([
        {"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2", "size": "2G"},
        {"slot": "scsi1", "storage": "local", "size": "1G", "format": "qcow2", "keep_source": true}
    ]);
    let r = ok(run(args(&sim, "stopped", disks.clone(), json!({}))));
    assert_eq!(task_types(&r), ["qmmove"]);
    assert!(
        volume(&r["config"]["scsi1"]).ends_with(".qcow2"),
        "{}",
        r["config"]
    );
    assert_eq!(r["config"]["unused0"], "local-lvm:vm-100-disk-1");
    assert_eq!(
        r["unused_disks"],
        json!([{"key": "unused0", "volume": "local-lvm:vm-100-disk-1", "owned": true}])
    );
    assert!(sim.lvm_file("pve1", "vm-100-disk-1").exists());
    assert_eq!(
        ok(run(args(&sim, "stopped", disks.clone(), json!({}))))["changed"],
        false
    );

    // keep_source and unused_disks: remove exclude each other.
    let r = failed(run(args(
        &sim,
        "stopped",
        disks,
        json!({"unused_disks": "remove"}),
    )));
    assert!(
        r["msg"].as_str().unwrap().contains("disks[1].keep_source"),
        "{}",
        r["msg"]
    );

    let removing = args(
        &sim,
        "stopped",
        json!([
            {"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2", "size": "2G"},
            {"slot": "scsi1", "storage": "local", "size": "1G"}
        ]),
        json!({"unused_disks": "remove", "_ansible_diff": true}),
    );
    let r = ok(run(removing.clone()));
    assert_eq!(r["changed"], true);
    assert!(r["config"].get("unused0").is_none(), "{}", r["config"]);
    assert!(!sim.lvm_file("pve1", "vm-100-disk-1").exists());
    assert_eq!(r["diff"]["before"]["unused0"], "local-lvm:vm-100-disk-1");
    assert_eq!(r["diff"]["after"]["unused0"], "");
    assert_eq!(r["unused_disks"], json!([]));
    assert_eq!(ok(run(removing))["changed"], false);
}

/// proxmox_disk's detach and delete: `state: absent` detaches (the volume stays as
/// `unusedN`), `purge: true` deletes the volume too, for a stopped and a running VM.
#[test]
fn a_disk_is_detached_or_deleted_stopped_and_running() {
    let img = small_image();
    for state in ["stopped", "started"] {
        let sim = Sim::start(&[&img], &[]);
        made(&sim, state);
        let detach = args(
            &sim,
            state,
            two_disks("local-lvm", json!({"slot": "scsi1", "state": "absent"})),
            json!({"_ansible_diff": true}),
        );
        let r = ok(run(detach.clone()));
        assert_eq!(r["changed"], true, "{state}");
        assert_eq!(task_types(&r), ["qmconfig"], "{state}");
        let now = config(&sim);
        assert!(now.get("scsi1").is_none(), "{state}: {now}");
        assert_eq!(now["unused0"], "local-lvm:vm-100-disk-1", "{state}: {now}");
        assert!(sim.lvm_file("pve1", "vm-100-disk-1").exists());
        assert_eq!(
            r["diff"]["before"]["scsi1"],
            "local-lvm:vm-100-disk-1,size=1G"
        );
        assert_eq!(r["diff"]["after"]["scsi1"], "");
        assert_eq!(r["unused_disks"][0]["key"], "unused0");
        assert_eq!(ok(run(detach))["changed"], false, "{state}");

        // A disk added again, then deleted with its volume.
        ok(run(args(
            &sim,
            state,
            two_disks("local-lvm", second(json!({"slot": "scsi2"}))),
            json!({}),
        )));
        let file = volume_file(&sim, &volume(&config(&sim)["scsi2"]));
        assert!(file.exists());
        let delete = args(
            &sim,
            state,
            two_disks(
                "local-lvm",
                json!({"slot": "scsi2", "state": "absent", "purge": true}),
            ),
            json!({"_ansible_diff": true}),
        );
        let r = ok(run(delete.clone()));
        assert_eq!(r["changed"], true, "{state}");
        let now = config(&sim);
        assert!(now.get("scsi2").is_none(), "{state}: {now}");
        assert!(!file.exists(), "{state}: the volume stayed");
        // The detached one before it is left alone (unused_disks: keep).
        assert_eq!(now["unused0"], "local-lvm:vm-100-disk-1", "{state}: {now}");
        assert_eq!(r["diff"]["after"]["scsi2.volume"], "");
        let again = ok(run(delete));
        assert_eq!(again["changed"], false, "{state}: {}", again["msg"]);
    }
}

/// The refusals, each before any write, naming the way out.
#[test]
fn refusals_come_before_any_write_and_name_the_way_out() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    made(&sim, "stopped");
    let writes = sim.writes().len();

    // The boot disk, while boot names it.
    let r = failed(run(args(
        &sim,
        "stopped",
        json!([{"slot": "scsi0", "state": "absent"}]),
        json!({}),
    )));
    let msg = r["msg"].as_str().unwrap();
    assert!(msg.contains("refusing to detach scsi0 of VM 100"), "{msg}");
    assert!(msg.contains("give boot without scsi0"), "{msg}");

    // bpg#2385: a smaller size on an imported disk never detaches, re-imports or deletes,
    // with or without a move.
    for storage in ["local-lvm", "local"] {
        let r = failed(run(args(
            &sim,
            "stopped",
            json!([{"slot": "scsi0", "storage": storage, "import_from": "local:import/small.qcow2", "size": "1G"}]),
            json!({}),
        )));
        let msg = r["msg"].as_str().unwrap();
        assert!(
            msg.contains("refusing to shrink scsi0 from 2G to 1G"),
            "{msg}"
        );
    }
    assert_eq!(sim.writes().len(), writes, "a refusal wrote");
    assert_eq!(config(&sim)["scsi0"], "local-lvm:vm-100-disk-0,size=2G");
    assert!(sim.lvm_file("pve1", "vm-100-disk-0").exists());
    assert_eq!(sim.task_count("qmcreate"), 1);

    // snapshot_before_change would give the disk a snapshot before the move.
    let r = failed(run(args(
        &sim,
        "stopped",
        two_disks("local", second(json!({}))),
        json!({"snapshot_before_change": "pre"}),
    )));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.contains("snapshot_before_change (pre…) takes a snapshot first"),
        "{msg}"
    );
    assert_eq!(sim.writes().len(), writes, "a refusal wrote");

    // A disk with snapshots: PVE moves no snapshot and keeps no source it would delete.
    ok(run_snapshot(merge(&[
        sim.conn(),
        json!({"vmid": 100, "node": "pve1", "snapname": "before"}),
    ])));
    let writes = sim.writes().len();
    let moved = two_disks("local", second(json!({})));
    let r = failed(run(args(&sim, "stopped", moved, json!({}))));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.contains("refusing to move scsi0 of VM 100 on pve1 to local: its volume local-lvm:vm-100-disk-0 is in the snapshots before"),
        "{msg}"
    );
    assert!(msg.contains("disks[].keep_source: true"), "{msg}");
    assert_eq!(sim.writes().len(), writes, "a refusal wrote");
    // With keep_source, it moves, and says the snapshots stayed behind.
    let kept = json!([
        {"slot": "scsi0", "storage": "local", "import_from": "local:import/small.qcow2", "size": "2G", "keep_source": true},
        {"slot": "scsi1", "storage": "local-lvm", "size": "1G"}
    ]);
    let r = ok(run(args(&sim, "stopped", kept, json!({}))));
    assert_eq!(task_types(&r), ["qmmove"]);
    assert_eq!(r["config"]["unused0"], "local-lvm:vm-100-disk-0");
    assert!(
        r["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .contains("without its snapshots (before)")),
        "{}",
        r["warnings"]
    );
    // The kept source (unused0) and scsi1 are in the snapshot: PVE deletes neither volume
    // (try_deallocate_drive), so neither unused_disks: remove nor a purge writes anything.
    let writes = sim.writes().len();
    let on_local = |scsi1: Value| {
        json!([
            {"slot": "scsi0", "storage": "local", "import_from": "local:import/small.qcow2", "size": "2G"},
            scsi1
        ])
    };
    let r = failed(run(args(
        &sim,
        "stopped",
        on_local(json!({"slot": "scsi1", "storage": "local-lvm", "size": "1G"})),
        json!({"unused_disks": "remove"}),
    )));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.contains("refusing to delete unused0 of VM 100 on pve1: its volume local-lvm:vm-100-disk-0 is in the snapshots before"),
        "{msg}"
    );
    let r = failed(run(args(
        &sim,
        "stopped",
        on_local(
            json!({"slot": "scsi1", "storage": "local-lvm", "state": "absent", "purge": true}),
        ),
        json!({}),
    )));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.contains("refusing to delete scsi1 of VM 100 on pve1: its volume local-lvm:vm-100-disk-1 is in the snapshots before"),
        "{msg}"
    );
    assert_eq!(sim.writes().len(), writes, "a refusal wrote");
    assert!(sim.lvm_file("pve1", "vm-100-disk-0").exists());
    assert!(sim.lvm_file("pve1", "vm-100-disk-1").exists());
}

/// A template's disks are base volumes its linked clones read: never moved.
#[test]
fn a_templates_disks_are_not_moved() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    ok(run(args(
        &sim,
        "stopped",
        two_disks("local-lvm", Value::Null),
        json!({"template": true}),
    )));
    let writes = sim.writes().len();
    let r = failed(run(args(
        &sim,
        "stopped",
        two_disks("local", Value::Null),
        json!({"template": true}),
    )));
    let msg = r["msg"].as_str().unwrap();
    assert!(msg.contains("VM 100 is a template"), "{msg}");
    assert!(
        msg.contains("clone: {vmid: 100, full: true, storage: local}"),
        "{msg}"
    );
    assert_eq!(sim.writes().len(), writes);
}

/// Check and diff mode show each move, detach and delete, and send no write.
#[test]
fn check_mode_shows_each_move_detach_and_delete() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    ok(run(args(
        &sim,
        "started",
        json!([
            {"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2", "size": "2G"},
            {"slot": "scsi1", "storage": "local-lvm", "size": "1G"},
            {"slot": "scsi2", "storage": "local-lvm", "size": "1G"}
        ]),
        json!({}),
    )));
    let writes = sim.writes().len();
    let r = ok(run(args(
        &sim,
        "started",
        json!([
            {"slot": "scsi0", "storage": "local", "import_from": "local:import/small.qcow2", "size": "2G"},
            {"slot": "scsi1", "state": "absent"},
            {"slot": "scsi2", "state": "absent", "purge": true}
        ]),
        json!({"_ansible_check_mode": true, "_ansible_diff": true}),
    )));
    assert_eq!(r["changed"], true);
    assert_eq!(
        r["planned"],
        json!([
            "detach scsi1",
            "move scsi0 from local-lvm to local",
            "delete scsi2 with its volume"
        ])
    );
    assert_eq!(r["diff"]["before"]["scsi0.storage"], "local-lvm");
    assert_eq!(r["diff"]["after"]["scsi0.storage"], "local");
    assert_eq!(r["diff"]["after"]["scsi1"], "");
    assert_eq!(
        r["diff"]["before"]["scsi2.volume"],
        "local-lvm:vm-100-disk-2"
    );
    assert_eq!(r["diff"]["after"]["scsi2.volume"], "");
    assert_eq!(sim.writes().len(), writes, "check mode wrote");
}

/// The vm module's EXAMPLES of a disk's life (`plugins/modules/vm.yml`), run as written on
/// pve-sim: only the connection is the test's, and the example's `ceph-vm` is pve-sim's
/// directory storage `local`.
#[test]
fn the_docs_examples_move_detach_delete_and_remove_unused() {
    let docs: Value = serde_yaml_ng::from_str(include_str!("../plugins/modules/vm.yml")).unwrap();
    let examples: Value = serde_yaml_ng::from_str(docs["EXAMPLES"].as_str().unwrap()).unwrap();
    let example = |name: &str| -> Value {
        let task = examples
            .as_array()
            .unwrap()
            .iter()
            .find(|task| task["name"].as_str().unwrap().starts_with(name))
            .unwrap_or_else(|| panic!("no example {name:?}"));
        let mut options = task["sankofa.proxmox.vm"].clone();
        let options = options.as_object_mut().unwrap();
        for key in ["api_host", "api_token_id", "api_token_secret"] {
            options.remove(key);
        }
        let text = Value::Object(options.clone()).to_string();
        serde_json::from_str(&text.replace("\"ceph-vm\"", "\"local\"")).unwrap()
    };
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    ok(run(args(
        &sim,
        "started",
        json!([
            {"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2", "size": "2G"},
            {"slot": "scsi1", "storage": "local-lvm", "size": "1G"},
            {"slot": "scsi2", "storage": "local-lvm", "size": "1G"}
        ]),
        json!({}),
    )));
    let moving = merge(&[sim.conn(), example("Move the disk to another storage")]);
    let r = ok(run(moving.clone()));
    assert_eq!(
        task_types(&r),
        ["qmconfig", "resize", "qmmove"],
        "{}",
        r["msg"]
    );
    assert!(
        volume(&r["config"]["scsi0"]).starts_with("local:100/"),
        "{}",
        r["config"]
    );
    assert!(r["config"]["scsi0"].as_str().unwrap().contains("size=40G"));
    assert!(r["config"].get("scsi1").is_none() && r["config"].get("scsi2").is_none());
    assert_eq!(r["config"]["unused0"], "local-lvm:vm-100-disk-1");
    assert!(!sim.lvm_file("pve1", "vm-100-disk-2").exists());
    assert_eq!(r["status"], "running");
    assert_eq!(ok(run(moving))["changed"], false);

    let removing = merge(&[sim.conn(), example("Remove the unused volumes")]);
    let r = ok(run(removing.clone()));
    assert_eq!(r["changed"], true);
    assert_eq!(r["unused_disks"], json!([]));
    assert!(!sim.lvm_file("pve1", "vm-100-disk-1").exists());
    assert_eq!(ok(run(removing))["changed"], false);
}

/// A long move is followed by the wait as an import is: its `qmmove` log's progress lines
/// become the task's `progress`, rising to its end.
#[test]
fn a_long_move_reports_its_progress() {
    let img = image("move-200.qcow2", 1024, 200);
    let sim = Sim::start(&[&img], &["--import-rate", "128M"]);
    let disk = |storage: &str| json!([{"slot": "scsi0", "storage": storage, "import_from": "local:import/move-200.qcow2"}]);
    ok(run(args(&sim, "stopped", disk("local-lvm"), json!({}))));
    let r = ok(run(args(&sim, "stopped", disk("local"), json!({}))));
    let moved = &r["tasks"][0];
    assert_eq!(moved["type"], "qmmove");
    assert!(
        moved["upid"].as_str().unwrap().contains(":qmmove:100:"),
        "{moved}"
    );
    let history = moved["progress"]["history"].as_array().unwrap();
    assert!(history.len() >= 3, "{moved}");
    let percents: Vec<f64> = history.iter().map(|p| p[1].as_f64().unwrap()).collect();
    assert!(percents.windows(2).all(|w| w[0] <= w[1]), "{moved}");
    // The task may end between two looks at its log: the last one seen is near the end.
    assert!(*percents.last().unwrap() >= 90.0, "{moved}");
}
