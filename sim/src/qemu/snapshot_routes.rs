//! The snapshot routes below `/nodes/{node}/qemu/{vmid}/snapshot` and their parameters, after
//! qemu-server API2/Qemu.pm (`snapshot_list`, `snapshot`, `snapshot_cmd_idx`,
//! `get_snapshot_config`, `update_snapshot_config`, `rollback`, `delsnapshot`) and
//! pve-common's `pve-snapshot-name` (JSONSchema.pm).
//!
//! Apart from `snapshots` (what each call does) so that a refused parameter has one home:
//! `snapshot_routes` → `snapshots`.

use std::sync::Arc;

use crate::http::handler::{ApiErr, ApiResult, Auth, Params};
use crate::qemu::snapshots::{
    cmd_index, create, delete, get_config, list, rollback, update_config,
};
use crate::schema::{self, Param, Ty, opt, req};
use crate::state::Sim;

/// pve-common JSONSchema.pm `$CONFIGID_RE` (`[a-z][a-z0-9_-]+`, case-insensitive), the
/// format of `pve-snapshot-name`.
fn is_config_id(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() >= 2
        && b[0].is_ascii_alphabetic()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-')
}

/// pve-common's `pve-snapshot-name` standard option, checked by [`check`]: a `pve-configid`
/// of at most 40 characters.
fn snapname_param() -> Param {
    req("snapname", Ty::Str)
}

/// Checks a snapshot name as `pve-configid` does (JSONSchema.pm pve_verify_configid).
pub fn check_snapname(id: &str) -> Result<(), String> {
    if is_config_id(id) {
        Ok(())
    } else {
        Err(format!("invalid configuration ID '{id}'"))
    }
}

/// `schema::check` with `snapname` checked as JSONSchema.pm check_prop does: the format
/// first (`invalid format - …`), then `maxLength`.
fn check(spec: &[Param], params: &Params) -> Result<(), ApiErr> {
    let mut errors = schema::check(spec, params).err().unwrap_or_default();
    if let Some(name) = params.get("snapname") {
        let problem = match check_snapname(name) {
            Err(e) => Some(format!("invalid format - {e}")),
            Ok(()) if name.chars().count() > 40 => {
                Some("value may only be 40 characters long".to_string())
            }
            Ok(()) => None,
        };
        if let Some(p) = problem {
            errors.entry("snapname".into()).or_insert(p);
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiErr::params(errors))
    }
}

/// The routes below `/nodes/{node}/qemu/{vmid}/snapshot` (`tail` is the path after `{vmid}`),
/// each checked against its parameters and the node known, or `None` for another path.
pub fn route(
    sim: &Arc<Sim>,
    method: &str,
    tail: &[&str],
    params: &mut Params,
    auth: &Auth,
    check_node: impl Fn() -> Result<(), ApiErr>,
) -> Option<ApiResult> {
    let node = params.get("node").cloned().unwrap_or_default();
    let vmid: u32 = params.get("vmid").and_then(|v| v.parse().ok()).unwrap_or(0);
    if let ["snapshot", name, ..] = tail {
        if params.get("snapname").is_some_and(|old| old != name) {
            return Some(Err(ApiErr::param(
                "snapname",
                "duplicate parameter (already defined in URI) with conflicting values!",
            )));
        }
        params.insert("snapname".into(), name.to_string());
    }
    let checked = |spec: Vec<Param>, params: &Params| -> Result<(), ApiErr> {
        check(&spec, params)?;
        check_node()
    };
    let name = params.get("snapname").cloned().unwrap_or_default();
    let result = match (method, tail) {
        ("GET", ["snapshot"]) => checked(list_spec(), params).and_then(|_| list(sim, &node, vmid)),
        ("POST", ["snapshot"]) => {
            checked(create_spec(), params).and_then(|_| create(sim, &node, vmid, params, auth))
        }
        ("GET", ["snapshot", _]) => checked(one_spec(), params).map(|_| cmd_index()),
        ("GET", ["snapshot", _, "config"]) => {
            checked(one_spec(), params).and_then(|_| get_config(sim, &node, vmid, &name))
        }
        ("PUT", ["snapshot", _, "config"]) => checked(update_spec(), params)
            .and_then(|_| update_config(sim, &node, vmid, &name, params)),
        ("POST", ["snapshot", _, "rollback"]) => checked(rollback_spec(), params)
            .and_then(|_| rollback(sim, &node, vmid, &name, params, auth)),
        ("DELETE", ["snapshot", _]) => checked(delete_spec(), params)
            .and_then(|_| delete(sim, &node, vmid, &name, params, auth)),
        _ => return None,
    };
    Some(result)
}

fn path_params(extra: Vec<Param>) -> Vec<Param> {
    schema::vm_path(extra)
}

/// `GET …/snapshot` (snapshot_list).
pub fn list_spec() -> Vec<Param> {
    path_params(vec![])
}

/// `POST …/snapshot` (snapshot).
pub fn create_spec() -> Vec<Param> {
    path_params(vec![
        snapname_param(),
        opt("vmstate", Ty::Bool),
        opt("description", Ty::Str),
    ])
}

/// `GET …/snapshot/{snapname}` (snapshot_cmd_idx) and `GET …/snapshot/{snapname}/config`.
pub fn one_spec() -> Vec<Param> {
    path_params(vec![snapname_param()])
}

/// `PUT …/snapshot/{snapname}/config` (update_snapshot_config).
pub fn update_spec() -> Vec<Param> {
    path_params(vec![snapname_param(), opt("description", Ty::Str)])
}

/// `POST …/snapshot/{snapname}/rollback` (rollback).
pub fn rollback_spec() -> Vec<Param> {
    path_params(vec![snapname_param(), opt("start", Ty::Bool)])
}

/// `DELETE …/snapshot/{snapname}` (delsnapshot).
pub fn delete_spec() -> Vec<Param> {
    path_params(vec![snapname_param(), opt("force", Ty::Bool)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_are_config_ids() {
        assert!(check_snapname("before-upgrade_1").is_ok());
        assert_eq!(
            check_snapname("1st").unwrap_err(),
            "invalid configuration ID '1st'"
        );
        assert!(check_snapname("a").is_err());
    }
}
