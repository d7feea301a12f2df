//! The two API calls on `…/qemu/{vmid}/migrate`, after qemu-server API2/Qemu.pm:
//! `migrate_vm_precondition` (`GET`: what a migration would meet) and `migrate_vm` (`POST`:
//! its parameter checks and early refusals, then the `qmigrate` task). They exist apart from
//! the worker because a refusal here changes nothing and starts no task.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::ha_handoff::ha_migrate;
use super::phases::{Migration, migration_locked};
use super::prepare::{
    check_storage_availability, foreach_volid, local_resources, on_shared, storage_enabled,
    vnc_clipboard,
};
use crate::api_schema::{self, vm_path};
use crate::handler::{ApiErr, ApiResult, Auth, Params};
use crate::qemu_config::{check_lock, config_of, file_of};
use crate::schema::{Named, Param, Ty, opt, req};
use crate::state::Sim;
use crate::storage;
use crate::tasks;

/// `POST /nodes/{node}/qemu/{vmid}/migrate` (API2/Qemu.pm, migrate_vm). `migration_network`
/// (a CIDR) and `targetstorage` (a storage-pair list) are checked by [`migrate`] with PVE's
/// texts.
pub fn migrate_spec() -> Vec<Param> {
    vm_path(vec![
        req("target", Ty::Fmt(Named::Node)),
        opt("online", Ty::Bool),
        opt("force", Ty::Bool),
        opt("migration_type", Ty::Enum(&["secure", "insecure"])),
        opt("migration_network", Ty::Str),
        opt("with-local-disks", Ty::Bool),
        opt("targetstorage", Ty::Str),
        opt("bwlimit", Ty::Int(Some(0), None)),
        opt("with-conntrack-state", Ty::Bool),
    ])
}

/// `GET /nodes/{node}/qemu/{vmid}/migrate` (API2/Qemu.pm, migrate_vm_precondition).
pub fn precondition_spec() -> Vec<Param> {
    vm_path(vec![opt("target", Ty::Fmt(Named::Node))])
}

/// `PVE::JSONSchema::split_list`.
fn split_list(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c == ',' || c == ';' || c == '\0' || c.is_whitespace())
        .filter(|s| !s.is_empty())
}

/// pve-common JSONSchema.pm, `parse_id` for a storage: why `id` is no storage ID, if it is not.
fn storage_id_error(id: &str) -> Option<String> {
    if id.len() < 2 {
        return Some(format!(
            "storage ID '{id}' cannot be shorter than 2 characters"
        ));
    }
    let bytes = id.as_bytes();
    let ok = bytes[0].is_ascii_alphabetic()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b));
    (!ok).then(|| format!("storage ID '{id}' contains illegal characters"))
}

/// A storage map as `PVE::JSONSchema::parse_idmap` returns it.
#[derive(Clone, Debug, Default)]
pub(super) struct StorageMap {
    pub(super) identity: bool,
    pub(super) default: Option<String>,
    pub(super) entries: BTreeMap<String, String>,
}

impl StorageMap {
    /// `parse_idmap($idmap, 'pve-storage-id')`: `Err((true, …))` for an entry that is no ID
    /// (what the `storage-pair-list` format refuses, entry by entry), `Err((false, …))` for a
    /// map that is wrong as a whole.
    pub(super) fn parse(text: &str) -> Result<StorageMap, (bool, String)> {
        let mut map = StorageMap::default();
        for entry in split_list(text) {
            if entry == "1" {
                map.identity = true;
            } else if let Some((source, target)) = entry
                .split_once(':')
                .filter(|(s, t)| !s.is_empty() && !t.is_empty() && !t.contains(':'))
            {
                if let Some(e) = storage_id_error(source).or_else(|| storage_id_error(target)) {
                    return Err((true, format!("entry '{entry}' contains invalid ID - {e}")));
                }
                if map.entries.contains_key(source) {
                    return Err((false, format!("duplicate mapping for source '{source}'")));
                }
                map.entries.insert(source.into(), target.into());
            } else {
                if let Some(e) = storage_id_error(entry) {
                    return Err((true, format!("entry '{entry}' contains invalid ID - {e}")));
                }
                if map.default.is_some() {
                    return Err((false, "default target ID can only be provided once".into()));
                }
                map.default = Some(entry.into());
            }
        }
        if map.identity && (map.default.is_some() || !map.entries.is_empty()) {
            return Err((
                false,
                "identity mapping cannot be combined with other mappings".into(),
            ));
        }
        Ok(map)
    }

    /// `PVE::JSONSchema::map_id`.
    pub(super) fn map(map: Option<&StorageMap>, source: &str) -> String {
        let Some(map) = map else {
            return source.into();
        };
        if let Some(t) = map.entries.get(source) {
            return t.clone();
        }
        map.default.clone().unwrap_or_else(|| source.into())
    }
}

/// pve-common JSONSchema.pm, `pve_verify_cidr`: an IPv4 (/8 to /32) or IPv6 (/8 to /128)
/// network.
fn is_cidr(text: &str) -> bool {
    let Some((addr, bits)) = text.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match addr.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => (8..=32).contains(&bits),
        Ok(std::net::IpAddr::V6(_)) => (8..=128).contains(&bits),
        Err(_) => false,
    }
}

/// Whether `ip` lies in the network `cidr`.
pub(super) fn in_network(ip: std::net::Ipv4Addr, cidr: &str) -> bool {
    let Some((net, bits)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(net), Ok(bits)) = (net.parse::<std::net::Ipv4Addr>(), bits.parse::<u32>()) else {
        return false;
    };
    let mask = u32::MAX.checked_shl(32 - bits.min(32)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(net) & mask
}

/// `GET …/migrate`.
pub fn precondition(sim: &Sim, node: &str, vmid: u32, auth: &Auth) -> ApiResult {
    if auth.readonly {
        return Err(ApiErr {
            status: 403,
            msg: format!("Permission check failed (/vms/{vmid}, VM.Migrate)"),
            errors: None,
        });
    }
    let (conf, pending) = file_of(sim, node, vmid)?;
    check_lock(&conf).map_err(ApiErr::die)?;
    let running = sim.lock().vms.get(&vmid).is_some_and(|v| v.running);
    let (mut local, mapped) = local_resources(&conf);
    if running && vnc_clipboard(&conf) {
        local.push("clipboard=vnc".into());
    }
    // check_local_storage_availability answers every node (an empty hash where all storages
    // are there), so every other node is listed under not_allowed_nodes, and allowed when
    // that hash stays empty.
    let mut allowed = Vec::new();
    let mut not_allowed = serde_json::Map::new();
    // Each drive's storage (not the unused volumes'): disabled, or not among a node's.
    let drive_storages: Vec<String> = conf
        .iter()
        .filter(|(k, _)| api_schema::is_drive_key(k))
        .filter_map(|(_, v)| api_schema::parse_drive(v).ok()?.get("file").cloned())
        .filter_map(|file| Some(file.split_once(':')?.0.to_string()))
        .filter(|sid| storage::storage(sid).is_some())
        .collect();
    for other in sim.opts.nodes.iter().filter(|n| *n != node) {
        let mut why = serde_json::Map::new();
        let mut unavailable: Vec<&String> = drive_storages
            .iter()
            .filter(|sid| crate::storage_state::check_enabled(sid, other).is_err())
            .collect();
        unavailable.sort();
        unavailable.dedup();
        if !unavailable.is_empty() {
            why.insert("unavailable_storages".into(), json!(unavailable));
        }
        if !mapped.is_empty() {
            why.insert("unavailable-resources".into(), json!(mapped));
        }
        if why.is_empty() {
            allowed.push(other.clone());
        }
        not_allowed.insert(other.clone(), Value::Object(why));
    }
    // $check_vm_disks_local: every volume but those on shared storage (none here), those
    // marked shared, and an empty CD-ROM drive.
    let local_disks: Vec<Value> = foreach_volid(&conf, &pending)
        .into_iter()
        .filter(|(volid, a)| !(a.shared || a.cdrom && volid == "none" || on_shared(volid)))
        .map(|(volid, a)| {
            let mut d = json!({
                "volid": volid, "cdrom": a.cdrom as u8, "is_cloudinit": a.is_cloudinit as u8,
                "replicate": 1, "shared": 0, "is_unused": a.is_unused as u8,
                "is_attached": a.is_attached as u8, "is_vmstate": 0,
                "is_tpmstate": a.is_tpmstate as u8,
            });
            if let Some(s) = a.size {
                d["size"] = json!(s);
            }
            if let Some(n) = &a.drivename {
                d["drivename"] = json!(n);
            }
            if a.in_pending {
                d["referenced_in_pending"] = json!(1);
            }
            d
        })
        .collect();
    let info: serde_json::Map<String, Value> = mapped
        .iter()
        .map(|k| {
            let name = conf[k]
                .split(',')
                .find_map(|p| {
                    p.strip_prefix("mapping=")
                        .or_else(|| p.strip_prefix("dirid="))
                })
                .unwrap_or("");
            (k.clone(), json!({ "name": name }))
        })
        .collect();
    let mut answer = json!({
        "running": running as u8,
        "allowed_nodes": allowed,
        "not_allowed_nodes": not_allowed,
        "local_disks": local_disks,
        "local_resources": local,
        "mapped-resources": mapped,
        "mapped-resource-info": info,
        "has-dbus-vmstate": 1,
    });
    // HA::Config get_resource_motion_info: pve-sim has no affinity rules, so no resource
    // moves with the VM.
    if crate::ha::vm_is_ha_managed(sim, vmid) {
        answer["dependent-ha-resources"] = json!([]);
    }
    Ok(answer)
}

/// The options a `qmigrate` task runs with (`$param` as migrate_vm passes it on).
#[derive(Clone)]
pub(super) struct Opts {
    pub(super) online: bool,
    pub(super) force: bool,
    pub(super) with_local_disks: bool,
    pub(super) storagemap: Option<StorageMap>,
    pub(super) bwlimit: Option<u64>,
    pub(super) migration_network: Option<String>,
    pub(super) insecure: bool,
}

/// `POST …/migrate`.
pub fn migrate(sim: &Arc<Sim>, node: &str, vmid: u32, params: &Params, auth: &Auth) -> ApiResult {
    migrate_in(sim, node, vmid, params, auth, false)
}

/// migrate_vm in a client's environment, or (`ha_env`) in the HA stack's, whose LRM migrates
/// an HA-managed VM itself instead of handing it to `ha-manager` again.
pub(super) fn migrate_in(
    sim: &Arc<Sim>,
    node: &str,
    vmid: u32,
    params: &Params,
    auth: &Auth,
    ha_env: bool,
) -> ApiResult {
    let target = params["target"].clone();
    if target == node {
        return Err(ApiErr::param("target", "target is local node."));
    }
    if !sim.opts.nodes.contains(&target) {
        return Err(ApiErr::die(format!("no such cluster node '{target}'")));
    }
    let flag = |k: &str| params.get(k).is_some_and(|v| v == "1");
    for key in ["force", "migration_type", "migration_network"] {
        let given = if key == "force" {
            flag(key)
        } else {
            params.contains_key(key)
        };
        if given && auth.id != "root@pam" {
            return Err(ApiErr::param(key, "Only root may use this option."));
        }
    }
    if let Some(net) = params.get("migration_network")
        && !is_cidr(net)
    {
        return Err(ApiErr::param(
            "migration_network",
            "invalid format - value does not look like a valid CIDR network",
        ));
    }
    let storagemap = match params.get("targetstorage").filter(|t| !t.is_empty()) {
        Some(text) => match StorageMap::parse(text) {
            Ok(map) => Some(map),
            Err((true, e)) => {
                return Err(ApiErr::param(
                    "targetstorage",
                    format!("invalid format - {e}"),
                ));
            }
            Err((false, e)) => {
                return Err(ApiErr::param(
                    "targetstorage",
                    format!("failed to parse storage map: {e}"),
                ));
            }
        },
        None => None,
    };
    let conf = config_of(sim, node, vmid)?;
    check_lock(&conf).map_err(ApiErr::die)?;
    let running = sim.lock().vms.get(&vmid).is_some_and(|v| v.running);
    if running && !flag("online") {
        return Err(ApiErr::die("can't migrate running VM without --online"));
    }
    // $check_storage_access_migrate for every target storage of the map.
    if let Some(map) = &storagemap {
        for sid in map.entries.values().chain(map.default.iter()) {
            let def = storage_enabled(sid, &target).map_err(ApiErr::die)?;
            if !def.content.contains(&"images") {
                return Err(ApiErr::die(format!(
                    "storage '{sid}' does not support vm images"
                )));
            }
        }
    }
    if storagemap.as_ref().is_none_or(|m| m.identity) {
        check_storage_availability(sim, node, &target, &conf).map_err(ApiErr::die)?;
    }
    let opts = Opts {
        // A stopped VM migrates offline whatever `online` says.
        online: running && flag("online"),
        force: flag("force"),
        with_local_disks: flag("with-local-disks"),
        storagemap,
        bwlimit: params.get("bwlimit").and_then(|b| b.parse().ok()),
        migration_network: params.get("migration_network").cloned(),
        insecure: params
            .get("migration_type")
            .is_some_and(|t| t == "insecure"),
    };
    if crate::ha::vm_is_ha_managed(sim, vmid) && !ha_env {
        return Ok(json!(ha_migrate(sim, node, vmid, &target, auth)));
    }
    let (source, worker_sim) = (node.to_string(), sim.clone());
    let upid = tasks::spawn(
        sim,
        node,
        "qmigrate",
        &vmid.to_string(),
        &auth.id,
        move |ctx| {
            migration_locked(&worker_sim, ctx, vmid, || {
                let mut run = Migration::new(&worker_sim, ctx, vmid, source, target, opts);
                run.migrate()
            })
        },
    );
    Ok(json!(upid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_maps_parse_as_parse_idmap_does() {
        let map = StorageMap::parse("local-lvm").unwrap();
        assert_eq!(StorageMap::map(Some(&map), "local"), "local-lvm");
        let map = StorageMap::parse("local:local-lvm,local-lvm:local").unwrap();
        assert_eq!(StorageMap::map(Some(&map), "local"), "local-lvm");
        assert_eq!(StorageMap::map(Some(&map), "local-lvm"), "local");
        let map = StorageMap::parse("1").unwrap();
        assert!(map.identity);
        assert_eq!(StorageMap::map(Some(&map), "local"), "local");
        assert_eq!(
            StorageMap::parse("1,local").unwrap_err(),
            (
                false,
                "identity mapping cannot be combined with other mappings".to_string()
            )
        );
        assert_eq!(
            StorageMap::parse("a:b:c").unwrap_err(),
            (
                true,
                "entry 'a:b:c' contains invalid ID - storage ID 'a:b:c' contains illegal characters"
                    .to_string()
            )
        );
        assert_eq!(
            StorageMap::parse("local:x1,local:x2").unwrap_err().1,
            "duplicate mapping for source 'local'"
        );
        assert_eq!(
            StorageMap::parse("aa,bb").unwrap_err().1,
            "default target ID can only be provided once"
        );
    }

    #[test]
    fn cidrs_and_networks() {
        assert!(is_cidr("10.0.0.0/24"));
        assert!(is_cidr("fd00::/64"));
        assert!(!is_cidr("10.0.0.0/4"));
        assert!(!is_cidr("10.0.0.0"));
        assert!(in_network(std::net::Ipv4Addr::LOCALHOST, "127.0.0.0/8"));
        assert!(!in_network(std::net::Ipv4Addr::LOCALHOST, "10.0.0.0/8"));
    }
}
