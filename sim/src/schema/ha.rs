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

const RULE_TYPES: &[&str] = &["node-affinity", "resource-affinity"];

/// `GET /cluster/ha/rules` (API2/HA/Rules.pm, index; PVE 9).
pub fn ha_rules_index() -> Vec<Param> {
    vec![opt("type", Ty::Enum(RULE_TYPES)), opt("resource", Ty::Str)]
}

/// `GET`/`DELETE /cluster/ha/rules/{rule}` (read_rule, delete_rule).
pub fn ha_rule_id() -> Vec<Param> {
    vec![req("rule", Ty::Str)]
}

/// `POST /cluster/ha/rules` (create_rule; PVE::HA::Rules createSchema) and, with `delete`
/// and `digest` and `resources` optional, `PUT /cluster/ha/rules/{rule}` (update_rule).
pub fn ha_rule_write(update: bool) -> Vec<Param> {
    let mut p = vec![
        req("rule", Ty::Str),
        req("type", Ty::Enum(RULE_TYPES)),
        opt("affinity", Ty::Enum(&["positive", "negative"])),
        opt("comment", Ty::StrMax(4096)),
        opt("disable", Ty::Bool),
        opt("nodes", Ty::Str),
        opt("strict", Ty::Bool),
    ];
    if update {
        p.push(opt("resources", Ty::Str));
        p.push(opt("delete", Ty::StrMax(4096)));
        p.push(opt("digest", Ty::StrMax(64)));
    } else {
        p.push(req("resources", Ty::Str));
    }
    p
}

/// `GET`/`DELETE /cluster/ha/groups/{group}` (API2/HA/Groups.pm read, delete; PVE 8).
pub fn ha_group_id() -> Vec<Param> {
    vec![req("group", Ty::Str)]
}

/// `POST /cluster/ha/groups` (create; PVE::HA::Groups createSchema) and `PUT
/// /cluster/ha/groups/{group}` (update; updateSchema).
pub fn ha_group_write(update: bool) -> Vec<Param> {
    let mut p = vec![
        req("group", Ty::Str),
        opt("type", Ty::Enum(&["group"])),
        opt("restricted", Ty::Bool),
        opt("nofailback", Ty::Bool),
        opt("comment", Ty::StrMax(4096)),
    ];
    if update {
        p.push(opt("nodes", Ty::Str));
        p.push(opt("delete", Ty::StrMax(4096)));
        p.push(opt("digest", Ty::StrMax(64)));
    } else {
        p.push(req("nodes", Ty::Str));
    }
    p
}
