//! The read-only access lists peers' playbooks read, after pve-access-control's
//! `API2/User.pm`, `API2/Group.pm` and `API2/Domains.pm`: the users pve-sim was started with
//! (and their tokens), no groups (a fresh `user.cfg` has none), and the two realms every PVE
//! has (`domains.cfg`: `pam` and `pve`).

use serde_json::{Value, json};

use crate::http::handler::{ApiErr, ApiResult, Params};
use crate::state::Sim;

/// The realms of a fresh install (pve-access-control AccessControl.pm writes them at
/// install: `pam` "Linux PAM standard authentication", `pve` "Proxmox VE authentication
/// server").
const REALMS: &[(&str, &str, &str)] = &[
    ("pam", "pam", "Linux PAM standard authentication"),
    ("pve", "pve", "Proxmox VE authentication server"),
];

/// `user.cfg`'s users: every `--user`, and the owners of `--token`s.
fn user_ids(sim: &Sim) -> Vec<String> {
    let mut ids: Vec<String> = sim.opts.users.iter().map(|(u, _)| u.clone()).collect();
    for (t, _) in &sim.opts.tokens {
        if let Some((owner, _)) = t.split_once('!')
            && !ids.iter().any(|u| u == owner)
        {
            ids.push(owner.to_string());
        }
    }
    ids.sort();
    ids
}

/// User.pm `$extract_user_data`: `enable` and `expire` as `user.cfg` has them for a user
/// made without options; with `full`, its groups (none) and tokens.
fn user_data(sim: &Sim, user: &str, full: bool) -> Value {
    let mut v = json!({"enable": 1, "expire": 0});
    if full {
        v["groups"] = json!([]);
        let tokens: serde_json::Map<String, Value> = sim
            .opts
            .tokens
            .iter()
            .filter_map(|(t, _)| t.split_once('!'))
            .filter(|(owner, _)| *owner == user)
            .map(|(_, id)| (id.to_string(), json!({"expire": 0, "privsep": 1})))
            .collect();
        v["tokens"] = Value::Object(tokens);
    }
    v
}

/// `GET /access/users` (User.pm, index). Every user here can see all (the permission filter
/// of `User.Modify`/`Sys.Audit` on `/access/groups` passes for administrators, and a
/// read-only user still sees itself and those its audit role covers).
pub fn users(sim: &Sim, params: &Params) -> Value {
    let full = params.get("full").is_some_and(|v| v == "1");
    let enabled = params.get("enabled").map(|v| v == "1");
    let mut out = Vec::new();
    for user in user_ids(sim) {
        if enabled == Some(false) {
            continue;
        }
        let mut entry = user_data(sim, &user, full);
        // The index joins the groups into a string (an empty list gives ""), and lists the
        // tokens with their ids.
        if full {
            entry["groups"] = json!("");
            let tokens: Vec<Value> = entry["tokens"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(id, t)| {
                    let mut t = t.clone();
                    t["tokenid"] = json!(id);
                    t
                })
                .collect();
            entry["tokens"] = json!(tokens);
        }
        if let Some((_, realm)) = user.rsplit_once('@')
            && let Some((_, kind, _)) = REALMS.iter().find(|(r, _, _)| *r == realm)
        {
            entry["realm-type"] = json!(kind);
        }
        entry["userid"] = json!(user);
        out.push(entry);
    }
    json!(out)
}

/// `GET /access/users/{userid}` (User.pm, read_user; AccessControl.pm, check_user_exist:
/// `no such user ('…')`).
pub fn user(sim: &Sim, userid: &str) -> ApiResult {
    verify_username(userid)?;
    if !user_ids(sim).iter().any(|u| u == userid) {
        return Err(ApiErr::die(format!("no such user ('{userid}')")));
    }
    Ok(user_data(sim, userid, true))
}

/// PVE::Auth::Plugin verify_username: `user@realm`, the realm being a known realm's syntax.
fn verify_username(userid: &str) -> Result<(), ApiErr> {
    let ok = userid.rsplit_once('@').is_some_and(|(u, r)| {
        !u.is_empty()
            && u.len() <= 60
            && !u.contains([':', '/'])
            && r.len() >= 2
            && r.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    });
    if ok {
        Ok(())
    } else {
        Err(ApiErr::param(
            "userid",
            format!("invalid format - value '{userid}' does not look like a valid user name"),
        ))
    }
}

/// `GET /access/groups` (Group.pm, index): `user.cfg` has no groups.
pub fn groups() -> Value {
    json!([])
}

/// `GET /access/groups/{groupid}` (Group.pm, read_group).
pub fn group(groupid: &str) -> ApiResult {
    Err(ApiErr::die(format!("group '{groupid}' does not exist")))
}

/// `GET /access/domains` (Domains.pm, index).
pub fn domains() -> Value {
    json!(
        REALMS
            .iter()
            .map(|(realm, kind, comment)| json!({"realm": realm, "type": kind, "comment": comment}))
            .collect::<Vec<_>>()
    )
}

/// `GET /access/domains/{realm}` (Domains.pm, read): the realm's config with `digest`.
pub fn domain(realm: &str) -> ApiResult {
    let (_, kind, comment) = REALMS
        .iter()
        .find(|(r, _, _)| *r == realm)
        .ok_or_else(|| ApiErr::die(format!("domain '{realm}' does not exist")))?;
    let cfg: String = REALMS
        .iter()
        .map(|(r, k, c)| format!("{k}: {r}\n\tcomment {c}\n\n"))
        .collect();
    let digest = crate::tools::sha1_hex(&cfg);
    Ok(json!({"type": kind, "comment": comment, "digest": digest}))
}
