//! Snapshots as qemu-server keeps them: API2/Qemu.pm's snapshot endpoints and
//! pve-guest-common AbstractConfig.pm snapshot_create / snapshot_rollback / snapshot_delete
//! (the `[snapname]` sections, `parent`, `snaptime`, `vmstate`, the `snapshot` lock), and
//! pve-storage volume_has_feature (which storages can snapshot).

use std::process::Command;

use crate::support::{Session, Sim, is_upid, quick_vm};
use serde_json::Value;

const VM: &str = "/nodes/pve1/qemu/100";

fn task(s: &Session, method: &str, path: &str, params: &[(&str, &str)]) -> (Value, Vec<String>) {
    let upid = s.data(method, path, params);
    let upid = upid.as_str().unwrap().to_string();
    let status = s.wait(&upid);
    (status, s.log(&upid))
}

fn config(s: &Session) -> Value {
    s.data("GET", &format!("{VM}/config"), &[])
}

fn names(s: &Session) -> Vec<String> {
    s.data("GET", &format!("{VM}/snapshot"), &[])
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_qcow2_vm_snapshots_rolls_back_and_deletes_as_qemu_server_does() {
    let sim = Sim::plain(&["--time-scale", "0.01"], &[]);
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "100",
        &[("scsi0", "local:1,format=qcow2"), ("cores", "2")],
    );

    let upid = s.data(
        "POST",
        &format!("{VM}/snapshot"),
        &[("snapname", "s1"), ("description", "before the upgrade")],
    );
    assert!(is_upid(upid.as_str().unwrap(), "pve1", "qmsnapshot", "100"));
    let status = s.wait(upid.as_str().unwrap());
    assert_eq!(status["exitstatus"], "OK");
    assert!(
        s.log(upid.as_str().unwrap())
            .contains(&"snapshotting 'drive-scsi0' (local:100/vm-100-disk-0.qcow2)".to_string())
    );
    // The disk has the snapshot (qemu-img snapshot -c, pve-storage Plugin.pm).
    let disk = sim
        .data()
        .join("nodes/pve1/local/images/100/vm-100-disk-0.qcow2");
    let out = Command::new("qemu-img")
        .args(["snapshot", "-l"])
        .arg(&disk)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("s1"));

    // The current config names its parent and has no lock; the section has the copy.
    let conf = config(&s);
    assert_eq!(conf["parent"], "s1");
    assert!(conf.get("lock").is_none());
    let snap = s.data("GET", &format!("{VM}/snapshot/s1/config"), &[]);
    assert_eq!(snap["description"], "before the upgrade");
    assert_eq!(snap["cores"], 2);
    assert!(snap["snaptime"].as_u64().unwrap() > 1_600_000_000);
    assert!(snap.get("snapstate").is_none() && snap.get("vmstate").is_none());

    // A second snapshot's parent is the first; the list ends with `current`.
    s.data("PUT", &format!("{VM}/config"), &[("cores", "4")]);
    let (status, _) = task(&s, "POST", &format!("{VM}/snapshot"), &[("snapname", "s2")]);
    assert_eq!(status["exitstatus"], "OK");
    let list = s.data("GET", &format!("{VM}/snapshot"), &[]);
    let list = list.as_array().unwrap();
    let s2 = list.iter().find(|i| i["name"] == "s2").unwrap();
    assert_eq!(s2["parent"], "s1");
    assert_eq!(s2["vmstate"], 0);
    assert_eq!(s2["description"], "");
    let current = list.last().unwrap();
    assert_eq!(current["name"], "current");
    assert_eq!(current["parent"], "s2");
    assert_eq!(current["description"], "You are here!");
    assert_eq!(current["running"], 0);
    assert_eq!(current["digest"], config(&s)["digest"]);

    // A used name fails the task; nothing changes.
    let (status, _) = task(&s, "POST", &format!("{VM}/snapshot"), &[("snapname", "s1")]);
    assert_eq!(status["exitstatus"], "snapshot name 's1' already used");
    assert!(config(&s).get("lock").is_none());

    // Rollback to s1: its config is the current one again, `parent` names it.
    s.data("PUT", &format!("{VM}/config"), &[("cores", "8")]);
    let (status, _) = task(&s, "POST", &format!("{VM}/snapshot/s1/rollback"), &[]);
    assert!(is_upid(
        status["upid"].as_str().unwrap(),
        "pve1",
        "qmrollback",
        "100"
    ));
    assert_eq!(status["exitstatus"], "OK");
    let conf = config(&s);
    assert_eq!(conf["cores"], 2);
    assert_eq!(conf["parent"], "s1");

    // Deleting s1 links s2 to s1's parent (none) and removes the disk's snapshot.
    let (status, _) = task(&s, "DELETE", &format!("{VM}/snapshot/s1"), &[]);
    assert!(is_upid(
        status["upid"].as_str().unwrap(),
        "pve1",
        "qmdelsnapshot",
        "100"
    ));
    assert_eq!(status["exitstatus"], "OK");
    assert_eq!(names(&s), ["s2", "current"]);
    let s2 = s.data("GET", &format!("{VM}/snapshot/s2/config"), &[]);
    assert!(s2.get("parent").is_none());
    assert!(config(&s).get("parent").is_none());
    let out = Command::new("qemu-img")
        .args(["snapshot", "-l"])
        .arg(&disk)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        !listing.contains(" s1 ") && listing.contains("s2"),
        "{listing}"
    );
    let (code, reason, _) = s.call("GET", &format!("{VM}/snapshot/s1/config"), &[]);
    assert_eq!(
        (code, reason.as_str()),
        (500, "snapshot 's1' does not exist")
    );
}

#[test]
fn raw_on_a_directory_cannot_snapshot_and_lvm_thin_can() {
    let sim = Sim::plain(&["--time-scale", "0.01"], &[]);
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("scsi0", "local:1,format=raw")]);
    // AbstractConfig.pm __snapshot_prepare: has_feature('snapshot') fails in the worker.
    let (status, _) = task(&s, "POST", &format!("{VM}/snapshot"), &[("snapname", "s1")]);
    assert_eq!(status["exitstatus"], "snapshot feature is not available");
    assert!(config(&s).get("lock").is_none());
    assert_eq!(names(&s), ["current"]);

    // A CD-ROM does not count; an LVM-thin volume can snapshot.
    quick_vm(
        &s,
        "101",
        &[("scsi0", "local-lvm:1"), ("ide2", "none,media=cdrom")],
    );
    let (status, _) = task(
        &s,
        "POST",
        "/nodes/pve1/qemu/101/snapshot",
        &[("snapname", "s1")],
    );
    assert_eq!(status["exitstatus"], "OK");
    let lv = sim
        .data()
        .join("nodes/pve1/local-lvm/snap_vm-101-disk-0_s1.raw");
    assert!(lv.exists(), "{}", lv.display());
    let (status, _) = task(&s, "POST", "/nodes/pve1/qemu/101/snapshot/s1/rollback", &[]);
    assert_eq!(status["exitstatus"], "OK");
    let (status, _) = task(&s, "DELETE", "/nodes/pve1/qemu/101/snapshot/s1", &[]);
    assert_eq!(status["exitstatus"], "OK");
    assert!(!lv.exists());
}

#[test]
fn the_snapshot_lock_holds_while_the_task_runs() {
    let sim = Sim::plain(&["--task-duration", "qmsnapshot=2s"], &[]);
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("scsi0", "local-lvm:1")]);
    let upid = s.data("POST", &format!("{VM}/snapshot"), &[("snapname", "s1")]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let conf = config(&s);
    assert_eq!(conf["lock"], "snapshot");
    let listed = s.data("GET", &format!("{VM}/snapshot"), &[]);
    assert_eq!(listed[0]["snapstate"], "prepare");
    let (code, _, body) = s.call("PUT", &format!("{VM}/config"), &[("cores", "2")]);
    assert_eq!(code, 500);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("VM is locked (snapshot)")
    );
    assert_eq!(s.wait(upid.as_str().unwrap())["exitstatus"], "OK");
    assert!(config(&s).get("lock").is_none());
    assert!(
        s.data("GET", &format!("{VM}/snapshot"), &[])[0]
            .get("snapstate")
            .is_none()
    );
}

#[test]
fn names_are_checked_as_pve_snapshot_name_and_reserved_names_refused() {
    let sim = Sim::plain(&["--time-scale", "0.01"], &[]);
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("scsi0", "local-lvm:1")]);
    let path = format!("{VM}/snapshot");
    let (code, _, body) = s.call("POST", &path, &[("snapname", "1st")]);
    assert_eq!(code, 400);
    assert_eq!(
        body["errors"]["snapname"],
        "invalid format - invalid configuration ID '1st'"
    );
    let long = "a".repeat(41);
    let (code, _, body) = s.call("POST", &path, &[("snapname", &long)]);
    assert_eq!(code, 400);
    assert_eq!(
        body["errors"]["snapname"],
        "value may only be 40 characters long"
    );
    let (code, reason, _) = s.call("POST", &path, &[("snapname", "current")]);
    assert_eq!(
        (code, reason.as_str()),
        (500, "unable to use snapshot name 'current' (reserved name)")
    );
    let (code, reason, _) = s.call("POST", &path, &[("snapname", "Pending")]);
    assert_eq!(
        (code, reason.as_str()),
        (500, "unable to use snapshot name 'pending' (reserved name)")
    );
    let (code, reason, _) = s.call(
        "POST",
        "/nodes/pve1/qemu/999/snapshot",
        &[("snapname", "s1")],
    );
    assert_eq!(
        (code, reason.as_str()),
        (
            500,
            "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist"
        )
    );
    // A description is updated under the lock; without one nothing happens.
    let (status, _) = task(&s, "POST", &path, &[("snapname", "s1")]);
    assert_eq!(status["exitstatus"], "OK");
    let cfg = format!("{VM}/snapshot/s1/config");
    assert_eq!(s.data("PUT", &cfg, &[("description", "kept")]), Value::Null);
    assert_eq!(s.data("GET", &cfg, &[])["description"], "kept");
    assert_eq!(s.data("PUT", &cfg, &[]), Value::Null);
    assert_eq!(s.data("GET", &cfg, &[])["description"], "kept");
    let idx = s.data("GET", &format!("{VM}/snapshot/s1"), &[]);
    assert_eq!(idx[0]["cmd"], "rollback");
}

#[test]
fn ram_is_saved_with_a_running_vm_and_a_rollback_can_start_it() {
    let sim = Sim::plain(&["--time-scale", "0.01"], &[]);
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("scsi0", "local:1,format=qcow2")]);
    let (status, _) = task(&s, "POST", &format!("{VM}/status/start"), &[]);
    assert_eq!(status["exitstatus"], "OK");
    let (status, log) = task(
        &s,
        "POST",
        &format!("{VM}/snapshot"),
        &[("snapname", "live"), ("vmstate", "1")],
    );
    assert_eq!(status["exitstatus"], "OK");
    assert!(log.contains(&"saving VM state and RAM using storage 'local'".to_string()));
    let snap = s.data("GET", &format!("{VM}/snapshot/live/config"), &[]);
    assert_eq!(snap["vmstate"], "local:100/vm-100-state-live.raw");
    assert!(snap["runningmachine"].as_str().is_some());
    let listed = s.data("GET", &format!("{VM}/snapshot"), &[]);
    assert_eq!(listed[0]["vmstate"], 1);
    let state = sim
        .data()
        .join("nodes/pve1/local/images/100/vm-100-state-live.raw");
    assert!(state.exists());

    // A snapshot without RAM of the running VM: the rollback stops it, `start` starts it.
    let (status, _) = task(
        &s,
        "POST",
        &format!("{VM}/snapshot"),
        &[("snapname", "disk")],
    );
    assert_eq!(status["exitstatus"], "OK");
    let (status, _) = task(&s, "POST", &format!("{VM}/snapshot/disk/rollback"), &[]);
    assert_eq!(status["exitstatus"], "OK");
    assert_eq!(
        s.data("GET", &format!("{VM}/status/current"), &[])["status"],
        "stopped"
    );
    let (status, _) = task(
        &s,
        "POST",
        &format!("{VM}/snapshot/disk/rollback"),
        &[("start", "1")],
    );
    assert_eq!(status["exitstatus"], "OK");
    assert_eq!(
        s.data("GET", &format!("{VM}/status/current"), &[])["status"],
        "running"
    );

    // With RAM, the rollback resumes the VM by itself, with the machine it ran.
    task(&s, "POST", &format!("{VM}/status/stop"), &[]);
    let (status, _) = task(&s, "POST", &format!("{VM}/snapshot/live/rollback"), &[]);
    assert_eq!(status["exitstatus"], "OK");
    assert_eq!(
        s.data("GET", &format!("{VM}/status/current"), &[])["status"],
        "running"
    );
    assert!(config(&s).get("runningmachine").is_none());

    // Deleting it frees the RAM's volume.
    let (status, _) = task(&s, "DELETE", &format!("{VM}/snapshot/live"), &[]);
    assert_eq!(status["exitstatus"], "OK");
    assert!(!state.exists());
}

#[test]
fn a_template_cannot_snapshot() {
    let sim = Sim::plain(&["--time-scale", "0.01"], &[]);
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("scsi0", "local-lvm:1")]);
    let (status, _) = task(&s, "POST", &format!("{VM}/template"), &[]);
    assert_eq!(status["exitstatus"], "OK");
    let (status, _) = task(&s, "POST", &format!("{VM}/snapshot"), &[("snapname", "s1")]);
    assert_eq!(
        status["exitstatus"],
        "you can't take a snapshot if it's a template"
    );
}
