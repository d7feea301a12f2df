//! The roster: the VMs this controller's runs are making on one API endpoint, or made a
//! moment ago, and the name each create gave. It lets a run by name tell a fleet's VMs
//! without asking PVE.
//!
//! A fleet (one play, `forks: 50`, VMs by name) is fifty runs that each see the others'
//! creates in flight: VMs under `lock: create` with no name yet (qemu-server's create_vm writes
//! the name last), and VMs just made that pvestatd has not named in the cluster listing (it
//! looks every 10 s). Any of them may be an earlier run's VM of the run's own name, so a run
//! waited for them and read their names on their nodes, every run for every other: the reads
//! that made a fleet's requests per VM grow. A run of this controller knows what it is
//! making. Once PVE accepted its create or clone (a task's UPID in hand), it writes a record
//! (vmid, node, name, UPID) to a file of its own in the endpoint's folder, the gate's
//! ([`super::gate::endpoint_dir`]), holds an exclusive lock on that file while its create
//! runs, and marks it ended when the task ended. A run by name takes a record's name for a VM
//! the listing does not name ([`Roster::made`]) where:
//!
//! - the create still runs and its run is alive (the file's lock is held: the kernel frees it
//!   when a process ends, however it ends), or
//! - the create ended `OK` less than [`FRESH`] ago: the name is the one the create gave,
//!   taken as a run takes the cluster listing's names (pvestatd's, up to 10 s old), for
//!   twice as long. A rename or destroy by this controller's runs on this endpoint removes the
//!   VM's records ([`Roster::forget`]); one made elsewhere within that time is not seen.
//!
//! A record names only a VM the listing shows fitting it ([`Made::fits`]): one under `lock:
//! create` only while its own create runs (once it ended, or for a clone, such a VM is
//! another create's).
//!
//! A run that was interrupted while its create ran (its timeout, a signal, a kill) leaves a
//! record that is neither: the create it started may be an earlier run's VM of any name, and
//! the next run waits for it as before. So the roster only spares requests; what a run finds
//! without it, it finds with it. Records are the user's own (the folder is made 0700 and
//! trusted only when no one else may write it); a record that cannot be read or parsed is
//! ignored, and one older than [`KEPT`] is removed by the next reader.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::gate::{Root, endpoint_dir, subfolder};

/// How long after its create ended `OK` a record's name is taken: pvestatd names a new VM in
/// the cluster listing within 10 s (pve-manager PVE/Service/pvestatd.pm, its update loop),
/// with room for a slow round.
pub const FRESH: Duration = Duration::from_secs(20);
/// How long a record is kept before a reader removes it (once no run holds it).
pub const KEPT: Duration = Duration::from_secs(300);
/// The largest record file read.
const MOST_BYTES: u64 = 4096;

/// A VM a run of this controller made or is making, as its record says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Made {
    pub vmid: u32,
    pub node: String,
    /// The name its create or clone gave it.
    pub name: String,
    /// The task making it.
    pub upid: String,
    /// Its type, `qmcreate` or `qmclone`: a create's VM is listed under `lock: create` while
    /// it runs, a clone's under `lock: clone`.
    pub task_type: String,
    /// When its task ended (this host's clock, epoch seconds) and whether `OK`; `None` while
    /// it runs.
    pub ended: Option<Ended>,
}

/// How a record's task ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    pub at: u64,
    pub ok: bool,
}

impl Made {
    /// Whether a reader takes this record's name at `now` (epoch seconds, this host's clock):
    /// its create still runs under a live run (`held`: the file's lock is taken), or it ended
    /// `OK` less than [`FRESH`] ago. Pure.
    pub fn trusted(&self, held: bool, now: u64) -> bool {
        match self.ended {
            None => held,
            // An end in the future (this host's clock was set back) dates nothing.
            Some(Ended { at, ok }) => {
                ok && at <= now.saturating_add(1) && now < at.saturating_add(FRESH.as_secs())
            }
        }
    }

    /// Whether a reader removes this record at `now`, none holding it: its task ended, or its
    /// file was written (`written`), more than [`KEPT`] ago. Pure.
    pub fn stale(&self, written: u64, now: u64) -> bool {
        let since = self.ended.map_or(written, |ended| ended.at);
        since > now.saturating_add(1) || now > since.saturating_add(KEPT.as_secs())
    }

    /// Whether this record can name a VM the cluster listing shows so, `holder` the type of
    /// the task that the VM's lock says holds it (`qmcreate` for `lock: create`, `qmclone`
    /// for `lock: clone`, [`crate::api::cluster::ListedVm::holder`]): a held VM only while
    /// the recorded task, of that type, runs (a create or clone that ended, or one of the
    /// other type, cannot be the one holding it: another took the id). A running record fits
    /// a VM nothing holds too: its task may have ended a moment before its run's next look
    /// marks the record. Pure.
    pub fn fits(&self, holder: Option<&str>) -> bool {
        match holder {
            None => true,
            Some(task_type) => self.ended.is_none() && self.task_type == task_type,
        }
    }
}

/// One endpoint's roster.
#[derive(Debug)]
pub struct Roster {
    dir: PathBuf,
}

/// This run's record of a VM it is making; its file's lock is held while this lives.
#[derive(Debug)]
pub struct Entered {
    dir: PathBuf,
    path: PathBuf,
    made: Made,
    _held: File,
}

/// The epoch seconds of this host's clock now.
fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// A file name no other record has: this process's id and a count of its own.
fn unique(kind: &str) -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    format!(
        "{kind}{}-{nanos}-{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Writes `made` to a new file in `dir` and returns it locked, under its final `path`: the
/// record shows whole or not at all (written under a hidden name, then renamed), and locked
/// from the moment it shows.
fn publish(dir: &Path, path: &Path, made: &Made) -> std::io::Result<File> {
    let hidden = dir.join(format!(".{}.tmp", unique("")));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&hidden)?;
    let written = serde_json::to_vec(made)
        .map_err(std::io::Error::other)
        .and_then(|bytes| file.write_all(&bytes))
        .and_then(|()| file.lock())
        .and_then(|()| std::fs::rename(&hidden, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&hidden);
        return Err(e);
    }
    Ok(file)
}

impl Roster {
    /// The roster of `host:port`, in the folder its gate uses (made where missing), under the
    /// first of `roots` where it can be made and trusted; `Err` saying why none.
    pub(super) fn open(roots: &[Root], host: &str, port: u16) -> Result<Roster, String> {
        let endpoint = endpoint_dir(roots, host, port)?;
        Ok(Roster {
            dir: subfolder(&endpoint, "made")?,
        })
    }

    /// A roster in `dir` as it is (tests).
    #[cfg(test)]
    fn at(dir: PathBuf) -> Roster {
        Roster { dir }
    }

    /// Records that this run is making VM `vmid` on `node` named `name` by task `upid` (PVE
    /// accepted the request); `None` where the record cannot be written (then other runs do
    /// without it).
    pub fn enter(
        &self,
        vmid: u32,
        node: &str,
        name: &str,
        upid: &str,
        task_type: &str,
    ) -> Option<Entered> {
        let made = Made {
            vmid,
            node: node.to_string(),
            name: name.to_string(),
            upid: upid.to_string(),
            task_type: task_type.to_string(),
            ended: None,
        };
        let path = self.dir.join(format!("{}.json", unique("")));
        let held = publish(&self.dir, &path, &made).ok()?;
        Some(Entered {
            dir: self.dir.clone(),
            path,
            made,
            _held: held,
        })
    }

    /// The records whose names a run takes now ([`Made::trusted`]); the stale ones are
    /// removed on the way.
    pub fn made(&self) -> Vec<Made> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let now = now();
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if !entry.file_type().is_ok_and(|kind| kind.is_file()) {
                continue;
            }
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') && name.ends_with(".tmp") {
                // A run killed while it wrote its record leaves its hidden file behind.
                let written = modified(&path);
                if now > written.saturating_add(KEPT.as_secs()) {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            let Some((made, held, written)) = read_record(&path) else {
                continue;
            };
            if made.trusted(held, now) {
                out.push(made);
            } else if !held && made.stale(written, now) {
                let _ = std::fs::remove_file(&path);
            }
        }
        out
    }
}

impl Roster {
    /// Removes every record of VM `vmid`, on any node (its destroy or a rename was asked
    /// for: its id may be taken by another VM at once, its name is no longer the record's).
    pub fn forget(&self, vmid: u32) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !entry.file_type().is_ok_and(|kind| kind.is_file())
                || name.starts_with('.')
                || !name.ends_with(".json")
            {
                continue;
            }
            if let Some((made, _, _)) = read_record(&path)
                && made.vmid == vmid
            {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

/// A record file: what it says, whether a live run holds it, and when it was written (epoch
/// seconds); `None` where it cannot be opened, read or parsed.
fn read_record(path: &Path) -> Option<(Made, bool, u64)> {
    // Never through a link, and never blocked on a FIFO put there.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MOST_BYTES {
        return None;
    }
    let held = match file.try_lock_shared() {
        Ok(()) => false,
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Error(_)) => return None,
    };
    let mut text = String::new();
    (&file).take(MOST_BYTES).read_to_string(&mut text).ok()?;
    let made = serde_json::from_str::<Made>(&text).ok()?;
    let written = meta
        .modified()
        .ok()
        .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |since| since.as_secs());
    Some((made, held, written))
}

/// When the file at `path` was last written (epoch seconds; 0 where unknown).
fn modified(path: &Path) -> u64 {
    std::fs::symlink_metadata(path)
        .and_then(|meta| meta.modified())
        .ok()
        .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |since| since.as_secs())
}

impl Entered {
    /// Marks the task ended: `ok`, the record is kept (its name is taken for [`FRESH`]);
    /// failed, it is removed (PVE's worker removed the VM). `ok: false` is never written.
    pub fn ended(self, ok: bool) {
        if !ok {
            let _ = std::fs::remove_file(&self.path);
            return;
        }
        // Forgotten meanwhile (a rename or destroy of the VM by another run): no record of it
        // comes back.
        if self._held.metadata().is_ok_and(|meta| meta.nlink() == 0) {
            return;
        }
        let made = Made {
            ended: Some(Ended { at: now(), ok }),
            ..self.made.clone()
        };
        if publish(&self.dir, &self.path, &made).is_err() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::AtomicUsize;

    fn scratch(name: &str) -> PathBuf {
        static SERIAL: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sankofa-roster-{name}-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    fn record(ended: Option<Ended>) -> Made {
        Made {
            vmid: 100,
            node: "pve1".into(),
            name: "web".into(),
            upid: "UPID:pve1:1:2:3:qmcreate:100:root@pam:".into(),
            task_type: "qmcreate".into(),
            ended,
        }
    }

    #[test]
    fn a_record_is_taken_while_its_run_holds_it_or_shortly_after_its_create_ended_ok() {
        let running = record(None);
        assert!(running.trusted(true, 1_000));
        assert!(
            !running.trusted(false, 1_000),
            "a run that ended while its create ran was interrupted: its VM is not known"
        );
        let ok = record(Some(Ended {
            at: 1_000,
            ok: true,
        }));
        assert!(ok.trusted(false, 1_000 + FRESH.as_secs() - 1));
        assert!(!ok.trusted(false, 1_000 + FRESH.as_secs()));
        let failed = record(Some(Ended {
            at: 1_000,
            ok: false,
        }));
        assert!(!failed.trusted(true, 1_000));
    }

    #[test]
    fn a_record_names_only_a_vm_listed_as_its_task_leaves_it() {
        let running = record(None);
        assert!(
            running.fits(Some("qmcreate")),
            "a create running holds its VM under lock: create"
        );
        assert!(
            running.fits(None),
            "a create that ended a moment before its run looked again no longer holds it"
        );
        assert!(
            !running.fits(Some("qmclone")),
            "a VM locked `clone` is a clone's, not the recorded create's"
        );
        let ended = record(Some(Ended {
            at: 1_000,
            ok: true,
        }));
        assert!(ended.fits(None));
        assert!(
            !ended.fits(Some("qmcreate")),
            "a create under way on the id is another's: the recorded one ended"
        );
        let clone = Made {
            task_type: "qmclone".into(),
            ..record(None)
        };
        assert!(
            clone.fits(Some("qmclone")),
            "a clone running holds its VM under lock: clone"
        );
        assert!(clone.fits(None));
        assert!(
            !clone.fits(Some("qmcreate")),
            "a clone's VM is locked `clone`, not `create`"
        );
    }

    #[test]
    fn an_end_dated_in_the_future_is_not_taken_and_is_removed() {
        let ahead = record(Some(Ended {
            at: 5_000,
            ok: true,
        }));
        assert!(!ahead.trusted(false, 1_000));
        assert!(ahead.stale(0, 1_000));
        assert!(
            ahead.trusted(false, 4_999),
            "a second of rounding is allowed"
        );
    }

    #[test]
    fn a_record_no_run_holds_is_removed_once_older_than_kept() {
        let ended = record(Some(Ended {
            at: 1_000,
            ok: true,
        }));
        assert!(!ended.stale(0, 1_000 + KEPT.as_secs()));
        assert!(ended.stale(0, 1_001 + KEPT.as_secs()));
        assert!(record(None).stale(1_000, 1_001 + KEPT.as_secs()));
        assert!(!record(None).stale(1_000, 1_000 + KEPT.as_secs()));
    }

    #[test]
    fn a_run_reads_the_records_of_live_runs_and_of_creates_that_ended_ok() {
        let dir = scratch("live");
        let roster = Roster::at(dir.clone());
        let running = roster
            .enter(100, "pve1", "web", "UPID:a", "qmcreate")
            .unwrap();
        let done = roster
            .enter(101, "pve2", "db", "UPID:b", "qmclone")
            .unwrap();
        done.ended(true);
        let failed = roster
            .enter(102, "pve3", "gone", "UPID:c", "qmcreate")
            .unwrap();
        failed.ended(false);
        let mut made = roster.made();
        made.sort_by_key(|made| made.vmid);
        let seen: Vec<(u32, &str, bool)> = made
            .iter()
            .map(|made| (made.vmid, made.name.as_str(), made.ended.is_some()))
            .collect();
        assert_eq!(seen, vec![(100, "web", false), (101, "db", true)]);
        // The run making VM 100 ends without marking it (interrupted): its record is not
        // taken any more.
        drop(running);
        let vmids: Vec<u32> = roster.made().iter().map(|made| made.vmid).collect();
        assert_eq!(vmids, vec![101]);
        // VM 101 is destroyed or renamed: its record goes, on whichever node.
        roster.forget(101);
        assert!(roster.made().is_empty());
        // A record forgotten while its create ran does not come back when it ends.
        let renamed = roster
            .enter(103, "pve1", "old", "UPID:d", "qmcreate")
            .unwrap();
        roster.forget(103);
        renamed.ended(true);
        assert!(roster.made().is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_record_that_cannot_be_read_is_ignored_and_a_stale_one_removed() {
        let dir = scratch("garbage");
        std::fs::write(dir.join("junk.json"), "{not json").unwrap();
        std::fs::write(dir.join("big.json"), vec![b' '; 10_000]).unwrap();
        std::fs::write(dir.join(".hidden.tmp"), "{}").unwrap();
        let old = record(Some(Ended { at: 5, ok: true }));
        std::fs::write(dir.join("old.json"), serde_json::to_vec(&old).unwrap()).unwrap();
        let fifo = dir.join("fifo.json");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink(dir.join("old.json"), dir.join("link.json")).unwrap();
        let roster = Roster::at(dir.clone());
        assert!(roster.made().is_empty());
        roster.forget(100);
        assert!(!dir.join("old.json").exists(), "a stale record is removed");
        assert!(fifo.exists() && dir.join(".hidden.tmp").exists());
        assert!(
            dir.join("junk.json").exists(),
            "what is not a record is left alone"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_record_in_a_folder_of_its_own_is_made_under_the_gate_folder() {
        let home = scratch("home");
        let roots = vec![Root {
            anchor: home.clone(),
            below: vec![".ansible", "sankofa-proxmox", "gates"],
        }];
        let roster = Roster::open(&roots, "PVE.example", 8006).unwrap();
        assert!(roster.dir.ends_with("made"));
        let mode = std::fs::metadata(&roster.dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let _ = std::fs::remove_dir_all(home);
    }
}
