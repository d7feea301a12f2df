//! The fault matrix: every operation (create, update, resize, start, delete) under every fault
//! pve-sim injects. Each cell must end as PVE allows (success, or a clear failure for a failed
//! task), with exactly one task of the operation: never a second dispatch, never a duplicate VM.
//! The matrix is printed as a table (`cargo test --test integration fault_matrix -- --nocapture`).

use std::time::Duration;

use crate::support::*;
use serde_json::{Value, json};

struct Op {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    task: &'static str,
    /// Options for the run under test (on top of the VM's base options).
    args: Value,
    /// Whether VM 100 exists before the run.
    setup: bool,
}

fn base(sim: &Sim) -> Value {
    merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 100, "name": "matrix", "cores": 1,
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2"}]}),
    ])
}

fn ops() -> Vec<Op> {
    let disk3 = json!([{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2", "size": "3G"}]);
    vec![
        Op {
            name: "create",
            method: "POST",
            path: "/nodes/pve1/qemu",
            task: "qmcreate",
            args: json!({}),
            setup: false,
        },
        Op {
            name: "update",
            method: "POST",
            path: "/qemu/100/config",
            task: "qmconfig",
            args: json!({"cores": 4}),
            setup: true,
        },
        Op {
            name: "resize",
            method: "PUT",
            path: "/qemu/100/resize",
            task: "resize",
            args: json!({"disks": disk3}),
            setup: true,
        },
        Op {
            name: "start",
            method: "POST",
            path: "/qemu/100/status/start",
            task: "qmstart",
            args: json!({"state": "started"}),
            setup: true,
        },
        Op {
            name: "delete",
            method: "DELETE",
            path: "/nodes/pve1/qemu/100",
            task: "qmdestroy",
            args: json!({"state": "absent"}),
            setup: true,
        },
    ]
}

/// (label, fault JSON built for an operation, extra module options, the run should succeed)
fn faults(op: &Op) -> Vec<(&'static str, Value, Value, bool)> {
    let on_dispatch = |status: u16, msg: &str, after: bool| json!({"kind": "http", "method": op.method, "path": op.path, "status": status, "message": msg, "after": after, "count": 1});
    vec![
        (
            "596 on status polls",
            json!({"kind": "http", "method": "GET", "path": "/tasks/", "status": 596, "message": "Connection timed out", "count": 3}),
            json!({}),
            true,
        ),
        (
            "500 on status polls",
            json!({"kind": "http", "method": "GET", "path": "/tasks/", "status": 500, "message": "Internal Server Error", "count": 2}),
            json!({}),
            true,
        ),
        (
            "599 on status polls",
            json!({"kind": "http", "method": "GET", "path": "/tasks/", "status": 599, "message": "Too many redirections", "count": 2}),
            json!({}),
            true,
        ),
        (
            "595 before dispatch",
            on_dispatch(595, "Connection refused", false),
            json!({}),
            true,
        ),
        (
            "596 after dispatch",
            on_dispatch(596, "Broken pipe", true),
            json!({}),
            true,
        ),
        (
            "5xx after dispatch",
            on_dispatch(502, "Bad Gateway", true),
            json!({}),
            true,
        ),
        (
            "dropped connection",
            json!({"kind": "drop", "method": op.method, "path": op.path, "count": 1}),
            json!({}),
            true,
        ),
        (
            "null UPID",
            json!({"kind": "null_upid", "method": op.method, "path": op.path, "count": 1}),
            json!({}),
            true,
        ),
        (
            "answer slower than api_timeout",
            json!({"kind": "latency", "method": "GET", "path": "/tasks/", "ms": 2500, "count": 1}),
            json!({"api_timeout": "1s"}),
            true,
        ),
        (
            "task not yet visible",
            json!({"kind": "hide_task", "task_type": op.task, "ms": 1500, "count": 1}),
            json!({}),
            true,
        ),
        (
            "task ends WARNINGS",
            json!({"kind": "task", "task_type": op.task, "outcome": "warnings", "warnings": 2, "count": 1}),
            json!({}),
            true,
        ),
        (
            "task fails with a log",
            json!({"kind": "task", "task_type": op.task, "outcome": "fail", "message": "simulated storage error", "count": 1}),
            json!({}),
            false,
        ),
    ]
}

#[test]
fn every_operation_under_every_fault() {
    let img = small_image();
    let mut table = vec![
        "| operation | fault | outcome | tasks of the operation |".to_string(),
        "|---|---|---|---|".to_string(),
    ];
    let mut cells = 0;
    for op in ops() {
        for (label, fault, extra, succeeds) in faults(&op) {
            let sim = Sim::start(&[&img], &["--time-scale", "0.2"]);
            if op.setup {
                ok(run(base(&sim)));
            }
            sim.fault(fault);
            let r = run(merge(&[base(&sim), op.args.clone(), extra]));
            let count = sim.task_count(op.task);
            let cell = format!("{} / {label}", op.name);
            let outcome = if succeeds {
                let res = ok(r);
                match op.name {
                    "create" => assert!(res["config"]["scsi0"].is_string(), "{cell}"),
                    "update" => assert_eq!(res["config"]["cores"], 4, "{cell}"),
                    "resize" => assert_eq!(
                        res["config"]["scsi0"], "local-lvm:vm-100-disk-0,size=3G",
                        "{cell}"
                    ),
                    "start" => assert_eq!(res["status"], "running", "{cell}"),
                    _ => assert_eq!(res["status"], "absent", "{cell}"),
                }
                if label == "task ends WARNINGS" {
                    assert!(
                        res["warnings"].as_array().is_some_and(|w| !w.is_empty()),
                        "{cell}: no warning"
                    );
                }
                "success".to_string()
            } else {
                let res = failed(r);
                let msg = res["msg"].as_str().unwrap();
                assert!(
                    msg.contains("failed: simulated storage error"),
                    "{cell}: {msg}"
                );
                assert_eq!(
                    res["log_tail"].as_array().unwrap().last().unwrap(),
                    "TASK ERROR: simulated storage error",
                    "{cell}"
                );
                "failed with the task's error and log tail".to_string()
            };
            assert_eq!(
                count, 1,
                "{cell}: {count} {} tasks (a second dispatch?)",
                op.task
            );
            let vms = sim.get("/cluster/resources?type=vm")["data"]
                .as_array()
                .unwrap()
                .len();
            assert!(vms <= 1, "{cell}: {vms} VMs");
            table.push(format!("| {} | {label} | {outcome} | {count} |", op.name));
            cells += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    eprintln!("{}", table.join("\n"));
    assert_eq!(cells, 60);
}
