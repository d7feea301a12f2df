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
