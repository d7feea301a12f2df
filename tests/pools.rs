//! The `vm` module's `pool` option against pve-sim's pools (pve-manager API2/Pool.pm):
//! create_vm and clone_vm add the new VM to the pool at the end of their tasks
//! (AccessControl.pm add_vm_to_pool), and refuse a pool that does not exist before anything
//! is made (`check_pool_exist`: `Permission check failed (pool 'X' does not exist)`).

use crate::support::*;
use serde_json::{Value, json};

fn members(sim: &Sim, pool: &str) -> Vec<Value> {
    let v = sim.get(&format!("/pools?poolid={pool}"));
    assert_eq!(v["__status"], 200, "{v}");
    v["data"][0]["members"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn vm_args(sim: &Sim, vmid: u32, extra: Value) -> Value {
    merge(&[
        sim.conn(),
        json!({
            "node": "pve1", "vmid": vmid, "name": format!("db{vmid}"), "memory": 1024,
            "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2"}],
            "net": [{"bridge": "vmbr0"}],
        }),
        extra,
    ])
}

#[test]
fn a_vm_created_or_cloned_with_pool_is_in_that_pool() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    let made = sim.write(
        "POST",
        "/pools",
        &[("poolid", "databases"), ("comment", "db tier")],
    );
    assert_eq!(made["__status"], 200, "{made}");

    let r = ok(run(vm_args(&sim, 100, json!({"pool": "databases"}))));
    assert_eq!(r["changed"], true);
    let m = members(&sim, "databases");
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(
        (m[0]["id"].clone(), m[0]["node"].clone()),
        (json!("qemu/100"), json!("pve1"))
    );
    // The pool is a create parameter: a second run with it changes nothing.
    let again = ok(run(vm_args(&sim, 100, json!({"pool": "databases"}))));
    assert_eq!(again["changed"], false, "{again}");

    // A pool that does not exist is refused by PVE before any task: nothing is created.
    let bad = failed(run(vm_args(&sim, 101, json!({"pool": "nosuchpool"}))));
    let msg = bad["msg"].as_str().unwrap();
    assert!(
        msg.contains("Permission check failed (pool 'nosuchpool' does not exist)"),
        "{msg}"
    );
    assert_eq!(sim.get("/nodes/pve1/qemu/101/config")["__status"], 500);
    assert_eq!(sim.task_count("qmcreate"), 1);

    // A clone into the pool (clone_vm adds the new VM, not its source).
    ok(run(merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 102, "name": "db102", "clone": {"vmid": 100}, "pool": "databases"}),
    ])));
    let ids: Vec<Value> = members(&sim, "databases")
        .iter()
        .map(|e| e["id"].clone())
        .collect();
    assert_eq!(ids, vec![json!("qemu/100"), json!("qemu/102")]);

    // Destroyed VMs leave the pool (destroy_vm's remove_vm_access): then it can be deleted.
    for vmid in [100, 102] {
        ok(run(merge(&[
            sim.conn(),
            json!({"node": "pve1", "vmid": vmid, "state": "absent"}),
        ])));
    }
    assert!(members(&sim, "databases").is_empty());
    assert_eq!(
        sim.write("DELETE", "/pools?poolid=databases", &[])["__status"],
        200
    );
}
