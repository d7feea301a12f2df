//! The `vm` module on clusters as they run in production, against `pve-sim`: VMs the HA stack
//! manages (made HA resources through PVE's own `POST /cluster/ha/resources`, as an admin
//! would; their start, stop and shutdown handed to the CRM/LRM rounds, 10 s in PVE, here
//! scaled by `--time-scale`), on one node and on three, and parallel creates and linked
//! clones on a shared storage whose cluster lock is contended.

use crate::support::*;
use serde_json::{Value, json};

/// The status PVE reports for a VM (`running`, `stopped`).
fn status(sim: &Sim, node: &str, vmid: u32) -> String {
    sim.get(&format!("/nodes/{node}/qemu/{vmid}/status/current"))["data"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn vm_args(sim: &Sim, node: &str, vmid: u32, extra: Value) -> Value {
    merge(&[
        sim.conn(),
        json!({
            "node": node, "vmid": vmid, "name": format!("ha{vmid}"), "memory": 512, "agent": true,
            "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}],
            "net": [{"bridge": "vmbr0"}], "ipconfig": [{"ip": "192.0.2.60/24"}],
            "shutdown_timeout": 30, "timeout": 180
        }),
        extra,
    ])
}

/// A VM made an HA resource by an admin, then started, stopped and restarted by the module:
/// each run returns with the VM in the state asked, and says HA carried the request out.
fn power_operations_on_an_ha_managed_vm(sim: &Sim, node: &str) {
    let vmid = 100;
    let args = |extra: Value| vm_args(sim, node, vmid, extra);
    ok(run(args(json!({"state": "stopped"}))));
    let added = sim.write(
        "POST",
        "/cluster/ha/resources",
        &[("sid", &format!("vm:{vmid}")), ("state", "stopped")],
    );
    assert_eq!(added["__status"], 200, "{added}");

    let r = ok(run(args(json!({"state": "started"}))));
    assert_eq!(r["changed"], true);
    assert_eq!(r["status"], "running", "{r}");
    assert_eq!(status(sim, node, vmid), "running");
    assert!(task_types(&r).contains(&"hastart".to_string()), "{r}");
    let carried = r["ha_carried_out"].to_string();
    assert!(carried.contains("hastart"), "{r}");
    assert!(
        r["msg"]
            .as_str()
            .unwrap()
            .contains("carried out by the HA stack"),
        "{r}"
    );
    // Converged: nothing is sent again.
    let again = ok(run(args(json!({"state": "started"}))));
    assert_eq!(again["changed"], false, "{again}");

    let r = ok(run(args(json!({"state": "stopped"}))));
    assert_eq!(r["status"], "stopped", "{r}");
    assert_eq!(status(sim, node, vmid), "stopped");
    assert!(task_types(&r).contains(&"hastop".to_string()), "{r}");

    // Started again, with the address its agent reports once it answers (it is busy first:
    // `qga command … got timeout`, waited through).
    let r = ok(run(args(json!({"state": "started", "wait_for_ip": "2m"}))));
    assert_eq!(status(sim, node, vmid), "running");
    assert_eq!(r["ip_addresses"], json!(["192.0.2.60"]), "{r}");

    // A change a running VM takes only at its next start, applied by a real restart through
    // the HA stack (hastop, then hastart).
    let r = ok(run(args(json!({
        "state": "started", "cores": 2, "restart": "when_needed"
    }))));
    assert_eq!(status(sim, node, vmid), "running");
    let types = task_types(&r);
    assert!(
        types.contains(&"hastop".to_string()) && types.contains(&"hastart".to_string()),
        "{r}"
    );
    let pending = sim.get(&format!("/nodes/{node}/qemu/{vmid}/pending"))["data"].clone();
    assert!(
        pending
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k.get("pending").is_none()),
        "{pending}"
    );
    assert_eq!(r["restart_needed"], false, "{r}");

    // HA is asked to start it (by an admin) and the module waits for its address meanwhile:
    // `VM N is not running` is waited through while the HA stack starts it.
    ok(run(args(json!({"state": "stopped"}))));
    let set = sim.write(
        "PUT",
        &format!("/cluster/ha/resources/vm:{vmid}"),
        &[("state", "started")],
    );
    assert_eq!(set["__status"], 200, "{set}");
    let r = ok(run(args(json!({"state": "present", "wait_for_ip": "2m"}))));
    assert_eq!(r["ip_addresses"], json!(["192.0.2.60"]), "{r}");

    // Removed: the stop is carried out before the destroy is sent, and purge removes the
    // resource.
    let r = ok(run(args(json!({"state": "absent"}))));
    assert_eq!(r["status"], "absent", "{r}");
    assert_eq!(sim.get("/cluster/ha/resources")["data"], json!([]));
}

#[test]
fn start_stop_restart_and_wait_for_ip_on_an_ha_managed_vm() {
    let sim = Sim::start(
        &[],
        &[
            "--time-scale",
            "0.1",
            "--agent-delay",
            "1s",
            "--agent-busy",
            "6s",
        ],
    );
    power_operations_on_an_ha_managed_vm(&sim, "pve1");
}

#[test]
fn the_same_on_a_three_node_cluster() {
    let sim = Sim::start(
        &[],
        &[
            "--nodes",
            "pve1,pve2,pve3",
            "--time-scale",
            "0.1",
            "--agent-delay",
            "1s",
            "--agent-busy",
            "6s",
        ],
    );
    power_operations_on_an_ha_managed_vm(&sim, "pve2");
}

/// Twenty creates and then twenty linked clones at once on a shared storage added with
/// `POST /storage` (`shared=1`), its cluster lock held by another node past cfs_lock's 10 s
/// when they start: every allocation that met `cfs-lock 'storage-X' error: got lock request
/// timeout` is sent again, and all succeed; their volumes are visible from every node.
#[test]
fn parallel_creates_and_linked_clones_on_a_contended_shared_storage() {
    let sim = Sim::start(
        &[],
        &[
            "--nodes",
            "pve1,pve2,pve3",
            "--task-duration",
            "cfs-alloc=200ms",
            "--workers",
            "8",
        ],
    );
    let added = sim.write(
        "POST",
        "/storage",
        &[
            ("storage", "nfs1"),
            ("type", "dir"),
            ("path", "/mnt/nfs1"),
            ("content", "images"),
            ("shared", "1"),
        ],
    );
    assert_eq!(added["__status"], 200, "{added}");
    let disk = |extra: Value| {
        merge(&[
            sim.conn(),
            json!({"node": "pve1", "memory": 256, "timeout": 240,
                   "disks": [{"slot": "scsi0", "storage": "nfs1", "size": "1G"}]}),
            extra,
        ])
    };
    let parallel = |args: Vec<Value>| -> Vec<Value> {
        let handles: Vec<_> = args
            .into_iter()
            .map(|a| std::thread::spawn(move || run(a)))
            .collect();
        handles.into_iter().map(|h| ok(h.join().unwrap())).collect()
    };

    sim.hold_storage_lock("nfs1", 11_000);
    let created = parallel(
        (0..20)
            .map(|i| disk(json!({"vmid": 200 + i, "name": format!("c{i}")})))
            .collect(),
    );
    assert!(created.iter().all(|r| r["changed"] == true));
    let lock_timeouts = sim
        .tasks()
        .iter()
        .filter(|t| {
            t["exitstatus"]
                .as_str()
                .is_some_and(|e| e.contains("got lock request timeout"))
        })
        .count();
    assert!(lock_timeouts > 0, "the lock was never contended");
    for node in ["pve1", "pve2", "pve3"] {
        let content = sim.get(&format!("/nodes/{node}/storage/nfs1/content"))["data"].clone();
        assert_eq!(
            content.as_array().map(Vec::len),
            Some(20),
            "{node}: {content}"
        );
    }

    ok(run(disk(
        json!({"vmid": 300, "name": "base", "template": true}),
    )));
    sim.hold_storage_lock("nfs1", 11_000);
    let cloned = parallel(
        (0..20)
            .map(|i| {
                merge(&[
                    sim.conn(),
                    json!({"node": "pve1", "vmid": 400 + i, "name": format!("l{i}"), "timeout": 240,
                           "clone": {"vmid": 300, "full": false}}),
                ])
            })
            .collect(),
    );
    assert!(cloned.iter().all(|r| r["changed"] == true));
    for i in 0..20 {
        let config = sim.get(&format!("/nodes/pve1/qemu/{}/config", 400 + i))["data"].clone();
        assert!(
            config["scsi0"]
                .as_str()
                .is_some_and(|v| v.starts_with("nfs1:300/base-300-disk-0")),
            "{config}"
        );
    }
}

/// The `ha` option makes the VM an HA resource and converges it: its requested state follows
/// `state`, check mode and diff mode say what would change and change nothing, a re-run
/// changes nothing; its group is set on PVE 8, and PVE 9's refusal (groups became rules) is
/// reported with what to do instead; an `ha.state` that contradicts `state` is refused before
/// any write.
#[test]
fn the_ha_option_makes_the_vm_an_ha_resource_and_converges_it() {
    let sim = Sim::start(&[], &["--pve-version", "8.4", "--time-scale", "0.1"]);
    let args = |extra: Value| vm_args(&sim, "pve1", 100, extra);
    let resource = || sim.get("/cluster/ha/resources/vm:100")["data"].clone();
    // PVE 8 (pve-ha-manager 4.x) sets only a group that exists.
    let group = sim.write(
        "POST",
        "/cluster/ha/groups",
        &[("group", "fast"), ("nodes", "pve1")],
    );
    assert_eq!(group["__status"], 200, "{group}");

    let r = ok(run(args(json!({"state": "stopped", "ha": {}}))));
    assert_eq!(r["ha"], json!({"sid": "vm:100", "state": "stopped"}), "{r}");
    assert_eq!(resource()["state"], "stopped");
    assert_eq!(status(&sim, "pve1", 100), "stopped");

    let writes = sim.writes().len();
    let r = ok(run(args(json!({
        "state": "started", "ha": {"group": "fast"},
        "_ansible_check_mode": true, "_ansible_diff": true
    }))));
    assert_eq!(r["changed"], true, "{r}");
    assert_eq!(r["diff"]["before"]["ha"]["state"], "stopped", "{r}");
    assert_eq!(
        r["diff"]["after"]["ha"],
        json!({"sid": "vm:100", "state": "started", "group": "fast"}),
        "{r}"
    );
    assert_eq!(sim.writes().len(), writes, "check mode wrote");
    assert_eq!(resource()["state"], "stopped");

    let r = ok(run(args(
        json!({"state": "started", "ha": {"group": "fast"}}),
    )));
    assert_eq!(status(&sim, "pve1", 100), "running");
    assert_eq!(resource()["state"], "started");
    assert_eq!(resource()["group"], "fast");
    assert!(r["ha_carried_out"].to_string().contains("hastart"), "{r}");
    let again = ok(run(args(
        json!({"state": "started", "ha": {"group": "fast"}}),
    )));
    assert_eq!(again["changed"], false, "{again}");

    let writes = sim.writes().len();
    let r = failed(run(args(
        json!({"state": "stopped", "ha": {"state": "started"}}),
    )));
    assert!(
        r["msg"]
            .as_str()
            .unwrap()
            .contains("ha.state: started contradicts state: stopped"),
        "{r}"
    );
    assert_eq!(sim.writes().len(), writes);

    // PVE 9 refuses a group: the message says what to do instead, and nothing changed.
    let nine = Sim::start(&[], &["--time-scale", "0.1"]);
    ok(run(vm_args(
        &nine,
        "pve1",
        100,
        json!({"state": "stopped"}),
    )));
    let r = failed(run(vm_args(
        &nine,
        "pve1",
        100,
        json!({"state": "stopped", "ha": {"group": "fast"}}),
    )));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.contains("migrated to rules") && msg.contains("/cluster/ha/rules"),
        "{msg}"
    );
    assert_eq!(nine.get("/cluster/ha/resources")["data"], json!([]));
}

/// A task that acted and then failed, told by PVE's exact message: a shutdown whose guest
/// ignored ACPI (`VM quit/powerdown failed - got timeout`, QemuServer.pm `_do_vm_stop`) and a
/// resize over PVE's 10 s (`command '/usr/bin/qemu-img resize …' failed: got timeout`,
/// pve-storage `qemu_img_resize`). Neither counts as a refusal (sent again until the
/// deadline): the VM is read again, the step is sent again only if it is still needed (here
/// pve-sim carried the work out before the failure), and the result warns of the failure
/// with its cause.
#[test]
fn failures_that_acted_are_read_again_and_reported_with_their_cause() {
    let sim = Sim::start(&[], &["--time-scale", "0.1"]);
    let args = |extra: Value| {
        vm_args(
            &sim,
            "pve1",
            100,
            merge(&[json!({"force_stop": false, "shutdown_timeout": 5}), extra]),
        )
    };
    ok(run(args(json!({"state": "started"}))));
    let ignored = "VM quit/powerdown failed - got timeout";
    sim.fault(
        json!({"kind": "task", "task_type": "qmshutdown", "outcome": "fail",
                     "message": ignored, "count": 10}),
    );
    let r = ok(run(args(json!({"state": "stopped"}))));
    assert_eq!(status(&sim, "pve1", 100), "stopped");
    assert_eq!(
        task_types(&r).iter().filter(|t| *t == "qmshutdown").count(),
        1,
        "{r}"
    );
    let warnings = r["warnings"].to_string();
    assert!(
        warnings.contains(ignored) && warnings.contains("ignored the ACPI"),
        "{r}"
    );
    sim.clear_faults();

    let slow = "command '/usr/bin/qemu-img resize -f raw /dev/pve/vm-100-disk-0 2147483648' \
                failed: got timeout";
    sim.fault(
        json!({"kind": "task", "task_type": "resize", "outcome": "fail",
                     "message": slow, "count": 10}),
    );
    let r = ok(run(args(json!({
        "state": "stopped", "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "2G"}]
    }))));
    assert_eq!(task_types(&r), ["resize"], "{r}");
    assert_eq!(
        r["config"]["scsi0"], "local-lvm:vm-100-disk-0,size=2G",
        "{r}"
    );
    let warnings = r["warnings"].to_string();
    assert!(
        warnings.contains("failed: got timeout") && warnings.contains("outlasted PVE's 10 s"),
        "{r}"
    );
}

/// PVE 9's HA rules through the `ha` option (pve-ha-manager API2/HA/Rules.pm): the VM's
/// node affinity becomes the rule `sankofa-vm-<vmid>`, its resource affinity
/// `sankofa-vm-<vmid>-negative`, `failback`/`max_restart`/`max_relocate` the resource's options;
/// check and diff mode show them and write nothing; the CRM then moves the running VM to the
/// rule's highest-priority node (Manager.pm select_service_node), and the run waits until it
/// runs there (bpg#2417); a re-run changes nothing; dropping the options removes the rules
/// the module named; another rule holding the VM is refused before any write.
#[test]
fn ha_rules_place_and_separate_vms_on_pve_9() {
    let sim = Sim::start(&[], &["--nodes", "pve1,pve2,pve3", "--time-scale", "0.1"]);
    let args = |vmid: u32, extra: Value| vm_args(&sim, "pve1", vmid, extra);
    ok(run(args(101, json!({"state": "started", "ha": {}}))));
    ok(run(args(100, json!({"state": "started"}))));
    // PVE refuses resource affinity beside a node affinity of several priorities: so is the
    // option, before any request.
    let r = failed(run(args(
        100,
        json!({"state": "started", "ha": {
            "node_affinity": {"nodes": {"pve2": 2, "pve3": 1}},
            "resource_affinity": [{"affinity": "negative", "vms": [101]}]
        }}),
    )));
    assert!(
        r["msg"]
            .as_str()
            .unwrap()
            .contains("more than one priority"),
        "{r}"
    );
    let ha = json!({
        "node_affinity": {"nodes": {"pve2": 1, "pve3": 1}, "strict": true},
        "resource_affinity": [{"affinity": "negative", "vms": [101]}],
        "max_restart": 2, "failback": true
    });

    let writes = sim.writes().len();
    let r = ok(run(args(
        100,
        json!({
            "state": "started", "ha": ha,
            "_ansible_check_mode": true, "_ansible_diff": true
        }),
    )));
    assert_eq!(r["changed"], true, "{r}");
    assert_eq!(sim.writes().len(), writes, "check mode wrote");
    let after = &r["diff"]["after"]["ha"];
    assert_eq!(after["rules"][0]["rule"], "sankofa-vm-100", "{r}");
    assert_eq!(
        after["rules"][0]["nodes"],
        json!({"pve2": 1, "pve3": 1}),
        "{r}"
    );
    assert_eq!(after["rules"][1]["rule"], "sankofa-vm-100-negative", "{r}");
    assert_eq!(after["max_restart"], 2, "{r}");

    let r = ok(run(args(100, json!({"state": "started", "ha": ha}))));
    assert_eq!(r["changed"], true, "{r}");
    let rule = sim.get("/cluster/ha/rules/sankofa-vm-100")["data"].clone();
    assert_eq!(
        (
            rule["nodes"].clone(),
            rule["strict"].clone(),
            rule["resources"].clone()
        ),
        (json!("pve2:1,pve3:1"), json!(1), json!("vm:100")),
        "{rule}"
    );
    let apart = sim.get("/cluster/ha/rules/sankofa-vm-100-negative")["data"].clone();
    assert_eq!(
        (apart["affinity"].clone(), apart["resources"].clone()),
        (json!("negative"), json!("vm:100,vm:101")),
        "{apart}"
    );
    assert_eq!(
        sim.get("/cluster/ha/resources/vm:100")["data"]["max_restart"],
        2
    );
    // Followed to its end: the run returned with the VM running on pve2.
    assert_eq!(status(&sim, "pve2", 100), "running");
    assert!(
        r["ha_carried_out"]
            .to_string()
            .contains("moved VM 100 from pve1 to pve2"),
        "{r}"
    );
    assert_eq!(r["node"], "pve2", "{r}");

    let again = ok(run(args(100, json!({"state": "started", "ha": ha}))));
    assert_eq!(again["changed"], false, "{again}");
    // Where its rule placed it: no warning that it is not on `node`.
    assert!(
        !again["warnings"].to_string().contains("not pve1"),
        "{again}"
    );

    // Dropped: the rules the module named are removed; the resource stays.
    let r = ok(run(args(100, json!({"state": "started", "ha": {}}))));
    assert_eq!(r["changed"], true, "{r}");
    assert_eq!(sim.get("/cluster/ha/rules")["data"], json!([]));

    // An admin's node-affinity rule holds the VM: refused, naming it, before any write.
    let made = sim.write(
        "POST",
        "/cluster/ha/rules",
        &[
            ("rule", "web"),
            ("type", "node-affinity"),
            ("resources", "vm:100"),
            ("nodes", "pve3"),
        ],
    );
    assert_eq!(made["__status"], 200, "{made}");
    let writes = sim.writes().len();
    let r = failed(run(args(100, json!({"state": "started", "ha": ha}))));
    assert!(
        r["msg"]
            .as_str()
            .unwrap()
            .contains("node-affinity rule 'web'"),
        "{r}"
    );
    assert_eq!(sim.writes().len(), writes);
}

/// On PVE 8 (no `/cluster/ha/rules`: 501) the options only PVE 9 has are refused before any
/// write, naming the version and the alternative (`ha.group`).
#[test]
fn ha_rules_are_refused_on_pve_8_with_the_alternative() {
    let sim = Sim::start(&[], &["--pve-version", "8.4", "--time-scale", "0.1"]);
    ok(run(vm_args(&sim, "pve1", 100, json!({"state": "stopped"}))));
    let writes = sim.writes().len();
    let r = failed(run(vm_args(
        &sim,
        "pve1",
        100,
        json!({"state": "stopped", "ha": {"node_affinity": {"nodes": {"pve1": 1}}}}),
    )));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.contains("ha.node_affinity needs PVE 9") && msg.contains("ha.group"),
        "{msg}"
    );
    assert_eq!(sim.writes().len(), writes);
    // Before any write also when the run would change the VM, or create one.
    let r = failed(run(vm_args(
        &sim,
        "pve1",
        100,
        json!({"state": "stopped", "memory": 768, "ha": {"node_affinity": {"nodes": {"pve1": 1}}}}),
    )));
    assert!(
        r["msg"]
            .as_str()
            .unwrap()
            .contains("ha.node_affinity needs PVE 9"),
        "{r}"
    );
    let r = failed(run(vm_args(
        &sim,
        "pve1",
        101,
        json!({"state": "stopped", "ha": {"failback": true}}),
    )));
    assert!(
        r["msg"]
            .as_str()
            .unwrap()
            .contains("ha.failback needs PVE 9"),
        "{r}"
    );
    assert_eq!(sim.writes().len(), writes, "{:#?}", sim.writes());
    assert!(sim.get("/nodes/pve1/qemu/101/config")["data"].is_null());
}

/// `ha.rule` naming a rule that exists without the VM (an admin's, or another VM's): the VM
/// joins it, the rule's other resources kept; the rule is not created again.
#[test]
fn ha_rule_names_an_existing_rule_the_vm_joins() {
    let sim = Sim::start(&[], &["--nodes", "pve1,pve2", "--time-scale", "0.1"]);
    let args = |vmid: u32| {
        vm_args(
            &sim,
            "pve1",
            vmid,
            json!({"state": "stopped",
                   "ha": {"rule": "web", "state": "stopped", "node_affinity": {"nodes": {"pve1": 1}}}}),
        )
    };
    ok(run(args(101)));
    let r = ok(run(args(100)));
    assert_eq!(r["changed"], true, "{r}");
    let rule = sim.get("/cluster/ha/rules/web")["data"].clone();
    let mut resources: Vec<&str> = rule["resources"].as_str().unwrap().split(',').collect();
    resources.sort();
    assert_eq!(resources, ["vm:100", "vm:101"], "{rule}");
    for vmid in [100, 101] {
        let again = ok(run(args(vmid)));
        assert_eq!(again["changed"], false, "{again}");
    }
}
