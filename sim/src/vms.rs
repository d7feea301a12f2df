//! The VM endpoints, after qemu-server's `API2/Qemu.pm`: `lock: create` for the whole
//! `qmcreate` task, config locks and file locks, imports inside the create task, cleanup on
//! failure. The task endpoints are in `task_api.rs`, storage's in `storage_api.rs`, the
//! cluster's in `cluster.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::handler::{ApiErr, ApiResult, Auth, Params, wait_until};
use crate::pending::{CloudInitState, Pending};
use crate::schema::{self, Ty};
use crate::state::{Sim, Vm};
use crate::storage::{self, Volume};
use crate::tasks::{self, TaskCtx};

pub(crate) fn no_conf(node: &str, vmid: u32) -> ApiErr {
    ApiErr::die(format!(
        "Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
    ))
}

/// The config of a VM on this node with its pending section, or PVE's "does not exist".
fn file_of(
    sim: &Sim,
    node: &str,
    vmid: u32,
) -> Result<(BTreeMap<String, String>, Pending), ApiErr> {
    let st = sim.lock();
    match st.vms.get(&vmid) {
        Some(vm) if vm.node == node => Ok((vm.config.clone(), vm.pending.clone())),
        _ => Err(no_conf(node, vmid)),
    }
}

/// The config of a VM on this node, or PVE's "does not exist".
pub(crate) fn config_of(
    sim: &Sim,
    node: &str,
    vmid: u32,
) -> Result<BTreeMap<String, String>, ApiErr> {
    let st = sim.lock();
    match st.vms.get(&vmid) {
        Some(vm) if vm.node == node => Ok(vm.config.clone()),
        _ => Err(no_conf(node, vmid)),
    }
}

pub(crate) fn check_lock(conf: &BTreeMap<String, String>) -> Result<(), String> {
    match conf.get("lock") {
        Some(l) => Err(format!("VM is locked ({l})")),
        None => Ok(()),
    }
}

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

/// SHA-1 of the config file as PVE would write it (its `[PENDING]` section included), hex.
pub fn digest(conf: &BTreeMap<String, String>, pending: &Pending) -> String {
    let mut text: String = conf.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
    text.push_str(&pending.section());
    let d = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, text.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// What to do for one drive key.
enum DiskOp {
    Import {
        key: String,
        storage: String,
        src: Volume,
        opts: BTreeMap<String, String>,
    },
    Alloc {
        key: String,
        storage: String,
        bytes: u64,
        opts: BTreeMap<String, String>,
    },
    CloudInit {
        key: String,
        storage: String,
        opts: BTreeMap<String, String>,
    },
    Keep {
        key: String,
        value: String,
    },
}

/// The synchronous checks on drive values (qemu-server's `$check_storage_access`).
fn plan_drives(sim: &Sim, node: &str, params: &Params, auth: &Auth) -> Result<Vec<DiskOp>, ApiErr> {
    let mut ops = Vec::new();
    for (key, value) in params.iter().filter(|(k, _)| schema::is_drive_key(k)) {
        let mut opts = schema::parse_drive(value)
            .map_err(|e| ApiErr::param(key, format!("invalid format - {e}")))?;
        let file = opts.remove("file").unwrap_or_default();
        let import = opts.remove("import-from");
        let alloc = file.split_once(':').and_then(|(s, n)| {
            let ok = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit() || b == b'.');
            ok.then(|| (s.to_string(), n.parse::<f64>().unwrap_or(0.0)))
        });
        if let Some(src) = import {
            let Some((sid, size)) = alloc.filter(|(_, size)| *size == 0.0) else {
                return Err(ApiErr::param(
                    key,
                    "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>",
                ));
            };
            let _ = size;
            let def = storage::storage(&sid)
                .ok_or_else(|| ApiErr::die(format!("storage '{sid}' does not exist")))?;
            if !def.content.contains(&"images") {
                return Err(ApiErr::param(
                    "storage",
                    format!("storage '{sid}' does not support vm images"),
                ));
            }
            let vol = if src.starts_with('/') {
                if !auth.root_ticket {
                    return Err(ApiErr::die(
                        "Only root can pass arbitrary filesystem paths. at /usr/share/perl5/PVE/Storage.pm line 651.",
                    ));
                }
                let p = std::path::PathBuf::from(&src);
                // The format is detected inside the worker (run_drives).
                let format = String::new();
                Volume {
                    storage: String::new(),
                    name: src.clone(),
                    vtype: "import",
                    vmid: None,
                    path: p,
                    format,
                }
            } else {
                let vol = storage::parse_volume(&sim.opts.data_dir, node, &src)
                    .map_err(|e| ApiErr::param(key, e))?;
                if vol.vtype != "images" && vol.vtype != "import" {
                    return Err(ApiErr::param(
                        key,
                        format!(
                            "{src} has wrong type '{}' - needs to be 'images' or 'import'",
                            vol.vtype
                        ),
                    ));
                }
                vol
            };
            ops.push(DiskOp::Import {
                key: key.clone(),
                storage: sid,
                src: vol,
                opts,
            });
        } else if let Some((sid, gib)) = alloc {
            storage::storage(&sid)
                .ok_or_else(|| ApiErr::die(format!("storage '{sid}' does not exist")))?;
            let bytes = (gib * 1024.0 * 1024.0 * 1024.0) as u64;
            ops.push(DiskOp::Alloc {
                key: key.clone(),
                storage: sid,
                bytes,
                opts,
            });
        } else if let Some(sid) = file.strip_suffix(":cloudinit") {
            storage::storage(sid)
                .ok_or_else(|| ApiErr::die(format!("storage '{sid}' does not exist")))?;
            ops.push(DiskOp::CloudInit {
                key: key.clone(),
                storage: sid.to_string(),
                opts,
            });
        } else {
            if file != "none" && file != "cdrom" && !file.starts_with('/') {
                let vol = storage::parse_volume(&sim.opts.data_dir, node, &file)
                    .map_err(|e| ApiErr::param(key, e))?;
                if !vol.path.exists() {
                    return Err(ApiErr::die(format!("volume '{file}' does not exist")));
                }
            }
            opts.insert("file".into(), file);
            ops.push(DiskOp::Keep {
                key: key.clone(),
                value: schema::print_property_string("file", &opts),
            });
        }
    }
    Ok(ops)
}

/// The drive value of a new volume (`local-lvm:vm-100-disk-0,size=2G`), logged as PVE does.
fn disk_value(
    ctx: &TaskCtx,
    key: String,
    sid: &str,
    name: &str,
    fmt: &str,
    size: u64,
    mut opts: BTreeMap<String, String>,
) -> (String, String) {
    opts.insert("file".into(), format!("{sid}:{name}"));
    opts.insert("size".into(), storage::format_size(size));
    if fmt != "raw" {
        opts.insert("format".into(), fmt.to_string());
    }
    ctx.log(format!(
        "{key}: successfully created disk '{sid}:{name},size={}'",
        storage::format_size(size)
    ));
    (key, schema::print_property_string("file", &opts))
}

/// Carries out drive operations inside a worker; returns the drive strings and the volumes made.
fn run_drives(
    sim: &Sim,
    ctx: &TaskCtx,
    node: &str,
    vmid: u32,
    ops: Vec<DiskOp>,
    made: &mut Vec<Volume>,
) -> Result<Vec<(String, String)>, String> {
    let data = &sim.opts.data_dir;
    let mut out = Vec::new();
    let taken = |made: &Vec<Volume>| {
        made.iter()
            .map(|v| format!("{}:{}", v.storage, v.name))
            .collect::<Vec<_>>()
    };
    for op in ops {
        match op {
            DiskOp::Import {
                key,
                storage: sid,
                src,
                mut opts,
            } => {
                let fmt = if storage::storage(&sid).is_some_and(|s| s.kind == "dir") {
                    opts.get("format").cloned().unwrap_or_else(|| "raw".into())
                } else {
                    "raw".into()
                };
                opts.remove("format");
                let name = storage::alloc_name(data, node, &sid, vmid, &fmt, &taken(made))?;
                let dst = storage::parse_volume(data, node, &format!("{sid}:{name}"))?;
                let srcname = if src.storage.is_empty() {
                    src.name.clone()
                } else {
                    format!("{}:{}", src.storage, src.name)
                };
                ctx.log(format!("create full clone of drive ({srcname})"));
                if !src.path.exists() {
                    return Err(format!(
                        "cannot import from '{srcname}' - volume does not exist"
                    ));
                }
                // qemu-server API2/Qemu.pm, create_disks: an absolute path is checked as an
                // untrusted image with its format auto-detected (a qcow2 named `.img` is a
                // qcow2), not guessed from its name.
                let mut src = src;
                if src.storage.is_empty() {
                    src.format = storage::detect_format(&src.path)
                        .map_err(|e| format!("could not get file size of {srcname} - {e}"))?;
                }
                made.push(Volume {
                    storage: sid.clone(),
                    name: name.clone(),
                    vtype: "images",
                    vmid: Some(vmid),
                    path: dst.path.clone(),
                    format: fmt.clone(),
                });
                let size = storage::import(ctx, &src, &dst.path, &fmt, sim.opts.import_rate, &sid)
                    .map_err(|e| format!("cannot import from '{srcname}' - {e}"))?;
                out.push(disk_value(ctx, key, &sid, &name, &fmt, size, opts));
            }
            DiskOp::Alloc {
                key,
                storage: sid,
                bytes,
                mut opts,
            } => {
                let fmt = opts
                    .remove("format")
                    .filter(|_| storage::storage(&sid).is_some_and(|s| s.kind == "dir"))
                    .unwrap_or("raw".into());
                let name = storage::alloc_name(data, node, &sid, vmid, &fmt, &taken(made))?;
                let dst = storage::parse_volume(data, node, &format!("{sid}:{name}"))?;
                // An EFI vars disk gets the size of its OVMF vars template whatever size was
                // asked (QemuServer.pm, create_efidisk / get_efivars_size: 540672 bytes for
                // `efitype=4m`, 131072 for the default 2m); a TPM state 4 MiB (Drive.pm,
                // TPMSTATE_DISK_SIZE).
                let bytes = match key.as_str() {
                    "efidisk0" if opts.get("efitype").is_some_and(|t| t == "4m") => 540672,
                    "efidisk0" => 131072,
                    "tpmstate0" => 4 << 20,
                    _ => bytes,
                };
                let bytes = storage::allocated_size(&sid, bytes);
                storage::create_image(&dst.path, &fmt, bytes)?;
                made.push(Volume {
                    storage: sid.clone(),
                    name: name.clone(),
                    vtype: "images",
                    vmid: Some(vmid),
                    path: dst.path,
                    format: fmt.clone(),
                });
                out.push(disk_value(ctx, key, &sid, &name, &fmt, bytes, opts));
            }
            DiskOp::CloudInit {
                key,
                storage: sid,
                mut opts,
            } => {
                let dir = storage::storage(&sid).is_some_and(|s| s.kind == "dir");
                let name = if dir {
                    format!("{vmid}/vm-{vmid}-cloudinit.qcow2")
                } else {
                    format!("vm-{vmid}-cloudinit")
                };
                let dst = storage::parse_volume(data, node, &format!("{sid}:{name}"))?;
                let fmt = if dir { "qcow2" } else { "raw" };
                storage::create_image(&dst.path, fmt, 4 * 1024 * 1024)?;
                made.push(Volume {
                    storage: sid.clone(),
                    name: name.clone(),
                    vtype: "images",
                    vmid: Some(vmid),
                    path: dst.path,
                    format: fmt.into(),
                });
                opts.insert("file".into(), format!("{sid}:{name}"));
                opts.insert("media".into(), "cdrom".into());
                ctx.log(format!(
                    "{key}: successfully created disk '{sid}:{name},media=cdrom'"
                ));
                out.push((key, schema::print_property_string("file", &opts)));
            }
            DiskOp::Keep { key, value } => out.push((key, value)),
        }
    }
    Ok(out)
}

pub(crate) fn random_mac(sim: &Sim) -> String {
    let r = sim.random();
    format!(
        "BC:24:11:{:02X}:{:02X}:{:02X}",
        (r >> 8) & 0xff,
        (r >> 16) & 0xff,
        (r >> 24) & 0xff
    )
}

/// Normalises a non-drive config value the way PVE writes it to the config file.
fn normalize(sim: &Sim, key: &str, value: &str) -> String {
    match schema::config_key_type(key) {
        Some(Ty::Bool) => {
            (if ["1", "true", "yes", "on"].contains(&value.to_ascii_lowercase().as_str()) {
                "1"
            } else {
                "0"
            })
            .into()
        }
        _ if key.starts_with("net") => {
            let mut kv = schema::parse_net(value).unwrap_or_default();
            if !kv.contains_key("macaddr") {
                kv.insert("macaddr".into(), random_mac(sim));
            }
            schema::print_net(&kv)
        }
        _ if key == "memory" => value.strip_prefix("current=").unwrap_or(value).to_string(),
        _ if key == "cipassword" => {
            // PVE stores a crypt() hash for Linux guests; only its presence matters here.
            let d = ring::digest::digest(&ring::digest::SHA256, value.as_bytes());
            format!(
                "$5$pvesim${}",
                d.as_ref()
                    .iter()
                    .take(16)
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            )
        }
        _ => value.to_string(),
    }
}

fn default_boot(conf: &BTreeMap<String, String>) -> String {
    let mut disks = Vec::new();
    let mut cds = Vec::new();
    for bus in ["ide", "sata", "scsi", "virtio"] {
        let mut keys: Vec<(u32, &String)> = conf
            .keys()
            .filter_map(|k| {
                k.strip_prefix(bus)
                    .and_then(|n| n.parse().ok())
                    .map(|n| (n, k))
            })
            .collect();
        keys.sort();
        for (_, k) in keys {
            let v = &conf[k];
            if v.contains("cloudinit") {
                continue;
            }
            if v.contains("media=cdrom") {
                cds.push(k.clone())
            } else {
                disks.push(k.clone())
            }
        }
    }
    let mut order = disks;
    order.extend(cds);
    if conf.contains_key("net0") {
        order.push("net0".into());
    }
    format!("order={}", order.join(";"))
}

/// Applies changes to the config as `vmconfig_apply_pending` does: a deleted or replaced disk
/// becomes `unusedN` (a CD-ROM or the cloud-init drive does not), and cloud-init changes are
/// recorded against what the drive holds.
fn apply_changes(vm: &mut Vm, sets: Vec<(String, String)>, deletes: Vec<String>) {
    let unused = |c: &BTreeMap<String, String>| {
        (0..256)
            .map(|i| format!("unused{i}"))
            .find(|k| !c.contains_key(k))
    };
    for d in &deletes {
        if let Some(old) = vm.config.remove(d) {
            vm.cloudinit.record(d, Some(&old), None);
            if schema::is_drive_key(d)
                && !old.contains("media=cdrom")
                && !old.contains("cloudinit")
                && let Some(u) = unused(&vm.config)
            {
                vm.config
                    .insert(u, old.split(',').next().unwrap_or("").to_string());
            }
        }
    }
    for (k, v) in sets {
        if schema::is_drive_key(&k) {
            let old_vol = vm
                .config
                .get(&k)
                .map(|o| o.split(',').next().unwrap_or("").to_string());
            let new_vol = v.split(',').next().unwrap_or("").to_string();
            if let Some(old) = old_vol.filter(|o| {
                *o != new_vol && !o.is_empty() && !o.contains("cloudinit") && o != "none"
            }) && let Some(u) = unused(&vm.config)
            {
                vm.config.insert(u, old);
            }
        }
        let old = vm.config.insert(k.clone(), v.clone());
        vm.cloudinit.record(&k, old.as_deref(), Some(&v));
    }
}

/// Before QEMU starts (QemuServer.pm, vm_start_nolock): the pending changes are applied, and
/// the cloud-init drive is generated from the config (Cloudinit.pm,
/// generate_cloudinitconfig), so the guest sees the current cloud-init options.
fn prepare_start(vm: &mut Vm) {
    let (sets, deletes) = vm.pending.take_applicable(&vm.config, false);
    apply_changes(vm, sets, deletes);
    if has_cloudinit_drive(&vm.config) {
        vm.cloudinit.regenerated();
    }
}

fn has_cloudinit_drive(conf: &BTreeMap<String, String>) -> bool {
    conf.iter()
        .any(|(k, v)| schema::is_drive_key(k) && v.contains("cloudinit"))
}

pub(crate) fn free_volumes(vols: &[Volume]) {
    for v in vols {
        let _ = std::fs::remove_file(&v.path);
    }
}

fn uuid(sim: &Sim) -> String {
    let a = sim.random();
    let b = sim.random();
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// `POST /nodes/{node}/qemu`.
pub fn create(sim: &Arc<Sim>, node: &str, params: &Params, auth: &Auth) -> ApiResult {
    let vmid: u32 = params["vmid"]
        .parse()
        .map_err(|_| ApiErr::param("vmid", "invalid"))?;
    if params.contains_key("archive") {
        return Err(ApiErr::die(
            "pve-sim: restoring from an archive is not simulated",
        ));
    }
    let ops = plan_drives(sim, node, params, auth)?;
    // create_and_lock_config: the file lock (5 s), the cluster-wide vmid check, `lock: create`.
    let holder = format!("create-{vmid}");
    sim.flock(vmid, &holder, Duration::from_secs(5))
        .map_err(|e| ApiErr::die(format!("unable to create VM {vmid} - {e}")))?;
    {
        let mut st = sim.lock();
        if let Some(vm) = st.vms.get(&vmid) {
            let n = vm.node.clone();
            drop(st);
            sim.funlock(vmid);
            return Err(ApiErr::die(format!(
                "unable to create VM {vmid} - VM {vmid} already exists on node '{n}'"
            )));
        }
        let mut conf = BTreeMap::new();
        conf.insert("lock".to_string(), "create".to_string());
        st.vms.insert(
            vmid,
            Vm {
                node: node.to_string(),
                config: conf,
                pending: Pending::default(),
                cloudinit: CloudInitState::default(),
                running: false,
                started: None,
                pid: 0,
            },
        );
    }
    sim.funlock(vmid);

    let start = params.get("start").is_some_and(|v| v == "1");
    let rest: Vec<(String, String)> = params
        .iter()
        .filter(|(k, _)| {
            schema::is_config_key(k) && !schema::is_drive_key(k) && k.as_str() != "lock"
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let (s2, n2) = (sim.clone(), node.to_string());
    let upid = tasks::spawn(
        sim,
        node,
        "qmcreate",
        &vmid.to_string(),
        &auth.id,
        move |ctx| {
            let sim = &s2;
            let mut made = Vec::new();
            let result = (|| -> Result<(), String> {
                sim.flock(vmid, &ctx.upid, Duration::from_secs(1))?;
                let res = (|| {
                    ctx.sleep(sim.task_duration("qmcreate") / 2)?;
                    let drives = run_drives(sim, ctx, &n2, vmid, ops, &mut made)?;
                    ctx.sleep(sim.task_duration("qmcreate") / 2)?;
                    let mut conf: BTreeMap<String, String> = rest
                        .iter()
                        .map(|(k, v)| (k.clone(), normalize(sim, k, v)))
                        .collect();
                    conf.extend(drives);
                    if !conf.contains_key("boot") {
                        let b = default_boot(&conf);
                        conf.insert("boot".into(), b);
                    }
                    conf.entry("smbios1".into())
                        .or_insert_with(|| format!("uuid={}", uuid(sim)));
                    conf.entry("vmgenid".into()).or_insert_with(|| uuid(sim));
                    conf.insert(
                        "meta".into(),
                        format!("creation-qemu=9.2.0,ctime={}", crate::state::epoch() as u64),
                    );
                    let mut st = sim.lock();
                    match st.vms.get_mut(&vmid) {
                        Some(vm) => vm.config = conf,
                        None => return Err("config file vanished".to_string()),
                    }
                    Ok(())
                })();
                sim.funlock(vmid);
                res
            })();
            match result {
                Ok(()) => {
                    if start {
                        ctx.log("Execute autostart");
                        do_start(sim, ctx, vmid)?;
                    }
                    Ok(0)
                }
                // A killed worker (SIGKILL after a stop request it did not heed) runs no
                // cleanup: the config keeps `lock: create` and the volumes stay.
                Err(e) if ctx.killed() => Err(e),
                Err(e) => {
                    free_volumes(&made);
                    sim.lock().vms.remove(&vmid);
                    sim.cv.notify_all();
                    Err(format!("unable to create VM {vmid} - {e}"))
                }
            }
        },
    );
    Ok(json!(upid))
}

fn do_start(sim: &Sim, ctx: &TaskCtx, vmid: u32) -> Result<(), String> {
    ctx.sleep(sim.task_duration("qmstart"))?;
    let mut st = sim.lock();
    let vm = st.vms.get_mut(&vmid).ok_or("VM vanished")?;
    prepare_start(vm);
    vm.running = true;
    vm.started = Some(Instant::now());
    vm.pid = 10000 + (sim.random() % 50000) as u32;
    Ok(())
}

/// A config value typed as PVE returns it, `cipassword` masked.
fn typed(k: &str, v: &str) -> Value {
    match (k, schema::config_key_type(k)) {
        ("cipassword", _) => json!("**********"),
        (_, Some(Ty::Int(..)) | Some(Ty::Bool)) => {
            v.parse::<i64>().map(|n| json!(n)).unwrap_or(json!(v))
        }
        (_, Some(Ty::Num(..))) => v.parse::<f64>().map(|n| json!(n)).unwrap_or(json!(v)),
        _ => json!(v),
    }
}

/// `GET …/pending` (API2/Qemu.pm, vm_pending; pve-guest-common GuestHelpers.pm,
/// config_with_pending_array): every key of the config file, `digest` included, with its
/// current `value`, its `pending` value and a pending `delete`, all as the file has them
/// (strings: the answer's schema types them so); `cipassword` masked (`'**********'`, and
/// `'********** '` for a pending one, as the source writes it).
pub fn get_pending(sim: &Sim, node: &str, vmid: u32) -> ApiResult {
    let (conf, pend) = file_of(sim, node, vmid)?;
    let mask = |k: &str, v: &str, pending: bool| match (k, pending) {
        ("cipassword", false) => "**********".to_string(),
        ("cipassword", true) => "********** ".to_string(),
        _ => v.to_string(),
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
            item.insert("delete".into(), json!(1));
        }
        items.push(Value::Object(item));
    }
    for (k, p) in pend.set.iter().filter(|(k, _)| !file.contains_key(*k)) {
        items.push(json!({"key": k, "pending": mask(k, p, true)}));
    }
    for k in pend.delete.iter().filter(|k| !file.contains_key(*k)) {
        items.push(json!({"key": k, "delete": 1}));
    }
    Ok(json!(items))
}

/// `GET …/cloudinit`: the cloud-init options with the values the drive holds and the pending
/// ones.
pub fn get_cloudinit(sim: &Sim, node: &str, vmid: u32) -> ApiResult {
    config_of(sim, node, vmid)?;
    let st = sim.lock();
    let vm = st.vms.get(&vmid).ok_or_else(|| no_conf(node, vmid))?;
    Ok(json!(vm.cloudinit.listing(&vm.config)))
}

/// `PUT …/cloudinit` (API2/Qemu.pm, cloudinit_update): under the config lock, the lock
/// checked, the drive regenerated from the current config (no task).
pub fn put_cloudinit(sim: &Sim, node: &str, vmid: u32) -> ApiResult {
    config_of(sim, node, vmid)?;
    sim.flock(vmid, "cloudinit", Duration::from_secs(10))
        .map_err(ApiErr::die)?;
    let res = (|| {
        let mut st = sim.lock();
        let vm = st.vms.get_mut(&vmid).ok_or_else(|| no_conf(node, vmid))?;
        check_lock(&vm.config).map_err(ApiErr::die)?;
        if has_cloudinit_drive(&vm.config) {
            vm.cloudinit.regenerated();
        }
        Ok(Value::Null)
    })();
    sim.funlock(vmid);
    res
}

/// `GET …/agent/network-get-interfaces` (API2/Qemu/Agent.pm; QemuServer/Agent.pm,
/// assert_agent_available): `No QEMU guest agent configured` without `agent` in the config,
/// `VM N is not running`, and `QEMU guest agent is not running` until `--agent-delay` after
/// the start (or for good when the agent is disabled); then the guest's interfaces: loopback,
/// and one per `netN` with the `ipconfigN` address (or one of `--agent-ip`, or a DHCP-like
/// 10.0.X.Y) and an IPv6 link-local address.
pub fn agent_network(sim: &Sim, node: &str, vmid: u32) -> ApiResult {
    let conf = config_of(sim, node, vmid)?;
    let Some(agent) = conf.get("agent") else {
        return Err(ApiErr::die("No QEMU guest agent configured"));
    };
    let st = sim.lock();
    let vm = st.vms.get(&vmid).ok_or_else(|| no_conf(node, vmid))?;
    let up = vm.running.then_some(vm.started).flatten();
    let Some(started) = up else {
        return Err(ApiErr::die(format!("VM {vmid} is not running")));
    };
    let enabled = {
        let first = agent.split(',').next().unwrap_or("");
        first == "1" || agent.split(',').any(|p| p == "enabled=1")
    };
    if !enabled || started.elapsed() < sim.opts.agent_delay {
        return Err(ApiErr::die("QEMU guest agent is not running"));
    }
    let mut ifaces = vec![json!({
        "name": "lo",
        "hardware-address": "00:00:00:00:00:00",
        "ip-addresses": [
            {"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8},
            {"ip-address-type": "ipv6", "ip-address": "::1", "prefix": 128}
        ]
    })];
    let given = sim.opts.agent_ips.get(&vmid);
    let nets: Vec<(&String, &String)> = conf
        .iter()
        .filter(|(k, _)| {
            k.strip_prefix("net")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    for (i, (k, v)) in nets.into_iter().enumerate() {
        let idx = &k[3..];
        let mac = v
            .split(',')
            .next()
            .and_then(|m| m.split_once('='))
            .map_or("BC:24:11:00:00:00", |(_, mac)| mac)
            .to_ascii_lowercase();
        let mut addrs = Vec::new();
        let static_ip = conf.get(&format!("ipconfig{idx}")).and_then(|c| {
            c.split(',')
                .find_map(|p| p.strip_prefix("ip="))
                .filter(|ip| *ip != "dhcp")
                .and_then(|ip| ip.split_once('/'))
                .map(|(a, p)| (a.to_string(), p.parse::<u8>().unwrap_or(24)))
        });
        match (given.and_then(|g| g.get(i)), static_ip) {
            (Some(ip), _) => addrs.push(json!({
                "ip-address-type": if ip.is_ipv4() { "ipv4" } else { "ipv6" },
                "ip-address": ip.to_string(), "prefix": if ip.is_ipv4() { 24 } else { 64 }
            })),
            (None, Some((a, p))) => {
                addrs.push(json!({"ip-address-type": "ipv4", "ip-address": a, "prefix": p}))
            }
            (None, None) => addrs.push(json!({
                "ip-address-type": "ipv4",
                "ip-address": format!("10.0.{}.{}", vmid % 250, 10 + i), "prefix": 24
            })),
        }
        addrs.push(json!({"ip-address-type": "ipv6", "ip-address": format!("fe80::be24:11ff:fe00:{:x}", vmid % 0xffff), "prefix": 64}));
        ifaces.push(json!({
            "name": format!("eth{i}"),
            "hardware-address": mac,
            "ip-addresses": addrs,
        }));
    }
    Ok(json!({ "result": ifaces }))
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

/// `PUT` (synchronous) and `POST` (a `qmconfig` task) on `…/config`.
pub fn update(
    sim: &Arc<Sim>,
    node: &str,
    vmid: u32,
    params: &Params,
    auth: &Auth,
    async_api: bool,
) -> ApiResult {
    let skiplock = params.get("skiplock").is_some_and(|v| v == "1");
    if skiplock && !auth.root_ticket {
        return Err(ApiErr::param("skiplock", "Only root may use this option."));
    }
    let deletes: Vec<String> = params
        .get("delete")
        .map(|d| {
            d.split([',', ';', ' '])
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    for d in &deletes {
        if params.contains_key(d) {
            return Err(ApiErr::param(
                "delete",
                format!("you can't use '-{d}' and -delete {d}' at the same time"),
            ));
        }
        if !schema::is_config_key(d) {
            return Err(ApiErr::param("delete", format!("unknown option '{d}'")));
        }
    }
    let sets: Vec<(String, String)> = params
        .iter()
        .filter(|(k, _)| schema::is_config_key(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if sets.is_empty() && deletes.is_empty() {
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
    let (conf, pend) = file_of(sim, node, vmid)?;
    load_and_check(&conf, &pend).map_err(ApiErr::die)?;
    if sets.iter().any(|(k, _)| k == "lock") {
        return Err(ApiErr::die(
            "pve-sim: setting 'lock' through the API is not allowed",
        ));
    }
    let ops = plan_drives(sim, node, params, auth)?;
    let (s2, n2) = (sim.clone(), node.to_string());
    let apply = move |ctx: &TaskCtx| -> Result<u32, String> {
        let sim = &s2;
        sim.flock(vmid, &ctx.upid, Duration::from_secs(10))?;
        let res = (|| {
            ctx.sleep(sim.task_duration("qmconfig"))?;
            let (conf, pend) = file_of(sim, &n2, vmid).map_err(|e| e.msg)?;
            load_and_check(&conf, &pend)?;
            let mut made = Vec::new();
            let drives = run_drives(sim, ctx, &n2, vmid, ops, &mut made).inspect_err(|_| {
                if !ctx.killed() {
                    free_volumes(&made)
                }
            })?;
            let mut st = sim.lock();
            let vm = st.vms.get_mut(&vmid).ok_or("VM vanished")?;
            // update_vm_api's `$updatefn`: every change goes to [PENDING] first; unchanged
            // values are dropped; then a stopped VM applies all of it, a running one what it
            // can hotplug (QemuServer.pm, vmconfig_apply_pending / vmconfig_hotplug_pending).
            for d in &deletes {
                vm.pending.queue_delete(d);
            }
            for (k, v) in drives {
                vm.pending.queue_set(&k, &v);
            }
            for (k, v) in &sets {
                if !schema::is_drive_key(k) {
                    let n = normalize(sim, k, v);
                    vm.pending.queue_set(k, &n);
                }
            }
            vm.pending.cleanup(&vm.config);
            let (apply_sets, apply_deletes) = vm.pending.take_applicable(&vm.config, vm.running);
            apply_changes(vm, apply_sets, apply_deletes);
            Ok(0)
        })();
        sim.funlock(vmid);
        res
    };
    if !async_api {
        let ctx = TaskCtx {
            sim: sim.clone(),
            upid: format!("sync-update-{vmid}"),
            cancel: Arc::new(AtomicBool::new(false)),
            killed: Arc::new(AtomicBool::new(false)),
            deaf: false,
        };
        apply(&ctx).map_err(ApiErr::die)?;
        return Ok(Value::Null);
    }
    let upid = tasks::spawn(sim, node, "qmconfig", &vmid.to_string(), &auth.id, apply);
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

/// `PUT …/resize`: a `resize` task (PVE 8+) that grows the volume with `qemu-img resize`.
///
/// qemu-server API2/Qemu.pm, resize_vm: every check (the config, `digest`, the lock, the disk)
/// is made by `$updatefn` inside the worker under the file lock; the request itself only
/// forks the task.
pub fn resize(sim: &Arc<Sim>, node: &str, vmid: u32, params: &Params, auth: &Auth) -> ApiResult {
    let skiplock = params.get("skiplock").is_some_and(|v| v == "1");
    if skiplock && !auth.root_ticket {
        return Err(ApiErr::param("skiplock", "Only root may use this option."));
    }
    let wanted_digest = params.get("digest").cloned();
    let disk = params["disk"].clone();
    let size = params["size"].clone();
    let (s2, n2) = (sim.clone(), node.to_string());
    let upid = tasks::spawn(
        sim,
        node,
        "resize",
        &vmid.to_string(),
        &auth.id,
        move |ctx| {
            let sim = &s2;
            sim.flock(vmid, &ctx.upid, Duration::from_secs(10))?;
            let res = (|| {
                let (conf, pend) = file_of(sim, &n2, vmid).map_err(|e| e.msg)?;
                if let Some(d) = &wanted_digest
                    && *d != digest(&conf, &pend)
                {
                    return Err("checksum mismatch (file change by other user?)".into());
                }
                if !skiplock {
                    check_lock(&conf)?;
                }
                let value = conf
                    .get(&disk)
                    .ok_or(format!("disk '{disk}' does not exist"))?;
                let mut kv = schema::parse_drive(value)?;
                if kv.get("media").is_some_and(|m| m == "cdrom") {
                    return Err(format!("can't resize cdrom/cloudinit disk '{disk}'"));
                }
                let vol = storage::parse_volume(&sim.opts.data_dir, &n2, &kv["file"])?;
                let cur = storage::virtual_size(&vol.path, &vol.format)?;
                let delta = storage::parse_size(&size).ok_or(format!("invalid size '{size}'"))?;
                let new = if size.starts_with('+') {
                    cur + delta
                } else {
                    delta
                };
                if new < cur {
                    return Err("shrinking disks is not supported".to_string());
                }
                ctx.sleep(sim.task_duration("resize"))?;
                if new == cur {
                    return Ok(0);
                }
                // The volume grows to whole extents; the config records the size asked for
                // (Qemu.pm, resize_vm: `$drive->{size} = $newsize`).
                storage::resize_image(
                    &vol.path,
                    &vol.format,
                    storage::allocated_size(&vol.storage, new),
                )?;
                ctx.log(format!("Image resized. New size {new} bytes."));
                kv.insert("size".into(), storage::format_size(new));
                let mut st = sim.lock();
                if let Some(vm) = st.vms.get_mut(&vmid) {
                    vm.config
                        .insert(disk.clone(), schema::print_property_string("file", &kv));
                }
                Ok(0)
            })();
            sim.funlock(vmid);
            res
        },
    );
    Ok(json!(upid))
}

/// `GET …/status/current`.
pub fn status_current(sim: &Sim, node: &str, vmid: u32) -> ApiResult {
    let st = sim.lock();
    let vm = st
        .vms
        .get(&vmid)
        .filter(|v| v.node == node)
        .ok_or_else(|| no_conf(node, vmid))?;
    let c = &vm.config;
    let mem: u64 = c.get("memory").and_then(|m| m.parse().ok()).unwrap_or(512);
    let mut v = json!({
        "vmid": vmid, "status": if vm.running { "running" } else { "stopped" },
        "qmpstatus": if vm.running { "running" } else { "stopped" },
        "ha": {"managed": 0},
        "cpus": c.get("cores").and_then(|x| x.parse::<u64>().ok()).unwrap_or(1) * c.get("sockets").and_then(|x| x.parse::<u64>().ok()).unwrap_or(1),
        "maxmem": mem * 1024 * 1024,
        "mem": if vm.running { mem * 1024 * 1024 / 4 } else { 0 },
        "uptime": vm.started.filter(|_| vm.running).map(|s| s.elapsed().as_secs()).unwrap_or(0),
    });
    if let Some(n) = c.get("name") {
        v["name"] = json!(n);
    }
    if let Some(l) = c.get("lock") {
        v["lock"] = json!(l);
    }
    if vm.running {
        v["pid"] = json!(vm.pid);
    }
    if let Some(t) = c.get("tags") {
        v["tags"] = json!(t);
    }
    Ok(v)
}

/// `POST …/status/{start,stop,shutdown,reboot}`.
///
/// As in qemu-server, the lock is checked inside the worker, under the VM's file lock
/// (`QemuServer.pm`: `vm_start`, and `_do_vm_stop` for stop, shutdown and reboot), so a lock
/// taken after the request fails the *task* with `VM is locked (…)`. `_do_vm_stop` returns
/// before any check when the VM has no process: stopping a stopped VM ends `OK`. Only reboot
/// refuses a stopped VM up front (`API2/Qemu.pm`, vm_reboot: `VM … not running`).
pub fn power(
    sim: &Arc<Sim>,
    node: &str,
    vmid: u32,
    action: &str,
    params: &Params,
    auth: &Auth,
) -> ApiResult {
    let skiplock = params.get("skiplock").is_some_and(|v| v == "1");
    if skiplock && !auth.root_ticket {
        return Err(ApiErr::param("skiplock", "Only root may use this option."));
    }
    config_of(sim, node, vmid)?;
    if action == "reboot" && !sim.lock().vms.get(&vmid).is_some_and(|v| v.running) {
        return Err(ApiErr::die(format!("VM {vmid} not running")));
    }
    let ttype = match action {
        "start" => "qmstart",
        "stop" => "qmstop",
        "shutdown" => "qmshutdown",
        _ => "qmreboot",
    };
    let (s2, n2) = (sim.clone(), node.to_string());
    let action = action.to_string();
    let upid = tasks::spawn(sim, node, ttype, &vmid.to_string(), &auth.id, move |ctx| {
        let sim = &s2;
        sim.flock(vmid, &ctx.upid, Duration::from_secs(10))?;
        let res = (|| {
            let (running, conf) = sim
                .lock()
                .vms
                .get(&vmid)
                .map(|v| (v.running, v.config.clone()))
                .ok_or_else(|| no_conf(&n2, vmid).msg)?;
            if action != "start" && !running {
                // _do_vm_stop: `return if !$pid;` (vm_reboot: `return if !check_running`).
                return Ok(());
            }
            if !skiplock {
                check_lock(&conf)?;
            }
            match action.as_str() {
                "start" if running => Err(format!("VM {vmid} already running")),
                "start" => do_start(sim, ctx, vmid),
                _ => {
                    ctx.sleep(sim.task_duration(if action == "stop" {
                        "qmstop"
                    } else {
                        "qmshutdown"
                    }))?;
                    let mut st = sim.lock();
                    if let Some(vm) = st.vms.get_mut(&vmid) {
                        // A reboot is a stop and a fresh start (QemuServer.pm, vm_reboot:
                        // qmeventd starts it again), which applies the pending changes.
                        if action == "reboot" {
                            prepare_start(vm);
                        }
                        vm.running = action == "reboot";
                        vm.started = vm.running.then(Instant::now);
                    }
                    Ok(())
                }
            }
        })();
        sim.funlock(vmid);
        res.map(|_| 0)
    });
    Ok(json!(upid))
}

/// `DELETE /nodes/{node}/qemu/{vmid}`: a `qmdestroy` task that frees the VM's volumes.
pub fn destroy(sim: &Arc<Sim>, node: &str, vmid: u32, params: &Params, auth: &Auth) -> ApiResult {
    let skiplock = params.get("skiplock").is_some_and(|v| v == "1");
    if skiplock && !auth.root_ticket {
        return Err(ApiErr::param("skiplock", "Only root may use this option."));
    }
    // qemu-server API2/Qemu.pm, destroy_vm: `$early_checks` (the config exists, protection,
    // not running) before forking and again in the worker; the lock is checked only in the
    // worker (QemuServer.pm, destroy_vm), which frees the volumes, leaves `lock: destroyed`
    // as the whole config, and removes the config last.
    let early_checks = |sim: &Sim| -> Result<BTreeMap<String, String>, String> {
        let conf = config_of(sim, node, vmid).map_err(|e| e.msg)?;
        if conf.get("protection").is_some_and(|p| p == "1") {
            return Err(format!("can't remove VM {vmid} - protection mode enabled"));
        }
        if sim.lock().vms.get(&vmid).is_some_and(|v| v.running) {
            return Err(format!("VM {vmid} is running - destroy failed"));
        }
        Ok(conf)
    };
    early_checks(sim).map_err(ApiErr::die)?;
    let unreferenced = params
        .get("destroy-unreferenced-disks")
        .is_some_and(|v| v == "1");
    let (s2, n2) = (sim.clone(), node.to_string());
    let upid = tasks::spawn(
        sim,
        node,
        "qmdestroy",
        &vmid.to_string(),
        &auth.id,
        move |ctx| {
            let sim = &s2;
            sim.flock(vmid, &ctx.upid, Duration::from_secs(10))?;
            let res = (|| {
                let conf = config_of(sim, &n2, vmid).map_err(|e| e.msg)?;
                if conf.get("protection").is_some_and(|p| p == "1") {
                    return Err(format!("can't remove VM {vmid} - protection mode enabled"));
                }
                if sim.lock().vms.get(&vmid).is_some_and(|v| v.running) {
                    return Err(format!("VM {vmid} is running - destroy failed"));
                }
                if !skiplock && conf.get("lock").is_some_and(|l| l != "suspended") {
                    check_lock(&conf)?;
                }
                ctx.sleep(sim.task_duration("qmdestroy") / 2)?;
                let mut warnings = 0;
                for (k, v) in &conf {
                    if !(schema::is_drive_key(k) || k.starts_with("unused")) {
                        continue;
                    }
                    let file = v.split(',').next().unwrap_or("");
                    if let Ok(vol) = storage::parse_volume(&sim.opts.data_dir, &n2, file)
                        && vol.vmid == Some(vmid)
                    {
                        // QemuServer.pm destroy_vm: a disk vdisk_free refuses is left, with
                        // a warning (a template's base volume its linked clones still use).
                        if let Some(e) = crate::templates::base_in_use(sim, &n2, file) {
                            ctx.log(format!(
                                "WARN: Could not remove disk '{file}', check manually: {e}"
                            ));
                            warnings += 1;
                            continue;
                        }
                        let _ = std::fs::remove_file(&vol.path);
                        ctx.log(format!(
                            "  Logical volume \"{}\" successfully removed.",
                            vol.name
                        ));
                    }
                }
                if unreferenced {
                    for s in storage::STORAGES {
                        for item in storage::list_content(
                            &sim.opts.data_dir,
                            &n2,
                            s.id,
                            Some("images"),
                            Some(vmid),
                        ) {
                            if let Some(volid) = item["volid"].as_str()
                                && let Ok(vol) =
                                    storage::parse_volume(&sim.opts.data_dir, &n2, volid)
                                && crate::templates::base_in_use(sim, &n2, volid).is_none()
                            {
                                let _ = std::fs::remove_file(&vol.path);
                                ctx.log(format!("Removing unreferenced volume '{volid}'"));
                            }
                        }
                    }
                }
                if let Some(vm) = sim.lock().vms.get_mut(&vmid) {
                    vm.config = BTreeMap::from([("lock".to_string(), "destroyed".to_string())]);
                }
                // remove_vm_access, the firewall config, purge: then destroy_config.
                std::thread::sleep(sim.task_duration("qmdestroy") / 2);
                sim.lock().vms.remove(&vmid);
                sim.cv.notify_all();
                Ok(warnings)
            })();
            sim.funlock(vmid);
            res
        },
    );
    Ok(json!(upid))
}

/// `GET /nodes/{node}/qemu`: read from each VM's config at once (qemu-server
/// QemuServer.pm, vmstatus), so a VM without a name is listed as `VM <vmid>`.
pub fn vm_list(sim: &Sim, node: &str) -> Value {
    let st = sim.lock();
    json!(st.vms.iter().filter(|(_, v)| v.node == node).map(|(id, v)| {
        let mut o = json!({"vmid": id, "status": if v.running { "running" } else { "stopped" },
                           "maxmem": v.config.get("memory").and_then(|m| m.parse::<u64>().ok()).unwrap_or(512) * 1048576});
        o["name"] = json!(v.config.get("name").cloned().unwrap_or_else(|| format!("VM {id}")));
        if let Some(l) = v.config.get("lock") { o["lock"] = json!(l); }
        o
    }).collect::<Vec<_>>())
}
