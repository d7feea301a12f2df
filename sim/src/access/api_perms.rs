//! The `permissions` of the API endpoints pve-sim serves, as PVE 9.1's API schema declares
//! them per method (8.4's where it differs), and pve-access-control `RPCEnvironment.pm`
//! `check_api2_permissions` / `exec_api2_perm_check`, which pve-manager's `HTTPServer.pm`
//! `rest_handler` runs before the handler (and before the hop to pvedaemon).
//!
//! Transcribed by hand, one row per method and path, each citing its handler. The endpoints
//! not listed here declare `user => 'all'` or `user => 'world'`: their handlers check (or
//! filter) themselves.

use crate::access::check::{Checker, perm_exc};
use crate::http::handler::{ApiErr, Params};

/// One test of a `permissions => { check => [...] }`.
pub enum Test {
    /// `['perm', path, [privs], any => 1, require_param => p]`.
    Perm {
        path: &'static str,
        privs: &'static [&'static str],
        any: bool,
        require_param: Option<&'static str>,
    },
    /// `['and', ...]`: every test.
    And(&'static [Test]),
    /// `['or', ...]`: one test; failing, a bare `Permission check failed`.
    Or(&'static [Test]),
    /// `['userid-group', [privs]]`: any privilege on `/access/groups`, or on a group the
    /// `userid` parameter is in.
    UseridGroup(&'static [&'static str]),
}

const fn perm(path: &'static str, privs: &'static [&'static str]) -> Test {
    Test::Perm {
        path,
        privs,
        any: false,
        require_param: None,
    }
}

const fn perm_any(path: &'static str, privs: &'static [&'static str]) -> Test {
    Test::Perm {
        path,
        privs,
        any: true,
        require_param: None,
    }
}

/// One row: method, path template below `/api2/json`, the handler it cites, its check.
#[allow(dead_code)]
pub struct Row {
    pub method: &'static str,
    pub path: &'static str,
    /// The Perl package and handler `name`.
    pub source: &'static str,
    pub check: Test,
}

const fn row(method: &'static str, path: &'static str, source: &'static str, check: Test) -> Row {
    Row {
        method,
        path,
        source,
        check,
    }
}

const VM_CONFIG_ANY: &[&str] = &[
    "VM.Config.Disk",
    "VM.Config.CDROM",
    "VM.Config.CPU",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.HWType",
    "VM.Config.Options",
    "VM.Config.Cloudinit",
];

/// The endpoints with a `check`, PVE 9.1.
pub const ROWS: &[Row] = &[
    row(
        "GET",
        "/cluster/status",
        "pve-manager API2/Cluster.pm get_status",
        perm("/", &["Sys.Audit"]),
    ),
    row(
        "GET",
        "/access/users/{userid}",
        "pve-access-control API2/User.pm read_user",
        Test::UseridGroup(&["User.Modify", "Sys.Audit"]),
    ),
    row(
        "GET",
        "/access/groups/{groupid}",
        "pve-access-control API2/Group.pm read_group",
        perm_any("/access/groups", &["Sys.Audit", "Group.Allocate"]),
    ),
    row(
        "GET",
        "/access/domains/{realm}",
        "pve-access-control API2/Domains.pm read",
        perm_any("/access/realm", &["Realm.Allocate", "Sys.Audit"]),
    ),
    row(
        "GET",
        "/cluster/ha/resources",
        "pve-ha-manager API2/HA/Resources.pm index",
        perm("/", &["Sys.Audit"]),
    ),
    row(
        "POST",
        "/cluster/ha/resources",
        "pve-ha-manager API2/HA/Resources.pm create",
        perm("/", &["Sys.Console"]),
    ),
    row(
        "GET",
        "/cluster/ha/resources/{sid}",
        "pve-ha-manager API2/HA/Resources.pm read",
        perm("/", &["Sys.Audit"]),
    ),
    row(
        "PUT",
        "/cluster/ha/resources/{sid}",
        "pve-ha-manager API2/HA/Resources.pm update",
        perm("/", &["Sys.Console"]),
    ),
    row(
        "DELETE",
        "/cluster/ha/resources/{sid}",
        "pve-ha-manager API2/HA/Resources.pm delete",
        perm("/", &["Sys.Console"]),
    ),
    row(
        "GET",
        "/cluster/ha/rules",
        "pve-ha-manager API2/HA/Rules.pm index",
        perm("/", &["Sys.Audit"]),
    ),
    row(
        "POST",
        "/cluster/ha/rules",
        "pve-ha-manager API2/HA/Rules.pm create_rule",
        perm("/", &["Sys.Console"]),
    ),
    row(
        "GET",
        "/cluster/ha/rules/{rule}",
        "pve-ha-manager API2/HA/Rules.pm read_rule",
        perm("/", &["Sys.Audit"]),
    ),
    row(
        "PUT",
        "/cluster/ha/rules/{rule}",
        "pve-ha-manager API2/HA/Rules.pm update_rule",
        perm("/", &["Sys.Console"]),
    ),
    row(
        "DELETE",
        "/cluster/ha/rules/{rule}",
        "pve-ha-manager API2/HA/Rules.pm delete_rule",
        perm("/", &["Sys.Console"]),
    ),
    row(
        "GET",
        "/cluster/ha/groups",
        "pve-ha-manager API2/HA/Groups.pm index",
        perm("/", &["Sys.Audit"]),
    ),
    row(
        "POST",
        "/cluster/ha/groups",
        "pve-ha-manager API2/HA/Groups.pm create",
        perm("/", &["Sys.Console"]),
    ),
    row(
        "GET",
        "/cluster/ha/groups/{group}",
        "pve-ha-manager API2/HA/Groups.pm read",
        perm("/", &["Sys.Audit"]),
    ),
    row(
        "PUT",
        "/cluster/ha/groups/{group}",
        "pve-ha-manager API2/HA/Groups.pm update",
        perm("/", &["Sys.Console"]),
    ),
    row(
        "DELETE",
        "/cluster/ha/groups/{group}",
        "pve-ha-manager API2/HA/Groups.pm delete",
        perm("/", &["Sys.Console"]),
    ),
    row(
        "GET",
        "/cluster/ha/status/current",
        "pve-ha-manager API2/HA/Status.pm status",
        perm("/", &["Sys.Audit"]),
    ),
    row(
        "POST",
        "/storage",
        "pve-storage API2/Storage/Config.pm create",
        perm("/storage", &["Datastore.Allocate"]),
    ),
    row(
        "GET",
        "/storage/{storage}",
        "pve-storage API2/Storage/Config.pm read",
        perm("/storage/{storage}", &["Datastore.Allocate"]),
    ),
    row(
        "POST",
        "/pools",
        "pve-manager API2/Pool.pm create_pool",
        perm("/pool/{poolid}", &["Pool.Allocate"]),
    ),
    row(
        "PUT",
        "/pools",
        "pve-manager API2/Pool.pm update_pool",
        perm("/pool/{poolid}", &["Pool.Allocate"]),
    ),
    row(
        "DELETE",
        "/pools",
        "pve-manager API2/Pool.pm delete_pool",
        perm("/pool/{poolid}", &["Pool.Allocate"]),
    ),
    row(
        "GET",
        "/pools/{poolid}",
        "pve-manager API2/Pool.pm read_pool_deprecated",
        perm("/pool/{poolid}", &["Pool.Audit"]),
    ),
    row(
        "PUT",
        "/pools/{poolid}",
        "pve-manager API2/Pool.pm update_pool_deprecated",
        perm("/pool/{poolid}", &["Pool.Allocate"]),
    ),
    row(
        "DELETE",
        "/pools/{poolid}",
        "pve-manager API2/Pool.pm delete_pool_deprecated",
        perm("/pool/{poolid}", &["Pool.Allocate"]),
    ),
    row(
        "GET",
        "/nodes/{node}/storage/{storage}",
        "pve-storage API2/Storage/Status.pm diridx",
        perm_any(
            "/storage/{storage}",
            &["Datastore.Audit", "Datastore.AllocateSpace"],
        ),
    ),
    row(
        "GET",
        "/nodes/{node}/storage/{storage}/content",
        "pve-storage API2/Storage/Content.pm index",
        perm_any(
            "/storage/{storage}",
            &["Datastore.Audit", "Datastore.AllocateSpace"],
        ),
    ),
    row(
        "POST",
        "/nodes/{node}/storage/{storage}/upload",
        "pve-storage API2/Storage/Status.pm upload",
        perm("/storage/{storage}", &["Datastore.AllocateTemplate"]),
    ),
    row(
        "POST",
        "/nodes/{node}/storage/{storage}/download-url",
        "pve-storage API2/Storage/Status.pm download_url",
        Test::And(&[
            perm("/storage/{storage}", &["Datastore.AllocateTemplate"]),
            Test::Or(&[
                perm("/", &["Sys.Audit", "Sys.Modify"]),
                perm("/nodes/{node}", &["Sys.AccessNetwork"]),
            ]),
        ]),
    ),
    row(
        "DELETE",
        "/nodes/{node}/qemu/{vmid}",
        "qemu-server API2/Qemu.pm destroy_vm",
        perm("/vms/{vmid}", &["VM.Allocate"]),
    ),
    row(
        "GET",
        "/nodes/{node}/qemu/{vmid}/config",
        "qemu-server API2/Qemu.pm vm_config",
        perm("/vms/{vmid}", &["VM.Audit"]),
    ),
    row(
        "PUT",
        "/nodes/{node}/qemu/{vmid}/config",
        "qemu-server API2/Qemu.pm update_vm",
        perm_any("/vms/{vmid}", VM_CONFIG_ANY),
    ),
    row(
        "POST",
        "/nodes/{node}/qemu/{vmid}/config",
        "qemu-server API2/Qemu.pm update_vm_async",
        perm_any("/vms/{vmid}", VM_CONFIG_ANY),
    ),
    row(
        "GET",
        "/nodes/{node}/qemu/{vmid}/pending",
        "qemu-server API2/Qemu.pm vm_pending",
        perm("/vms/{vmid}", &["VM.Audit"]),
    ),
    row(
        "GET",
        "/nodes/{node}/qemu/{vmid}/cloudinit",
        "qemu-server API2/Qemu.pm cloudinit_pending",
        perm("/vms/{vmid}", &["VM.Audit"]),
    ),
    row(
        "PUT",
        "/nodes/{node}/qemu/{vmid}/cloudinit",
        "qemu-server API2/Qemu.pm cloudinit_update",
        perm("/vms/{vmid}", &["VM.Config.Cloudinit"]),
    ),
    row(
        "PUT",
        "/nodes/{node}/qemu/{vmid}/unlink",
        "qemu-server API2/Qemu.pm unlink",
        perm("/vms/{vmid}", &["VM.Config.Disk"]),
    ),
    row(
        "PUT",
        "/nodes/{node}/qemu/{vmid}/resize",
        "qemu-server API2/Qemu.pm resize_vm",
        perm("/vms/{vmid}", &["VM.Config.Disk"]),
    ),
    row(
        "POST",
        "/nodes/{node}/qemu/{vmid}/move_disk",
        "qemu-server API2/Qemu.pm move_vm_disk",
        perm("/vms/{vmid}", &["VM.Config.Disk"]),
    ),
    row(
        "POST",
        "/nodes/{node}/qemu/{vmid}/template",
        "qemu-server API2/Qemu.pm template",
        perm("/vms/{vmid}", &["VM.Allocate"]),
    ),
    row(
        "POST",
        "/nodes/{node}/qemu/{vmid}/clone",
        "qemu-server API2/Qemu.pm clone_vm",
        Test::And(&[
            perm("/vms/{vmid}", &["VM.Clone"]),
            Test::Or(&[
                perm("/vms/{newid}", &["VM.Allocate"]),
                Test::Perm {
                    path: "/pool/{pool}",
                    privs: &["VM.Allocate"],
                    any: false,
                    require_param: Some("pool"),
                },
            ]),
        ]),
    ),
    row(
        "GET",
        "/nodes/{node}/qemu/{vmid}/migrate",
        "qemu-server API2/Qemu.pm migrate_vm_precondition",
        perm("/vms/{vmid}", &["VM.Migrate"]),
    ),
    row(
        "POST",
        "/nodes/{node}/qemu/{vmid}/migrate",
        "qemu-server API2/Qemu.pm migrate_vm",
        perm("/vms/{vmid}", &["VM.Migrate"]),
    ),
    row(
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces",
        "qemu-server API2/Qemu/Agent.pm network-get-interfaces",
        perm_any(
            "/vms/{vmid}",
            &["VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"],
        ),
    ),
    row(
        "GET",
        "/nodes/{node}/qemu/{vmid}/status/current",
        "qemu-server API2/Qemu.pm vm_status",
        perm("/vms/{vmid}", &["VM.Audit"]),
    ),
    row(
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/start",
        "qemu-server API2/Qemu.pm vm_start",
        perm("/vms/{vmid}", &["VM.PowerMgmt"]),
    ),
    row(
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/stop",
        "qemu-server API2/Qemu.pm vm_stop",
        perm("/vms/{vmid}", &["VM.PowerMgmt"]),
    ),
    row(
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/shutdown",
        "qemu-server API2/Qemu.pm vm_shutdown",
        perm("/vms/{vmid}", &["VM.PowerMgmt"]),
    ),
    row(
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/reboot",
        "qemu-server API2/Qemu.pm vm_reboot",
        perm("/vms/{vmid}", &["VM.PowerMgmt"]),
    ),
    row(
        "GET",
        "/nodes/{node}/qemu/{vmid}/snapshot",
        "qemu-server API2/Qemu.pm snapshot_list",
        perm("/vms/{vmid}", &["VM.Audit"]),
    ),
    row(
        "POST",
        "/nodes/{node}/qemu/{vmid}/snapshot",
        "qemu-server API2/Qemu.pm snapshot",
        perm("/vms/{vmid}", &["VM.Snapshot"]),
    ),
    row(
        "DELETE",
        "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}",
        "qemu-server API2/Qemu.pm delsnapshot",
        perm("/vms/{vmid}", &["VM.Snapshot"]),
    ),
    row(
        "GET",
        "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config",
        "qemu-server API2/Qemu.pm get_snapshot_config",
        perm_any(
            "/vms/{vmid}",
            &["VM.Snapshot", "VM.Snapshot.Rollback", "VM.Audit"],
        ),
    ),
    row(
        "PUT",
        "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config",
        "qemu-server API2/Qemu.pm update_snapshot_config",
        perm("/vms/{vmid}", &["VM.Snapshot"]),
    ),
    row(
        "POST",
        "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/rollback",
        "qemu-server API2/Qemu.pm rollback",
        perm_any("/vms/{vmid}", &["VM.Snapshot", "VM.Snapshot.Rollback"]),
    ),
];

/// PVE 8.4's `network-get-interfaces` (before `VM.GuestAgent.Audit` existed).
const AGENT_8: Test = perm("/vms/{vmid}", &["VM.Monitor"]);

/// The row of a request and the template's parameters, if the endpoint has a check.
fn find<'r>(method: &str, segs: &[&str], rows: &'r [Row]) -> Option<(&'r Row, Params)> {
    rows.iter().find_map(|row| {
        if row.method != method {
            return None;
        }
        let tmpl: Vec<&str> = row.path.trim_matches('/').split('/').collect();
        if tmpl.len() != segs.len() {
            return None;
        }
        let mut bound = Params::new();
        for (t, s) in tmpl.iter().zip(segs) {
            match t.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
                Some(name) => {
                    bound.insert(name.into(), s.to_string());
                }
                None if t == s => {}
                None => return None,
            }
        }
        Some((row, bound))
    })
}

/// pve-common `PVE::Tools::template_replace`: `{name}` replaced by the parameter (by
/// nothing when absent).
fn template_replace(tmpl: &str, params: &Params) -> String {
    let mut out = String::new();
    let mut rest = tmpl;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let name = &rest[open + 1..open + close];
        out.push_str(params.get(name).map(String::as_str).unwrap_or(""));
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

/// RPCEnvironment.pm `exec_api2_perm_check`; with `noerr` a failure is `Ok(false)`.
fn exec(checker: &Checker, test: &Test, params: &Params, noerr: bool) -> Result<bool, ApiErr> {
    let fail = |err: ApiErr| if noerr { Ok(false) } else { Err(err) };
    match test {
        Test::And(tests) => {
            for sub in *tests {
                exec(checker, sub, params, false)?;
            }
            Ok(true)
        }
        Test::Or(tests) => {
            for sub in *tests {
                if exec(checker, sub, params, true)? {
                    return Ok(true);
                }
            }
            fail(perm_exc(None))
        }
        Test::Perm {
            path,
            privs,
            any,
            require_param,
        } => {
            if let Some(p) = require_param
                && !params.contains_key(*p)
            {
                return fail(perm_exc(None));
            }
            let path = crate::access::user_cfg::normalize_path(&template_replace(path, params))
                .unwrap_or_default();
            match checker.check_full(&path, privs, *any) {
                Ok(()) => Ok(true),
                Err(e) => fail(e),
            }
        }
        Test::UseridGroup(privs) => {
            if checker.has_any("/access/groups", privs) {
                return Ok(true);
            }
            let userid = params.get("userid").map(String::as_str).unwrap_or("");
            let via_group = checker
                .groups_of(userid)
                .iter()
                .any(|group| checker.has_any(&format!("/access/groups/{group}"), privs));
            if via_group {
                Ok(true)
            } else {
                fail(perm_exc(None))
            }
        }
    }
}

/// RPCEnvironment.pm `check_api2_permissions` for a request: a `root@pam` ticket passes;
/// otherwise the endpoint's check, if it has one, with the path's parameters and the
/// request's.
pub fn check_request(
    checker: &Checker,
    method: &str,
    segs: &[&str],
    params: &Params,
    version: &str,
) -> Result<(), ApiErr> {
    if checker.root_ticket {
        return Ok(());
    }
    let Some((row, bound)) = find(method, segs, ROWS) else {
        return Ok(());
    };
    let mut all = params.clone();
    all.extend(bound);
    let test = if row.path.ends_with("/agent/network-get-interfaces")
        && !crate::versions::has(version, crate::versions::Change::GuestAgentPrivileges)
    {
        &AGENT_8
    } else {
        &row.check
    };
    exec(checker, test, &all, false).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_replace_fills_parameters() {
        let params = Params::from([("vmid".to_string(), "100".to_string())]);
        assert_eq!(template_replace("/vms/{vmid}", &params), "/vms/100");
        assert_eq!(template_replace("/pool/{pool}", &params), "/pool/");
    }

    #[test]
    fn rows_are_found_by_template() {
        let segs = ["nodes", "pve1", "qemu", "100", "status", "start"];
        let (row, bound) = find("POST", &segs, ROWS).unwrap();
        assert_eq!(row.source, "qemu-server API2/Qemu.pm vm_start");
        assert_eq!(bound["vmid"], "100");
        assert!(find("GET", &segs, ROWS).is_none());
    }
}
