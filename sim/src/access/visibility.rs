//! The lists that show a caller only what it may see (`user => 'all'` endpoints that filter
//! by privilege): pve-manager `API2/Cluster.pm` resources, qemu-server `API2/Qemu.pm`
//! vmlist, pve-storage `API2/Storage/Config.pm` index and `API2/Storage/Status.pm` index.
//! Each takes the list as its handler made it and leaves out the rest.

use serde_json::Value;

use crate::access::check::Checker;

/// Keeps the entries of a JSON array for which `keep` holds (a non-array is left alone).
fn retain(mut list: Value, mut keep: impl FnMut(&mut Value) -> bool) -> Value {
    if let Some(items) = list.as_array_mut() {
        items.retain_mut(|entry| keep(entry));
    }
    list
}

fn vmid_of(entry: &Value) -> Option<u64> {
    entry["vmid"]
        .as_u64()
        .or_else(|| entry["vmid"].as_str()?.parse().ok())
}

/// Cluster.pm resources: a guest needs `VM.Audit` on `/vms/{vmid}` (its `pool` is shown
/// only with `Pool.Audit` on the pool), a pool `Pool.Audit`, a storage `Datastore.Audit`;
/// a node without `Sys.Audit` on `/nodes/{node}` is listed without its usage
/// (API2Tools.pm extract_node_stats with `$exclude_stats`).
pub fn cluster_resources(checker: &Checker, list: Value) -> Value {
    retain(list, |entry| match entry["type"].as_str().unwrap_or("") {
        "qemu" | "lxc" => {
            let Some(vmid) = vmid_of(entry) else {
                return false;
            };
            if !checker.has(&format!("/vms/{vmid}"), &["VM.Audit"]) {
                return false;
            }
            let pool = entry["pool"].as_str().map(String::from);
            if let Some(pool) = pool
                && !checker.has(&format!("/pool/{pool}"), &["Pool.Audit"])
                && let Some(obj) = entry.as_object_mut()
            {
                obj.remove("pool");
            }
            true
        }
        "pool" => {
            let pool = entry["pool"].as_str().unwrap_or("");
            checker.has(&format!("/pool/{pool}"), &["Pool.Audit"])
        }
        "storage" => {
            let sid = entry["storage"].as_str().unwrap_or("");
            checker.has(&format!("/storage/{sid}"), &["Datastore.Audit"])
        }
        "node" => {
            let node = entry["node"].as_str().unwrap_or("").to_string();
            if !checker.has(&format!("/nodes/{node}"), &["Sys.Audit"])
                && let Some(obj) = entry.as_object_mut()
            {
                for stat in [
                    "uptime", "cpu", "mem", "disk", "maxcpu", "maxmem", "maxdisk",
                ] {
                    obj.remove(stat);
                }
            }
            true
        }
        _ => true,
    })
}

/// API2/Qemu.pm vmlist: only the VMs with `VM.Audit` on `/vms/{vmid}`.
pub fn vm_list(checker: &Checker, list: Value) -> Value {
    retain(list, |entry| {
        vmid_of(entry).is_some_and(|vmid| checker.has(&format!("/vms/{vmid}"), &["VM.Audit"]))
    })
}

/// Storage/Config.pm and Storage/Status.pm index: only the storages with `Datastore.Audit`
/// or `Datastore.AllocateSpace` on `/storage/{storage}`.
pub fn storages(checker: &Checker, list: Value) -> Value {
    retain(list, |entry| {
        let sid = entry["storage"].as_str().unwrap_or("");
        checker.has_any(
            &format!("/storage/{sid}"),
            &["Datastore.Audit", "Datastore.AllocateSpace"],
        )
    })
}
