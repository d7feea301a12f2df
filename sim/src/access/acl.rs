//! What a user or token may do on a path, after pve-access-control: `AccessControl.pm`
//! `roles` (the ACL tree walked from `/`, propagation, user over group, `NoAccess`) and
//! `RPCEnvironment.pm` `permissions` with `$compile_acl_path` (roles inherited through pools,
//! a privilege-separated token's privileges intersected with its user's) and
//! `get_effective_permissions`. Pure functions over `user.cfg`; the checks are in `check`.

use std::collections::BTreeMap;

use crate::access::user_cfg::{AccessCfg, AclNode, Grants, UserCfg, split_tokenid};

/// The privileges set on a path, each with its propagate flag (informational, as in PVE).
pub type Privileges = BTreeMap<String, bool>;

/// The roles from one ACL entry that apply on this segment: all on the last one, the
/// propagated ones above it.
fn applying(grants: Option<&Grants>, last: bool) -> Option<Grants> {
    let new: Grants = grants?
        .iter()
        .filter(|(_, propagate)| last || **propagate)
        .map(|(role, propagate)| (role.clone(), *propagate))
        .collect();
    (!new.is_empty()).then_some(new)
}

/// AccessControl.pm `roles`: the roles `user` (a userid or tokenid) has on `path`, pools not
/// considered. Deeper ACLs replace higher ones; on one path a token's or a user's own entry
/// wins over its groups'. A non-privsep token has its user's roles.
pub fn roles(cfg: &AccessCfg, user: &str, path: &str) -> Grants {
    if user == "root@pam" {
        return Grants::from([("Administrator".to_string(), true)]);
    }
    if let Some((owner, _)) = split_tokenid(user) {
        let Some(token) = cfg.token(user) else {
            return Grants::new();
        };
        if !token.privsep {
            return roles(cfg, owner, path);
        }
    }
    let segs: Vec<&str> = if path == "/" {
        vec![""]
    } else {
        path.split('/').collect()
    };
    let mut result = Grants::new();
    let mut node: Option<&AclNode> = Some(&cfg.acl_root);
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        if !seg.is_empty() {
            node = node.and_then(|n| n.children.get(*seg));
        }
        let Some(here) = node else {
            continue;
        };
        if let Some(new) = applying(here.tokens.get(user), last) {
            result = new;
            continue;
        }
        if let Some(new) = applying(here.users.get(user), last) {
            result = new;
            continue;
        }
        let mut from_groups = Grants::new();
        for (group, grants) in &here.groups {
            if cfg.groups.get(group).is_some_and(|m| m.contains(user))
                && let Some(new) = applying(Some(grants), last)
            {
                from_groups.extend(new);
            }
        }
        if !from_groups.is_empty() {
            result = from_groups;
        }
    }
    if let Some(propagate) = result.get("NoAccess") {
        return Grants::from([("NoAccess".to_string(), *propagate)]);
    }
    result
}

/// RPCEnvironment.pm `$compile_acl_path`: the roles on `path` with those inherited from the
/// pools the VM or storage is in (never propagated, never over `NoAccess`), as privileges.
fn compile_acl_path(cfg: &AccessCfg, pools: &UserCfg, user: &str, path: &str) -> Privileges {
    let mut pool_roles = Grants::new();
    for (name, pool) in &pools.pools {
        let members = pool
            .vms
            .iter()
            .map(|vmid| format!("/vms/{vmid}"))
            .chain(pool.storage.iter().map(|sid| format!("/storage/{sid}")));
        if members.into_iter().any(|m| m == path) {
            for role in roles(cfg, user, &format!("/pool/{name}")).into_keys() {
                pool_roles.insert(role, true);
            }
        }
    }
    let mut set = roles(cfg, user, path);
    if !pool_roles.is_empty() && !set.contains_key("NoAccess") {
        if pool_roles.contains_key("NoAccess") {
            set = Grants::from([("NoAccess".to_string(), false)]);
        } else {
            for role in pool_roles.into_keys() {
                set.entry(role).or_insert(false);
            }
        }
    }
    let mut privs = Privileges::new();
    for (role, propagate) in &set {
        for privilege in cfg.roles.get(role).into_iter().flatten() {
            let entry = privs.entry(privilege.clone()).or_insert(false);
            *entry = *entry || *propagate;
        }
    }
    privs
}

/// RPCEnvironment.pm `permissions`: the privileges `user` (a userid or tokenid) has on
/// `path`. root@pam has every privilege; a token that `user.cfg` lacks has none; a
/// non-privsep token has its user's; a privsep token has those both it and its user have.
pub fn permissions(cfg: &AccessCfg, pools: &UserCfg, user: &str, path: &str) -> Privileges {
    if user == "root@pam" {
        return cfg.roles["Administrator"]
            .iter()
            .map(|p| (p.clone(), true))
            .collect();
    }
    let Some((owner, _)) = split_tokenid(user) else {
        return compile_acl_path(cfg, pools, user, path);
    };
    let Some(token) = cfg.token(user) else {
        return Privileges::new();
    };
    let owner_privs = permissions(cfg, pools, owner, path);
    if !token.privsep {
        return owner_privs;
    }
    let own = compile_acl_path(cfg, pools, user, path);
    if owner == "root@pam" {
        return own;
    }
    own.into_iter()
        .filter_map(|(p, propagate)| {
            let theirs = owner_privs.get(&p)?;
            Some((p, propagate && *theirs))
        })
        .collect()
}

/// RPCEnvironment.pm `get_effective_permissions`: the privileges on every top-level path,
/// every path an ACL names and every pool member's path, leaving out paths with none.
pub fn effective_permissions(
    cfg: &AccessCfg,
    pools: &UserCfg,
    user: &str,
) -> BTreeMap<String, Privileges> {
    let mut paths: Vec<String> = [
        "/",
        "/access",
        "/access/groups",
        "/nodes",
        "/pool",
        "/sdn",
        "/storage",
        "/vms",
    ]
    .map(String::from)
    .into();
    paths.extend(cfg.acl_root.paths());
    for pool in pools.pools.values() {
        paths.extend(pool.vms.iter().map(|vmid| format!("/vms/{vmid}")));
        paths.extend(pool.storage.iter().map(|sid| format!("/storage/{sid}")));
    }
    paths
        .into_iter()
        .map(|path| {
            let privs = permissions(cfg, pools, user, &path);
            (path, privs)
        })
        .filter(|(_, privs)| !privs.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
user:alice@pve:1:0::::::
user:bob@pve:1:0::::::
token:alice@pve!sep:0:1::
token:alice@pve!full:0:0::
token:root@pam!sep:0:1::
group:ops:alice@pve,bob@pve::
pool:web:::local-lvm:
acl:1:/:@ops:PVEAuditor:
acl:1:/pool/web:alice@pve:PVEVMAdmin,PVEDatastoreUser:
acl:1:/pool/web:alice@pve!sep:PVEVMUser:
acl:0:/vms/200:alice@pve:PVEVMUser:
acl:1:/vms/300:alice@pve:NoAccess:
acl:1:/pool/web:root@pam!sep:PVEVMUser:
";

    fn setup() -> (AccessCfg, UserCfg) {
        let cfg = AccessCfg::parse(FILE, "9.1").unwrap();
        let mut pools = cfg.pools.clone();
        pools.pools.get_mut("web").unwrap().vms.insert(100);
        pools.vm_pool.insert(100, "web".into());
        (cfg, pools)
    }

    fn has(cfg: &(AccessCfg, UserCfg), user: &str, path: &str, privilege: &str) -> bool {
        permissions(&cfg.0, &cfg.1, user, path).contains_key(privilege)
    }

    // AccessControl.pm roles: a propagated group ACL on / reaches /vms/1; a user's own ACL
    // on /vms/200 replaces it there (user privs override group privs).
    #[test]
    fn roles_walk_the_tree_and_user_entries_beat_group_entries() {
        let cfg = setup();
        assert!(has(&cfg, "bob@pve", "/vms/1", "VM.Audit"));
        assert!(has(&cfg, "bob@pve", "/nodes/pve1", "Sys.Audit"));
        assert!(has(&cfg, "alice@pve", "/vms/200", "VM.PowerMgmt"));
        assert!(!has(&cfg, "alice@pve", "/vms/200", "Sys.Audit"));
        // Not propagated: nothing below /vms/200 gets it.
        assert!(!has(&cfg, "alice@pve", "/vms/200/x", "VM.PowerMgmt"));
        // NoAccess wins over the rest.
        assert!(permissions(&cfg.0, &cfg.1, "alice@pve", "/vms/300").is_empty());
    }

    // RPCEnvironment.pm $compile_acl_path: a pool's roles reach its VMs and storages.
    #[test]
    fn pool_members_inherit_the_pools_roles() {
        let cfg = setup();
        assert!(has(&cfg, "alice@pve", "/vms/100", "VM.Allocate"));
        assert!(has(
            &cfg,
            "alice@pve",
            "/storage/local-lvm",
            "Datastore.AllocateSpace"
        ));
        assert!(!has(&cfg, "alice@pve", "/vms/101", "VM.Allocate"));
        // Inherited privileges are never propagated.
        assert_eq!(
            permissions(&cfg.0, &cfg.1, "alice@pve", "/vms/100").get("VM.Allocate"),
            Some(&false)
        );
    }

    // RPCEnvironment.pm permissions: a privsep token gets the intersection of its ACLs and
    // its user's; a non-privsep one its user's; an unknown one nothing; root@pam's privsep
    // token only its own ACLs.
    #[test]
    fn privsep_tokens_get_the_intersection() {
        let cfg = setup();
        assert!(has(&cfg, "alice@pve!sep", "/vms/100", "VM.PowerMgmt"));
        // The token's PVEVMUser has no VM.Allocate; its user's PVEVMAdmin does.
        assert!(!has(&cfg, "alice@pve!sep", "/vms/100", "VM.Allocate"));
        assert!(has(&cfg, "alice@pve!full", "/vms/100", "VM.Allocate"));
        // The token has no ACL on /: its user's PVEAuditor there does not reach it.
        assert!(!has(&cfg, "alice@pve!sep", "/", "Sys.Audit"));
        assert!(permissions(&cfg.0, &cfg.1, "alice@pve!nope", "/").is_empty());
        assert!(has(&cfg, "root@pam", "/", "Sys.Modify"));
        assert!(has(&cfg, "root@pam!sep", "/vms/100", "VM.PowerMgmt"));
        assert!(!has(&cfg, "root@pam!sep", "/", "Sys.Modify"));
    }

    // get_effective_permissions: paths with no privileges are left out.
    #[test]
    fn effective_permissions_leave_out_empty_paths() {
        let cfg = setup();
        let all = effective_permissions(&cfg.0, &cfg.1, "alice@pve!sep");
        assert_eq!(
            all.keys().collect::<Vec<_>>(),
            ["/pool/web", "/storage/local-lvm", "/vms/100"]
        );
    }
}
