//! Live progress on stderr (`src/ansible/progress.rs`, `pve/src/task_progress.rs`): asked for
//! with `SANKOFA_PROGRESS=1`, the module writes one JSON line per new percentage of a copy,
//! and its result on stdout is the one it prints without; not asked for, stderr has none.

use crate::support::*;
use serde_json::{Value, json};

const IMAGE: &str = "progress-1g.qcow2";

fn import_args(sim: &Sim, vmid: u32) -> Value {
    merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": vmid, "name": format!("progress{vmid}"),
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": format!("local:import/{IMAGE}")}]}),
    ])
}

/// The events among stderr's lines: every line that is one must be whole JSON.
fn events(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter(|line| line.contains("sankofa_progress"))
        .map(|line| {
            let parsed: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a progress line that is not JSON ({e}): {line:?}"));
            parsed["sankofa_progress"].clone()
        })
        .collect()
}

#[test]
fn an_import_writes_its_progress_on_stderr_only_when_asked() {
    let img = image(IMAGE, 1024, 40);
    let sim = Sim::start(&[&img], &["--import-rate", "120M"]);
    let asked = run_with_env(import_args(&sim, 100), &[("SANKOFA_PROGRESS", "1")]);
    let told = events(&asked.stderr);
    let result = ok(asked);
    let create = &result["tasks"][0];
    assert_eq!(create["type"], "qmcreate");
    let history = create["progress"]["history"].as_array().unwrap();
    // One event for each new percentage the wait saw, in order, all for this task.
    assert!(told.len() >= 3, "{told:?}");
    assert_eq!(told.len(), history.len(), "{told:?} {history:?}");
    for (event, point) in told.iter().zip(history) {
        assert_eq!(event["percent"], point[1], "{event}");
        assert_eq!(event["upid"], create["upid"]);
        assert_eq!(event["node"], "pve1");
        assert_eq!(event["task"], "qmcreate");
        assert_eq!(event["vmid"], 100);
        assert_eq!(event["copy"], 1);
        assert_eq!(event["what"], format!("import local:import/{IMAGE}"));
        assert_eq!(event["total_bytes"], 1u64 << 30);
        assert!(event["done_bytes"].as_u64().unwrap() <= 1 << 30, "{event}");
    }
    let percents: Vec<f64> = told
        .iter()
        .map(|e| e["percent"].as_f64().unwrap())
        .collect();
    assert!(percents.windows(2).all(|w| w[0] < w[1]), "{percents:?}");
    // Once the wait has a rate, it tells the rate and the time left.
    assert!(
        told.iter()
            .any(|e| e["rate_bytes_per_s"].as_f64().is_some_and(|r| r > 0.0)
                && e["eta_s"].is_u64()),
        "{told:?}"
    );
    // Without the variable: nothing on stderr, and the same result.
    let plain = run_with_env(import_args(&sim, 101), &[]);
    assert!(events(&plain.stderr).is_empty(), "{}", plain.stderr);
    assert!(
        !plain.stderr.contains("sankofa_progress"),
        "{}",
        plain.stderr
    );
    let again = ok(plain);
    let keys = |r: &Value| {
        let mut keys: Vec<String> = r.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    assert_eq!(keys(&again), keys(&result));
    assert_eq!(again["changed"], result["changed"]);
    assert_eq!(
        again["config"]["scsi0"],
        result["config"]["scsi0"]
            .as_str()
            .unwrap()
            .replace("vm-100-", "vm-101-")
    );
    // Another value is not the one that asks.
    let other = run_with_env(import_args(&sim, 102), &[("SANKOFA_PROGRESS", "yes")]);
    assert!(events(&other.stderr).is_empty(), "{}", other.stderr);
}
