//! The inventory plugin `sankofa.proxmox.proxmox` against `pve-sim`, through
//! `ansible-inventory` and a `*.proxmox.yml` file carrying the modules' connection options:
//! the VMs listed by name, grouped by node, pool, tag and status, with `compose`,
//! `keyed_groups` and `groups` applied.
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
    let inv = inventory(&file);

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
    // The inventory only reads.
    assert_eq!(sim.writes().len(), writes);
}
