//! Exactly once through outages (issue 23), against a forwarder of our own that plays
//! pveproxy in front of pve-sim (`outages::forwarder`): answers to creates and clones lost
//! after PVE acted, pveproxy down, hanging and resetting, another user's VM taking the vmid, a
//! parallel clone of the same template by the same user, a node clock that is not ours, a
//! node that does not answer, a create killed mid-import, every catchable signal, an exit
//! status beyond 32 bits. Each test asserts what a user would check: how many creates or
//! clones reached PVE, how many VMs there are, what the result says, what was written.

// The forwarder can do every fault it documents; not each one has a test of its own yet.
#[allow(dead_code)]
mod forwarder;
mod least_privilege;

use std::time::Duration;

use crate::support::*;
use forwarder::{Action, Forwarder, Rule, act_as, percent_encode, shift_upid};
use serde_json::{Value, json};

const CREATE: &str = "/nodes/pve1/qemu";

/// A create by name alone (the vmid from `nextid`) that imports a disk.
fn by_name(fwd: &Forwarder, name: &str, extra: Value) -> Value {
    merge(&[
        fwd.conn(),
        json!({"node": "pve1", "name": name, "cores": 1, "timeout": "90s",
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2"}]}),
        extra,
    ])
}

/// The VMs the cluster lists, as (vmid, name) from each node's own listing.
fn vms(sim: &Sim, node: &str) -> Vec<(u64, String)> {
    sim.get(&format!("/nodes/{node}/qemu"))["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["vmid"].as_u64().unwrap(),
                v["name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The requests PVE saw, as `METHOD path`.
fn carried(sim: &Sim, method: &str, path: &str) -> usize {
    sim.requests()
        .iter()
        .filter(|q| q["method"] == method && q["path"] == path)
        .count()
}

/// What the forwarder received, one request a line, seconds from the first.
fn trace(fwd: &Forwarder) -> String {
    let seen = fwd.seen();
    let Some(t0) = seen.first().map(|s| s.at) else {
        return "(nothing received)".into();
    };
    seen.iter()
        .map(|s| {
            format!(
                "{:>7.3} {} {} {}",
                (s.at - t0).as_secs_f64(),
                s.method,
                s.path,
                s.outcome
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// [`ok`], showing what the forwarder received when the run failed.
fn ok_via(fwd: &Forwarder, r: Run) -> Value {
    assert!(
        r.result["failed"] != json!(true),
        "module failed: {}\n{}",
        r.result,
        trace(fwd)
    );
    ok(r)
}

/// [`failed`], showing what the forwarder received when the run succeeded.
fn failed_via(fwd: &Forwarder, r: Run) -> Value {
    assert_eq!(
        r.result["failed"],
        json!(true),
        "module did not fail: {}\n{}",
        r.result,
        trace(fwd)
    );
    failed(r)
}

fn msg(v: &Value) -> String {
    v["msg"].as_str().unwrap_or("").to_string()
}

/// Class 1: the create's answer is lost after PVE started it, then pveproxy is down for 8 s
/// while the import runs. The run sends the create once, finds its task when pveproxy is
/// back, and ends with one VM of the name.
#[test]
fn a_lost_create_answer_then_an_outage_creates_one_vm() {
    let img = small_image();
    let sim = Sim::start(&[&img], &["--plain-http", "--import-rate", "80M"]);
    let fwd = Forwarder::start(&sim);
    fwd.rule(
        Rule::new(Some("POST"), CREATE, Action::LoseAnswer)
            .times(1)
            .then_down(Duration::from_secs(8)),
    );
    let r = ok_via(&fwd, run(by_name(&fwd, "lost-once", json!({}))));
    assert_eq!(fwd.count("POST", CREATE), 1, "{:?}", fwd.seen());
    assert_eq!(carried(&sim, "POST", CREATE), 1);
    assert_eq!(sim.task_count("qmcreate"), 1);
    let id = auto_vmid("lost-once", &[]);
    assert_eq!(vms(&sim, "pve1"), vec![(id, "lost-once".to_string())]);
    assert_eq!(r["changed"], true, "{r}");
    assert_eq!(r["vmid"], id);
    assert_eq!(task_types(&r)[0], "qmcreate", "{r}");
}

/// Class 1 without an outage: a server that closes the connection after every create it
/// receives (having passed it on) gets one create from a run, and one VM is made.
#[test]
fn a_server_that_closes_after_every_create_gets_it_once() {
    let img = small_image();
    let sim = Sim::start(&[&img], &["--plain-http"]);
    let fwd = Forwarder::start(&sim);
    fwd.rule(Rule::new(Some("POST"), CREATE, Action::LoseAnswer));
    let r = ok_via(&fwd, run(by_name(&fwd, "closer", json!({}))));
    assert_eq!(fwd.count("POST", CREATE), 1, "{:?}", fwd.seen());
    assert_eq!(sim.task_count("qmcreate"), 1);
    assert_eq!(
        vms(&sim, "pve1"),
        vec![(auto_vmid("closer", &[]), "closer".to_string())]
    );
    assert_eq!(r["changed"], true);
}

/// Class 1, the request never reached PVE: the connection closes after the create was
/// received and nothing was passed on. The run does not send it again: it looks, finds
/// neither a task nor a VM, and fails saying so, having changed nothing.
#[test]
fn a_create_lost_before_pve_saw_it_is_not_sent_again() {
    let img = small_image();
    let sim = Sim::start(&[&img], &["--plain-http"]);
    let fwd = Forwarder::start(&sim);
    fwd.rule(Rule::new(Some("POST"), CREATE, Action::CloseUnsent).times(1));
    let f = failed_via(
        &fwd,
        run(by_name(&fwd, "unsent", json!({"timeout": "40s"}))),
    );
    assert_eq!(fwd.count("POST", CREATE), 1, "{:?}", fwd.seen());
    assert_eq!(carried(&sim, "POST", CREATE), 0);
    assert!(vms(&sim, "pve1").is_empty());
    assert_eq!(f["changed"], false, "{f}");
    let m = msg(&f);
    let id = auto_vmid("unsent", &[]);
    assert!(m.contains(&format!("VM {id}")) && m.contains("pve1"), "{m}");
    assert!(m.contains("not sent again"), "{m}");
}

/// Unanswered TLS handshakes and connections reset as they are accepted, just before the
/// create: nothing reached PVE, so the create may be sent on a new connection, once.
#[test]
fn hung_handshakes_and_resets_before_the_create_are_ridden_out() {
    let img = small_image();
    let sim = Sim::start(&[&img], &["--plain-http"]);
    let fwd = Forwarder::start(&sim);
    // The answer to nextid closes its connection, so the create needs a new one.
    fwd.rule(
        Rule::new(Some("GET"), "/cluster/nextid", Action::Forward)
            .times(1)
            .then_hang(Duration::from_secs(3)),
    );
    let r = ok_via(
        &fwd,
        run(by_name(&fwd, "hung", json!({"api_timeout": "1s"}))),
    );
    assert_eq!(carried(&sim, "POST", CREATE), 1);
    let hung = auto_vmid("hung", &[]);
    assert_eq!(vms(&sim, "pve1"), vec![(hung, "hung".to_string())]);
    assert_eq!(r["changed"], true);

    fwd.rule(
        Rule::new(Some("GET"), "/cluster/nextid", Action::Forward)
            .times(1)
            .then_reset(3),
    );
    let r = ok_via(&fwd, run(by_name(&fwd, "reset", json!({}))));
    assert_eq!(carried(&sim, "POST", CREATE), 2);
    assert_eq!(sim.task_count("qmcreate"), 2);
    assert_eq!(r["vmid"], auto_vmid("reset", &[hung as u32]));
}

/// Class 2: between the run's look and its create (vmid given), another user's create takes
/// the vmid. The VM is not this run's: the run fails naming the vmid, who created it and
/// when, and writes nothing to it.
#[test]
fn another_users_vm_that_takes_the_vmid_is_never_written() {
    let sim = Sim::start(&[], &["--plain-http", "--user", "alice@pve:Alice-Pw-7"]);
    let fwd = Forwarder::start(&sim);
    let port = sim.port();
    fwd.rule(
        Rule::new(
            Some("POST"),
            CREATE,
            Action::Before(Box::new(move || {
                act_as(
                    port,
                    "alice@pve",
                    "Alice-Pw-7",
                    "POST",
                    CREATE,
                    &[
                        ("vmid", "500"),
                        ("name", "alices"),
                        ("memory", "512"),
                        ("cores", "1"),
                    ],
                )
                .unwrap();
            })),
        )
        .times(1),
    );
    let args = merge(&[
        fwd.conn(),
        json!({"node": "pve1", "vmid": 500, "name": "ours", "cores": 2, "memory": 2048,
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}]}),
    ]);
    let f = failed_via(&fwd, run(args));
    let m = msg(&f);
    assert!(m.contains("VM 500"), "{m}");
    assert!(m.contains("alice@pve"), "{m}");
    assert!(m.contains("UTC"), "no time in: {m}");
    assert_eq!(f["changed"], false, "{f}");
    // Nothing but the one create reached VM 500 from the module.
    let writes: Vec<String> = fwd
        .seen()
        .iter()
        .filter(|s| s.method != "GET" && s.path != "/access/ticket")
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert_eq!(writes, vec![format!("POST {CREATE}")], "{writes:?}");
    let cfg = &sim.get("/nodes/pve1/qemu/500/config")["data"];
    assert_eq!(cfg["name"], "alices", "{cfg}");
    assert_eq!(cfg["memory"].to_string().trim_matches('"'), "512", "{cfg}");
    assert_eq!(cfg["cores"].to_string().trim_matches('"'), "1", "{cfg}");
    assert_eq!(sim.task_count("qmcreate"), 1);
}

/// Class 2 by name: between the run's look and its create (name only), another user's
/// create makes a VM of the same name. The run's own VM is removed (one VM per name), and the
/// run fails naming the other VM, who made it and when; nothing is written to that VM.
#[test]
fn another_users_vm_that_takes_the_name_is_never_written() {
    let sim = Sim::start(&[], &["--plain-http", "--user", "alice@pve:Alice-Pw-7"]);
    let fwd = Forwarder::start(&sim);
    let port = sim.port();
    let alice = move |method: &str, path: &str, params: &[(&str, &str)]| {
        act_as(port, "alice@pve", "Alice-Pw-7", method, path, params)
    };
    fwd.rule(
        Rule::new(
            Some("POST"),
            CREATE,
            Action::Before(Box::new(move || {
                alice(
                    "POST",
                    CREATE,
                    &[
                        ("vmid", "777"),
                        ("name", "shared"),
                        ("memory", "512"),
                        ("cores", "1"),
                    ],
                )
                .unwrap();
                // Her create ends (PVE writes the name and ctime last), a second before ours.
                let t = std::time::Instant::now();
                while t.elapsed() < Duration::from_secs(20) {
                    let cfg = alice("GET", "/nodes/pve1/qemu/777/config", &[]).unwrap();
                    if cfg["name"] == "shared" && cfg.get("lock").is_none() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                std::thread::sleep(Duration::from_millis(1100));
            })),
        )
        .times(1),
    );
    let args = merge(&[
        fwd.conn(),
        json!({"node": "pve1", "name": "shared", "cores": 2, "memory": 2048,
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}]}),
    ]);
    let f = failed_via(&fwd, run(args));
    let m = msg(&f);
    assert!(m.contains("VM 777"), "{m}");
    assert!(m.contains("alice@pve"), "{m}");
    assert!(m.contains("UTC"), "no time in: {m}");
    let ours = auto_vmid("shared", &[777]);
    assert!(
        m.contains(&format!("VM {ours}")) && m.contains("removed"),
        "{m}"
    );
    assert_eq!(vms(&sim, "pve1"), vec![(777, "shared".to_string())]);
    let cfg = &sim.get("/nodes/pve1/qemu/777/config")["data"];
    assert_eq!(cfg["memory"].to_string().trim_matches('"'), "512", "{cfg}");
    assert_eq!(cfg["cores"].to_string().trim_matches('"'), "1", "{cfg}");
    let touched: Vec<String> = fwd
        .seen()
        .iter()
        .filter(|s| s.method != "GET" && s.path.contains("/777"))
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert!(touched.is_empty(), "{touched:?}");
}

/// Class 3: the node's clock is 60 s behind this machine's; the create's answer is lost and
/// pveproxy is down for 8 s. The run recognises its task by what PVE records (its user, its
/// node, a task that was not there before its create), creates once and says so.
#[test]
fn a_node_clock_behind_with_a_lost_answer_and_an_outage() {
    let img = small_image();
    let sim = Sim::start(&[&img], &["--plain-http", "--import-rate", "80M"]);
    let fwd = Forwarder::start(&sim);
    fwd.clock_offset("pve1", -60);
    fwd.rule(
        Rule::new(Some("POST"), CREATE, Action::LoseAnswer)
            .times(1)
            .then_down(Duration::from_secs(8)),
    );
    let r = ok_via(&fwd, run(by_name(&fwd, "behind", json!({}))));
    assert_eq!(fwd.count("POST", CREATE), 1, "{:?}", fwd.seen());
    assert_eq!(sim.task_count("qmcreate"), 1);
    assert_eq!(
        vms(&sim, "pve1"),
        vec![(auto_vmid("behind", &[]), "behind".to_string())]
    );
    assert_eq!(r["changed"], true, "{r}");
    assert!(msg(&r).contains("create"), "{}", msg(&r));
    // The UPID reported is the node's (its start time 60 s behind the simulator's).
    let upid = r["tasks"][0]["upid"].as_str().unwrap();
    let starttime = i64::from_str_radix(upid.split(':').nth(4).unwrap(), 16).unwrap();
    let listed =
        sim.get("/nodes/pve1/tasks?typefilter=qmcreate&source=all")["data"][0]["starttime"]
            .as_i64()
            .unwrap();
    assert_eq!(starttime, listed - 60, "{upid}");
}

/// The forwarder's node clock shifts UPIDs in answers and back in request paths.
#[test]
fn the_forwarders_clock_shifts_upids_both_ways() {
    let clocks = vec![("pve1".to_string(), -60)];
    let upid = "UPID:pve1:00001234:00ABCDEF:68D7279C:qmcreate:100:root@pam:";
    let shifted = shift_upid(upid, &clocks, 1);
    assert_eq!(
        shifted,
        "UPID:pve1:00001234:00ABCDEF:68D72760:qmcreate:100:root@pam:"
    );
    let path = format!("/nodes/pve1/tasks/{}/status", percent_encode(&shifted));
    assert_eq!(
        forwarder::shift_upids_in_path(&path, &clocks, -1),
        format!("/nodes/pve1/tasks/{}/status", percent_encode(upid))
    );
    let other = "UPID:pve2:00001234:00ABCDEF:68D7279C:qmcreate:100:root@pam:";
    assert_eq!(shift_upid(other, &clocks, 1), other);
}

/// Class 4: every request to pve2 is answered `595 No route to host` for the whole run. The
/// failure names the node, what PVE said and for how long, not just the deadline.
#[test]
fn a_node_unreachable_for_the_whole_run_is_named() {
    let sim = Sim::start(&[], &["--plain-http", "--nodes", "pve1,pve2"]);
    let fwd = Forwarder::start(&sim);
    fwd.rule(Rule::new(
        None,
        "/nodes/pve2/",
        Action::Status(595, "No route to host".into()),
    ));
    let args = merge(&[
        fwd.conn(),
        json!({"node": "pve2", "vmid": 100, "name": "far", "cores": 1, "timeout": "8s",
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}]}),
    ]);
    let f = failed_via(&fwd, run(args));
    let m = msg(&f);
    assert!(m.contains("pve2"), "{m}");
    assert!(m.contains("595 No route to host"), "{m}");
    assert!(m.contains("did not answer for"), "{m}");
    assert!(!m.contains("could be sent"), "{m}");
    assert!(
        fwd.count("GET", "/nodes/pve2/qemu/100/config") > 1,
        "{:?}",
        fwd.seen()
    );
    assert_eq!(carried(&sim, "POST", "/nodes/pve2/qemu"), 0);
}

/// Class 4, during a wait: the import runs, then its node stops answering (595) until the
/// deadline. The failure says the node stopped answering and since when, the last progress
/// seen and when, and that the task's outcome is unknown.
#[test]
fn a_task_whose_node_stops_answering_reports_the_last_progress_seen() {
    let img = image("outage-64.qcow2", 1024, 64);
    let sim = Sim::start(&[&img], &["--plain-http", "--import-rate", "20M"]);
    let fwd = Forwarder::start(&sim);
    let args = merge(&[
        fwd.conn(),
        json!({"node": "pve1", "vmid": 100, "name": "dark", "cores": 1, "timeout": "12s",
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/outage-64.qcow2"}]}),
    ]);
    let module = std::thread::spawn(move || run(args));
    // Let the import show progress, then cut the node off.
    let t = std::time::Instant::now();
    while sim.task_count("qmcreate") == 0 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(4));
    fwd.rule(Rule::new(
        None,
        "/nodes/pve1/",
        Action::Status(595, "No route to host".into()),
    ));
    let f = failed_via(&fwd, module.join().unwrap());
    let m = msg(&f);
    assert!(
        m.contains("still running at the deadline") || m.contains("unknown"),
        "{m}"
    );
    assert!(m.contains("pve1 stopped answering"), "{m}");
    assert!(m.contains("595 No route to host"), "{m}");
    assert!(m.contains("last progress seen"), "{m}");
    assert!(!m.contains("the task goes on in PVE"), "{m}");
}

/// Class 5: a create killed mid-import leaves `lock: create` and no name (PVE writes the
/// name last). A re-run by name alone says that VM looks like that leftover and how to clear
/// it.
#[test]
fn a_create_killed_mid_import_is_named_as_a_leftover() {
    let img = image("orphan-300.qcow2", 1024, 300);
    let sim = Sim::start(&[&img], &["--plain-http", "--import-rate", "30M"]);
    let fwd = Forwarder::start(&sim);
    sim.fault(json!({"kind": "deaf_task", "task_type": "qmcreate", "count": 1}));
    let disks = json!([{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/orphan-300.qcow2"}]);
    let f = failed_via(
        &fwd,
        run(by_name(
            &fwd,
            "orphan",
            json!({"disks": disks, "timeout": "3s", "stop_task_on_timeout": true}),
        )),
    );
    assert!(msg(&f).contains("PVE killed it"), "{}", msg(&f));
    let left = auto_vmid("orphan", &[]);
    let cfg = &sim.get(&format!("/nodes/pve1/qemu/{left}/config"))["data"];
    assert_eq!(cfg["lock"], "create", "{cfg}");
    assert!(cfg.get("name").is_none(), "{cfg}");
    let small = json!([{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}]);
    let r = run(by_name(&fwd, "orphan", json!({"disks": small})));
    let text = format!("{} {}", msg(&r.result), r.result["warnings"]);
    assert!(text.contains(&format!("VM {left}")), "{text}");
    assert!(text.contains("lock: create"), "{text}");
    assert!(text.contains("leftover"), "{text}");
    assert!(text.contains(&format!("qm unlock {left}")), "{text}");
    assert!(text.contains(&format!("qm destroy {left}")), "{text}");
}

/// Every catchable signal that would end the process ends it with one result naming it, and
/// no write starts after it; the signals that do not end a process leave the run going.
#[test]
fn every_catchable_signal_ends_in_one_result() {
    let img = image("sig-300.qcow2", 1024, 300);
    // (what kill(1) is given, the name the result must carry); 64 is SIGRTMAX on Linux.
    let mut signals: Vec<(String, String)> = [
        "USR1", "USR2", "ALRM", "VTALRM", "PROF", "XCPU", "XFSZ", "IO", "PWR", "STKFLT", "TRAP",
        "SYS", "BUS", "SEGV", "FPE", "ILL", "ABRT", "RTMIN+3",
    ]
    .iter()
    .map(|s| (s.to_string(), format!("SIG{s}")))
    .collect();
    signals.push(("64".into(), "SIGRTMAX".into()));
    for (sig, name) in signals {
        let sim = Sim::start(&[&img], &["--import-rate", "40M"]);
        let disks = json!([{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/sig-300.qcow2"}]);
        let args = merge(&[
            sim.conn(),
            json!({"node": "pve1", "vmid": 100, "name": "sig", "cores": 1, "disks": disks}),
        ]);
        let r = run_and_signal(args, Duration::from_millis(1500), &format!("-{sig}"));
        assert_eq!(r.result["failed"], true, "{sig}: {}", r.result);
        let f = failed(r);
        assert!(msg(&f).contains(&name), "{sig}: {}", msg(&f));
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
        assert_eq!(writes, vec![format!("POST {CREATE}")], "{sig}");
    }
}

/// `WARNINGS: 4294967296` (more than 32 bits) is a success by PVE's rule (pve-common
/// PVE/Tools.pm, upid_status_is_error: `OK` or `WARNINGS: \d+`), reported as PVE wrote it.
#[test]
fn a_warnings_count_beyond_32_bits_is_a_success() {
    let img = small_image();
    let sim = Sim::start(&[&img], &["--plain-http"]);
    let fwd = Forwarder::start(&sim);
    sim.fault(json!({"kind": "task", "task_type": "qmcreate", "outcome": "warnings", "warnings": 2, "count": 1}));
    fwd.rewrite("/tasks/", "WARNINGS: 2", "WARNINGS: 4294967296");
    let r = ok_via(&fwd, run(by_name(&fwd, "warned", json!({}))));
    assert_eq!(r["tasks"][0]["exitstatus"], "WARNINGS: 4294967296", "{r}");
    assert!(
        r["warnings"].as_array().is_some_and(|w| !w.is_empty()),
        "{r}"
    );
}

const CLONE: &str = "/nodes/pve1/qemu/900/clone";

/// Template 900 on pve1, a 1 GiB disk to link clones to (made before any fault is set).
fn template(fwd: &Forwarder) {
    ok(run(merge(&[
        fwd.conn(),
        json!({"node": "pve1", "vmid": 900, "name": "tpl", "cores": 1, "template": true,
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}]}),
    ])));
}

/// A linked clone of template 900 by name alone (the vmid from `nextid`), through `fwd`.
fn clone_by_name(fwd: &Forwarder, name: &str, extra: Value) -> Value {
    merge(&[
        fwd.conn(),
        json!({"name": name, "clone": {"vmid": 900}, "timeout": "90s"}),
        extra,
    ])
}

/// Every VM on pve1 as (vmid, name), by vmid.
fn sorted_vms(sim: &Sim) -> Vec<(u64, String)> {
    let mut all = vms(sim, "pve1");
    all.sort();
    all
}

/// The new vmid a clone task's log names (its worker's first line, qemu-server clone_vm).
fn named_by_log(sim: &Sim, upid: &str) -> String {
    let log = sim.get(&format!("/nodes/pve1/tasks/{}/log", percent_encode(upid)))["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|line| line["t"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>();
    log.iter()
        .find_map(|line| line.strip_prefix("creating a clone of VM 900 with ID "))
        .unwrap_or_else(|| panic!("no line naming the new id in {log:?}"))
        .to_string()
}

/// Issue 23's clone gap: the clone's answer is lost after PVE started it, then pveproxy is
/// down for 8 s. With an automatic vmid, sending it again would meet `config file already
/// exists` and clone to the next free id, a second VM. The run sends it once, finds its task
/// when pveproxy is back, and reports the one VM it made.
#[test]
fn a_lost_clone_answer_then_an_outage_clones_one_vm() {
    let sim = Sim::start(&[], &["--plain-http"]);
    let fwd = Forwarder::start(&sim);
    template(&fwd);
    fwd.rule(
        Rule::new(Some("POST"), CLONE, Action::LoseAnswer)
            .times(1)
            .then_down(Duration::from_secs(8)),
    );
    let r = ok_via(&fwd, run(clone_by_name(&fwd, "lost-clone", json!({}))));
    assert_eq!(fwd.count("POST", CLONE), 1, "{}", trace(&fwd));
    assert_eq!(carried(&sim, "POST", CLONE), 1);
    assert_eq!(sim.task_count("qmclone"), 1);
    let id = auto_vmid("lost-clone", &[900]);
    let mut expected = vec![(id, "lost-clone".to_string()), (900, "tpl".to_string())];
    expected.sort();
    assert_eq!(sorted_vms(&sim), expected);
    assert_eq!(r["changed"], true, "{r}");
    assert_eq!(r["vmid"], id, "{r}");
    assert_eq!(task_types(&r)[0], "qmclone", "{r}");
    assert_eq!(r["config"]["name"], "lost-clone", "{r}");
    let upid = r["tasks"][0]["upid"].as_str().unwrap();
    assert_eq!(named_by_log(&sim, upid), id.to_string(), "{upid}");
}

/// The clone never reached PVE: the connection closes after it was received and nothing was
/// passed on. The run does not send it again (nor to another id): it looks, finds neither
/// a task nor a VM, and fails saying a re-run clones it, having changed nothing.
#[test]
fn a_clone_lost_before_pve_saw_it_is_not_sent_again() {
    let sim = Sim::start(&[], &["--plain-http"]);
    let fwd = Forwarder::start(&sim);
    template(&fwd);
    fwd.rule(Rule::new(Some("POST"), CLONE, Action::CloseUnsent).times(1));
    let f = failed_via(
        &fwd,
        run(clone_by_name(
            &fwd,
            "unsent-clone",
            json!({"timeout": "40s"}),
        )),
    );
    assert_eq!(fwd.count("POST", CLONE), 1, "{}", trace(&fwd));
    assert_eq!(carried(&sim, "POST", CLONE), 0);
    assert_eq!(sim.task_count("qmclone"), 0);
    assert_eq!(sorted_vms(&sim), vec![(900, "tpl".to_string())]);
    assert_eq!(f["changed"], false, "{f}");
    let m = msg(&f);
    let id = auto_vmid("unsent-clone", &[900]);
    assert!(
        m.contains("VM 900") && m.contains(&format!("VM {id}")),
        "{m}"
    );
    assert!(m.contains("not sent again"), "{m}");
    assert!(m.contains("a re-run clones the VM"), "{m}");
}

/// While the clone's answer is lost (and pveproxy down for 8 s), the same user clones the
/// same template to VM 555: two new `qmclone` tasks of that user, both with the template's id
/// in their UPIDs, theirs the newer. The run's is recognised by its log's line naming the
/// run's new id, and the run reports its own task and VM, not the other.
#[test]
fn a_parallel_clone_of_the_same_template_by_the_same_user_is_not_taken_for_ours() {
    let sim = Sim::start(&[], &["--plain-http"]);
    let fwd = Forwarder::start(&sim);
    template(&fwd);
    fwd.rule(
        Rule::new(Some("POST"), CLONE, Action::LoseAnswer)
            .times(1)
            .then_down(Duration::from_secs(8)),
    );
    let args = clone_by_name(&fwd, "ours", json!({}));
    let module = std::thread::spawn(move || run(args));
    let t = std::time::Instant::now();
    while sim.task_count("qmclone") == 0 && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        sim.task_count("qmclone"),
        1,
        "the run's clone never started"
    );
    let theirs = act_as(
        sim.port(),
        "root@pam",
        crate::support::PASSWORD,
        "POST",
        CLONE,
        &[("newid", "555"), ("name", "theirs")],
    )
    .unwrap();
    let theirs = theirs.as_str().unwrap().to_string();
    let r = ok_via(&fwd, module.join().unwrap());
    assert_eq!(fwd.count("POST", CLONE), 1, "{}", trace(&fwd));
    assert_eq!(sim.task_count("qmclone"), 2);
    let ours = auto_vmid("ours", &[900]);
    let mut expected = vec![
        (ours, "ours".to_string()),
        (555, "theirs".to_string()),
        (900, "tpl".to_string()),
    ];
    expected.sort();
    assert_eq!(sorted_vms(&sim), expected);
    assert_eq!(r["vmid"], ours, "{r}");
    assert_eq!(r["changed"], true, "{r}");
    let upid = r["tasks"][0]["upid"].as_str().unwrap();
    assert_ne!(
        upid, theirs,
        "the other clone's task was taken for the run's"
    );
    assert_eq!(named_by_log(&sim, upid), ours.to_string(), "{upid}");
    assert_eq!(named_by_log(&sim, &theirs), "555", "{theirs}");
    // Both tasks are the same user's, with the template's id: only the log tells them apart.
    for u in [upid, theirs.as_str()] {
        assert!(u.contains(":qmclone:900:root@pam:"), "{u}");
    }
}

/// The clone never reached PVE, and meanwhile another user clones the template to the vmid
/// the run chose (`nextid`'s, spread by the name). That VM is not this run's: the run fails naming it, its
/// maker and when, and writes nothing to it.
#[test]
fn another_users_clone_that_takes_the_new_id_is_never_written() {
    let sim = Sim::start(&[], &["--plain-http", "--user", "alice@pve:Alice-Pw-7"]);
    let fwd = Forwarder::start(&sim);
    template(&fwd);
    fwd.rule(Rule::new(Some("POST"), CLONE, Action::CloseUnsent).times(1));
    let args = clone_by_name(&fwd, "ours", json!({"cores": 3, "timeout": "40s"}));
    let ours = auto_vmid("ours", &[900]).to_string();
    let module = std::thread::spawn(move || run(args));
    let t = std::time::Instant::now();
    while fwd.count("POST", CLONE) == 0 && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let hers = act_as(
        sim.port(),
        "alice@pve",
        "Alice-Pw-7",
        "POST",
        CLONE,
        &[("newid", ours.as_str()), ("name", "alices")],
    )
    .unwrap();
    let f = failed_via(&fwd, module.join().unwrap());
    let m = msg(&f);
    assert!(m.contains(&format!("VM {ours}")), "{m}");
    assert!(m.contains("alice@pve"), "{m}");
    assert!(m.contains("cloned from VM 900"), "{m}");
    assert!(m.contains(hers.as_str().unwrap()), "{m}");
    assert!(m.contains("UTC"), "no time in: {m}");
    assert_eq!(f["changed"], false, "{f}");
    assert_eq!(fwd.count("POST", CLONE), 1, "{}", trace(&fwd));
    let touched: Vec<String> = fwd
        .seen()
        .iter()
        .filter(|s| s.method != "GET" && s.path.contains(&format!("/{ours}")))
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert!(touched.is_empty(), "{touched:?}");
    let cfg = &sim.get(&format!("/nodes/pve1/qemu/{ours}/config"))["data"];
    assert_eq!(cfg["name"], "alices", "{cfg}");
    assert_eq!(cfg["cores"].to_string().trim_matches('"'), "1", "{cfg}");
}

/// Between the run's look and its clone (vmid 500 given), another user's create takes vmid
/// 500, and PVE refuses the clone (`config file already exists`). The VM is not this run's:
/// the run fails naming it, who created it and when, and writes nothing to it (it used to
/// read it again and converge it).
#[test]
fn another_users_vm_that_takes_a_clones_given_vmid_is_never_written() {
    let sim = Sim::start(&[], &["--plain-http", "--user", "alice@pve:Alice-Pw-7"]);
    let fwd = Forwarder::start(&sim);
    template(&fwd);
    let port = sim.port();
    fwd.rule(
        Rule::new(
            Some("POST"),
            CLONE,
            Action::Before(Box::new(move || {
                act_as(
                    port,
                    "alice@pve",
                    "Alice-Pw-7",
                    "POST",
                    CREATE,
                    &[("vmid", "500"), ("name", "alices"), ("cores", "1")],
                )
                .unwrap();
            })),
        )
        .times(1),
    );
    let args = merge(&[
        fwd.conn(),
        json!({"vmid": 500, "name": "ours", "cores": 4, "clone": {"vmid": 900}}),
    ]);
    let f = failed_via(&fwd, run(args));
    let m = msg(&f);
    assert!(m.contains("VM 500"), "{m}");
    assert!(m.contains("config file already exists"), "{m}");
    assert!(m.contains("alice@pve"), "{m}");
    assert!(m.contains("UTC"), "no time in: {m}");
    assert_eq!(f["changed"], false, "{f}");
    assert_eq!(sim.task_count("qmclone"), 0);
    let touched: Vec<String> = fwd
        .seen()
        .iter()
        .filter(|s| s.method != "GET" && s.path.contains("/500"))
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert!(touched.is_empty(), "{touched:?}");
    // Her create ends as she made it (PVE writes the name last).
    let t = std::time::Instant::now();
    let mut cfg = sim.get("/nodes/pve1/qemu/500/config")["data"].clone();
    while cfg.get("lock").is_some() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
        cfg = sim.get("/nodes/pve1/qemu/500/config")["data"].clone();
    }
    assert_eq!(cfg["name"], "alices", "{cfg}");
    assert_eq!(cfg["cores"].to_string().trim_matches('"'), "1", "{cfg}");
}
