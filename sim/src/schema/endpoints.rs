//! Which daemon serves each endpoint pve-sim implements: the handlers' `protected => 1`, as
//! PVE 9.1's API schema marks it per method. pve-manager `PVE/HTTPServer.pm` `rest_handler`
//! answers an unprotected call in pveproxy itself; a protected one (`$info->{protected} && $euid
//! != 0`) it proxies to pvedaemon on `127.0.0.1:85`, which runs as root. Transcribed by hand,
//! one row per method and path, each naming the Perl package and the handler (`name`) it comes
//! from; `sim/dev/check_protected.py` compares the table with the schema file.

/// One method on one path of `/api2/json`, as PVE's API schema declares it. `source` and
/// `handler` are its citation, read by `sim/dev/check_protected.py` and the tests.
#[allow(dead_code)]
pub struct Endpoint {
    pub method: &'static str,
    /// The path template below `/api2/json`, with PVE's `{param}` placeholders.
    pub path: &'static str,
    /// The package and file that declare the handler.
    pub source: &'static str,
    /// The handler's `name` in that file.
    pub handler: &'static str,
    /// `protected => 1`: run in pvedaemon after pveproxy's hop.
    pub protected: bool,
}

const fn endpoint(
    method: &'static str,
    path: &'static str,
    source: &'static str,
    handler: &'static str,
    protected: bool,
) -> Endpoint {
    Endpoint {
        method,
        path,
        source,
        handler,
        protected,
    }
}

/// Every endpoint pve-sim serves.
pub const ENDPOINTS: &[Endpoint] = &[
    endpoint(
        "GET",
        "/version",
        "pve-manager PVE/API2.pm",
        "version",
        false,
    ),
    endpoint(
        "GET",
        "/nodes",
        "pve-manager PVE/API2/Nodes.pm",
        "index",
        false,
    ),
    endpoint(
        "GET",
        "/cluster/status",
        "pve-manager PVE/API2/Cluster.pm",
        "get_status",
        true,
    ),
    endpoint(
        "GET",
        "/cluster/resources",
        "pve-manager PVE/API2/Cluster.pm",
        "resources",
        false,
    ),
    endpoint(
        "GET",
        "/cluster/options",
        "pve-manager PVE/API2/Cluster.pm",
        "get_options",
        false,
    ),
    endpoint(
        "GET",
        "/cluster/nextid",
        "pve-manager PVE/API2/Cluster.pm",
        "nextid",
        false,
    ),
    endpoint(
        "GET",
        "/cluster/tasks",
        "pve-manager PVE/API2/Cluster.pm",
        "tasks",
        false,
    ),
    endpoint(
        "GET",
        "/access/permissions",
        "pve-access-control PVE/API2/AccessControl.pm",
        "permissions",
        false,
    ),
    endpoint(
        "POST",
        "/access/ticket",
        "pve-access-control PVE/API2/AccessControl.pm",
        "create_ticket",
        true,
    ),
    endpoint(
        "GET",
        "/access/users",
        "pve-access-control PVE/API2/User.pm",
        "index",
        true,
    ),
    endpoint(
        "GET",
        "/access/users/{userid}",
        "pve-access-control PVE/API2/User.pm",
        "read_user",
        false,
    ),
    endpoint(
        "GET",
        "/access/groups",
        "pve-access-control PVE/API2/Group.pm",
        "index",
        false,
    ),
    endpoint(
        "GET",
        "/access/groups/{groupid}",
        "pve-access-control PVE/API2/Group.pm",
        "read_group",
        false,
    ),
    endpoint(
        "GET",
        "/access/domains",
        "pve-access-control PVE/API2/Domains.pm",
        "index",
        false,
    ),
    endpoint(
        "GET",
        "/access/domains/{realm}",
        "pve-access-control PVE/API2/Domains.pm",
        "read",
        false,
    ),
    endpoint(
        "GET",
        "/cluster/ha/resources",
        "pve-ha-manager PVE/API2/HA/Resources.pm",
        "index",
        false,
    ),
    endpoint(
        "POST",
        "/cluster/ha/resources",
        "pve-ha-manager PVE/API2/HA/Resources.pm",
        "create",
        true,
    ),
    endpoint(
        "GET",
        "/cluster/ha/resources/{sid}",
        "pve-ha-manager PVE/API2/HA/Resources.pm",
        "read",
        false,
    ),
    endpoint(
        "PUT",
        "/cluster/ha/resources/{sid}",
        "pve-ha-manager PVE/API2/HA/Resources.pm",
        "update",
        true,
    ),
    endpoint(
        "DELETE",
        "/cluster/ha/resources/{sid}",
        "pve-ha-manager PVE/API2/HA/Resources.pm",
        "delete",
        true,
    ),
    endpoint(
        "GET",
        "/cluster/ha/rules",
        "pve-ha-manager PVE/API2/HA/Rules.pm",
        "index",
        false,
    ),
    endpoint(
        "POST",
        "/cluster/ha/rules",
        "pve-ha-manager PVE/API2/HA/Rules.pm",
        "create_rule",
        true,
    ),
    endpoint(
        "GET",
        "/cluster/ha/rules/{rule}",
        "pve-ha-manager PVE/API2/HA/Rules.pm",
        "read_rule",
        false,
    ),
    endpoint(
        "PUT",
        "/cluster/ha/rules/{rule}",
        "pve-ha-manager PVE/API2/HA/Rules.pm",
        "update_rule",
        true,
    ),
    endpoint(
        "DELETE",
        "/cluster/ha/rules/{rule}",
        "pve-ha-manager PVE/API2/HA/Rules.pm",
        "delete_rule",
        true,
    ),
    endpoint(
        "GET",
        "/cluster/ha/groups",
        "pve-ha-manager PVE/API2/HA/Groups.pm",
        "index",
        false,
    ),
    endpoint(
        "POST",
        "/cluster/ha/groups",
        "pve-ha-manager PVE/API2/HA/Groups.pm",
        "create",
        true,
    ),
    endpoint(
        "GET",
        "/cluster/ha/groups/{group}",
        "pve-ha-manager PVE/API2/HA/Groups.pm",
        "read",
        false,
    ),
    endpoint(
        "PUT",
        "/cluster/ha/groups/{group}",
        "pve-ha-manager PVE/API2/HA/Groups.pm",
        "update",
        true,
    ),
    endpoint(
        "DELETE",
        "/cluster/ha/groups/{group}",
        "pve-ha-manager PVE/API2/HA/Groups.pm",
        "delete",
        true,
    ),
    endpoint(
        "GET",
        "/cluster/ha/status/current",
        "pve-ha-manager PVE/API2/HA/Status.pm",
        "status",
        false,
    ),
    endpoint(
        "GET",
        "/storage",
        "pve-storage PVE/API2/Storage/Config.pm",
        "index",
        false,
    ),
    endpoint(
        "POST",
        "/storage",
        "pve-storage PVE/API2/Storage/Config.pm",
        "create",
        true,
    ),
    endpoint(
        "GET",
        "/storage/{storage}",
        "pve-storage PVE/API2/Storage/Config.pm",
        "read",
        false,
    ),
    endpoint(
        "GET",
        "/pools",
        "pve-manager PVE/API2/Pool.pm",
        "index",
        false,
    ),
    endpoint(
        "POST",
        "/pools",
        "pve-manager PVE/API2/Pool.pm",
        "create_pool",
        true,
    ),
    endpoint(
        "PUT",
        "/pools",
        "pve-manager PVE/API2/Pool.pm",
        "update_pool",
        true,
    ),
    endpoint(
        "DELETE",
        "/pools",
        "pve-manager PVE/API2/Pool.pm",
        "delete_pool",
        true,
    ),
    endpoint(
        "GET",
        "/pools/{poolid}",
        "pve-manager PVE/API2/Pool.pm",
        "read_pool",
        false,
    ),
    endpoint(
        "PUT",
        "/pools/{poolid}",
        "pve-manager PVE/API2/Pool.pm",
        "update_pool_deprecated",
        true,
    ),
    endpoint(
        "DELETE",
        "/pools/{poolid}",
        "pve-manager PVE/API2/Pool.pm",
        "delete_pool_deprecated",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/version",
        "pve-manager PVE/API2/Nodes.pm",
        "version",
        false,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/network",
        "pve-manager PVE/API2/Network.pm",
        "index",
        false,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/tasks",
        "pve-manager PVE/API2/Tasks.pm",
        "node_tasks",
        false,
    ),
    endpoint(
        "DELETE",
        "/nodes/{node}/tasks/{upid}",
        "pve-manager PVE/API2/Tasks.pm",
        "stop_task",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/tasks/{upid}/status",
        "pve-manager PVE/API2/Tasks.pm",
        "read_task_status",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/tasks/{upid}/log",
        "pve-manager PVE/API2/Tasks.pm",
        "read_task_log",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/storage",
        "pve-storage PVE/API2/Storage/Status.pm",
        "index",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/storage/{storage}",
        "pve-storage PVE/API2/Storage/Status.pm",
        "diridx",
        false,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/storage/{storage}/content",
        "pve-storage PVE/API2/Storage/Content.pm",
        "index",
        true,
    ),
    endpoint(
        "DELETE",
        "/nodes/{node}/storage/{storage}/content/{volume}",
        "pve-storage PVE/API2/Storage/Content.pm",
        "delete",
        true,
    ),
    endpoint(
        "POST",
        "/nodes/{node}/storage/{storage}/upload",
        "pve-storage PVE/API2/Storage/Status.pm",
        "upload",
        true,
    ),
    endpoint(
        "POST",
        "/nodes/{node}/storage/{storage}/download-url",
        "pve-storage PVE/API2/Storage/Status.pm",
        "download_url",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/lxc",
        "pve-container PVE/API2/LXC.pm",
        "vmlist",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/qemu",
        "qemu-server PVE/API2/Qemu.pm",
        "vmlist",
        true,
    ),
    endpoint(
        "POST",
        "/nodes/{node}/qemu",
        "qemu-server PVE/API2/Qemu.pm",
        "create_vm",
        true,
    ),
    endpoint(
        "DELETE",
        "/nodes/{node}/qemu/{vmid}",
        "qemu-server PVE/API2/Qemu.pm",
        "destroy_vm",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/qemu/{vmid}/config",
        "qemu-server PVE/API2/Qemu.pm",
        "vm_config",
        false,
    ),
    endpoint(
        "PUT",
        "/nodes/{node}/qemu/{vmid}/config",
        "qemu-server PVE/API2/Qemu.pm",
        "update_vm",
        true,
    ),
    endpoint(
        "POST",
        "/nodes/{node}/qemu/{vmid}/config",
        "qemu-server PVE/API2/Qemu.pm",
        "update_vm_async",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/qemu/{vmid}/pending",
        "qemu-server PVE/API2/Qemu.pm",
        "vm_pending",
        false,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/qemu/{vmid}/cloudinit",
        "qemu-server PVE/API2/Qemu.pm",
        "cloudinit_pending",
        false,
    ),
    endpoint(
        "PUT",
        "/nodes/{node}/qemu/{vmid}/cloudinit",
        "qemu-server PVE/API2/Qemu.pm",
        "cloudinit_update",
        true,
    ),
    endpoint(
        "PUT",
        "/nodes/{node}/qemu/{vmid}/unlink",
        "qemu-server PVE/API2/Qemu.pm",
        "unlink",
        true,
    ),
    endpoint(
        "PUT",
        "/nodes/{node}/qemu/{vmid}/resize",
        "qemu-server PVE/API2/Qemu.pm",
        "resize_vm",
        true,
    ),
    endpoint(
        "POST",
        "/nodes/{node}/qemu/{vmid}/move_disk",
        "qemu-server PVE/API2/Qemu.pm",
        "move_vm_disk",
        true,
    ),
    endpoint(
        "POST",
        "/nodes/{node}/qemu/{vmid}/template",
        "qemu-server PVE/API2/Qemu.pm",
        "template",
        true,
    ),
    endpoint(
        "POST",
        "/nodes/{node}/qemu/{vmid}/clone",
        "qemu-server PVE/API2/Qemu.pm",
        "clone_vm",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/qemu/{vmid}/migrate",
        "qemu-server PVE/API2/Qemu.pm",
        "migrate_vm_precondition",
        true,
    ),
    endpoint(
        "POST",
        "/nodes/{node}/qemu/{vmid}/migrate",
        "qemu-server PVE/API2/Qemu.pm",
        "migrate_vm",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces",
        "qemu-server PVE/API2/Qemu/Agent.pm",
        "network-get-interfaces",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/qemu/{vmid}/status/current",
        "qemu-server PVE/API2/Qemu.pm",
        "vm_status",
        true,
    ),
    endpoint(
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/start",
        "qemu-server PVE/API2/Qemu.pm",
        "vm_start",
        true,
    ),
    endpoint(
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/stop",
        "qemu-server PVE/API2/Qemu.pm",
        "vm_stop",
        true,
    ),
    endpoint(
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/shutdown",
        "qemu-server PVE/API2/Qemu.pm",
        "vm_shutdown",
        true,
    ),
    endpoint(
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/reboot",
        "qemu-server PVE/API2/Qemu.pm",
        "vm_reboot",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/qemu/{vmid}/snapshot",
        "qemu-server PVE/API2/Qemu.pm",
        "snapshot_list",
        true,
    ),
    endpoint(
        "POST",
        "/nodes/{node}/qemu/{vmid}/snapshot",
        "qemu-server PVE/API2/Qemu.pm",
        "snapshot",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}",
        "qemu-server PVE/API2/Qemu.pm",
        "snapshot_cmd_idx",
        false,
    ),
    endpoint(
        "DELETE",
        "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}",
        "qemu-server PVE/API2/Qemu.pm",
        "delsnapshot",
        true,
    ),
    endpoint(
        "GET",
        "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config",
        "qemu-server PVE/API2/Qemu.pm",
        "get_snapshot_config",
        false,
    ),
    endpoint(
        "PUT",
        "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config",
        "qemu-server PVE/API2/Qemu.pm",
        "update_snapshot_config",
        true,
    ),
    endpoint(
        "POST",
        "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/rollback",
        "qemu-server PVE/API2/Qemu.pm",
        "rollback",
        true,
    ),
];

/// The endpoint a request names, by its method and its path below `/api2/json` (already
/// URI-unescaped): literal segments match exactly, a `{param}` any one non-empty segment.
pub fn endpoint_for(method: &str, rel_path: &str) -> Option<&'static Endpoint> {
    let segs: Vec<&str> = rel_path.trim_matches('/').split('/').collect();
    ENDPOINTS.iter().find(|e| {
        let template: Vec<&str> = e.path.trim_matches('/').split('/').collect();
        e.method == method
            && template.len() == segs.len()
            && template.iter().zip(&segs).all(|(t, s)| {
                if t.starts_with('{') {
                    !s.is_empty()
                } else {
                    t == s
                }
            })
    })
}

/// Whether pveproxy hands this request to pvedaemon. A path no handler serves is answered by
/// pveproxy (`rest_handler`'s 501 comes before the proxy decision).
pub fn is_protected(method: &str, rel_path: &str) -> bool {
    endpoint_for(method, rel_path).is_some_and(|e| e.protected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_told_apart_by_method_and_path() {
        assert!(is_protected("GET", "/nodes/pve1/qemu"));
        assert!(is_protected("POST", "/nodes/pve1/qemu"));
        assert!(!is_protected("GET", "/nodes/pve1/qemu/100/config"));
        assert!(is_protected("PUT", "/nodes/pve1/qemu/100/config"));
        assert!(is_protected("GET", "/nodes/pve1/tasks/UPID:pve1:x/status"));
        assert!(!is_protected("GET", "/nodes/pve1/tasks"));
        assert!(!is_protected("GET", "/cluster/resources"));
        assert!(is_protected("POST", "/access/ticket"));
        assert!(!is_protected("GET", "/nodes/pve1/qemu/100/bogus"));
        assert!(!is_protected("GET", "/nodes//qemu"));
    }

    #[test]
    fn each_method_and_path_is_listed_once() {
        let mut seen = std::collections::BTreeSet::new();
        for e in ENDPOINTS {
            assert!(seen.insert((e.method, e.path)), "{} {}", e.method, e.path);
            assert!(e.path.starts_with('/') && !e.handler.is_empty());
            assert!(e.source.ends_with(".pm"), "{}", e.source);
        }
    }
}
