//! Migrating an HA-managed VM, after pve-ha-manager: migrate_vm hands the VM to
//! `ha-manager migrate` (API2/HA/Resources.pm, `queue_crm_commands`), and the CRM/LRM round
//! (Manager.pm `update_crm_commands`, LRM.pm, Resources/PVEVM.pm `migrate`) runs migrate_vm
//! itself. Kept apart because it is the HA stack's path, not a client's.

use std::sync::Arc;

use super::handlers::migrate_in;
use crate::handler::{Auth, Params};
use crate::state::Sim;
use crate::tasks;

/// migrate_vm for an HA-managed VM: a `hamigrate` worker that runs `ha-manager migrate vm:N
/// TARGET` (pve-ha-manager API2/HA/Resources.pm, migrate: `queue_crm_commands("migrate SID
/// NODE")`) and ends; the HA stack's next round carries the migration out ([`ha_round`]).
pub(super) fn ha_migrate(
    sim: &Arc<Sim>,
    node: &str,
    vmid: u32,
    target: &str,
    auth: &Auth,
) -> String {
    let (worker_sim, target) = (sim.clone(), target.to_string());
    let upid = tasks::spawn(
        sim,
        node,
        "hamigrate",
        &vmid.to_string(),
        &auth.id,
        move |ctx| {
            ctx.log(format!(
                "Requesting HA migration for VM {vmid} to node {target}"
            ));
            ctx.sleep(worker_sim.task_duration("hamigrate"))?;
            let sid = format!("vm:{vmid}");
            if !crate::ha::vm_is_ha_managed(&worker_sim, vmid) {
                return Err(format!("service '{sid}' not managed by HA"));
            }
            worker_sim.lock().ha.migrations.push((sid, target));
            Ok(0)
        },
    );
    crate::ha::ensure_loop(sim);
    upid
}

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
        readonly: false,
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
