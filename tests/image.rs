//! The `image` module against `pve-sim`: download, re-run unchanged, checksum mismatch,
//! timeout with the task stopped, absent.

use std::time::Duration;

use crate::support::*;
use serde_json::{Value, json};

fn args(sim: &Sim, extra: Value) -> Value {
    merge(&[
        sim.conn(),
        json!({"node": "pve1", "storage": "local"}),
        extra,
    ])
}

#[test]
fn download_then_unchanged_then_absent() {
    let img = small_image();
    let port = serve_file(std::fs::read(&img).unwrap(), Duration::ZERO);
    let sim = Sim::start(&[], &[]);
    let url = format!("http://127.0.0.1:{port}/noble-server-cloudimg-amd64.img");
    let sum = sha256(&img);
    let a = args(
        &sim,
        json!({"url": url, "checksum": sum, "_ansible_diff": true}),
    );

    let r = ok(run_image(a.clone()));
    assert_eq!(r["changed"], true);
    assert_eq!(r["volid"], "local:import/noble-server-cloudimg-amd64.qcow2");
    assert_eq!(r["tasks"][0]["type"], "download");
    assert_eq!(r["diff"]["before"]["state"], "absent");
    assert_eq!(
        r["size"].as_u64(),
        Some(std::fs::metadata(&img).unwrap().len())
    );
    let stored = sim
        .data()
        .join("nodes/pve1/local/import/noble-server-cloudimg-amd64.qcow2");
    assert_eq!(sha256(&stored), sum);

    // Again: PVE checks the existing file against the checksum and downloads nothing.
    let r = ok(run_image(a.clone()));
    assert_eq!(r["changed"], false);
    assert_eq!(
        r["msg"],
        "local:import/noble-server-cloudimg-amd64.qcow2 is present"
    );
    // Without a checksum an existing file is left alone, with no task at all.
    let r = ok(run_image(args(
        &sim,
        json!({"url": format!("http://127.0.0.1:{port}/noble-server-cloudimg-amd64.img")}),
    )));
    assert_eq!(
        (r["changed"].as_bool(), r["tasks"].as_array().unwrap().len()),
        (Some(false), 0)
    );

    // Then the vm module imports it.
    let v = ok(run(merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 100,
        "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/noble-server-cloudimg-amd64.qcow2"}]}),
    ])));
    assert_eq!(v["config"]["scsi0"], "local-lvm:vm-100-disk-0,size=1G");

    // Check mode and absent.
    let gone = merge(&[a.clone(), json!({"state": "absent"})]);
    let r = ok(run_image(merge(&[
        gone.clone(),
        json!({"_ansible_check_mode": true}),
    ])));
    assert_eq!(r["changed"], true);
    assert!(stored.exists());
    let r = ok(run_image(gone.clone()));
    assert_eq!(
        (r["changed"].as_bool(), r["msg"].as_str()),
        (
            Some(true),
            Some("removed local:import/noble-server-cloudimg-amd64.qcow2")
        )
    );
    assert!(!stored.exists());
    assert_eq!(ok(run_image(gone))["changed"], false);
}

#[test]
fn a_checksum_mismatch_fails_and_leaves_nothing() {
    let img = small_image();
    let port = serve_file(std::fs::read(&img).unwrap(), Duration::ZERO);
    let sim = Sim::start(&[], &[]);
    let r = failed(run_image(args(
        &sim,
        json!({"url": format!("http://127.0.0.1:{port}/x.qcow2"), "checksum": "0".repeat(64)}),
    )));
    let msg = r["msg"].as_str().unwrap();
    assert!(msg.contains("failed: checksum mismatch: got '"), "{msg}");
    assert!(
        r["log_tail"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .as_str()
            .unwrap()
            .starts_with("TASK ERROR: checksum mismatch")
    );
    assert_eq!(r["changed"], false);
    let left: Vec<_> = std::fs::read_dir(sim.data().join("nodes/pve1/local/import"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}

#[test]
fn a_timeout_stops_the_download_task() {
    let img = small_image();
    // 16 MiB at 0.5 s per MiB: about 8 s.
    let port = serve_file(std::fs::read(&img).unwrap(), Duration::from_millis(500));
    let sim = Sim::start(&[], &[]);
    let r = failed(run_image(args(
        &sim,
        json!({"url": format!("http://127.0.0.1:{port}/slow.qcow2"), "timeout": "2s", "stop_task_on_timeout": true}),
    )));
    assert!(
        r["msg"].as_str().unwrap().contains("the task was stopped"),
        "{}",
        r["msg"]
    );
    let t = sim
        .tasks()
        .into_iter()
        .find(|t| t["type"] == "download")
        .unwrap();
    assert_eq!(t["exitstatus"], "received interrupt");
    assert!(
        std::fs::read_dir(sim.data().join("nodes/pve1/local/import"))
            .unwrap()
            .next()
            .is_none()
    );
}

#[test]
fn bad_input_is_refused_before_any_request() {
    let sim = Sim::start(&[], &[]);
    for (extra, want) in [
        (
            json!({"url": "ftp://x/a.qcow2"}),
            "url must be an http:// or https:// URL",
        ),
        (
            json!({"url": "http://x/a.qcow2", "filename": "noble.img"}),
            "name it .qcow2",
        ),
        (
            json!({"url": "http://x/a.qcow2", "filename": "a.qcow2,format=raw"}),
            "PVE would store it as \"a.qcow2_format_raw\"",
        ),
        (
            json!({"url": "http://x/a.qcow2", "checksum": "abc"}),
            "checksum must be 64 hex digits for checksum_algorithm sha256",
        ),
        (
            json!({"url": "http://x/a.qcow2", "content": "vztmpl"}),
            "value of content must be one of: import, iso",
        ),
        (
            json!({"filename": "a.qcow2"}),
            "state is present but all of the following are missing: url",
        ),
        (json!({}), "one of the following is required: url, filename"),
        (
            json!({"url": "http://x/a.qcow2", "storage": "local/../x"}),
            "storage must be a PVE storage ID",
        ),
        (
            json!({"url": "http://x/a\tb.qcow2"}),
            "url must not contain '\\t'",
        ),
        (
            json!({"url": "http://x/a.qcow2\u{1}"}),
            "url must not contain '\\u{1}'",
        ),
        (
            json!({"url": "http://x/a.qcow2", "filename": format!("{}.qcow2", "a".repeat(250))}),
            "filename is 256 bytes long; PVE allows at most 255",
        ),
    ] {
        let r = failed(run_image(args(&sim, extra.clone())));
        assert!(
            r["msg"].as_str().unwrap().contains(want),
            "{extra}: {}",
            r["msg"]
        );
    }
    assert!(sim.writes().is_empty());
}

/// download-url stores the name normalised (pve-storage Storage.pm,
/// normalize_content_filename): the module reports and hands on the volid PVE really
/// stored, and refuses a given name PVE would change, before any request.
#[test]
fn names_are_the_ones_pve_stores() {
    let img = small_image();
    let port = serve_file(std::fs::read(&img).unwrap(), Duration::ZERO);
    let sim = Sim::start(&[], &[]);
    let url = format!("http://127.0.0.1:{port}/Ubuntu%20Noble%20(daily).img");
    let r = ok(run_image(args(&sim, json!({"url": url.clone()}))));
    assert_eq!(r["volid"], "local:import/Ubuntu_Noble__daily_.qcow2");
    assert!(
        sim.data()
            .join("nodes/pve1/local/import/Ubuntu_Noble__daily_.qcow2")
            .exists()
    );
    let r = ok(run_image(args(&sim, json!({"url": url.clone()}))));
    assert_eq!(r["changed"], false);
    let before = sim.requests().len();
    let f = failed(run_image(args(
        &sim,
        json!({"url": url, "filename": "noble daily.qcow2"}),
    )));
    assert!(
        f["msg"].as_str().unwrap().contains("\"noble_daily.qcow2\""),
        "{}",
        f["msg"]
    );
    assert_eq!(sim.requests().len(), before, "a request was sent");
}
