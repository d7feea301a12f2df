//! The storage endpoints, after pve-storage's `API2/Storage/Status.pm` and
//! `API2/Storage/Content.pm`: the node's storage list and deleting a volume (a task).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::http::handler::{ApiErr, ApiResult, Auth, Params};
use crate::state::Sim;
use crate::storage::volumes;
use crate::tasks;

/// `GET /nodes/{node}/storage`.
pub fn storage_list(sim: &Sim, node: &str, params: &Params) -> Value {
    let content = params.get("content");
    json!(volumes::all().into_iter().filter(|s| crate::storage::storage_cfg::on_node(s.id, node)).filter(|s| content.is_none_or(|c| c.split(',').all(|c| s.content.contains(&c))))
        .filter(|s| params.get("storage").is_none_or(|id| id == s.id))
        .map(|s| {
            let used: u64 = volumes::list_content(&sim.opts.data_dir, node, s.id, None, None).iter().map(|v| v["used"].as_u64().unwrap_or(0)).sum();
            json!({"storage": s.id, "type": s.kind, "content": s.content.join(","), "active": crate::storage::storage_cfg::check_enabled(s.id, node).is_ok() as u8, "enabled": crate::storage::storage_cfg::check_enabled(s.id, node).is_ok() as u8, "shared": s.shared as u8,
                   "total": 107374182400u64, "used": used, "avail": 107374182400u64 - used.min(107374182400u64),
                   "used_fraction": used as f64 / 107374182400.0})
        }).collect::<Vec<_>>())
}

/// `DELETE /nodes/{node}/storage/{storage}/content/{volume}`: an `imgdel` task.
pub fn volume_delete(
    sim: &Arc<Sim>,
    node: &str,
    sid: &str,
    volume: &str,
    auth: &Auth,
) -> ApiResult {
    let volid = if volume.contains(':') {
        volume.to_string()
    } else {
        format!("{sid}:{volume}")
    };
    let vol = volumes::parse_volume(&sim.opts.data_dir, node, &volid).map_err(ApiErr::die)?;
    // Storage/Content.pm delete: `Datastore.Allocate` on the storage (pve-sim has no backups).
    crate::access::check::Checker::new(sim, auth).check(
        &format!("/storage/{}", vol.storage),
        &["Datastore.Allocate"],
    )?;
    if !vol.path.exists() {
        return Err(ApiErr::die(format!("volume '{volid}' does not exist")));
    }
    if let Some(id) = vol.vmid
        && sim.lock().vms.get(&id).is_some_and(|vm| {
            vm.config
                .values()
                .any(|v| v.split(',').next() == Some(volid.as_str()))
        })
    {
        return Err(ApiErr::die(format!(
            "unable to delete volume '{volid}' - volume is still in use by VM {id}"
        )));
    }
    let s2 = sim.clone();
    // pve-storage forks `imgdel` without an id: the UPID's id field is empty.
    let upid = tasks::spawn(sim, node, "imgdel", "", &auth.id, move |ctx| {
        ctx.sleep(s2.task_duration("imgdel"))?;
        std::fs::remove_file(&vol.path)
            .map_err(|e| format!("unable to delete '{}': {e}", vol.path.display()))?;
        ctx.log(format!("Removed volume '{volid}'"));
        Ok(0)
    });
    Ok(json!(upid))
}
