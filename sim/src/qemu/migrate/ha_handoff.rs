//! Migrating an HA-managed VM, after pve-ha-manager: migrate_vm hands the VM to
//! `ha-manager migrate` (API2/HA/Resources.pm, `queue_crm_commands`), and the CRM/LRM round
//! (`ha_lrm.rs`) runs migrate_vm itself. Kept apart because it is the HA stack's path, not a
//! client's.

use std::sync::Arc;

use crate::http::handler::Auth;
use crate::state::Sim;
use crate::tasks;

/// migrate_vm for an HA-managed VM: a `hamigrate` worker that runs `ha-manager migrate vm:N
/// TARGET` (pve-ha-manager API2/HA/Resources.pm, migrate: `queue_crm_commands("migrate SID
/// NODE")`) and ends; the HA stack's next round carries the migration out
/// ([`super::ha_lrm::ha_round`]).
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
            if !crate::ha::manager::vm_is_ha_managed(&worker_sim, vmid) {
                return Err(format!("service '{sid}' not managed by HA"));
            }
            worker_sim.lock().ha.migrations.push((sid, target));
            Ok(0)
        },
    );
    crate::ha::manager::ensure_loop(sim);
    upid
}
