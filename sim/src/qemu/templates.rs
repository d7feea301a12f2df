//! Templates and clones, after qemu-server's API2/Qemu.pm (`template`, `clone_vm`) and
//! QemuServer.pm (`template_create`, `clone_disk`):
//!
//! * `POST …/template` forks `qmtemplate`: refused for a running VM or a template, checked
//!   again under the file lock; every disk but CD-ROMs (and the cloud-init drive, a CD-ROM)
//!   becomes a base volume (`vm-N-disk-K` → `base-N-disk-K`, pve-storage vdisk_create_base)
//!   and the config gets `template: 1`.
//! * `POST …/clone` forks `qmclone` (its id is the source's): the source is locked shared when
//!   it is not running (parallel clones of one template proceed), exclusively with a 1 s
//!   timeout when it runs; the API refuses a new id whose config exists before forking
//!   (`unable to create VM N: config file already exists`), and the worker checks again under
//!   the new id's lock; its first line is `creating a clone of VM S with ID N`; the new VM's
//!   config exists from then on with `lock: clone`; a linked clone (the default from a
//!   template) makes thin snapshots of the base volumes (`base-N-disk-K/vm-M-disk-J`),
//!   refused for a volume that is not a base; a full clone copies every disk with `qemu-img
//!   convert`, logging PVE's progress lines; the cloud-init drive and the TPM state are
//!   always copied; every NIC gets a new MAC address. A failed clone frees what it made and
//!   removes the new config.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::http::handler::{ApiErr, ApiResult, Auth, Params};
use crate::qemu::config_file::{check_lock, config_of, free_volumes, random_mac};
use crate::qemu::pending::{CloudInitState, Pending};
use crate::schema;
use crate::state::{Sim, Vm};
use crate::storage::volumes::{self, Volume};
use crate::tasks::{self, TaskCtx};

fn is_template(conf: &BTreeMap<String, String>) -> bool {
    conf.get("template").is_some_and(|t| t == "1")
}

fn running(sim: &Sim, vmid: u32) -> bool {
    sim.lock().vms.get(&vmid).is_some_and(|v| v.running)
}

/// The disks a template conversion or a clone acts on: (key, volid, the rest of the value),
/// CD-ROMs (and `none`) left out; the cloud-init drive flagged.
fn disks(conf: &BTreeMap<String, String>) -> Vec<(String, String, bool)> {
    conf.iter()
        .filter(|(k, _)| schema::is_drive_key(k))
        .filter_map(|(k, v)| {
            let file = v.split(',').next().unwrap_or("");
            let cloudinit = file.contains("cloudinit");
            let cdrom = v.split(',').any(|p| p == "media=cdrom") && !cloudinit;
            (!cdrom && file != "none" && file.contains(':'))
                .then(|| (k.clone(), file.to_string(), cloudinit))
        })
        .collect()
}

/// `base-N-disk-K` for `vm-N-disk-K` (pve-storage: the volume renamed in place).
pub(crate) fn base_name(name: &str) -> Option<String> {
    match name.split_once('/') {
        // A directory volume: `N/vm-N-disk-K.qcow2`.
        Some((dir, file)) if !dir.starts_with("base-") => {
            file.strip_prefix("vm-").map(|r| format!("{dir}/base-{r}"))
        }
        Some(_) => None,
        None => name.strip_prefix("vm-").map(|r| format!("base-{r}")),
    }
}

/// `POST /nodes/{node}/qemu/{vmid}/template`.
pub fn template(sim: &Arc<Sim>, node: &str, vmid: u32, auth: &Auth) -> ApiResult {
    let load_and_check = move |sim: &Sim, node: &str| -> Result<BTreeMap<String, String>, String> {
        let conf = config_of(sim, node, vmid).map_err(|e| e.msg)?;
        check_lock(&conf)?;
        if is_template(&conf) {
            return Err("you can't convert a template to a template".into());
        }
        if running(sim, vmid) {
            return Err("you can't convert a VM to template if VM is running".into());
        }
        Ok(conf)
    };
    load_and_check(sim, node).map_err(ApiErr::die)?;
    let n2 = node.to_string();
    let upid = tasks::fork_locked(sim, node, "qmtemplate", vmid, &auth.id, move |sim, ctx| {
        ctx.sleep(sim.task_duration("qmtemplate"))?;
        let conf = load_and_check(sim, &n2)?;
        let data = &sim.opts.data_dir;
        let mut renamed = Vec::new();
        for (key, volid, cloudinit) in disks(&conf) {
            if cloudinit {
                continue;
            }
            let (sid, name) = crate::tools::volume_parts(&volid).unwrap_or_default();
            let Some(base) = base_name(name) else {
                continue;
            };
            let from = volumes::parse_volume(data, &n2, &volid)?;
            let to = volumes::parse_volume(data, &n2, &format!("{sid}:{base}"))?;
            std::fs::rename(&from.path, &to.path)
                .map_err(|e| format!("rename '{volid}' failed: {e}"))?;
            ctx.log(format!(
                "  Renamed \"{name}\" to \"{base}\" in volume group \"pve\""
            ));
            renamed.push((key, volid.clone(), format!("{sid}:{base}")));
        }
        let mut st = sim.lock();
        let vm = st.vms.get_mut(&vmid).ok_or("VM vanished")?;
        for (key, old, new) in renamed {
            if let Some(v) = vm.config.get(&key).cloned() {
                vm.config.insert(key, v.replacen(&old, &new, 1));
            }
        }
        vm.config.insert("template".into(), "1".into());
        Ok(0)
    });
    Ok(json!(upid))
}

/// `POST /nodes/{node}/qemu/{vmid}/clone`.
pub fn clone(sim: &Arc<Sim>, node: &str, vmid: u32, params: &Params, auth: &Auth) -> ApiResult {
    let newid: u32 = params
        .get("newid")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| ApiErr::param("newid", "property is missing and it is not optional"))?;
    if newid == vmid {
        return Err(ApiErr::param("newid", "newid is the same as vmid"));
    }
    // clone_vm: `$rpcenv->check_pool_exist($pool)` before anything else.
    let pool = params.get("pool").cloned();
    if let Some(p) = &pool {
        crate::access::pools::check_pool_exist(sim, p)?;
    }
    let storage_param = params.get("storage").cloned();
    if let Some(s) = &storage_param {
        let def = volumes::storage(s)
            .ok_or_else(|| ApiErr::die(format!("storage '{s}' does not exist")))?;
        if !def.content.contains(&"images") {
            return Err(ApiErr::param(
                "storage",
                format!("storage '{s}' does not support vm images"),
            ));
        }
    }
    // clone_vm: a target that is this node is no target; another must be a cluster node,
    // and the clone may go there only if all its volumes are on shared storage.
    let target = params
        .get("target")
        .filter(|t| *t != node && *t != "localhost")
        .cloned();
    if let Some(t) = &target
        && !sim.opts.nodes.iter().any(|n| n == t)
    {
        return Err(ApiErr::die(format!("no such cluster node '{t}'")));
    }
    let full_param = params.get("full").map(|f| f == "1");
    let snapname = params.get("snapname").cloned();
    let format = params.get("format").cloned();
    // `$load_and_check`: before forking and again in the worker under the locks.
    let load_and_check = {
        let node = node.to_string();
        let storage_param = storage_param.clone();
        let target = target.clone();
        move |sim: &Sim| -> Result<(BTreeMap<String, String>, bool), String> {
            let conf = config_of(sim, &node, vmid).map_err(|e| e.msg)?;
            check_lock(&conf)?;
            if let Some(s) = &snapname {
                return Err(format!("snapshot '{s}' does not exist"));
            }
            let full = full_param.unwrap_or(!is_template(&conf));
            if storage_param.is_some() && !full {
                return Err("parameter 'storage' not allowed for linked clones".into());
            }
            if format.is_some() && !full {
                return Err("parameter 'format' not allowed for linked clones".into());
            }
            if let Some(t) = &target
                && !shared_vm(&conf, full, storage_param.as_deref())
            {
                return Err(format!(
                    "can't clone VM to node '{t}' (VM uses local storage)"
                ));
            }
            if sim.lock().vms.contains_key(&newid) {
                return Err(format!(
                    "unable to create VM {newid}: config file already exists"
                ));
            }
            Ok((conf, full))
        }
    };
    let (source, _) = load_and_check(sim).map_err(ApiErr::die)?;
    let checker = crate::access::check::Checker::new(sim, auth);
    crate::qemu::permissions::clone_vm(&checker, &source, storage_param.as_deref())?;
    let was_running = running(sim, vmid);
    let name = params.get("name").cloned();
    let description = params.get("description").cloned();
    let (s2, n2) = (sim.clone(), node.to_string());
    let upid = tasks::spawn(
        sim,
        node,
        "qmclone",
        &vmid.to_string(),
        &auth.id,
        move |ctx| {
            let sim = &s2;
            // `$lock_source_vm`: exclusive (1 s) while the source runs, shared otherwise.
            let exclusive = running(sim, vmid);
            if exclusive {
                sim.flock(vmid, &ctx.upid, Duration::from_secs(1))?;
            } else {
                sim.flock_shared(vmid, Duration::from_secs(1))?;
            }
            let unlock_source = || {
                if exclusive {
                    sim.funlock(vmid)
                } else {
                    sim.funlock_shared(vmid)
                }
            };
            // The new VM's config lock (lock_config_full, 1 s), inside the source's.
            let res = sim.lock_config(newid, &ctx.upid, Duration::from_secs(1), || {
                let (conf, full) = load_and_check(sim)?;
                if exclusive != was_running {
                    return Err("unexpected state change".into());
                }
                // `$clonefn`'s first line, once the checks passed under the new id's lock and
                // before the temporary config is written: the one line that names the new id
                // in a task whose UPID carries the source's (clients tell parallel clones of
                // one template apart by it).
                ctx.log(format!("creating a clone of VM {vmid} with ID {newid}"));
                // The new config exists at once, locked (`file_set_contents(…, "lock: clone")`).
                {
                    let mut st = sim.lock();
                    if st.vms.contains_key(&newid) {
                        return Err(format!(
                            "unable to create VM {newid}: config file already exists"
                        ));
                    }
                    st.vms.insert(
                        newid,
                        Vm {
                            node: n2.clone(),
                            config: BTreeMap::from([("lock".to_string(), "clone".to_string())]),
                            pending: Pending::default(),
                            cloudinit: CloudInitState::default(),
                            running: false,
                            started: None,
                            pid: 0,
                            snapshots: Default::default(),
                        },
                    );
                }
                ctx.log(format!(
                    "create {} clone of drive(s)",
                    if full { "full" } else { "linked" }
                ));
                let mut made: Vec<Volume> = Vec::new();
                let copied = clone_disks(
                    sim,
                    ctx,
                    &n2,
                    newid,
                    &conf,
                    full,
                    storage_param.as_deref(),
                    &mut made,
                );
                let drives = match copied {
                    Ok(d) => d,
                    Err(e) => {
                        if !ctx.killed() {
                            free_volumes(&made);
                            sim.lock().vms.remove(&newid);
                        }
                        return Err(format!("clone failed: {e}"));
                    }
                };
                let mut newconf: BTreeMap<String, String> = BTreeMap::new();
                // clone_vm's `$load_and_check`: everything is copied (`meta` too: a clone keeps
                // its source's creation record, only create_vm writes a new one) but the
                // snapshot and run-time keys and unused volumes; `template` is deleted.
                for (k, v) in &conf {
                    let skip = k.starts_with("unused")
                        || [
                            "template",
                            "lock",
                            "parent",
                            "snaptime",
                            "vmstate",
                            "snapstate",
                            "runningcpu",
                            "runningmachine",
                            "running-nets-host-mtu",
                        ]
                        .contains(&k.as_str())
                        || schema::is_drive_key(k) && drives.iter().any(|(dk, _)| dk == k);
                    if skip {
                        continue;
                    }
                    if k.starts_with("net") && k[3..].bytes().all(|b| b.is_ascii_digit()) {
                        // Always a new MAC address.
                        let rest: Vec<&str> = v.split(',').collect();
                        let model = rest[0].split('=').next().unwrap_or("virtio");
                        let mut nv = format!("{model}={}", random_mac(sim));
                        for p in &rest[1..] {
                            nv.push(',');
                            nv.push_str(p);
                        }
                        newconf.insert(k.clone(), nv);
                    } else {
                        newconf.insert(k.clone(), v.clone());
                    }
                }
                newconf.extend(drives);
                newconf.insert(
                    "name".into(),
                    name.clone().unwrap_or_else(|| {
                        format!(
                            "Copy-of-VM-{}",
                            conf.get("name").cloned().unwrap_or(vmid.to_string())
                        )
                    }),
                );
                if let Some(d) = &description {
                    newconf.insert("description".into(), d.clone());
                }
                // `$clonefn`: a new SMBIOS UUID always (the source's other smbios1 fields
                // kept; print_smbios1 prints the keys sorted), a new vmgenid only where the
                // source had one (Perl's truth: a vmgenid of "0" is kept as it is).
                let mut smbios: Vec<String> = conf
                    .get("smbios1")
                    .map(|value| {
                        value
                            .split(',')
                            .filter(|part| !part.is_empty() && !part.starts_with("uuid="))
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                smbios.push(format!("uuid={}", crate::qemu::config_file::uuid(sim)));
                smbios.sort_by(|a, b| a.split('=').next().cmp(&b.split('=').next()));
                newconf.insert("smbios1".into(), smbios.join(","));
                if conf
                    .get("vmgenid")
                    .is_some_and(|value| !value.is_empty() && value != "0")
                {
                    newconf.insert("vmgenid".into(), crate::qemu::config_file::uuid(sim));
                }
                let mut st = sim.lock();
                let vm = st.vms.get_mut(&newid).ok_or("VM vanished")?;
                vm.config = newconf;
                // The config moves to the target node (`rename($conffile, $newconffile)`).
                if let Some(t) = &target {
                    vm.node = t.clone();
                }
                drop(st);
                // AccessControl.pm add_vm_to_pool, at the end of the clone.
                if let Some(p) = &pool {
                    crate::access::pools::add_vm_to_pool(sim, newid, p);
                }
                Ok(0)
            });
            unlock_source();
            res
        },
    );
    Ok(json!(upid))
}

/// Qemu.pm `$check_storage_access_clone`: whether every volume of the clone is on shared
/// storage (the target storage of a full clone, else the source volume's), CD-ROM images
/// included.
fn shared_vm(conf: &BTreeMap<String, String>, full: bool, storage: Option<&str>) -> bool {
    conf.iter()
        .filter(|(k, _)| schema::is_drive_key(k))
        .all(|(_, v)| {
            let file = v.split(',').next().unwrap_or("");
            let file = file.strip_prefix("file=").unwrap_or(file);
            let Some((sid, _)) = crate::tools::volume_parts(file) else {
                return true;
            };
            let cdrom = v.split(',').any(|p| p == "media=cdrom");
            let sid = match storage {
                Some(s) if full && !cdrom => s,
                _ => sid,
            };
            volumes::storage(sid).is_some_and(|s| s.shared)
        })
}

/// `clone_disk` for each disk: a thin snapshot of a base volume (linked), or a copy with
/// progress lines (full, and always for the cloud-init drive and the TPM state). Returns the
/// new drive values.
#[allow(clippy::too_many_arguments)]
fn clone_disks(
    sim: &Sim,
    ctx: &TaskCtx,
    node: &str,
    newid: u32,
    conf: &BTreeMap<String, String>,
    full: bool,
    target_storage: Option<&str>,
    made: &mut Vec<Volume>,
) -> Result<Vec<(String, String)>, String> {
    let data = &sim.opts.data_dir;
    let mut out = Vec::new();
    for (key, volid, cloudinit) in disks(conf) {
        let value = conf.get(&key).cloned().unwrap_or_default();
        let rest: Vec<&str> = value.split(',').skip(1).collect();
        let (src_sid, src_name) = crate::tools::volume_parts(&volid).unwrap_or_default();
        let src = volumes::parse_volume(data, node, &volid)?;
        let sid = target_storage
            .filter(|_| full)
            .unwrap_or(src_sid)
            .to_string();
        let dir = volumes::storage(&sid).is_some_and(|s| s.file_based());
        if cloudinit {
            let name = if dir {
                format!("{newid}/vm-{newid}-cloudinit.qcow2")
            } else {
                format!("vm-{newid}-cloudinit")
            };
            let dst = volumes::parse_volume(data, node, &format!("{sid}:{name}"))?;
            volumes::create_image(&dst.path, if dir { "qcow2" } else { "raw" }, 4 << 20)?;
            made.push(dst);
            let mut v = format!("{sid}:{name}");
            for p in &rest {
                v.push(',');
                v.push_str(p);
            }
            out.push((key, v));
            continue;
        }
        // The base volume's name: `base-N-disk-K` (LVM-thin) or `N/base-N-disk-K.qcow2` (a
        // directory), whose file part must be a base for a linked clone.
        let base_file = src_name.rsplit('/').next().unwrap_or("");
        let is_base = base_file.starts_with("base-") && !src_name.contains("/vm-");
        let linked = !full && key != "tpmstate0";
        // A new volume on a directory storage is a qcow2 (a linked one backed by its base,
        // pve-storage Plugin.pm clone_image); on LVM-thin, raw.
        let fmt = if dir { "qcow2" } else { "raw" }.to_string();
        let taken: Vec<String> = made
            .iter()
            .map(|v| format!("{}:{}", v.storage, v.name))
            .collect();
        let own = volumes::alloc_name(data, node, &sid, newid, &fmt, &taken)?;
        let (new_volid, size) = if linked {
            // pve-storage vdisk_clone: only a base volume has the `clone` feature.
            if !is_base {
                return Err(format!(
                    "Linked clone feature is not supported for '{volid}' ({key})"
                ));
            }
            let name = format!("{src_name}/{own}");
            let dst = volumes::parse_volume(data, node, &format!("{sid}:{name}"))?;
            volumes::thin_snapshot(&src.path, &src.format, &dst.path)?;
            let size = volumes::virtual_size(&src.path, &src.format)?;
            made.push(Volume {
                storage: sid.clone(),
                name: name.clone(),
                ..dst
            });
            (format!("{sid}:{name}"), size)
        } else {
            let dst = volumes::parse_volume(data, node, &format!("{sid}:{own}"))?;
            ctx.log(format!("create full clone of drive {key} ({volid})"));
            made.push(Volume {
                storage: sid.clone(),
                name: own.clone(),
                vtype: "images",
                vmid: Some(newid),
                path: dst.path.clone(),
                format: fmt.clone(),
            });
            let size = volumes::import(ctx, &src, &dst.path, &fmt, sim.opts.import_rate, &sid)?;
            (format!("{sid}:{own}"), size)
        };
        let mut v = new_volid;
        for p in rest.iter().filter(|p| !p.starts_with("size=")) {
            v.push(',');
            v.push_str(p);
        }
        if dir && fmt != "raw" && !v.contains("format=") {
            v.push_str(&format!(",format={fmt}"));
        }
        v.push_str(&format!(",size={}", volumes::format_size(size)));
        out.push((key, v));
    }
    Ok(out)
}

/// Whether a base volume still backs a linked clone (pve-storage, vdisk_free: "base volume
/// '…' is still in use by linked cloned").
pub fn base_in_use(sim: &Sim, node: &str, volid: &str) -> Option<String> {
    let (sid, name) = crate::tools::volume_parts(volid)?;
    let file = name.rsplit('/').next().unwrap_or("");
    if !file.starts_with("base-") || name.contains("/vm-") {
        return None;
    }
    let base = volumes::parse_volume(&sim.opts.data_dir, node, volid).ok()?;
    let st = sim.lock();
    for vm in st.vms.values().filter(|v| v.node == node) {
        for v in vm.config.values() {
            let file = v.split(',').next().unwrap_or("");
            if let Some(rest) = file.strip_prefix(&format!("{sid}:{name}/"))
                && let Ok(vol) =
                    volumes::parse_volume(&sim.opts.data_dir, node, &format!("{sid}:{name}/{rest}"))
                && volumes::backs(&base.path, &vol.path)
            {
                return Some(format!(
                    "base volume '{volid}' is still in use by linked cloned"
                ));
            }
        }
    }
    None
}
