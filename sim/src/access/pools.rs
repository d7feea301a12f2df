//! Resource pools, after pve-manager's `API2/Pool.pm` and pve-access-control's
//! `AccessControl.pm` (`add_vm_to_pool`, `remove_vm_access`, `verify_poolname`): the pools of
//! `user.cfg`, their VMs and storages, and the VM-to-pool map a VM's `pool` at create fills.

use serde_json::{Value, json};

use crate::access::check::Checker;
use crate::access::user_cfg::Pool;
use crate::http::handler::{ApiErr, ApiResult, Params};
use crate::state::Sim;

/// AccessControl.pm, verify_poolname (the `pve-poolid` format): up to three levels of
/// `[A-Za-z0-9.-_]+` joined by `/`.
fn verify_poolname(pool: &str) -> Result<(), ApiErr> {
    let bad = |msg: String| ApiErr::param("poolid", format!("invalid format - {msg}"));
    let parts: Vec<&str> = pool.split('/').collect();
    if parts.len() > 3 {
        return Err(bad(format!(
            "pool name '{pool}' nested too deeply (max levels = 3)"
        )));
    }
    let ok = parts.iter().all(|p| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    });
    if !ok {
        return Err(bad(format!(
            "pool name '{pool}' contains invalid characters"
        )));
    }
    Ok(())
}

/// A `lock_user_config` failure: `"$errmsg: $err"`.
fn failed(what: &str, err: impl std::fmt::Display) -> ApiErr {
    ApiErr::die(format!("{what}: {err}"))
}

/// `GET /pools` (Pool.pm, index): every pool with its comment, or with `poolid` that pool
/// with its members (VMs as `extract_vm_stats` gives them, storages as
/// `extract_storage_stats` does, i.e. as `/cluster/resources` lists them).
/// Without `poolid`, only the pools with `Pool.Audit` on `/pool/{pool}`.
pub fn index(sim: &Sim, checker: &Checker, params: &Params) -> ApiResult {
    let Some(poolid) = params.get("poolid") else {
        if params.contains_key("type") {
            return Err(ApiErr::param("type", "missing property - 'poolid'"));
        }
        let st = sim.lock();
        return Ok(json!(
            st.user_cfg
                .pools
                .iter()
                .filter(|(id, _)| checker.has(&format!("/pool/{id}"), &["Pool.Audit"]))
                .map(|(id, p)| {
                    let mut e = json!({"poolid": id});
                    if let Some(c) = &p.comment {
                        e["comment"] = json!(c);
                    }
                    e
                })
                .collect::<Vec<_>>()
        ));
    };
    verify_poolname(poolid)?;
    Ok(json!([pool_info(sim, poolid, params.get("type"))?]))
}

fn pool_info(sim: &Sim, poolid: &str, kind: Option<&String>) -> ApiResult {
    let pool = sim
        .lock()
        .user_cfg
        .pools
        .get(poolid)
        .cloned()
        .ok_or_else(|| ApiErr::die(format!("pool '{poolid}' does not exist")))?;
    let resources = crate::cluster::resources::cluster_resources(sim, None);
    let items = resources.as_array().cloned().unwrap_or_default();
    let mut members = Vec::new();
    if kind.is_none_or(|k| k == "qemu") {
        for vmid in &pool.vms {
            // `next if !$vmdata`: a destroyed guest is not listed.
            if let Some(e) = items
                .iter()
                .find(|e| e["type"] == "qemu" && e["vmid"] == json!(vmid))
            {
                members.push(e.clone());
            }
        }
    }
    if kind.is_none_or(|k| k == "storage") {
        // The local node's entry (the first node answers here).
        let node = sim.opts.nodes.first().cloned().unwrap_or_default();
        for sid in &pool.storage {
            if let Some(e) = items.iter().find(|e| {
                e["type"] == "storage" && e["storage"] == json!(sid) && e["node"] == json!(node)
            }) {
                members.push(e.clone());
            }
        }
    }
    let mut info = json!({"members": members});
    if let Some(c) = &pool.comment {
        info["comment"] = json!(c);
    }
    info["poolid"] = json!(poolid);
    Ok(info)
}

/// `GET /pools/{poolid}` (read_pool): the index's one entry.
pub fn read(sim: &Sim, poolid: &str, params: &Params) -> ApiResult {
    verify_poolname(poolid)?;
    let mut info = pool_info(sim, poolid, params.get("type"))?;
    if let Some(o) = info.as_object_mut() {
        o.remove("poolid");
    }
    Ok(info)
}

/// `POST /pools` (create_pool).
pub fn create(sim: &Sim, params: &Params) -> ApiResult {
    let pool = &params["poolid"];
    verify_poolname(pool)?;
    let what = "create pool failed";
    let mut st = sim.lock();
    let cfg = &mut st.user_cfg;
    if cfg.pools.contains_key(pool) {
        return Err(failed(what, format!("pool '{pool}' already exists")));
    }
    let leaf = match pool.rsplit_once('/') {
        Some((parent, leaf)) => {
            if !cfg.pools.contains_key(parent) {
                return Err(failed(
                    what,
                    format!("parent '{parent}' of pool '{pool}' does not exist"),
                ));
            }
            leaf
        }
        None => pool.as_str(),
    };
    if !leaf.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(failed(what, "pool name must start with a letter"));
    }
    cfg.pools.insert(
        pool.clone(),
        Pool {
            comment: params.get("comment").filter(|c| !c.is_empty()).cloned(),
            ..Default::default()
        },
    );
    Ok(Value::Null)
}

/// `PUT /pools` and `PUT /pools/{poolid}` (update_pool): the comment, and VMs or storages
/// added (or with `delete`, removed); a VM in another pool moves only with `allow-move`.
/// Every check runs before any change (the whole update is one `lock_user_config`, written
/// only at its end). Each VM and storage named needs `check_perm_modify` on it, and a VM
/// moved `Pool.Allocate` on the pool it leaves.
pub fn update(sim: &Sim, checker: &Checker, params: &Params) -> ApiResult {
    let pool = &params["poolid"];
    verify_poolname(pool)?;
    let what = "update pools failed";
    let flag = |k: &str| params.get(k).is_some_and(|v| v == "1");
    let (delete, allow_move) = (flag("delete"), flag("allow-move"));
    let split = |k: &str| -> Vec<String> {
        params
            .get(k)
            .map(|v| {
                v.split([',', ';', ' ', '\0'])
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut vms = Vec::new();
    for v in split("vms") {
        let id: u32 = v.parse().map_err(|_| {
            ApiErr::param(
                "vms",
                format!("invalid format - value '{v}' does not look like a valid VM ID"),
            )
        })?;
        vms.push(id);
    }
    let storages = split("storage");
    let mut st = sim.lock();
    let mut cfg_pools = st.user_cfg.pools.clone();
    let mut vm_pool = st.user_cfg.vm_pool.clone();
    let Some(mut this) = cfg_pools.get(pool).cloned() else {
        return Err(failed(what, format!("pool '{pool}' does not exist")));
    };
    if let Some(c) = params.get("comment") {
        this.comment = Some(c.clone());
    }
    let perm_failed = |e: ApiErr| failed(what, e.msg);
    for vmid in vms {
        checker
            .check_perm_modify(&format!("/vms/{vmid}"))
            .map_err(perm_failed)?;
        if delete {
            if !this.vms.remove(&vmid) {
                return Err(failed(what, format!("VM {vmid} is not a pool member")));
            }
            vm_pool.remove(&vmid);
        } else {
            if this.vms.contains(&vmid) {
                return Err(failed(what, format!("VM {vmid} is already a pool member")));
            }
            if let Some(existing) = vm_pool.get(&vmid).cloned() {
                if !allow_move {
                    return Err(failed(
                        what,
                        format!(
                            "VM {vmid} belongs already to pool '{existing}' and 'allow-move' is not set"
                        ),
                    ));
                }
                checker
                    .check(&format!("/pool/{existing}"), &["Pool.Allocate"])
                    .map_err(perm_failed)?;
                if let Some(p) = cfg_pools.get_mut(&existing) {
                    p.vms.remove(&vmid);
                }
            }
            this.vms.insert(vmid);
            vm_pool.insert(vmid, pool.clone());
        }
    }
    for sid in storages {
        checker
            .check_perm_modify(&format!("/storage/{sid}"))
            .map_err(perm_failed)?;
        if delete {
            if !this.storage.remove(&sid) {
                return Err(failed(
                    what,
                    format!("Storage '{sid}' is not a pool member"),
                ));
            }
        } else if !this.storage.insert(sid.clone()) {
            return Err(failed(
                what,
                format!("Storage '{sid}' is already a pool member"),
            ));
        }
    }
    cfg_pools.insert(pool.clone(), this);
    st.user_cfg.pools = cfg_pools;
    st.user_cfg.vm_pool = vm_pool;
    Ok(Value::Null)
}

/// `DELETE /pools` and `DELETE /pools/{poolid}` (delete_pool): only an empty pool (destroyed
/// guests and removed storages do not count).
pub fn delete(sim: &Sim, params: &Params) -> ApiResult {
    let pool = &params["poolid"];
    verify_poolname(pool)?;
    let what = "delete pool failed";
    let mut st = sim.lock();
    let Some(this) = st.user_cfg.pools.get(pool) else {
        return Err(failed(what, format!("pool '{pool}' does not exist")));
    };
    let prefix = format!("{pool}/");
    if let Some(sub) = st.user_cfg.pools.keys().find(|k| k.starts_with(&prefix)) {
        return Err(failed(
            what,
            format!("pool '{pool}' is not empty (contains pool '{sub}')"),
        ));
    }
    if let Some(vmid) = this.vms.iter().find(|id| st.vms.contains_key(id)) {
        return Err(failed(
            what,
            format!("pool '{pool}' is not empty (contains VM {vmid})"),
        ));
    }
    if let Some(sid) = this
        .storage
        .iter()
        .find(|s| crate::storage::volumes::storage(s).is_some())
    {
        return Err(failed(
            what,
            format!("pool '{pool}' is not empty (contains storage '{sid}')"),
        ));
    }
    st.user_cfg.pools.remove(pool);
    Ok(Value::Null)
}

/// create_vm's early `check_pool_exist` (PVE::RPCEnvironment): `raise_perm_exc`, a 403.
pub fn check_pool_exist(sim: &Sim, pool: &str) -> Result<(), ApiErr> {
    if sim.lock().user_cfg.pools.contains_key(pool) {
        return Ok(());
    }
    Err(ApiErr {
        status: 403,
        msg: format!("Permission check failed (pool '{pool}' does not exist)"),
        errors: None,
    })
}

/// AccessControl.pm, add_vm_to_pool: at the end of create_vm's worker (and clone_vm's), a
/// pool that still exists gets the VM; one deleted meanwhile is skipped silently.
pub fn add_vm_to_pool(sim: &Sim, vmid: u32, pool: &str) {
    let mut st = sim.lock();
    if let Some(p) = st.user_cfg.pools.get_mut(pool) {
        p.vms.insert(vmid);
        st.user_cfg.vm_pool.insert(vmid, pool.to_string());
    }
}

/// AccessControl.pm, remove_vm_access: destroy_vm's worker takes the VM out of its pool.
pub fn remove_vm_access(sim: &Sim, vmid: u32) {
    let mut st = sim.lock();
    if let Some(pool) = st.user_cfg.vm_pool.remove(&vmid)
        && let Some(p) = st.user_cfg.pools.get_mut(&pool)
    {
        p.vms.remove(&vmid);
    }
}
