//! The parameter tables of pve-access-control's endpoints (the ticket, users, groups,
//! realms) and of pve-manager's `API2/Pool.pm`, as PVE 9.1 declares them.

use super::engine::{Param, Ty, opt, req};

pub fn ticket() -> Vec<Param> {
    vec![
        req("username", Ty::StrMax(64)),
        req("password", Ty::Str),
        opt("otp", Ty::Str),
        opt("realm", Ty::Str),
        opt("path", Ty::Str),
        opt("privs", Ty::Str),
        opt("new-format", Ty::Bool),
        opt("tfa-challenge", Ty::Str),
    ]
}

/// `GET /access/users` (pve-access-control API2/User.pm, index).
pub fn user_index() -> Vec<Param> {
    vec![opt("enabled", Ty::Bool), opt("full", Ty::Bool)]
}

/// `GET /access/users/{userid}`, `/access/groups/{groupid}`, `/access/domains/{realm}`.
pub fn one_id(name: &'static str) -> Vec<Param> {
    vec![req(name, Ty::Str)]
}

/// `GET /pools` (pve-manager API2/Pool.pm, index).
pub fn pool_index() -> Vec<Param> {
    vec![
        opt("poolid", Ty::Str),
        opt("type", Ty::Enum(&["qemu", "lxc", "storage"])),
    ]
}

/// `POST /pools` (create_pool).
pub fn pool_create() -> Vec<Param> {
    vec![req("poolid", Ty::Str), opt("comment", Ty::Str)]
}

/// `PUT /pools` and `PUT /pools/{poolid}` (update_pool, update_pool_deprecated).
pub fn pool_update() -> Vec<Param> {
    vec![
        req("poolid", Ty::Str),
        opt("comment", Ty::Str),
        opt("vms", Ty::Str),
        opt("storage", Ty::Str),
        opt("allow-move", Ty::Bool),
        opt("delete", Ty::Bool),
    ]
}

/// `GET /pools/{poolid}` (read_pool).
pub fn pool_read() -> Vec<Param> {
    vec![
        req("poolid", Ty::Str),
        opt("type", Ty::Enum(&["qemu", "lxc", "storage"])),
    ]
}

/// `DELETE /pools` and `DELETE /pools/{poolid}` (delete_pool).
pub fn pool_delete() -> Vec<Param> {
    vec![req("poolid", Ty::Str)]
}
