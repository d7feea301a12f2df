//! The cluster's storage configuration (`storage.cfg`), after pve-storage's
//! `API2/Storage/Config.pm` (index, read, create) and `API2/Storage/Status.pm` (diridx): the
//! two storages of a fresh node and those added with `POST /storage`. A storage that is
//! `shared` (declared so, or of a type in `@SHARED_STORAGE`, Storage/Plugin.pm parse_config)
//! holds the same volumes on every node, and allocating on it takes the cluster-wide storage
//! lock (Storage/Plugin.pm cluster_lock_storage → PVE::Cluster cfs_lock_storage, 10 s), which
//! fails with `cfs-lock 'storage-X' error: got lock request timeout` when contended. These
//! are the API handlers; `storage.cfg` itself and the lock are data in `storage/storage_cfg.rs`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::http::handler::{ApiErr, ApiResult, Params};
use crate::schema::STORAGE_TYPES;
use crate::storage::storage_cfg::{self, StorageDef, section};

/// Storage/Plugin.pm `@SHARED_STORAGE`, as far as [`STORAGE_TYPES`] go: always shared.
const SHARED_TYPES: &[&str] = &["nfs", "cifs", "rbd"];

/// Options every plugin has.
const COMMON: &[&str] = &["nodes", "disable"];

/// Per type: the options it has (`options` of each plugin), required ones first with `!`.
fn options(kind: &str) -> &'static [&'static str] {
    match kind {
        "dir" => &["!path", "content", "shared", "format"],
        "nfs" => &[
            "!path", "!server", "!export", "content", "options", "format",
        ],
        "cifs" => &[
            "!path", "!server", "!share", "content", "username", "format",
        ],
        "rbd" => &["content", "pool", "monhost", "username", "krbd"],
        "lvm" => &["!vgname", "content", "shared"],
        "lvmthin" => &["!vgname", "!thinpool", "content"],
        _ => &[],
    }
}

/// Each plugin's `plugindata` content: (allowed, default).
fn content_types(kind: &str) -> (&'static [&'static str], &'static str) {
    match kind {
        "dir" | "nfs" | "cifs" => (
            &[
                "images", "rootdir", "vztmpl", "iso", "backup", "snippets", "import",
            ],
            "images,rootdir",
        ),
        "lvmthin" => (&["images", "rootdir"], "images,rootdir"),
        _ => (&["images", "rootdir"], "images"),
    }
}

fn cfg_digest() -> String {
    let mut text = String::new();
    for s in storage_cfg::all() {
        if let Some(c) = section(s.id) {
            text.push_str(&format!("{}: {}\n", c["type"], s.id));
            for (k, v) in c.iter().filter(|(k, _)| *k != "type") {
                text.push_str(&format!("\t{k} {v}\n"));
            }
            text.push('\n');
        }
    }
    crate::tools::sha1_hex(&text)
}

fn api_storage_config(sid: &str) -> Option<Value> {
    let cfg = section(sid)?;
    let mut v = serde_json::Map::new();
    for (k, val) in cfg {
        // Booleans and integers of the section are answered as numbers.
        let typed = match k.as_str() {
            "shared" | "krbd" | "disable" => json!(val.parse::<u8>().unwrap_or(0)),
            _ => json!(val),
        };
        v.insert(k, typed);
    }
    v.insert("storage".into(), json!(sid));
    v.insert("digest".into(), json!(cfg_digest()));
    Some(Value::Object(v))
}

/// `GET /storage` (Config.pm, index), `type` filtering.
pub fn index(params: &Params) -> Value {
    json!(
        storage_cfg::all()
            .iter()
            .filter_map(|s| api_storage_config(s.id))
            .filter(|c| params.get("type").is_none_or(|t| c["type"] == json!(t)))
            .collect::<Vec<_>>()
    )
}

/// `GET /storage/{storage}` (Config.pm, read; Storage.pm storage_config:
/// `storage 'X' does not exist`).
pub fn read(sid: &str) -> ApiResult {
    api_storage_config(sid).ok_or_else(|| ApiErr::die(format!("storage '{sid}' does not exist")))
}

/// `GET /nodes/{node}/storage/{storage}` (Status.pm, diridx): the fixed list of the storage's
/// sub-paths; the storage itself is not looked up.
pub fn diridx() -> Value {
    json!(
        [
            "content",
            "download-url",
            "file-restore",
            "import-metadata",
            "identity",
            "oci-registry-pull",
            "prunebackups",
            "rrd",
            "rrddata",
            "status",
            "upload"
        ]
        .iter()
        .map(|s| json!({"subdir": s}))
        .collect::<Vec<_>>()
    )
}

/// `POST /storage` (Config.pm, create): the plugin's `check_config` (options of the type,
/// required ones), then under the storage config lock `storage ID 'X' already defined`.
/// Storages of `@SHARED_STORAGE` types are shared whatever is given (parse_config sets it).
pub fn create(params: &Params) -> ApiResult {
    let sid = params["storage"].clone();
    let kind = params["type"].clone();
    let opts = options(&kind);
    let mut cfg = BTreeMap::new();
    cfg.insert("type".to_string(), kind.clone());
    for (k, v) in params
        .iter()
        .filter(|(k, _)| *k != "storage" && *k != "type")
    {
        if !COMMON.contains(&k.as_str()) && !opts.iter().any(|o| o.trim_start_matches('!') == k) {
            return Err(ApiErr::die(format!("unexpected property '{k}'")));
        }
        cfg.insert(k.clone(), v.clone());
    }
    for req in opts.iter().filter_map(|o| o.strip_prefix('!')) {
        if !cfg.contains_key(req) {
            return Err(ApiErr::die(format!(
                "missing value for required option '{req}'"
            )));
        }
    }
    // Config.pm create: "prevent an empty nodelist".
    if cfg.get("nodes").is_some_and(|n| n.is_empty()) {
        cfg.remove("nodes");
    }
    let (allowed, default) = content_types(&kind);
    let content = cfg
        .get("content")
        .cloned()
        .unwrap_or_else(|| default.to_string());
    let mut types: Vec<&'static str> = Vec::new();
    for c in content.split(',').filter(|c| !c.is_empty()) {
        match allowed.iter().find(|a| **a == c) {
            Some(a) => types.push(a),
            None => {
                return Err(ApiErr::param(
                    "content",
                    format!("invalid format - content type '{c}' is not allowed"),
                ));
            }
        }
    }
    types.sort();
    cfg.insert("content".into(), types.join(","));
    let shared =
        SHARED_TYPES.contains(&kind.as_str()) || cfg.get("shared").is_some_and(|s| s == "1");
    if SHARED_TYPES.contains(&kind.as_str()) {
        cfg.insert("shared".into(), "1".into());
    }
    let kind_static: &'static str = STORAGE_TYPES
        .iter()
        .find(|t| **t == kind)
        .copied()
        .unwrap_or("dir");
    // Added storages live as long as the simulator (storage.cfg entries are never freed
    // here: there is no DELETE /storage).
    let defined = storage_cfg::define(&sid, || {
        let def: &'static StorageDef = Box::leak(Box::new(StorageDef {
            id: Box::leak(sid.clone().into_boxed_str()),
            kind: kind_static,
            content: Box::leak(types.into_boxed_slice()),
            extent: if matches!(kind.as_str(), "lvm" | "lvmthin") {
                4 << 20
            } else {
                1
            },
            shared,
        }));
        (def, cfg)
    });
    if defined.is_none() {
        return Err(ApiErr::die(format!(
            "create storage failed: storage ID '{sid}' already defined"
        )));
    }
    Ok(json!({"storage": sid, "type": kind}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fresh_storage_cfg_and_its_digest() {
        let local = read("local").unwrap_or_else(|e| panic!("{}", e.msg));
        assert_eq!(local["type"], "dir");
        assert_eq!(local["path"], "/var/lib/vz");
        assert_eq!(local["digest"].as_str().map(str::len), Some(40));
        assert_eq!(
            read("nope").err().map(|e| e.msg),
            Some("storage 'nope' does not exist".to_string())
        );
    }
}
