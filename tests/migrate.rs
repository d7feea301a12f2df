//! The `vm` module moving VMs between the nodes of a three-node pve-sim: `migrate: true`
//! (a `qmigrate` task, live for a running VM, offline for a stopped one, local disks with
//! it), a VM left where it is without it, a config converged on the new node, ten VMs moved
//! at once, and clones asked on another node than their template's.

use std::time::Duration;

use crate::support::*;
use serde_json::{Value, json};

const NODES: &[&str] = &["--nodes", "pve1,pve2,pve3", "--time-scale", "0.2"];

fn vm_args(sim: &Sim, extra: Value) -> Value {
    merge(&[
        sim.conn(),
        json!({
            "vmid": 100, "name": "mover", "cores": 1, "memory": 1024,
            "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2"}],
            "cloudinit_storage": "local-lvm", "ciuser": "ubuntu", "net": [{"bridge": "vmbr0"}],
        }),
        extra,
    ])
}

/// Where the cluster lists each VM (a test's own view).
fn placement(sim: &Sim) -> Vec<(u64, String)> {
    let mut out: Vec<(u64, String)> = sim.get("/cluster/resources?type=vm")["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["vmid"].as_u64().unwrap(),
                v["node"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

/// The `qmigrate` task of a result.
fn migration(r: &Value) -> Value {
    r["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "qmigrate")
        .cloned()
        .unwrap_or_else(|| panic!("no qmigrate task: {r}"))
}

/// The check: a running VM created on pve1 and run again with `node: pve2, migrate:
/// true` ends up on pve2, still running, after one `qmigrate` (its disks mirrored, the copy
/// followed as an import's), and a re-run is unchanged; back to pve1 while it is to be
/// stopped, it is shut down first and moves offline.
#[test]
fn a_running_vm_moves_live_and_back_offline() {
    let img = small_image();
    // Copies paced (1 GiB at 400 MiB/s), so the mirror's progress is seen while it runs.
    let sim = Sim::start(&[&img], &[NODES, &["--import-rate", "400M"]].concat());
    ok(run(vm_args(
        &sim,
        json!({"node": "pve1", "state": "started"}),
    )));
    let r = ok(run(vm_args(
        &sim,
        json!({"node": "pve2", "migrate": true, "state": "started", "_ansible_diff": true}),
    )));
    assert_eq!(r["changed"], true);
    assert_eq!(r["node"], "pve2", "{r}");
    assert_eq!(r["status"], "running");
    assert_eq!(task_types(&r), ["qmigrate"], "{r}");
    assert!(
        r["msg"]
            .as_str()
            .unwrap()
            .contains("migrate from pve1 to pve2 (live)"),
        "{r}"
    );
    assert_eq!(r["diff"]["before"]["node"], "pve1");
    assert_eq!(r["diff"]["after"]["node"], "pve2");
    let task = migration(&r);
    assert!(task["upid"].as_str().unwrap().starts_with("UPID:pve1:"));
    assert!(
        task["progress"]["history"]
            .as_array()
            .is_some_and(|h| !h.is_empty()),
        "the mirror's progress is followed: {task}"
    );
    assert_eq!(placement(&sim), [(100, "pve2".to_string())]);
    assert_eq!(
        sim.get("/nodes/pve2/qemu/100/status/current")["data"]["status"],
        "running"
    );
    assert!(
        r["config"]["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("local-lvm:vm-100-disk-")
    );
    assert!(r["config"].get("lock").is_none(), "{r}");
    assert_eq!(sim.task_count("qmigrate"), 1);

    let again = ok(run(vm_args(
        &sim,
        json!({"node": "pve2", "migrate": true, "state": "started"}),
    )));
    assert_eq!(again["changed"], false, "{again}");
    assert_eq!(again["node"], "pve2");
    assert_eq!(sim.task_count("qmigrate"), 1);

    // Back to pve1, to be stopped: shut down first, then an offline copy of the disks.
    let back = ok(run(vm_args(
        &sim,
        json!({"node": "pve1", "migrate": true, "state": "stopped", "shutdown_timeout": 30}),
    )));
    assert_eq!(back["node"], "pve1", "{back}");
    assert_eq!(back["status"], "stopped");
    assert_eq!(task_types(&back), ["qmshutdown", "qmigrate"], "{back}");
    let upid = migration(&back)["upid"].as_str().unwrap().to_string();
    let log = sim.get(&format!("/nodes/pve2/tasks/{upid}/log?limit=0"))["data"].clone();
    let lines: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["t"].as_str().unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with("copying local disk images")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with("successfully imported 'local-lvm:vm-100-disk-0'")),
        "{lines:?}"
    );
    assert_eq!(placement(&sim), [(100, "pve1".to_string())]);
    let again = ok(run(vm_args(
        &sim,
        json!({"node": "pve1", "migrate": true, "state": "stopped"}),
    )));
    assert_eq!(again["changed"], false, "{again}");
}

/// Without `migrate`, a VM found elsewhere is converged where it is, the result names its
/// node and a warning says how to move it; no second VM is made.
#[test]
fn without_migrate_the_vm_stays_where_it_is() {
    let img = small_image();
    let sim = Sim::start(&[&img], NODES);
    ok(run(vm_args(&sim, json!({"node": "pve1"}))));
    let r = ok(run(vm_args(&sim, json!({"node": "pve2", "cores": 2}))));
    assert_eq!(r["changed"], true);
    assert_eq!(r["node"], "pve1", "{r}");
    assert_eq!(r["config"]["cores"], 2);
    let warnings: Vec<&str> = r["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("VM 100 is on node pve1, not pve2") && w.contains("migrate: true")),
        "{warnings:?}"
    );
    assert_eq!(placement(&sim), [(100, "pve1".to_string())]);
    assert_eq!(sim.task_count("qmigrate"), 0);
    assert_eq!(sim.task_count("qmcreate"), 1);
}

/// A running VM asked on another node with other settings: check mode and diff mode show the
/// move and the change; the real run migrates it live first, then converges its config on
/// the new node (the update sent there), and it keeps running.
#[test]
fn a_running_vm_migrated_while_its_config_converges() {
    let img = small_image();
    let sim = Sim::start(&[&img], NODES);
    ok(run(vm_args(
        &sim,
        json!({"node": "pve1", "state": "started"}),
    )));
    let asked = json!({
        "node": "pve3", "migrate": true, "state": "started", "target_storage": "local",
        "cores": 2, "memory": 2048, "tags": ["moved"], "_ansible_diff": true,
    });
    let writes_before = sim.writes().len();
    let mut check = vm_args(&sim, asked.clone());
    check["_ansible_check_mode"] = json!(true);
    let predicted = ok(run(check));
    assert_eq!(predicted["changed"], true);
    let msg = predicted["msg"].as_str().unwrap();
    assert!(
        msg.starts_with("would migrate from pve1 to pve3 (live, disks to local), then update "),
        "{msg}"
    );
    assert_eq!(predicted["diff"]["before"]["node"], "pve1");
    assert_eq!(predicted["diff"]["after"]["node"], "pve3");
    assert_eq!(predicted["diff"]["after"]["cores"], "2");
    assert_eq!(sim.writes().len(), writes_before, "check mode wrote");

    let r = ok(run(vm_args(&sim, asked.clone())));
    assert_eq!(r["node"], "pve3", "{r}");
    assert_eq!(r["status"], "running");
    assert_eq!(r["config"]["cores"], 2);
    assert_eq!(r["config"]["memory"], "2048");
    assert_eq!(r["config"]["tags"], "moved");
    assert!(
        r["config"]["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("local:100/vm-100-disk-"),
        "{r}"
    );
    assert_eq!(r["diff"]["after"]["node"], "pve3");
    // The move first (on pve1), then the update of the VM on pve3.
    let writes: Vec<String> = sim.writes()[writes_before..]
        .iter()
        .map(|w| {
            format!(
                "{} {}",
                w["method"].as_str().unwrap(),
                w["path"].as_str().unwrap()
            )
        })
        .collect();
    let at = |what: &str| writes.iter().position(|w| w == what);
    let moved = at("POST /nodes/pve1/qemu/100/migrate").expect("no migrate request");
    let updated = at("POST /nodes/pve3/qemu/100/config").expect("no update on pve3");
    assert!(moved < updated, "{writes:?}");
    assert_eq!(sim.task_count("qmigrate"), 1);
    // Memory needs a restart of a running VM: it is pending, not lost with the move.
    assert_eq!(r["restart_needed"], true, "{r}");
    let again = ok(run(vm_args(&sim, asked)));
    assert_eq!(again["changed"], false, "{again}");
    assert_eq!(sim.task_count("qmigrate"), 1);
}

/// Ten VMs on pve1 moved at once, half to pve2 and half to pve3, each by its own `qmigrate`.
#[test]
fn ten_vms_migrated_in_parallel() {
    let img = small_image();
    let sim = Sim::start(&[&img], NODES);
    let args = |i: u32, node: &str, migrate: bool| {
        merge(&[
            sim.conn(),
            json!({
                "vmid": 200 + i, "name": format!("fleet{i}"), "node": node, "migrate": migrate,
                "cores": 1, "memory": 512, "state": "started",
                "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}],
            }),
        ])
    };
    let made: Vec<_> = (0..10)
        .map(|i| {
            let a = args(i, "pve1", false);
            std::thread::spawn(move || run(a))
        })
        .collect();
    for h in made {
        ok(h.join().unwrap());
    }
    let target = |i: u32| if i.is_multiple_of(2) { "pve2" } else { "pve3" };
    let moved: Vec<_> = (0..10)
        .map(|i| {
            let a = args(i, target(i), true);
            std::thread::spawn(move || run(a))
        })
        .collect();
    for (i, h) in moved.into_iter().enumerate() {
        let r = ok(h.join().unwrap());
        assert_eq!(r["node"], target(i as u32), "{r}");
        assert_eq!(r["status"], "running");
        assert_eq!(task_types(&r), ["qmigrate"], "{r}");
    }
    let want: Vec<(u64, String)> = (0..10)
        .map(|i| (200 + i as u64, target(i).to_string()))
        .collect();
    assert_eq!(placement(&sim), want);
    assert_eq!(sim.task_count("qmigrate"), 10);
}

/// A template on pve1's local storage: a full clone asked on pve2 is made on pve1 and
/// migrated there (check mode shows both), a re-run is unchanged; a linked clone asked on
/// pve2 is refused before any write, naming `clone.full`.
#[test]
fn a_full_clone_reaches_another_node_and_a_linked_one_is_refused() {
    let img = small_image();
    let sim = Sim::start(&[&img], NODES);
    ok(run(merge(&[
        sim.conn(),
        json!({
            "node": "pve1", "vmid": 900, "name": "tpl", "cores": 1, "memory": 512,
            "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2"}],
            "cloudinit_storage": "local-lvm", "ciuser": "ubuntu", "template": true,
        }),
    ])));
    let clone = |vmid: u32, full: Option<bool>| {
        let mut c = json!({"vmid": 900});
        if let Some(f) = full {
            c["full"] = json!(f);
        }
        merge(&[
            sim.conn(),
            json!({"node": "pve2", "vmid": vmid, "name": format!("c{vmid}"), "clone": c,
                   "cores": 2, "state": "started"}),
        ])
    };
    let mut check = clone(150, Some(true));
    check["_ansible_check_mode"] = json!(true);
    let predicted = ok(run(check));
    assert_eq!(
        predicted["planned"],
        json!([
            "full clone of VM 900",
            "migrate from pve1 to pve2 (offline)"
        ]),
        "{predicted}"
    );

    let r = ok(run(clone(150, Some(true))));
    assert_eq!(r["node"], "pve2", "{r}");
    assert_eq!(r["status"], "running");
    assert_eq!(task_types(&r)[..2], ["qmclone", "qmigrate"], "{r}");
    assert_eq!(r["config"]["cores"], 2);
    assert!(
        r["config"]["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("local-lvm:vm-150-disk-0"),
        "{r}"
    );
    assert!(sim.lvm_file("pve2", "vm-150-disk-0").exists());
    assert!(!sim.lvm_file("pve1", "vm-150-disk-0").exists());
    let again = ok(run(clone(150, Some(true))));
    assert_eq!(again["changed"], false, "{again}");

    let writes_before = sim.writes().len();
    for full in [Some(false), None] {
        let refused = failed(run(clone(151, full)));
        let msg = refused["msg"].as_str().unwrap();
        assert!(
            msg.contains("linked clone of VM 900 on pve1 cannot be made on pve2"),
            "{msg}"
        );
        assert!(msg.contains("clone.full: true"), "{msg}");
        assert!(msg.contains("a template that is on pve2"), "{msg}");
        assert!(msg.contains("shared storage"), "{msg}");
        assert_eq!(refused["changed"], false);
    }
    assert_eq!(sim.writes().len(), writes_before, "a refused clone wrote");
    assert!(
        placement(&sim).iter().all(|(id, _)| *id != 151),
        "{:?}",
        placement(&sim)
    );
}

/// Bad input names the option and sends nothing; a VM PVE will not move fails with PVE's
/// reason from the task log, and is left where it was.
#[test]
fn bad_input_and_refused_migrations() {
    let img = small_image();
    let sim = Sim::start(&[&img], NODES);
    ok(run(vm_args(&sim, json!({"node": "pve1"}))));
    let writes_before = sim.writes().len();
    for (extra, option) in [
        (json!({"migrate": true, "node": null}), "node"),
        (
            json!({"node": "pve2", "target_storage": "local"}),
            "target_storage",
        ),
        (
            json!({"node": "pve2", "migrate": true, "target_storage": "no such!"}),
            "target_storage",
        ),
        (
            json!({"node": "pve2", "migrate": true, "state": "absent"}),
            "migrate",
        ),
    ] {
        let mut args = vm_args(&sim, json!({"node": "pve1"}));
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                args.as_object_mut().unwrap().remove(k);
            } else {
                args[k] = v.clone();
            }
        }
        let r = failed(run(args));
        assert!(r["msg"].as_str().unwrap().contains(option), "{option}: {r}");
    }
    assert_eq!(sim.writes().len(), writes_before);

    // A USB device passed through from the host: PVE's prepare refuses it.
    ok(run(vm_args(
        &sim,
        json!({"node": "pve1", "extra_config": {"usb0": "host=1234:5678"}}),
    )));
    let r = failed(run(vm_args(
        &sim,
        json!({"node": "pve2", "migrate": true, "extra_config": {"usb0": "host=1234:5678"}}),
    )));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.contains("migrating VM 100 from pve1 to pve2 failed: migration aborted: can't migrate VM which uses local devices: usb0"),
        "{msg}"
    );
    assert_eq!(placement(&sim), [(100, "pve1".to_string())]);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        sim.get("/nodes/pve1/qemu/100/config")["data"]
            .get("lock")
            .is_none()
    );
}

/// An HA-managed VM moves through the HA stack: PVE answers the migrate request with a
/// `hamigrate` task (`ha-manager migrate`), the stack's LRM runs the `qmigrate`, which the
/// module finds and waits for; the VM ends on the target, still HA-managed and running.
#[test]
fn an_ha_managed_vm_moves_through_ha() {
    let img = small_image();
    // HA rounds of 10 s, scaled to 1 s.
    let sim = Sim::start(
        &[&img],
        &["--nodes", "pve1,pve2,pve3", "--time-scale", "0.1"],
    );
    ok(run(vm_args(
        &sim,
        json!({"node": "pve1", "state": "started"}),
    )));
    sim.write(
        "POST",
        "/cluster/ha/resources",
        &[("sid", "vm:100"), ("state", "started")],
    );
    let r = ok(run(vm_args(
        &sim,
        json!({"node": "pve2", "migrate": true, "state": "started"}),
    )));
    assert_eq!(r["node"], "pve2", "{r}");
    assert_eq!(r["status"], "running");
    assert_eq!(task_types(&r), ["hamigrate", "qmigrate"], "{r}");
    let lrm = migration(&r);
    assert!(
        lrm["upid"]
            .as_str()
            .unwrap()
            .ends_with(":qmigrate:100:root@pam:"),
        "the LRM's task: {lrm}"
    );
    assert_eq!(placement(&sim), [(100, "pve2".to_string())]);
    assert_eq!(
        sim.get("/nodes/pve2/qemu/100/status/current")["data"]["ha"]["managed"],
        1
    );
    let again = ok(run(vm_args(
        &sim,
        json!({"node": "pve2", "migrate": true, "state": "started"}),
    )));
    assert_eq!(again["changed"], false, "{again}");
}

/// A template on shared storage: a linked clone asked on another node is made there by the
/// clone itself (PVE clones across nodes when the source's disks are shared), no migration.
#[test]
fn a_clone_of_a_template_on_shared_storage_is_made_on_the_other_node_directly() {
    let img = small_image();
    let sim = Sim::start(&[&img], NODES);
    sim.write(
        "POST",
        "/storage",
        &[
            ("storage", "shared1"),
            ("type", "dir"),
            ("path", "/mnt/shared1"),
            ("shared", "1"),
            ("content", "images"),
        ],
    );
    ok(run(merge(&[
        sim.conn(),
        json!({
            "node": "pve1", "vmid": 900, "name": "tpl", "cores": 1, "memory": 512,
            "disks": [{"slot": "scsi0", "storage": "shared1", "import_from": "local:import/small.qcow2"}],
            "template": true,
        }),
    ])));
    let r = ok(run(merge(&[
        sim.conn(),
        json!({"node": "pve2", "vmid": 160, "name": "c160", "clone": {"vmid": 900}}),
    ])));
    assert_eq!(r["node"], "pve2", "{r}");
    assert_eq!(task_types(&r), ["qmclone"], "{r}");
    assert!(
        r["config"]["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("shared1:900/base-900-disk-0"),
        "{r}"
    );
}

/// A VM another client is migrating: the run waits for the `qmigrate` that holds its lock
/// (`lock: migrate`), then finds the VM on its new node and converges it there; it never
/// makes a second one.
#[test]
fn a_vm_migrating_meanwhile_is_followed_to_its_new_node() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[NODES, &["--import-rate", "300M"]].concat());
    ok(run(vm_args(&sim, json!({"node": "pve1"}))));
    let upid = sim.write(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve2")],
    )["data"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(upid.contains(":qmigrate:100:"), "{upid}");
    // Until phase1 has set `lock: migrate`.
    let t = std::time::Instant::now();
    while sim.get("/nodes/pve1/qemu/100/config")["data"]["lock"] != "migrate" {
        assert!(t.elapsed() < Duration::from_secs(10), "no migrate lock");
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = ok(run(vm_args(&sim, json!({"node": "pve1", "cores": 2}))));
    assert_eq!(r["node"], "pve2", "{r}");
    assert_eq!(r["config"]["cores"], 2);
    assert_eq!(sim.task_count("qmcreate"), 1, "a second VM was made");
    assert_eq!(placement(&sim), [(100, "pve2".to_string())]);
}
