//! The inventory plugin `sankofa.proxmox.proxmox` against `pve-sim`, through
//! `ansible-inventory` and a `*.proxmox.yml` file carrying the modules' connection options:
//! the VMs listed by name, grouped by node, pool, tag and status, with `compose`,
//! `keyed_groups` and `groups` applied, and the per-VM facts read only where an option needs
//! them (the default options' requests do not grow with the cluster).
//!
//! It needs the virtualenv and the collection link that `make test` sets up first
//! (`make venv collection`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::{Value, json};

fn make_vm(sim: &Sim, vmid: &str, extra: &[(&str, &str)]) {
    let mut form = vec![("vmid", vmid), ("memory", "512")];
    form.extend_from_slice(extra);
    let upid = sim.write("POST", "/nodes/pve1/qemu", &form)["data"]
        .as_str()
        .expect("a UPID")
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while sim.get(&format!("/nodes/pve1/tasks/{upid}/status"))["data"]["status"] != "stopped" {
        assert!(Instant::now() < deadline, "the create never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn inventory(file: &Path) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join(".venv/bin/ansible-inventory");
    assert!(
        bin.exists(),
        "{} is missing: run `make venv collection` before this test",
        bin.display()
    );
    let out = Command::new(&bin)
        .args(["--list", "-i"])
        .arg(file)
        .env("ANSIBLE_COLLECTIONS_PATH", root.join(".work/collections"))
        .env("ANSIBLE_HOME", root.join(".work/ansible-home"))
        .env("ANSIBLE_INVENTORY_ENABLED", "sankofa.proxmox.proxmox")
        .env("ANSIBLE_INVENTORY_UNPARSED_FAILED", "1")
        .env("ANSIBLE_NOCOLOR", "1")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("all_proxy")
        .env_remove("ALL_PROXY")
        .output()
        .expect("running ansible-inventory");
    assert!(
        out.status.success(),
        "ansible-inventory failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("ansible-inventory's JSON")
}

/// A value as the playbook sees it: `ansible-inventory` marks strings from an inventory
/// source as unsafe (not templated), `{"__ansible_unsafe": "…"}`.
fn plain(v: &Value) -> Value {
    match v {
        Value::Object(o) if o.contains_key("__ansible_unsafe") => o["__ansible_unsafe"].clone(),
        Value::Array(items) => Value::Array(items.iter().map(plain).collect()),
        other => other.clone(),
    }
}

/// A `*.proxmox.yml` file for `sim`'s connection with `options` beside it; JSON is YAML, so
/// the file carries the modules' connection options as they are.
fn inventory_file(sim: &Sim, tag: &str, options: Value) -> std::path::PathBuf {
    let mut config = sim.conn();
    config["plugin"] = json!("sankofa.proxmox.proxmox");
    config["vm_info_executable"] = json!(env!("CARGO_BIN_EXE_vm_info"));
    for (k, v) in options.as_object().expect("options as an object") {
        config[k] = v.clone();
    }
    let file = scratch(tag).join("lab.proxmox.yml");
    std::fs::write(&file, config.to_string()).unwrap();
    file
}

/// The inventory of `file`, and the request paths (without the query) it sent to `sim`.
fn inventory_and_requests(sim: &Sim, file: &Path) -> (Value, Vec<String>) {
    let before = sim.requests().len();
    let inv = inventory(file);
    let sent = sim.requests()[before..]
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["method"].as_str().unwrap(),
                r["path"].as_str().unwrap()
            )
        })
        .map(|r| r.split('?').next().unwrap().to_string())
        .collect();
    (inv, sent)
}

/// How many of `sent` end with `suffix` (a per-VM read: `/pending`, `/snapshot`, …).
fn count(sent: &[String], suffix: &str) -> usize {
    sent.iter().filter(|r| r.ends_with(suffix)).count()
}

fn hosts(inv: &Value, group: &str) -> Vec<String> {
    let mut h: Vec<String> = inv[group]["hosts"]
        .as_array()
        .map(|a| a.iter().map(|h| h.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    h.sort();
    h
}

#[test]
fn lists_the_vms_by_name_in_their_groups_through_a_proxmox_yml_file() {
    let sim = Sim::start(&[], &["--stats-interval", "0s"]);
    let made = sim.write("POST", "/pools", &[("poolid", "team")]);
    assert_eq!(made["__status"], 200, "{made}");
    make_vm(&sim, "100", &[("name", "web1"), ("tags", "web;prod")]);
    make_vm(&sim, "101", &[("name", "db1"), ("pool", "team")]);
    let dir = scratch("inventory");
    let mut config = sim.conn();
    for (k, v) in [
        ("plugin", json!("sankofa.proxmox.proxmox")),
        ("vm_info_executable", json!(env!("CARGO_BIN_EXE_vm_info"))),
        (
            "compose",
            json!({"ansible_host": "'10.1.0.' ~ (proxmox_vmid - 99)"}),
        ),
        (
            "keyed_groups",
            json!([{"key": "proxmox_node", "prefix": "on"}]),
        ),
        ("groups", json!({"webservers": "'web' in proxmox_tags"})),
    ] {
        config[k] = v;
    }
    // JSON is YAML: the file carries the modules' connection options as they are.
    let file = dir.join("lab.proxmox.yml");
    std::fs::write(&file, config.to_string()).unwrap();
    let writes = sim.writes().len();
    let before = sim.requests().len();
    let inv = inventory(&file);
    let sent: Vec<String> = sim.requests()[before..]
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect();

    assert_eq!(hosts(&inv, "proxmox_all_qemu"), ["db1", "web1"]);
    assert_eq!(hosts(&inv, "proxmox_node_pve1"), ["db1", "web1"]);
    assert_eq!(hosts(&inv, "proxmox_pool_team"), ["db1"]);
    assert_eq!(hosts(&inv, "proxmox_tag_web"), ["web1"]);
    assert_eq!(hosts(&inv, "proxmox_stopped"), ["db1", "web1"]);
    assert_eq!(hosts(&inv, "on_pve1"), ["db1", "web1"]);
    assert_eq!(hosts(&inv, "webservers"), ["web1"]);
    let vars = &inv["_meta"]["hostvars"]["web1"];
    assert_eq!(plain(&vars["proxmox_vmid"]), 100);
    assert_eq!(plain(&vars["proxmox_node"]), "pve1");
    assert_eq!(plain(&vars["ansible_host"]), "10.1.0.1");
    assert_eq!(plain(&vars["proxmox_tags"]), json!(["prod", "web"]));
    // Nothing these options use is per VM: no config, snapshot or agent read, and no var of one.
    assert!(
        !sent.iter().any(|p| p.contains("/qemu/")),
        "per-VM reads: {sent:?}"
    );
    for var in [
        "proxmox_config",
        "proxmox_snapshots",
        "proxmox_agent_addresses",
    ] {
        assert!(
            vars.get(var).is_none(),
            "{var} set without being read: {vars}"
        );
    }
    // The inventory only reads.
    assert_eq!(sim.writes().len(), writes);
}

/// The default options read the cluster listing and one VM list per node: the same requests
/// for 2 VMs as for 12 (and a login with a password).
#[test]
fn the_default_options_send_as_many_requests_for_12_vms_as_for_2() {
    let sim = Sim::start(&[], &["--stats-interval", "0s"]);
    let file = inventory_file(&sim, "inventory-scale", json!({}));
    make_vm(&sim, "100", &[("name", "web1")]);
    make_vm(&sim, "101", &[("name", "web2")]);
    let (inv, few) = inventory_and_requests(&sim, &file);
    assert_eq!(hosts(&inv, "proxmox_all_qemu"), ["web1", "web2"]);
    for vmid in 102..112 {
        make_vm(
            &sim,
            &vmid.to_string(),
            &[("name", &format!("web{}", vmid - 99))],
        );
    }
    let (inv, many) = inventory_and_requests(&sim, &file);
    assert_eq!(hosts(&inv, "proxmox_all_qemu").len(), 12);
    assert_eq!(few.len(), many.len(), "2 VMs: {few:?}; 12 VMs: {many:?}");
    // The login, the cluster listing, the one node's VM list.
    assert_eq!(
        many,
        [
            "POST /access/ticket",
            "GET /cluster/resources",
            "GET /nodes/pve1/qemu"
        ],
        "{many:?}"
    );
}

/// A per-VM fact is read where an expression names it or `facts` asks for it, and only that
/// fact: the config for `proxmox_config`, the snapshots for `facts: [snapshots]`, the agent
/// (after the config, of running VMs only) for `proxmox_agent_addresses`.
#[test]
fn per_vm_facts_are_read_only_where_the_options_use_them() {
    let sim = Sim::start(&[], &["--stats-interval", "0s", "--agent-delay", "0s"]);
    make_vm(
        &sim,
        "100",
        &[
            ("name", "web1"),
            ("cores", "4"),
            ("agent", "1"),
            ("net0", "virtio,bridge=vmbr0"),
            ("ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1"),
        ],
    );
    make_vm(&sim, "101", &[("name", "db1"), ("agent", "1")]);
    make_vm(&sim, "102", &[("name", "db2")]);
    let upid = sim.write("POST", "/nodes/pve1/qemu/100/status/start", &[])["data"]
        .as_str()
        .expect("a UPID")
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while sim.get(&format!("/nodes/pve1/tasks/{upid}/status"))["data"]["status"] != "stopped" {
        assert!(Instant::now() < deadline, "the start never ended");
        std::thread::sleep(Duration::from_millis(50));
    }

    let by_config = inventory_file(
        &sim,
        "inventory-config",
        json!({"groups": {"big": "(proxmox_config.cores | default(1) | int) >= 4"}}),
    );
    let (inv, sent) = inventory_and_requests(&sim, &by_config);
    assert_eq!(hosts(&inv, "big"), ["web1"]);
    assert_eq!(count(&sent, "/pending"), 3, "{sent:?}");
    assert_eq!(
        count(&sent, "/snapshot") + count(&sent, "-interfaces"),
        0,
        "{sent:?}"
    );
    let vars = &inv["_meta"]["hostvars"]["web1"];
    assert_eq!(plain(&vars["proxmox_config"]["cores"]), json!(4));
    assert!(vars.get("proxmox_snapshots").is_none(), "{vars}");

    let by_option = inventory_file(&sim, "inventory-snapshots", json!({"facts": ["snapshots"]}));
    let (inv, sent) = inventory_and_requests(&sim, &by_option);
    assert_eq!(count(&sent, "/snapshot"), 3, "{sent:?}");
    assert_eq!(
        count(&sent, "/pending") + count(&sent, "-interfaces"),
        0,
        "{sent:?}"
    );
    assert_eq!(
        plain(&inv["_meta"]["hostvars"]["db1"]["proxmox_snapshots"]),
        json!([])
    );

    // Only web1 runs: its config shows the agent on, then the agent is read.
    let by_agent = inventory_file(
        &sim,
        "inventory-agent",
        json!({"keyed_groups": [{"key": "proxmox_agent_addresses | default([], true) | length | string", "prefix": "addresses"}]}),
    );
    let (inv, sent) = inventory_and_requests(&sim, &by_agent);
    assert_eq!(count(&sent, "/pending"), 1, "{sent:?}");
    assert_eq!(count(&sent, "/agent/network-get-interfaces"), 1, "{sent:?}");
    assert_eq!(count(&sent, "/snapshot"), 0, "{sent:?}");
    assert_eq!(hosts(&inv, "addresses_0"), ["db1", "db2"]);
    assert_eq!(hosts(&inv, "addresses_1"), ["web1"]);
    // With the agent's addresses read, ansible_host is the first.
    assert_eq!(
        plain(&inv["_meta"]["hostvars"]["web1"]["ansible_host"]),
        "10.0.0.5"
    );
}
