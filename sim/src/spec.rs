//! Parameter specs of the endpoints added for peers' playbooks and for clusters (pools, access
//! lists, node info, storage config, disk moves, HA), written out from PVE 9.1's schema as
//! `schema.rs` writes the others, and checked by `schema::check`.

use crate::schema::{Named, Param, Ty};

/// An optional parameter.
pub const fn opt(name: &'static str, ty: Ty) -> Param {
    Param {
        name,
        ty,
        required: false,
        indexed: None,
    }
}

/// A required parameter.
pub const fn req(name: &'static str, ty: Ty) -> Param {
    Param {
        name,
        ty,
        required: true,
        indexed: None,
    }
}

fn node() -> Param {
    req("node", Ty::Fmt(Named::Node))
}

/// `GET /nodes/{node}/version` (pve-manager API2/Nodes.pm, version).
pub fn node_version() -> Vec<Param> {
    vec![node()]
}

/// `GET /nodes/{node}/network` (pve-manager API2/Network.pm, index).
pub fn node_network() -> Vec<Param> {
    vec![
        node(),
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

/// `GET /pools` (pve-manager API2/Pool.pm, index).
pub fn pool_index() -> Vec<Param> {
    vec![
        opt("poolid", Ty::Str),
        opt("type", Ty::Enum(&["qemu", "lxc", "storage"])),
    ]
}

/// `POST /pools` (create_pool).
pub fn pool_create() -> Vec<Param> {
    vec![req("poolid", Ty::Str), opt("comment", Ty::Str)]
}

/// `PUT /pools` and `PUT /pools/{poolid}` (update_pool, update_pool_deprecated).
pub fn pool_update() -> Vec<Param> {
    vec![
        req("poolid", Ty::Str),
        opt("comment", Ty::Str),
        opt("vms", Ty::Str),
        opt("storage", Ty::Str),
        opt("allow-move", Ty::Bool),
        opt("delete", Ty::Bool),
    ]
}

/// `GET /pools/{poolid}` (read_pool).
pub fn pool_read() -> Vec<Param> {
    vec![
        req("poolid", Ty::Str),
        opt("type", Ty::Enum(&["qemu", "lxc", "storage"])),
    ]
}

/// `DELETE /pools` and `DELETE /pools/{poolid}` (delete_pool).
pub fn pool_delete() -> Vec<Param> {
    vec![req("poolid", Ty::Str)]
}

/// `GET /access/users` (pve-access-control API2/User.pm, index).
pub fn user_index() -> Vec<Param> {
    vec![opt("enabled", Ty::Bool), opt("full", Ty::Bool)]
}

/// `GET /access/users/{userid}`, `/access/groups/{groupid}`, `/access/domains/{realm}`.
pub fn one_id(name: &'static str) -> Vec<Param> {
    vec![req(name, Ty::Str)]
}

/// `GET /storage` (pve-storage API2/Storage/Config.pm, index).
pub fn storage_index() -> Vec<Param> {
    vec![opt("type", Ty::Enum(crate::storage::config::TYPES))]
}

/// `GET /storage/{storage}` (read) and `GET /nodes/{node}/storage/{storage}` (Status.pm,
/// diridx, with the node).
pub fn storage_read(with_node: bool) -> Vec<Param> {
    let mut p = vec![req("storage", Ty::Fmt(Named::StorageId))];
    if with_node {
        p.push(node());
    }
    p
}

/// `POST /storage` (create; PVE::Storage::Plugin createSchema, the options of the types
/// pve-sim models).
pub fn storage_create() -> Vec<Param> {
    vec![
        req("storage", Ty::Fmt(Named::StorageId)),
        req("type", Ty::Enum(crate::storage::config::TYPES)),
        opt("content", Ty::Str),
        opt("shared", Ty::Bool),
        opt("disable", Ty::Bool),
        opt("nodes", Ty::Str),
        opt("path", Ty::Str),
        opt("server", Ty::Str),
        opt("export", Ty::Str),
        opt("options", Ty::Str),
        opt("pool", Ty::Str),
        opt("monhost", Ty::Str),
        opt("username", Ty::Str),
        opt("krbd", Ty::Bool),
        opt("vgname", Ty::Str),
        opt("thinpool", Ty::Str),
        opt("format", Ty::Enum(&["raw", "qcow2", "vmdk", "subvol"])),
        opt(
            "preallocation",
            Ty::Enum(&["off", "metadata", "falloc", "full"]),
        ),
        opt("create-base-path", Ty::Bool),
        opt("create-subdirs", Ty::Bool),
    ]
}

fn vmid() -> Param {
    req("vmid", Ty::Fmt(Named::Vmid))
}

/// Drive names with `unusedN` (qemu-server Drive.pm, valid_drive_names_with_unused).
pub fn drive_names_with_unused() -> Vec<String> {
    let mut out = Vec::new();
    for (bus, n) in [("ide", 4), ("scsi", 31), ("virtio", 16), ("sata", 6)] {
        out.extend((0..n).map(|i| format!("{bus}{i}")));
    }
    out.push("efidisk0".into());
    out.push("tpmstate0".into());
    out.extend((0..256).map(|i| format!("unused{i}")));
    out
}

/// `POST /nodes/{node}/qemu/{vmid}/move_disk` (qemu-server API2/Qemu.pm, move_vm_disk). The
/// `disk` and `target-disk` enums are checked by the handler (their list is long).
pub fn move_disk() -> Vec<Param> {
    vec![
        node(),
        vmid(),
        opt("target-vmid", Ty::Fmt(Named::Vmid)),
        req("disk", Ty::Str),
        opt("storage", Ty::Fmt(Named::StorageId)),
        opt("format", Ty::Enum(&["raw", "qcow2", "vmdk"])),
        opt("delete", Ty::Bool),
        opt("digest", Ty::StrMax(40)),
        opt("bwlimit", Ty::Int(Some(0), None)),
        opt("target-disk", Ty::Str),
        opt("target-digest", Ty::StrMax(40)),
    ]
}

/// `PUT /nodes/{node}/qemu/{vmid}/unlink` (qemu-server API2/Qemu.pm, unlink).
pub fn unlink() -> Vec<Param> {
    vec![
        node(),
        vmid(),
        req("idlist", Ty::Fmt(Named::ConfigIdList)),
        opt("force", Ty::Bool),
    ]
}

const HA_STATES: &[&str] = &["started", "stopped", "enabled", "disabled", "ignored"];

/// `GET /cluster/ha/resources` (pve-ha-manager API2/HA/Resources.pm, index).
pub fn ha_index() -> Vec<Param> {
    vec![opt("type", Ty::Enum(&["ct", "vm"]))]
}

/// `GET`/`DELETE /cluster/ha/resources/{sid}` (read, delete).
pub fn ha_sid(delete: bool) -> Vec<Param> {
    let mut p = vec![req("sid", Ty::Str)];
    if delete {
        p.push(opt("purge", Ty::Bool));
    }
    p
}

fn ha_options() -> Vec<Param> {
    vec![
        opt("type", Ty::Enum(&["ct", "vm"])),
        opt("state", Ty::Enum(HA_STATES)),
        opt("group", Ty::Str),
        opt("max_restart", Ty::Int(Some(0), None)),
        opt("max_relocate", Ty::Int(Some(0), None)),
        opt("failback", Ty::Bool),
        opt("comment", Ty::StrMax(4096)),
    ]
}

/// `POST /cluster/ha/resources` (create; PVE::HA::Resources createSchema).
pub fn ha_create() -> Vec<Param> {
    let mut p = vec![req("sid", Ty::Str)];
    p.extend(ha_options());
    p
}

/// `PUT /cluster/ha/resources/{sid}` (update; updateSchema).
pub fn ha_update() -> Vec<Param> {
    let mut p = vec![req("sid", Ty::Str)];
    p.extend(ha_options());
    p.push(opt("delete", Ty::Str));
    p.push(opt("digest", Ty::StrMax(64)));
    p
}
