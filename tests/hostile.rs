//! Hostile servers, unlucky operators and careless input: the classes of defects an
//! adversarial probe found (issue 12), each with cases of its own. A server that drips, pads,
//! redirects or logs a million lines; signals of every kind; check mode spelled as Ansible may
//! spell it; secrets echoed in other spellings; parallel runs that share a name.

use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::{Value, json};

fn vm(sim: &Sim, extra: Value) -> Value {
    merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 100, "name": "web1", "cores": 1,
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2"}]}),
        extra,
    ])
}

/// Check mode as a string, a number or any boolean spelling never carries out a destroy.
#[test]
fn check_mode_in_every_spelling_changes_nothing() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    ok(run(vm(&sim, json!({"state": "present"}))));
    let port = serve_file(std::fs::read(&img).unwrap(), Duration::ZERO);
    let image = merge(&[
        sim.conn(),
        json!({"node": "pve1", "storage": "local", "url": format!("http://127.0.0.1:{port}/keep.qcow2")}),
    ]);
    ok(run_image(image.clone()));
    let writes = sim.writes().len();
    for spelling in [
        json!(true),
        json!("true"),
        json!("True"),
        json!("yes"),
        json!("on"),
        json!("y"),
        json!("1"),
        json!(1),
    ] {
        let r = ok(run(vm(
            &sim,
            json!({"state": "absent", "_ansible_check_mode": spelling}),
        )));
        assert_eq!(r["changed"], true, "{spelling}");
        let r = ok(run_image(merge(&[
            image.clone(),
            json!({"state": "absent", "_ansible_check_mode": spelling}),
        ])));
        assert_eq!(r["changed"], true, "{spelling}");
    }
    assert_eq!(sim.writes().len(), writes, "check mode sent a write");
    assert_eq!(
        sim.get("/nodes/pve1/qemu/100/config")["data"]["name"],
        "web1"
    );
    assert!(
        sim.data()
            .join("nodes/pve1/local/import/keep.qcow2")
            .exists()
    );
}

/// A server that drips its answer cannot hold the module past `timeout`.
#[test]
fn a_dripping_server_cannot_hold_the_module_past_its_timeout() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    sim.fault(json!({"kind": "slow_body", "path": "/qemu/100/config", "ms": 500}));
    let t = Instant::now();
    let f = failed(run(vm(
        &sim,
        json!({"timeout": "4s", "api_timeout": "60s"}),
    )));
    assert!(
        t.elapsed() < Duration::from_secs(7),
        "the module ran {:?} with timeout 4s: {}",
        t.elapsed(),
        f["msg"]
    );
}

/// PVE never redirects; a redirect is reported, not followed.
#[test]
fn redirects_are_refused() {
    let sim = Sim::start(&[], &[]);
    sim.fault(json!({"kind": "http", "path": "/qemu/100/config", "status": 307, "message": "Temporary Redirect"}));
    let t = Instant::now();
    let f = failed(run(vm(&sim, json!({}))));
    let msg = f["msg"].as_str().unwrap();
    assert!(
        msg.contains("answered 307") && msg.contains("not followed"),
        "{msg}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

/// An answer far larger than any PVE answer is refused, not buffered.
#[test]
fn an_oversized_answer_is_refused() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    sim.fault(json!({"kind": "big_body", "path": "/qemu/100/config", "bytes": 60_000_000}));
    let f = failed(run(vm(&sim, json!({"timeout": "20s"}))));
    let msg = f["msg"].as_str().unwrap();
    assert!(msg.contains("larger than 8 MiB"), "{msg}");
}

/// The tail of a failed task is the log's real end, however long the log.
#[test]
fn a_failed_tasks_tail_is_the_end_of_a_huge_log() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    sim.fault(
        json!({"kind": "task", "task_type": "qmcreate", "outcome": "fail",
                     "message": "the very end", "log_lines": 200_000, "count": 1}),
    );
    let f = failed(run(vm(&sim, json!({}))));
    let tail: Vec<&str> = f["log_tail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(
        tail.last().copied(),
        Some("TASK ERROR: the very end"),
        "{tail:?}"
    );
    assert!(tail.contains(&"filler line 200000 of 200000"), "{tail:?}");
    // The log is read by pages and the middle skipped: no read starts inside the 200000
    // filler lines (the reads are the progress ones at the start and one jump to the end).
    let middle: Vec<u64> = sim
        .requests()
        .iter()
        .filter(|q| q["path"].as_str().unwrap_or("").ends_with("/log"))
        .filter_map(|q| q["params"]["start"].as_str()?.parse().ok())
        .filter(|start| (1000..199_000).contains(start))
        .collect();
    assert!(middle.is_empty(), "log reads from the middle: {middle:?}");
}

/// Every signal Ansible or an operator sends ends in one failed result naming it; no write
/// starts after it.
#[test]
fn every_signal_ends_in_one_clear_result() {
    let img = image("sig-300.qcow2", 1024, 300);
    for sig in ["-TERM", "-INT", "-HUP", "-QUIT"] {
        let sim = Sim::start(&[&img], &["--import-rate", "40M"]);
        let disks = json!([{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/sig-300.qcow2", "size": "2G"}]);
        let r = run_and_signal(
            vm(&sim, json!({"disks": disks})),
            Duration::from_millis(1500),
            sig,
        );
        let f = failed(r);
        let name = format!("SIG{}", &sig[1..]);
        assert!(
            f["msg"].as_str().unwrap().contains(&name),
            "{sig}: {}",
            f["msg"]
        );
        // The create was sent; nothing after the signal.
        let writes: Vec<String> = sim
            .writes()
            .iter()
            .map(|q| {
                format!(
                    "{} {}",
                    q["method"].as_str().unwrap(),
                    q["path"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(writes, vec!["POST /nodes/pve1/qemu".to_string()], "{sig}");
    }
}

/// A signal that arrives while a read is in flight stops the write that would follow it.
#[test]
fn a_signal_during_a_read_stops_the_write_after_it() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    sim.fault(json!({"kind": "latency", "path": "/qemu/100/config", "ms": 2000}));
    let f = failed(run_and_signal(
        vm(&sim, json!({})),
        Duration::from_millis(700),
        "-TERM",
    ));
    assert!(
        f["msg"].as_str().unwrap().contains("SIGTERM"),
        "{}",
        f["msg"]
    );
    assert!(sim.writes().is_empty(), "a write was sent after SIGTERM");
}

/// A server that echoes the request in an error carries the secrets in other spellings;
/// none reaches the output.
#[test]
fn secrets_echoed_in_other_spellings_are_masked() {
    let password = "correct horse+battery/stäple";
    let sim = Sim::start(&[], &["--user", &format!("ops@pve:{password}")]);
    let form = password
        .bytes()
        .map(|b| match b {
            b' ' => "+".to_string(),
            b if b.is_ascii_alphanumeric() => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect::<String>();
    let json_escaped = serde_json::to_string(password).unwrap();
    sim.fault(json!({"kind": "http", "path": "/cluster/resources", "status": 400,
        "message": format!("bad request: username=ops@pve&password={form} body={json_escaped} lower={}",
                           form.to_ascii_lowercase())}));
    let mut args = vm(&sim, json!({"vmid": null}));
    let o = args.as_object_mut().unwrap();
    o.remove("vmid");
    for (k, v) in sim.conn_as("ops@pve", password).as_object().unwrap() {
        o.insert(k.clone(), v.clone());
    }
    o.insert("_ansible_verbosity".into(), json!(4));
    let r = run(args);
    for text in [&r.stdout, &r.stderr] {
        for spelling in [
            password.to_string(),
            form.clone(),
            form.to_ascii_lowercase(),
            json_escaped.trim_matches('"').to_string(),
            "horse".to_string(),
        ] {
            assert!(!text.contains(&spelling), "{spelling:?} leaked: {text}");
        }
    }
}

/// Runs by name alone, at once: one VM carries the name in the end, and every run says what
/// it did.
#[test]
fn parallel_runs_by_name_leave_one_vm_per_name() {
    let img = small_image();
    let sim = Sim::start(&[&img], &["--time-scale", "0.3"]);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let mut a = vm(&sim, json!({"name": "twin", "state": "started"}));
            a.as_object_mut().unwrap().remove("vmid");
            std::thread::spawn(move || run(a))
        })
        .collect();
    let results: Vec<Value> = handles.into_iter().map(|h| ok(h.join().unwrap())).collect();
    let vms = sim.get("/nodes/pve1/qemu")["data"].clone();
    let twins: Vec<&Value> = vms
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["name"] == "twin")
        .collect();
    assert_eq!(twins.len(), 1, "{vms}");
    let id = twins[0]["vmid"].as_u64().unwrap();
    for r in &results {
        assert_eq!(r["vmid"].as_u64(), Some(id), "{r}");
        assert_eq!(r["status"], "running");
    }
    // Every run that created a VM says so; the losers also say what they removed.
    let creators = results.iter().filter(|r| r["changed"] == true).count();
    assert!(creators >= 1);
    let removed = results
        .iter()
        .filter(|r| {
            r["warnings"].as_array().is_some_and(|w| {
                w.iter()
                    .any(|x| x.as_str().unwrap_or("").contains("was removed"))
            })
        })
        .count();
    assert_eq!(removed, sim.task_count("qmcreate") - 1, "{results:?}");
    // And a later run by name is a no-op.
    let mut a = vm(&sim, json!({"name": "twin", "state": "started"}));
    a.as_object_mut().unwrap().remove("vmid");
    assert_eq!(ok(run(a))["changed"], false);
}

/// A create with `vmid` whose answer is lost, while the task list fails the first look for
/// the task it may have started: the request is not sent again; the run looks until the task
/// list answers, finds its `qmcreate` (this user's, not listed before the create) and reports
/// that it created the VM.
#[test]
fn a_lost_create_answer_with_a_vmid_is_reported_as_this_runs_change() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    sim.fault(json!([
        {"kind": "drop", "method": "POST", "path": "/nodes/pve1/qemu", "count": 1},
        {"kind": "http", "method": "GET", "path": "/nodes/pve1/tasks", "status": 500, "message": "Internal Server Error", "count": 1}
    ]));
    let r = ok(run(vm(&sim, json!({"state": "present"}))));
    assert_eq!(r["changed"], true, "{r}");
    assert_eq!(sim.task_count("qmcreate"), 1);
    let creates = sim
        .requests()
        .iter()
        .filter(|q| q["method"] == "POST" && q["path"] == "/nodes/pve1/qemu")
        .count();
    assert_eq!(creates, 1, "the create was sent again");
    assert_eq!(r["vmid"], 100);
}
