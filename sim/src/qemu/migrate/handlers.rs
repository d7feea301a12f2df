//! The two API calls on `…/qemu/{vmid}/migrate`, after qemu-server API2/Qemu.pm:
//! `migrate_vm_precondition` (`GET`: what a migration would meet) and `migrate_vm` (`POST`:
//! its parameter checks and early refusals, then the `qmigrate` task). They exist apart from
//! the worker because a refusal here changes nothing and starts no task.

use std::sync::Arc;

use serde_json::{Value, json};

use super::ha_handoff::ha_migrate;
use super::options::{Opts, StorageMap, is_cidr};
use super::phases::{Migration, migration_locked};
use super::prepare::{
    check_storage_availability, foreach_volid, local_resources, on_shared, storage_enabled,
    vnc_clipboard,
};
use crate::http::handler::{ApiErr, ApiResult, Auth, Params};
use crate::qemu::config_file::{check_lock, config_of, file_of};
use crate::schema::{self, vm_path};
use crate::schema::{Named, Param, Ty, opt, req};
use crate::state::Sim;
use crate::storage::volumes;
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

/// `GET …/migrate`.
pub fn precondition(sim: &Sim, node: &str, vmid: u32) -> ApiResult {
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
        .filter(|(k, _)| schema::is_drive_key(k))
        .filter_map(|(_, v)| schema::parse_drive(v).ok()?.get("file").cloned())
        .filter_map(|file| Some(crate::tools::volume_parts(&file)?.0.to_string()))
        .filter(|sid| volumes::storage(sid).is_some())
        .collect();
    for other in sim.opts.nodes.iter().filter(|n| *n != node) {
        let mut why = serde_json::Map::new();
        let mut unavailable: Vec<&String> = drive_storages
            .iter()
            .filter(|sid| crate::storage::storage_cfg::check_enabled(sid, other).is_err())
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
    if crate::ha::manager::vm_is_ha_managed(sim, vmid) {
        answer["dependent-ha-resources"] = json!([]);
    }
    Ok(answer)
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
        // migrate_vm: a storage map that is not `1` (identity) changes disks.
        let checker = crate::access::check::Checker::new(sim, auth);
        if !map.identity {
            checker.check_vm_perm(vmid, None, &["VM.Config.Disk"], false)?;
        }
        for sid in map.entries.values().chain(map.default.iter()) {
            let def = storage_enabled(sid, &target).map_err(ApiErr::die)?;
            checker.check(&format!("/storage/{sid}"), &["Datastore.AllocateSpace"])?;
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
    if crate::ha::manager::vm_is_ha_managed(sim, vmid) && !ha_env {
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
