//! The parameter tables of pve-storage's endpoints (API2/Storage/Config.pm, Status.pm,
//! Content.pm: the storage list, content, volume delete, download-url, upload), as PVE 9.1
//! declares them.

use super::engine::{Named, Param, Ty, node_param, node_path, opt, req};

fn is_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://")
}

/// The storage types `POST /storage` takes here (PVE has more: iSCSI, ZFS, PBS, …).
pub const STORAGE_TYPES: &[&str] = &["dir", "nfs", "cifs", "rbd", "lvm", "lvmthin"];

pub fn storage_list() -> Vec<Param> {
    node_path(vec![
        opt("content", Ty::Str),
        opt("enabled", Ty::Bool),
        opt("format", Ty::Bool),
        opt("storage", Ty::Fmt(Named::StorageId)),
        opt("target", Ty::Fmt(Named::Node)),
    ])
}

pub fn storage_content() -> Vec<Param> {
    node_path(vec![
        req("storage", Ty::Fmt(Named::StorageId)),
        opt("content", Ty::Str),
        opt("vmid", Ty::Fmt(Named::Vmid)),
    ])
}

pub fn storage_volume_delete() -> Vec<Param> {
    node_path(vec![
        opt("storage", Ty::Fmt(Named::StorageId)),
        req("volume", Ty::Str),
        opt("delay", Ty::Int(Some(1), Some(30))),
    ])
}

pub fn download_url() -> Vec<Param> {
    node_path(vec![
        req("storage", Ty::Fmt(Named::StorageId)),
        req("content", Ty::Enum(&["iso", "vztmpl", "import"])),
        req("filename", Ty::Str),
        req("url", Ty::Pat(is_url)),
        opt("checksum", Ty::Str),
        opt(
            "checksum-algorithm",
            Ty::Enum(&["md5", "sha1", "sha224", "sha256", "sha384", "sha512"]),
        ),
        opt("compression", Ty::Str),
        opt("verify-certificates", Ty::Bool),
    ])
}

/// `POST /nodes/{node}/storage/{storage}/upload` (pve-storage API2/Storage/Status.pm,
/// upload); `tmpfilename` is set by the HTTP server.
pub fn upload() -> Vec<Param> {
    node_path(vec![
        req("storage", Ty::Fmt(Named::StorageId)),
        req("content", Ty::Enum(&["iso", "vztmpl", "import"])),
        req("filename", Ty::StrMax(255)),
        opt("checksum", Ty::Str),
        opt(
            "checksum-algorithm",
            Ty::Enum(&["md5", "sha1", "sha224", "sha256", "sha384", "sha512"]),
        ),
        opt("tmpfilename", Ty::Str),
    ])
}

/// `GET /storage` (pve-storage API2/Storage/Config.pm, index).
pub fn storage_index() -> Vec<Param> {
    vec![opt("type", Ty::Enum(STORAGE_TYPES))]
}

/// `GET /storage/{storage}` (read) and `GET /nodes/{node}/storage/{storage}` (Status.pm,
/// diridx, with the node).
pub fn storage_read(with_node: bool) -> Vec<Param> {
    let mut p = vec![req("storage", Ty::Fmt(Named::StorageId))];
    if with_node {
        p.push(node_param());
    }
    p
}

/// `POST /storage` (create; PVE::Storage::Plugin createSchema, the options of the types
/// pve-sim models).
pub fn storage_create() -> Vec<Param> {
    vec![
        req("storage", Ty::Fmt(Named::StorageId)),
        req("type", Ty::Enum(STORAGE_TYPES)),
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
