//! VM snapshots as qemu-server keeps them, after its API2/Qemu.pm (`snapshot_list`,
//! `snapshot`, `get_snapshot_config`, `update_snapshot_config`, `rollback`, `delsnapshot`),
//! QemuConfig.pm (the `__snapshot_*` hooks) and pve-guest-common's AbstractConfig.pm
//! (`snapshot_create`, `snapshot_rollback`, `snapshot_delete`):
//!
//! * a snapshot is a `[snapname]` section of the config: a copy of the current config (without
//!   `lock`, `description`, `unusedN`, `digest` and the snapshot keys) with `snaptime`, an
//!   optional `description`, `vmstate` (the saved RAM's volume) and `parent`; the current
//!   config's `parent` names the snapshot it is based on;
//! * `qmsnapshot` sets `lock: snapshot` and `snapstate: prepare` under the file lock, refuses
//!   a template, a locked VM, a used name and a VM with a disk whose storage cannot snapshot
//!   (`snapshot feature is not available`, pve-storage `volume_has_feature`), snapshots every
//!   disk but CD-ROMs, and commits (the lock and `snapstate` go, `parent` is set); a failure
//!   removes the half-made snapshot again;
//! * `qmrollback` (under the migration lock) stops the VM, sets `lock: rollback`, rolls every
//!   disk back, replaces the config by the snapshot's (keeping `description` and `unusedN`,
//!   the pending changes dropped), sets `parent`, and starts the VM when the snapshot has RAM
//!   or `start` is given;
//! * `qmdelsnapshot` sets `lock: snapshot-delete` and `snapstate: delete`, frees the RAM's
//!   volume and each disk's snapshot, links the children to the removed snapshot's parent, and
//!   lists a volume only that snapshot used as `unusedN`.
//!
//! The volumes are real files: a qcow2 one gets `qemu-img snapshot -c/-a/-d` (pve-storage
//! Plugin.pm), a raw LVM-thin one a sparse copy beside it (`snap_<lv>_<snap>`, as
//! LvmThinPlugin.pm's `lvcreate -s` names it); that storage side is `storage/volume_snapshots.rs`,
//! the routes and their parameters `qemu/snapshot_routes.rs`. pve-sim's `digest` covers the main
//! section and the pending one, not the snapshot sections.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use crate::http::handler::{ApiErr, ApiResult, Auth, Params};
use crate::qemu::config_file::{check_lock, config_of, digest, no_conf};
use crate::state::{Sim, epoch};
use crate::storage::volume_snapshots::{
    VolumeOp, has_snapshot_feature, volume_op, volume_path, volumes,
};
use crate::storage::volumes;
use crate::tasks::{self, LOCK_CONFIG_TIMEOUT, Outcome, TaskCtx};

fn flag(params: &Params, key: &str) -> bool {
    params.get(key).is_some_and(|v| v == "1")
}

/// AbstractConfig.pm `__snapshot_copy_config`: every key but the snapshot bookkeeping, the
/// lock, the description and the unused volumes.
fn copy_config(source: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    source
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "snapstate" | "snaptime" | "vmstate" | "lock" | "digest" | "description"
            ) && !is_unused(k)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn is_unused(key: &str) -> bool {
    key.strip_prefix("unused")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// AbstractConfig.pm `add_unused_volume` (QemuConfig.pm frees a cloud-init volume instead),
/// with QemuServer.pm write_vm_config's rule that a volume a drive uses is not unused.
fn add_unused(sim: &Sim, node: &str, conf: &mut BTreeMap<String, String>, volid: &str) {
    if volid.contains("-cloudinit") {
        if let Ok(vol) = volumes::parse_volume(&sim.opts.data_dir, node, volid) {
            let _ = std::fs::remove_file(vol.path);
        }
        return;
    }
    if volumes(conf).iter().any(|(_, v)| v == volid)
        || conf.iter().any(|(k, v)| is_unused(k) && v == volid)
    {
        return;
    }
    if let Some(n) = (0..256).find(|n| !conf.contains_key(&format!("unused{n}"))) {
        conf.insert(format!("unused{n}"), volid.to_string());
    }
}

/// `GET /nodes/{node}/qemu/{vmid}/snapshot` (snapshot_list): each snapshot's `name`,
/// `snaptime`, `vmstate` (0/1), `description`, `parent` and `snapstate`, then `current`
/// ("You are here!") with the config's `digest`, `running` and `parent`.
pub fn list(sim: &Sim, node: &str, vmid: u32) -> ApiResult {
    let st = sim.lock();
    let vm = match st.vms.get(&vmid) {
        Some(vm) if vm.node == node => vm,
        _ => return Err(no_conf(node, vmid)),
    };
    let mut out: Vec<Value> = vm
        .snapshots
        .iter()
        .map(|(name, snap)| {
            let mut item = json!({
                "name": name,
                "snaptime": snap.get("snaptime").and_then(|t| t.parse::<u64>().ok()).unwrap_or(0),
                "vmstate": u8::from(snap.contains_key("vmstate")),
                "description": snap.get("description").cloned().unwrap_or_default(),
            });
            for key in ["parent", "snapstate"] {
                if let Some(v) = snap.get(key) {
                    item[key] = json!(v);
                }
            }
            item
        })
        .collect();
    let mut current = json!({
        "name": "current",
        "digest": digest(&vm.config, &vm.pending),
        "running": u8::from(vm.running),
        "description": "You are here!",
    });
    if let Some(parent) = vm.config.get("parent") {
        current["parent"] = json!(parent);
    }
    out.push(current);
    Ok(json!(out))
}

/// `GET …/snapshot/{snapname}` (snapshot_cmd_idx).
pub fn cmd_index() -> Value {
    json!([{"cmd": "rollback"}, {"cmd": "config"}])
}

fn snapshot_of(
    sim: &Sim,
    node: &str,
    vmid: u32,
    snapname: &str,
) -> Result<BTreeMap<String, String>, ApiErr> {
    let st = sim.lock();
    let vm = match st.vms.get(&vmid) {
        Some(vm) if vm.node == node => vm,
        _ => return Err(no_conf(node, vmid)),
    };
    vm.snapshots
        .get(snapname)
        .cloned()
        .ok_or_else(|| ApiErr::die(format!("snapshot '{snapname}' does not exist")))
}

/// `GET …/snapshot/{snapname}/config` (get_snapshot_config): the section's values, typed as
/// parse_vm_config makes them (`snaptime` is an integer of qemu-server's confdesc).
pub fn get_config(sim: &Sim, node: &str, vmid: u32, snapname: &str) -> ApiResult {
    let snap = snapshot_of(sim, node, vmid, snapname)?;
    let out: serde_json::Map<String, Value> = snap
        .iter()
        .map(|(k, v)| {
            let typed = match (k.as_str(), v.parse::<u64>()) {
                ("snaptime", Ok(t)) => json!(t),
                _ => crate::qemu::write_path::typed(k, v),
            };
            (k.clone(), typed)
        })
        .collect();
    Ok(Value::Object(out))
}

/// `PUT …/snapshot/{snapname}/config` (update_snapshot_config): without `description` nothing;
/// else under the file lock, the lock checked, the snapshot's description set (an empty one
/// removes it, as write_vm_config writes only a true description).
pub fn update_config(
    sim: &Sim,
    node: &str,
    vmid: u32,
    snapname: &str,
    params: &Params,
) -> ApiResult {
    let Some(description) = params.get("description").cloned() else {
        return Ok(Value::Null);
    };
    let holder = format!("snapshot-config-{vmid}");
    sim.lock_config(vmid, &holder, LOCK_CONFIG_TIMEOUT, || {
        let conf = config_of(sim, node, vmid)?;
        check_lock(&conf).map_err(ApiErr::die)?;
        let mut st = sim.lock();
        let vm = st.vms.get_mut(&vmid).ok_or_else(|| no_conf(node, vmid))?;
        let snap = vm
            .snapshots
            .get_mut(snapname)
            .ok_or_else(|| ApiErr::die(format!("snapshot '{snapname}' does not exist")))?;
        if description.is_empty() {
            snap.remove("description");
        } else {
            snap.insert("description".into(), description);
        }
        Ok(Value::Null)
    })
}

/// Runs `work` on the VM under its file lock, within the task.
fn locked<T>(
    sim: &Sim,
    ctx: &TaskCtx,
    vmid: u32,
    work: impl FnOnce(&mut crate::state::Vm) -> Result<T, String>,
) -> Result<T, String> {
    sim.lock_config(vmid, &ctx.upid, LOCK_CONFIG_TIMEOUT, || {
        let mut st = sim.lock();
        let vm = st.vms.get_mut(&vmid).ok_or("VM vanished")?;
        work(vm)
    })
}

/// QemuConfig.pm find_vmstate_storage: `vmstatestorage`, else a shared storage a disk is on,
/// else a local one (a file-based storage preferred), else `local`.
fn vmstate_storage(conf: &BTreeMap<String, String>) -> String {
    if let Some(s) = conf.get("vmstatestorage") {
        return s.clone();
    }
    let (mut shared, mut local): (Option<String>, Option<String>) = (None, None);
    for (_, volid) in volumes(conf) {
        let Some(def) = crate::tools::volume_parts(&volid).and_then(|(s, _)| volumes::storage(s))
        else {
            continue;
        };
        let slot = if def.shared { &mut shared } else { &mut local };
        if slot.is_none() || def.file_based() {
            *slot = Some(def.id.to_string());
        }
    }
    shared.or(local).unwrap_or_else(|| "local".into())
}

/// QemuConfig.pm `__snapshot_save_vmstate`: a raw volume `vm-N-state-<snap>` (`.raw` on a
/// file storage) of twice the memory plus 500 MiB, and the running machine and CPU recorded.
fn save_vmstate(
    sim: &Sim,
    node: &str,
    vmid: u32,
    conf: &BTreeMap<String, String>,
    snapname: &str,
) -> Result<(String, String), String> {
    let target = vmstate_storage(conf);
    let def = volumes::storage(&target).ok_or(format!("storage '{target}' does not exist"))?;
    let name = if def.block() {
        format!("vm-{vmid}-state-{snapname}")
    } else {
        format!("{vmid}/vm-{vmid}-state-{snapname}.raw")
    };
    let volid = format!("{target}:{name}");
    let memory: u64 = conf
        .get("memory")
        .and_then(|m| m.split(',').next().and_then(|v| v.parse().ok()))
        .unwrap_or(512);
    let path = volume_path(sim, node, &volid)?;
    volumes::create_image(&path, "raw", (memory * 2 + 500) << 20)?;
    Ok((volid, target))
}

/// `POST /nodes/{node}/qemu/{vmid}/snapshot` (API2/Qemu.pm snapshot): the reserved names are
/// refused before the task; `qmsnapshot` runs AbstractConfig.pm snapshot_create.
pub fn create(sim: &Arc<Sim>, node: &str, vmid: u32, params: &Params, auth: &Auth) -> ApiResult {
    let snapname = params["snapname"].clone();
    if snapname == "current" {
        return Err(ApiErr::die(
            "unable to use snapshot name 'current' (reserved name)",
        ));
    }
    if snapname.eq_ignore_ascii_case("pending") {
        return Err(ApiErr::die(
            "unable to use snapshot name 'pending' (reserved name)",
        ));
    }
    config_of(sim, node, vmid)?;
    let with_ram = flag(params, "vmstate");
    let comment = params.get("description").cloned().filter(|d| !d.is_empty());
    let (s2, n2) = (sim.clone(), node.to_string());
    let upid = tasks::spawn(
        sim,
        node,
        "qmsnapshot",
        &vmid.to_string(),
        &auth.id,
        move |ctx| snapshot_create(&s2, ctx, &n2, vmid, &snapname, with_ram, comment),
    );
    Ok(json!(upid))
}

fn snapshot_create(
    sim: &Arc<Sim>,
    ctx: &TaskCtx,
    node: &str,
    vmid: u32,
    snapname: &str,
    with_ram: bool,
    comment: Option<String>,
) -> Outcome {
    // __snapshot_prepare, under the file lock.
    let running = sim.lock().vms.get(&vmid).is_some_and(|v| v.running);
    // What the step prints, logged once the state is unlocked again.
    let mut lines = Vec::new();
    let prepared = locked(sim, ctx, vmid, |vm| {
        if vm.config.get("template").is_some_and(|t| t == "1") {
            return Err("you can't take a snapshot if it's a template".into());
        }
        check_lock(&vm.config)?;
        if vm.snapshots.contains_key(snapname) {
            return Err(format!("snapshot name '{snapname}' already used"));
        }
        if !has_snapshot_feature(&vm.config) {
            return Err("snapshot feature is not available".into());
        }
        // A `warn` in a worker: logged as `WARN: …`, counted in the exit status.
        let mut warnings = 0;
        for (name, other) in vm.snapshots.iter_mut() {
            if other.get("parent").map(String::as_str) == Some(snapname) {
                lines.push(format!(
                    "WARN: deleting parent '{snapname}' reference from '{name}' to avoid bogus snapshot cycle."
                ));
                other.remove("parent");
                warnings += 1;
            }
        }
        let mut snap = copy_config(&vm.config);
        if with_ram && running {
            let (volid, target) = save_vmstate(sim, node, vmid, &vm.config, snapname)?;
            lines.push(format!("saving VM state and RAM using storage '{target}'"));
            snap.insert("vmstate".into(), volid);
            snap.insert("runningmachine".into(), RUNNING_MACHINE.into());
            snap.insert("runningcpu".into(), RUNNING_CPU.into());
        }
        snap.insert("snapstate".into(), "prepare".into());
        snap.insert("snaptime".into(), (epoch() as u64).to_string());
        if let Some(c) = &comment {
            snap.insert("description".into(), c.clone());
        }
        vm.snapshots.insert(snapname.to_string(), snap.clone());
        vm.config.insert("lock".into(), "snapshot".into());
        Ok((snap, warnings))
    });
    for line in lines {
        ctx.log(line);
    }
    let (snap, warnings) = prepared?;
    // The volumes, outside the file lock (the config's `lock: snapshot` guards them).
    let work = (|| -> Result<Vec<String>, String> {
        ctx.sleep(sim.task_duration("qmsnapshot"))?;
        let mut done = Vec::new();
        for (key, volid) in volumes(&snap) {
            ctx.log(format!("snapshotting 'drive-{key}' ({volid})"));
            let path = volume_path(sim, node, &volid)?;
            volume_op(&path, snapname, VolumeOp::Create)?;
            done.push(volid);
        }
        Ok(done)
    })();
    if let Err(e) = work {
        if ctx.killed() {
            return Err(e);
        }
        ctx.log("WARN: snapshot create failed: starting cleanup");
        let _ = locked(sim, ctx, vmid, |vm| {
            if let Some(s) = vm.snapshots.remove(snapname) {
                if let Some(state) = s.get("vmstate")
                    && let Ok(p) = volume_path(sim, node, state)
                {
                    let _ = std::fs::remove_file(p);
                }
                for (_, volid) in volumes(&s) {
                    if let Ok(p) = volume_path(sim, node, &volid) {
                        let _ = volume_op(&p, snapname, VolumeOp::Delete);
                    }
                }
            }
            vm.config.remove("lock");
            Ok(())
        });
        return Err(e);
    }
    // __snapshot_commit.
    locked(sim, ctx, vmid, |vm| {
        if vm.config.get("lock").map(String::as_str) != Some("snapshot") {
            return Err("missing snapshot lock".into());
        }
        let snap = vm
            .snapshots
            .get_mut(snapname)
            .ok_or(format!("snapshot '{snapname}' does not exist"))?;
        if snap.get("snapstate").map(String::as_str) != Some("prepare") {
            return Err("wrong snapshot state".into());
        }
        snap.remove("snapstate");
        vm.config.remove("lock");
        vm.config.insert("parent".into(), snapname.to_string());
        Ok(warnings)
    })
}

/// What `get_current_qemu_machine` and `get_cpu_from_running_vm` report of a running pve-sim
/// VM (recorded with a snapshot's RAM).
const RUNNING_MACHINE: &str = "pc-i440fx-9.2+pve1";
const RUNNING_CPU: &str = "kvm64,enforce,+kvm_pv_eoi,+kvm_pv_unhalt,+lahf_lm,+sep";

/// `POST …/snapshot/{snapname}/rollback` (API2/Qemu.pm rollback): `qmrollback` under the
/// migration lock (10 s) runs AbstractConfig.pm snapshot_rollback, then starts the VM if
/// `start` is given and it is not running.
pub fn rollback(
    sim: &Arc<Sim>,
    node: &str,
    vmid: u32,
    snapname: &str,
    params: &Params,
    auth: &Auth,
) -> ApiResult {
    let start = flag(params, "start");
    let (s2, n2, name) = (sim.clone(), node.to_string(), snapname.to_string());
    let upid = tasks::spawn(
        sim,
        node,
        "qmrollback",
        &vmid.to_string(),
        &auth.id,
        move |ctx| {
            crate::qemu::migrate::migration_locked(&s2, ctx, vmid, || {
                snapshot_rollback(&s2, ctx, &n2, vmid, &name)?;
                let running = s2.lock().vms.get(&vmid).is_some_and(|v| v.running);
                if start && !running {
                    start_vm(&s2, ctx, vmid)?;
                }
                Ok(0)
            })
        },
    );
    Ok(json!(upid))
}

fn start_vm(sim: &Sim, ctx: &TaskCtx, vmid: u32) -> Result<(), String> {
    ctx.sleep(sim.task_duration("qmstart"))?;
    let mut st = sim.lock();
    let vm = st.vms.get_mut(&vmid).ok_or("VM vanished")?;
    vm.running = true;
    vm.started = Some(Instant::now());
    vm.pid = 10000 + (sim.random() % 50000) as u32;
    Ok(())
}

fn snapshot_rollback(
    sim: &Arc<Sim>,
    ctx: &TaskCtx,
    node: &str,
    vmid: u32,
    snapname: &str,
) -> Outcome {
    let get_snapshot = |vm: &crate::state::Vm| -> Result<BTreeMap<String, String>, String> {
        if vm.config.get("template").is_some_and(|t| t == "1") {
            return Err("you can't rollback if vm is a template".into());
        }
        vm.snapshots
            .get(snapname)
            .cloned()
            .ok_or(format!("snapshot '{snapname}' does not exist"))
    };
    // The first pass: checks, the VM stopped (vm_stop, 5 s timeout), `lock: rollback`.
    let snap = locked(sim, ctx, vmid, |vm| {
        let snap = get_snapshot(vm)?;
        if let Some(state) = snap.get("snapstate") {
            return Err(format!(
                "unable to rollback to incomplete snapshot (snapstate = {state})"
            ));
        }
        check_lock(&vm.config)?;
        vm.running = false;
        vm.started = None;
        vm.config.insert("lock".into(), "rollback".into());
        Ok(snap)
    })?;
    ctx.sleep(sim.task_duration("qmrollback"))?;
    for (_, volid) in volumes(&snap) {
        let path = volume_path(sim, node, &volid)?;
        volume_op(&path, snapname, VolumeOp::Rollback)?;
    }
    // The second pass: the snapshot's config becomes the current one.
    let vmstate = locked(sim, ctx, vmid, |vm| {
        let snap = get_snapshot(vm)?;
        if vm.config.get("lock").map(String::as_str) != Some("rollback") {
            return Err("got wrong lock".into());
        }
        vm.config.remove("lock");
        let mut conf = vm.config.clone();
        // __snapshot_rollback_get_unused: the current volumes the snapshot does not have.
        let in_snap: Vec<String> = volumes(&snap).into_iter().map(|(_, v)| v).collect();
        let unused: Vec<String> = volumes(&conf)
            .into_iter()
            .map(|(_, v)| v)
            .filter(|v| !in_snap.contains(v))
            .collect();
        // __snapshot_apply_config: the description and unusedN kept, the rest the snapshot's.
        let mut new_conf: BTreeMap<String, String> = conf
            .iter()
            .filter(|(k, _)| is_unused(k) || k.as_str() == "description")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        new_conf.extend(copy_config(&snap));
        new_conf.insert("parent".into(), snapname.to_string());
        // __snapshot_rollback_hook: the recorded machine is used once, a new vmgenid.
        new_conf.remove("runningmachine");
        new_conf.remove("runningcpu");
        if new_conf.contains_key("vmgenid") {
            new_conf.insert("vmgenid".into(), crate::qemu::config_file::uuid(sim));
        }
        for volid in unused {
            add_unused(sim, node, &mut new_conf, &volid);
        }
        conf.clear();
        vm.config = new_conf;
        vm.pending = Default::default();
        Ok(snap.get("vmstate").cloned())
    })?;
    // __snapshot_rollback_vm_start: a snapshot with RAM resumes running.
    if vmstate.is_some() {
        start_vm(sim, ctx, vmid)?;
    }
    Ok(0)
}

/// `DELETE …/snapshot/{snapname}` (API2/Qemu.pm delsnapshot): `qmdelsnapshot` under the
/// migration lock (unless `force`) runs AbstractConfig.pm snapshot_delete.
pub fn delete(
    sim: &Arc<Sim>,
    node: &str,
    vmid: u32,
    snapname: &str,
    params: &Params,
    auth: &Auth,
) -> ApiResult {
    let force = flag(params, "force");
    let (s2, n2, name) = (sim.clone(), node.to_string(), snapname.to_string());
    let upid = tasks::spawn(
        sim,
        node,
        "qmdelsnapshot",
        &vmid.to_string(),
        &auth.id,
        move |ctx| {
            if force {
                snapshot_delete(&s2, ctx, &n2, vmid, &name, force)
            } else {
                crate::qemu::migrate::migration_locked(&s2, ctx, vmid, || {
                    snapshot_delete(&s2, ctx, &n2, vmid, &name, force)
                })
            }
        },
    );
    Ok(json!(upid))
}

fn snapshot_delete(
    sim: &Arc<Sim>,
    ctx: &TaskCtx,
    node: &str,
    vmid: u32,
    snapname: &str,
    force: bool,
) -> Outcome {
    let missing = || format!("snapshot '{snapname}' does not exist");
    {
        let st = sim.lock();
        let vm = st.vms.get(&vmid).ok_or_else(|| no_conf(node, vmid).msg)?;
        if !vm.snapshots.contains_key(snapname) {
            return Err(missing());
        }
    }
    let expect_lock = |vm: &crate::state::Vm| -> Result<(), String> {
        if vm.config.get("lock").map(String::as_str) != Some("snapshot-delete") {
            return Err("encountered invalid lock, expected 'snapshot-delete'".into());
        }
        Ok(())
    };
    // set_lock, then the prepare step.
    locked(sim, ctx, vmid, |vm| {
        check_lock(&vm.config)?;
        vm.config.insert("lock".into(), "snapshot-delete".into());
        Ok(())
    })?;
    let snap = locked(sim, ctx, vmid, |vm| {
        expect_lock(vm)?;
        if vm.config.get("template").is_some_and(|t| t == "1") {
            return Err("you can't delete a snapshot if vm is a template".into());
        }
        let snap = vm.snapshots.get_mut(snapname).ok_or_else(missing)?;
        snap.insert("snapstate".into(), "delete".into());
        Ok(snap.clone())
    })?;
    ctx.sleep(sim.task_duration("qmdelsnapshot"))?;
    let mut warnings = 0;
    if let Some(state) = snap.get("vmstate") {
        let freed = volume_path(sim, node, state).and_then(|p| {
            std::fs::remove_file(&p).map_err(|e| format!("unable to free '{state}': {e}"))
        });
        match freed {
            Err(e) if !force => return Err(e),
            Err(e) => {
                ctx.log(format!("WARN: {e}"));
                warnings += 1;
            }
            Ok(()) => {}
        }
        if !force {
            locked(sim, ctx, vmid, |vm| {
                expect_lock(vm)?;
                let snap = vm.snapshots.get_mut(snapname).ok_or_else(missing)?;
                snap.remove("vmstate");
                Ok(())
            })?;
        }
    }
    let mut unused = Vec::new();
    for (key, volid) in volumes(&snap) {
        let done =
            volume_path(sim, node, &volid).and_then(|p| volume_op(&p, snapname, VolumeOp::Delete));
        match done {
            Err(e) if !force => return Err(e),
            Err(e) => {
                ctx.log(format!("WARN: {e}"));
                warnings += 1;
            }
            Ok(()) => {}
        }
        unused.push(volid);
        if !force {
            // __snapshot_delete_remove_drive: the drive leaves the section.
            locked(sim, ctx, vmid, |vm| {
                expect_lock(vm)?;
                let snap = vm.snapshots.get_mut(snapname).ok_or_else(missing)?;
                snap.remove(&key);
                Ok(())
            })?;
        }
    }
    locked(sim, ctx, vmid, |vm| {
        expect_lock(vm)?;
        let snap = vm.snapshots.remove(snapname).ok_or_else(missing)?;
        let new_parent = snap.get("parent").cloned();
        let relink = |conf: &mut BTreeMap<String, String>| {
            if conf.get("parent").map(String::as_str) == Some(snapname) {
                match &new_parent {
                    Some(p) => conf.insert("parent".into(), p.clone()),
                    None => conf.remove("parent"),
                };
            }
        };
        relink(&mut vm.config);
        for other in vm.snapshots.values_mut() {
            relink(other);
        }
        vm.config.remove("lock");
        // A volume only the removed snapshot used becomes unusedN; one another snapshot
        // still has stays where it is.
        let kept: Vec<String> = vm
            .snapshots
            .values()
            .flat_map(|s| volumes(s).into_iter().map(|(_, v)| v))
            .collect();
        for volid in unused.iter().filter(|v| !kept.contains(v)) {
            add_unused(sim, node, &mut vm.config, volid);
        }
        Ok(warnings)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_copies_all_but_the_bookkeeping() {
        let conf: BTreeMap<String, String> = [
            ("memory", "1024"),
            ("lock", "backup"),
            ("description", "web"),
            ("unused0", "local-lvm:vm-100-disk-9"),
            ("parent", "s1"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let copy = copy_config(&conf);
        assert_eq!(copy.keys().collect::<Vec<_>>(), ["memory", "parent"]);
    }
}
