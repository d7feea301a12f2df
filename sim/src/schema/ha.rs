//! The parameter tables of pve-ha-manager's resource endpoints (API2/HA/Resources.pm), as
//! PVE 9.1 declares them.

use super::engine::{Param, Ty, opt, req};

const HA_STATES: &[&str] = &["started", "stopped", "enabled", "disabled", "ignored"];

/// `GET /cluster/ha/resources` (pve-ha-manager API2/HA/Resources.pm, index).
pub fn ha_index() -> Vec<Param> {
    vec![opt("type", Ty::Enum(&["ct", "vm"]))]
}

/// `GET`/`DELETE /cluster/ha/resources/{sid}` (read, delete).
pub fn ha_sid(delete: bool) -> Vec<Param> {
    let mut p = vec![req("sid", Ty::Str)];
    if delete {
        p.push(opt("purge", Ty::Bool));
    }
    p
}

fn ha_options() -> Vec<Param> {
    vec![
        opt("type", Ty::Enum(&["ct", "vm"])),
        opt("state", Ty::Enum(HA_STATES)),
        opt("group", Ty::Str),
        opt("max_restart", Ty::Int(Some(0), None)),
        opt("max_relocate", Ty::Int(Some(0), None)),
        opt("failback", Ty::Bool),
        opt("comment", Ty::StrMax(4096)),
    ]
}

/// `POST /cluster/ha/resources` (create; PVE::HA::Resources createSchema).
pub fn ha_create() -> Vec<Param> {
    let mut p = vec![req("sid", Ty::Str)];
    p.extend(ha_options());
    p
}

/// `PUT /cluster/ha/resources/{sid}` (update; updateSchema).
pub fn ha_update() -> Vec<Param> {
    let mut p = vec![req("sid", Ty::Str)];
    p.extend(ha_options());
    p.push(opt("delete", Ty::Str));
    p.push(opt("digest", Ty::StrMax(64)));
    p
}
