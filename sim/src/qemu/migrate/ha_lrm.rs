//! The migrations of the HA stack's CRM/LRM round, after pve-ha-manager (Manager.pm
//! `update_crm_commands`, LRM.pm, Resources/PVEVM.pm `migrate`): the LRM runs migrate_vm
//! itself for the `migrate SID NODE` commands `ha_handoff.rs` queued.
//!
//! Apart from `ha_handoff` (which `handlers` uses to hand a VM to the HA stack) because this
//! runs migrate_vm (`handlers`): `ha_lrm` → `handlers` → `ha_handoff`, one way.

use std::sync::Arc;

use super::handlers::migrate_in;
use crate::http::handler::{Auth, Params};
use crate::state::Sim;

/// The migrations of one CRM/LRM round (pve-ha-manager Manager.pm update_crm_commands: a
/// `migrate SID NODE` for a service already there is ignored; LRM.pm and
/// Resources/PVEVM.pm migrate: `migrate_vm` on the service's node with `online`, `force` and
/// `with-local-disks`, as root in the HA environment). A service whose LRM is busy keeps its
/// request for a later round. Returns the services now migrating.
pub fn ha_round(sim: &Arc<Sim>) -> Vec<String> {
    let asked = std::mem::take(&mut sim.lock().ha.migrations);
    let root = Auth {
        id: "root@pam".into(),
        root_ticket: true,
    };
    let mut moving = Vec::new();
    for (sid, target) in asked {
        let Some(vmid) = sid.strip_prefix("vm:").and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let (node, busy) = {
            let st = sim.lock();
            let Some(vm) = st.vms.get(&vmid) else {
                continue;
            };
            let busy = st
                .ha
                .services
                .get(&sid)
                .and_then(|s| s.upid.as_ref())
                .is_some_and(|u| st.tasks.iter().any(|t| &t.upid == u && t.running()));
            (vm.node.clone(), busy)
        };
        if node == target {
            continue;
        }
        if busy {
            sim.lock().ha.migrations.push((sid, target));
            continue;
        }
        let params: Params = [
            ("target", target.as_str()),
            ("online", "1"),
            ("force", "1"),
            ("with-local-disks", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        if let Ok(upid) = migrate_in(sim, &node, vmid, &params, &root, true)
            && let Some(u) = upid.as_str()
            && let Some(s) = sim.lock().ha.services.get_mut(&sid)
        {
            s.state = "migrate".into();
            s.upid = Some(u.to_string());
            moving.push(sid);
        }
    }
    moving
}
