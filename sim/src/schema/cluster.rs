//! The parameter tables of pve-manager's cluster, node and task endpoints (API2/Cluster.pm,
//! Nodes.pm, Network.pm, Tasks.pm), as PVE 9.1 declares them.

use super::engine::{Named, Param, Ty, node_param, node_path, opt, req};

pub fn task_list() -> Vec<Param> {
    node_path(vec![
        opt("errors", Ty::Bool),
        opt("limit", Ty::Int(Some(0), None)),
        opt("since", Ty::Int(None, None)),
        opt("source", Ty::Enum(&["archive", "active", "all"])),
        opt("start", Ty::Int(Some(0), None)),
        opt("statusfilter", Ty::Str),
        opt("typefilter", Ty::Str),
        opt("until", Ty::Int(None, None)),
        opt("userfilter", Ty::Str),
        opt("vmid", Ty::Fmt(Named::Vmid)),
    ])
}

pub fn task_upid() -> Vec<Param> {
    node_path(vec![req("upid", Ty::Str)])
}

pub fn task_log() -> Vec<Param> {
    node_path(vec![
        req("upid", Ty::Str),
        opt("start", Ty::Int(Some(0), None)),
        opt("limit", Ty::Int(Some(0), None)),
        opt("download", Ty::Bool),
    ])
}

pub fn next_id() -> Vec<Param> {
    vec![opt("vmid", Ty::Fmt(Named::Vmid))]
}

pub fn cluster_resources() -> Vec<Param> {
    vec![opt("type", Ty::Enum(&["vm", "storage", "node", "sdn"]))]
}

/// `GET /nodes/{node}/version` (pve-manager API2/Nodes.pm, version).
pub fn node_version() -> Vec<Param> {
    vec![node_param()]
}

/// `GET /nodes/{node}/network` (pve-manager API2/Network.pm, index).
pub fn node_network() -> Vec<Param> {
    vec![
        node_param(),
        opt(
            "type",
            Ty::Enum(&[
                "bridge",
                "bond",
                "eth",
                "alias",
                "vlan",
                "fabric",
                "OVSBridge",
                "OVSBond",
                "OVSPort",
                "OVSIntPort",
                "vnet",
                "any_bridge",
                "any_local_bridge",
                "include_sdn",
            ]),
        ),
    ]
}
