//! The admin port (plain HTTP, `--admin-listen`): faults, ticket revocation, locks held from
//! another task and task timings. Tests and benchmarks steer pve-sim through it; it is no part
//! of PVE's API.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::http::server::{Handler, Request, Response};
use crate::state::Sim;
use crate::tasks;

/// The admin endpoint: faults, ticket revocation, held locks and task timings.
pub struct Admin {
    pub sim: Arc<Sim>,
}

impl Handler for Admin {
    fn handle(&self, req: &Request) -> Response {
        let ok = |v: Value| {
            Response::new(
                200,
                "OK",
                serde_json::to_vec(&json!({"data": v})).unwrap_or_default(),
            )
        };
        let bad = |m: String| {
            Response::new(
                400,
                m.clone(),
                serde_json::to_vec(&json!({"error": m})).unwrap_or_default(),
            )
        };
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/health") => ok(json!({"ok": true})),
            ("GET", "/version-table") => ok(crate::versions::played(&self.sim.opts.version)),
            ("GET", "/faults") => ok(json!(
                self.sim
                    .faults
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .given
            )),
            ("DELETE", "/faults") => {
                self.sim
                    .faults
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clear();
                ok(Value::Null)
            }
            ("POST", "/faults") => {
                let list = match body {
                    Value::Array(a) => a,
                    v @ Value::Object(_) => vec![v],
                    _ => return bad("POST /faults takes a JSON object or array".into()),
                };
                let mut f = self.sim.faults.lock().unwrap_or_else(|e| e.into_inner());
                for v in &list {
                    if let Err(e) = f.add(v) {
                        return bad(e);
                    }
                }
                ok(json!(list.len()))
            }
            ("POST", "/revoke-tickets") => {
                self.sim.lock().tickets.clear();
                ok(Value::Null)
            }
            ("POST", "/storage-lock") => match crate::storage::storage_cfg::admin_hold(&body) {
                Ok(v) => ok(v),
                Err(e) => bad(e),
            },
            ("POST", "/lock") => match self.hold_lock(&body) {
                Ok(upid) => ok(json!(upid)),
                Err(e) => bad(e),
            },
            ("GET", path) if path.starts_with("/config-file/") => {
                let vmid = path["/config-file/".len()..].parse::<u32>().ok();
                let st = self.sim.lock();
                match vmid.and_then(|id| st.vms.get(&id)) {
                    Some(vm) => {
                        // A password in plain is shown as `********` (a crypt() hash as is).
                        let mut conf = vm.config.clone();
                        if let Some(pw) = conf.get_mut("cipassword")
                            && !crate::qemu::write_path::is_crypted(pw)
                        {
                            *pw = "********".into();
                        }
                        let text = crate::qemu::config_file::file_text(&conf, &vm.pending)
                            + &vm.cloudinit.section(&conf);
                        ok(json!(text))
                    }
                    None => bad("no such VM".into()),
                }
            }
            ("GET", path) if path.starts_with("/guest/") && path.ends_with("/seed") => {
                let vmid = path["/guest/".len()..path.len() - "/seed".len()].parse::<u32>();
                match vmid
                    .ok()
                    .and_then(|vmid| crate::guest::seed::seen_by(&self.sim, vmid))
                {
                    Some(seen) => ok(seen),
                    None => Response::new(404, "no seed seen", b"{}".to_vec()),
                }
            }
            ("GET", "/tasks") => {
                let st = self.sim.lock();
                ok(json!(st.tasks.iter().map(|t| json!({
                    "upid": t.upid, "type": t.ttype, "node": t.node, "id": t.id, "start": t.start_epoch,
                    "end": t.end_epoch, "exitstatus": t.exitstatus, "log": t.log,
                })).collect::<Vec<_>>()))
            }
            _ => Response::new(404, "not found", b"{}".to_vec()),
        }
    }
}

impl Admin {
    /// Starts a `vzdump`-like task on the VM's node for `ms` milliseconds. With `config_lock`
    /// (`backup`) it sets that lock in the config and, as vzdump does, holds the file lock
    /// only while writing it (pve-guest-common AbstractConfig.pm, set_lock); without, it holds
    /// the file lock (`/var/lock/qemu-server/lock-N.conf`) all along, as a busy worker does.
    fn hold_lock(&self, v: &Value) -> Result<String, String> {
        let vmid = v["vmid"].as_u64().ok_or("lock needs 'vmid'")? as u32;
        let ms = Duration::from_millis(v["ms"].as_u64().unwrap_or(5000));
        let config_lock = v["config_lock"].as_str().map(str::to_string);
        // `set_after_ms`: hold the file lock that long first, then set the config lock (a
        // backup starting while another request waits for the file lock).
        let after = Duration::from_millis(v["set_after_ms"].as_u64().unwrap_or(0));
        let node = self
            .sim
            .lock()
            .vms
            .get(&vmid)
            .map(|vm| vm.node.clone())
            .ok_or(format!("VM {vmid} does not exist"))?;
        let sim = self.sim.clone();
        sim.flock(vmid, "admin", Duration::from_secs(10))?;
        if after.is_zero()
            && let Some(l) = &config_lock
        {
            if let Some(vm) = sim.lock().vms.get_mut(&vmid) {
                vm.config.insert("lock".into(), l.clone());
            }
            sim.funlock(vmid);
        }
        let s2 = sim.clone();
        let upid = tasks::spawn(
            &sim,
            &node,
            "vzdump",
            &vmid.to_string(),
            "root@pam",
            move |ctx| {
                ctx.log(format!("INFO: starting new backup job: vzdump {vmid}"));
                if !after.is_zero()
                    && let Some(l) = &config_lock
                {
                    let _ = ctx.sleep(after);
                    if let Some(vm) = s2.lock().vms.get_mut(&vmid) {
                        vm.config.insert("lock".into(), l.clone());
                    }
                    s2.funlock(vmid);
                }
                let r = ctx.sleep(ms.saturating_sub(after));
                if config_lock.is_some() {
                    let _ = s2.flock(vmid, &ctx.upid, Duration::from_secs(10));
                    if let Some(vm) = s2.lock().vms.get_mut(&vmid) {
                        vm.config.remove("lock");
                    }
                }
                s2.funlock(vmid);
                r.map(|_| 0)
            },
        );
        Ok(upid)
    }
}
