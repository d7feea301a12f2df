//! Least-privilege identities for the module's runs (issue 35): a `user.cfg` that grants one
//! use's role (`USES`) to a user and to privilege-separated tokens of it, on the guide's pool
//! and the other scopes the guide names, and a simulator started with it. The permissions
//! tests and the outages tests under least privilege both use it.

use std::path::Path;

use sankofa_proxmox::privileges::{Scope, USES, Use};
use serde_json::{Value, json};

use super::{Sim, scratch};

/// The user whose password and tokens the runs use.
pub const USER: &str = "automation@pve";

/// [`USER`]'s password, for a run by ticket.
pub const USER_PASSWORD: &str = "Automation-Pw-7";

/// The use `USES` names `name`.
pub fn usage(name: &str) -> &'static Use {
    USES.iter()
        .find(|usage| usage.name == name)
        .unwrap_or_else(|| panic!("USES has no use named {name:?}"))
}

/// A privilege as PVE 8 or 9 names it (`Use::on_pve8`).
pub fn named_on(usage: &Use, privilege: &'static str, pve8: bool) -> &'static str {
    usage
        .on_pve8
        .iter()
        .find(|(nine, _)| *nine == privilege)
        .filter(|_| pve8)
        .map(|(_, eight)| *eight)
        .unwrap_or(privilege)
}

/// `user.cfg` for one use: [`USER`] holds the whole role; token `all` too, and token `noN`
/// the role without its Nth privilege (every token with privilege separation). `pool_vms`
/// start in the pool `automation`, with the storages `local` and `local-lvm`.
pub fn user_cfg(usage: &Use, pool_vms: &[u32], pve8: bool) -> String {
    let mut cfg = format!("user:{USER}:1:0::::::\n");
    let tokens: Vec<(String, Option<usize>)> = std::iter::once(("all".to_string(), None))
        .chain((0..usage.privileges.len()).map(|i| (format!("no{i}"), Some(i))))
        .collect();
    for (token, _) in &tokens {
        cfg.push_str(&format!("token:{USER}!{token}:0:1::\n"));
    }
    let vms: Vec<String> = pool_vms.iter().map(u32::to_string).collect();
    cfg.push_str(&format!(
        "pool:automation::{}:local,local-lvm:\n",
        vms.join(",")
    ));
    let scopes = [Scope::Pool, Scope::Root, Scope::Bridge, Scope::Node];
    let mut grant = |who: &str, role: &str, privileges: Vec<&str>, scope: Scope| {
        if privileges.is_empty() {
            return;
        }
        let propagate = if scope == Scope::Root { 0 } else { 1 };
        cfg.push_str(&format!("role:{role}:{}:\n", privileges.join(",")));
        cfg.push_str(&format!("acl:{propagate}:{}:{who}:{role}:\n", scope.path()));
    };
    for scope in scopes {
        let at = |without: Option<usize>| -> Vec<&str> {
            usage
                .privileges
                .iter()
                .enumerate()
                .filter(|(i, (_, s))| *s == scope && Some(*i) != without)
                .map(|(_, (p, _))| named_on(usage, p, pve8))
                .collect()
        };
        grant(USER, &format!("User{scope:?}"), at(None), scope);
        for (token, without) in &tokens {
            grant(
                &format!("{USER}!{token}"),
                &format!("T{token}{scope:?}"),
                at(*without),
                scope,
            );
        }
    }
    cfg
}

/// A simulator with `usage`'s [`user_cfg`] (on PVE 8's names when `extra` has
/// `--pve-version 8.x`), [`USER`]'s password and the tokens' secrets (`secret-{token}`).
pub fn scoped_sim(usage: &Use, images: &[&Path], pool_vms: &[u32], extra: &[&str]) -> Sim {
    let pve8 = extra
        .windows(2)
        .any(|w| w[0] == "--pve-version" && w[1].starts_with('8'));
    let dir = scratch("user-cfg");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("user.cfg");
    std::fs::write(&path, user_cfg(usage, pool_vms, pve8)).unwrap();
    let mut args: Vec<String> = vec![
        "--user-cfg".into(),
        path.to_str().unwrap().into(),
        "--user".into(),
        format!("{USER}:{USER_PASSWORD}"),
        "--token".into(),
        format!("{USER}!all=secret-all"),
    ];
    for i in 0..usage.privileges.len() {
        args.push("--token".into());
        args.push(format!("{USER}!no{i}=secret-no{i}"));
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Sim::start(images, &args)
}

/// The module's options naming one of [`USER`]'s tokens (`all`, `no0`…).
pub fn token_options(name: &str) -> Value {
    json!({"api_token_id": format!("{USER}!{name}"), "api_token_secret": format!("secret-{name}")})
}

/// Connection options for one of [`USER`]'s tokens, straight to `sim`.
pub fn token(sim: &Sim, name: &str) -> Value {
    let mut conn = json!({"api_host": "127.0.0.1", "api_port": sim.port(),
                          "api_fingerprint": sim.fingerprint()});
    conn.as_object_mut()
        .unwrap()
        .extend(token_options(name).as_object().unwrap().clone());
    conn
}
