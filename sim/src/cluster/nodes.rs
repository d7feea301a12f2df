//! Node information peers' playbooks read, after pve-manager's `API2/Nodes.pm` (version) and
//! `API2/Network.pm` (index): the node's version, and the interfaces of its
//! `/etc/network/interfaces` as a fresh install writes it (one NIC, `vmbr0` bridged on it).

use serde_json::{Value, json};

use crate::http::handler::Params;
use crate::state::Sim;

/// `GET /nodes/{node}/version` (Nodes.pm, version: `PVE::pvecfg::version_info`), the same
/// as `GET /version` answers.
pub fn version(sim: &Sim) -> Value {
    let played = crate::versions::release(&sim.opts.version);
    let v = played.version;
    json!({
        "version": format!("{}.{}.{}", v.major, v.minor, v.patch),
        "release": played.name,
        "repoid": played.repoid,
    })
}

/// The interfaces of a node (the loopback is never listed: Network.pm deletes `lo`). Each
/// node has its own address on the management network.
fn interfaces(sim: &Sim, node: &str) -> Vec<Value> {
    let idx = sim.opts.nodes.iter().position(|n| n == node).unwrap_or(0) + 11;
    vec![
        json!({
            "iface": "eno1", "type": "eth", "method": "manual", "method6": "manual",
            "families": ["inet"], "priority": 3, "active": 1, "exists": 1,
        }),
        json!({
            "iface": "vmbr0", "type": "bridge", "method": "static", "method6": "manual",
            "families": ["inet"], "priority": 4, "active": 1, "autostart": 1,
            "bridge_ports": "eno1", "bridge_stp": "off", "bridge_fd": "0",
            "address": format!("192.168.100.{idx}"), "netmask": "24",
            "cidr": format!("192.168.100.{idx}/24"), "gateway": "192.168.100.1",
        }),
    ]
}

/// `GET /nodes/{node}/network` (Network.pm, index): with `type`, only that type; `any_bridge`
/// and `any_local_bridge` take Linux and OVS bridges (no SDN here, so `include_sdn` and
/// `vnet` add nothing).
pub fn network(sim: &Sim, node: &str, params: &Params) -> Value {
    let filter = params.get("type").map(String::as_str);
    json!(
        interfaces(sim, node)
            .into_iter()
            .filter(|i| {
                let kind = i["type"].as_str().unwrap_or("");
                let bridge = kind == "bridge" || kind == "OVSBridge";
                match filter {
                    None | Some("include_sdn") => true,
                    Some("any_bridge" | "any_local_bridge") => bridge,
                    Some(t) => t == kind,
                }
            })
            .collect::<Vec<_>>()
    )
}
