//! The request gate across processes (`api_concurrency`): the runs of one controller keep at
//! most that many requests in flight to one PVE API at once, and a slot a killed run held is
//! freed. What pve-sim handled at once is read from its request log, each request's handler
//! from `began` to `ts`, which lie within the time its run held a slot (from before the
//! request was sent until its answer was read). Each test gives its runs a runtime directory
//! of its own (`XDG_RUNTIME_DIR`), where the slots' lock files are made.

use std::fs::{OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

/// The runs of a fleet: more than pveproxy's 3 workers, as Ansible's forks are.
const HOSTS: usize = 10;

/// The most requests whose handlers ran at once in pve-sim, from the log's `began` and `ts`
/// (an end and a start at one instant do not overlap).
fn most_at_once(requests: &[Value]) -> usize {
    let mut edges: Vec<(f64, i32)> = requests
        .iter()
        .filter_map(|request| Some((request["began"].as_f64()?, request["ts"].as_f64()?)))
        .flat_map(|(began, ended)| [(began, 1), (ended, -1)])
        .collect();
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most) = (0, 0);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

/// The slots' folder under a runtime directory: the one gate its runs made.
fn gate_folder(runtime: &Path) -> PathBuf {
    let gates = runtime.join("sankofa-proxmox/gates");
    let folders: Vec<PathBuf> = std::fs::read_dir(&gates)
        .unwrap_or_else(|e| panic!("{}: {e}", gates.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(folders.len(), 1, "one gate per endpoint: {folders:?}");
    folders[0].clone()
}

/// Whether another opening of the slot file can lock it now (then it is unlocked again).
fn free(slot: &Path) -> bool {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(slot)
        .unwrap();
    match file.try_lock() {
        Ok(()) => true,
        Err(TryLockError::WouldBlock) => false,
        Err(TryLockError::Error(e)) => panic!("{}: {e}", slot.display()),
    }
}

/// `HOSTS` creates by name at once, each its own `vm` process, with `api_concurrency` set to
/// `slots`, on a fresh pve-sim whose calls take 5 ms in pveproxy and 20 ms more in pvedaemon;
/// the request log and the runtime directory the runs shared.
fn fleet(slots: u64) -> (Vec<Value>, PathBuf) {
    let sim = Sim::start(
        &[],
        &[
            "--time-scale",
            "0.2",
            "--nodes",
            "pve1,pve2,pve3",
            "--request-cost",
            "5ms",
            "--daemon-request-cost",
            "20ms",
        ],
    );
    let runtime = scratch("gate-runtime");
    let handles: Vec<_> = (0..HOSTS)
        .map(|host| {
            let args = merge(&[
                sim.conn(),
                json!({"node": format!("pve{}", host % 3 + 1), "name": format!("gate{host}"),
                       "cores": 1, "api_concurrency": slots}),
            ]);
            let runtime = runtime.to_str().unwrap().to_string();
            std::thread::spawn(move || run_with_env(args, &[("XDG_RUNTIME_DIR", &runtime)]))
        })
        .collect();
    for handle in handles {
        assert_eq!(ok(handle.join().unwrap())["changed"], true);
    }
    (sim.requests(), runtime)
}

#[test]
fn a_fleet_keeps_to_api_concurrency_requests_at_once_and_without_the_gate_exceeds_it() {
    let (gated, runtime) = fleet(2);
    let most = most_at_once(&gated);
    assert!(
        (1..=2).contains(&most),
        "{most} requests of {HOSTS} runs with api_concurrency 2 were in pve-sim at once"
    );
    // The slots are two lock files in a folder of the user's own, no one else's to write,
    // beside the roster of the VMs the runs made (`made/`).
    let folder = gate_folder(&runtime);
    let mut slots: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    slots.sort();
    assert_eq!(slots, ["made", "slot-0", "slot-1"]);
    for dir in [
        runtime.join("sankofa-proxmox"),
        folder.clone(),
        folder.join("made"),
    ] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
    }
    // The runs ended: every slot is free.
    assert!(free(&folder.join("slot-0")) && free(&folder.join("slot-1")));
    // The same fleet without the gate has more in flight than 2: the gate made the difference.
    let (ungated, runtime) = fleet(0);
    let most = most_at_once(&ungated);
    assert!(
        most > 2,
        "only {most} requests of {HOSTS} runs without a gate were in pve-sim at once: this \
         fleet cannot tell whether the gate works"
    );
    let folder = gate_folder(&runtime);
    let slots: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with("slot-"))
        .collect();
    assert!(
        slots.is_empty(),
        "api_concurrency 0 makes no gate: {slots:?}"
    );
}

#[test]
fn a_held_slot_is_waited_for_and_a_killed_runs_slot_is_freed() {
    let sim = Sim::start(&[], &[]);
    let runtime = scratch("gate-killed");
    let runtime_env = runtime.to_str().unwrap().to_string();
    // The first run's login is held 60 s at pve-sim: its process holds the one slot meanwhile.
    sim.fault(
        json!({"kind": "latency", "method": "POST", "path": "/access/ticket",
                     "ms": 60000, "count": 1}),
    );
    let args = |name: &str, timeout: &str| {
        merge(&[
            sim.conn(),
            json!({"node": "pve1", "name": name, "cores": 1, "api_concurrency": 1,
                   "timeout": timeout}),
        ])
    };
    let dir = scratch("gate-args");
    let path = dir.join("args");
    std::fs::write(&path, args("held", "5m").to_string()).unwrap();
    let mut holder = Command::new(env!("CARGO_BIN_EXE_vm"))
        .arg(&path)
        .env("XDG_RUNTIME_DIR", &runtime)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Its login is at pve-sim once its slot is locked.
    let started = Instant::now();
    let slot = loop {
        let made = runtime.join("sankofa-proxmox/gates");
        if let Ok(mut entries) = std::fs::read_dir(&made)
            && let Some(Ok(entry)) = entries.next()
        {
            let slot = entry.path().join("slot-0");
            if slot.exists() && !free(&slot) {
                break slot;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the first run never took its slot"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Another run of this controller waits for it, and its deadline ends the wait.
    let waited = failed(run_with_env(
        args("waiting", "2s"),
        &[("XDG_RUNTIME_DIR", &runtime_env)],
    ));
    let msg = waited["msg"].as_str().unwrap();
    assert!(
        msg.contains("timeout was reached before POST /access/ticket could be sent")
            && msg.contains("held all 1 of its requests")
            && msg.contains("api_concurrency"),
        "{msg}"
    );
    // SIGKILL: no cleanup runs, the kernel drops the lock with the process.
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(free(&slot), "a killed run's slot stays locked");
    let started = Instant::now();
    let after = ok(run_with_env(
        args("after", "30s"),
        &[("XDG_RUNTIME_DIR", &runtime_env)],
    ));
    assert_eq!(after["changed"], true);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the run after the kill waited {:?}",
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_api_concurrency_is_refused_naming_the_option() {
    let sim = Sim::start(&[], &[]);
    for (value, says) in [
        (
            json!(-1),
            "value of api_concurrency must be at least 0, got: -1",
        ),
        (
            json!(128),
            "value of api_concurrency must be at most 127, got: 128",
        ),
        (json!("two"), "api_concurrency"),
    ] {
        let args = merge(&[
            sim.conn(),
            json!({"node": "pve1", "name": "bad", "api_concurrency": value}),
        ]);
        let result = failed(run(args));
        let msg = result["msg"].as_str().unwrap();
        assert!(msg.contains(says), "{value}: {msg}");
    }
    assert!(sim.requests().is_empty(), "a refused option sends nothing");
}
