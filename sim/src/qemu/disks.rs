//! Moving and unlinking a VM's disks, after qemu-server's `API2/Qemu.pm`: `move_vm_disk`
//! (`POST …/move_disk`, a `qmmove` task: a copy to another storage, or a reassign to another
//! VM) and `unlink` (`PUT …/unlink`, update_vm with `delete`).

use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::access::check::Checker;
use crate::http::handler::{ApiErr, ApiResult, Auth, Params, Undefined};
use crate::qemu::config_file::{self, check_lock, config_of};
use crate::qemu::disk_mirror;
use crate::qemu::volume_use::is_volume_in_use;
use crate::schema;
use crate::state::Sim;
use crate::storage::volumes;
use crate::tasks::{self, LOCK_CONFIG_TIMEOUT};

type Conf = BTreeMap<String, String>;

fn param_pair(a: &str, b: &str, msg: &str) -> ApiErr {
    let mut e = schema::Errors::new();
    e.insert(a.to_string(), msg.to_string());
    e.insert(b.to_string(), msg.to_string());
    ApiErr::params(e)
}

/// The `disk`/`target-disk` enum (Drive.pm, valid_drive_names_with_unused).
fn check_disk_name(key: &str, v: &str) -> Result<(), ApiErr> {
    let names = schema::drive_names_with_unused();
    if names.iter().any(|n| n == v) {
        return Ok(());
    }
    Err(ApiErr::param(
        key,
        format!(
            "value '{v}' does not have a value in the enumeration '{}'",
            names.join(", ")
        ),
    ))
}

/// The digest of a VM's config file as `assert_if_modified` compares it.
fn digest_of(sim: &Sim, vmid: u32, conf: &Conf) -> String {
    let pending = sim
        .lock()
        .vms
        .get(&vmid)
        .map(|v| v.pending.clone())
        .unwrap_or_default();
    config_file::digest(conf, &pending)
}

fn assert_if_modified(
    sim: &Sim,
    vmid: u32,
    conf: &Conf,
    want: Option<&String>,
) -> Result<(), String> {
    match want {
        Some(d) if *d != digest_of(sim, vmid, conf) => {
            Err("detected modified configuration - file changed by other user? Try again.".into())
        }
        _ => Ok(()),
    }
}

/// A drive's volume and options; `drive_is_cdrom($drive, 1)` counts the cloud-init drive
/// as a CD-ROM too.
fn drive_of(conf: &Conf, disk: &str) -> Result<(String, Conf), String> {
    let value = conf
        .get(disk)
        .ok_or(format!("disk '{disk}' does not exist"))?;
    let mut kv = crate::schema::parse_drive(value)?;
    let file = kv.remove("file").unwrap_or_default();
    if file.is_empty() {
        return Err(format!("disk '{disk}' has no associated volume"));
    }
    Ok((file, kv))
}

fn is_cdrom(file: &str, kv: &Conf) -> bool {
    kv.get("media").is_some_and(|m| m == "cdrom") || file == "cdrom" || file.contains("cloudinit")
}

/// The first free `unusedN` (PVE::AbstractConfig add_unused_volume), none where an `unusedN`
/// already names the volume ("do not add duplicates").
fn add_unused(conf: &mut Conf, volid: &str) -> Option<String> {
    if conf
        .iter()
        .any(|(k, v)| k.starts_with("unused") && v == volid)
    {
        return None;
    }
    let key = (0..256)
        .map(|i| format!("unused{i}"))
        .find(|k| !conf.contains_key(k))
        .unwrap_or_else(|| "unused255".into());
    conf.insert(key.clone(), volid.to_string());
    Some(key)
}

/// `POST /nodes/{node}/qemu/{vmid}/move_disk` (Qemu.pm, move_vm_disk).
pub fn move_disk(sim: &Arc<Sim>, node: &str, vmid: u32, params: &Params, auth: &Auth) -> ApiResult {
    let disk = params["disk"].clone();
    check_disk_name("disk", &disk)?;
    if let Some(t) = params.get("target-disk") {
        check_disk_name("target-disk", t)?;
    }
    let target_disk = params
        .get("target-disk")
        .cloned()
        .unwrap_or_else(|| disk.clone());
    let target_vmid: Option<u32> = params.get("target-vmid").and_then(|v| v.parse().ok());
    let storeid = params.get("storage").cloned();
    let checker = Checker::new(sim, auth);
    match (target_vmid, storeid) {
        (Some(_), Some(_)) => Err(param_pair(
            "target-vmid",
            "storage",
            "either set 'storage' or 'target-vmid', but not both",
        )),
        (Some(target), None) => {
            // `check_vm_perm` on the target, unless the user is root@pam.
            if checker.user != "root@pam" {
                checker.check_vm_perm(target, None, &["VM.Config.Disk"], false)?;
            }
            if target == vmid {
                return Err(ApiErr::param(
                    "target-vmid",
                    "must be different than source VMID to reassign disk",
                ));
            }
            let check = Reassign {
                vmid,
                target,
                disk: disk.clone(),
                target_disk: target_disk.clone(),
                digest: params.get("digest").cloned(),
                target_digest: params.get("target-digest").cloned(),
            };
            let (.., volid) = check.load_and_check(sim).map_err(ApiErr::die)?;
            let (storage, _) = crate::tools::volume_parts(&volid).unwrap_or_default();
            checker.check(&format!("/storage/{storage}"), &["Datastore.AllocateSpace"])?;
            let s2 = sim.clone();
            let id = format!("{vmid}-{disk}>{target}-{target_disk}");
            Ok(json!(tasks::spawn(
                sim,
                node,
                "qmmove",
                &id,
                &auth.id,
                move |ctx| { check.run(&s2, ctx).map(|_| 0) }
            )))
        }
        (None, Some(sid)) => {
            checker.check(&format!("/storage/{sid}"), &["Datastore.AllocateSpace"])?;
            let mv = Move {
                node: node.to_string(),
                vmid,
                disk,
                storage: sid,
                format: params.get("format").cloned(),
                delete: params.get("delete").is_some_and(|v| v == "1"),
                digest: params.get("digest").cloned(),
                bwlimit: params
                    .get("bwlimit")
                    .and_then(|b| b.parse().ok())
                    .filter(|b| *b > 0),
            };
            // "early checks before forking/locking"
            mv.load_and_check(sim).map_err(|e| match e {
                MoveErr::Param(e) => e,
                MoveErr::Die(m) => ApiErr::die(m),
            })?;
            // `fork_worker('qmmove', …)` of `lock_config($vmid, $move_updatefn)`.
            Ok(json!(tasks::fork_locked(
                sim,
                node,
                "qmmove",
                vmid,
                &auth.id,
                move |sim, ctx| mv.run(sim, ctx).map(|_| 0)
            )))
        }
        (None, None) => Err(param_pair(
            "target-vmid",
            "storage",
            "both 'storage' and 'target-vmid' missing, either needs to be set",
        )),
    }
}

enum MoveErr {
    Param(ApiErr),
    Die(String),
}

impl From<String> for MoveErr {
    fn from(s: String) -> Self {
        MoveErr::Die(s)
    }
}

/// A move to another storage (`$load_and_check_move`, `$move_updatefn`).
struct Move {
    node: String,
    vmid: u32,
    disk: String,
    storage: String,
    format: Option<String>,
    delete: bool,
    digest: Option<String>,
    bwlimit: Option<u64>,
}

/// What `$load_and_check_move` hands the worker: the config, the drive's volume and options,
/// and whether the volume is in use elsewhere (a snapshot names it).
struct Checked {
    conf: Conf,
    volid: String,
    drive: Conf,
    snapshotted: bool,
}

impl Move {
    fn load_and_check(&self, sim: &Sim) -> Result<Checked, MoveErr> {
        let conf = config_of(sim, &self.node, self.vmid).map_err(|e| MoveErr::Die(e.msg))?;
        check_lock(&conf)?;
        assert_if_modified(sim, self.vmid, &conf, self.digest.as_ref())?;
        let (file, kv) = drive_of(&conf, &self.disk)?;
        if is_cdrom(&file, &kv) {
            return Err("you can't move a cdrom".to_string().into());
        }
        let old = volumes::parse_volume(&sim.opts.data_dir, &self.node, &file)?;
        let same_format = self.format.as_ref().is_none_or(|f| *f == old.format);
        if old.storage == self.storage && same_format {
            return Err("you can't move to the same storage with same format"
                .to_string()
                .into());
        }
        // storage_check_enabled, then the content check as a parameter error.
        let def = volumes::storage(&self.storage)
            .ok_or(format!("storage '{}' does not exist", self.storage))?;
        if !def.content.contains(&"images") {
            return Err(MoveErr::Param(ApiErr::param(
                "storage",
                format!("storage '{}' does not support vm images", self.storage),
            )));
        }
        // "this only checks snapshots because $disk is passed!"
        let snapshots = sim
            .lock()
            .vms
            .get(&self.vmid)
            .map(|v| v.snapshots.clone())
            .unwrap_or_default();
        let snapshotted = is_volume_in_use(&conf, &snapshots, Some(&self.disk), &file);
        if snapshotted && self.delete {
            return Err("you can't move a disk with snapshots and delete the source"
                .to_string()
                .into());
        }
        Ok(Checked {
            conf,
            volid: file,
            drive: kv,
            snapshotted,
        })
    }

    /// `$move_updatefn` under the VM's file lock: clone_disk (an offline `qemu-img convert`,
    /// or a running VM's drive mirror), the config with the new drive and the old volume as
    /// `unusedN` unless `delete`, a template's new volume made a base, then with `delete` the
    /// source freed. Its `warn`s are log lines only: a plain `warn` is not
    /// `$rpcenv->warn`, so the task still ends `OK`.
    fn run(&self, sim: &Sim, ctx: &tasks::TaskCtx) -> Result<(), String> {
        let Checked {
            mut conf,
            volid: old_volid,
            drive: mut kv,
            snapshotted,
        } = self.load_and_check(sim).map_err(|e| match e {
            MoveErr::Param(e) => e
                .errors
                .and_then(|e| e.into_values().next())
                .unwrap_or(e.msg),
            MoveErr::Die(m) => m,
        })?;
        let (oldstore, _) = crate::tools::volume_parts(&old_volid).unwrap_or(("", ""));
        ctx.log(format!(
            "copying volume '{old_volid}' from current storage '{oldstore}' to target storage '{}'",
            self.storage
        ));
        let running = sim.lock().vms.get(&self.vmid).is_some_and(|v| v.running);
        if snapshotted {
            ctx.log("moving disk with snapshots, snapshots will not be moved!");
        }
        // clone_disk: a full clone, by drive mirror for a running VM's attached drive.
        let unused = self.disk.starts_with("unused");
        let use_drive_mirror = running && !unused;
        if use_drive_mirror && self.disk == "tpmstate0" {
            return Err(
                "storage migration failed: cannot move TPM state while VM is running".into(),
            );
        }
        let data = &sim.opts.data_dir;
        let src = volumes::parse_volume(data, &self.node, &old_volid)?;
        let def = volumes::storage(&self.storage).ok_or("storage vanished")?;
        ctx.log(format!(
            "create full clone of drive {} ({old_volid})",
            self.disk
        ));
        // resolve_dst_disk_format: the format asked for (else the source's) where the
        // storage has it, else the storage's default, with a warning for one asked for.
        let fmt = def
            .resolve_format_hint(Some(self.format.as_deref().unwrap_or(&src.format)))
            .to_string();
        if let Some(asked) = self.format.as_ref().filter(|f| **f != fmt) {
            ctx.log(format!(
                "format '{asked}' is not supported by the target storage '{}' - using '{fmt}' instead",
                self.storage
            ));
        }
        let name = volumes::alloc_name(data, &self.node, &self.storage, self.vmid, &fmt, &[])?;
        let new_volid = format!("{}:{name}", self.storage);
        let dst = volumes::parse_volume(data, &self.node, &new_volid)?;
        ctx.log(format!("allocated target volume '{new_volid}'"));
        let copied = if use_drive_mirror {
            let job = disk_mirror::job_id(conf.get("machine").map(String::as_str), &self.disk);
            disk_mirror::mirror(ctx, &src, &dst, &job, &self.disk, self.bwlimit)
        } else if self.disk == "efidisk0" {
            disk_mirror::copy_efivars(&src, &dst, disk_mirror::efivars_size(&kv))
        } else {
            volumes::import(
                ctx,
                &src,
                &dst.path,
                &fmt,
                sim.opts.import_rate,
                &self.storage,
            )
        };
        let size = match copied {
            Ok(size) => size,
            Err(e) => {
                // `vdisk_free` of the new volumes, then "storage migration failed: …". A stop
                // meets `$move_updatefn`'s own signal handler ("interrupted by signal"), in
                // qemu-img's run_command (which names the command) or in the block-job monitor.
                if !ctx.killed() {
                    let _ = std::fs::remove_file(&dst.path);
                }
                let e = match ctx.cancelled() {
                    true if use_drive_mirror => {
                        "block job (mirror) error: interrupted by signal".to_string()
                    }
                    true => format!(
                        "copy failed: command '/usr/bin/qemu-img convert -p -n -f {} -O {fmt} {} {}' failed: interrupted by signal",
                        src.format,
                        src.path.display(),
                        dst.path.display()
                    ),
                    false => e,
                };
                return Err(format!("storage migration failed: {e}"));
            }
        };
        // clone_disk: `delete $disk->{format}; $disk->{file} = $newvolid`, and the new
        // volume's size (not for an `unusedN`, whose value is the bare volume).
        kv.remove("format");
        kv.insert("file".into(), new_volid.clone());
        if !unused {
            kv.insert("size".into(), volumes::format_size(size));
        }
        conf.insert(
            self.disk.clone(),
            schema::print_property_string("file", &kv),
        );
        if !self.delete
            && let Some(key) = add_unused(&mut conf, &old_volid)
        {
            ctx.log(format!(
                "adding source volume '{old_volid}' as '{key}' to config"
            ));
        }
        // "convert moved disk to base if part of template" (template_create of the disk).
        if conf.get("template").is_some_and(|t| t == "1") {
            let base = crate::qemu::templates::base_name(&name)
                .map(|b| format!("{}:{b}", self.storage))
                .ok_or(format!("unable to create base volume of '{new_volid}'"))?;
            let to = volumes::parse_volume(data, &self.node, &base)?;
            std::fs::rename(&dst.path, &to.path)
                .map_err(|e| format!("rename volume '{new_volid}' failed: {e}"))?;
            let value = conf[&self.disk].replacen(&new_volid, &base, 1);
            conf.insert(self.disk.clone(), value);
        }
        if let Some(vm) = sim.lock().vms.get_mut(&self.vmid) {
            vm.config = conf;
        }
        if self.delete {
            ctx.log(format!(
                "removing source volume '{old_volid}' after successful copy"
            ));
            // vdisk_free's refusal is a `warn`: the source stays.
            match crate::qemu::templates::base_in_use(sim, &self.node, &old_volid) {
                Some(refusal) => {
                    ctx.log(refusal);
                }
                None => {
                    let _ = std::fs::remove_file(&src.path);
                }
            }
        }
        Ok(())
    }
}

/// A reassign to another VM on the same node (`$load_and_check_reassign_configs`,
/// `$disk_reassignfn`): the volume is renamed to the target's name and the key moves.
struct Reassign {
    vmid: u32,
    target: u32,
    disk: String,
    target_disk: String,
    digest: Option<String>,
    target_digest: Option<String>,
}

impl Reassign {
    fn load_and_check(&self, sim: &Sim) -> Result<(String, Conf, Conf, String), String> {
        let (src_node, dst_node, running) = {
            let st = sim.lock();
            let src = st
                .vms
                .get(&self.vmid)
                .ok_or(format!("could not find VM {}", self.vmid))?;
            let dst = st
                .vms
                .get(&self.target)
                .ok_or(format!("could not find target VM {}", self.target))?;
            (src.node.clone(), dst.node.clone(), src.running)
        };
        if src_node != dst_node {
            return Err(format!(
                "Both VMs need to be on the same node ({src_node} != {dst_node})"
            ));
        }
        let source = config_of(sim, &src_node, self.vmid).map_err(|e| e.msg)?;
        check_lock(&source)?;
        let target = config_of(sim, &dst_node, self.target).map_err(|e| e.msg)?;
        check_lock(&target)?;
        let is_template = |c: &Conf| c.get("template").is_some_and(|t| t == "1");
        if is_template(&source) || is_template(&target) {
            return Err("Can't move disks from or to template VMs".into());
        }
        assert_if_modified(sim, self.vmid, &source, self.digest.as_ref())
            .map_err(|e| format!("VM {}: {e}", self.vmid))?;
        assert_if_modified(sim, self.target, &target, self.target_digest.as_ref())
            .map_err(|e| format!("VM {}: {e}", self.target))?;
        if !source.contains_key(&self.disk) {
            return Err(format!(
                "Disk '{}' for VM '{}' does not exist",
                self.disk, self.vmid
            ));
        }
        if target.contains_key(&self.target_disk) {
            return Err(format!(
                "Target disk key '{}' is already in use for VM '{}'",
                self.target_disk, self.target
            ));
        }
        let (file, kv) = drive_of(&source, &self.disk)?;
        if is_cdrom(&file, &kv) {
            return Err("CD drive contents can't be moved to another VM".into());
        }
        if !file.contains(':') {
            return Err(format!("Volume '{file}' not managed by PVE"));
        }
        let snapshots = sim
            .lock()
            .vms
            .get(&self.vmid)
            .map(|v| v.snapshots.clone())
            .unwrap_or_default();
        if is_volume_in_use(&source, &snapshots, Some(&self.disk), &file) {
            return Err("Can't move disk used by a snapshot to another VM".into());
        }
        if running && !self.disk.starts_with("unused") {
            return Err(
                "Cannot move disk to another VM while the source VM is running - detach first"
                    .into(),
            );
        }
        Ok((src_node, source, target, file))
    }

    fn run(&self, sim: &Sim, ctx: &tasks::TaskCtx) -> Result<(), String> {
        // lock_config on the source, then on the target.
        sim.lock_config(self.vmid, &ctx.upid, LOCK_CONFIG_TIMEOUT, || {
            sim.lock_config(self.target, &ctx.upid, LOCK_CONFIG_TIMEOUT, || {
                self.reassign(sim, ctx)
            })
        })
    }

    fn reassign(&self, sim: &Sim, ctx: &tasks::TaskCtx) -> Result<(), String> {
        let (node, mut source, mut target, volid) = self.load_and_check(sim)?;
        ctx.log(format!(
            "reassign disk '{}' from VM '{}' as '{}' to VM '{}'",
            self.disk, self.vmid, self.target_disk, self.target
        ));
        let data = &sim.opts.data_dir;
        let vol = volumes::parse_volume(data, &node, &volid)?;
        // Storage.pm rename_volume: the next free name of the target VM on the same storage,
        // keeping a linked clone's base.
        let own = volumes::alloc_name(data, &node, &vol.storage, self.target, &vol.format, &[])?;
        let new_name = match vol.name.rsplit_once('/') {
            Some((prefix, _)) if vol.name.contains("base-") => {
                // `base-N-disk-K/vm-M-…` (LVM) or `N/base-….qcow2/M/vm-M-….qcow2` (dir).
                let base = prefix.rsplit_once('/').map_or(prefix, |(b, _)| b);
                format!("{base}/{own}")
            }
            _ => own,
        };
        let new_volid = format!("{}:{new_name}", vol.storage);
        let dst = volumes::parse_volume(data, &node, &new_volid)?;
        if let Some(p) = dst.path.parent() {
            std::fs::create_dir_all(p).map_err(|e| e.to_string())?;
        }
        std::fs::rename(&vol.path, &dst.path)
            .map_err(|e| format!("rename volume '{volid}' failed: {e}"))?;
        let old_value = source.remove(&self.disk).unwrap_or_default();
        // device_bootorder: the disk leaves the boot order.
        if let Some(boot) = source.get("boot").cloned()
            && let Some(order) = boot.strip_prefix("order=")
        {
            let devs: Vec<&str> = order.split(';').collect();
            if devs.contains(&self.disk.as_str()) {
                ctx.log(format!(
                    "removing disk '{}' from boot order config",
                    self.disk
                ));
                let kept: Vec<&str> = devs.into_iter().filter(|d| *d != self.disk).collect();
                source.insert("boot".into(), format!("order={}", kept.join(";")));
            }
        }
        ctx.log(format!(
            "removing disk '{}' from VM '{}' config",
            self.disk, self.vmid
        ));
        let value = if self.target_disk.starts_with("unused") {
            new_volid.clone()
        } else {
            let mut kv = crate::schema::parse_drive(&old_value).unwrap_or_default();
            kv.insert("file".into(), new_volid.clone());
            schema::print_property_string("file", &kv)
        };
        target.insert(self.target_disk.clone(), value);
        let mut st = sim.lock();
        if let Some(vm) = st.vms.get_mut(&self.vmid) {
            vm.config = source;
        }
        if let Some(vm) = st.vms.get_mut(&self.target) {
            vm.config = target;
        }
        Ok(())
    }
}

/// `PUT /nodes/{node}/qemu/{vmid}/unlink` (Qemu.pm, unlink): update_vm (the synchronous
/// config update) with `delete` set to `idlist`, and `force`. As update_vm_api's delete loop
/// does, an `unusedN` is freed at once (`try_deallocate_drive`: the VM's own volume, unless a
/// snapshot still names it; another VM's is only dropped), and a drive is detached to
/// `unusedN`, or with `force` its volume freed (`add_to_pending_delete` with `$force`,
/// applied by vmconfig_delete_or_detach_drive; pending as `!key` where a running VM cannot
/// unplug it).
pub fn unlink(
    sim: &Arc<Sim>,
    node: &str,
    vmid: u32,
    params: &Params,
    undef: &Undefined,
    auth: &Auth,
) -> ApiResult {
    let mut update = params.clone();
    if let Some(ids) = update.remove("idlist") {
        update.insert("delete".into(), ids);
    }
    crate::qemu::config::update(sim, node, vmid, &update, undef, auth, false)
}
