//! The `snapshot` module against `pve-sim`: take (unchanged on a re-run), roll back, remove,
//! retention, check and diff mode, a VM found by name, and the clear error where a disk's
//! storage cannot snapshot.

use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::{Value, json};

/// Creates a VM with these config values directly on PVE (not through the module) and waits
/// for its `qmcreate`.
fn make_vm(sim: &Sim, vmid: &str, extra: &[(&str, &str)]) {
    let mut form = vec![("vmid", vmid), ("memory", "512")];
    form.extend_from_slice(extra);
    let answer = sim.write("POST", "/nodes/pve1/qemu", &form);
    let upid = answer["data"].as_str().expect("a UPID").to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = sim.get(&format!("/nodes/pve1/tasks/{upid}/status"));
        if st["data"]["status"] == "stopped" {
            assert_eq!(st["data"]["exitstatus"], "OK");
            return;
        }
        assert!(Instant::now() < deadline, "the create never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn args(sim: &Sim, extra: Value) -> Value {
    merge(&[sim.conn(), json!({"vmid": 100, "node": "pve1"}), extra])
}

fn listed(sim: &Sim) -> Vec<String> {
    sim.get("/nodes/pve1/qemu/100/snapshot")["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .filter(|n| n != "current")
        .collect()
}

#[test]
fn takes_is_unchanged_rolls_back_and_removes() {
    let sim = Sim::start(&[], &[]);
    make_vm(&sim, "100", &[("scsi0", "local-lvm:1"), ("cores", "1")]);
    let a = args(
        &sim,
        json!({"snapname": "before", "description": "first", "_ansible_diff": true}),
    );

    // Check mode predicts and sends no write.
    let r = ok(run_snapshot(merge(&[
        a.clone(),
        json!({"_ansible_check_mode": true}),
    ])));
    assert_eq!(r["changed"], true);
    assert_eq!(r["diff"]["after"]["snapshots"], json!(["before"]));
    assert!(listed(&sim).is_empty());

    let r = ok(run_snapshot(a.clone()));
    assert_eq!(r["changed"], true);
    assert_eq!(task_types(&r), ["qmsnapshot"]);
    assert_eq!(r["tasks"][0]["exitstatus"], "OK");
    assert_eq!(r["diff"]["before"]["snapshots"], json!([]));
    assert_eq!(r["diff"]["after"]["snapshots"], json!(["before"]));
    assert_eq!(r["snapshots"][0]["description"], "first");
    assert_eq!(listed(&sim), ["before"]);

    // A re-run changes nothing and starts no task.
    let r = ok(run_snapshot(a.clone()));
    assert_eq!(r["changed"], false);
    assert_eq!(r["tasks"], json!([]));

    // Rollback: the config is the snapshot's again.
    sim.write("PUT", "/nodes/pve1/qemu/100/config", &[("cores", "4")]);
    let r = ok(run_snapshot(args(
        &sim,
        json!({"snapname": "before", "state": "rollback", "start": true}),
    )));
    assert_eq!(r["changed"], true);
    assert_eq!(task_types(&r), ["qmrollback"]);
    let conf = sim.get("/nodes/pve1/qemu/100/config")["data"].clone();
    assert_eq!(conf["cores"], 1);
    assert_eq!(conf["parent"], "before");
    assert_eq!(
        sim.get("/nodes/pve1/qemu/100/status/current")["data"]["status"],
        "running"
    );

    // A rollback to a snapshot that is not there fails before any write.
    let r = failed(run_snapshot(args(
        &sim,
        json!({"snapname": "nope", "state": "rollback"}),
    )));
    assert!(
        r["msg"]
            .as_str()
            .unwrap()
            .contains("\"nope\" does not exist"),
        "{r}"
    );

    // Removal, then unchanged.
    let gone = args(&sim, json!({"snapname": "before", "state": "absent"}));
    let r = ok(run_snapshot(gone.clone()));
    assert_eq!(r["changed"], true);
    assert_eq!(task_types(&r), ["qmdelsnapshot"]);
    assert!(listed(&sim).is_empty());
    let r = ok(run_snapshot(gone));
    assert_eq!(r["changed"], false);
}

#[test]
fn retention_keeps_the_newest_of_the_prefix_and_a_vm_is_found_by_name() {
    let sim = Sim::start(&[], &[]);
    make_vm(&sim, "100", &[("scsi0", "local-lvm:1"), ("name", "web1")]);
    let by_name = |snapname: &str| {
        merge(&[
            sim.conn(),
            json!({"name": "web1", "snapname": snapname, "retention": 2, "retention_prefix": "auto-"}),
        ])
    };
    // A snapshot outside the prefix is never counted or removed.
    ok(run_snapshot(args(&sim, json!({"snapname": "manual"}))));
    for n in ["auto-1", "auto-2"] {
        // snaptime has a resolution of one second: keep the order unambiguous.
        std::thread::sleep(Duration::from_millis(1100));
        let r = ok(run_snapshot(by_name(n)));
        assert_eq!(r["removed"], json!([]));
        assert_eq!(r["node"], "pve1");
    }
    std::thread::sleep(Duration::from_millis(1100));
    let r = ok(run_snapshot(by_name("auto-3")));
    assert_eq!(r["removed"], json!(["auto-1"]));
    assert_eq!(task_types(&r), ["qmsnapshot", "qmdelsnapshot"]);
    let mut now = listed(&sim);
    now.sort();
    assert_eq!(now, ["auto-2", "auto-3", "manual"]);
    // A name that the prefix does not cover is refused before any request.
    let r = failed(run_snapshot(by_name("other")));
    assert!(
        r["msg"].as_str().unwrap().contains("retention_prefix"),
        "{r}"
    );
}

#[test]
fn a_disk_that_cannot_snapshot_fails_clearly_and_leaves_nothing() {
    let sim = Sim::start(&[], &[]);
    make_vm(&sim, "100", &[("scsi0", "local:1,format=raw")]);
    let r = failed(run_snapshot(args(&sim, json!({"snapname": "s1"}))));
    let msg = r["msg"].as_str().unwrap();
    assert!(msg.contains("snapshot feature is not available"), "{msg}");
    assert!(msg.contains("raw file on a directory storage"), "{msg}");
    assert!(msg.contains("VM 100 on pve1"), "{msg}");
    assert!(listed(&sim).is_empty());
    assert!(
        sim.get("/nodes/pve1/qemu/100/config")["data"]
            .get("lock")
            .is_none()
    );
}

#[test]
fn bad_names_are_refused_before_any_request() {
    let sim = Sim::start(&[], &[]);
    for (name, says) in [("1st", "start with a letter"), ("current", "reserves")] {
        let r = failed(run_snapshot(args(&sim, json!({"snapname": name}))));
        assert!(r["msg"].as_str().unwrap().contains(says), "{r}");
    }
    assert!(sim.writes().is_empty());
}

/// The `vm` module's `snapshot_before_change`: one snapshot when something changes, named in
/// the result, retention applied; none when nothing changes.
#[test]
fn vm_snapshot_before_change_takes_one_only_when_something_changes() {
    let sim = Sim::start(&[], &[]);
    let vm = |cores: u32| {
        merge(&[
            sim.conn(),
            json!({"node": "pve1", "vmid": 100, "name": "web1", "memory": 512, "cores": cores,
                   "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}],
                   "snapshot_before_change": "auto-", "snapshot_retention": 2}),
        ])
    };
    // A new VM: nothing to snapshot.
    let r = ok(run(vm(1)));
    assert_eq!(r["changed"], true);
    assert!(r.get("snapshot").is_none(), "{r}");
    // Unchanged: no snapshot.
    let r = ok(run(vm(1)));
    assert_eq!(r["changed"], false);
    assert!(r.get("snapshot").is_none(), "{r}");
    assert!(listed(&sim).is_empty());
    // A change: one snapshot first, named in the result, with the config before the change.
    let r = ok(run(vm(2)));
    assert_eq!(r["changed"], true);
    let name = r["snapshot"].as_str().unwrap().to_string();
    assert!(
        name.starts_with("auto-2") && name.len() == "auto-".len() + 14,
        "{name}"
    );
    assert_eq!(listed(&sim), std::slice::from_ref(&name));
    assert_eq!(task_types(&r)[0], "qmsnapshot");
    let snap = sim.get(&format!("/nodes/pve1/qemu/100/snapshot/{name}/config"));
    assert_eq!(snap["data"]["cores"], 1);
    // Retention keeps the newest two of the prefix.
    for cores in [3, 4] {
        std::thread::sleep(Duration::from_millis(1100));
        ok(run(vm(cores)));
    }
    let now = listed(&sim);
    assert_eq!(now.len(), 2, "{now:?}");
    assert!(!now.contains(&name), "the oldest was kept: {now:?}");
}
