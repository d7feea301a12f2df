//! Templates and clones from one imported cloud image, and UEFI/TPM VMs, against pve-sim.

use std::collections::BTreeSet;

use crate::support::*;
use serde_json::{Value, json};

/// The template: imported once, converged, converted (`qmtemplate`); a re-run is unchanged.
fn make_template(sim: &Sim) {
    let r = ok(run(merge(&[
        sim.conn(),
        json!({
            "node": "pve1", "vmid": 900, "name": "noble-tpl", "cores": 1, "memory": 1024,
            "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2"}],
            "net": [{"bridge": "vmbr0"}], "ciuser": "ubuntu", "agent": true, "template": true
        }),
    ])));
    assert_eq!(task_types(&r), ["qmcreate", "qmtemplate"], "{r}");
    assert_eq!(r["config"]["template"], 1);
    assert!(
        r["config"]["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("local-lvm:base-900-disk-0")
    );
    let again = ok(run(merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 900, "name": "noble-tpl", "cores": 1, "memory": 1024, "template": true}),
    ])));
    assert_eq!(again["changed"], false, "{again}");
}

/// Twenty linked clones of one template at once, with automatic ids and their own
/// cloud-init, all running; re-runs change nothing and never clone again.
#[test]
fn twenty_parallel_linked_clones_of_a_template() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    make_template(&sim);
    let args = |i: u32| {
        merge(&[
            sim.conn(),
            json!({
                "name": format!("web{i}"), "clone": {"vmid": 900},
                "cores": 2, "ciuser": "admin", "ipconfig": [{"ip": format!("192.0.2.{}/24", 10 + i), "gw": "192.0.2.1"}],
                "disks": [{"slot": "scsi0", "size": "1G"}], "state": "started"
            }),
        ])
    };
    let handles: Vec<_> = (0..20)
        .map(|i| {
            let a = args(i);
            std::thread::spawn(move || run(a))
        })
        .collect();
    let results: Vec<Value> = handles.into_iter().map(|h| ok(h.join().unwrap())).collect();
    let ids: BTreeSet<u64> = results
        .iter()
        .map(|r| r["vmid"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), 20, "{ids:?}");
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["status"], "running", "{r}");
        assert_eq!(task_types(r)[0], "qmclone", "{r}");
        let c = &r["config"];
        let scsi0 = c["scsi0"].as_str().unwrap();
        assert!(scsi0.starts_with("local-lvm:base-900-disk-0/vm-"), "{c}");
        assert!(scsi0.ends_with("size=1G"), "{c}");
        assert_eq!(c["ciuser"], "admin");
        assert_eq!(
            c["ipconfig0"],
            format!("gw=192.0.2.1,ip=192.0.2.{}/24", 10 + i)
        );
        assert_eq!(c["cores"], 2);
        assert_eq!(c["name"], format!("web{i}"));
    }
    // Twenty clones made; a clone that found its id taken by a parallel one (nextid gives
    // the same id to runs that ask at once) failed before making anything and was retried.
    let clones: Vec<Value> = sim
        .tasks()
        .into_iter()
        .filter(|t| t["type"] == "qmclone")
        .collect();
    let made = clones.iter().filter(|t| t["exitstatus"] == "OK").count();
    assert_eq!(made, 20, "{clones:#?}");
    assert!(
        clones
            .iter()
            .filter(|t| t["exitstatus"] != "OK")
            .all(|t| t["exitstatus"]
                .as_str()
                .unwrap()
                .contains("config file already exists")),
        "{clones:#?}"
    );
    let vms = sim.get("/cluster/resources?type=vm")["data"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(vms, 21, "the template and twenty clones, nothing left over");
    assert_eq!(sim.task_count("qmcreate"), 1);
    // Re-runs by name find their clone and change nothing.
    let before = clones.len();
    let again = ok(run(args(3)));
    assert_eq!(again["changed"], false, "{again}");
    assert_eq!(sim.task_count("qmclone"), before);
}

/// A full clone to another storage copies the disks, and the wait follows its progress as it
/// follows an import; a linked clone of a VM that is not a template fails clearly; cloning a
/// source another task holds waits for it.
#[test]
fn full_clones_and_clones_of_plain_vms() {
    let img = small_image();
    let sim = Sim::start(&[&img], &["--import-rate", "256M"]);
    make_template(&sim);
    let r = ok(run(merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 920, "name": "full1", "clone": {"vmid": 900, "full": true, "storage": "local"}}),
    ])));
    let t = &r["tasks"][0];
    assert_eq!(t["type"], "qmclone");
    assert!(
        t["progress"]["history"].as_array().unwrap().len() >= 3,
        "{t}"
    );
    assert!(
        r["config"]["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("local:920/vm-920-disk-0.qcow2"),
        "{r}"
    );
    // A plain (non-template) running VM: a linked clone is refused by PVE, in the task.
    ok(run(merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 930, "name": "plain", "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "64M"}], "state": "started"}),
    ])));
    let r = failed(run(merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 931, "clone": {"vmid": 930, "full": false}}),
    ])));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.contains("cloning VM 930 on pve1 to VM 931 failed: clone failed: Linked clone feature is not supported"),
        "{msg}"
    );
    assert_eq!(r["changed"], false);
    // A full clone of it while a backup holds it: waits for the lock, then clones.
    sim.hold_lock(930, 2500, Some("backup"));
    let r = ok(run(merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 932, "clone": {"vmid": 930}}),
    ])));
    assert_eq!(task_types(&r), ["qmclone"], "{r}");
    // Refused before any request: the source twice, import_from with clone.
    let r = failed(run(merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 940, "clone": {"vmid": 900, "name": "noble-tpl"}}),
    ])));
    assert!(
        r["msg"]
            .as_str()
            .unwrap()
            .contains("clone needs exactly one of vmid and name")
    );
    let r = failed(run(merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 940, "clone": {"vmid": 900},
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2"}]}),
    ])));
    assert!(
        r["msg"]
            .as_str()
            .unwrap()
            .contains("disks[0].import_from and clone exclude each other"),
        "{}",
        r["msg"]
    );
    assert!(
        sim.writes()
            .iter()
            .all(|w| !w["path"].as_str().unwrap().contains("/940"))
    );
}

/// A UEFI VM with a TPM 2.0 state is created in one task; a re-run is unchanged; another
/// efitype is refused before any write (recreating it would reset the NVRAM); a template is never started and a running VM is not
/// converted.
#[test]
fn uefi_and_tpm_vms_and_template_rules() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    let args = |extra: Value| {
        merge(&[
            sim.conn(),
            json!({
                "node": "pve1", "vmid": 950, "name": "win11", "bios": "ovmf", "machine": "q35",
                "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "64M"}],
                "efidisk": {"storage": "local-lvm", "pre_enrolled_keys": true},
                "tpmstate": {"storage": "local-lvm"}, "state": "started"
            }),
            extra,
        ])
    };
    let r = ok(run(args(json!({}))));
    assert_eq!(task_types(&r), ["qmcreate", "qmstart"], "{r}");
    let c = &r["config"];
    assert!(
        c["efidisk0"]
            .as_str()
            .unwrap()
            .contains("efitype=4m,ms-cert=2023k,pre-enrolled-keys=1"),
        "{c}"
    );
    assert!(
        c["tpmstate0"].as_str().unwrap().contains("version=v2.0"),
        "{c}"
    );
    assert_eq!(ok(run(args(json!({}))))["changed"], false);
    let r = failed(run(args(
        json!({"efidisk": {"storage": "local-lvm", "efitype": "2m", "pre_enrolled_keys": true}}),
    )));
    assert_eq!(r["changed"], false);
    assert!(
        r["msg"]
            .to_string()
            .contains("efidisk0 with efitype=4m, not 2m"),
        "{r}"
    );
    // A running VM is not converted to a template; the options that contradict are refused.
    let r = failed(run(args(json!({"state": "present", "template": true}))));
    assert!(
        r["msg"]
            .as_str()
            .unwrap()
            .contains("VM 950 is running, and a template cannot run"),
        "{}",
        r["msg"]
    );
    let r = failed(run(args(json!({"template": true}))));
    assert!(r["msg"].as_str().unwrap().contains("a template never runs"));
    let r = failed(run(args(json!({"vmid": 951, "bios": "seabios"}))));
    assert!(
        r["msg"]
            .as_str()
            .unwrap()
            .contains("efidisk needs bios: ovmf")
    );
    // Stopped and converted.
    let r = ok(run(args(json!({"state": "stopped", "template": true}))));
    assert_eq!(task_types(&r), ["qmshutdown", "qmtemplate"], "{r}");
}
