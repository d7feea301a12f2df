//! Live progress: what a wait tells, while a copy runs, to whoever asked to be told. A wait
//! on a task whose log reports a copy (`transferred 1.0 GiB of 2.0 GiB (50.00%)`, see
//! [`crate::wait::progress_in`]) hands each new percentage it sees, as a [`TaskProgress`], to
//! the process's one observer, when one is set ([`set_observer`]); with none, nothing is
//! built. The module layer sets it to print the events for Ansible's action plugin; the
//! client itself prints nothing.
//!
//! Apart from `tasks.rs` (the wait's shell, which calls [`Follower::next`] after each look)
//! so that what an event holds, and how it is named from PVE's log, is pure and tested here:
//! `tasks` → `task_progress` → `wait`, `upid`, one way.

use std::sync::OnceLock;
use std::time::Duration;

use crate::upid::Upid;
use crate::wait::{copy_size, transfer_part};

/// One new percentage of a copy a task reports, as the wait saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskProgress {
    /// The task (its node, type and VM are the UPID's).
    pub upid: Upid,
    /// What is copied, in words built from the task type and what the log names: `import
    /// local:import/noble.qcow2`, `move scsi0`, `migrate scsi0`, `clone scsi0`, `download`.
    pub what: String,
    /// Which copy of the task this is, from 1: a task that imports several disks copies them
    /// one after the other, and the percentage starts again at each.
    pub copy: u32,
    /// The percentage the log reported last.
    pub percent: f64,
    /// Bytes copied and the copy's size, when the log gives the size.
    pub done_bytes: Option<u64>,
    pub total_bytes: Option<u64>,
    /// The copy rate over the recent samples, in bytes per second (when the size is known).
    pub rate_bytes_per_s: Option<f64>,
    /// The time left at that rate.
    pub eta: Option<Duration>,
    /// How long the wait has waited so far.
    pub elapsed: Duration,
}

impl TaskProgress {
    /// The VM the task works on: the UPID's id, for the tasks that name one (a download's
    /// or a storage copy's id is not a VM).
    pub fn vmid(&self) -> Option<u32> {
        self.upid.id.parse().ok()
    }
}

/// What receives the events.
pub type Observer = Box<dyn Fn(&TaskProgress) + Send + Sync>;

static OBSERVER: OnceLock<Observer> = OnceLock::new();

/// Sets the process's observer of live progress, once (as signal handlers are set once);
/// false if one was set already (it stays).
pub fn set_observer(observer: Observer) -> bool {
    OBSERVER.set(observer).is_ok()
}

fn observing() -> bool {
    OBSERVER.get().is_some()
}

fn tell(event: &TaskProgress) {
    if let Some(observer) = OBSERVER.get() {
        observer(event);
    }
}

/// What one wait has told so far: the percentage of the last event and which copy it was.
#[derive(Debug, Default)]
pub struct Follower {
    last: Option<f64>,
    copy: u32,
}

impl Follower {
    /// After a look: the event for a percentage not told yet (`percent`, the wait's latest;
    /// `rate`, its copy rate in percent per second), built from the log lines, if any. The
    /// percentage going back is the next copy.
    pub fn next(
        &mut self,
        upid: &Upid,
        lines: &[String],
        percent: Option<f64>,
        rate: Option<f64>,
        elapsed: Duration,
    ) -> Option<TaskProgress> {
        let percent = percent?;
        match self.last {
            Some(last) if percent == last => return None,
            Some(last) if percent > last => {}
            _ => self.copy += 1,
        }
        self.last = Some(percent);
        let total = lines.iter().rev().find_map(|line| copy_size(line));
        let share = |part: f64| total.map(|bytes| bytes * part / 100.0);
        let rate_bytes = rate.and_then(share);
        let eta = rate
            .filter(|rate| *rate > 0.0 && percent < 100.0)
            .and_then(|rate| Duration::try_from_secs_f64((100.0 - percent) / rate).ok());
        Some(TaskProgress {
            upid: upid.clone(),
            what: what(&upid.task_type, lines),
            copy: self.copy,
            percent,
            done_bytes: share(percent).map(|bytes| bytes.round() as u64),
            total_bytes: total.map(|bytes| bytes.round() as u64),
            rate_bytes_per_s: rate_bytes.map(|bytes| bytes.round()),
            eta: eta.map(|left| Duration::from_secs(left.as_secs_f64().round() as u64)),
            elapsed,
        })
    }

    /// [`Follower::next`], told to the observer; nothing is built without one.
    pub fn tell(
        &mut self,
        upid: &Upid,
        lines: &[String],
        percent: Option<f64>,
        rate: Option<f64>,
        elapsed: Duration,
    ) {
        if !observing() {
            return;
        }
        if let Some(event) = self.next(upid, lines, percent, rate, elapsed) {
            tell(&event);
        }
    }
}

/// The verb of a task type's copy.
fn verb(task_type: &str) -> &'static str {
    match task_type {
        // A create or a config change copies only to import (`import-from`).
        "qmcreate" | "qmconfig" => "import",
        "qmclone" => "clone",
        "qmmove" => "move",
        "qmigrate" => "migrate",
        "qmrestore" => "restore",
        "download" => "download",
        "imgcopy" => "copy",
        "move_volume" => "move volume",
        _ => "copy",
    }
}

/// What the copy is, in words: the verb, and the drive or source the latest line naming one
/// names. A mirrored drive's progress line names its block job (`drive-scsi0: transferred …`,
/// qemu-server BlockJob.pm); a clone or a move says `create full clone of drive scsi0
/// (local-lvm:vm-100-disk-0)` first, and an import, whose drive PVE does not know yet, `create
/// full clone of drive (local:import/noble.qcow2)` (QemuServer.pm `clone_disk`).
pub fn what(task_type: &str, lines: &[String]) -> String {
    let verb = verb(task_type);
    let named = lines.iter().rev().find_map(|line| {
        let line = line.trim();
        if transfer_part(line).is_some() {
            return line
                .strip_prefix("drive-")
                .and_then(|rest| rest.split_once(": "))
                .map(|(drive, _)| drive.to_string());
        }
        let rest = line.split_once("clone of drive ")?.1;
        let (drive, source) = rest.split_once('(')?;
        let drive = drive.trim();
        if drive.is_empty() {
            source.strip_suffix(')').map(str::to_string)
        } else {
            Some(drive.to_string())
        }
    });
    match named {
        Some(named) if !named.is_empty() => format!("{verb} {named}"),
        _ => verb.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upid(task_type: &str, id: &str) -> Upid {
        Upid::parse(&format!(
            "UPID:pve1:00001234:00005678:65000000:{task_type}:{id}:root@pam:"
        ))
        .unwrap()
    }

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|line| line.to_string()).collect()
    }

    #[test]
    fn names_the_copy_from_the_log() {
        let import = lines(&[
            "create full clone of drive (local:import/noble.qcow2)",
            "transferred 0.0 B of 2.0 GiB (0.00%)",
        ]);
        assert_eq!(what("qmcreate", &import), "import local:import/noble.qcow2");
        let moved = lines(&[
            "create full clone of drive scsi0 (local-lvm:vm-100-disk-0)",
            "allocated target volume 'ceph:vm-100-disk-0'",
            "transferred 1.0 GiB of 2.0 GiB (50.00%)",
        ]);
        assert_eq!(what("qmmove", &moved), "move scsi0");
        assert_eq!(what("qmclone", &moved), "clone scsi0");
        let mirror = lines(&[
            "drive mirror is starting for drive-scsi0",
            "drive-scsi0: transferred 8.0 MiB of 32.0 MiB (25.00%) in 1s",
        ]);
        assert_eq!(what("qmigrate", &mirror), "migrate scsi0");
        assert_eq!(
            what(
                "download",
                &lines(&["transferred 1.0 MiB of 2.0 MiB (50.00%)"])
            ),
            "download"
        );
        assert_eq!(what("qmrestore", &[]), "restore");
        // The second disk of a create: the latest line that names one counts.
        let second = lines(&[
            "create full clone of drive (local:import/a.qcow2)",
            "transferred 2.0 GiB of 2.0 GiB (100.00%)",
            "scsi0: successfully created disk 'local-lvm:vm-100-disk-0,size=2G'",
            "create full clone of drive (local:import/b.qcow2)",
            "transferred 0.0 B of 1.0 GiB (0.00%)",
        ]);
        assert_eq!(what("qmcreate", &second), "import local:import/b.qcow2");
    }

    #[test]
    fn tells_each_new_percentage_once_with_bytes_rate_and_time_left() {
        let task = upid("qmcreate", "100");
        let log = lines(&[
            "create full clone of drive (local:import/noble.qcow2)",
            "transferred 1.0 GiB of 2.0 GiB (50.00%)",
        ]);
        let mut follower = Follower::default();
        let at = Duration::from_secs(10);
        assert_eq!(follower.next(&task, &log, None, None, at), None);
        let first = follower
            .next(&task, &log, Some(50.0), Some(5.0), at)
            .unwrap();
        assert_eq!(first.vmid(), Some(100));
        assert_eq!(first.what, "import local:import/noble.qcow2");
        assert_eq!(first.copy, 1);
        assert_eq!(first.done_bytes, Some(1 << 30));
        assert_eq!(first.total_bytes, Some(2 << 30));
        // 5 % a second of 2 GiB, and 50 % left: 10 s.
        assert_eq!(first.rate_bytes_per_s, Some(107374182.0));
        assert_eq!(first.eta, Some(Duration::from_secs(10)));
        // The same percentage again tells nothing; a higher one does.
        assert_eq!(follower.next(&task, &log, Some(50.0), Some(5.0), at), None);
        let later = follower.next(&task, &log, Some(75.0), None, at).unwrap();
        assert_eq!(
            (later.copy, later.rate_bytes_per_s, later.eta),
            (1, None, None)
        );
        // Going back: the next copy.
        let next = follower.next(&task, &log, Some(2.0), None, at).unwrap();
        assert_eq!(next.copy, 2);
        // Done: no time left to tell.
        let done = follower
            .next(&task, &log, Some(100.0), Some(5.0), at)
            .unwrap();
        assert_eq!(done.eta, None);
    }

    #[test]
    fn a_log_without_sizes_tells_the_percentage_alone() {
        let task = upid("download", "local");
        let mut follower = Follower::default();
        let event = follower
            .next(
                &task,
                &lines(&["downloading…"]),
                Some(30.0),
                Some(1.0),
                Duration::ZERO,
            )
            .unwrap();
        assert_eq!(event.vmid(), None);
        assert_eq!((event.done_bytes, event.total_bytes), (None, None));
        assert_eq!(event.rate_bytes_per_s, None);
        assert_eq!(event.eta, Some(Duration::from_secs(70)));
    }
}
