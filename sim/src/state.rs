//! The simulated cluster: options, VMs, per-VM file locks, tickets and the logs tests read.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::faults::Faults;

/// Start-up options (see `pve-sim --help`).
#[derive(Clone)]
pub struct Options {
    pub listen: String,
    pub admin_listen: String,
    pub plain_http: bool,
    pub data_dir: PathBuf,
    pub nodes: Vec<String>,
    /// Users that can log in with a ticket, and their passwords.
    pub users: Vec<(String, String)>,
    pub tokens: Vec<(String, String)>,
    pub workers: usize,
    /// Time spent on each API request before it is answered (`--request-cost`), holding a
    /// worker as a real pveproxy's request handling does.
    pub request_cost: std::time::Duration,
    pub time_scale: f64,
    pub durations: HashMap<String, Duration>,
    pub import_rate: Option<u64>,
    /// Vary each task's duration by up to this fraction, as real tasks vary.
    pub task_jitter: f64,
    pub ticket_lifetime: Duration,
    pub auth_failure_delay: Duration,
    pub version: String,
    pub scenario: Option<PathBuf>,
    pub seed_images: Vec<PathBuf>,
    /// pvestatd's update interval (zero: `/cluster/resources` sees every change at once).
    pub stats_interval: Duration,
    /// How long after the start the guest agent answers.
    pub agent_delay: Duration,
    /// How long after the agent comes up its commands time out (its ping answers).
    pub agent_busy: Duration,
    /// Addresses the guest agents report, by VM.
    pub agent_ips: HashMap<u32, Vec<std::net::IpAddr>>,
    /// `user.cfg`: users, tokens, groups, roles and ACLs (`--user-cfg`, with every `--user`
    /// and `--token`); its pools are the state's at start.
    pub access: crate::access::user_cfg::AccessCfg,
    /// datacenter.cfg `registered-tags`: tags only a user with `Sys.Modify` on `/` may set.
    pub registered_tags: Vec<String>,
    /// datacenter.cfg `next-id`: the range `/cluster/nextid` allocates from.
    pub next_id: crate::cluster::datacenter::NextId,
    /// How an import's copy behaves beyond `--import-rate` (see [`ImportProfile`]).
    pub import_profile: ImportProfile,
}

/// The shape of an import over time, for benchmarks of waiting clients: storage whose rate
/// changes, stalls, logs coarse progress, or goes on after 100 % (a flush).
#[derive(Clone, Debug)]
pub struct ImportProfile {
    /// From this percent on, the rate is multiplied by this factor (`--import-rate-change`).
    pub change: Option<(f64, f64)>,
    /// At this percent, the copy stands still this long (`--import-stall`).
    pub stall: Option<(f64, Duration)>,
    /// Progress is logged in steps of this many percent (`--progress-step`).
    pub step: f64,
    /// After 100 %, the task goes on this long (`--import-tail`).
    pub tail: Duration,
}

impl Default for ImportProfile {
    fn default() -> Self {
        ImportProfile {
            change: None,
            stall: None,
            step: 1.0,
            tail: Duration::ZERO,
        }
    }
}

impl ImportProfile {
    /// The percentage of the copy allowed after `secs` at `rate_pct` percent a second.
    pub fn allowed(&self, secs: f64, rate_pct: f64) -> f64 {
        let mut events: Vec<(f64, Option<f64>, Option<f64>)> = Vec::new();
        if let Some((at, f)) = self.change {
            events.push((at, Some(f), None));
        }
        if let Some((at, d)) = self.stall {
            events.push((at, None, Some(d.as_secs_f64())));
        }
        events.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (mut t, mut pct, mut rate) = (0.0f64, 0.0f64, rate_pct);
        for (at, factor, pause) in events {
            let reach = t + (at - pct) / rate;
            if secs < reach {
                break;
            }
            t = reach;
            pct = at;
            if let Some(f) = factor {
                rate *= f;
            }
            if let Some(d) = pause {
                if secs < t + d {
                    return pct;
                }
                t += d;
            }
        }
        (pct + (secs - t) * rate).min(100.0)
    }
}

/// One VM: where it lives, its configuration as PVE stores it, and its run state.
pub struct Vm {
    pub node: String,
    pub config: BTreeMap<String, String>,
    /// The `[PENDING]` section: changes a running VM could not take at once.
    pub pending: crate::qemu::pending::Pending,
    /// How the cloud-init drive differs from the config.
    pub cloudinit: crate::qemu::pending::CloudInitState,
    pub running: bool,
    pub started: Option<Instant>,
    pub pid: u32,
    /// The `[snapname]` sections (`qemu/snapshot_sections.rs`; their handlers are `qemu/snapshots.rs`).
    pub snapshots: crate::qemu::snapshot_sections::Snapshots,
}

/// Everything mutable, behind one mutex.
#[derive(Default)]
pub struct State {
    pub vms: BTreeMap<u32, Vm>,
    pub tasks: Vec<Task>,
    /// Per-VM `flock` holders (`/var/lock/qemu-server/lock-N.conf`).
    pub flocks: HashMap<u32, String>,
    /// Per-VM shared `flock` holders (a clone's source: PVE::QemuConfig->lock_config_shared).
    pub shared_flocks: HashMap<u32, usize>,
    /// ticket -> (user, CSRF token, issued)
    pub tickets: HashMap<String, (String, String, Instant)>,
    /// What each VM's guest read from its NoCloud seed at its last start (`guest/seed.rs`).
    pub guest_seeds: BTreeMap<u32, serde_json::Value>,
    /// What pvestatd last reported of each VM (`name`, `status`, `maxmem`, …): the part of
    /// `/cluster/resources` that lags (pve-manager API2Tools.pm, extract_vm_stats).
    pub stats: BTreeMap<u32, Value>,
    /// VMs whose migration lock is held (`/var/lock/pve-manager/pve-migrate-N`, see
    /// `migrate/phases.rs`).
    pub migration_locks: std::collections::HashSet<u32>,
    /// The pools of `user.cfg` and which VM is in which (`access/pools.rs`).
    pub user_cfg: crate::access::user_cfg::UserCfg,
    /// HA resources, the CRM's service status and its queued commands (`ha/manager.rs`).
    pub ha: crate::ha::config::HaState,
}

/// The simulator.
pub struct Sim {
    pub opts: Options,
    pub state: Mutex<State>,
    pub cv: Condvar,
    pub faults: Mutex<Faults>,
    pub fingerprint: String,
    pub boot: Instant,
    req_log: Mutex<File>,
    task_log: Mutex<File>,
    rng: AtomicU64,
}

/// Seconds since the epoch, with milliseconds.
pub fn epoch() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Sim {
    pub fn new(opts: Options, fingerprint: String) -> std::io::Result<Sim> {
        let open = |name: &str| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(opts.data_dir.join(name))
        };
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1;
        let pools = opts.access.pools.clone();
        Ok(Sim {
            req_log: Mutex::new(open("requests.jsonl")?),
            task_log: Mutex::new(open("tasks.jsonl")?),
            opts,
            state: Mutex::new(State {
                user_cfg: pools,
                ..State::default()
            }),
            cv: Condvar::new(),
            faults: Mutex::new(Faults::default()),
            fingerprint,
            boot: Instant::now(),
            rng: AtomicU64::new(seed),
        })
    }

    /// Locks the state, surviving a poisoned mutex (a panicking worker must not take the server down).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A pseudo-random number (xorshift), for MACs, ids and fault rates.
    pub fn random(&self) -> u64 {
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        x
    }

    /// Scales a simulated duration by `--time-scale`.
    pub fn scaled(&self, d: Duration) -> Duration {
        d.mul_f64(self.opts.time_scale)
    }

    /// How long a task of this type takes before its own work (scaled).
    pub fn task_duration(&self, ttype: &str) -> Duration {
        let d = self
            .opts
            .durations
            .get(ttype)
            .copied()
            .unwrap_or(match ttype {
                "qmcreate" => Duration::from_millis(1000),
                "qmconfig" => Duration::from_millis(300),
                "resize" => Duration::from_millis(300),
                "qmstart" => Duration::from_millis(1200),
                "qmstop" => Duration::from_millis(600),
                "qmshutdown" => Duration::from_millis(2000),
                "qmreboot" => Duration::from_millis(2500),
                "qmdestroy" => Duration::from_millis(700),
                "imgdel" => Duration::from_millis(200),
                "vzdump" => Duration::from_millis(5000),
                _ => Duration::from_millis(500),
            });
        let j = self.opts.task_jitter;
        let factor = if j > 0.0 {
            1.0 + j * (2.0 * (self.random() % 10_000) as f64 / 10_000.0 - 1.0)
        } else {
            1.0
        };
        self.scaled(d.mul_f64(factor.max(0.0)))
    }

    /// Takes the per-VM file lock, waiting up to `timeout` like PVE's `lock_file_full`.
    pub fn flock(&self, vmid: u32, holder: &str, timeout: Duration) -> Result<(), String> {
        let mut st = self.wait_for_flock(vmid, timeout, true)?;
        st.flocks.insert(vmid, holder.to_string());
        Ok(())
    }

    /// Runs `work` holding the VM's file lock (`/var/lock/qemu-server/lock-N.conf`), taken
    /// within `timeout`, and releases it whatever `work` returns (pve-guest-common
    /// AbstractConfig.pm, `lock_config_full`; qemu-server's `lock_config` waits 10 s, see
    /// [`crate::tasks::LOCK_CONFIG_TIMEOUT`]).
    pub fn lock_config<T, E: From<String>>(
        &self,
        vmid: u32,
        holder: &str,
        timeout: Duration,
        work: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        self.flock(vmid, holder, timeout)?;
        let res = work();
        self.funlock(vmid);
        res
    }

    /// A shared hold of the VM's file lock (`flock LOCK_SH`): any number at once, none while
    /// the lock is held exclusively, and an exclusive one waits for all to go.
    pub fn flock_shared(&self, vmid: u32, timeout: Duration) -> Result<(), String> {
        let mut st = self.wait_for_flock(vmid, timeout, false)?;
        *st.shared_flocks.entry(vmid).or_default() += 1;
        Ok(())
    }

    /// Waits up to `timeout` until the VM's file lock can be taken (`exclusive`: nobody holds
    /// it; shared: nobody holds it exclusively), returning the state still locked.
    fn wait_for_flock(
        &self,
        vmid: u32,
        timeout: Duration,
        exclusive: bool,
    ) -> Result<MutexGuard<'_, State>, String> {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        let taken = |st: &State| {
            st.flocks.contains_key(&vmid)
                || (exclusive && st.shared_flocks.get(&vmid).is_some_and(|n| *n > 0))
        };
        while taken(&st) {
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout"
                ));
            }
            st = self
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(st)
    }

    pub fn funlock_shared(&self, vmid: u32) {
        let mut st = self.lock();
        if let Some(n) = st.shared_flocks.get_mut(&vmid) {
            *n = n.saturating_sub(1);
        }
        drop(st);
        self.cv.notify_all();
    }

    pub fn funlock(&self, vmid: u32) {
        self.lock().flocks.remove(&vmid);
        self.cv.notify_all();
    }

    /// One pvestatd round: records every VM's name, power state and sizes as they are now.
    pub fn update_stats(&self) {
        let mut st = self.lock();
        let stats = st
            .vms
            .iter()
            .map(|(id, vm)| {
                let c = &vm.config;
                let mut o = json!({
                    "status": if vm.running { "running" } else { "stopped" },
                    "template": c.get("template").map(|t| t == "1").unwrap_or(false) as u8,
                    "maxmem": c.get("memory").and_then(|m| m.parse::<u64>().ok()).unwrap_or(512) * 1048576,
                    "maxcpu": c.get("cores").and_then(|m| m.parse::<u64>().ok()).unwrap_or(1),
                    "uptime": vm.started.filter(|_| vm.running).map(|s| s.elapsed().as_secs()).unwrap_or(0),
                });
                // qemu-server QemuServer.pm vmstatus, which pvestatd broadcasts:
                // `$d->{name} = $conf->{name} || "VM $vmid"`.
                let name = c.get("name").cloned().unwrap_or_else(|| format!("VM {id}"));
                o["name"] = json!(name);
                (*id, o)
            })
            .collect();
        st.stats = stats;
    }

    /// Whether `user` (`user@realm` or a token `user@realm!id`) has `Sys.Audit` on
    /// `/nodes/{node}` (pve-manager API2/Tasks.pm). Pools reach only `/vms/…` and
    /// `/storage/…`, so this needs no lock (callers may hold it).
    pub fn sys_audit(&self, user: &str, node: &str) -> bool {
        self.sys_audit_on(user, &format!("/nodes/{node}"))
    }

    /// Whether `user` has `Sys.Audit` on `path`, a path pools do not reach (`/`,
    /// `/nodes/…`): pve-manager API2/Cluster.pm's `tasks` asks it on `/`.
    pub fn sys_audit_on(&self, user: &str, path: &str) -> bool {
        let no_pools = crate::access::user_cfg::UserCfg::default();
        crate::access::acl::permissions(&self.opts.access, &no_pools, user, path)
            .contains_key("Sys.Audit")
    }

    /// Appends one line to `requests.jsonl`.
    pub fn log_request(&self, entry: Value) {
        let mut f = self.req_log.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(f, "{entry}");
    }

    /// Appends a finished task to `tasks.jsonl` (start and end instants for benchmarks).
    pub fn log_task(&self, t: &Task) {
        let mut f = self.task_log.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(
            f,
            "{}",
            json!({"upid": t.upid, "node": t.node, "type": t.ttype, "id": t.id, "start": t.start_epoch,
                   "end": t.end_epoch, "exitstatus": t.exitstatus})
        );
    }
}

/// A task as the node's task list knows it.
pub struct Task {
    pub upid: String,
    pub node: String,
    pub pid: u32,
    pub pstart: u64,
    pub starttime: u64,
    pub ttype: String,
    pub id: String,
    /// The authenticated id as written in the UPID (`user@realm!token` for tokens).
    pub user: String,
    pub log: Vec<String>,
    pub exitstatus: Option<String>,
    pub start_epoch: f64,
    pub end_epoch: Option<f64>,
    pub cancel: Arc<AtomicBool>,
    /// Set when the worker was killed (SIGKILL): it has no further effect and no exit line.
    pub killed: Arc<AtomicBool>,
    /// A fault may hide a fresh task from `status` and `log` until then.
    pub visible_at: Instant,
}

impl Task {
    pub fn running(&self) -> bool {
        self.exitstatus.is_none()
    }

    /// The task-status object of `GET /nodes/{node}/tasks/{upid}/status`.
    pub fn status_json(&self) -> Value {
        let mut v = json!({
            "upid": self.upid, "node": self.node, "pid": self.pid, "pstart": self.pstart,
            "starttime": self.starttime, "type": self.ttype, "id": self.id,
            "status": if self.running() { "running" } else { "stopped" },
        });
        match self.user.split_once('!') {
            Some((user, token)) => {
                v["user"] = json!(user);
                v["tokenid"] = json!(token);
            }
            None => v["user"] = json!(self.user),
        }
        if let Some(e) = &self.exitstatus {
            v["exitstatus"] = json!(e);
        }
        v
    }

    /// An item of `GET /nodes/{node}/tasks`.
    pub fn list_json(&self) -> Value {
        let mut v = json!({
            "upid": self.upid, "node": self.node, "pid": self.pid, "pstart": self.pstart,
            "starttime": self.starttime, "type": self.ttype, "id": self.id, "user": self.user,
        });
        match &self.exitstatus {
            Some(e) => {
                v["status"] = json!(e);
                v["endtime"] = json!(self.end_epoch.unwrap_or(0.0) as u64);
            }
            // pve-manager API2/Tasks.pm, node_tasks: an active task "would be archived"
            // without a status, so it is listed as RUNNING.
            None => v["status"] = json!("RUNNING"),
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_profiles_shape_the_copy() {
        let steady = ImportProfile::default();
        assert_eq!(steady.allowed(5.0, 10.0), 50.0);
        assert_eq!(steady.allowed(20.0, 10.0), 100.0);
        let stall = ImportProfile {
            stall: Some((40.0, Duration::from_secs(10))),
            ..Default::default()
        };
        assert_eq!(stall.allowed(4.0, 10.0), 40.0);
        assert_eq!(stall.allowed(12.0, 10.0), 40.0);
        assert_eq!(stall.allowed(15.0, 10.0), 50.0);
        let halves = ImportProfile {
            change: Some((50.0, 0.5)),
            ..Default::default()
        };
        assert_eq!(halves.allowed(5.0, 10.0), 50.0);
        assert_eq!(halves.allowed(7.0, 10.0), 60.0);
        assert_eq!(halves.allowed(15.0, 10.0), 100.0);
    }
}
