//! A fleet: many `vm` runs at once, each creating a VM by name with an automatic vmid, as one
//! play with `forks` sends them. What PVE is asked is counted from pve-sim's request log (the
//! count, not the time): the requests per VM stay within a budget that does not grow with
//! the fleet, each VM is created by about one create request (the ids are spread by name,
//! so parallel runs rarely send two creates to one id), and every name ends with one VM.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

/// Requests per VM for a blank create by name on a busy 3-node cluster, ticket included:
/// issue 33's target, 12. Measured 8.0 for 10 VMs on an idle machine (11.9 before the
/// roster, 12.4 to 14.4 before that): each run's own ticket, listing, datacenter.cfg's
/// `next-id` range, the create's task list before it, the create, its status, its config
/// (the claim's and the converge's) and the claim's listing. The fleet's other VMs cost
/// nothing: this controller's roster names them (`pve/src/client/roster.rs`), so no run waits
/// for another's create or reads a node's list to learn its name; on a loaded host a create
/// takes a status look or two more.
const BUDGET_PER_VM: f64 = 12.0;

/// Requests per VM for a create by name that imports a cloud image, its task's polls
/// included (9.0 measured for 10 VMs on an idle machine, 13.4 before the roster; issue 33's
/// target is 20, this budget keeps the margin a loaded host needs).
const IMPORT_BUDGET_PER_VM: f64 = 16.0;

/// Runs `hosts` creates by name at once on a fresh 3-node pve-sim, started `stagger` apart
/// (as Ansible's forks start one after another); returns the request log and the VMs at the
/// end (name → vmids).
fn fleet(hosts: usize, stagger: Duration) -> (Vec<Value>, BTreeMap<String, Vec<u64>>) {
    fleet_of(hosts, stagger, &[], json!({}))
}

/// [`fleet`] with `images` seeded and `extra` options for every VM.
fn fleet_of(
    hosts: usize,
    stagger: Duration,
    images: &[&std::path::Path],
    extra: Value,
) -> (Vec<Value>, BTreeMap<String, Vec<u64>>) {
    let sim = Sim::start(
        images,
        &["--time-scale", "0.2", "--nodes", "pve1,pve2,pve3"],
    );
    run_fleet(&sim, hosts, stagger, &extra);
    let mut names: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for node in ["pve1", "pve2", "pve3"] {
        for vm in sim.get(&format!("/nodes/{node}/qemu"))["data"]
            .as_array()
            .unwrap()
        {
            names
                .entry(vm["name"].as_str().unwrap_or_default().to_string())
                .or_default()
                .push(vm["vmid"].as_u64().unwrap());
        }
    }
    (sim.requests(), names)
}

/// `hosts` creates by name on `sim`'s three nodes, started `stagger` apart, each with
/// `extra`; every one must change something.
fn run_fleet(sim: &Sim, hosts: usize, stagger: Duration, extra: &Value) {
    let handles: Vec<_> = (0..hosts)
        .map(|host| {
            std::thread::sleep(stagger);
            let args = merge(&[
                sim.conn(),
                json!({"node": format!("pve{}", host % 3 + 1), "name": format!("fleet{host}"),
                       "cores": 1}),
                extra.clone(),
            ]);
            std::thread::spawn(move || run(args))
        })
        .collect();
    for handle in handles {
        assert_eq!(ok(handle.join().unwrap())["changed"], true);
    }
}

/// The fleet's requests per VM: the log's last `ending_reads` are the test's reads of the end
/// state (they come last: every run had ended).
fn per_vm(requests: &[Value], hosts: usize, ending_reads: usize) -> f64 {
    (requests.len() - ending_reads) as f64 / hosts as f64
}

/// The requests by endpoint (method and path, with nodes, ids and UPIDs as placeholders),
/// most first: what a failed budget shows.
fn breakdown(requests: &[Value]) -> String {
    let mut rows: BTreeMap<String, usize> = BTreeMap::new();
    for request in requests {
        let path = request["path"].as_str().unwrap_or_default();
        let shape: Vec<String> = path
            .split('/')
            .map(|part| {
                if part.starts_with("UPID:") {
                    "{upid}".to_string()
                } else if part.starts_with("pve") {
                    "{node}".to_string()
                } else if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
                    "{vmid}".to_string()
                } else {
                    part.to_string()
                }
            })
            .collect();
        let method = request["method"].as_str().unwrap_or_default();
        let mut endpoint = format!("{method} {}", shape.join("/"));
        if method == "GET"
            && let Some(params) = request["params"].as_object()
            && !params.is_empty()
        {
            let keys: Vec<&str> = params.keys().map(String::as_str).collect();
            endpoint = format!("{endpoint}?{}", keys.join("&"));
        }
        *rows.entry(endpoint).or_default() += 1;
    }
    let mut rows: Vec<(String, usize)> = rows.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    rows.iter()
        .map(|(endpoint, count)| format!("{count:6} {endpoint}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn creates(requests: &[Value]) -> usize {
    requests
        .iter()
        .filter(|request| {
            request["method"] == "POST"
                && request["path"]
                    .as_str()
                    .is_some_and(|path| path.ends_with("/qemu"))
        })
        .count()
}

#[test]
fn ten_parallel_creates_by_name_keep_to_a_request_budget_that_does_not_grow_with_the_fleet() {
    let forks = Duration::from_millis(40);
    let (small, small_names) = fleet(3, forks);
    let (large, large_names) = fleet(10, forks);
    for (hosts, names) in [(3, &small_names), (10, &large_names)] {
        assert_eq!(names.len(), hosts, "one VM per name: {names:?}");
        assert!(
            names.values().all(|vmids| vmids.len() == 1),
            "a name carried twice: {names:?}"
        );
    }
    // The three end-state reads (one node list per node) are the test's.
    let (small_per_vm, large_per_vm) = (per_vm(&small, 3, 3), per_vm(&large, 10, 3));
    assert!(
        large_per_vm <= BUDGET_PER_VM,
        "{large_per_vm:.1} requests per VM for 10 VMs at once (budget {BUDGET_PER_VM}):\n{}",
        breakdown(&large)
    );
    assert!(
        large_per_vm <= small_per_vm * 1.5 + 2.0,
        "the requests per VM grow with the fleet: {small_per_vm:.1} for 3 VMs, {large_per_vm:.1} for 10"
    );
    let sent = creates(&large);
    assert!(
        sent as f64 <= 10.0 * 1.2,
        "{sent} create requests for 10 VMs: parallel runs collide on their ids"
    );
    // The fleet's VMs are known from the roster: no run reads a node's list to learn their
    // names (the last 3 are the test's own).
    let node_lists = large[..large.len() - 3]
        .iter()
        .filter(|request| {
            request["method"] == "GET"
                && request["path"]
                    .as_str()
                    .is_some_and(|path| path.starts_with("/nodes/") && path.ends_with("/qemu"))
        })
        .count();
    assert!(
        node_lists <= 2,
        "{node_lists} node lists read for 10 VMs by name:\n{}",
        breakdown(&large)
    );
}

#[test]
fn runs_started_at_the_same_instant_for_ten_names_end_with_one_vm_each() {
    // No run can see another's create yet: their first creates meet on one id, and the
    // losers spread theirs by name.
    let (requests, names) = fleet(10, Duration::ZERO);
    assert_eq!(names.len(), 10, "one VM per name: {names:?}");
    assert!(
        names.values().all(|vmids| vmids.len() == 1),
        "a name carried twice: {names:?}"
    );
    let sent = creates(&requests);
    assert!(
        sent < 10 * 2,
        "{sent} create requests for 10 VMs: the losers of the first collision collide again"
    );
}

#[test]
fn ten_parallel_creates_from_a_cloud_image_keep_to_their_request_budget() {
    let img = small_image();
    let disk = json!({"disks": [{"slot": "scsi0", "storage": "local-lvm",
                                 "import_from": "local:import/small.qcow2"}]});
    let (requests, names) = fleet_of(10, Duration::from_millis(40), &[&img], disk);
    assert_eq!(names.len(), 10, "one VM per name: {names:?}");
    assert!(
        names.values().all(|vmids| vmids.len() == 1),
        "a name carried twice: {names:?}"
    );
    let per_vm = per_vm(&requests, 10, 3);
    assert!(
        per_vm <= IMPORT_BUDGET_PER_VM,
        "{per_vm:.1} requests per VM for 10 imports at once (budget {IMPORT_BUDGET_PER_VM}):\n{}",
        breakdown(&requests)
    );
}

/// datacenter.cfg's `next-id` range (pve-sim's `--next-id`) holds the ids of a fleet by name,
/// as it holds `nextid`'s: the ids spread by name stay below its upper end, even where the
/// usual spread (1,000 ids above the lowest free one) would pass it.
#[test]
fn a_fleet_by_name_keeps_to_datacenter_cfgs_next_id_range() {
    let sim = Sim::start(
        &[],
        &[
            "--next-id",
            "lower=5000,upper=5012",
            "--nodes",
            "pve1,pve2,pve3",
        ],
    );
    let handles: Vec<_> = (0..6)
        .map(|host| {
            let args = merge(&[
                sim.conn(),
                json!({"node": format!("pve{}", host % 3 + 1), "name": format!("ranged{host}"),
                       "cores": 1}),
            ]);
            std::thread::spawn(move || run(args))
        })
        .collect();
    let mut ids: Vec<u64> = handles
        .into_iter()
        .map(|handle| ok(handle.join().unwrap())["vmid"].as_u64().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6, "one VM per name: {ids:?}");
    assert!(
        ids.iter().all(|id| (5000..5012).contains(id)),
        "ids outside datacenter.cfg's next-id range: {ids:?}"
    );
}

/// An earlier run's create that still runs when a run for its name starts (the earlier run
/// ended at its timeout; PVE's worker goes on) holds a VM that has no name yet anywhere: the
/// later run waits for that create, finds the VM by its name once it ended, and makes no
/// other, though the listing never names it (pvestatd has not looked again).
#[test]
fn a_run_by_name_waits_for_an_earlier_runs_create_still_running_and_finds_its_vm() {
    let img = image("earlier-300.qcow2", 1024, 300);
    let sim = Sim::start(
        &[&img],
        &["--stats-interval", "120s", "--import-rate", "150M"],
    );
    let args = |timeout: &str| {
        merge(&[
            sim.conn(),
            json!({"node": "pve1", "name": "earlier", "cores": 1, "timeout": timeout,
                   "disks": [{"slot": "scsi0", "storage": "local-lvm",
                              "import_from": "local:import/earlier-300.qcow2"}]}),
        ])
    };
    let interrupted = failed(run(args("1s")));
    assert!(
        interrupted["msg"]
            .as_str()
            .is_some_and(|msg| msg.contains("still running at the deadline")),
        "{interrupted}"
    );
    let vmid = auto_vmid("earlier", &[]);
    let again = ok(run(args("60s")));
    assert_eq!(again["vmid"].as_u64(), Some(vmid), "{again}");
    assert_eq!(sim.task_count("qmcreate"), 1, "a second VM was created");
    let listed = sim.get("/cluster/resources?type=vm")["data"].clone();
    assert!(listed[0].get("name").is_none(), "{listed}");
}

/// A run by name that sees a create of this controller's own fleet in flight, for another
/// name, takes that VM's name from the roster (the record the other run wrote once PVE
/// accepted its create) and goes on: it ends while that create still imports, and reads no
/// task list and no node's list to learn what it is. An interrupted run's create is not taken
/// so (`a_run_by_name_waits_for_a_create_whose_run_was_interrupted_whatever_its_name`).
#[test]
fn a_run_by_name_does_not_wait_for_a_create_this_controllers_fleet_makes_for_another_name() {
    let img = image("peer-300.qcow2", 1024, 300);
    let sim = Sim::start(
        &[&img],
        &[
            "--stats-interval",
            "120s",
            "--import-rate",
            "60M",
            "--nodes",
            "pve1,pve2",
        ],
    );
    let importing = merge(&[
        sim.conn(),
        json!({"node": "pve1", "name": "importing", "cores": 1,
               "disks": [{"slot": "scsi0", "storage": "local-lvm",
                          "import_from": "local:import/peer-300.qcow2"}]}),
    ]);
    let peer = std::thread::spawn(move || run(importing));
    let copying = || {
        sim.get("/nodes/pve1/tasks?source=active")["data"]
            .as_array()
            .is_some_and(|tasks| tasks.iter().any(|task| task["type"] == "qmcreate"))
    };
    let began = std::time::Instant::now();
    while !copying() {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "the import never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = sim.requests().len();
    let blank = ok(run(merge(&[
        sim.conn(),
        json!({"node": "pve2", "name": "blank", "cores": 1}),
    ])));
    assert_eq!(blank["changed"], true, "{blank}");
    let after = sim.requests().len();
    assert!(
        copying(),
        "the run for 'blank' waited for the import of 'importing' to end"
    );
    let asked: Vec<String> = sim.requests()[before..after]
        .iter()
        .filter(|request| request["method"] == "GET")
        .filter_map(|request| {
            // The node's task lists but the run's own, of its new vmid before its create.
            let path = request["path"].as_str().unwrap_or_default();
            let lists_tasks = path.ends_with("/tasks") && request["params"]["vmid"].is_null();
            (path.ends_with("/qemu") || path == "/cluster/tasks" || lists_tasks)
                .then(|| path.to_string())
        })
        .collect();
    assert!(
        asked.is_empty(),
        "the run for 'blank' read {asked:?} to learn what the fleet's create is"
    );
    assert_eq!(ok(peer.join().unwrap())["changed"], true);
    assert_eq!(sim.task_count("qmcreate"), 2);
}

/// A run that ended while its create still ran (its timeout) leaves a record no other run
/// takes: the create it started may be any name's VM for all a later run can tell, so a run
/// for another name waits for it to end, as it waits for a create it has no record of, and
/// reads its name then.
#[test]
fn a_run_by_name_waits_for_a_create_whose_run_was_interrupted_whatever_its_name() {
    let img = image("interrupted-300.qcow2", 1024, 300);
    let sim = Sim::start(
        &[&img],
        &[
            "--stats-interval",
            "120s",
            "--import-rate",
            "30M",
            "--nodes",
            "pve1,pve2",
        ],
    );
    let interrupted = failed(run(merge(&[
        sim.conn(),
        json!({"node": "pve1", "name": "first", "cores": 1, "timeout": "1s",
               "disks": [{"slot": "scsi0", "storage": "local-lvm",
                          "import_from": "local:import/interrupted-300.qcow2"}]}),
    ])));
    assert!(
        interrupted["msg"]
            .as_str()
            .is_some_and(|msg| msg.contains("still running at the deadline")),
        "{interrupted}"
    );
    let second = ok(run(merge(&[
        sim.conn(),
        json!({"node": "pve2", "name": "second", "cores": 1}),
    ])));
    assert_eq!(second["changed"], true, "{second}");
    let running = sim.get("/nodes/pve1/tasks?source=active")["data"]
        .as_array()
        .is_some_and(|tasks| tasks.iter().any(|task| task["type"] == "qmcreate"));
    assert!(
        !running,
        "the run for 'second' took the interrupted run's create for what its record said"
    );
    assert_eq!(sim.task_count("qmcreate"), 2);
}

/// A run that ended while its clone still ran (its timeout) leaves a VM that the clone holds
/// with no name yet: qemu-server clone_vm writes a temporary config of `lock: clone` alone,
/// and the name only with the copied disks, and its `qmclone` task carries the template's
/// id. A re-run for the name waits for that clone and converges its VM; it does not clone
/// again.
#[test]
fn a_rerun_by_name_waits_for_an_interrupted_runs_clone_and_does_not_clone_again() {
    let img = image("clone-source-100.qcow2", 1024, 100);
    let sim = Sim::start(
        &[&img],
        &["--stats-interval", "120s", "--import-rate", "20M"],
    );
    ok(run(merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 900, "name": "tpl", "cores": 1, "template": true,
               "timeout": "2m",
               "disks": [{"slot": "scsi0", "storage": "local-lvm",
                          "import_from": "local:import/clone-source-100.qcow2"}]}),
    ])));
    let clone = json!({"node": "pve1", "name": "web", "clone": {"vmid": 900, "full": true}});
    let interrupted = failed(run(merge(&[
        sim.conn(),
        clone.clone(),
        json!({"timeout": "1s"}),
    ])));
    assert!(
        interrupted["msg"]
            .as_str()
            .is_some_and(|msg| msg.contains("deadline")),
        "{interrupted}"
    );
    let held: Vec<u64> = sim.get("/nodes/pve1/qemu")["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|vm| vm["lock"] == "clone")
        .filter_map(|vm| vm["vmid"].as_u64())
        .collect();
    assert_eq!(held.len(), 1, "the interrupted run's clone is not running");
    let rerun = ok(run(merge(&[sim.conn(), clone, json!({"timeout": "2m"})])));
    assert_eq!(
        rerun["vmid"].as_u64(),
        Some(held[0]),
        "the re-run did not take the clone in flight for its VM: {rerun}"
    );
    assert_eq!(sim.task_count("qmclone"), 1, "the re-run cloned again");
    let named: Vec<u64> = sim.get("/nodes/pve1/qemu")["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|vm| vm["name"] == "web")
        .filter_map(|vm| vm["vmid"].as_u64())
        .collect();
    assert_eq!(named, [held[0]]);
}

/// Without `Sys.Audit` on `/` the cluster's recent tasks list only the user's own tasks
/// (pve-manager Cluster.pm `tasks`): parallel runs for one name by such a user, on two nodes,
/// still end with one VM, each run naming it (the claim judges the VMs of its listing).
#[test]
fn parallel_runs_for_one_name_without_sys_audit_end_with_one_vm() {
    let sim = Sim::start(
        &[],
        &[
            "--time-scale",
            "0.2",
            "--nodes",
            "pve1,pve2",
            "--user",
            "root@pam:pve-sim",
            "--user",
            "ops@pve:opspw:nosysaudit",
        ],
    );
    let handles: Vec<_> = (0..4)
        .map(|host| {
            let args = merge(&[
                sim.conn(),
                sim.conn_as("ops@pve", "opspw"),
                json!({"node": format!("pve{}", host % 2 + 1), "name": "shared", "cores": 1}),
            ]);
            std::thread::spawn(move || run(args))
        })
        .collect();
    let vmids: Vec<u64> = handles
        .into_iter()
        .map(|handle| ok(handle.join().unwrap())["vmid"].as_u64().unwrap())
        .collect();
    let mut carriers = Vec::new();
    for node in ["pve1", "pve2"] {
        for vm in sim.get(&format!("/nodes/{node}/qemu"))["data"]
            .as_array()
            .unwrap()
        {
            if vm["name"] == "shared" {
                carriers.push(vm["vmid"].as_u64().unwrap());
            }
        }
    }
    assert_eq!(carriers.len(), 1, "{carriers:?}");
    assert!(vmids.iter().all(|id| *id == carriers[0]), "{vmids:?}");
}

/// PVE shows datacenter.cfg's `next-id` only to a caller with `Sys.Audit` on `/` (pve-manager
/// Cluster.pm `get_options` answers every user, without it only `console` and `tag-style`):
/// a run by name of a user without it still keeps its automatic id within the range, asking
/// `/cluster/nextid` for the lowest free one.
#[test]
fn a_run_by_name_without_sys_audit_keeps_to_the_next_id_range_it_cannot_read() {
    let sim = Sim::start(
        &[],
        &[
            "--next-id",
            "lower=5000,upper=5012",
            "--user",
            "root@pam:pve-sim",
            "--user",
            "ops@pve:opspw:nosysaudit",
        ],
    );
    let args = merge(&[
        sim.conn(),
        sim.conn_as("ops@pve", "opspw"),
        json!({"node": "pve1", "name": "scoped", "cores": 1}),
    ]);
    let vmid = ok(run(args))["vmid"].as_u64().unwrap();
    assert!(
        (5000..5012).contains(&vmid),
        "an id outside datacenter.cfg's next-id range: {vmid}"
    );
    let options: Vec<Value> = sim
        .requests()
        .into_iter()
        .filter(|request| request["path"] == "/cluster/options")
        .collect();
    assert!(
        options.iter().all(|request| request["status"] == 200),
        "PVE answers the options to every user: {options:?}"
    );
}

/// A probe, not a check: `FLEET_HOSTS`, `FLEET_SCALE`, `FLEET_STAGGER_MS`, `FLEET_COST_MS`,
/// `FLEET_IMPORT` shape a fleet as the bench runs it; prints the requests per VM and their
/// endpoints. `cargo test --test integration fleet::probe -- --ignored --nocapture`.
#[test]
#[ignore]
fn probe() {
    let var = |key: &str, default: &str| std::env::var(key).unwrap_or_else(|_| default.into());
    let hosts: usize = var("FLEET_HOSTS", "10").parse().unwrap();
    let scale = var("FLEET_SCALE", "0.5");
    let cost = format!("{}ms", var("FLEET_COST_MS", "0"));
    let stagger = Duration::from_millis(var("FLEET_STAGGER_MS", "40").parse().unwrap());
    let import = var("FLEET_IMPORT", "") == "1";
    let img = small_image();
    let sim = Sim::start(
        &[&img],
        &[
            "--time-scale",
            &scale,
            "--nodes",
            "pve1,pve2,pve3",
            "--workers",
            "3",
            "--daemon-workers",
            "3",
            "--request-cost",
            &cost,
            "--daemon-request-cost",
            &cost,
        ],
    );
    let extra = if import {
        json!({"disks": [{"slot": "scsi0", "storage": "local-lvm",
                          "import_from": "local:import/small.qcow2"}]})
    } else {
        json!({})
    };
    let begun = std::time::Instant::now();
    run_fleet(&sim, hosts, stagger, &extra);
    let wall = begun.elapsed();
    let requests = sim.requests();
    eprintln!(
        "{hosts} VMs: {:.1} requests per VM, {} creates, wall {wall:?}\n{}",
        per_vm(&requests, hosts, 0),
        creates(&requests),
        breakdown(&requests)
    );
}
