//! High availability, after pve-ha-manager: the resources of `/etc/pve/ha/resources.cfg`
//! (`API2/HA/Resources.pm`: index, read, create, update, delete), the cluster's HA status
//! (`API2/HA/Status.pm`, status/current), the `hastart`/`hastop` workers qemu-server forks for
//! an HA-managed VM instead of starting or stopping it (`API2/Qemu.pm` vm_start, vm_stop,
//! vm_shutdown: `ha-manager set vm:N --state started`, `ha-manager crm-command stop vm:N T`),
//! and what the CRM/LRM loop needs to start. The loop itself, which carries the requests out
//! with real `qmstart`, `qmshutdown` and `qmstop` tasks, is `ha/rounds.rs`: it uses the VMs'
//! power handlers, which use this module, so it lives above both.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::ha::config::{HaState, Resource, Service};
use crate::ha::rules::forget_resource;
use crate::ha::version_gate::has_rules;
use crate::http::handler::{ApiErr, ApiResult, Auth, Params};
use crate::qemu::config_file::config_of;
use crate::state::Sim;
use crate::tasks;

fn is_vmid(name: &str) -> bool {
    name.len() >= 2 && !name.starts_with('0') && name.bytes().all(|b| b.is_ascii_digit())
}

/// Config.pm parse_sid: `vm:N`, or a bare VMID of an existing guest.
fn parse_sid(sim: &Sim, sid: &str) -> Result<(String, String, String), ApiErr> {
    if sid.bytes().all(|b| b.is_ascii_digit()) && !sid.is_empty() {
        let id: u32 = sid.parse().unwrap_or(0);
        if sim.lock().vms.contains_key(&id) {
            return Ok((format!("vm:{sid}"), "vm".into(), sid.to_string()));
        }
        return Err(ApiErr::die(format!(
            "unable to detect SID from VMID - VM/CT {sid} does not exist"
        )));
    }
    match sid.split_once(':') {
        Some((t, n)) if !t.is_empty() && !n.is_empty() && !sid.contains(char::is_whitespace) => {
            Ok((sid.to_string(), t.to_string(), n.to_string()))
        }
        _ => Err(ApiErr::die(format!("unable to parse service id '{sid}'"))),
    }
}

fn digest(ha: &HaState) -> String {
    let text: String = ha
        .resources
        .iter()
        .map(|(sid, r)| {
            let opts: String = r.opts.iter().map(|(k, v)| format!("\t{k} {v}\n")).collect();
            format!("{sid}\n{opts}\n")
        })
        .collect();
    crate::tools::sha1_hex(&text)
}

fn copy_config(ha: &HaState, sid: &str) -> Result<Value, ApiErr> {
    let r = ha
        .resources
        .get(sid)
        .ok_or_else(|| ApiErr::die(format!("no such resource '{sid}'")))?;
    let mut v =
        json!({"sid": sid, "type": sid.split(':').next().unwrap_or("vm"), "digest": digest(ha)});
    for (k, val) in &r.opts {
        v[k] = match k.as_str() {
            "max_restart" | "max_relocate" | "failback" => {
                json!(val.parse::<i64>().unwrap_or(0))
            }
            _ => json!(val),
        };
    }
    Ok(v)
}

/// `GET /cluster/ha/resources` (Resources.pm, index).
pub fn index(sim: &Sim, params: &Params) -> ApiResult {
    let st = sim.lock();
    let mut out = Vec::new();
    for sid in st.ha.resources.keys() {
        let v = copy_config(&st.ha, sid)?;
        if params.get("type").is_some_and(|t| v["type"] != json!(t)) {
            continue;
        }
        out.push(v);
    }
    Ok(json!(out))
}

/// `GET /cluster/ha/resources/{sid}` (Resources.pm, read).
pub fn read(sim: &Sim, sid: &str) -> ApiResult {
    let (sid, _, _) = parse_sid(sim, sid)?;
    copy_config(&sim.lock().ha, &sid)
}

/// The options a VM resource takes (Resources/PVEVM.pm, options), checked as the schema does:
/// PVE 9 refuses `group` (migrated to rules); PVE 8 (pve-ha-manager 4.x) has no `failback`
/// (it came with 5.0, from the groups' `nofailback`).
fn check_opts(params: &Params, has_rules: bool) -> Result<BTreeMap<String, String>, ApiErr> {
    let mut opts = BTreeMap::new();
    for (k, v) in params {
        match k.as_str() {
            "sid" | "type" | "digest" | "delete" | "purge" => continue,
            "group" if has_rules => {
                return Err(ApiErr::die(
                    "invalid parameter 'group': ha groups have been migrated to rules",
                ));
            }
            "failback" if !has_rules => {
                return Err(ApiErr::param(
                    "failback",
                    "property is not defined in schema and the schema does not allow additional properties",
                ));
            }
            _ => {}
        }
        opts.insert(k.clone(), v.clone());
    }
    Ok(opts)
}

/// Resources.pm update on PVE 8 (stable-4): a `group` must exist (`HA group 'x' does not
/// exist`).
fn check_group(sim: &Sim, params: &Params) -> Result<(), ApiErr> {
    match params.get("group") {
        Some(g) if !has_rules(&sim.opts.version) && !sim.lock().ha.groups.contains_key(g) => {
            Err(ApiErr::die(format!("HA group '{g}' does not exist")))
        }
        _ => Ok(()),
    }
}

/// `POST /cluster/ha/resources` (Resources.pm, create): the sid parsed, the type matched, the
/// VM checked (PVEVM.pm verify_name, exists), then under `lock_ha_domain`.
pub fn create(sim: &Arc<Sim>, params: &Params) -> ApiResult {
    let (sid, kind, name) = parse_sid(sim, &params["sid"])?;
    if params.get("type").is_some_and(|t| *t != kind) {
        return Err(ApiErr::die("types does not match"));
    }
    if kind != "vm" {
        return Err(ApiErr::die(format!("unknown resource type '{kind}'")));
    }
    if !is_vmid(&name) {
        return Err(ApiErr::die("invalid VMID"));
    }
    if !sim.lock().vms.contains_key(&name.parse().unwrap_or(0)) {
        return Err(ApiErr::die(format!(
            "resource 'vm:{name}' does not exist in cluster"
        )));
    }
    let opts = check_opts(params, has_rules(&sim.opts.version))?;
    {
        let mut st = sim.lock();
        if st.ha.resources.contains_key(&sid) {
            return Err(ApiErr::die(format!(
                "create resource failed: resource ID '{sid}' already defined"
            )));
        }
        st.ha.resources.insert(sid, Resource { opts });
    }
    ensure_loop(sim);
    Ok(Value::Null)
}

/// `PUT /cluster/ha/resources/{sid}` (Resources.pm, update; Config.pm
/// update_resources_config with the digest, update_single_resource_config_inplace).
pub fn update(sim: &Sim, sid: &str, params: &Params) -> ApiResult {
    let (sid, kind, _) = parse_sid(sim, sid)?;
    if params.get("type").is_some_and(|t| *t != kind) {
        return Err(ApiErr::die("types does not match"));
    }
    let opts = check_opts(params, has_rules(&sim.opts.version))?;
    check_group(sim, params)?;
    let what = "update resources config failed";
    let mut st = sim.lock();
    if let Some(d) = params.get("digest")
        && *d != digest(&st.ha)
    {
        return Err(ApiErr::die(format!(
            "{what}: detected modified configuration - file changed by other user? Try again."
        )));
    }
    let Some(r) = st.ha.resources.get_mut(&sid) else {
        return Err(ApiErr::die(format!("{what}: no such resource '{sid}'")));
    };
    let deletes: Vec<String> = params
        .get("delete")
        .map(|d| crate::tools::split_list(d))
        .unwrap_or_default();
    const OPTIONS: &[&str] = &[
        "state",
        "group",
        "comment",
        "failback",
        "max_restart",
        "max_relocate",
    ];
    if let Some(k) = deletes.iter().find(|k| !OPTIONS.contains(&k.as_str())) {
        return Err(ApiErr::die(format!("{what}: no such option '{k}'")));
    }
    r.opts.extend(opts);
    for k in deletes {
        r.opts.remove(&k);
    }
    Ok(Value::Null)
}

/// `DELETE /cluster/ha/resources/{sid}` (Resources.pm, delete; Config.pm
/// delete_service_from_config, which with `purge` takes it out of the rules too).
pub fn delete(sim: &Sim, sid: &str, purge: bool) -> ApiResult {
    let (sid, _, _) = parse_sid(sim, sid)?;
    let mut st = sim.lock();
    if st.ha.resources.remove(&sid).is_none() {
        return Err(ApiErr::die(format!(
            "cannot delete service '{sid}', not HA managed!"
        )));
    }
    st.ha.services.remove(&sid);
    if purge {
        forget_resource(&mut st.ha, &sid);
    }
    Ok(Value::Null)
}

/// `ha-manager add vm:N --state S` (create_vm with `ha-managed`): a resource with that state.
pub fn add_resource(sim: &Arc<Sim>, vmid: u32, state: &str) {
    let opts = BTreeMap::from([("state".to_string(), state.to_string())]);
    sim.lock()
        .ha
        .resources
        .entry(format!("vm:{vmid}"))
        .or_insert(Resource { opts });
    ensure_loop(sim);
}

/// Config.pm vm_is_ha_managed: a resource that is not `ignored`.
pub fn vm_is_ha_managed(sim: &Sim, vmid: u32) -> bool {
    sim.lock()
        .ha
        .resources
        .get(&format!("vm:{vmid}"))
        .is_some_and(|r| r.state() != "ignored")
}

/// Config.pm service_is_configured (destroy_vm's check, ignored resources included).
pub fn service_is_configured(sim: &Sim, vmid: u32) -> bool {
    sim.lock().ha.resources.contains_key(&format!("vm:{vmid}"))
}

/// Config.pm delete_service_from_config (destroy_vm passes its `purge`, which also takes
/// the VM out of the HA rules).
pub fn remove_service(sim: &Sim, vmid: u32) {
    let sid = format!("vm:{vmid}");
    let mut st = sim.lock();
    st.ha.resources.remove(&sid);
    st.ha.services.remove(&sid);
    forget_resource(&mut st.ha, &sid);
}

/// pve-manager API2/Cluster.pm resources: a VM's `hastate` (the CRM's service state, else
/// the configured resource's requested state).
pub fn hastate(ha: &HaState, vmid: u32) -> Option<String> {
    let sid = format!("vm:{vmid}");
    if let Some(s) = ha.services.get(&sid) {
        return Some(s.state.clone());
    }
    ha.resources.get(&sid).map(|r| r.state().to_string())
}

/// Config.pm get_service_status: the `ha` object of a VM's `status/current`.
pub fn service_status(sim: &Sim, vmid: u32) -> Value {
    if !vm_is_ha_managed(sim, vmid) {
        return json!({"managed": 0});
    }
    let st = sim.lock();
    let mut v = json!({"managed": 1});
    if let Some(s) = st.ha.services.get(&format!("vm:{vmid}")) {
        v["state"] = json!(s.state);
    }
    v
}

/// vm_start, vm_stop, vm_shutdown for an HA-managed VM: instead of the task, a worker that
/// hands the request to the HA stack and ends once it is queued. `None` when the VM is not
/// HA-managed (or the action is a reboot, which qemu-server does not hand over).
pub fn power_request(
    sim: &Arc<Sim>,
    node: &str,
    vmid: u32,
    action: &str,
    params: &Params,
    auth: &Auth,
) -> Result<Option<String>, ApiErr> {
    if !matches!(action, "start" | "stop" | "shutdown") || !vm_is_ha_managed(sim, vmid) {
        return Ok(None);
    }
    config_of(sim, node, vmid)?;
    if action == "stop" && params.contains_key("migratedfrom") {
        return Ok(None);
    }
    if action == "stop" && params.get("overrule-shutdown").is_some_and(|v| v == "1") {
        return Err(ApiErr::param(
            "overrule-shutdown",
            "Not applicable for HA resources.",
        ));
    }
    let sid = format!("vm:{vmid}");
    let s2 = sim.clone();
    let upid = if action == "start" {
        tasks::spawn(
            sim,
            node,
            "hastart",
            &vmid.to_string(),
            &auth.id,
            move |ctx| {
                ctx.log(format!("Requesting HA start for VM {vmid}"));
                // `ha-manager set vm:N --state started`: the resource's requested state.
                ctx.sleep(s2.task_duration("hastart"))?;
                let mut st = s2.lock();
                if let Some(r) = st.ha.resources.get_mut(&sid) {
                    r.opts.insert("state".into(), "started".into());
                }
                Ok(0)
            },
        )
    } else {
        // vm_stop: a hard stop (`0`); vm_shutdown: its timeout, 60 s by default.
        let timeout: u64 = if action == "stop" {
            0
        } else {
            params
                .get("timeout")
                .and_then(|t| t.parse().ok())
                .unwrap_or(60)
        };
        tasks::spawn(
            sim,
            node,
            "hastop",
            &vmid.to_string(),
            &auth.id,
            move |ctx| {
                ctx.log(format!("Requesting HA stop for VM {vmid}"));
                // `ha-manager crm-command stop vm:N T`: queued for the CRM (queue_crm_commands).
                ctx.sleep(s2.task_duration("hastop"))?;
                s2.lock().ha.commands.push((sid, timeout));
                Ok(0)
            },
        )
    };
    ensure_loop(sim);
    Ok(Some(upid))
}

/// Starts the CRM/LRM rounds once there is something to manage: the daemons
/// (`ha/rounds.rs`) wait for this, then work in rounds.
pub(crate) fn ensure_loop(sim: &Arc<Sim>) {
    let mut st = sim.lock();
    if st.ha.running {
        return;
    }
    st.ha.running = true;
    sim.cv.notify_all();
}

/// Tools.pm get_verbose_service_state.
fn verbose_state(s: Option<&Service>, r: &Resource) -> String {
    let req = r.state();
    if req == "ignored" {
        return "ignored".into();
    }
    let Some(s) = s else {
        return "queued".into();
    };
    match s.state.as_str() {
        "stopped" if req == "started" => "starting".into(),
        "stopped" if req == "disabled" => "disabled".into(),
        "started" if req == "stopped" || req == "disabled" => "stopping".into(),
        "started" if !s.running => "starting".into(),
        other => other.into(),
    }
}

/// `GET /cluster/ha/status/current` (Status.pm, status): the quorum, the CRM master and each
/// node's LRM once the stack has run a round, and every service.
pub fn status_current(sim: &Sim) -> Value {
    let first = sim.opts.nodes.first().cloned().unwrap_or_default();
    let mut out = vec![json!({
        "id": "quorum", "type": "quorum", "node": first, "status": "OK", "quorate": 1,
    })];
    let st = sim.lock();
    if let Some(ts) = st.ha.round {
        let when = localtime(ts);
        out.push(json!({
            "id": "master", "type": "master", "node": first, "timestamp": ts,
            "status": format!("{first} (active, {when})"),
        }));
        for n in &sim.opts.nodes {
            let active = st.ha.services.values().any(|s| &s.node == n);
            let state = if active { "active" } else { "idle" };
            let wd = if active {
                "watchdog active"
            } else {
                "watchdog standby"
            };
            out.push(json!({
                "id": format!("lrm:{n}"), "type": "lrm", "node": n, "timestamp": ts,
                "status": format!("{n} ({state}, {wd}, {when})"),
            }));
        }
    }
    for (sid, r) in &st.ha.resources {
        let s = st.ha.services.get(sid);
        let node = s.map(|s| s.node.clone()).or_else(|| {
            sid.strip_prefix("vm:")
                .and_then(|n| n.parse::<u32>().ok())
                .and_then(|id| st.vms.get(&id))
                .map(|vm| vm.node.clone())
        });
        let state = verbose_state(s, r);
        let mut v = json!({
            "id": format!("service:{sid}"), "type": "service", "sid": sid, "state": state,
            "status": format!("{sid} ({}, {state})", node.as_deref().unwrap_or("---")),
            "request_state": r.state(),
        });
        if let Some(n) = node {
            v["node"] = json!(n);
        }
        if let Some(s) = s {
            v["crm_state"] = json!(s.state);
        }
        for k in [
            "group",
            "max_restart",
            "max_relocate",
            "failback",
            "comment",
        ] {
            if let Some(val) = r.opts.get(k) {
                v[k] = match k {
                    "group" | "comment" => json!(val),
                    _ => json!(val.parse::<i64>().unwrap_or(0)),
                };
            }
        }
        out.push(v);
    }
    json!(out)
}

/// Perl's scalar `localtime` (`Tue Dec  1 09:00:00 2026`), in UTC.
fn localtime(ts: u64) -> String {
    let days = (ts / 86400) as i64;
    let secs = ts % 86400;
    let (year, month, day) = crate::tools::civil_from_days(days);
    let wday = (days + 4).rem_euclid(7) as usize;
    const WD: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MO: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{} {} {day:>2} {:02}:{:02}:{:02} {year}",
        WD[wday],
        MO[(month - 1) as usize],
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perl_localtime_in_utc() {
        assert_eq!(localtime(0), "Thu Jan  1 00:00:00 1970");
        assert_eq!(localtime(1_796_115_600), "Tue Dec  1 09:00:00 2026");
    }
}
