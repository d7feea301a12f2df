//! pve-sim's command line, declared once with `clap`'s derive: each option's default, value
//! check and help line live in one place, and `--opt value` and `--opt=value` both work.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::access::user_cfg::{AccessCfg, LegacyKind};
use crate::http::daemons::{DaemonOptions, Limits};
use crate::state::{ImportProfile, Options};
use crate::storage::volumes;

const AFTER_HELP: &str = "\
On start it prints one JSON line to stdout: the API URL, the admin URL, the certificate
fingerprint and the CA file. Logs: DATA/requests.jsonl (every API request, secrets masked) and
DATA/tasks.jsonl (every finished task with its start and end instants).

Admin endpoints (plain HTTP on --admin-listen):
    GET    /health              liveness
    GET    /faults              the faults in force
    POST   /faults              add a fault (a JSON object or array; see README)
    DELETE /faults              clear all faults
    POST   /revoke-tickets      invalidate every ticket
    POST   /storage-lock        hold a shared storage's cluster lock from another node:
                                {\"storage\":\"ceph1\",\"ms\":11000}
    POST   /lock                hold a VM's lock from another task:
                                {\"vmid\":100,\"ms\":5000,\"config_lock\":\"backup\"}
                                (\"set_after_ms\": hold the file lock that long before
                                setting the config lock)
    GET    /tasks               every task with start/end instants and exit status
    GET    /version-table       the release played and each row of sim/src/versions.rs
                                (whether it applies, its version, its source)
    GET    /config-file/VMID    the VM's config file as PVE writes it (a cipassword in
                                plain shown as ********)";

/// The command line as given; [`Cli::into_options`] turns it into the simulator's options.
#[derive(Parser, Debug)]
#[command(
    name = "pve-sim",
    about = "pve-sim: a Proxmox VE API simulator (real UPIDs, locks, task logs, qemu-img imports)",
    after_help = AFTER_HELP,
    args_override_self = true
)]
pub struct Cli {
    /// API address; port 0 picks a free one
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8006")]
    listen: String,
    /// Fault-injection/admin address, plain HTTP
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    admin_listen: String,
    /// Serve the API over plain HTTP instead of HTTPS
    #[arg(long)]
    plain_http: bool,
    /// Where storages, certificates and logs live
    #[arg(long, value_name = "DIR", default_value = "./pve-sim-data")]
    data_dir: PathBuf,
    /// Comma-separated node names (letters, digits, '-')
    #[arg(long, value_name = "LIST", default_value = "pve1", value_parser = node_list)]
    nodes: NodeList,
    /// A user that can log in with a ticket (repeatable);
    /// append ':audit' for a read-only user, ':nosysaudit' for
    /// one without Sys.Audit on the nodes (it sees only its own
    /// tasks, as in pve-manager's API2/Tasks.pm)
    #[arg(verbatim_doc_comment)]
    #[arg(
        long = "user",
        value_name = "USER@REALM:PASSWORD",
        default_value = "root@pam:pve-sim",
        value_parser = user
    )]
    users: Vec<User>,
    /// An API token (repeatable)
    #[arg(long = "token", value_name = "USER@REALM!ID=SECRET", value_parser = token)]
    tokens: Vec<(String, String)>,
    /// Users, groups, roles, ACLs, pools and tokens, in the
    /// syntax of PVE's /etc/pve/user.cfg (pve-access-control's
    /// parse_user_config); passwords and token secrets still
    /// come from --user and --token. A --user or --token it
    /// does not name is added as before (admin: Administrator
    /// on /, ':audit': PVEAuditor on /)
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "FILE", value_parser = user_cfg_file)]
    user_cfg: Option<String>,
    /// datacenter.cfg's registered-tags (';'-separated): tags
    /// only a user with Sys.Modify on / may add or remove
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "LIST", default_value = "")]
    registered_tags: String,
    /// datacenter.cfg's next-id (`lower=N,upper=M`): the range
    /// /cluster/nextid allocates from (default 100 to 1,000,000)
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "RANGE", default_value = "", value_parser = next_id)]
    next_id: crate::cluster::datacenter::NextId,
    /// pveproxy's workers (MAX_WORKERS in /etc/default/pveproxy,
    /// 1 to 127): each is one event loop and owns the
    /// connections it accepted
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = max_workers)]
    workers: usize,
    /// Time pveproxy spends on each API request (a real
    /// pveproxy's Perl, for benchmarks); it holds the worker's
    /// event loop meanwhile
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "DUR", default_value = "0s", value_parser = duration)]
    request_cost: Duration,
    /// pvedaemon's workers (MAX_WORKERS in /etc/default/pvedaemon,
    /// 1 to 127): each runs one protected call (create, config
    /// writes, the VM list, task status...) at a time, after
    /// pveproxy's hop
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = max_workers)]
    daemon_workers: usize,
    /// Time pvedaemon spends on each protected call before its
    /// handler runs; it holds a pvedaemon worker meanwhile
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "DUR", default_value = "0s", value_parser = duration)]
    daemon_request_cost: Duration,
    /// Requests one connection carries at most (pveproxy's
    /// keep_alive; the last answer says 'Connection: close')
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "N", default_value_t = 100)]
    keep_alive: u32,
    /// An idle connection is closed after this long (pveproxy's
    /// timeout)
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = duration)]
    idle_timeout: Duration,
    /// A pveproxy worker is restarted after this many requests;
    /// its connections close after their next answer
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    max_requests: u64,
    /// Connections one pveproxy worker holds at most; from 20
    /// below (above 100) new ones are not kept alive
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = at_least_one)]
    max_conn: usize,
    /// How long pveproxy waits for pvedaemon's answer before
    /// answering '596 Connection timed out'
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration)]
    proxy_timeout: Duration,
    /// Multiply simulated task durations by F
    #[arg(long, value_name = "F", default_value_t = 1.0, value_parser = positive)]
    time_scale: f64,
    /// Base duration of a task type, e.g. qmstart=2s
    /// (repeatable)
    #[arg(verbatim_doc_comment)]
    #[arg(long = "task-duration", value_name = "TYPE=DUR", value_parser = task_duration)]
    task_durations: Vec<(String, Duration)>,
    /// Vary each task's duration by up to ±F (0.3 = ±30%)
    #[arg(long, value_name = "F", default_value_t = 0.0, value_parser = fraction)]
    task_jitter: f64,
    /// Throttle imports and downloads to RATE bytes/s (e.g.
    /// 50M, 512K); an import is paced by qemu-img's progress
    /// over the virtual size
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "RATE", value_parser = rate)]
    import_rate: Option<u64>,
    /// An import goes on this long after 100 % (a flush)
    #[arg(long, value_name = "DUR", default_value = "0s", value_parser = duration)]
    import_tail: Duration,
    /// With --import-rate, the copy stands still DUR at PCT
    /// percent
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "DUR@PCT", value_parser = stall)]
    import_stall: Option<(f64, Duration)>,
    /// With --import-rate, the rate is multiplied by F from PCT
    /// on
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "F@PCT", value_parser = rate_change)]
    import_rate_change: Option<(f64, f64)>,
    /// Progress is logged in steps of PCT percent (0.01 to 50)
    #[arg(long, value_name = "PCT", default_value_t = 1.0, value_parser = progress_step)]
    progress_step: f64,
    /// Ticket validity
    #[arg(long, value_name = "DUR", default_value = "2h", value_parser = duration)]
    ticket_lifetime: Duration,
    /// How often pvestatd refreshes the VM data that
    /// /cluster/resources lists (name, status, maxmem, ...): a
    /// new VM is listed with status 'unknown' and no name until
    /// then (10s as PVE; 0 = at once)
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = duration)]
    stats_interval: Duration,
    /// How long after its start a VM with `agent: 1` answers
    /// guest agent commands (before: 'QEMU guest agent is not
    /// running')
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "DUR", default_value = "3s", value_parser = duration)]
    agent_delay: Duration,
    /// For this long after the guest agent comes up it answers
    /// its ping but not its commands: each fails after QMP's
    /// 5 s timeout with 'VM N qga command ... failed - got
    /// timeout' (a guest busy booting) [default: 0s]
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "DUR", default_value = "0s", value_parser = duration)]
    agent_busy: Duration,
    /// An address the guest agent of VMID reports (repeatable);
    /// by default the ipconfigN addresses, or 10.0.X.Y for DHCP
    #[arg(verbatim_doc_comment)]
    #[arg(long = "agent-ip", value_name = "VMID=ADDRESS", value_parser = agent_ip)]
    agent_ips: Vec<(u32, IpAddr)>,
    /// Delay before a 401, as pveproxy does
    #[arg(long, value_name = "DUR", default_value = "3s", value_parser = duration)]
    auth_failure_delay: Duration,
    /// The PVE release played (8.0 to 9.2): what /version
    /// reports, its privileges, schema and the behaviour
    /// differences of sim/src/versions.rs
    #[arg(verbatim_doc_comment)]
    #[arg(long, value_name = "VER", default_value = "9.1", value_parser = crate::versions::NAMES)]
    pve_version: String,
    /// A JSON array of faults to set at start (see README)
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// Copy an image into every node's local:import/
    /// (repeatable)
    #[arg(verbatim_doc_comment)]
    #[arg(long = "seed-image", value_name = "FILE")]
    seed_images: Vec<PathBuf>,
}

/// Node names, from `--nodes a,b`.
#[derive(Clone, Debug)]
struct NodeList(Vec<String>);

/// A `--user` value.
#[derive(Clone, Debug)]
struct User {
    id: String,
    password: String,
    readonly: bool,
    no_sys_audit: bool,
}

fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("invalid duration '{text}': {e}"))
}

/// datacenter.cfg's `next-id` property string (pve-cluster DataCenterConfig.pm).
fn next_id(text: &str) -> Result<crate::cluster::datacenter::NextId, String> {
    crate::cluster::datacenter::NextId::parse(text)
}

/// pve-http-server `PVE/APIServer/Utils.pm` `read_proxy_config`: `MAX_WORKERS` is taken
/// when it is an integer above 0 and below 128.
fn max_workers(text: &str) -> Result<usize, String> {
    text.parse::<usize>()
        .ok()
        .filter(|n| (1..128).contains(n))
        .ok_or_else(|| "takes a number of workers from 1 to 127".into())
}

fn at_least_one(text: &str) -> Result<usize, String> {
    text.parse::<usize>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| "takes a number from 1 on".into())
}

fn node_list(text: &str) -> Result<NodeList, String> {
    let nodes: Vec<String> = text
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect();
    let valid = |n: &String| n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if nodes.is_empty() || !nodes.iter().all(valid) {
        return Err("takes node names (letters, digits, '-')".into());
    }
    Ok(NodeList(nodes))
}

fn user(text: &str) -> Result<User, String> {
    let (text, readonly) = match text.strip_suffix(":audit") {
        Some(rest) => (rest, true),
        None => (text, false),
    };
    let (text, no_sys_audit) = match text.strip_suffix(":nosysaudit") {
        Some(rest) => (rest, true),
        None => (text, false),
    };
    let (id, password) = text.split_once(':').ok_or("takes USER@REALM:PASSWORD")?;
    Ok(User {
        id: id.into(),
        password: password.into(),
        readonly,
        no_sys_audit,
    })
}

/// `--user-cfg FILE`: the file's text (parsed with `--pve-version`'s privileges).
fn user_cfg_file(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))
}

fn token(text: &str) -> Result<(String, String), String> {
    match text.rsplit_once('=') {
        Some((id, secret)) if id.contains('!') => Ok((id.into(), secret.into())),
        _ => Err("takes USER@REALM!ID=SECRET".into()),
    }
}

fn positive(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|f| *f > 0.0 && f.is_finite())
        .ok_or_else(|| "takes a positive number".into())
}

fn fraction(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|f| (0.0..=1.0).contains(f))
        .ok_or_else(|| "takes a number from 0 to 1".into())
}

fn rate(text: &str) -> Result<u64, String> {
    volumes::parse_size(text)
        .filter(|r| *r > 0)
        .ok_or_else(|| format!("invalid rate '{text}'"))
}

fn task_duration(text: &str) -> Result<(String, Duration), String> {
    let (ttype, length) = text.split_once('=').ok_or("takes TYPE=DURATION")?;
    Ok((ttype.into(), duration(length)?))
}

fn stall(text: &str) -> Result<(f64, Duration), String> {
    let (length, at) = text.split_once('@').ok_or("takes DURATION@PERCENT")?;
    let at: f64 = at.parse().map_err(|_| "takes DURATION@PERCENT")?;
    Ok((at, duration(length)?))
}

fn rate_change(text: &str) -> Result<(f64, f64), String> {
    let parse = |s: &str| s.parse::<f64>().ok().filter(|x| x.is_finite() && *x > 0.0);
    match text.split_once('@').map(|(f, at)| (parse(f), parse(at))) {
        Some((Some(factor), Some(at))) => Ok((at, factor)),
        _ => Err("takes FACTOR@PERCENT".into()),
    }
}

fn progress_step(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|s| (0.01..=50.0).contains(s))
        .ok_or_else(|| "takes a percentage from 0.01 to 50".into())
}

fn agent_ip(text: &str) -> Result<(u32, IpAddr), String> {
    text.split_once('=')
        .and_then(|(id, ip)| Some((id.parse::<u32>().ok()?, ip.parse().ok()?)))
        .ok_or_else(|| "takes VMID=ADDRESS, e.g. 100=192.0.2.10".into())
}

impl Cli {
    /// How the two API daemons serve: pvedaemon's pool, pveproxy's limits and the hop
    /// between them (pveproxy's workers and cost stay in [`Options`]).
    pub fn daemon_options(&self) -> DaemonOptions {
        DaemonOptions {
            limits: Limits {
                keep_alive: self.keep_alive,
                idle_timeout: self.idle_timeout,
                max_requests: self.max_requests,
                max_conn: self.max_conn,
            },
            daemon_workers: self.daemon_workers,
            daemon_request_cost: self.daemon_request_cost,
            proxy_timeout: self.proxy_timeout,
        }
    }

    /// The simulator's options from the parsed command line; fails on a `--user-cfg` line
    /// that PVE would ignore.
    pub fn into_options(self) -> Result<Options, String> {
        let mut agent_ips: HashMap<u32, Vec<IpAddr>> = HashMap::new();
        for (vmid, ip) in self.agent_ips {
            agent_ips.entry(vmid).or_default().push(ip);
        }
        let mut access = match &self.user_cfg {
            Some(text) => {
                AccessCfg::parse(text, &self.pve_version).map_err(|e| format!("--user-cfg: {e}"))?
            }
            None => AccessCfg::new(&self.pve_version),
        };
        for u in &self.users {
            let kind = match (u.readonly, u.no_sys_audit) {
                (true, _) => LegacyKind::Audit,
                (false, true) => LegacyKind::NoSysAudit,
                (false, false) => LegacyKind::Admin,
            };
            access.add_legacy_user(&u.id, kind);
        }
        for (id, _) in &self.tokens {
            access.add_legacy_token(id);
        }
        Ok(Options {
            listen: self.listen,
            admin_listen: self.admin_listen,
            plain_http: self.plain_http,
            data_dir: self.data_dir,
            nodes: self.nodes.0,
            users: self.users.into_iter().map(|u| (u.id, u.password)).collect(),
            tokens: self.tokens,
            workers: self.workers,
            request_cost: self.request_cost,
            time_scale: self.time_scale,
            durations: self.task_durations.into_iter().collect(),
            import_rate: self.import_rate,
            task_jitter: self.task_jitter,
            ticket_lifetime: self.ticket_lifetime,
            auth_failure_delay: self.auth_failure_delay,
            version: self.pve_version,
            scenario: self.scenario,
            seed_images: self.seed_images,
            stats_interval: self.stats_interval,
            agent_delay: self.agent_delay,
            agent_busy: self.agent_busy,
            agent_ips,
            access,
            registered_tags: crate::tools::split_list(&self.registered_tags),
            next_id: self.next_id,
            import_profile: ImportProfile {
                change: self.import_rate_change,
                stall: self.import_stall,
                step: self.progress_step,
                tail: self.import_tail,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Cli::try_parse_from(std::iter::once("pve-sim").chain(args.iter().copied()))
            .map(|cli| cli.into_options().expect("a valid user.cfg"))
    }

    #[test]
    fn the_spec_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    fn daemons(args: &[&str]) -> Result<DaemonOptions, clap::Error> {
        Cli::try_parse_from(std::iter::once("pve-sim").chain(args.iter().copied()))
            .map(|cli| cli.daemon_options())
    }

    #[test]
    fn the_daemons_default_to_pves_numbers() {
        let d = daemons(&[]).unwrap();
        assert_eq!(d.daemon_workers, 3);
        assert_eq!(d.daemon_request_cost, Duration::ZERO);
        assert_eq!(d.limits.keep_alive, 100);
        assert_eq!(d.limits.idle_timeout, Duration::from_secs(5));
        assert_eq!(d.limits.max_requests, 1000);
        assert_eq!(d.limits.max_conn, 500);
        assert_eq!(d.proxy_timeout, Duration::from_secs(30));
        let d = daemons(&["--daemon-workers=127", "--daemon-request-cost=5ms"]).unwrap();
        assert_eq!(d.daemon_workers, 127);
        assert_eq!(d.daemon_request_cost, Duration::from_millis(5));
    }

    #[test]
    fn workers_are_limited_as_max_workers_is() {
        for bad in ["0", "128", "x"] {
            for option in ["--workers", "--daemon-workers"] {
                let e = parse(&[&format!("{option}={bad}")]).err().expect("refused");
                assert!(e.to_string().contains(option), "{e}");
            }
        }
        assert_eq!(parse(&["--workers=127"]).unwrap().workers, 127);
    }

    #[test]
    fn defaults_are_written_once_in_the_spec() {
        let o = parse(&[]).unwrap();
        assert_eq!(o.listen, "127.0.0.1:8006");
        assert_eq!(o.nodes, ["pve1"]);
        assert_eq!(o.users, [("root@pam".to_string(), "pve-sim".to_string())]);
        assert_eq!(o.workers, 3);
        assert_eq!(o.request_cost, Duration::ZERO);
        assert_eq!(o.ticket_lifetime, Duration::from_secs(7200));
        assert_eq!(o.stats_interval, Duration::from_secs(10));
        assert_eq!(o.import_profile.step, 1.0);
        assert_eq!(o.version, "9.1");
    }

    #[test]
    fn equals_and_space_spellings_agree() {
        let a = parse(&[
            "--request-cost=20ms",
            "--nodes=a,b",
            "--user=u@pve:pw:audit",
        ])
        .unwrap();
        let b = parse(&[
            "--request-cost",
            "20ms",
            "--nodes",
            "a,b",
            "--user",
            "u@pve:pw:audit",
        ])
        .unwrap();
        for o in [a, b] {
            assert_eq!(o.request_cost, Duration::from_millis(20));
            assert_eq!(o.nodes, ["a", "b"]);
            assert_eq!(o.users, [("u@pve".to_string(), "pw".to_string())]);
            assert!(o.access.acl_root.users["u@pve"].contains_key("PVEAuditor"));
        }
    }

    #[test]
    fn a_repeated_single_option_takes_the_last_value() {
        let o = parse(&["--listen=127.0.0.1:1", "--listen", "127.0.0.1:0"]).unwrap();
        assert_eq!(o.listen, "127.0.0.1:0");
    }

    #[test]
    fn repeatable_and_compound_values() {
        let o = parse(&[
            "--user=a@pam:x:nosysaudit",
            "--token=a@pam!ci=s3",
            "--task-duration=qmstart=2s",
            "--agent-ip=100=192.0.2.10",
            "--agent-ip=100=192.0.2.11",
            "--import-stall=2s@40",
            "--import-rate-change=0.5@50",
        ])
        .unwrap();
        let grants = &o.access.acl_root.users["a@pam"];
        assert!(grants.contains_key(crate::access::user_cfg::NO_SYS_AUDIT_ROLE));
        assert!(o.access.token("a@pam!ci").is_some_and(|t| !t.privsep));
        assert_eq!(o.tokens, [("a@pam!ci".to_string(), "s3".to_string())]);
        assert_eq!(o.durations["qmstart"], Duration::from_secs(2));
        assert_eq!(o.agent_ips[&100].len(), 2);
        assert_eq!(o.import_profile.stall, Some((40.0, Duration::from_secs(2))));
        assert_eq!(o.import_profile.change, Some((50.0, 0.5)));
    }

    #[test]
    fn bad_values_name_the_option() {
        for (args, option) in [
            (&["--request-cost=soon"][..], "--request-cost"),
            (&["--nodes=a_b"], "--nodes"),
            (&["--token=nobang=s"], "--token"),
            (&["--time-scale=0"], "--time-scale"),
            (&["--task-jitter=2"], "--task-jitter"),
            (&["--pve-version=7.0"], "--pve-version"),
            (&["--progress-step=90"], "--progress-step"),
            (&["--bogus"], "--bogus"),
        ] {
            let e = parse(args).err().expect("refused").to_string();
            assert!(e.contains(option), "{args:?}: {e}");
        }
    }

    #[test]
    fn help_documents_the_request_cost() {
        let help = Cli::try_parse_from(["pve-sim", "--help"])
            .unwrap_err()
            .to_string();
        assert!(help.contains("--request-cost <DUR>"), "{help}");
        assert!(help.contains("[default: 0s]"), "{help}");
        assert!(help.contains("POST   /lock"), "{help}");
    }
}
