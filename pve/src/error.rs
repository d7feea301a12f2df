//! API errors as PVE reports them, and their classification for retries: was the request
//! surely not carried out (safe to send again), is it lock contention, is it transient?

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

/// The error an [`ApiError`] wraps (ureq's, a JSON parser's), shared so the error stays
/// cheap to clone.
pub type Source = Arc<dyn std::error::Error + Send + Sync>;

/// A failed API request. Its message says what failed and what PVE (or the transport) said;
/// [`std::error::Error::source`] gives the underlying error where there is one.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ApiError {
    /// No HTTP answer. `sent` is false when the request surely never reached the server
    /// (connection refused, DNS, TLS handshake), true when it may have been carried out.
    Transport {
        detail: String,
        sent: bool,
        source: Option<Source>,
    },
    /// An HTTP error status with PVE's message (the body's `message`, else the status line).
    Http {
        status: u16,
        message: String,
        errors: Map<String, Value>,
    },
    /// The server answered, but not like a PVE API (HTML, say): retrying will not help.
    NotPve {
        detail: String,
        source: Option<Source>,
    },
    /// A write attempted in check mode; the client layer refuses it.
    CheckMode { what: String },
    /// PVE (on the run's first request) or the proxy cannot be reached, or the proxy refused
    /// the tunnel: a setting to fix (host, port, proxy), not a blip to retry. Once the server
    /// has answered, a refused connection is a [`ApiError::Transport`] (pveproxy restarting).
    Unreachable {
        detail: String,
        source: Option<Source>,
    },
    /// A signal (SIGINT, SIGTERM, …) arrived: the request was not sent, or a back-off before
    /// sending it again was cut short. Nothing more is sent but a task's status, log or stop.
    Interrupted { signal: &'static str, what: String },
    /// The run's deadline passed before the request could be sent.
    DeadlineReached { what: String },
    /// The run's deadline ended the retries of a request every try of which failed on the way
    /// (pveproxy's `595 No route to host` for a node it cannot reach, a restart, …): `what`
    /// was tried `tries` times over `lasted`, and `last` is what the last try got.
    Unanswered {
        what: String,
        tries: u32,
        lasted: std::time::Duration,
        last: Box<ApiError>,
    },
    /// The answer to a request that PVE may have carried out was lost on the way (`error`),
    /// and looking for what it did found `finding`; it was not sent again.
    AnswerLost {
        what: String,
        error: Box<ApiError>,
        finding: String,
    },
}

/// Who answers for a request path: `node X` for `/nodes/X/…`, else PVE's API.
fn answerer(what: &str) -> String {
    what.split_once(' ')
        .map_or(what, |(_, path)| path)
        .strip_prefix("/nodes/")
        .and_then(|rest| rest.split('/').next())
        .filter(|node| !node.is_empty())
        .map(|node| format!("node {node}"))
        .unwrap_or_else(|| "PVE's API".to_string())
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Transport { detail, .. } => write!(f, "{detail}"),
            ApiError::Http {
                status,
                message,
                errors,
            } if !errors.is_empty() => {
                let list: Vec<String> = errors
                    .iter()
                    .map(|(k, v)| {
                        format!(
                            "{k}: {}",
                            v.as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| v.to_string())
                                .trim()
                        )
                    })
                    .collect();
                write!(f, "{status} {} ({})", message.trim(), list.join("; "))
            }
            ApiError::Http {
                status, message, ..
            } => write!(f, "{status} {}", message.trim()),
            ApiError::NotPve { detail, .. } => write!(f, "{detail}"),
            ApiError::CheckMode { what } => write!(f, "check mode: refusing to send {what}"),
            ApiError::Unreachable { detail, .. } => write!(f, "{detail}"),
            ApiError::Interrupted { signal, what } if what.is_empty() => {
                write!(f, "interrupted by {signal}")
            }
            ApiError::Interrupted { signal, what } => write!(f, "interrupted by {signal}: {what}"),
            ApiError::DeadlineReached { what } => {
                write!(f, "the run's timeout was reached before {what}")
            }
            ApiError::Unanswered {
                what,
                tries,
                lasted,
                last,
            } => write!(
                f,
                "{} did not answer for {:.1}s, until the run's timeout: {tries} tries of {what}, \
                 the last got {last}",
                answerer(what),
                lasted.as_secs_f64()
            ),
            ApiError::AnswerLost {
                what,
                error,
                finding,
            } => write!(
                f,
                "the answer to {what} was lost ({error}), and {finding}; it was not sent again, \
                 as PVE may have carried it out (it is sent at most once per run)"
            ),
        }
    }
}

impl std::error::Error for ApiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ApiError::Transport { source, .. }
            | ApiError::NotPve { source, .. }
            | ApiError::Unreachable { source, .. } => source
                .as_deref()
                .map(|e| e as &(dyn std::error::Error + 'static)),
            _ => None,
        }
    }
}

impl ApiError {
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    fn message(&self) -> &str {
        match self {
            ApiError::Http { message, .. } => message,
            ApiError::Transport { detail, .. }
            | ApiError::NotPve { detail, .. }
            | ApiError::Unreachable { detail, .. } => detail,
            ApiError::CheckMode { .. }
            | ApiError::Interrupted { .. }
            | ApiError::DeadlineReached { .. }
            | ApiError::Unanswered { .. }
            | ApiError::AnswerLost { .. } => "",
        }
    }

    /// `VM is locked (…)`, `can't lock file … got timeout`, or a cluster storage lock's
    /// `cfs-lock 'storage-X' error: got lock request timeout`: another operation holds the VM
    /// or the storage. PVE raises each before doing anything, so the request can be sent
    /// again later. (A guest agent's `qga command … got timeout` is not a lock.)
    pub fn is_lock_contention(&self) -> bool {
        self.status() == Some(500) && is_lock_timeout(self.message())
    }

    /// `VM N qga command '…' failed - got timeout` (qemu-server QMPClient, the agent's ping
    /// or command outlasted its timeout): the agent is busy or not up yet; ask again.
    pub fn is_agent_timeout(&self) -> bool {
        self.status() == Some(500)
            && self.message().contains(" qga command ")
            && self.message().contains("got timeout")
    }

    /// `VM N is not running` (qemu-server's agent and monitor calls): the VM is stopped.
    pub fn is_vm_not_running(&self) -> bool {
        self.status() == Some(500) && {
            let m = self.message().trim_end();
            m.starts_with("VM ") && m.ends_with(" is not running")
        }
    }

    /// The `lock` named in `VM is locked (create)`, if that is the error.
    pub fn locked_by(&self) -> Option<String> {
        let m = self.message();
        let i = m.find(" is locked (")?;
        let rest = &m[i + " is locked (".len()..];
        Some(rest[..rest.find(')')?].to_string())
    }

    /// `400 {"upid": "no such task"}`: a task not (yet) visible on that node.
    pub fn is_no_such_task(&self) -> bool {
        matches!(self, ApiError::Http { status: 400, errors, .. }
            if errors.get("upid").and_then(Value::as_str).is_some_and(|s| s.contains("no such task")))
    }

    /// Trouble on the way, not an answer from PVE: transport errors, 502–504, and the proxy
    /// pseudo-statuses 595–599. Worth retrying inside the deadline.
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Transport { .. } => true,
            ApiError::Http { status, .. } => matches!(status, 502..=504 | 595..=599),
            ApiError::NotPve { .. }
            | ApiError::CheckMode { .. }
            | ApiError::Unreachable { .. }
            | ApiError::Interrupted { .. }
            | ApiError::DeadlineReached { .. }
            | ApiError::Unanswered { .. }
            | ApiError::AnswerLost { .. } => false,
        }
    }

    /// A 500 that does not state a fact about the object ("does not exist", a lock, a failed
    /// host lookup): a read may try it again a few times.
    pub fn is_unexplained_500(&self) -> bool {
        match self {
            ApiError::Http {
                status: 500,
                message,
                ..
            } => ![
                "does not exist",
                "already exists",
                "hostname lookup",
                " is locked (",
                "got timeout",
                "not running",
                "running",
            ]
            .iter()
            .any(|m| message.contains(m)),
            _ => false,
        }
    }

    /// True when the server surely did not carry the request out, so sending it again cannot
    /// do it twice: nothing was sent, the login was refused, the parameters were refused, the
    /// proxy could not reach the node (595), or the VM was locked.
    pub fn surely_not_done(&self) -> bool {
        match self {
            ApiError::Transport { sent, .. } => !sent,
            ApiError::Http { status, .. } => {
                matches!(status, 400..=499 | 595) || self.is_lock_contention()
            }
            ApiError::NotPve { .. } | ApiError::AnswerLost { .. } => false,
            ApiError::Unanswered { last, .. } => last.surely_not_done(),
            ApiError::CheckMode { .. }
            | ApiError::Unreachable { .. }
            | ApiError::Interrupted { .. }
            | ApiError::DeadlineReached { .. } => true,
        }
    }

    /// `… checksum mismatch (file change by other user?)`: the config changed since it was
    /// read (its digest no longer matches); read it again and re-plan.
    pub fn is_checksum_mismatch(&self) -> bool {
        self.status().is_some_and(|s| s >= 400) && self.message().contains("checksum mismatch")
    }

    /// `VM N already exists on node 'X'` (qemu-server's create): the vmid is taken.
    pub fn is_already_exists(&self) -> bool {
        self.status() == Some(500) && self.message().contains("already exists")
    }

    /// `500 QEMU guest agent is not running`: the agent in the guest is not up (yet), or the
    /// VM has no agent device (qemu-server, QemuServer/Agent.pm, assert_agent_available).
    pub fn is_agent_not_running(&self) -> bool {
        self.status() == Some(500) && self.message().contains("guest agent is not running")
    }

    /// A signal ended the request (or the pause before it).
    pub fn is_interrupted(&self) -> bool {
        matches!(self, ApiError::Interrupted { .. })
    }

    /// `Configuration file '…/N.conf' does not exist`: the VM is not (or no longer) there.
    pub fn is_missing_vm(&self) -> bool {
        self.status() == Some(500) && self.message().contains("does not exist")
    }

    /// `401`: the ticket expired or was revoked.
    pub fn is_auth(&self) -> bool {
        self.status() == Some(401)
    }

    /// `no such resource 'vm:N'` (pve-ha-manager API2/HA/Resources.pm): the VM is not an HA
    /// resource.
    pub fn is_no_such_ha_resource(&self) -> bool {
        self.status() == Some(500) && self.message().contains("no such resource")
    }

    /// `invalid parameter 'group': ha groups have been migrated to rules` (pve-ha-manager
    /// API2/HA/Resources.pm on PVE 9, where HA groups became node-affinity rules): a write
    /// that names an HA group is refused.
    pub fn is_ha_groups_migrated(&self) -> bool {
        self.says("ha groups have been migrated to rules")
    }

    /// `<volume> has wrong type 'import' - not an image` (qemu-server API2/Qemu.pm
    /// `$check_storage_access` before 8.2.7, i.e. PVE before 8.3): an `import-from` of an
    /// `import` volume is refused, before PVE writes anything.
    pub fn is_import_volume_refused(&self) -> bool {
        self.says("has wrong type 'import' - not an image")
    }

    /// Whether PVE's message, or one of its parameter errors, contains `text`.
    fn says(&self, text: &str) -> bool {
        match self {
            ApiError::Http {
                message, errors, ..
            } => {
                message.contains(text)
                    || errors
                        .values()
                        .any(|v| v.as_str().is_some_and(|said| said.contains(text)))
            }
            ApiError::Unanswered { last, .. } => last.says(text),
            _ => false,
        }
    }
}

/// True when a task's exit status says its worker refused before changing anything, because
/// the VM changed or another operation held it: qemu-server re-runs its checks inside the
/// worker under the VM's file lock (`checksum mismatch (file change by other user?)`,
/// `VM is locked (…)`, `VM N already running` from `vm_start`) and gives up waiting for that
/// lock after 10 s (`… got timeout`).
/// The caller reads the VM again and re-plans.
/// A cluster storage lock's timeout (`cfs-lock 'storage-X' error: got lock request timeout`,
/// PVE::Cluster cfs_lock as pve-storage's cluster_lock_storage takes it) counts too: the
/// allocation under it never started. Failures that did act are not refusals (see
/// [`task_acted_then_failed`]).
pub fn task_refused_before_acting(exitstatus: &str) -> bool {
    task_acted_then_failed(exitstatus).is_none()
        && (exitstatus.contains("checksum mismatch")
            || is_lock_timeout(exitstatus)
            || exitstatus.starts_with("VM is locked (")
            || (exitstatus.starts_with("VM ") && exitstatus.ends_with(" already running")))
}

/// A lock PVE could not take within its timeout, so it did nothing: a file lock
/// (PVE::Tools lock_file_full: `can't lock file '…' - got timeout`), a VM's config lock
/// (`VM is locked (…)`), or a cluster lock (PVE::Cluster cfs_lock: `cfs-lock '…' error: got
/// lock request timeout`).
fn is_lock_timeout(message: &str) -> bool {
    (message.contains("can't lock file") && message.contains("got timeout"))
        || message.contains(" is locked (")
        || (message.contains("cfs-lock '") && message.contains("error: got lock request timeout"))
}

/// Whether an exit status is a cluster storage lock's timeout (see
/// [`task_refused_before_acting`]): a create or clone that failed so left nothing behind,
/// and may be sent again.
pub fn task_met_storage_lock(exitstatus: &str) -> bool {
    exitstatus.contains("cfs-lock 'storage-") && exitstatus.contains("got lock request timeout")
}

/// Why a task failed after it acted, by PVE's exact messages; `None` for any other exit.
/// These are not refusals: PVE did something (asked the guest to power off, ran
/// `qemu-img resize`), so they are tried again a bounded number of times at most, and
/// reported with this cause.
///
/// * `VM quit/powerdown failed - got timeout`: qemu-server QemuServer.pm `_do_vm_stop`, a
///   shutdown without `forceStop` whose guest did not power off within its timeout (it
///   ignored ACPI, or its agent did not shut it down).
/// * `command '/usr/bin/qemu-img resize …' failed: got timeout`: pve-storage Common.pm
///   `qemu_img_resize` runs `qemu-img resize` under PVE's 10 s (PVE::Cmd run's message).
pub fn task_acted_then_failed(exitstatus: &str) -> Option<&'static str> {
    if exitstatus.contains("VM quit/powerdown failed - got timeout") {
        Some(
            "the guest did not power off within the shutdown timeout (it ignored the ACPI \
             power button, or its agent did not shut it down); raise shutdown_timeout, or \
             set force_stop",
        )
    } else if exitstatus.contains("command '/usr/bin/qemu-img resize")
        && exitstatus.contains("failed: got timeout")
    {
        Some(
            "qemu-img resize outlasted PVE's 10 s (pve-storage qemu_img_resize); the storage \
             is slow or busy",
        )
    } else {
        None
    }
}

/// True when a create or clone task found its new vmid taken (another run took it between
/// this run's `nextid` and its request): `unable to create VM N: config file already exists`
/// (qemu-server API2/Qemu.pm, clone_vm), `VM N already exists on node 'X'` (create).
pub fn task_found_vmid_taken(exitstatus: &str) -> bool {
    exitstatus.contains("config file already exists")
        || (exitstatus.contains("VM ") && exitstatus.contains(" already exists"))
}

/// True when a snapshot task failed because a disk's storage cannot snapshot (pve-storage
/// `volume_has_feature`, as qemu-server's snapshot_create checks it: `snapshot feature is not
/// available`): raw files on a directory storage, say.
pub fn task_lacks_snapshot_feature(exitstatus: &str) -> bool {
    exitstatus.contains("snapshot feature is not available")
}

/// Why a `qmigrate` task failed, from the last lines of its log: AbstractMigrate.pm logs
/// `ERROR: migration aborted (duration …): <why>` and QemuMigrate.pm's volume scan names each
/// disk it cannot move (`can't migrate local disk '…': …`), while the exit status only says
/// `migration aborted`. `None` when the log does not say.
pub fn migration_reason(log_tail: &[String]) -> Option<String> {
    let unstamped = |line: &str| -> String {
        // `2026-12-01 08:30:00 text`: AbstractMigrate's stamp.
        let b = line.as_bytes();
        let stamped = b.len() > 20 && b[4] == b'-' && b[10] == b' ' && b[13] == b':';
        match line.get(20..) {
            Some(rest) if stamped => rest.to_string(),
            _ => line.to_string(),
        }
    };
    let why = log_tail.iter().rev().find_map(|l| {
        let l = unstamped(l);
        let rest = l.strip_prefix("ERROR: migration aborted (duration ")?;
        Some(rest.split_once("): ")?.1.to_string())
    })?;
    let disks: Vec<String> = log_tail
        .iter()
        .map(|l| unstamped(l))
        .filter(|l| {
            l.starts_with("can't migrate local disk ") || l == "can't migrate local cdrom drive"
        })
        .collect();
    Some(if disks.is_empty() {
        why
    } else {
        format!("{why} ({})", disks.join("; "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn http(status: u16, msg: &str) -> ApiError {
        ApiError::Http {
            status,
            message: msg.into(),
            errors: Map::new(),
        }
    }

    #[test]
    fn classifies_locks() {
        let e = http(500, "VM is locked (create)");
        assert!(e.is_lock_contention() && e.surely_not_done());
        assert_eq!(e.locked_by().as_deref(), Some("create"));
        assert!(
            http(
                500,
                "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"
            )
            .is_lock_contention()
        );
        assert!(
            !http(
                500,
                "unable to create VM 100 - VM 100 already exists on node 'pve1'"
            )
            .is_lock_contention()
        );
    }

    #[test]
    fn classifies_transient_and_ambiguous() {
        assert!(http(596, "Broken pipe").is_transient());
        assert!(!http(596, "Broken pipe").surely_not_done());
        assert!(http(595, "Connection refused").surely_not_done());
        assert!(
            !http(
                500,
                "Configuration file 'nodes/pve1/qemu-server/9.conf' does not exist"
            )
            .is_transient()
        );
        assert!(
            !http(
                500,
                "Configuration file 'nodes/pve1/qemu-server/9.conf' does not exist"
            )
            .is_unexplained_500()
        );
        assert!(
            http(500, "Internal Server Error").is_unexplained_500()
                && !http(500, "Internal Server Error").is_transient()
        );
        assert!(
            ApiError::Transport {
                source: None,
                detail: "reset".into(),
                sent: true
            }
            .is_transient()
        );
        assert!(
            !ApiError::Transport {
                source: None,
                detail: "reset".into(),
                sent: true
            }
            .surely_not_done()
        );
        assert!(
            ApiError::Transport {
                source: None,
                detail: "refused".into(),
                sent: false
            }
            .surely_not_done()
        );
    }

    #[test]
    fn task_refusals_are_told_from_failures() {
        assert!(task_refused_before_acting(
            "checksum mismatch (file change by other user?)"
        ));
        assert!(task_refused_before_acting("VM is locked (backup)"));
        assert!(task_refused_before_acting(
            "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"
        ));
        assert!(!task_refused_before_acting(
            "unable to create VM 100 - cannot import from 'local:import/x.qcow2'"
        ));
        assert!(!task_refused_before_acting("received interrupt"));
        let storage =
            "unable to create VM 300 - cfs-lock 'storage-ceph1' error: got lock request timeout";
        assert!(task_refused_before_acting(storage) && task_met_storage_lock(storage));
        assert!(!task_met_storage_lock(
            "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"
        ));
    }

    #[test]
    fn failures_that_acted_are_not_refusals() {
        let shutdown = "VM quit/powerdown failed - got timeout";
        assert!(!task_refused_before_acting(shutdown));
        assert!(task_acted_then_failed(shutdown).is_some_and(|c| c.contains("ACPI")));
        let resize = "command '/usr/bin/qemu-img resize -f qcow2 \
                      /var/lib/vz/images/100/vm-100-disk-0.qcow2 10737418240' failed: got timeout";
        assert!(!task_refused_before_acting(resize));
        assert!(task_acted_then_failed(resize).is_some_and(|c| c.contains("10 s")));
        assert_eq!(task_acted_then_failed("VM quit/powerdown failed"), None);
    }

    #[test]
    fn agent_and_storage_lock_timeouts() {
        let agent = http(
            500,
            "VM 100 qga command 'guest-network-get-interfaces' failed - got timeout",
        );
        assert!(agent.is_agent_timeout() && !agent.is_lock_contention());
        assert!(!agent.surely_not_done());
        let storage = http(
            500,
            "cfs-lock 'storage-ceph1' error: got lock request timeout",
        );
        assert!(storage.is_lock_contention() && storage.surely_not_done());
        assert!(http(500, "VM 100 is not running").is_vm_not_running());
        assert!(!http(500, "QEMU guest agent is not running").is_vm_not_running());
    }

    #[test]
    fn unanswered_names_the_node_and_what_it_got() {
        let e = ApiError::Unanswered {
            what: "GET /nodes/pve2/qemu/100/config".into(),
            tries: 8,
            lasted: std::time::Duration::from_millis(7900),
            last: Box::new(http(595, "No route to host")),
        };
        assert_eq!(
            e.to_string(),
            "node pve2 did not answer for 7.9s, until the run's timeout: 8 tries of \
             GET /nodes/pve2/qemu/100/config, the last got 595 No route to host"
        );
        assert!(e.surely_not_done() && !e.is_transient());
        assert_eq!(answerer("GET /cluster/resources"), "PVE's API");
    }

    #[test]
    fn no_such_task_and_display() {
        let mut errors = Map::new();
        errors.insert("upid".into(), json!("no such task"));
        let e = ApiError::Http {
            status: 400,
            message: "Parameter verification failed.".into(),
            errors,
        };
        assert!(e.is_no_such_task());
        assert_eq!(
            e.to_string(),
            "400 Parameter verification failed. (upid: no such task)"
        );
    }

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|line| line.to_string()).collect()
    }

    #[test]
    fn the_reason_of_a_failed_migration_is_read_from_its_log() {
        let tail = lines(&[
            "2026-12-01 08:30:00 found local disk 'local-lvm:vm-100-disk-0' (attached)",
            "2026-12-01 08:30:00 can't migrate local disk 'local-lvm:vm-100-disk-0': can't live migrate attached local disks without with-local-disks option",
            "2026-12-01 08:30:00 ERROR: Problem found while scanning volumes - can't migrate VM - check log",
            "2026-12-01 08:30:00 aborting phase 1 - cleanup resources",
            "2026-12-01 08:30:00 ERROR: migration aborted (duration 00:00:00): Problem found while scanning volumes - can't migrate VM - check log",
            "TASK ERROR: migration aborted",
        ]);
        assert_eq!(
            migration_reason(&tail).unwrap(),
            "Problem found while scanning volumes - can't migrate VM - check log (can't migrate local disk 'local-lvm:vm-100-disk-0': can't live migrate attached local disks without with-local-disks option)"
        );
        let locked = lines(&[
            "2026-12-01 08:30:10 ERROR: migration aborted (duration 00:00:10): can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout",
            "TASK ERROR: migration aborted",
        ]);
        let why = migration_reason(&locked).unwrap();
        assert!(task_refused_before_acting(&why), "{why}");
        assert_eq!(migration_reason(&lines(&["TASK ERROR: x"])), None);
    }

    #[test]
    fn classifies_ha_and_snapshot_refusals() {
        assert!(http(500, "no such resource 'vm:100'\n").is_no_such_ha_resource());
        assert!(!http(500, "VM is locked (create)").is_no_such_ha_resource());
        let groups = http(
            500,
            "invalid parameter 'group': ha groups have been migrated to rules\n",
        );
        assert!(groups.is_ha_groups_migrated());
        let mut errors = Map::new();
        errors.insert(
            "group".into(),
            json!("invalid parameter 'group': ha groups have been migrated to rules"),
        );
        let in_errors = ApiError::Http {
            status: 400,
            message: "Parameter verification failed.".into(),
            errors,
        };
        assert!(in_errors.is_ha_groups_migrated());
        assert!(!http(500, "no such resource 'vm:100'").is_ha_groups_migrated());
        let mut errors = Map::new();
        errors.insert(
            "scsi0".into(),
            json!("local:import/noble.qcow2 has wrong type 'import' - not an image"),
        );
        let import = ApiError::Http {
            status: 400,
            message: "Parameter verification failed.".into(),
            errors,
        };
        assert!(import.is_import_volume_refused());
        assert!(!import.is_ha_groups_migrated());
        let iso = "local:iso/a.img has wrong type 'iso' - needs to be 'images' or 'import'";
        assert!(!http(400, iso).is_import_volume_refused());
        assert!(task_lacks_snapshot_feature(
            "snapshot feature is not available"
        ));
        assert!(!task_lacks_snapshot_feature("VM is locked (backup)"));
    }
}
