//! Which task made a new VM, by PVE's record: what a create or a clone needs so that it is
//! sent at most once ([`ops::dispatch_once`]) and, after a lost answer, only looked for.
//!
//! Before the request is sent, [`MadeBefore::list`] reads the tasks of its type that PVE
//! lists where the run's own task will appear. The run's task is then the one PVE lists
//! afterwards that is not among them, on that node, for that id, by the run's user; a clone
//! also has its task log name the new id. So a task is recognised by what PVE records, never
//! by comparing clocks (the node's may differ from this machine's), and never is another
//! user's task, or an earlier run's, taken for this run's.
//!
//! * A create (`qmcreate`, qemu-server API2/Qemu.pm create_vm) is listed on the new VM's node
//!   under the new vmid: the new task there is the run's.
//! * A clone (`qmclone`, API2/Qemu.pm clone_vm) is listed on the source's node under the
//!   source's vmid (`fork_worker('qmclone', $vmid, …)`), which parallel clones of one template
//!   share. Its worker's first line of its own is `creating a clone of VM $vmid with ID
//!   $newid`, printed in `$clonefn` under the new id's config lock, after `$load_and_check`
//!   found no config of the new id and before the temporary config (`lock: clone`) is
//!   written: of the tasks that got that far, only one names a given new id at a time, and a
//!   task that ended without the line made nothing.

use std::time::{Duration, Instant};

use super::qemu::{Vm, config};
use super::{Task, TaskType, tasks};
use crate::client::Client;
use crate::error::ApiError;
use crate::ops;
use crate::upid::{self, Upid};

/// What makes the new VM, and so which of PVE's tasks is the run's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Maker {
    /// `POST /nodes/{node}/qemu`: a `qmcreate` of the new vmid on the new VM's node.
    Create,
    /// `POST …/{vmid}/clone` of `source`: a `qmclone` of the source's vmid on the source's
    /// node whose log names the new vmid.
    Clone { source: Vm },
}

/// The tasks PVE listed just before this run sent its create or clone of a VM (see the
/// module documentation).
pub struct MadeBefore {
    new: Vm,
    maker: Maker,
    upids: Vec<String>,
}

/// How long PVE's record may show nothing of a create or clone whose answer was lost before
/// the run concludes PVE never got it: qemu-server forks the task before it answers (a create
/// writes its config, `lock: create`, before that), so once PVE answers again, this long with
/// neither the task nor the VM is an answer.
const LOOK_GRACE: Duration = Duration::from_secs(10);

/// How many lines of a clone's log are read for the line naming its new id: it comes first,
/// after at most the lock waits' `trying to acquire lock...` (pve-common Tools.pm,
/// lock_file_full).
const CLONE_LOG_LINES: u64 = 20;

/// How many clone tasks of other runs are read, newest first, to name who made a VM.
const CLONES_READ_FOR_MAKER: usize = 10;

/// The new vmid a `qmclone` task's log names for `source`: the id in its worker's line
/// `creating a clone of VM {source} with ID {newid}` (qemu-server API2/Qemu.pm clone_vm,
/// `$clonefn`), the first such line of `lines`.
pub fn clone_names(lines: &[String], source: u32) -> Option<u32> {
    let prefix = format!("creating a clone of VM {source} with ID ");
    lines
        .iter()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|id| id.parse().ok())
}

/// What one of this run's candidate clone tasks is known to be, once it is settled.
#[derive(Clone, Debug)]
enum Settled {
    /// Its log names this new vmid.
    Names(u32),
    /// It ended before naming one (it made nothing), with this exit status.
    EndedUnnamed(String),
}

/// What a look at PVE's record found of the run's task.
enum Own {
    Found(Upid),
    /// A candidate clone has not named its new id yet (why).
    Pending(String),
    /// More than one candidate clone names the new id: which is the run's cannot be told.
    Ambiguous(Vec<Upid>),
    /// None; clone candidates that ended without naming an id.
    None(Vec<(Upid, String)>),
}

/// What the looks after a lost answer remember between them.
#[derive(Default)]
pub struct Looking {
    /// Since when PVE answered without showing the run's task.
    quiet_since: Option<Instant>,
    /// Candidate clones whose log or end has settled what they are, by UPID.
    settled: Vec<(String, Settled)>,
}

impl MadeBefore {
    /// Lists them (a read): for a create, the `qmcreate` tasks of `new`; for a clone, the
    /// `qmclone` tasks of its source.
    pub fn list(client: &Client, new: &Vm, maker: Maker) -> Result<MadeBefore, ApiError> {
        let mut before = MadeBefore {
            new: new.clone(),
            maker,
            upids: Vec::new(),
        };
        before.upids = before
            .listed(client)?
            .into_iter()
            .map(|upid| upid.text)
            .collect();
        Ok(before)
    }

    fn task_type(&self) -> TaskType {
        match self.maker {
            Maker::Create => TaskType::Create,
            Maker::Clone { .. } => TaskType::Clone,
        }
    }

    /// The VM whose tasks the run's task is listed with: its node and the UPID's id.
    fn listed_under(&self) -> &Vm {
        match &self.maker {
            Maker::Create => &self.new,
            Maker::Clone { source } => source,
        }
    }

    /// The tasks of the run's task's type PVE lists where the run's task appears, newest
    /// first (a read).
    fn listed(&self, client: &Client) -> Result<Vec<Upid>, ApiError> {
        let under = self.listed_under();
        tasks::of_vm(client, &under.node, under.vmid, self.task_type())
    }

    /// Whether `upid` may be the run's task by its UPID alone: of the task type, on the node
    /// and with the id the run's task is listed under, by `user`, and not listed before the
    /// request was sent. A create's is then the run's; a clone's must also name the new id.
    fn is_candidate(&self, upid: &Upid, user: &str) -> bool {
        let under = self.listed_under();
        upid.node == under.node
            && upid.user == user
            && upid.task_type == self.task_type().as_str()
            && upid.id == under.vmid.to_string()
            && !self.upids.contains(&upid.text)
    }

    /// What one candidate clone is: its status is read before its log, so a task found
    /// stopped whose log has no line naming an id never names one.
    fn settle(&self, client: &Client, upid: &Upid) -> Result<Option<Settled>, ApiError> {
        let source = self.listed_under().vmid;
        let status = tasks::status(client, upid)?;
        let page = tasks::log_page(client, upid, 0, CLONE_LOG_LINES)?;
        let lines: Vec<String> = page.lines.into_iter().map(|line| line.text).collect();
        Ok(match clone_names(&lines, source) {
            Some(newid) => Some(Settled::Names(newid)),
            None if status.stopped() => Some(Settled::EndedUnnamed(status.exit())),
            None => None,
        })
    }

    /// The run's task, by PVE's record (reads).
    fn own(&self, client: &Client, looking: &mut Looking) -> Result<Own, ApiError> {
        let user = client.user();
        let candidates: Vec<Upid> = self
            .listed(client)?
            .into_iter()
            .filter(|upid| self.is_candidate(upid, user))
            .collect();
        if self.maker == Maker::Create {
            return Ok(match candidates.into_iter().next() {
                Some(upid) => Own::Found(upid),
                None => Own::None(Vec::new()),
            });
        }
        let mut naming = Vec::new();
        let mut unnamed = Vec::new();
        let mut pending = None;
        for upid in candidates {
            let known = looking
                .settled
                .iter()
                .find(|(text, _)| *text == upid.text)
                .map(|(_, settled)| settled.clone());
            let settled = match known {
                Some(settled) => settled,
                None => match self.settle(client, &upid)? {
                    Some(settled) => {
                        looking.settled.push((upid.text.clone(), settled.clone()));
                        settled
                    }
                    None => {
                        pending.get_or_insert(upid);
                        continue;
                    }
                },
            };
            match settled {
                Settled::Names(newid) if newid == self.new.vmid => naming.push(upid),
                Settled::Names(_) => {}
                Settled::EndedUnnamed(exit) => unnamed.push((upid, exit)),
            }
        }
        Ok(match (naming.len(), pending) {
            (1, _) => Own::Found(naming.remove(0)),
            (0, Some(upid)) => Own::Pending(format!(
                "task {upid} of {user} cloning VM {} has not named its new ID yet",
                self.listed_under().vmid
            )),
            (0, None) => Own::None(unnamed),
            _ => Own::Ambiguous(naming),
        })
    }

    /// The run's task, with whether its log reports a copy's progress, if PVE lists it (a
    /// read): the task to wait on when PVE answered that the vmid is taken after a request
    /// was sent again (refused before it acted the first time).
    pub fn own_task(
        &self,
        client: &Client,
        reports_progress: bool,
    ) -> Result<Option<Task>, ApiError> {
        Ok(match self.own(client, &mut Looking::default())? {
            Own::Found(upid) => Some(Task {
                upid,
                reports_progress,
            }),
            Own::Pending(_) | Own::Ambiguous(_) | Own::None(_) => None,
        })
    }

    /// Where the new VM's config is, if anywhere PVE shows it (reads): on its node, or, for
    /// a clone to another node, on the source's node (the clone writes it there and moves it
    /// at its end).
    fn config_there(&self, client: &Client) -> Result<Option<Vm>, ApiError> {
        let mut places = vec![self.new.clone()];
        if let Maker::Clone { source } = &self.maker
            && source.node != self.new.node
        {
            places.push(Vm::new(&source.node, self.new.vmid));
        }
        for place in places {
            if config(client, &place)?.is_some() {
                return Ok(Some(place));
            }
        }
        Ok(None)
    }

    /// Who made the new VM and when, by PVE's record, for a message: the newest create of it
    /// that is not the run's, or the newest clone of the source (another's) whose log names
    /// it (its user, and its start on the node's clock); when no such task is visible to
    /// this user, a create's `ctime` PVE wrote into the config (a clone's is the source's:
    /// clone_vm copies `meta`).
    pub fn made_by(&self, client: &Client) -> String {
        let (node, vmid) = (&self.new.node, self.new.vmid);
        let user = client.user();
        let created = tasks::of_vm(client, node, vmid, TaskType::Create)
            .unwrap_or_default()
            .into_iter()
            .filter(|upid| self.maker != Maker::Create || !self.is_candidate(upid, user))
            .max_by_key(|upid| upid.starttime);
        if let Some(upid) = created {
            return format!(
                "VM {vmid} on {node} was created by {} at {} (the node's clock; task {upid}), so it is not this run's VM",
                upid.user,
                upid::utc(upid.starttime),
            );
        }
        if let Maker::Clone { source } = &self.maker
            && let Some(upid) = self.cloned_by_another(client, source)
        {
            return format!(
                "VM {vmid} was cloned from VM {} on {} by {} at {} (the node's clock; task {upid}), so it is not this run's VM",
                source.vmid,
                source.node,
                upid.user,
                upid::utc(upid.starttime),
            );
        }
        let ctime = match self.maker {
            Maker::Create => config(client, &self.new)
                .ok()
                .flatten()
                .and_then(|c| c.ctime()),
            Maker::Clone { .. } => None,
        };
        format!(
            "VM {vmid} on {node} was made{} by another user or run: no task that made it is visible \
             to {user} (other users' tasks need Sys.Audit on /nodes/{node}), so it is not this run's VM",
            ctime
                .map(|t| format!(" at {} (the node's clock, from its config)", upid::utc(t)))
                .unwrap_or_default()
        )
    }

    /// The newest clone of `source` that names the new vmid and is not a candidate for the
    /// run's (another user's, or one listed before the run's clone), among the newest few (a
    /// read of each log; failures count as none).
    fn cloned_by_another(&self, client: &Client, source: &Vm) -> Option<Upid> {
        let user = client.user();
        tasks::of_vm(client, &source.node, source.vmid, TaskType::Clone)
            .ok()?
            .into_iter()
            .filter(|upid| !self.is_candidate(upid, user))
            .take(CLONES_READ_FOR_MAKER)
            .find(|upid| {
                tasks::log_page(client, upid, 0, CLONE_LOG_LINES).is_ok_and(|page| {
                    let lines: Vec<String> = page.lines.into_iter().map(|line| line.text).collect();
                    clone_names(&lines, source.vmid) == Some(self.new.vmid)
                })
            })
    }

    /// What the run was doing, for a message: `creating VM N` or `cloning VM S to ID N`.
    fn making(&self) -> String {
        match &self.maker {
            Maker::Create => format!("creating VM {}", self.new.vmid),
            Maker::Clone { source } => {
                format!("cloning VM {} to ID {}", source.vmid, self.new.vmid)
            }
        }
    }

    /// One look for the run's task after its answer was lost ([`ops::dispatch_once`]): its
    /// task by PVE's record; after [`LOOK_GRACE`] of answers showing neither it nor the VM,
    /// PVE never got the request; a VM there without it is someone else's.
    pub fn look(&self, client: &Client, looking: &mut Looking) -> ops::Look {
        let node = &self.listed_under().node;
        let (vmid, user, making) = (self.new.vmid, client.user(), self.making());
        let unnamed = match self.own(client, looking) {
            Ok(Own::Found(upid)) => return ops::Look::Found(upid),
            Ok(Own::Pending(why)) => return ops::Look::Again(why),
            Ok(Own::Ambiguous(upids)) => {
                let upids: Vec<String> = upids.iter().map(|upid| upid.to_string()).collect();
                return ops::Look::NotDone(format!(
                    "PVE lists {} tasks of {user} {making} since this run's request ({}), and which is \
                     this run's cannot be told; nothing was written to VM {vmid}",
                    upids.len(),
                    upids.join(", ")
                ));
            }
            Ok(Own::None(unnamed)) => unnamed,
            Err(e) => return ops::Look::Again(format!("listing the tasks on {node}: {e}")),
        };
        let since = *looking.quiet_since.get_or_insert_with(Instant::now);
        if since.elapsed() < LOOK_GRACE {
            return ops::Look::Again(format!("{node} lists no task of {user} {making} yet"));
        }
        let ended: String = unnamed
            .iter()
            .map(|(upid, exit)| {
                format!(
                    "; task {upid} of {user} ended ({exit}) before naming the ID it cloned to: if \
                     it was this run's, it made nothing"
                )
            })
            .collect();
        let (verb, again) = match self.maker {
            Maker::Create => ("create", "creates"),
            Maker::Clone { .. } => ("clone", "clones"),
        };
        match self.config_there(client) {
            Ok(None) => ops::Look::NotDone(format!(
                "for {}s after that, PVE showed neither a task of {user} {making} on {node} nor a VM \
                 {vmid}: PVE most likely never got the {verb}, and nothing changed (a re-run {again} \
                 the VM, or finds it if PVE made it after all){ended}",
                LOOK_GRACE.as_secs()
            )),
            Ok(Some(_)) => ops::Look::NotDone(format!(
                "VM {vmid} exists, but PVE lists no task of {user} {making} since this run's {verb}: \
                 {}; nothing was written to it{ended}",
                self.made_by(client)
            )),
            Err(e) => ops::Look::Again(format!("reading the config of VM {vmid}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|line| line.to_string()).collect()
    }

    #[test]
    fn a_clone_log_names_its_new_id_by_qemu_servers_line() {
        let log = lines(&[
            "creating a clone of VM 900 with ID 104",
            "create linked clone of drive scsi0 (local-lvm:base-900-disk-0)",
        ]);
        assert_eq!(clone_names(&log, 900), Some(104));
        // The line of another source names nothing for this one.
        assert_eq!(clone_names(&log, 90), None);
        // The lock waits come first when the locks were taken.
        let waited = lines(&[
            "trying to acquire lock...",
            " OK",
            "creating a clone of VM 900 with ID 2000",
        ]);
        assert_eq!(clone_names(&waited, 900), Some(2000));
        // A worker that died on its locks or its checks names none.
        let died = lines(&[
            "trying to acquire lock...",
            "can't lock file '/var/lock/qemu-server/lock-104.conf' - got timeout",
        ]);
        assert_eq!(clone_names(&died, 900), None);
        assert_eq!(clone_names(&[], 900), None);
        // Only the whole line counts, not text that merely contains it.
        let quoted = lines(&["note: creating a clone of VM 900 with ID 104"]);
        assert_eq!(clone_names(&quoted, 900), None);
        let trailing = lines(&["creating a clone of VM 900 with ID 104 (again)"]);
        assert_eq!(clone_names(&trailing, 900), None);
    }

    fn upid(node: &str, task_type: &str, id: &str, user: &str, start: u64) -> Upid {
        Upid::parse(&format!(
            "UPID:{node}:00001234:00ABCDEF:{start:08X}:{task_type}:{id}:{user}:"
        ))
        .unwrap()
    }

    #[test]
    fn a_candidate_is_a_new_task_of_the_type_id_node_and_user_the_run_makes() {
        let earlier = upid("pve1", "qmclone", "900", "root@pam", 0x68D7_0000);
        let clone = MadeBefore {
            new: Vm::new("pve2", 104),
            maker: Maker::Clone {
                source: Vm::new("pve1", 900),
            },
            upids: vec![earlier.text.clone()],
        };
        let ours = upid("pve1", "qmclone", "900", "root@pam", 0x68D7_0001);
        assert!(clone.is_candidate(&ours, "root@pam"));
        // Listed before the clone was sent: an earlier run's.
        assert!(!clone.is_candidate(&earlier, "root@pam"));
        // Another user's, another source's, the new VM's own id, another node, another type.
        assert!(!clone.is_candidate(&ours, "alice@pve"));
        for other in [
            upid("pve1", "qmclone", "901", "root@pam", 0x68D7_0001),
            upid("pve1", "qmclone", "104", "root@pam", 0x68D7_0001),
            upid("pve2", "qmclone", "900", "root@pam", 0x68D7_0001),
            upid("pve1", "qmcreate", "900", "root@pam", 0x68D7_0001),
        ] {
            assert!(!clone.is_candidate(&other, "root@pam"), "{other}");
        }
        let create = MadeBefore {
            new: Vm::new("pve1", 104),
            maker: Maker::Create,
            upids: Vec::new(),
        };
        assert!(create.is_candidate(
            &upid("pve1", "qmcreate", "104", "root@pam", 0x68D7_0001),
            "root@pam"
        ));
        assert!(!create.is_candidate(&ours, "root@pam"));
    }
}
