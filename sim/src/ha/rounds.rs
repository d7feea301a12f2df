//! The HA stack's CRM and LRM daemons, after pve-ha-manager (Manager.pm, LRM.pm;
//! Resources/PVEVM.pm start and shutdown): they carry the requests of `ha/manager.rs` out with real
//! `qmstart`, `qmshutdown` and `qmstop` tasks. Like `pve-ha-crm` and `pve-ha-lrm`, they are
//! there from the start and go to work once there is something to manage
//! ([`crate::ha::manager::ensure_loop`]). The loop works in rounds of 10 s (CRM.pm and LRM.pm:
//! `my $max_time = 10`, `sleep_until($startime + $max_time)`), scaled by `--time-scale`: a
//! request is carried out in the round after it.
//!
//! Apart from `manager` (the API handlers and the HA side of a VM's power requests) because a
//! round runs the VMs' power handlers (`qemu::vms`), which use `manager`: `rounds` →
//! `qemu::vms` → `manager`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::ha::config::{HaState, Service};
use crate::ha::placement::{Compiled, select_node};
use crate::http::handler::{Auth, Params};
use crate::state::{Sim, epoch};

/// Starts the daemons' thread: it waits until the HA stack has something to manage, then
/// runs a round every 10 s (scaled).
pub fn spawn(sim: &Arc<Sim>) {
    let sim = sim.clone();
    std::thread::spawn(move || {
        {
            let mut st = sim.lock();
            while !st.ha.running {
                st = sim.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        }
        loop {
            // A round never takes less than 20 ms, even at `--time-scale 0`.
            let round_time = sim.scaled(Duration::from_secs(10));
            std::thread::sleep(round_time.max(Duration::from_millis(20)));
            round(&sim);
        }
    });
}

/// One CRM and LRM round: the queued commands applied (Manager.pm: `stop` sets the service
/// to `request_stop` and the resource to `stopped`), then each service driven to its
/// requested state by a task of the VM's node (PVEVM.pm: start → vm_start; shutdown with a
/// timeout → vm_shutdown with forceStop, without → vm_stop), as root@pam in the `ha`
/// environment (no HA hand-over).
fn round(sim: &Arc<Sim>) {
    let mut work: Vec<(String, u32, String, &'static str, Option<u64>)> = Vec::new();
    {
        let mut guard = sim.lock();
        let st = &mut *guard;
        st.ha.round = Some(epoch() as u64);
        let mut stops = BTreeMap::new();
        for (sid, timeout) in std::mem::take(&mut st.ha.commands) {
            if let Some(r) = st.ha.resources.get_mut(&sid) {
                r.opts.insert("state".into(), "stopped".into());
                stops.insert(sid, timeout);
            }
        }
        let finished = |upid: &Option<String>| {
            upid.as_ref()
                .is_none_or(|u| st.tasks.iter().any(|t| &t.upid == u && !t.running()))
        };
        let mut next = BTreeMap::new();
        for (sid, r) in &st.ha.resources {
            let Some(vmid) = sid.strip_prefix("vm:").and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Some(vm) = st.vms.get(&vmid) else {
                continue;
            };
            let mut s = st.ha.services.get(sid).cloned().unwrap_or(Service {
                state: if vm.running { "started" } else { "stopped" }.into(),
                node: vm.node.clone(),
                running: vm.running,
                timeout: None,
                upid: None,
            });
            s.node = vm.node.clone();
            s.running = vm.running;
            if let Some(t) = stops.get(sid) {
                s.timeout = Some(*t);
            }
            let idle = finished(&s.upid);
            if idle {
                s.upid = None;
            }
            match r.state() {
                "ignored" => {}
                "started" => {
                    s.state = "started".into();
                    if !vm.running && idle {
                        work.push((sid.clone(), vmid, vm.node.clone(), "start", None));
                    }
                }
                _ => {
                    if vm.running {
                        s.state = "request_stop".into();
                        if idle {
                            let t = s.timeout.unwrap_or(60);
                            let action = if t == 0 { "stop" } else { "shutdown" };
                            work.push((sid.clone(), vmid, vm.node.clone(), action, Some(t)));
                        }
                    } else {
                        s.state = "stopped".into();
                        s.timeout = None;
                    }
                }
            }
            next.insert(sid.clone(), s);
        }
        st.ha.services = next;
        let placement = crate::ha::placement::compile(
            &st.ha,
            crate::ha::version_gate::has_rules(&sim.opts.version),
            &sim.opts.nodes,
        );
        relocate(&mut st.ha, &placement, &sim.opts.nodes);
    }
    let root = Auth {
        id: "root@pam".into(),
        root_ticket: true,
    };
    // The migrations asked for since the last round (Manager.pm update_crm_commands and
    // next_state_started/stopped: state `migrate`; LRM.pm: the resource agent's migrate).
    let moving = crate::qemu::migrate::ha_round(sim);
    for (sid, vmid, node, action, timeout) in work {
        if moving.contains(&sid) {
            continue;
        }
        let mut params = Params::new();
        if let Some(t) = timeout.filter(|t| *t > 0) {
            params.insert("timeout".into(), t.to_string());
            params.insert("forceStop".into(), "1".into());
        }
        if let Ok(upid) = crate::qemu::vms::power(sim, &node, vmid, action, &params, &root)
            && let Some(u) = upid.as_str()
            && let Some(s) = sim.lock().ha.services.get_mut(&sid)
        {
            s.upid = Some(u.to_string());
        }
    }
}

/// Manager.pm next_state_started: a started service that runs, with no task of its LRM
/// under way and no migration asked, is moved where `select_service_node` wants it (node
/// affinity, resource affinity, `failback`): a `migrate SID NODE` for this round's
/// migrations. Each decision counts for the next service's, as the CRM's `$ss` does.
fn relocate(ha: &mut HaState, placement: &Compiled, online: &[String]) {
    let mut placed: BTreeMap<String, String> = ha
        .services
        .iter()
        .map(|(sid, s)| (sid.clone(), s.node.clone()))
        .collect();
    for (sid, target) in &ha.migrations {
        placed.insert(sid.clone(), target.clone());
    }
    let mut moves = Vec::new();
    for (sid, s) in &ha.services {
        let settled = s.state == "started" && s.running && s.upid.is_none();
        if !settled || ha.migrations.iter().any(|(m, _)| m == sid) {
            continue;
        }
        if let Some(node) = select_node(placement, sid, online, &placed)
            && node != s.node
        {
            placed.insert(sid.clone(), node.clone());
            moves.push((sid.clone(), node));
        }
    }
    ha.migrations.extend(moves);
}
