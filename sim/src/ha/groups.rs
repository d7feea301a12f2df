//! HA groups, after pve-ha-manager PVE/API2/HA/Groups.pm: `/cluster/ha/groups` index, read,
//! create, update, delete on `groups.cfg` ([`crate::ha::config::Group`]), as PVE 8
//! (pve-ha-manager 4.x, branch stable-4) serves them. PVE 9 (5.0.2) has migrated groups to
//! node-affinity rules and refuses every call ("cannot index groups: ha groups have been
//! migrated to rules", `have_groups_been_migrated`); pve-sim at 9.x never has groups, so it
//! always refuses.

use serde_json::{Value, json};

use crate::ha::config::{Group, HaState};
use crate::ha::rules::{is_config_id, parse_node_priority};
use crate::ha::version_gate::has_rules;
use crate::http::handler::{ApiErr, ApiResult, Params};
use crate::state::Sim;

/// PVE 9's refusal of each handler (Groups.pm: `cannot <what>: ha groups have been migrated
/// to rules`).
fn refuse_on_rules(sim: &Sim, what: &str) -> Result<(), ApiErr> {
    if has_rules(&sim.opts.version) {
        return Err(ApiErr::die(format!(
            "cannot {what}: ha groups have been migrated to rules"
        )));
    }
    Ok(())
}

fn boolean(value: &str) -> bool {
    matches!(value, "1" | "true" | "yes" | "on")
}

fn digest(ha: &HaState) -> String {
    let text: String = ha
        .groups
        .iter()
        .map(|(id, g)| {
            let mut s = format!("group: {id}\n\tnodes {}\n", g.nodes.join(","));
            for (k, on) in [("nofailback", g.nofailback), ("restricted", g.restricted)] {
                if on {
                    s.push_str(&format!("\t{k} 1\n"));
                }
            }
            if let Some(c) = &g.comment {
                s.push_str(&format!("\tcomment {c}\n"));
            }
            s + "\n"
        })
        .collect();
    crate::tools::sha1_hex(&text)
}

/// `$api_copy_config`.
fn copy_config(ha: &HaState, id: &str) -> Result<Value, ApiErr> {
    let g = ha
        .groups
        .get(id)
        .ok_or_else(|| ApiErr::die(format!("no such ha group '{id}'")))?;
    let mut v = json!({
        "group": id, "type": "group", "nodes": g.nodes.join(","), "digest": digest(ha),
    });
    for (k, on) in [("nofailback", g.nofailback), ("restricted", g.restricted)] {
        if on {
            v[k] = json!(1);
        }
    }
    if let Some(c) = &g.comment {
        v["comment"] = json!(c);
    }
    Ok(v)
}

/// The group's options checked: the id a `pve-configid`, the nodes a `pve-ha-group-node-list`,
/// `type` only `group`.
fn check(params: &Params) -> Result<(), ApiErr> {
    if let Some(id) = params.get("group")
        && !is_config_id(id)
    {
        return Err(ApiErr::param(
            "group",
            format!("invalid format - invalid configuration ID '{id}'"),
        ));
    }
    if let Some(nodes) = params.get("nodes")
        && !crate::tools::split_list(nodes)
            .iter()
            .all(|n| parse_node_priority(n).is_some())
    {
        return Err(ApiErr::param(
            "nodes",
            "invalid format - value does not look like a valid ha node",
        ));
    }
    if params.get("type").is_some_and(|t| t != "group") {
        return Err(ApiErr::die("types does not match"));
    }
    Ok(())
}

fn apply(group: &mut Group, params: &Params) {
    for (k, v) in params {
        match k.as_str() {
            "nodes" => group.nodes = crate::tools::split_list(v),
            "restricted" => group.restricted = boolean(v),
            "nofailback" => group.nofailback = boolean(v),
            "comment" => group.comment = Some(v.clone()),
            _ => {}
        }
    }
}

/// `GET /cluster/ha/groups` (index).
pub fn index(sim: &Sim) -> ApiResult {
    refuse_on_rules(sim, "index groups")?;
    let st = sim.lock();
    let list: Result<Vec<Value>, ApiErr> = st
        .ha
        .groups
        .keys()
        .map(|id| copy_config(&st.ha, id))
        .collect();
    Ok(json!(list?))
}

/// `GET /cluster/ha/groups/{group}` (read).
pub fn read(sim: &Sim, id: &str) -> ApiResult {
    refuse_on_rules(sim, "read group")?;
    copy_config(&sim.lock().ha, id)
}

/// `POST /cluster/ha/groups` (create).
pub fn create(sim: &Sim, params: &Params) -> ApiResult {
    refuse_on_rules(sim, "create group")?;
    check(params)?;
    let id = params.get("group").cloned().unwrap_or_default();
    let mut st = sim.lock();
    if st.ha.groups.contains_key(&id) {
        return Err(ApiErr::die(format!(
            "create ha group failed: ha group ID '{id}' already defined"
        )));
    }
    let mut group = Group::default();
    apply(&mut group, params);
    st.ha.groups.insert(id, group);
    Ok(Value::Null)
}

/// `PUT /cluster/ha/groups/{group}` (update): the digest asserted, `delete` of the optional
/// options only.
pub fn update(sim: &Sim, id: &str, params: &Params) -> ApiResult {
    refuse_on_rules(sim, "update group")?;
    check(params)?;
    let what = "update ha group failed";
    let mut st = sim.lock();
    if let Some(d) = params.get("digest")
        && *d != digest(&st.ha)
    {
        return Err(ApiErr::die(format!(
            "{what}: detected modified configuration - file changed by other user? Try again."
        )));
    }
    let Some(group) = st.ha.groups.get_mut(id) else {
        return Err(ApiErr::die(format!("{what}: no such ha group '{id}'")));
    };
    apply(group, params);
    for k in params
        .get("delete")
        .map(|d| crate::tools::split_list(d))
        .unwrap_or_default()
    {
        match k.as_str() {
            "nodes" => {
                return Err(ApiErr::die(format!(
                    "{what}: unable to delete required option '{k}'"
                )));
            }
            "restricted" => group.restricted = false,
            "nofailback" => group.nofailback = false,
            "comment" => group.comment = None,
            _ => return Err(ApiErr::die(format!("{what}: no such option '{k}'"))),
        }
    }
    Ok(Value::Null)
}

/// `DELETE /cluster/ha/groups/{group}` (delete): refused while a resource uses it.
pub fn delete(sim: &Sim, id: &str) -> ApiResult {
    refuse_on_rules(sim, "delete group")?;
    let mut st = sim.lock();
    if let Some((sid, _)) = st
        .ha
        .resources
        .iter()
        .find(|(_, r)| r.opts.get("group").is_some_and(|g| g == id))
    {
        return Err(ApiErr::die(format!(
            "delete ha group failed: ha group is used by service '{sid}'"
        )));
    }
    st.ha.groups.remove(id);
    Ok(Value::Null)
}
