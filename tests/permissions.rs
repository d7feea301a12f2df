//! Least privilege (issue 35): for each use the Permissions guide documents, a
//! privilege-separated token granted exactly that use's role (`USES`, on a pool with the
//! VMs and storages as members, and on `/`, the bridge or the node where PVE checks them
//! there) makes the run succeed; a token lacking any one of those privileges makes it fail
//! before any write, naming that privilege. pve-sim runs with `--user-cfg`, pve-access-control's
//! model, so both what `GET /access/permissions` answers and each endpoint's checks are PVE's.
//! Each use runs on PVE 8.4 and 9.1 (`on_each_version`), whose privileges differ.

use std::time::Duration;

use sankofa_proxmox::privileges::Use;
use serde_json::{Value, json};

use crate::support::least_privilege::{named_on, scoped_sim, token, usage};
use crate::support::*;

/// The PVE versions each use is tested on: PVE 9 renamed privileges (`Use::on_pve8`).
const VERSIONS: [&str; 2] = ["8.4", "9.1"];

/// Runs `test` once for each of [`VERSIONS`], side by side (each with its own simulator);
/// a failure names its version (the thread's name).
fn on_each_version(test: impl Fn(&str) + Sync) {
    std::thread::scope(|scope| {
        for version in VERSIONS {
            let test = &test;
            std::thread::Builder::new()
                .name(format!("PVE {version}"))
                .spawn_scoped(scope, move || test(version))
                .unwrap();
        }
    });
}

/// [`scoped_sim`] on `version`.
fn sim_on(usage: &Use, images: &[&std::path::Path], version: &str, extra: &[&str]) -> Sim {
    let mut args = vec!["--pve-version", version];
    args.extend_from_slice(extra);
    scoped_sim(usage, images, &[], &args)
}

/// Each token lacking one privilege (as `version` names it): `run` fails naming it, and
/// sends no write.
fn each_missing_privilege_fails_before_any_write(
    sim: &Sim,
    usage: &Use,
    version: &str,
    run: impl Fn(Value) -> Value,
) {
    for (i, (privilege, scope)) in usage.privileges.iter().enumerate() {
        let privilege = named_on(usage, privilege, version.starts_with('8'));
        let writes = sim.writes().len();
        let failed = run(token(sim, &format!("no{i}")));
        let msg = failed["msg"].as_str().unwrap_or_default();
        assert_eq!(
            failed["failed"], true,
            "{} on {version} without {privilege}: {failed}",
            usage.name
        );
        assert!(
            msg.contains(privilege),
            "{} on {version} without {privilege} on {}: {msg}",
            usage.name,
            scope.path()
        );
        assert_eq!(
            sim.writes()[writes..].to_vec(),
            Vec::<Value>::new(),
            "{} on {version} without {privilege}: a write was sent",
            usage.name
        );
        assert_eq!(failed["changed"], false, "{failed}");
    }
}

fn result(run: Run) -> Value {
    run.result
}

fn create_options() -> Value {
    json!({
        "node": "pve1", "vmid": 100, "name": "web1", "pool": "automation", "state": "started",
        "cores": 2, "memory": 2048, "net": [{"bridge": "vmbr0"}],
        "disks": [{"slot": "scsi0", "storage": "local-lvm",
                   "import_from": "local:import/small.qcow2", "size": "2G"}],
    })
}

#[test]
fn creating_from_an_image_with_exactly_its_role() {
    let img = small_image();
    let role = usage("create a VM from an image");
    on_each_version(|version| {
        let sim = sim_on(role, &[&img], version, &[]);
        each_missing_privilege_fails_before_any_write(&sim, role, version, |conn| {
            result(run(merge(&[conn, create_options()])))
        });
        let made = ok(run(merge(&[token(&sim, "all"), create_options()])));
        assert_eq!(
            task_types(&made),
            ["qmcreate", "resize", "qmstart"],
            "{made}"
        );
        let again = ok(run(merge(&[token(&sim, "all"), create_options()])));
        assert_eq!(again["changed"], false, "{again}");
    });
}

#[test]
fn check_mode_reports_what_is_missing_the_same_way() {
    let img = small_image();
    let role = usage("create a VM from an image");
    let sim = scoped_sim(role, &[&img], &[], &[]);
    let at = role
        .privileges
        .iter()
        .position(|(p, _)| *p == "VM.PowerMgmt")
        .unwrap();
    let f = failed(run(merge(&[
        token(&sim, &format!("no{at}")),
        create_options(),
        json!({"_ansible_check_mode": true}),
    ])));
    assert!(
        f["msg"]
            .as_str()
            .unwrap()
            .contains("start needs VM.PowerMgmt on /vms/100 or /pool/automation"),
        "{f}"
    );
    let predicted = ok(run(merge(&[
        token(&sim, "all"),
        create_options(),
        json!({"_ansible_check_mode": true}),
    ])));
    assert_eq!(predicted["changed"], true, "{predicted}");
    assert_eq!(sim.writes(), Vec::<Value>::new());
}

fn cloud_init_options() -> Value {
    json!({
        "node": "pve1", "vmid": 100, "name": "web1", "pool": "automation", "state": "present",
        "net": [{"bridge": "vmbr0"}], "ciuser": "admin", "ipconfig": [{"ip": "dhcp"}],
        "cloudinit_storage": "local-lvm",
        "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}],
    })
}

#[test]
fn cloud_init_with_exactly_its_role() {
    let role = usage("cloud-init");
    on_each_version(|version| {
        let sim = sim_on(role, &[], version, &[]);
        each_missing_privilege_fails_before_any_write(&sim, role, version, |conn| {
            result(run(merge(&[conn, cloud_init_options()])))
        });
        let made = ok(run(merge(&[token(&sim, "all"), cloud_init_options()])));
        assert_eq!(made["changed"], true, "{made}");
    });
}

/// A template made by root, in the pool.
fn template(sim: &Sim) {
    ok(run(merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 900, "name": "tpl", "pool": "automation",
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2"}],
               "net": [{"bridge": "vmbr0"}], "template": true}),
    ])));
}

fn clone_options() -> Value {
    json!({"node": "pve1", "vmid": 101, "name": "web2", "pool": "automation", "state": "started",
           "clone": {"vmid": 900}, "cores": 2, "memory": 1024})
}

#[test]
fn cloning_a_template_with_exactly_its_role() {
    let img = small_image();
    let role = usage("clone a template");
    on_each_version(|version| {
        let sim = sim_on(role, &[&img], version, &[]);
        template(&sim);
        each_missing_privilege_fails_before_any_write(&sim, role, version, |conn| {
            result(run(merge(&[conn, clone_options()])))
        });
        let made = ok(run(merge(&[token(&sim, "all"), clone_options()])));
        assert_eq!(made["status"], "running", "{made}");
    });
}

/// A VM made by root, in the pool (`running` when asked).
fn existing_vm(sim: &Sim, state: &str) {
    ok(run(merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 100, "name": "web1", "pool": "automation", "state": state,
               "agent": true, "ipconfig": [{"ip": "192.0.2.5/24"}], "cloudinit_storage": "local-lvm",
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2"}]}),
    ])));
}

#[test]
fn ha_with_exactly_its_role() {
    let img = small_image();
    let role = usage("HA");
    on_each_version(|version| {
        let sim = sim_on(role, &[&img], version, &["--time-scale", "0.2"]);
        existing_vm(&sim, "present");
        let options = json!({"node": "pve1", "vmid": 100, "ha": {"state": "stopped"}});
        each_missing_privilege_fails_before_any_write(&sim, role, version, |conn| {
            result(run(merge(&[conn, options.clone()])))
        });
        let managed = ok(run(merge(&[token(&sim, "all"), options.clone()])));
        assert_eq!(managed["changed"], true, "{managed}");
    });
}

#[test]
fn migrating_with_exactly_its_role() {
    let img = small_image();
    let role = usage("migrate");
    on_each_version(|version| {
        let sim = sim_on(
            role,
            &[&img],
            version,
            &["--nodes", "pve1,pve2", "--time-scale", "0.2"],
        );
        existing_vm(&sim, "present");
        let options =
            json!({"node": "pve2", "vmid": 100, "migrate": true, "target_storage": "local-lvm"});
        each_missing_privilege_fails_before_any_write(&sim, role, version, |conn| {
            result(run(merge(&[conn, options.clone()])))
        });
        let moved = ok(run(merge(&[token(&sim, "all"), options.clone()])));
        assert_eq!(moved["node"], "pve2", "{moved}");
    });
}

#[test]
fn snapshots_with_exactly_their_role() {
    let img = small_image();
    let role = usage("snapshots");
    on_each_version(|version| {
        let sim = sim_on(role, &[&img], version, &[]);
        existing_vm(&sim, "present");
        let take = json!({"node": "pve1", "vmid": 100, "snapname": "before"});
        each_missing_privilege_fails_before_any_write(&sim, role, version, |conn| {
            result(run_snapshot(merge(&[conn, take.clone()])))
        });
        let taken = ok(run_snapshot(merge(&[token(&sim, "all"), take.clone()])));
        assert_eq!(taken["changed"], true, "{taken}");
        let back = ok(run_snapshot(merge(&[
            token(&sim, "all"),
            take.clone(),
            json!({"state": "rollback"}),
        ])));
        assert_eq!(back["changed"], true, "{back}");
        let gone = ok(run_snapshot(merge(&[
            token(&sim, "all"),
            take.clone(),
            json!({"state": "absent"}),
        ])));
        assert_eq!(gone["changed"], true, "{gone}");
    });
}

#[test]
fn an_image_download_with_exactly_its_role() {
    let img = small_image();
    let port = serve_file(std::fs::read(&img).unwrap(), Duration::ZERO);
    let role = usage("image download");
    on_each_version(|version| {
        let sim = sim_on(role, &[], version, &[]);
        let options = json!({"node": "pve1", "storage": "local",
                             "url": format!("http://127.0.0.1:{port}/noble.img")});
        each_missing_privilege_fails_before_any_write(&sim, role, version, |conn| {
            result(run_image(merge(&[conn, options.clone()])))
        });
        let got = ok(run_image(merge(&[token(&sim, "all"), options])));
        assert_eq!(got["changed"], true, "{got}");
    });
}

/// PVE 8 reads the agent with VM.Monitor (schema 8.4), which PVE 9 no longer has.
fn vm_info_with_exactly_its_role_on(version: &str) {
    let img = small_image();
    let role = usage("vm_info and the inventory");
    let sim = sim_on(role, &[&img], version, &[]);
    let pve8 = version.starts_with('8');
    existing_vm(&sim, "started");
    let options = json!({"vmid": 100});
    let writes = sim.writes().len();
    // Without VM.Audit, PVE lists the VM to no one (pve-manager API2/Cluster.pm resources):
    // the run finds nothing; without the agent's privilege it fails naming it.
    for (i, (privilege, _)) in role.privileges.iter().enumerate() {
        let r = result(run_vm_info(merge(&[
            token(&sim, &format!("no{i}")),
            options.clone(),
        ])));
        let privilege = named_on(role, privilege, pve8);
        if privilege == "VM.Audit" {
            assert_eq!(r["vms"], json!([]), "{r}");
        } else {
            assert_eq!(r["failed"], true, "without {privilege}: {r}");
            assert!(r["msg"].as_str().unwrap().contains(privilege), "{r}");
        }
    }
    assert_eq!(sim.writes().len(), writes);
    let facts = ok(run_vm_info(merge(&[token(&sim, "all"), options])));
    assert_eq!(facts["vms"][0]["vmid"], 100, "{facts}");
}

#[test]
fn vm_info_with_exactly_its_role() {
    on_each_version(vm_info_with_exactly_its_role_on);
}

/// The README's quick start, with its role: the image downloaded, the VM made from it.
#[test]
fn the_quick_start_with_exactly_its_role() {
    let img = small_image();
    let port = serve_file(std::fs::read(&img).unwrap(), Duration::ZERO);
    let role = usage("the quick start");
    on_each_version(|version| {
        let sim = sim_on(role, &[], version, &[]);
        let image = json!({"node": "pve1", "storage": "local",
                       "url": format!("http://127.0.0.1:{port}/noble-server-cloudimg-amd64.img")});
        let vm = json!({
            "node": "pve1", "vmid": 100, "name": "web1", "pool": "automation", "state": "started",
            "cores": 2, "memory": 2048, "net": [{"bridge": "vmbr0"}],
            "disks": [{"slot": "scsi0", "storage": "local-lvm",
                       "import_from": "local:import/noble-server-cloudimg-amd64.qcow2", "size": "2G"}],
            "ciuser": "ubuntu", "ipconfig": [{"ip": "dhcp"}],
        });
        // Each missing privilege fails the image's download or, when the download does not
        // need it, the VM's create from the image; neither sends a write.
        for (i, (privilege, _)) in role.privileges.iter().enumerate() {
            let privilege = named_on(role, privilege, version.starts_with('8'));
            ok(run_image(merge(&[
                sim.conn(),
                image.clone(),
                json!({"state": "absent"}),
            ])));
            let conn = token(&sim, &format!("no{i}"));
            let mut writes = sim.writes().len();
            let mut refused = result(run_image(merge(&[conn.clone(), image.clone()])));
            if refused["failed"] != true {
                writes = sim.writes().len();
                refused = result(run(merge(&[conn, vm.clone()])));
            }
            let msg = refused["msg"].as_str().unwrap_or_default();
            assert_eq!(refused["failed"], true, "without {privilege}: {refused}");
            assert!(msg.contains(privilege), "without {privilege}: {msg}");
            assert_eq!(
                sim.writes()[writes..].to_vec(),
                Vec::<Value>::new(),
                "without {privilege}: a write was sent"
            );
        }
        ok(run_image(merge(&[token(&sim, "all"), image])));
        let made = ok(run(merge(&[token(&sim, "all"), vm])));
        assert_eq!(made["status"], "running", "{made}");
    });
}
