//! The cluster endpoints, after pve-manager's `API2/Cluster.pm`: `/cluster/resources` (from
//! pvestatd's lagging stats), `/cluster/nextid`, `/cluster/status` and the node list.

use serde_json::{Value, json};

use crate::http::handler::{ApiErr, ApiResult};
use crate::state::Sim;
use crate::storage::volumes;

/// `GET /cluster/resources`.
///
/// pve-manager API2/Cluster.pm, resources: the list of VMs and their `lock` and `tags` come
/// from the cluster file system at once; everything else from pvestatd's RRD data
/// (API2Tools.pm, extract_vm_stats), refreshed every `--stats-interval` (10 s in PVE). Until
/// then a new VM is listed with `status: unknown` and no `name`, `maxmem` or `maxcpu`, and a
/// changed name or power state shows its old value.
pub fn cluster_resources(sim: &Sim, kind: Option<&str>) -> Value {
    let mut out = Vec::new();
    if kind.is_none() || kind == Some("vm") {
        if sim.opts.stats_interval.is_zero() {
            sim.update_stats();
        }
        let st = sim.lock();
        for (id, vm) in &st.vms {
            let c = &vm.config;
            let mut o = json!({
                "id": format!("qemu/{id}"), "type": "qemu", "vmid": id, "node": vm.node,
                "status": "unknown",
            });
            if let Some(Value::Object(stats)) = st.stats.get(id) {
                for (k, v) in stats {
                    o[k] = v.clone();
                }
                // 9.0's `memhost` (versions.rs): the host's view of a running VM's memory.
                if crate::versions::has(
                    &sim.opts.version,
                    crate::versions::Change::ResourcesMemhost,
                ) {
                    o["memhost"] = json!(if vm.running {
                        stats.get("maxmem").cloned().unwrap_or(json!(0))
                    } else {
                        json!(0)
                    });
                }
            }
            if let Some(l) = c.get("lock") {
                o["lock"] = json!(l);
            }
            if let Some(t) = c.get("tags") {
                o["tags"] = json!(t);
            }
            // `pool`: the VM's pool of user.cfg (`$usercfg->{vms}->{$vmid}`).
            if let Some(p) = st.user_cfg.vm_pool.get(id) {
                o["pool"] = json!(p);
            }
            // `hastate`: the CRM's service state, else the resource's requested one.
            if let Some(h) = crate::ha::manager::hastate(&st.ha, *id) {
                o["hastate"] = json!(h);
            }
            out.push(o);
        }
    }
    if kind.is_none() || kind == Some("storage") {
        for n in &sim.opts.nodes {
            for s in volumes::all()
                .into_iter()
                .filter(|s| crate::storage::storage_cfg::on_node(s.id, n))
            {
                out.push(json!({"id": format!("storage/{n}/{}", s.id), "type": "storage", "storage": s.id, "node": n,
                    "status": "available", "plugintype": s.kind, "content": s.content.join(","), "shared": s.shared as u8,
                    "maxdisk": 107374182400u64, "disk": 0}));
            }
        }
    }
    if kind.is_none() || kind == Some("node") {
        for n in &sim.opts.nodes {
            out.push(json!({"id": format!("node/{n}"), "type": "node", "node": n, "status": "online", "maxcpu": 16}));
        }
    }
    json!(out)
}

/// `GET /cluster/nextid`: the lowest free id of datacenter.cfg's `next-id` range, as a
/// string; no reservation, as in PVE. An id asked for is checked only for being free.
pub fn next_id(sim: &Sim, asked: Option<&String>) -> ApiResult {
    let st = sim.lock();
    if let Some(v) = asked {
        let id: u32 = v.parse().unwrap_or(0);
        if st.vms.contains_key(&id) {
            return Err(ApiErr::param("vmid", format!("VM {id} already exists")));
        }
        return Ok(json!(id.to_string()));
    }
    let range = sim.opts.next_id.range();
    let (lower, upper) = (range.start, range.end);
    match range.into_iter().find(|i| !st.vms.contains_key(i)) {
        Some(id) => Ok(json!(id.to_string())),
        None => Err(ApiErr::die(format!(
            "unable to get any free VMID in range [{lower}, {upper}]"
        ))),
    }
}

/// `GET /nodes` (pve-manager API2/Nodes.pm, index): every node online.
pub fn nodes(sim: &Sim) -> Value {
    let up = sim.boot.elapsed().as_secs();
    json!(sim.opts.nodes.iter().map(|n| json!({
        "node": n, "status": "online", "type": "node", "id": format!("node/{n}"), "level": "",
        "maxcpu": 16, "cpu": 0.01, "maxmem": 68719476736u64, "mem": 4294967296u64,
        "maxdisk": 107374182400u64, "disk": 10737418240u64, "uptime": up, "ssl_fingerprint": sim.fingerprint,
    })).collect::<Vec<_>>())
}

/// `GET /cluster/status` (API2/ClusterStatus.pm): a quorate cluster of the nodes.
pub fn cluster_status(sim: &Sim) -> Value {
    let nodes = &sim.opts.nodes;
    let mut out = vec![
        json!({"type": "cluster", "id": "cluster", "name": "pve-sim", "nodes": nodes.len(), "quorate": 1, "version": nodes.len()}),
    ];
    for (i, n) in nodes.iter().enumerate() {
        out.push(json!({"type": "node", "id": format!("node/{n}"), "name": n, "nodeid": i + 1, "ip": "127.0.0.1",
                        "online": 1, "local": if i == 0 { 1 } else { 0 }, "level": ""}));
    }
    json!(out)
}
