//! The `vm_info` module against `pve-sim`: VMs found by vmid, by tag, by pool and all of them,
//! with config (current and pending), status, snapshots and agent addresses; nothing written.

use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::{Value, json};

fn wait(sim: &Sim, answer: Value) {
    let upid = answer["data"].as_str().expect("a UPID").to_string();
    let node = upid.split(':').nth(1).unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = sim.get(&format!("/nodes/{node}/tasks/{upid}/status"));
        if st["data"]["status"] == "stopped" {
            assert_eq!(st["data"]["exitstatus"], "OK", "{upid}");
            return;
        }
        assert!(Instant::now() < deadline, "{upid} never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn make_vm(sim: &Sim, vmid: &str, extra: &[(&str, &str)]) {
    let mut form = vec![("vmid", vmid), ("memory", "512")];
    form.extend_from_slice(extra);
    wait(sim, sim.write("POST", "/nodes/pve1/qemu", &form));
}

fn vmids(r: &Value) -> Vec<u64> {
    r["vms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["vmid"].as_u64().unwrap())
        .collect()
}

#[test]
fn finds_vms_by_vmid_tag_and_pool_and_reports_their_facts() {
    let sim = Sim::start(&[], &["--stats-interval", "0s"]);
    make_vm(
        &sim,
        "100",
        &[
            ("name", "web1"),
            ("tags", "web;prod"),
            ("scsi0", "local-lvm:1"),
            ("agent", "1"),
            ("net0", "virtio,bridge=vmbr0"),
            ("ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1"),
        ],
    );
    let made = sim.write("POST", "/pools", &[("poolid", "team")]);
    assert_eq!(made["__status"], 200, "{made}");
    make_vm(
        &sim,
        "101",
        &[("name", "db1"), ("tags", "db"), ("pool", "team")],
    );
    make_vm(&sim, "102", &[("name", "web2"), ("tags", "web")]);
    wait(
        &sim,
        sim.write(
            "POST",
            "/nodes/pve1/qemu/100/snapshot",
            &[("snapname", "s1")],
        ),
    );
    wait(
        &sim,
        sim.write("POST", "/nodes/pve1/qemu/100/status/start", &[]),
    );
    // A change the running VM takes at its next start stays pending.
    wait(
        &sim,
        sim.write("POST", "/nodes/pve1/qemu/100/config", &[("cores", "4")]),
    );
    let before = sim.writes().len();

    let all = ok(run_vm_info(sim.conn()));
    assert_eq!(all["changed"], false);
    assert_eq!(vmids(&all), [100, 101, 102]);

    let by_tag = ok(run_vm_info(merge(&[sim.conn(), json!({"tags": ["web"]})])));
    assert_eq!(vmids(&by_tag), [100, 102]);
    let both = ok(run_vm_info(merge(&[
        sim.conn(),
        json!({"tags": ["web", "prod"]}),
    ])));
    assert_eq!(vmids(&both), [100]);
    let pool = ok(run_vm_info(merge(&[sim.conn(), json!({"pool": "team"})])));
    assert_eq!(vmids(&pool), [101]);
    assert_eq!(pool["vms"][0]["pool"], "team");

    let one = ok(run_vm_info(merge(&[
        sim.conn(),
        json!({"vmid": 100, "_ansible_check_mode": true}),
    ])));
    assert_eq!(vmids(&one), [100]);
    let vm = &one["vms"][0];
    assert_eq!(vm["name"], "web1");
    assert_eq!(vm["node"], "pve1");
    assert_eq!(vm["status"], "running");
    assert_eq!(vm["tags"], json!(["prod", "web"]));
    assert_eq!(vm["config"]["memory"], json!("512"));
    assert_eq!(vm["pending"]["cores"], json!(4));
    assert_eq!(vm["snapshots"][0]["name"], "s1");
    // The agent answers after --agent-delay; by then its address is the ipconfig's.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = ok(run_vm_info(merge(&[sim.conn(), json!({"vmid": 100})])));
        if let Some(addrs) = r["vms"][0]["agent_addresses"].as_array() {
            assert!(addrs.iter().any(|a| a == "10.0.0.5"), "{addrs:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agent's addresses never came"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // A VM without an agent has none; nothing was written by any run.
    assert_eq!(all["vms"][1]["agent_addresses"], Value::Null);
    assert_eq!(all["vms"][1]["status"], "stopped");
    // One VM list for the node, config+pending and snapshots per VM, and the agent of the
    // one running VM that has it on.
    assert_eq!(all["vm_requests"], 1 + 2 * 3 + 1, "{all}");
    // `facts: []`: the listings alone, the node's VM list and no read per VM.
    let listed = ok(run_vm_info(merge(&[sim.conn(), json!({"facts": []})])));
    assert_eq!(vmids(&listed), [100, 101, 102]);
    assert_eq!(listed["vm_requests"], 1, "{listed}");
    assert_eq!(listed["vms"][0]["status"], "running");
    assert_eq!(listed["vms"][0]["tags"], json!(["prod", "web"]));
    assert!(listed["vms"][0].get("config").is_none(), "{listed}");
    assert!(listed["vms"][0].get("snapshots").is_none(), "{listed}");
    assert_eq!(sim.writes().len(), before);
}

/// The power state is the node's, as live as `status/current`, not `/cluster/resources`'
/// (pvestatd's, here an hour old).
#[test]
fn the_power_state_is_live_where_the_cluster_listing_lags() {
    let sim = Sim::start(&[], &["--stats-interval", "1h"]);
    make_vm(&sim, "100", &[("name", "web1")]);
    make_vm(&sim, "101", &[("name", "db1")]);
    wait(
        &sim,
        sim.write("POST", "/nodes/pve1/qemu/100/status/start", &[]),
    );
    let listed = sim.get("/cluster/resources?type=vm");
    let listed_status = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vmid"] == 100)
        .map(|v| v["status"].clone());
    assert_ne!(listed_status, Some(json!("running")), "{listed}");
    let all = ok(run_vm_info(sim.conn()));
    assert_eq!(vmids(&all), [100, 101]);
    assert_eq!(all["vms"][0]["status"], "running");
    assert_eq!(all["vms"][1]["status"], "stopped");
}
