//! `pve-sim`: a Proxmox VE API simulator for tests, benchmarks and demos.
//!
//! It serves `/api2/json` over HTTPS (or plain HTTP) on loopback with PVE's envelopes, error
//! codes, authentication, UPIDs, task logs and locks, and imports disks with the real
//! `qemu-img`. A second, plain-HTTP admin port injects faults and reports task timings.

mod api;
mod cluster;
mod download;
mod faults;
mod handler;
mod http;
mod pending;
mod schema;
mod state;
mod storage;
mod storage_api;
mod task_api;
mod tasks;
mod templates;
mod tls;
mod vms;

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::http::{Handler, Request, Response};
use crate::state::{Options, Sim};

const HELP: &str =
    "pve-sim: a Proxmox VE API simulator (real UPIDs, locks, task logs, qemu-img imports)

USAGE:
    pve-sim [OPTIONS]

OPTIONS:
    --listen ADDR               API address [default: 127.0.0.1:8006]; port 0 picks a free one
    --admin-listen ADDR         fault-injection/admin address, plain HTTP [default: 127.0.0.1:0]
    --plain-http                serve the API over plain HTTP instead of HTTPS
    --data-dir DIR              where storages, certificates and logs live [default: ./pve-sim-data]
    --nodes LIST                comma-separated node names [default: pve1]
    --user USER@REALM:PASSWORD  a user that can log in with a ticket (repeatable)
                                [default: root@pam:pve-sim]; append ':audit' for a read-only
                                user, ':nosysaudit' for one without Sys.Audit on the nodes (it
                                sees only its own tasks, as in pve-manager's API2/Tasks.pm)
    --token USER@REALM!ID=SECRET
                                an API token (repeatable)
    --workers N                 requests handled at once, like pveproxy's workers [default: 3]
    --time-scale F              multiply simulated task durations by F [default: 1.0]
    --task-duration TYPE=DUR    base duration of a task type, e.g. qmstart=2s (repeatable)
    --task-jitter F             vary each task's duration by up to ±F (0.3 = ±30%) [default: 0]
    --import-rate RATE          throttle imports and downloads to RATE bytes/s (e.g. 50M, 512K);
                                an import is paced by qemu-img's progress over the virtual size
    --import-tail DUR           an import goes on this long after 100 % (a flush) [default: 0]
    --import-stall DUR@PCT      with --import-rate, the copy stands still DUR at PCT percent
    --import-rate-change F@PCT  with --import-rate, the rate is multiplied by F from PCT on
    --progress-step PCT         progress is logged in steps of PCT percent [default: 1]
    --ticket-lifetime DUR       ticket validity [default: 2h]
    --stats-interval DUR        how often pvestatd refreshes the VM data that
                                /cluster/resources lists (name, status, maxmem, ...): a new VM
                                is listed with status 'unknown' and no name until then
                                [default: 10s, as PVE; 0 = at once]
    --agent-delay DUR           how long after its start a VM with `agent: 1` answers guest
                                agent commands (before: 'QEMU guest agent is not running')
                                [default: 3s]
    --agent-ip VMID=ADDRESS     an address the guest agent of VMID reports (repeatable); by
                                default the ipconfigN addresses, or 10.0.X.Y for DHCP
    --auth-failure-delay DUR    delay before a 401, as pveproxy does [default: 3s]
    --pve-version VER           9.1, 8.4 or 8.3: what /version reports and which download
                                filename rules apply [default: 9.1]
    --scenario FILE             a JSON array of faults to set at start (see README)
    --seed-image FILE           copy an image into every node's local:import/ (repeatable)
    -h, --help                  print this help

On start it prints one JSON line to stdout: the API URL, the admin URL, the certificate
fingerprint and the CA file. Logs: DATA/requests.jsonl (every API request, secrets masked) and
DATA/tasks.jsonl (every finished task with its start and end instants).

ADMIN ENDPOINTS (plain HTTP on --admin-listen):
    GET    /health              liveness
    GET    /faults              the faults in force
    POST   /faults              add a fault (a JSON object or array; see README)
    DELETE /faults              clear all faults
    POST   /revoke-tickets      invalidate every ticket
    POST   /lock                hold a VM's lock from another task:
                                {\"vmid\":100,\"ms\":5000,\"config_lock\":\"backup\"}
                                (\"set_after_ms\": hold the file lock that long before
                                setting the config lock)
    GET    /tasks               every task with start/end instants and exit status
";

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        listen: "127.0.0.1:8006".into(),
        admin_listen: "127.0.0.1:0".into(),
        plain_http: false,
        data_dir: PathBuf::from("pve-sim-data"),
        nodes: vec!["pve1".into()],
        users: Vec::new(),
        tokens: Vec::new(),
        workers: 3,
        time_scale: 1.0,
        durations: HashMap::new(),
        import_rate: None,
        task_jitter: 0.0,
        ticket_lifetime: Duration::from_secs(7200),
        auth_failure_delay: Duration::from_secs(3),
        version: "9.1".into(),
        scenario: None,
        seed_images: Vec::new(),
        stats_interval: Duration::from_secs(10),
        agent_delay: Duration::from_secs(3),
        agent_ips: HashMap::new(),
        no_sys_audit: Vec::new(),
        import_profile: Default::default(),
    };
    let mut args = std::env::args().skip(1);
    let dur = |s: &str, what: &str| {
        humantime::parse_duration(s).map_err(|e| format!("{what}: invalid duration '{s}': {e}"))
    };
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            "--listen" => o.listen = val()?,
            "--admin-listen" => o.admin_listen = val()?,
            "--plain-http" => o.plain_http = true,
            "--data-dir" => o.data_dir = PathBuf::from(val()?),
            "--nodes" => {
                o.nodes = val()?
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            }
            "--user" => {
                let v = val()?;
                let (v, ro) = match v.strip_suffix(":audit") {
                    Some(v) => (v.to_string(), true),
                    None => (v, false),
                };
                let (v, no_audit) = match v.strip_suffix(":nosysaudit") {
                    Some(v) => (v.to_string(), true),
                    None => (v, false),
                };
                let (u, p) = v
                    .split_once(':')
                    .ok_or("--user takes USER@REALM:PASSWORD")?;
                if no_audit {
                    o.no_sys_audit.push(u.into());
                }
                o.users.push((u.into(), p.into(), ro));
            }
            "--token" => {
                let v = val()?;
                let (id, s) = v
                    .rsplit_once('=')
                    .ok_or("--token takes USER@REALM!ID=SECRET")?;
                if !id.contains('!') {
                    return Err("--token takes USER@REALM!ID=SECRET".into());
                }
                o.tokens.push((id.into(), s.into()));
            }
            "--workers" => o.workers = val()?.parse().map_err(|_| "--workers takes a number")?,
            "--time-scale" => {
                o.time_scale = val()?.parse().map_err(|_| "--time-scale takes a number")?;
                if o.time_scale <= 0.0 || !o.time_scale.is_finite() {
                    return Err("--time-scale must be positive".into());
                }
            }
            "--task-duration" => {
                let v = val()?;
                let (t, d) = v
                    .split_once('=')
                    .ok_or("--task-duration takes TYPE=DURATION")?;
                o.durations.insert(t.into(), dur(d, "--task-duration")?);
            }
            "--import-rate" => {
                let v = val()?;
                o.import_rate = Some(
                    storage::parse_size(&v)
                        .filter(|r| *r > 0)
                        .ok_or(format!("--import-rate: invalid rate '{v}'"))?,
                );
            }
            "--task-jitter" => {
                o.task_jitter = val()?
                    .parse()
                    .map_err(|_| "--task-jitter takes a number from 0 to 1")?;
                if !(0.0..=1.0).contains(&o.task_jitter) {
                    return Err("--task-jitter takes a number from 0 to 1".into());
                }
            }
            "--ticket-lifetime" => o.ticket_lifetime = dur(&val()?, "--ticket-lifetime")?,
            "--stats-interval" => o.stats_interval = dur(&val()?, "--stats-interval")?,
            "--agent-delay" => o.agent_delay = dur(&val()?, "--agent-delay")?,
            "--agent-ip" => {
                let v = val()?;
                let (id, ip) = v
                    .split_once('=')
                    .and_then(|(id, ip)| Some((id.parse::<u32>().ok()?, ip.parse().ok()?)))
                    .ok_or("--agent-ip takes VMID=ADDRESS, e.g. 100=192.0.2.10")?;
                o.agent_ips.entry(id).or_default().push(ip);
            }
            "--import-tail" => o.import_profile.tail = dur(&val()?, "--import-tail")?,
            "--import-stall" => {
                let v = val()?;
                let (d, at) = v
                    .split_once('@')
                    .ok_or("--import-stall takes DURATION@PERCENT")?;
                let at: f64 = at
                    .parse()
                    .map_err(|_| "--import-stall takes DURATION@PERCENT")?;
                o.import_profile.stall = Some((at, dur(d, "--import-stall")?));
            }
            "--import-rate-change" => {
                let v = val()?;
                let (f, at) = v
                    .split_once('@')
                    .ok_or("--import-rate-change takes FACTOR@PERCENT")?;
                let parse = |s: &str| s.parse::<f64>().ok().filter(|x| x.is_finite() && *x > 0.0);
                match (parse(f), parse(at)) {
                    (Some(f), Some(at)) => o.import_profile.change = Some((at, f)),
                    _ => return Err("--import-rate-change takes FACTOR@PERCENT".into()),
                }
            }
            "--progress-step" => {
                o.import_profile.step = val()?
                    .parse::<f64>()
                    .ok()
                    .filter(|s| (0.01..=50.0).contains(s))
                    .ok_or("--progress-step takes a percentage from 0.01 to 50")?;
            }
            "--auth-failure-delay" => o.auth_failure_delay = dur(&val()?, "--auth-failure-delay")?,
            "--pve-version" => {
                o.version = val()?;
                if !["9.1", "8.4", "8.3"].contains(&o.version.as_str()) {
                    return Err("--pve-version takes 9.1, 8.4 or 8.3".into());
                }
            }
            "--scenario" => o.scenario = Some(PathBuf::from(val()?)),
            "--seed-image" => o.seed_images.push(PathBuf::from(val()?)),
            other => return Err(format!("unknown option '{other}' (see --help)")),
        }
    }
    if o.users.is_empty() {
        o.users.push(("root@pam".into(), "pve-sim".into(), false));
    }
    if o.nodes.is_empty()
        || o.nodes
            .iter()
            .any(|n| !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    {
        return Err("--nodes takes node names (letters, digits, '-')".into());
    }
    Ok(o)
}

fn setup(o: &Options) -> Result<(), String> {
    for n in &o.nodes {
        for s in storage::STORAGES {
            let d = storage::storage_dir(&o.data_dir, n, s.id);
            let subs: &[&str] = if s.kind == "dir" {
                &[
                    "import",
                    "template/iso",
                    "template/cache",
                    "snippets",
                    "images",
                ]
            } else {
                &[""]
            };
            for sub in subs {
                std::fs::create_dir_all(d.join(sub))
                    .map_err(|e| format!("{}: {e}", d.display()))?;
            }
        }
        for img in &o.seed_images {
            let name = img
                .file_name()
                .ok_or(format!("--seed-image: bad path {}", img.display()))?;
            let dst = storage::storage_dir(&o.data_dir, n, "local")
                .join("import")
                .join(name);
            if !dst.exists() {
                std::fs::hard_link(img, &dst)
                    .or_else(|_| std::fs::copy(img, &dst).map(|_| ()))
                    .map_err(|e| format!("--seed-image {}: {e}", img.display()))?;
            }
        }
    }
    Ok(())
}

/// The admin endpoint: faults, ticket revocation, held locks and task timings.
struct Admin {
    sim: Arc<Sim>,
}

impl Handler for Admin {
    fn handle(&self, req: &Request) -> Response {
        let ok = |v: Value| {
            Response::new(
                200,
                "OK",
                serde_json::to_vec(&json!({"data": v})).unwrap_or_default(),
            )
        };
        let bad = |m: String| {
            Response::new(
                400,
                m.clone(),
                serde_json::to_vec(&json!({"error": m})).unwrap_or_default(),
            )
        };
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/health") => ok(json!({"ok": true})),
            ("GET", "/faults") => ok(json!(
                self.sim
                    .faults
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .given
            )),
            ("DELETE", "/faults") => {
                self.sim
                    .faults
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clear();
                ok(Value::Null)
            }
            ("POST", "/faults") => {
                let list = match body {
                    Value::Array(a) => a,
                    v @ Value::Object(_) => vec![v],
                    _ => return bad("POST /faults takes a JSON object or array".into()),
                };
                let mut f = self.sim.faults.lock().unwrap_or_else(|e| e.into_inner());
                for v in &list {
                    if let Err(e) = f.add(v) {
                        return bad(e);
                    }
                }
                ok(json!(list.len()))
            }
            ("POST", "/revoke-tickets") => {
                self.sim.lock().tickets.clear();
                ok(Value::Null)
            }
            ("POST", "/lock") => match self.hold_lock(&body) {
                Ok(upid) => ok(json!(upid)),
                Err(e) => bad(e),
            },
            ("GET", "/tasks") => {
                let st = self.sim.lock();
                ok(json!(st.tasks.iter().map(|t| json!({
                    "upid": t.upid, "type": t.ttype, "node": t.node, "id": t.id, "start": t.start_epoch,
                    "end": t.end_epoch, "exitstatus": t.exitstatus, "log": t.log,
                })).collect::<Vec<_>>()))
            }
            _ => Response::new(404, "not found", b"{}".to_vec()),
        }
    }
}

impl Admin {
    /// Starts a `vzdump`-like task on the VM's node for `ms` milliseconds. With `config_lock`
    /// (`backup`) it sets that lock in the config and, as vzdump does, holds the file lock
    /// only while writing it (pve-guest-common AbstractConfig.pm, set_lock); without, it holds
    /// the file lock (`/var/lock/qemu-server/lock-N.conf`) all along, as a busy worker does.
    fn hold_lock(&self, v: &Value) -> Result<String, String> {
        let vmid = v["vmid"].as_u64().ok_or("lock needs 'vmid'")? as u32;
        let ms = Duration::from_millis(v["ms"].as_u64().unwrap_or(5000));
        let config_lock = v["config_lock"].as_str().map(str::to_string);
        // `set_after_ms`: hold the file lock that long first, then set the config lock (a
        // backup starting while another request waits for the file lock).
        let after = Duration::from_millis(v["set_after_ms"].as_u64().unwrap_or(0));
        let node = self
            .sim
            .lock()
            .vms
            .get(&vmid)
            .map(|vm| vm.node.clone())
            .ok_or(format!("VM {vmid} does not exist"))?;
        let sim = self.sim.clone();
        sim.flock(vmid, "admin", Duration::from_secs(10))?;
        if after.is_zero()
            && let Some(l) = &config_lock
        {
            if let Some(vm) = sim.lock().vms.get_mut(&vmid) {
                vm.config.insert("lock".into(), l.clone());
            }
            sim.funlock(vmid);
        }
        let s2 = sim.clone();
        let upid = tasks::spawn(
            &sim,
            &node,
            "vzdump",
            &vmid.to_string(),
            "root@pam",
            move |ctx| {
                ctx.log(format!("INFO: starting new backup job: vzdump {vmid}"));
                if !after.is_zero()
                    && let Some(l) = &config_lock
                {
                    let _ = ctx.sleep(after);
                    if let Some(vm) = s2.lock().vms.get_mut(&vmid) {
                        vm.config.insert("lock".into(), l.clone());
                    }
                    s2.funlock(vmid);
                }
                let r = ctx.sleep(ms.saturating_sub(after));
                if config_lock.is_some() {
                    let _ = s2.flock(vmid, &ctx.upid, Duration::from_secs(10));
                    if let Some(vm) = s2.lock().vms.get_mut(&vmid) {
                        vm.config.remove("lock");
                    }
                }
                s2.funlock(vmid);
                r.map(|_| 0)
            },
        );
        Ok(upid)
    }
}

fn run() -> Result<(), String> {
    let opts = parse_args()?;
    std::fs::create_dir_all(&opts.data_dir)
        .map_err(|e| format!("--data-dir {}: {e}", opts.data_dir.display()))?;
    setup(&opts)?;
    let tls = if opts.plain_http {
        None
    } else {
        Some(tls::generate(&opts.data_dir, &opts.nodes[0])?)
    };
    let fingerprint = tls
        .as_ref()
        .map(|t| t.fingerprint.clone())
        .unwrap_or_default();
    let listener =
        TcpListener::bind(&opts.listen).map_err(|e| format!("--listen {}: {e}", opts.listen))?;
    let admin = TcpListener::bind(&opts.admin_listen)
        .map_err(|e| format!("--admin-listen {}: {e}", opts.admin_listen))?;
    let api_addr = listener.local_addr().map_err(|e| e.to_string())?;
    let admin_addr = admin.local_addr().map_err(|e| e.to_string())?;
    let sim =
        Arc::new(Sim::new(opts.clone(), fingerprint.clone()).map_err(|e| format!("logs: {e}"))?);
    if let Some(path) = &opts.scenario {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--scenario {}: {e}", path.display()))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| format!("--scenario {}: {e}", path.display()))?;
        let mut f = sim.faults.lock().unwrap_or_else(|e| e.into_inner());
        for item in v
            .as_array()
            .ok_or("--scenario: expected a JSON array of faults")?
        {
            f.add(item).map_err(|e| format!("--scenario: {e}"))?;
        }
    }
    let scheme = if opts.plain_http { "http" } else { "https" };
    let info = json!({
        "api": format!("{scheme}://{api_addr}/api2/json"), "host": api_addr.ip().to_string(), "port": api_addr.port(),
        "admin": format!("http://{admin_addr}"), "fingerprint": fingerprint,
        "ca": if opts.plain_http { Value::Null } else { json!(opts.data_dir.join("pve-root-ca.pem")) },
        "data_dir": opts.data_dir, "nodes": opts.nodes,
    });
    std::fs::write(opts.data_dir.join("sim.json"), info.to_string()).map_err(|e| e.to_string())?;
    println!("{info}");
    if !opts.stats_interval.is_zero() {
        let stats_sim = sim.clone();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(stats_sim.opts.stats_interval);
                stats_sim.update_stats();
            }
        });
    }
    let admin_sim = sim.clone();
    std::thread::spawn(move || {
        http::serve(
            admin,
            None,
            Arc::new(Admin { sim: admin_sim }),
            http::Workers::new(4),
        )
    });
    let workers = http::Workers::new(opts.workers);
    http::serve(
        listener,
        tls.map(|t| t.config),
        Arc::new(api::Api { sim }),
        workers,
    );
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("pve-sim: {e}");
        std::process::exit(2);
    }
}
