//! PVE's privileges and its built-in roles, after pve-access-control `PVE/AccessControl.pm`:
//! `$privgroups` (each category's root, admin, user and audit privileges), `create_roles`
//! (which builds `PVE{Cat}Admin`, `PVE{Cat}User`, `PVEAdmin`, `PVEAuditor` and
//! `PVETemplateUser` from it) and `$special_roles` (`NoAccess`, `Administrator`).
//!
//! Apart from the `user.cfg` parser so that the parser and the checks share one list of the
//! privileges PVE knows.

use std::collections::{BTreeMap, BTreeSet};

/// One category of `$privgroups`: its privileges by who gets them.
struct PrivGroup {
    category: &'static str,
    /// Only in `Administrator` (and root@pam).
    root: &'static [&'static str],
    /// In `PVE{Cat}Admin` and `PVEAdmin`.
    admin: &'static [&'static str],
    /// In `PVE{Cat}User` as well (a category with none has no such role).
    user: &'static [&'static str],
    /// In `PVEAuditor` as well.
    audit: &'static [&'static str],
}

/// AccessControl.pm `$privgroups`, PVE 8.4 (pve-access-control 8.2): the VM category before
/// 9.0 replaced `VM.Monitor` with the `VM.GuestAgent.*` privileges and added `VM.Replicate`.
const VM_8: PrivGroup = PrivGroup {
    category: "VM",
    root: &[],
    admin: &[
        "VM.Config.Disk",
        "VM.Config.CPU",
        "VM.Config.Memory",
        "VM.Config.Network",
        "VM.Config.HWType",
        "VM.Config.Options",
        "VM.Allocate",
        "VM.Clone",
        "VM.Migrate",
        "VM.Monitor",
        "VM.Snapshot",
        "VM.Snapshot.Rollback",
    ],
    user: &[
        "VM.Config.CDROM",
        "VM.Config.Cloudinit",
        "VM.Console",
        "VM.Backup",
        "VM.PowerMgmt",
    ],
    audit: &["VM.Audit"],
};

/// AccessControl.pm `$privgroups`, PVE 9.1 (pve-access-control 9.1); the other categories
/// are the same in 8.4.
const PRIVGROUPS: &[PrivGroup] = &[
    PrivGroup {
        category: "VM",
        root: &[],
        admin: &[
            "VM.Config.Disk",
            "VM.Config.CPU",
            "VM.Config.Memory",
            "VM.Config.Network",
            "VM.Config.HWType",
            "VM.Config.Options",
            "VM.Allocate",
            "VM.Clone",
            "VM.GuestAgent.Unrestricted",
            "VM.Migrate",
            "VM.Replicate",
            "VM.Snapshot",
            "VM.Snapshot.Rollback",
        ],
        user: &[
            "VM.Config.CDROM",
            "VM.Config.Cloudinit",
            "VM.Console",
            "VM.Backup",
            "VM.GuestAgent.FileRead",
            "VM.GuestAgent.FileSystemMgmt",
            "VM.GuestAgent.FileWrite",
            "VM.PowerMgmt",
        ],
        audit: &["VM.Audit", "VM.GuestAgent.Audit"],
    },
    PrivGroup {
        category: "Sys",
        root: &[
            "Sys.PowerMgmt",
            "Sys.Modify",
            "Sys.Incoming",
            "Sys.AccessNetwork",
        ],
        admin: &["Sys.Console", "Sys.Syslog"],
        user: &[],
        audit: &["Sys.Audit"],
    },
    PrivGroup {
        category: "Datastore",
        root: &[],
        admin: &["Datastore.Allocate", "Datastore.AllocateTemplate"],
        user: &["Datastore.AllocateSpace"],
        audit: &["Datastore.Audit"],
    },
    PrivGroup {
        category: "SDN",
        root: &[],
        admin: &["SDN.Allocate", "SDN.Audit"],
        user: &["SDN.Use"],
        audit: &["SDN.Audit"],
    },
    PrivGroup {
        category: "User",
        root: &["Realm.Allocate"],
        admin: &["User.Modify", "Group.Allocate", "Realm.AllocateUser"],
        user: &[],
        audit: &[],
    },
    PrivGroup {
        category: "Pool",
        root: &[],
        admin: &["Pool.Allocate"],
        user: &["Pool.Audit"],
        audit: &["Pool.Audit"],
    },
    PrivGroup {
        category: "Mapping",
        root: &[],
        admin: &["Mapping.Modify"],
        user: &["Mapping.Use"],
        audit: &["Mapping.Audit"],
    },
];

/// `$privgroups` of a PVE version (`--pve-version`).
fn privgroups(version: &str) -> impl Iterator<Item = &'static PrivGroup> {
    let pre_9 = !crate::versions::has(version, crate::versions::Change::GuestAgentPrivileges);
    PRIVGROUPS.iter().map(move |group| {
        if pre_9 && group.category == "VM" {
            &VM_8
        } else {
            group
        }
    })
}

/// AccessControl.pm `$valid_privs`: every privilege of `$privgroups` and
/// `Permissions.Modify` (in no group).
pub fn privileges(version: &str) -> BTreeSet<&'static str> {
    let mut all: BTreeSet<&'static str> = BTreeSet::from(["Permissions.Modify"]);
    for group in privgroups(version) {
        for list in [group.root, group.admin, group.user, group.audit] {
            all.extend(list.iter().copied());
        }
    }
    all
}

/// Whether PVE knows this privilege (AccessControl.pm `verify_privname`).
pub fn is_privilege(name: &str, version: &str) -> bool {
    privileges(version).contains(name)
}

/// A role: the privileges it grants.
pub type Role = BTreeSet<String>;

/// AccessControl.pm `create_roles` and `$special_roles`: the built-in roles, which every
/// `user.cfg` has and none may redefine (`role_is_special`: `parse_user_config` puts them
/// back over any `role:` line of the same name).
pub fn builtin_roles(version: &str) -> BTreeMap<String, Role> {
    let mut roles: BTreeMap<String, Role> = BTreeMap::new();
    let mut grant = |role: String, privs: &[&str]| {
        roles
            .entry(role)
            .or_default()
            .extend(privs.iter().map(|p| p.to_string()));
    };
    grant("NoAccess".into(), &[]);
    grant(
        "Administrator".into(),
        &privileges(version).into_iter().collect::<Vec<_>>(),
    );
    for group in privgroups(version) {
        let cat = group.category;
        for list in [group.admin, group.user, group.audit] {
            grant(format!("PVE{cat}Admin"), list);
            grant("PVEAdmin".into(), list);
        }
        if !group.user.is_empty() {
            grant(format!("PVE{cat}User"), group.user);
            grant(format!("PVE{cat}User"), group.audit);
        }
        grant("PVEAuditor".into(), group.audit);
    }
    // Only Administrator, root@pam and PVEMappingAdmin may use Mapping.Modify for now.
    roles
        .get_mut("PVEAdmin")
        .map(|r| r.remove("Mapping.Modify"));
    roles.insert(
        "PVETemplateUser".into(),
        ["VM.Clone", "VM.Audit"].map(String::from).into(),
    );
    roles
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(name: &str) -> Vec<String> {
        builtin_roles("9.1")[name].iter().cloned().collect()
    }

    // AccessControl.pm create_roles: a category's User role has its user and audit privileges.
    #[test]
    fn pve_vm_user_is_the_vm_user_and_audit_privileges() {
        assert_eq!(
            role("PVEVMUser"),
            [
                "VM.Audit",
                "VM.Backup",
                "VM.Config.CDROM",
                "VM.Config.Cloudinit",
                "VM.Console",
                "VM.GuestAgent.Audit",
                "VM.GuestAgent.FileRead",
                "VM.GuestAgent.FileSystemMgmt",
                "VM.GuestAgent.FileWrite",
                "VM.PowerMgmt",
            ]
        );
        assert_eq!(
            role("PVEDatastoreUser"),
            ["Datastore.AllocateSpace", "Datastore.Audit"]
        );
        assert_eq!(role("PVETemplateUser"), ["VM.Audit", "VM.Clone"]);
        // Sys and User have no user privileges, so no PVESysUser or PVEUserUser.
        assert!(!builtin_roles("9.1").contains_key("PVESysUser"));
        assert!(!builtin_roles("9.1").contains_key("PVEUserUser"));
    }

    // create_roles: the root privileges are in no role but Administrator; PVEAdmin lacks
    // Mapping.Modify.
    #[test]
    fn root_privileges_are_only_administrators() {
        let roles = builtin_roles("9.1");
        for (name, privs) in &roles {
            if name != "Administrator" {
                assert!(!privs.contains("Sys.Modify"), "{name}");
                assert!(!privs.contains("Permissions.Modify"), "{name}");
            }
        }
        assert!(roles["Administrator"].contains("Sys.AccessNetwork"));
        assert!(!roles["PVEAdmin"].contains("Mapping.Modify"));
        assert!(roles["PVEMappingAdmin"].contains("Mapping.Modify"));
        assert!(roles["PVEAuditor"].contains("Sys.Audit"));
        assert!(roles["NoAccess"].is_empty());
    }

    // pve-access-control 8.2 (PVE 8.4): VM.Monitor in the VM admin privileges, no
    // VM.GuestAgent.* privileges yet.
    #[test]
    fn pve_8_has_vm_monitor_and_no_guest_agent_privileges() {
        let roles = builtin_roles("8.4");
        assert!(roles["PVEVMAdmin"].contains("VM.Monitor"));
        assert!(!roles["PVEVMUser"].contains("VM.Monitor"));
        assert!(!roles["PVEAuditor"].contains("VM.GuestAgent.Audit"));
        assert!(is_privilege("VM.Monitor", "8.4"));
        assert!(!is_privilege("VM.Monitor", "9.1"));
        assert!(!is_privilege("VM.Replicate", "8.4"));
    }
}
