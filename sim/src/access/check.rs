//! Permission checks as handlers make them, after pve-access-control `RPCEnvironment.pm`:
//! `check`, `check_any`, `check_full` and `check_vm_perm`, failing with
//! PVE's 403 `Permission check failed (...)` (pve-common `PVE::Exception::raise_perm_exc`).
//!
//! A [`Checker`] holds the caller and a copy of the pools, so a handler makes one before it
//! takes the state's lock and checks as often as it needs.

use crate::access::acl::{self, Privileges};
use crate::access::user_cfg::UserCfg;
use crate::http::handler::{ApiErr, Auth};
use crate::state::Sim;

/// pve-common `raise_perm_exc`: HTTP 403, `Permission check failed`, with what failed in
/// parentheses when given.
pub fn perm_exc(what: Option<&str>) -> ApiErr {
    ApiErr {
        status: 403,
        msg: match what {
            Some(what) => format!("Permission check failed ({what})"),
            None => "Permission check failed".into(),
        },
        errors: None,
    }
}

/// The caller's permissions, over `user.cfg` and the pools as they were when it was made.
pub struct Checker<'a> {
    sim: &'a Sim,
    /// The userid or tokenid checked.
    pub user: String,
    /// A `root@pam` ticket: PVE's `check_api2_permissions` lets it through unchecked.
    pub root_ticket: bool,
    pools: UserCfg,
}

impl<'a> Checker<'a> {
    /// The checks of the authenticated caller. Takes the state's lock: make it before
    /// taking that lock.
    pub fn new(sim: &'a Sim, auth: &Auth) -> Checker<'a> {
        Checker {
            sim,
            user: auth.id.clone(),
            root_ticket: auth.root_ticket,
            pools: sim.lock().user_cfg.clone(),
        }
    }

    /// The same checks for another user or token (`GET /access/permissions?userid=`).
    pub fn for_user(&self, user: &str) -> Checker<'a> {
        Checker {
            sim: self.sim,
            user: user.to_string(),
            root_ticket: user == "root@pam",
            pools: self.pools.clone(),
        }
    }

    /// RPCEnvironment.pm `permissions`: the privileges on `path`.
    pub fn permissions(&self, path: &str) -> Privileges {
        acl::permissions(&self.sim.opts.access, &self.pools, &self.user, path)
    }

    /// RPCEnvironment.pm `get_effective_permissions`.
    pub fn effective_permissions(&self) -> std::collections::BTreeMap<String, Privileges> {
        acl::effective_permissions(&self.sim.opts.access, &self.pools, &self.user)
    }

    /// The groups `user.cfg` has `userid` in.
    pub fn groups_of(&self, userid: &str) -> Vec<String> {
        let groups = &self.sim.opts.access.groups;
        groups
            .iter()
            .filter(|(_, members)| members.contains(userid))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Whether every privilege is set on `path` (`check` with `$noerr`).
    pub fn has(&self, path: &str, privs: &[&str]) -> bool {
        let set = self.permissions(path);
        privs.iter().all(|p| set.contains_key(*p))
    }

    /// Whether any privilege is set on `path` (`check_any` with `$noerr`).
    pub fn has_any(&self, path: &str, privs: &[&str]) -> bool {
        let set = self.permissions(path);
        privs.iter().any(|p| set.contains_key(*p))
    }

    /// RPCEnvironment.pm `check`: every privilege on `path`, else 403 naming the first
    /// missing one: `Permission check failed (/vms/100, VM.PowerMgmt)`.
    pub fn check(&self, path: &str, privs: &[&str]) -> Result<(), ApiErr> {
        let set = self.permissions(path);
        match privs.iter().find(|p| !set.contains_key(**p)) {
            Some(missing) => Err(perm_exc(Some(&format!("{path}, {missing}")))),
            None => Ok(()),
        }
    }

    /// RPCEnvironment.pm `check_any`: one of the privileges on `path`, else 403 naming
    /// them all: `Permission check failed (/vms/100, VM.Config.Disk|VM.Config.CPU)`.
    pub fn check_any(&self, path: &str, privs: &[&str]) -> Result<(), ApiErr> {
        if self.has_any(path, privs) {
            return Ok(());
        }
        Err(perm_exc(Some(&format!("{path}, {}", privs.join("|")))))
    }

    /// RPCEnvironment.pm `check_full`: `check_any` with `any`, else `check`.
    pub fn check_full(&self, path: &str, privs: &[&str], any: bool) -> Result<(), ApiErr> {
        if any {
            self.check_any(path, privs)
        } else {
            self.check(path, privs)
        }
    }

    /// RPCEnvironment.pm `check_perm_modify`: `Permissions.Modify` on the path, or the
    /// privilege that allocates what it names (`VM.Allocate` for `/vms/…`,
    /// `Datastore.Allocate` for `/storage/…`, `Pool.Allocate` for `/pool/…`).
    pub fn check_perm_modify(&self, path: &str) -> Result<(), ApiErr> {
        let allocate = if path.starts_with("/storage/") {
            Some("Datastore.Allocate")
        } else if path.starts_with("/vms/") {
            Some("VM.Allocate")
        } else if path.starts_with("/pool/") {
            Some("Pool.Allocate")
        } else {
            None
        };
        let privs: Vec<&str> = std::iter::once("Permissions.Modify")
            .chain(allocate)
            .collect();
        self.check_any(path, &privs)
    }

    /// RPCEnvironment.pm `check_vm_perm`: the privileges on the VM's pool, or else on
    /// `/vms/{vmid}` (whose failure is the one reported).
    pub fn check_vm_perm(
        &self,
        vmid: u32,
        pool: Option<&str>,
        privs: &[&str],
        any: bool,
    ) -> Result<(), ApiErr> {
        if let Some(pool) = pool
            && self
                .check_full(&format!("/pool/{pool}"), privs, any)
                .is_ok()
        {
            return Ok(());
        }
        self.check_full(&format!("/vms/{vmid}"), privs, any)
    }
}
