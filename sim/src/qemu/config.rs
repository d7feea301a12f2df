//! `…/config` and `…/pending`, after qemu-server API2/Qemu.pm (`vm_config`, `vm_pending`,
//! `update_vm_api`) and QemuServer.pm (`vmconfig_apply_pending`): changes go to the pending
//! section first, a stopped VM applies them at once, a running one what it can hotplug.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::{Value, json};

use crate::access::check::Checker;
use crate::http::handler::{ApiErr, ApiResult, Auth, Params, Undefined, wait_until};
use crate::qemu::config_file::{check_lock, digest, file_of, free_volumes};
use crate::qemu::drives::{plan_drives, run_drives};
use crate::qemu::pending::{Pending, is_cloudinit_key};

use crate::qemu::permissions;
use crate::qemu::write_path::{self, typed};
use crate::schema;
use crate::state::{Sim, Vm};
use crate::tasks::{self, TaskCtx};

/// qemu-server API2/Qemu.pm, `$load_and_check_config`: a balloon target above the
/// (new or current) memory is refused.
fn check_balloon(params: &Params, conf: &BTreeMap<String, String>) -> Result<(), String> {
    let mem_param = params.get("memory").filter(|m| !m.is_empty());
    if mem_param.is_none() && !params.contains_key("balloon") {
        return Ok(());
    }
    // get_current_memory: `memory` is `N` or `current=N`; PVE's default is 512 MiB.
    let current = |m: &str| -> u64 {
        let v = m
            .split(',')
            .find_map(|kv| kv.strip_prefix("current="))
            .unwrap_or(m);
        v.parse().unwrap_or(512)
    };
    let maxmem = current(
        mem_param
            .or(conf.get("memory"))
            .map_or("512", |s| s.as_str()),
    );
    let balloon: u64 = params
        .get("balloon")
        .or(conf.get("balloon"))
        .and_then(|b| b.parse().ok())
        .unwrap_or(0);
    if balloon > 0 && balloon > maxmem {
        return Err("balloon value too large (must be smaller than assigned memory)".into());
    }
    Ok(())
}

/// `GET …/config`: values typed as PVE returns them, secrets masked, with `digest`; the
/// pending values applied unless `current` (API2/Qemu.pm, vm_config).
pub fn get_config(sim: &Sim, node: &str, vmid: u32, current: bool) -> ApiResult {
    let (file, pend) = file_of(sim, node, vmid)?;
    let conf = if current {
        file.clone()
    } else {
        pend.overlay(&file)
    };
    let mut out = serde_json::Map::new();
    for (k, v) in &conf {
        out.insert(k.clone(), typed(k, v));
    }
    out.insert("digest".into(), json!(digest(&file, &pend)));
    Ok(Value::Object(out))
}

/// `GET …/pending` (API2/Qemu.pm, vm_pending; pve-guest-common GuestHelpers.pm,
/// config_with_pending_array): every key of the config file, `digest` included, with its
/// current `value`, its `pending` value and a pending `delete`, typed as parse_vm_config made
/// them (an integer or boolean is a number, as GET config answers it); `cipassword` masked
/// (`'**********'`, and `'********** '` for a pending one, as the source writes it).
pub fn get_pending(sim: &Sim, node: &str, vmid: u32) -> ApiResult {
    let (conf, pend) = file_of(sim, node, vmid)?;
    let mask = |k: &str, v: &str, pending: bool| match (k, pending) {
        ("cipassword", true) => json!("********** "),
        _ => typed(k, v),
    };
    let mut items: Vec<Value> = Vec::new();
    let mut file = conf.clone();
    file.insert("digest".into(), digest(&conf, &pend));
    for (k, v) in &file {
        let mut item = serde_json::Map::new();
        item.insert("key".into(), json!(k));
        item.insert("value".into(), json!(mask(k, v, false)));
        if let Some(p) = pend.set.get(k) {
            item.insert("pending".into(), json!(mask(k, p, true)));
        }
        if pend.delete.contains(k) {
            item.insert(
                "delete".into(),
                json!(if pend.force.contains(k) { 2 } else { 1 }),
            );
        }
        items.push(Value::Object(item));
    }
    for (k, p) in pend.set.iter().filter(|(k, _)| !file.contains_key(*k)) {
        items.push(json!({"key": k, "pending": mask(k, p, true)}));
    }
    for k in pend.delete.iter().filter(|k| !file.contains_key(*k)) {
        let delete = if pend.force.contains(k) { 2 } else { 1 };
        items.push(json!({"key": k, "delete": delete}));
    }
    Ok(json!(items))
}

/// Where one key of an update goes.
enum Change {
    /// To the pending section, as the file keeps it.
    Pending(String),
    /// Straight into the config (`cipassword`: `$conf->{cipassword} = …`).
    Config(String),
    /// Nowhere: an undef `description`.
    Nothing,
    /// Out of the config: an empty `description`.
    Remove,
}

/// update_vm_api's add/change loop for the keys that are not drives, checked before anything
/// is written: `tags` made unique, `boot` checked and printed again, an `ostype` that pins
/// the machine (Machine.pm check_and_pin_machine_string, unless `machine` is set or deleted
/// in the same update), `cipassword` hashed for a guest that is not Windows; every value as
/// write_config keeps it, a key given without a value failing the update ("got undefined
/// value") but `description` and `tags`, which change nothing.
fn planned_changes(
    sim: &Sim,
    vm: &Vm,
    sets: &[(String, String)],
    undef: &[String],
    deletes: &[String],
) -> Result<Vec<(String, Change)>, String> {
    let exists = |dev: &str| {
        vm.config.contains_key(dev)
            || vm.pending.set.contains_key(dev)
            || sets.iter().any(|(k, _)| k == dev)
    };
    let ostype = vm.config.get("ostype").map(String::as_str);
    let mut out = Vec::new();
    for (key, value) in sets.iter().filter(|(k, _)| !schema::is_drive_key(k)) {
        if vm.pending.set.get(key) == Some(value) {
            continue;
        }
        let value = match key.as_str() {
            "tags" => write_path::unique_tags(value),
            "boot" => write_path::update_boot(value, exists, deletes)?,
            "cipassword" => {
                let hashed = write_path::update_cipassword(sim, value, ostype);
                out.push((key.clone(), Change::Config(hashed)));
                continue;
            }
            "machine" => {
                schema::assert_valid_machine_property(value)?;
                value.clone()
            }
            "ostype" => {
                let machine_given = sets.iter().any(|(k, _)| k == "machine")
                    || vm.pending.set.contains_key("machine")
                    || deletes.iter().any(|d| d == "machine");
                if !machine_given
                    && let Some(pinned) = write_path::pin_machine(
                        vm.config.get("machine").map(String::as_str),
                        Some(value),
                    )
                {
                    out.push(("machine".into(), Change::Pending(pinned)));
                }
                value.clone()
            }
            _ => value.clone(),
        };
        out.push(match write_path::write_value(key, Some(&value))? {
            Some(stored) => (key.clone(), Change::Pending(stored)),
            // An empty `description` goes to [PENDING] as `#`; applied, write_vm_config
            // writes no comment for it (`if ($descr)`): the description is gone.
            None if key == "description" => (key.clone(), Change::Remove),
            None => (key.clone(), Change::Nothing),
        });
    }
    for key in undef {
        match key.as_str() {
            "description" => out.push((key.clone(), Change::Nothing)),
            // GuestHelpers.pm `get_unique_tags(undef)` is `''`: pending `tags: `, read back
            // as `" "` ([`write_path::read_back`]).
            "tags" => out.push((key.clone(), Change::Pending(String::new()))),
            "cipassword" => {
                let hashed = write_path::update_cipassword(sim, "", ostype);
                out.push((key.clone(), Change::Config(hashed)));
            }
            _ => {
                write_path::write_value(key, None)?;
            }
        }
    }
    Ok(out)
}

/// `PUT` (synchronous) and `POST` (a `qmconfig` task) on `…/config`.
pub fn update(
    sim: &Arc<Sim>,
    node: &str,
    vmid: u32,
    params: &Params,
    undef: &Undefined,
    auth: &Auth,
    async_api: bool,
) -> ApiResult {
    let skiplock = params.get("skiplock").is_some_and(|v| v == "1");
    if skiplock && !auth.root_ticket {
        return Err(ApiErr::param("skiplock", "Only root may use this option."));
    }
    let deletes: Vec<String> = params
        .get("delete")
        .map(|d| crate::tools::split_list(d))
        .unwrap_or_default();
    // update_vm_api: `revert` drops a pending change (checked before `delete`).
    let reverts: Vec<String> = params
        .get("revert")
        .map(|r| crate::tools::split_list(r))
        .unwrap_or_default();
    for r in &reverts {
        if !schema::is_config_key(r) {
            return Err(ApiErr::param("revert", format!("unknown option '{r}'")));
        }
        if params.contains_key(r) {
            return Err(ApiErr::param(
                "delete",
                format!("you can't use '-{r}' and -revert {r}' at the same time"),
            ));
        }
    }
    for d in &deletes {
        if params.contains_key(d) {
            return Err(ApiErr::param(
                "delete",
                format!("you can't use '-{d}' and -delete {d}' at the same time"),
            ));
        }
        if reverts.contains(d) {
            return Err(ApiErr::param(
                "revert",
                format!("you can't use '-delete {d}' and -revert {d}' at the same time"),
            ));
        }
        if !schema::is_config_key(d) {
            return Err(ApiErr::param("delete", format!("unknown option '{d}'")));
        }
    }
    let undef: Vec<String> = undef
        .iter()
        .filter(|k| schema::is_config_key(k))
        .cloned()
        .collect();
    let sets: Vec<(String, String)> = params
        .iter()
        .filter(|(k, _)| schema::is_config_key(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // `!$delete_str && !$revert_str && !scalar(keys %$param)`: a key without a value counts.
    if sets.is_empty() && deletes.is_empty() && undef.is_empty() && reverts.is_empty() {
        return Err(ApiErr::die("no options specified"));
    }
    // qemu-server API2/Qemu.pm, update_vm_api: `$load_and_check_config` runs once here, before
    // forking ("early checks"), and again inside the worker under the VM's file lock, so
    // concurrent updates sent with one digest end with all but one task failing.
    let wanted_digest = params.get("digest").cloned();
    let load_and_check = {
        let params = params.clone();
        move |conf: &BTreeMap<String, String>, pending: &Pending| -> Result<(), String> {
            if let Some(d) = &wanted_digest
                && *d != digest(conf, pending)
            {
                return Err("checksum mismatch (file change by other user?)".into());
            }
            if !skiplock {
                check_lock(conf)?;
            }
            check_balloon(&params, conf)
        }
    };
    let checker = Checker::new(sim, auth);
    permissions::update_vm(sim, &checker, node, vmid, &sets, &deletes)?;
    let (conf, pend) = file_of(sim, node, vmid)?;
    load_and_check(&conf, &pend).map_err(ApiErr::die)?;
    // `$updatefn`'s checks key by key: here for PUT, inside the task for POST.
    if !async_api {
        permissions::update_keys(sim, &checker, vmid, &conf, &sets, &deletes)?;
    }
    if sets.iter().any(|(k, _)| k == "lock") {
        return Err(ApiErr::die(
            "pve-sim: setting 'lock' through the API is not allowed",
        ));
    }
    let prepared = write_path::prepare_params(sim, params, &Undefined::new())?;
    if let Some(drive) = undef.iter().find(|k| schema::is_drive_key(k)) {
        return Err(ApiErr::param(drive, "unable to parse drive options"));
    }
    let mut sets: Vec<(String, String)> = sets
        .into_iter()
        .map(|(k, _)| {
            let v = prepared[&k].clone();
            // update_vm_api: `vmgenid: 1` is a fresh generation id on this write.
            let v = match k.as_str() {
                "vmgenid" => write_path::vmgenid(sim, Some(&v)).unwrap_or(v),
                _ => v,
            };
            (k, v)
        })
        .collect();
    sets.sort();
    if let Some(script) = prepared.get("hookscript") {
        check_hookscript(sim, node, script).map_err(|e| ApiErr::param("hookscript", e))?;
    }
    let ops = plan_drives(sim, node, &prepared, auth)?;
    let force = params.get("force").is_some_and(|f| f == "1");
    let n2 = node.to_string();
    // What vmconfig_hotplug_pending raised (`raise_param_exc($errors)`), for the synchronous
    // PUT's 400.
    let hotplug_raised: Arc<std::sync::Mutex<schema::Errors>> = Default::default();
    let raised = hotplug_raised.clone();
    let owner = auth.clone();
    let apply = move |sim: &Arc<Sim>, ctx: &TaskCtx| -> Result<u32, String> {
        ctx.sleep(sim.task_duration("qmconfig"))?;
        let (conf, pend) = file_of(sim, &n2, vmid).map_err(|e| e.msg)?;
        load_and_check(&conf, &pend)?;
        if async_api {
            let checker = Checker::new(sim, &owner);
            permissions::update_keys(sim, &checker, vmid, &conf, &sets, &deletes)
                .map_err(|e| e.msg)?;
        }
        let mut made = Vec::new();
        let attached = crate::qemu::drives::cloudinit_key(conf.iter().chain(pend.set.iter()));
        let drives =
            run_drives(sim, ctx, &n2, vmid, ops, &mut made, attached).inspect_err(|_| {
                if !ctx.killed() {
                    free_volumes(&made)
                }
            })?;
        let mut st = sim.lock();
        let vm = st.vms.get_mut(&vmid).ok_or("VM vanished")?;
        // update_vm_api's `$updatefn`: every change goes to [PENDING] first (each value as
        // write_config keeps it; PVE writes key by key, pve-sim checks them all before the
        // first); unchanged values are dropped; then a stopped VM applies all of it, a running
        // one what it can hotplug (QemuServer.pm, vmconfig_apply_pending /
        // vmconfig_hotplug_pending).
        let changes = planned_changes(sim, vm, &sets, &undef, &deletes)?;
        // `$param->{$opt} = $conf->{$opt}` for a reverted key the config has (the pending
        // value then equals it and is dropped, a pending delete with it), a delete of one
        // that is only pending.
        for r in &reverts {
            vm.pending.set.remove(r);
            vm.pending.delete.remove(r);
            vm.pending.force.remove(r);
        }
        // The delete loop: check_protection for drives and unused disks, before any of it.
        let protected = vm.config.get("protection").is_some_and(|p| p == "1");
        for d in deletes.iter().filter(|_| protected) {
            if let Some(volid) = d.starts_with("unused").then(|| vm.config.get(d)).flatten() {
                return Err(format!(
                    "can't remove unused disk '{volid}' - protection mode enabled"
                ));
            }
            if schema::is_drive_key(d) && vm.config.contains_key(d) {
                return Err(format!(
                    "can't remove drive '{d}' - protection mode enabled"
                ));
            }
        }
        // try_deallocate_drive: an `unusedN` a snapshot still names is not freed.
        for d in deletes.iter().filter(|d| d.starts_with("unused")) {
            if let Some(volid) = vm.config.get(d)
                && registers_unused(vmid, volid)
                && crate::qemu::volume_use::is_volume_in_use(&vm.config, &vm.snapshots, None, volid)
            {
                return Err(format!(
                    "unable to delete '{volid}' - volume is still in use (snapshot?)"
                ));
            }
        }
        let mut freed = Vec::new();
        let mut warnings = Vec::new();
        let mut boot_order = write_path::boot_devices(vm.config.get("boot").map_or("", |b| b));
        for d in &deletes {
            let Some(value) = vm.config.get(d).or(vm.pending.set.get(d)).cloned() else {
                // A `warn` in the worker: a task log line (logged once the state is let go).
                warnings.push(format!(
                    "cannot delete '{d}' - not set in current configuration!"
                ));
                continue;
            };
            if d.starts_with("unused") {
                // try_deallocate_drive at once, the config written without it.
                vm.config.remove(d);
                freed.push(value);
                continue;
            }
            if force {
                vm.pending.queue_force_delete(d);
            } else {
                vm.pending.queue_delete(d);
            }
            // A deleted device leaves the boot order (print_bootorder of the rest).
            // The last one leaves `print_bootorder` of nothing, `''` (`boot: `, read as " ").
            if boot_order.contains(d) {
                boot_order.retain(|dev| dev != d);
                vm.pending
                    .queue_set("boot", &write_path::print_bootorder(&boot_order));
            }
        }
        for (k, v) in drives {
            // update_vm_api: "append new CD drives to bootorder to mark them bootable", where
            // the VM has an order (`drive_is_cdrom($drive, 1)`: not a cloud-init drive).
            let cdrom = schema::parse_drive(&v).is_ok_and(|o| {
                o.get("media").is_some_and(|m| m == "cdrom")
                    && !o.get("file").is_some_and(|f| f.contains("cloudinit"))
            });
            if cdrom && !boot_order.is_empty() && !boot_order.contains(&k) {
                boot_order.push(k.clone());
                vm.pending
                    .queue_set("boot", &write_path::print_bootorder(&boot_order));
            }
            vm.pending.queue_set(&k, &v);
        }
        for (key, change) in changes {
            match change {
                Change::Pending(value) => vm.pending.queue_set(&key, &value),
                Change::Config(value) => {
                    vm.config.insert(key.clone(), value.clone());
                }
                Change::Nothing => {
                    vm.pending.delete.remove(&key);
                }
                Change::Remove => {
                    vm.pending.delete.remove(&key);
                    vm.pending.set.remove(&key);
                    vm.config.remove(&key);
                }
            }
        }
        // `$conf->{pending}->{description} = undef` with nothing else pending: the last
        // write_config prints the `[PENDING]` header and no line under it, and the update
        // returns before anything writes the file again.
        let empty_header_left = vm.pending.is_empty() && undef.iter().any(|k| k == "description");
        vm.pending.cleanup(&vm.config);
        let (apply_sets, apply_deletes) = vm.pending.take_applicable(&vm.config, vm.running);
        // vmconfig_hotplug_pending's `$cloudinit_record_changed`: the `[special:cloudinit]`
        // section is made for a cloud-init option a running VM takes.
        if vm.running
            && (apply_sets.iter().any(|(k, _)| is_cloudinit_key(k))
                || apply_deletes.iter().any(|k| is_cloudinit_key(k)))
        {
            vm.cloudinit.in_file = true;
        }
        let running = vm.running;
        freed.extend(apply_changes(vm, vmid, apply_sets, apply_deletes, running));
        // Each write_config of the update rewrites the file from what parse_vm_config read:
        // a value of blanks is `" "` from now on (`boot: ` becomes `boot:  `).
        for value in vm.config.values_mut().chain(vm.pending.set.values_mut()) {
            if value.trim().is_empty() {
                *value = " ".into();
            }
        }
        if empty_header_left {
            vm.pending.empty_header_beside = Some(vm.config.clone());
        }
        let hotplug_errors = if vm.running {
            crate::qemu::pending::hotplug_errors(
                &vm.config,
                &vm.pending,
                sets.iter().map(|(k, _)| k.as_str()),
            )
        } else {
            schema::Errors::new()
        };
        drop(st);
        for line in warnings {
            ctx.log(line);
        }
        free_owned(sim, &n2, vmid, &freed);
        if !hotplug_errors.is_empty() {
            // The task ends as PVE::Exception prints a parameter exception.
            let mut text = String::from("400 Parameter verification failed.\n");
            for (k, e) in &hotplug_errors {
                text.push_str(&format!("{k}: {e}\n"));
            }
            *raised.lock().unwrap_or_else(|e| e.into_inner()) = hotplug_errors;
            return Err(text);
        }
        Ok(0)
    };
    if !async_api {
        let ctx = TaskCtx {
            sim: sim.clone(),
            upid: format!("sync-update-{vmid}"),
            cancel: Arc::new(AtomicBool::new(false)),
            killed: Arc::new(AtomicBool::new(false)),
            deaf: false,
        };
        sim.lock_config(vmid, &ctx.upid, tasks::LOCK_CONFIG_TIMEOUT, || {
            apply(sim, &ctx)
        })
        .map_err(|e| {
            let errors =
                std::mem::take(&mut *hotplug_raised.lock().unwrap_or_else(|p| p.into_inner()));
            if errors.is_empty() {
                ApiErr::die(e)
            } else {
                ApiErr::params(errors)
            }
        })?;
        return Ok(Value::Null);
    }
    let upid = tasks::fork_locked(sim, node, "qmconfig", vmid, &auth.id, apply);
    if let Some(delay) = params
        .get("background_delay")
        .and_then(|d| d.parse::<u64>().ok())
    {
        let u = upid.clone();
        wait_until(sim, Duration::from_secs(delay), |st| {
            st.tasks.iter().any(|t| t.upid == u && !t.running())
        });
        let st = sim.lock();
        if let Some(t) = st.tasks.iter().find(|t| t.upid == upid)
            && let Some(exit) = &t.exitstatus
        {
            if exit == "OK" || exit.starts_with("WARNINGS") {
                return Ok(Value::Null);
            }
            return Err(ApiErr::die(format!("failed to update VM {vmid}: {exit}")));
        }
    }
    Ok(json!(upid))
}

/// Applies changes to the config as `vmconfig_apply_pending` (a stopped VM) or
/// `vmconfig_hotplug_pending` (`running`) does: a deleted or replaced disk becomes `unusedN`
/// (a CD-ROM or the cloud-init drive does not); only a running VM's cloud-init changes are
/// recorded against what the drive holds (`$cloudinit_record_changed`), a stopped VM's drive
/// being generated from the config at its start.
pub(crate) fn apply_changes(
    vm: &mut Vm,
    vmid: u32,
    sets: Vec<(String, String)>,
    deletes: Vec<String>,
    running: bool,
) -> Vec<String> {
    let mut freed = Vec::new();
    let unused = |c: &BTreeMap<String, String>| {
        (0..256)
            .map(|i| format!("unused{i}"))
            .find(|k| !c.contains_key(k))
    };
    for d in &deletes {
        let forced = vm.pending.force.remove(d);
        if let Some(old) = vm.config.remove(d) {
            if running {
                vm.cloudinit.record(d, Some(&old), None);
            }
            let volid = old.split(',').next().unwrap_or("").to_string();
            // vmconfig_delete_or_detach_drive with force: try_deallocate_drive frees it.
            if forced && schema::is_drive_key(d) && !old.contains("media=cdrom") {
                freed.push(volid);
                continue;
            }
            if schema::is_drive_key(d)
                && registers_unused(vmid, &old)
                && let Some(u) = unused(&vm.config)
            {
                vm.config
                    .insert(u, old.split(',').next().unwrap_or("").to_string());
            }
        }
    }
    for (k, v) in sets {
        if schema::is_drive_key(&k) {
            let old_drive = vm.config.get(&k).cloned();
            let old_vol = old_drive
                .as_deref()
                .map(|o| o.split(',').next().unwrap_or("").to_string());
            let new_vol = v.split(',').next().unwrap_or("").to_string();
            if let Some(old) = old_vol.filter(|o| {
                *o != new_vol
                    && old_drive
                        .as_deref()
                        .is_some_and(|d| registers_unused(vmid, d))
            }) && let Some(u) = unused(&vm.config)
            {
                vm.config.insert(u, old);
            }
        }
        let old = vm.config.insert(k.clone(), v.clone());
        if running {
            vm.cloudinit.record(&k, old.as_deref(), Some(&v));
        }
    }
    freed
}

/// update_vm_api's `hookscript` (not create_vm's): pve-guest-common GuestHelpers.pm
/// `check_hookscript`, a snippet that exists and is executable.
fn check_hookscript(sim: &Sim, node: &str, volid: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let vol = crate::storage::volumes::parse_volume(&sim.opts.data_dir, node, volid)?;
    if vol.vtype != "snippets" {
        return Err(format!("'{volid}' is not in the snippets directory"));
    }
    let meta = std::fs::metadata(&vol.path)
        .ok()
        .filter(|m| m.is_file())
        .ok_or_else(|| format!("script '{volid}' does not exist"))?;
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(format!("script '{volid}' is not executable"));
    }
    Ok(())
}

/// QemuServer.pm `vmconfig_register_unused_drive`: a replaced or deleted drive becomes
/// `unusedN` only if it is no CD-ROM (`drive_is_cdrom`: `media=cdrom`, so neither an ISO nor
/// the cloud-init drive), is a PVE-managed volume (`parse_volume_id`) and is this VM's own
/// (`vm_is_volid_owner`).
fn registers_unused(vmid: u32, drive: &str) -> bool {
    let Ok(opts) = schema::parse_drive(drive) else {
        return false;
    };
    let file = opts.get("file").map_or("", String::as_str);
    let owned = crate::tools::volume_parts(file).is_some_and(|(_, name)| {
        let name = name.rsplit('/').next().unwrap_or(name);
        name.starts_with(&format!("vm-{vmid}-")) || name.starts_with(&format!("base-{vmid}-"))
    });
    opts.get("media").is_none_or(|m| m != "cdrom") && owned
}

/// QemuServer.pm `try_deallocate_drive`: frees the volumes the VM owns (`vm-N-…` of this VM;
/// another's is only dropped from the config), never a base its linked clones still use.
pub(crate) fn free_owned(sim: &Sim, node: &str, vmid: u32, volids: &[String]) {
    for volid in volids {
        if let Ok(vol) = crate::storage::volumes::parse_volume(&sim.opts.data_dir, node, volid)
            && vol.vmid == Some(vmid)
            && crate::qemu::templates::base_in_use(sim, node, volid).is_none()
        {
            let _ = std::fs::remove_file(&vol.path);
        }
    }
}

/// Before QEMU starts (QemuServer.pm, vm_start_nolock): the pending changes are applied, and
/// the cloud-init drive is generated from the config (Cloudinit.pm,
/// generate_cloudinitconfig), so the guest sees the current cloud-init options.
/// Returns the volumes forced deletes freed from the config (for [`free_owned`]).
pub(crate) fn prepare_start(vm: &mut Vm, vmid: u32) -> Vec<String> {
    let (sets, deletes) = vm.pending.take_applicable(&vm.config, false);
    let freed = apply_changes(vm, vmid, sets, deletes, false);
    if has_cloudinit_drive(&vm.config) {
        vm.cloudinit.regenerated();
    }
    freed
}

pub(crate) fn has_cloudinit_drive(conf: &BTreeMap<String, String>) -> bool {
    conf.iter()
        .any(|(k, v)| schema::is_drive_key(k) && v.contains("cloudinit"))
}
