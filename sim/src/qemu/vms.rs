//! The VM endpoints, after qemu-server's `API2/Qemu.pm`: create (`lock: create` for the whole
//! `qmcreate` task, imports inside it, cleanup on failure), power, resize, destroy, status,
//! cloud-init and the guest agent. `…/config` and `…/pending` are in `qemu/config.rs`, drive
//! values in `qemu/drives.rs`, templates and clones in `qemu/templates.rs`; the task endpoints are in
//! `cluster/tasks.rs`, storage's in `storage/status.rs`, the cluster's in `cluster/resources.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::access::check::Checker;
use crate::http::handler::{ApiErr, ApiResult, Auth, Params, Undefined};
use crate::qemu::config::{free_owned, has_cloudinit_drive, prepare_start};
use crate::qemu::config_file::{check_lock, config_of, digest, file_of, free_volumes, no_conf};
use crate::qemu::drives::{plan_drives, run_drives};
use crate::qemu::pending::{CloudInitState, Pending};
use crate::qemu::permissions;
use crate::qemu::write_path;
use crate::schema;
use crate::state::{Sim, Vm};
use crate::storage::volumes;
use crate::tasks::{self, TaskCtx};

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

/// `POST /nodes/{node}/qemu`.
pub fn create(
    sim: &Arc<Sim>,
    node: &str,
    params: &Params,
    undef: &Undefined,
    auth: &Auth,
) -> ApiResult {
    let vmid: u32 = params["vmid"]
        .parse()
        .map_err(|_| ApiErr::param("vmid", "invalid"))?;
    if params.contains_key("archive") {
        return Err(ApiErr::die(
            "pve-sim: restoring from an archive is not simulated",
        ));
    }
    // create_vm: `$rpcenv->check_pool_exist($pool)` before the drives are checked.
    let pool = params.get("pool").cloned();
    if let Some(p) = &pool {
        crate::access::pools::check_pool_exist(sim, p)?;
    }
    let params = &write_path::prepare_params(sim, params, undef)?;
    permissions::create_vm(sim, &Checker::new(sim, auth), node, vmid, params)?;
    let ops = plan_drives(sim, node, params, auth)?;
    // create_and_lock_config: the file lock (5 s), the cluster-wide vmid check, `lock: create`.
    let holder = format!("create-{vmid}");
    sim.lock_config(vmid, &holder, Duration::from_secs(5), || {
        let mut st = sim.lock();
        if let Some(vm) = st.vms.get(&vmid) {
            return Err(format!("VM {vmid} already exists on node '{}'", vm.node));
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
                snapshots: Default::default(),
            },
        );
        Ok(())
    })
    .map_err(|e| ApiErr::die(format!("unable to create VM {vmid} - {e}")))?;

    let start = params.get("start").is_some_and(|v| v == "1");
    let ha_managed = params.get("ha-managed").is_some_and(|v| v == "1");
    let owner = auth.clone();
    let (given, undef) = (params.clone(), undef.clone());
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
            // lock_config_full with 1 s, as create_vm's worker takes it.
            let result = sim.lock_config(vmid, &ctx.upid, Duration::from_secs(1), || {
                ctx.sleep(sim.task_duration("qmcreate") / 2)?;
                let drives = run_drives(sim, ctx, &n2, vmid, ops, &mut made, None)?;
                ctx.sleep(sim.task_duration("qmcreate") / 2)?;
                // create_vm's worker: assert_tag_permissions before the config is written.
                if let Some(tags) = given.get("tags") {
                    let checker = Checker::new(sim, &owner);
                    permissions::assert_tag_permissions(&checker, sim, vmid, "", tags)
                        .map_err(|e| e.msg)?;
                }
                let conf = write_path::create_config(sim, &given, &undef, drives)?;
                let mut st = sim.lock();
                match st.vms.get_mut(&vmid) {
                    Some(vm) => vm.config = conf,
                    None => return Err("config file vanished".to_string()),
                }
                Ok(())
            });
            match result {
                Ok(()) => {
                    // AccessControl.pm add_vm_to_pool, after the config is written.
                    if let Some(p) = &pool {
                        crate::access::pools::add_vm_to_pool(sim, vmid, p);
                    }
                    let mut warnings = 0;
                    if ha_managed {
                        // create_vm: `ha-manager add vm:N --state started|stopped`.
                        ctx.log("Add as HA resource");
                        crate::ha::manager::add_resource(
                            sim,
                            vmid,
                            if start { "started" } else { "stopped" },
                        );
                    }
                    if start {
                        ctx.log("Execute autostart");
                        // `PVE::API2::Qemu->vm_start`: an HA resource gets its `hastart`.
                        match crate::ha::manager::power_request(
                            sim,
                            &n2,
                            vmid,
                            "start",
                            &Params::new(),
                            &owner,
                        ) {
                            Ok(Some(_)) => {}
                            Ok(None) => do_start(sim, ctx, vmid)?,
                            Err(e) => {
                                ctx.log(format!("WARN: {}", e.msg));
                                warnings += 1;
                            }
                        }
                    }
                    Ok(warnings)
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
    let freed = prepare_start(vm, vmid);
    vm.running = true;
    vm.started = Some(Instant::now());
    vm.pid = 10000 + (sim.random() % 50000) as u32;
    let node = vm.node.clone();
    drop(st);
    free_owned(sim, &node, vmid, &freed);
    Ok(())
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
    let n2 = node.to_string();
    let action = action.to_string();
    let upid = tasks::fork_locked(sim, node, ttype, vmid, &auth.id, move |sim, ctx| {
        let outcome = (|| {
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
                    let mut freed = Vec::new();
                    if let Some(vm) = st.vms.get_mut(&vmid) {
                        // A reboot is a stop and a fresh start (QemuServer.pm, vm_reboot:
                        // qmeventd starts it again), which applies the pending changes.
                        if action == "reboot" {
                            freed = prepare_start(vm, vmid);
                        }
                        vm.running = action == "reboot";
                        vm.started = vm.running.then(Instant::now);
                    }
                    drop(st);
                    free_owned(sim, &n2, vmid, &freed);
                    Ok(())
                }
            }
        })();
        outcome.map(|_| 0)
    });
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
    let n2 = node.to_string();
    let upid = tasks::fork_locked(sim, node, "resize", vmid, &auth.id, move |sim, ctx| {
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
        let vol = volumes::parse_volume(&sim.opts.data_dir, &n2, &kv["file"])?;
        let cur = volumes::virtual_size(&vol.path, &vol.format)?;
        let delta = volumes::parse_size(&size).ok_or(format!("invalid size '{size}'"))?;
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
        volumes::resize_image(
            &vol.path,
            &vol.format,
            volumes::allocated_size(&vol.storage, new),
        )?;
        ctx.log(format!("Image resized. New size {new} bytes."));
        kv.insert("size".into(), volumes::format_size(new));
        let mut st = sim.lock();
        if let Some(vm) = st.vms.get_mut(&vmid) {
            vm.config
                .insert(disk.clone(), schema::print_property_string("file", &kv));
        }
        Ok(0)
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
    let purge = params.get("purge").is_some_and(|v| v == "1");
    let early_checks = |sim: &Sim| -> Result<BTreeMap<String, String>, String> {
        let conf = config_of(sim, node, vmid).map_err(|e| e.msg)?;
        if conf.get("protection").is_some_and(|p| p == "1") {
            return Err(format!("can't remove VM {vmid} - protection mode enabled"));
        }
        if !purge && crate::ha::manager::service_is_configured(sim, vmid) {
            return Err(format!(
                "unable to remove VM {vmid} - used in HA resources and purge parameter not set."
            ));
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
    let n2 = node.to_string();
    let upid = tasks::fork_locked(sim, node, "qmdestroy", vmid, &auth.id, move |sim, ctx| {
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
            if let Ok(vol) = volumes::parse_volume(&sim.opts.data_dir, &n2, file)
                && vol.vmid == Some(vmid)
            {
                // QemuServer.pm destroy_vm: a disk vdisk_free refuses is left, with
                // a warning (a template's base volume its linked clones still use).
                if let Some(e) = crate::qemu::templates::base_in_use(sim, &n2, file) {
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
            for s in volumes::all() {
                for item in
                    volumes::list_content(&sim.opts.data_dir, &n2, s.id, Some("images"), Some(vmid))
                {
                    if let Some(volid) = item["volid"].as_str()
                        && let Ok(vol) = volumes::parse_volume(&sim.opts.data_dir, &n2, volid)
                        && crate::qemu::templates::base_in_use(sim, &n2, volid).is_none()
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
        crate::access::pools::remove_vm_access(sim, vmid);
        if purge {
            ctx.log(format!("purging VM {vmid} from related configurations.."));
            if crate::ha::manager::service_is_configured(sim, vmid) {
                crate::ha::manager::remove_service(sim, vmid);
                ctx.log(format!(
                    "NOTE: removed VM {vmid} from HA resource configuration."
                ));
            }
        }
        std::thread::sleep(sim.task_duration("qmdestroy") / 2);
        sim.lock().vms.remove(&vmid);
        sim.cv.notify_all();
        Ok(warnings)
    });
    Ok(json!(upid))
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
    sim.lock_config(vmid, "cloudinit", tasks::LOCK_CONFIG_TIMEOUT, || {
        let mut st = sim.lock();
        let vm = st.vms.get_mut(&vmid).ok_or_else(|| no_conf(node, vmid))?;
        check_lock(&vm.config).map_err(ApiErr::die)?;
        if has_cloudinit_drive(&vm.config) {
            vm.cloudinit.regenerated();
        }
        Ok(Value::Null)
    })
}

/// qemu-server QemuServer/Agent.pm qga_check_running: `guest-ping` with a 3 s timeout.
const QGA_PING_TIMEOUT: Duration = Duration::from_secs(3);

/// PVE/QMPClient.pm cmd: the default timeout of a command (`guest-network-get-interfaces`).
const QMP_DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// `GET …/agent/network-get-interfaces` (API2/Qemu/Agent.pm; QemuServer/Agent.pm,
/// assert_agent_available): `No QEMU guest agent configured` without `agent` in the config,
/// `VM N is not running`, and `QEMU guest agent is not running` until `--agent-delay` after
/// the start (or for good when the agent is disabled) — after the ping's 3 s timeout when the
/// agent is enabled but not up yet (qga_check_running); during `--agent-busy` after it came up,
/// the ping answers and the command fails after QMPClient's 5 s with `VM N qga command
/// 'guest-network-get-interfaces' failed - got timeout`; then the guest's interfaces: loopback,
/// and one per `netN` with the `ipconfigN` address (or one of `--agent-ip`, or a DHCP-like
/// 10.0.X.Y) and an IPv6 link-local address.
pub fn agent_network(sim: &Sim, node: &str, vmid: u32) -> ApiResult {
    let conf = config_of(sim, node, vmid)?;
    let Some(agent) = conf.get("agent") else {
        return Err(ApiErr::die("No QEMU guest agent configured"));
    };
    let started = {
        let st = sim.lock();
        let vm = st.vms.get(&vmid).ok_or_else(|| no_conf(node, vmid))?;
        vm.running.then_some(vm.started).flatten()
    };
    let Some(started) = started else {
        return Err(ApiErr::die(format!("VM {vmid} is not running")));
    };
    let enabled = {
        let first = agent.split(',').next().unwrap_or("");
        first == "1" || agent.split(',').any(|p| p == "enabled=1")
    };
    if !enabled {
        return Err(ApiErr::die("QEMU guest agent is not running"));
    }
    if started.elapsed() < sim.opts.agent_delay {
        // The ping goes unanswered until its timeout.
        std::thread::sleep(QGA_PING_TIMEOUT);
        return Err(ApiErr::die("QEMU guest agent is not running"));
    }
    if started.elapsed() < sim.opts.agent_delay + sim.opts.agent_busy {
        std::thread::sleep(QMP_DEFAULT_TIMEOUT);
        return Err(ApiErr::die(format!(
            "VM {vmid} qga command 'guest-network-get-interfaces' failed - got timeout"
        )));
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
