//! HA-managed VMs against pve-sim, after pve-ha-manager (API2/HA/Resources.pm, Status.pm;
//! the CRM and LRM rounds of CRM.pm/LRM.pm, 10 s, here scaled by `--time-scale 0.1`) and
//! qemu-server API2/Qemu.pm (vm_start, vm_stop, vm_shutdown fork `hastart`/`hastop` for an
//! HA-managed VM; destroy_vm refuses one without `purge`).

use std::time::{Duration, Instant};

use crate::support::{Session, Sim, quick_vm};
use serde_json::{Value, json};

fn fails(s: &Session, method: &str, path: &str, params: &[(&str, &str)]) -> String {
    let (code, reason, body) = s.call(method, path, params);
    assert!(code >= 400, "{method} {path}: {code} {reason} {body}");
    reason
}

fn running(s: &Session, node: &str, vmid: &str) -> bool {
    s.data(
        "GET",
        &format!("/nodes/{node}/qemu/{vmid}/status/current"),
        &[],
    )["status"]
        == "running"
}

/// Waits (bounded) until the VM's power state is `want`; returns the HA tasks' types since.
fn wait_power(s: &Session, node: &str, vmid: &str, want: bool) {
    let t = Instant::now();
    while running(s, node, vmid) != want {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "VM {vmid} never reached running={want}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tasks(sim: &Sim) -> Vec<Value> {
    sim.admin("GET", "/tasks", Value::Null)["data"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn ha_resources_and_the_requests_the_ha_stack_carries_out() {
    let sim = Sim::plain(&["--nodes", "pve1,pve2,pve3", "--time-scale", "0.1"], &[]);
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[]);
    // The VM lives on pve2 (created there): the LRM of pve2 runs its tasks.
    let upid = s.data(
        "POST",
        "/nodes/pve2/qemu",
        &[("vmid", "101"), ("scsi0", "local-lvm:1")],
    );
    assert_eq!(s.wait(upid.as_str().unwrap())["exitstatus"], "OK");

    // Resources.pm create: the sid parsed, the guest checked, duplicates refused.
    assert_eq!(
        fails(&s, "POST", "/cluster/ha/resources", &[("sid", "vm:999")]),
        "resource 'vm:999' does not exist in cluster"
    );
    assert_eq!(
        fails(&s, "POST", "/cluster/ha/resources", &[("sid", "999")]),
        "unable to detect SID from VMID - VM/CT 999 does not exist"
    );
    s.data(
        "POST",
        "/cluster/ha/resources",
        &[("sid", "vm:100"), ("state", "stopped")],
    );
    s.data(
        "POST",
        "/cluster/ha/resources",
        &[("sid", "101"), ("max_restart", "2")],
    );
    assert_eq!(
        fails(&s, "POST", "/cluster/ha/resources", &[("sid", "vm:100")]),
        "create resource failed: resource ID 'vm:100' already defined"
    );
    let r = s.data("GET", "/cluster/ha/resources/100", &[]);
    assert_eq!(
        (r["sid"].clone(), r["state"].clone()),
        (json!("vm:100"), json!("stopped"))
    );
    let r = s.data("GET", "/cluster/ha/resources/vm:101", &[]);
    assert_eq!(r["max_restart"], 2);
    assert!(
        r.get("state").is_none(),
        "only what was given is stored: {r}"
    );
    assert_eq!(
        s.data("GET", "/cluster/ha/resources", &[("type", "vm")])
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    // vm:101 has no state: `started` — the stack starts it in a round, with a qmstart on pve2.
    wait_power(&s, "pve2", "101", true);
    let started: Vec<Value> = tasks(&sim)
        .into_iter()
        .filter(|t| t["type"] == "qmstart")
        .collect();
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(
        (started[0]["node"].clone(), started[0]["id"].clone()),
        (json!("pve2"), json!("101"))
    );
    assert_eq!(
        s.data("GET", "/nodes/pve2/qemu/101/status/current", &[])["ha"],
        json!({"managed": 1, "state": "started"})
    );
    let listed = s.data("GET", "/cluster/resources", &[("type", "vm")]);
    let entry = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["vmid"] == 101)
        .unwrap()
        .clone();
    assert_eq!(entry["hastate"], "started", "{entry}");

    // A start request for the HA-managed vm:100 is a `hastart` that only queues it.
    let upid = s.data("POST", "/nodes/pve1/qemu/100/status/start", &[]);
    let upid = upid.as_str().unwrap().to_string();
    assert!(upid.contains(":hastart:100:root@pam:"), "{upid}");
    assert_eq!(s.wait(&upid)["exitstatus"], "OK");
    assert_eq!(s.log(&upid), ["Requesting HA start for VM 100", "TASK OK"]);
    assert_eq!(
        s.data("GET", "/cluster/ha/resources/vm:100", &[])["state"],
        "started"
    );
    wait_power(&s, "pve1", "100", true);

    // A shutdown is a `hastop` (`crm-command stop vm:100 60`): the CRM sets the resource to
    // stopped in its round, and the LRM shuts the VM down with a qmshutdown task.
    let upid = s.data("POST", "/nodes/pve1/qemu/100/status/shutdown", &[]);
    let upid = upid.as_str().unwrap().to_string();
    assert!(upid.contains(":hastop:100:"), "{upid}");
    assert_eq!(s.wait(&upid)["exitstatus"], "OK");
    assert!(
        running(&s, "pve1", "100"),
        "the hastop worker only queues the request"
    );
    wait_power(&s, "pve1", "100", false);
    assert_eq!(
        s.data("GET", "/cluster/ha/resources/vm:100", &[])["state"],
        "stopped"
    );
    assert!(
        tasks(&sim)
            .iter()
            .any(|t| t["type"] == "qmshutdown" && t["id"] == "100" && t["exitstatus"] == "OK")
    );
    // A hard stop of vm:101: `stop vm:101 0`, a qmstop.
    let upid = s.data("POST", "/nodes/pve2/qemu/101/status/stop", &[]);
    assert!(upid.as_str().unwrap().contains(":hastop:101:"), "{upid}");
    wait_power(&s, "pve2", "101", false);
    assert!(
        tasks(&sim)
            .iter()
            .any(|t| t["type"] == "qmstop" && t["id"] == "101")
    );
    assert_eq!(
        fails(
            &s,
            "POST",
            "/nodes/pve2/qemu/101/status/stop",
            &[("overrule-shutdown", "1")]
        ),
        "Parameter verification failed."
    );

    // Status.pm: quorum, master, one LRM per node, and the services.
    let status = s.data("GET", "/cluster/ha/status/current", &[]);
    let ids: Vec<Value> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].clone())
        .collect();
    for id in [
        "quorum",
        "master",
        "lrm:pve1",
        "lrm:pve2",
        "lrm:pve3",
        "service:vm:100",
        "service:vm:101",
    ] {
        assert!(ids.contains(&json!(id)), "{id} missing: {status}");
    }
    let svc = status
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["sid"] == "vm:100")
        .unwrap()
        .clone();
    assert_eq!(svc["status"], "vm:100 (pve1, stopped)");
    assert_eq!(
        (svc["crm_state"].clone(), svc["request_state"].clone()),
        (json!("stopped"), json!("stopped"))
    );

    // An ignored resource is not HA-managed: its start is a plain qmstart.
    s.data(
        "PUT",
        "/cluster/ha/resources/vm:100",
        &[("state", "ignored")],
    );
    let upid = s.data("POST", "/nodes/pve1/qemu/100/status/start", &[]);
    assert!(upid.as_str().unwrap().contains(":qmstart:100:"), "{upid}");
    s.wait(upid.as_str().unwrap());
    let upid = s.data("POST", "/nodes/pve1/qemu/100/status/stop", &[]);
    s.wait(upid.as_str().unwrap());

    // destroy_vm: refused while configured, unless purge removes it from the HA config.
    assert_eq!(
        fails(&s, "DELETE", "/nodes/pve1/qemu/100", &[]),
        "unable to remove VM 100 - used in HA resources and purge parameter not set."
    );
    let upid = s.data("DELETE", "/nodes/pve1/qemu/100", &[("purge", "1")]);
    assert_eq!(s.wait(upid.as_str().unwrap())["exitstatus"], "OK");
    assert!(
        s.log(upid.as_str().unwrap())
            .contains(&"NOTE: removed VM 100 from HA resource configuration.".to_string())
    );
    s.data("DELETE", "/cluster/ha/resources/vm:101", &[]);
    assert_eq!(
        fails(&s, "DELETE", "/cluster/ha/resources/vm:101", &[]),
        "cannot delete service 'vm:101', not HA managed!"
    );
    assert_eq!(s.data("GET", "/cluster/ha/resources", &[]), json!([]));
}

/// create_vm with `ha-managed`: the VM is added as an HA resource (`started` with `start`),
/// and its autostart goes through vm_start, i.e. a `hastart` the HA stack carries out.
#[test]
fn a_vm_created_ha_managed_is_started_by_the_ha_stack() {
    let sim = Sim::plain(&["--time-scale", "0.1"], &[]);
    let s = Session::login(&sim);
    let upid = s.data(
        "POST",
        "/nodes/pve1/qemu",
        &[
            ("vmid", "100"),
            ("scsi0", "local-lvm:1"),
            ("ha-managed", "1"),
            ("start", "1"),
        ],
    );
    let upid = upid.as_str().unwrap();
    assert_eq!(s.wait(upid)["exitstatus"], "OK");
    let log = s.log(upid);
    assert!(log.contains(&"Add as HA resource".to_string()), "{log:?}");
    assert!(log.contains(&"Execute autostart".to_string()), "{log:?}");
    assert_eq!(
        s.data("GET", "/cluster/ha/resources/vm:100", &[])["state"],
        "started"
    );
    assert!(
        tasks(&sim)
            .iter()
            .any(|t| t["type"] == "hastart" && t["id"] == "100")
    );
    wait_power(&s, "pve1", "100", true);
    assert!(
        tasks(&sim)
            .iter()
            .any(|t| t["type"] == "qmstart" && t["upid"].as_str().unwrap().ends_with(":root@pam:"))
    );
}

fn node_of(s: &Session, vmid: u32) -> String {
    let listed = s.data("GET", "/cluster/resources", &[("type", "vm")]);
    listed
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["vmid"] == vmid)
        .map(|e| e["node"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

/// Waits (bounded) until the VM runs on `node`, moved there by the HA stack, unlocked.
fn wait_node(s: &Session, vmid: u32, node: &str) {
    let t = Instant::now();
    let settled = || {
        node_of(s, vmid) == node
            && running(s, node, &vmid.to_string())
            && s.call("GET", &format!("/nodes/{node}/qemu/{vmid}/config"), &[])
                .2["data"]
                .get("lock")
                .is_none()
    };
    while !settled() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "VM {vmid} never ran on {node} (on {})",
            node_of(s, vmid)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// PVE 9's HA rules (pve-ha-manager API2/HA/Rules.pm, PVE/HA/Rules.pm and its plugins
/// NodeAffinity.pm, ResourceAffinity.pm): created, listed by type and resource, read with
/// their digest and order, updated and deleted; refused as check_config,
/// `$assert_valid_resources_param`, `$assert_valid_nodes_param` and `$assert_feasibility`
/// refuse them. The CRM places a started service by its node affinity (Manager.pm
/// select_service_node: the highest priority online node), and moves it back after a
/// migration to a node a strict rule does not allow. Groups are refused (groups.cfg
/// migrated, 5.0.2).
#[test]
fn ha_rules_on_pve_9_and_the_crm_placing_by_them() {
    let sim = Sim::plain(&["--nodes", "pve1,pve2,pve3", "--time-scale", "0.1"], &[]);
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[]);
    quick_vm(&s, "101", &[]);
    s.data("POST", "/cluster/ha/resources", &[("sid", "vm:100")]);
    wait_power(&s, "pve1", "100", true);

    let create = |params: &[(&str, &str)]| s.call("POST", "/cluster/ha/rules", params);
    assert_eq!(
        fails(
            &s,
            "POST",
            "/cluster/ha/rules",
            &[
                ("rule", "r1"),
                ("type", "node-affinity"),
                ("resources", "vm:100")
            ]
        ),
        "missing value for required option 'nodes'"
    );
    assert_eq!(
        fails(
            &s,
            "POST",
            "/cluster/ha/rules",
            &[
                ("rule", "r1"),
                ("type", "node-affinity"),
                ("resources", "vm:100"),
                ("nodes", "pve2"),
                ("affinity", "positive")
            ]
        ),
        "unexpected property 'affinity'"
    );
    assert_eq!(
        fails(
            &s,
            "POST",
            "/cluster/ha/rules",
            &[
                ("rule", "r1"),
                ("type", "node-affinity"),
                ("resources", "vm:101"),
                ("nodes", "pve2")
            ]
        ),
        "create ha rule failed: cannot use unmanaged resource(s) vm:101."
    );
    assert_eq!(
        fails(
            &s,
            "POST",
            "/cluster/ha/rules",
            &[
                ("rule", "r1"),
                ("type", "node-affinity"),
                ("resources", "vm:100"),
                ("nodes", "pve9")
            ]
        ),
        "create ha rule failed: cannot use non-existent node(s) pve9."
    );
    let (code, _, body) = create(&[
        ("rule", "r1"),
        ("type", "node-affinity"),
        ("resources", "vm:100"),
        ("nodes", "pve2"),
        ("nodes", "pve1:x"),
    ]);
    assert_eq!(code, 400, "{body}");

    // pve2 first, pve3 next; strict: only these. The CRM moves the running VM to pve2.
    let (code, reason, _) = create(&[
        ("rule", "r1"),
        ("type", "node-affinity"),
        ("resources", "vm:100"),
        ("nodes", "pve3:1,pve2:2"),
        ("strict", "1"),
        ("comment", "pinned"),
    ]);
    assert_eq!(code, 200, "{reason}");
    let rule = s.data("GET", "/cluster/ha/rules/r1", &[]);
    assert_eq!(
        (
            rule["type"].clone(),
            rule["nodes"].clone(),
            rule["strict"].clone(),
            rule["resources"].clone(),
            rule["order"].clone()
        ),
        (
            json!("node-affinity"),
            json!("pve2:2,pve3:1"),
            json!(1),
            json!("vm:100"),
            json!(1)
        ),
        "{rule}"
    );
    assert!(rule["digest"].as_str().is_some_and(|d| d.len() == 40));
    wait_node(&s, 100, "pve2");

    // A second node-affinity rule with the same resource: infeasible (NodeAffinity.pm
    // check_single_resource_reference), stringified by lock_ha_domain.
    assert_eq!(
        fails(
            &s,
            "POST",
            "/cluster/ha/rules",
            &[
                ("rule", "r2"),
                ("type", "node-affinity"),
                ("resources", "vm:100"),
                ("nodes", "pve1")
            ]
        ),
        "create ha rule failed: 400 Rule 'r2' is invalid."
    );
    assert_eq!(
        fails(
            &s,
            "POST",
            "/cluster/ha/rules",
            &[
                ("rule", "r1"),
                ("type", "resource-affinity"),
                ("resources", "vm:100"),
                ("affinity", "negative")
            ]
        ),
        "create ha rule failed: HA rule 'r1' already defined"
    );

    // A migration to pve1, outside the strict rule: carried out, then moved back.
    let upid = s.data(
        "POST",
        "/nodes/pve2/qemu/100/migrate",
        &[("target", "pve1"), ("online", "1")],
    );
    s.wait(upid.as_str().unwrap());
    wait_node(&s, 100, "pve1");
    wait_node(&s, 100, "pve2");

    // update_rule: the digest, the type's own options, delete.
    let digest = rule["digest"].as_str().unwrap().to_string();
    let put = |params: &[(&str, &str)]| s.call("PUT", "/cluster/ha/rules/r1", params);
    let (code, reason, _) = put(&[("type", "node-affinity"), ("digest", "0000")]);
    assert_eq!(code, 500);
    assert_eq!(
        reason,
        "update HA rules failed: detected modified configuration - file changed by other user? Try again."
    );
    assert_eq!(
        put(&[("type", "node-affinity"), ("delete", "nodes")]).1,
        "update HA rules failed: unable to delete required option 'nodes'"
    );
    let (code, reason, _) = put(&[
        ("type", "node-affinity"),
        ("digest", &digest),
        ("nodes", "pve3"),
        ("delete", "strict,comment"),
    ]);
    assert_eq!(code, 200, "{reason}");
    let rule = s.data("GET", "/cluster/ha/rules/r1", &[]);
    assert_eq!(rule["nodes"], "pve3");
    assert!(
        rule.get("strict").is_none() && rule.get("comment").is_none(),
        "{rule}"
    );
    wait_node(&s, 100, "pve3");

    // resource-affinity: fewer than two resources is infeasible; the list filters by type
    // and resource.
    s.data("POST", "/cluster/ha/resources", &[("sid", "vm:101")]);
    assert_eq!(
        fails(
            &s,
            "POST",
            "/cluster/ha/rules",
            &[
                ("rule", "apart"),
                ("type", "resource-affinity"),
                ("resources", "vm:101"),
                ("affinity", "negative")
            ]
        ),
        "create ha rule failed: 400 Rule 'apart' is invalid."
    );
    s.data(
        "POST",
        "/cluster/ha/rules",
        &[
            ("rule", "apart"),
            ("type", "resource-affinity"),
            ("resources", "vm:100,vm:101"),
            ("affinity", "negative"),
        ],
    );
    let listed = s.data("GET", "/cluster/ha/rules", &[("type", "resource-affinity")]);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["affinity"], "negative");
    let listed = s.data("GET", "/cluster/ha/rules", &[("resource", "vm:100")]);
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");

    // Groups are refused on 9; delete_rule; purge takes the resource out of its rules.
    assert_eq!(
        fails(&s, "GET", "/cluster/ha/groups", &[]),
        "cannot index groups: ha groups have been migrated to rules"
    );
    s.data("DELETE", "/cluster/ha/rules/r1", &[]);
    assert_eq!(
        fails(&s, "GET", "/cluster/ha/rules/r1", &[]),
        "no such ha rule 'r1'"
    );
    s.data("DELETE", "/cluster/ha/resources/vm:101", &[("purge", "1")]);
    let listed = s.data("GET", "/cluster/ha/rules", &[]);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["resources"], "vm:100");
    assert_eq!(
        listed[0]["errors"]["resources"],
        "rule is ineffective as there are less than two resources"
    );
}

/// PVE 8 (pve-ha-manager 4.x, stable-4): `/cluster/ha/groups` served (API2/HA/Groups.pm),
/// a resource's group must exist, no rules API (501), no `failback`; a restricted group
/// places the service as PVE 9's migrated rule would (`restricted` → `strict`, priorities).
#[test]
fn ha_groups_on_pve_8() {
    let sim = Sim::plain(
        &[
            "--nodes",
            "pve1,pve2,pve3",
            "--pve-version",
            "8.4",
            "--time-scale",
            "0.1",
        ],
        &[],
    );
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[]);
    let (code, reason, _) = s.call("GET", "/cluster/ha/rules", &[]);
    assert_eq!(code, 501, "{reason}");
    s.data("POST", "/cluster/ha/resources", &[("sid", "vm:100")]);
    wait_power(&s, "pve1", "100", true);
    assert_eq!(
        fails(
            &s,
            "PUT",
            "/cluster/ha/resources/vm:100",
            &[("group", "fast")]
        ),
        "HA group 'fast' does not exist"
    );
    assert_eq!(
        fails(
            &s,
            "PUT",
            "/cluster/ha/resources/vm:100",
            &[("failback", "1")]
        ),
        "Parameter verification failed."
    );
    s.data(
        "POST",
        "/cluster/ha/groups",
        &[
            ("group", "fast"),
            ("nodes", "pve3:2,pve2:1"),
            ("restricted", "1"),
        ],
    );
    assert_eq!(
        fails(
            &s,
            "POST",
            "/cluster/ha/groups",
            &[("group", "fast"), ("nodes", "pve1")]
        ),
        "create ha group failed: ha group ID 'fast' already defined"
    );
    let group = s.data("GET", "/cluster/ha/groups/fast", &[]);
    assert_eq!(
        (group["nodes"].clone(), group["restricted"].clone()),
        (json!("pve3:2,pve2:1"), json!(1)),
        "{group}"
    );
    s.data("PUT", "/cluster/ha/resources/vm:100", &[("group", "fast")]);
    wait_node(&s, 100, "pve3");
    assert_eq!(
        fails(&s, "DELETE", "/cluster/ha/groups/fast", &[]),
        "delete ha group failed: ha group is used by service 'vm:100'"
    );
    assert_eq!(
        s.data("GET", "/cluster/ha/groups", &[])
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}
