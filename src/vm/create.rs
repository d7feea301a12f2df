//! Making a new VM, by a create or a clone, through one id-allocation loop: the given vmid
//! or the next free one (another when a parallel run took it first), the request dispatched
//! once, its task waited on, and a name race with a parallel run resolved (see
//! [`Runner::claim_name`]).
//!
//! A create or a clone is sent at most once per run (`qemu::create`, `qemu::clone`, through
//! `ops::dispatch_once`): after a lost answer the run only looks for its task, and
//! recognises it by what PVE records (`made::MadeBefore`: for a clone, the new `qmclone` of
//! this user whose log names the new vmid), never by a clock; so a lost answer never makes
//! the id loop clone to the next free id. A VM that PVE says exists and that its record does
//! not prove this run's is someone else's: the run fails naming who made it and when, and
//! writes nothing to it.

use anyhow::{Context, anyhow};

use super::desired::CloneSource;
use super::shell::{Done, Poll, Runner};
use crate::pve::api::made::{Looking, MadeBefore, Maker};
use crate::pve::api::named::{self, OwnVm};
use crate::pve::api::qemu::{self, CloneRequest, Vm};
use crate::pve::api::{Dispatched, cluster};
use crate::pve::error::{ApiError, task_found_vmid_taken, task_met_storage_lock};
use crate::pve::retry::{Awaiting, Step, until};

/// The longest a claim waits for the API node's clock to pass its VM's ctime second: the
/// second itself, and a little for the nodes' clocks to differ.
const CLOCK_WAIT_MOST: std::time::Duration = std::time::Duration::from_millis(1500);

/// What a claim waits beyond the API node's clock passing its VM's ctime second: for the
/// clock of the node where a later create runs to pass it too.
const CLOCK_MARGIN: std::time::Duration = std::time::Duration::from_millis(250);

/// How a new VM is made.
enum Making<'p> {
    /// A create with this config (imports included), in `pool` if given.
    Create {
        config: &'p [(String, String)],
        pool: Option<&'p str>,
    },
    /// A clone of VM `src` on `src_node`.
    Clone {
        source: &'p CloneSource,
        src: u32,
        src_node: String,
        is_template: bool,
    },
}

impl Runner<'_> {
    /// Creates the VM on `node` from the planned config (a `qmcreate` task).
    pub(super) fn create(
        &mut self,
        node: &str,
        config: &[(String, String)],
        pool: Option<&str>,
    ) -> anyhow::Result<Done> {
        let config = self.config_with_ha(config)?;
        let making = Making::Create {
            config: &config,
            pool,
        };
        self.make(node, &making)
            .map_err(|e| self.explain_beyond_version(e))
    }

    /// Clones the source into a new VM on `node` (a `qmclone` task; without `node`, on the
    /// source's node).
    pub(super) fn clone_vm(&mut self, node: &str, source: &CloneSource) -> anyhow::Result<Done> {
        let (src, src_node, is_template) = self.clone_source(source)?;
        let node = if node.is_empty() {
            src_node.clone()
        } else {
            node.to_string()
        };
        self.make(
            &node,
            &Making::Clone {
                source,
                src,
                src_node,
                is_template,
            },
        )
    }

    /// Sends the request that makes VM `vmid` on `node`; returns what it is doing, the
    /// result, and what PVE listed of the tasks that make it before it was sent (or what
    /// failed while listing them, before anything was sent).
    fn send_making(
        &self,
        making: &Making,
        vmid: u32,
        node: &str,
    ) -> (
        String,
        Result<Dispatched, ApiError>,
        Result<MadeBefore, String>,
    ) {
        let client = &self.session.client;
        let new = Vm::new(node, vmid);
        let (what, maker) = match making {
            Making::Create { .. } => (format!("creating VM {vmid} on {node}"), Maker::Create),
            Making::Clone { src, src_node, .. } => (
                format!("cloning VM {src} on {src_node} to VM {vmid}"),
                Maker::Clone {
                    source: Vm::new(src_node, *src),
                },
            ),
        };
        // What PVE lists before the request: a task not in it can only be newer.
        let before = match MadeBefore::list(client, &new, maker) {
            Ok(before) => before,
            Err(e) => {
                let listing = match making {
                    Making::Create { .. } => format!(
                        "listing the tasks of VM {vmid} on {node} before sending the create"
                    ),
                    Making::Clone { src, src_node, .. } => format!(
                        "listing the clone tasks of VM {src} on {src_node} before sending the clone"
                    ),
                };
                return (what, Err(e), Err(listing));
            }
        };
        let mut looking = Looking::default();
        let look = || before.look(client, &mut looking);
        let result = match making {
            Making::Create { config, pool } => qemu::create(client, &new, config, *pool, look),
            Making::Clone {
                source,
                src,
                src_node,
                is_template,
            } => {
                let request = CloneRequest {
                    newid: vmid,
                    name: self.desired.name.as_deref(),
                    target: (node != src_node).then_some(node),
                    full: source.full,
                    source_is_template: *is_template,
                    storage: source.storage.as_deref(),
                    snapname: source.snapname.as_deref(),
                    pool: self.desired.pool.as_deref(),
                };
                qemu::clone(client, &Vm::new(src_node, *src), &request, look)
            }
        };
        (what, result, Ok(before))
    }

    /// The one id-allocation loop of a create and a clone.
    fn make(&mut self, node: &str, making: &Making) -> anyhow::Result<Done> {
        let tried = until(
            &self.budget(),
            Awaiting::FreeVmid,
            |attempt| -> Poll<Done> {
                let vmid = match self.desired.vmid {
                    Some(given) => given,
                    None => self.next_id(attempt)?,
                };
                let (what, result, before) = self.send_making(making, vmid, node);
                let result = match (result, before) {
                    (Err(e), Err(listing)) => {
                        return Err(anyhow::Error::new(e).context(listing).context(what));
                    }
                    // PVE says the given vmid is taken: this run's VM only if PVE's record proves
                    // it (a request refused before it acted, sent again, may meet the first one);
                    // else someone else's (made between the run's look and its request), and
                    // nothing is written to it.
                    (Err(e), Ok(before))
                        if e.is_already_exists() && self.desired.vmid.is_some() =>
                    {
                        let progress = match making {
                            Making::Create { config, .. } => qemu::imports(config),
                            // A full clone copies every disk (PVE's default from a plain VM).
                            Making::Clone {
                                source,
                                is_template,
                                ..
                            } => source.full.unwrap_or(!is_template),
                        };
                        match before.own_task(&self.session.client, progress) {
                            Ok(Some(task)) => Ok(Dispatched::Task(task)),
                            _ => {
                                return Err(anyhow!(
                                    "{what}: PVE answered {e}: {}; nothing was written to it. \
                                 Give another vmid, or run again to converge the VM that is there",
                                    before.made_by(&self.session.client)
                                ));
                            }
                        }
                    }
                    (result, _) => result,
                };
                match result {
                    Ok(Dispatched::Task(task)) => {
                        let mark = self.changes.accepted();
                        // PVE accepted it: this controller's other runs learn the new VM's name
                        // from the roster while it has none of its own to show.
                        let record = self.enter_roster(vmid, node, &task);
                        let waited = self.wait_task(&task, &what);
                        if let Some(record) = record {
                            match &waited {
                                Ok(()) => record.ended(true),
                                Err(failed) if failed.exitstatus.is_some() => record.ended(false),
                                // Still running at the deadline: the record is left to lapse
                                // with this run (a later run waits for the create as for any
                                // other it does not know).
                                Err(_) => drop(record),
                            }
                        }
                        match waited {
                            Ok(()) => {}
                            Err(failed)
                                if matches!(making, Making::Clone { .. })
                                    && self.desired.vmid.is_none()
                                    && failed
                                        .exitstatus
                                        .as_deref()
                                        .is_some_and(task_found_vmid_taken) =>
                            {
                                self.changes.undo(mark);
                                return Ok(Step::Again(no_free_vmid(&failed.message)));
                            }
                            // The shared storage's cluster lock stayed taken past PVE's 10 s
                            // (cfs_lock_storage, under which the volume is allocated): the worker
                            // removed what it made, so the request is sent again, spaced out as a
                            // file lock's refusal is, within the deadline.
                            Err(failed)
                                if failed
                                    .exitstatus
                                    .as_deref()
                                    .is_some_and(task_met_storage_lock)
                                    && !self.session.budget.spent()
                                    && self.left_nothing(making, vmid, node) =>
                            {
                                self.changes.undo(mark);
                                return Ok(Step::AgainAs(Awaiting::Transient, Err(failed.into())));
                            }
                            Err(failed) => {
                                // A failed or stopped create or clone removes what it made: then
                                // nothing changed. One still running (timeout) did change things.
                                if self.left_nothing(making, vmid, node) {
                                    self.changes.undo(mark);
                                }
                                return Err(failed.into());
                            }
                        }
                        if self.desired.vmid.is_none() && self.desired.name.is_some() {
                            return Ok(Step::Done(self.claim_name(vmid, node)));
                        }
                        Ok(Step::Done(Ok(Done::Vm(vmid, node.to_string()))))
                    }
                    Ok(Dispatched::Done) => {
                        let _ = self.changes.accepted();
                        Ok(Step::Done(Ok(Done::Vm(vmid, node.to_string()))))
                    }
                    // The id was taken between `nextid` and the request: another one.
                    Err(e) if e.is_already_exists() && self.desired.vmid.is_none() => {
                        Ok(Step::Again(no_free_vmid(&format!("{what}: {e}"))))
                    }
                    Err(e) => Err(anyhow::Error::new(e).context(what)),
                }
            },
        );
        let doing = match making {
            Making::Create { .. } => "creating the VM",
            Making::Clone { .. } => "cloning the VM",
        };
        self.ended(tried, doing)
    }

    /// Records the VM this run is making in the controller's roster ([`crate::pve::client::Roster`]),
    /// by the name it is made with; none without a name, or where the roster cannot be
    /// written.
    fn enter_roster(
        &self,
        vmid: u32,
        node: &str,
        task: &crate::pve::api::Task,
    ) -> Option<crate::pve::client::Entered> {
        let name = self.desired.name.as_deref()?;
        self.session.client.roster()?.enter(
            vmid,
            node,
            name,
            &task.upid.to_string(),
            &task.upid.task_type,
        )
    }

    /// Whether a create or clone that failed left nothing behind (its worker removed what it
    /// made).
    fn left_nothing(&self, making: &Making, vmid: u32, node: &str) -> bool {
        match making {
            Making::Create { .. } => matches!(self.find(), Ok(None)),
            Making::Clone { .. } => self.config_of(vmid, node).ok().flatten().is_none(),
        }
    }

    /// A free vmid for the new VM: for a VM with a name, one spread above the lowest free one
    /// by the VM's name, within datacenter.cfg's `next-id` range
    /// ([`cluster::spread_vmid_within`]), so that the runs of a fleet, which all see the same
    /// lowest free id (`nextid` reserves nothing) and cannot see each other's creates when
    /// they start at once, rarely send their creates to one id; without a name, the lowest
    /// free one (`/cluster/nextid`, which keeps to the range). The range is read from
    /// `/cluster/options` (PVE shows it only to a caller with `Sys.Audit` on `/`, and root@pam
    /// sees every key); then the lowest free id is the range's lowest that the listing's guests do not have, as `nextid` would answer, and
    /// the create itself confirms it (a guest the user cannot see makes it fail as taken,
    /// and the next try asks `nextid`). Without the range shown, `nextid`'s id as it is.
    /// A try after a collision lists the cluster's guests again first.
    fn next_id(&self, attempt: u32) -> anyhow::Result<u32> {
        let client = &self.session.client;
        let Some(name) = self.desired.name.as_deref() else {
            return cluster::next_vmid(client).context("asking PVE for a free vmid");
        };
        if attempt > 1 || self.listed_ids.borrow().is_none() {
            self.listing()?;
        }
        let taken = self.listed_ids.borrow().clone().unwrap_or_default();
        let range = match cluster::next_id_range(client) {
            Ok(Some(range)) => Some(range),
            // root@pam is shown the whole of datacenter.cfg: no `next-id` there is PVE's
            // default range.
            Ok(None) if client.user() == "root@pam" => Some(cluster::NextIdRange::default()),
            // Not shown (no `Sys.Audit` on `/`), or the read failed: `nextid`, which keeps to
            // the range whoever asks, gives the lowest free id, and it is taken as it is (a
            // spread above it could pass the range's upper end, which is not known; PVE
            // checks no range for a given vmid, `nextid?vmid=` included).
            _ => None,
        };
        let listed_lowest = range
            .filter(|_| attempt == 1)
            .and_then(|range| range.lowest_free(&taken));
        let lowest = match listed_lowest {
            Some(lowest) => lowest,
            None => cluster::next_vmid(client).context("asking PVE for a free vmid")?,
        };
        Ok(match range {
            Some(range) => cluster::spread_vmid_within(lowest, &taken, name, attempt - 1, range),
            None => lowest,
        })
    }

    /// After a create by name alone, makes sure the name is carried by one VM. PVE has no
    /// unique names, so two runs (or a run whose create answer was lost and that tried again)
    /// can each create one. The VM that carries the name and was created first (`meta:
    /// ctime`, then the lower vmid) is kept; a run whose VM lost removes it and converges the
    /// winner. Creates still running for this user are waited for first: their config shows
    /// the name only at their end (qemu-server Qemu.pm create_vm writes it last).
    fn claim_name(&mut self, vmid: u32, node: &str) -> anyhow::Result<Done> {
        let name = self.desired.name.clone().unwrap_or_default();
        let own = self.config_of(vmid, node)?;
        // Without a ctime, every create in flight is waited for.
        let own_ctime = own
            .as_ref()
            .and_then(|config| config.ctime())
            .unwrap_or(u64::MAX);
        let own_vm = OwnVm {
            ctime: own_ctime,
            vmid,
        };
        // Only a create that may win the name can matter: one that started in a later second,
        // or in the same second for a higher vmid, loses to this VM, and its own run removes
        // it. The names are read once those that may win have ended.
        //
        // The look below sees every create that started before it; one that starts after it
        // must lose to this VM, so it must start in a later second than this VM's ctime (in
        // the same second, a lower vmid would win, and both runs would keep their VM). The
        // look is therefore made once the API node's clock has passed that second, and
        // [`CLOCK_MARGIN`] more for the nodes' clocks to differ (PVE's NTP keeps them within
        // milliseconds): up to 1.25 s after a quick create, no wait after one that took
        // longer; without a `Date` to tell, that much. A node far ahead is waited for at most
        // [`CLOCK_WAIT_MOST`]. A clone keeps its template's ctime, so this does not order a
        // clone that starts after the look: see the README's known limits.
        if own_ctime != u64::MAX {
            let passed = std::time::Duration::from_secs(own_ctime.saturating_add(1)) + CLOCK_MARGIN;
            let wait = self
                .session
                .client
                .until_server_reaches(passed)
                .unwrap_or(std::time::Duration::from_secs(1) + CLOCK_MARGIN);
            self.budget()
                .pause(wait.min(CLOCK_WAIT_MOST))
                .map_err(|signal| {
                    self.interrupted(
                        signal,
                        &format!("waiting for the second VM {vmid} was created in to pass"),
                    )
                })?;
        }
        let mut listed = self.listing_by_name(&name)?;
        let others = super::find::creates_in_flight(&listed, Some(vmid));
        // The names read before the create, and this VM's own, are known: only the VMs that
        // came since are confirmed on their nodes, but for those the cluster's recent tasks
        // show losing to this VM (a name of theirs does not matter).
        let mut known = self.confirmed_names.borrow().clone();
        known.insert(
            vmid,
            own.as_ref()
                .and_then(|config| config.name())
                .unwrap_or_default()
                .to_string(),
        );
        if !others.is_empty() {
            let clones = super::find::clones_in_flight(&listed);
            let awaited = self.await_creates(&name, &others, &clones, Some(own_vm))?;
            listed = super::find::ended_creates(listed, &awaited.ended);
            for later in awaited.created_after {
                known.entry(later).or_default();
            }
        } else if named::nodes_to_confirm(&listed, &known).len() > 1 {
            // One read of the cluster's recent tasks may spare several nodes' lists; should it
            // fail, the nodes' lists tell.
            if let Ok(recent) = named::recent_tasks(&self.session.client) {
                for later in named::outrun_by(&recent, own_vm) {
                    known.entry(later).or_default();
                }
            }
        }
        let named = named::named_knowing(&self.session.client, &name, listed, &known)?;
        let mut carriers: Vec<(u64, u32, String)> = Vec::new();
        for (id, on) in named.carriers {
            let ctime = if id == vmid {
                own_ctime
            } else {
                self.config_of(id, &on)?
                    .and_then(|config| config.ctime())
                    .unwrap_or(u64::MAX)
            };
            carriers.push((ctime, id, on));
        }
        // The converge reads this VM next: its config is the one just read. A parallel run
        // that converged it meanwhile changed its digest, and PVE refuses an update made on
        // the old one (the converge then reads it again).
        if let Some(config) = own {
            self.prefetched
                .replace(Some((vmid, node.to_string(), config)));
        }
        let Some((win, win_node)) = super::find::name_keeper(&carriers) else {
            return Ok(Done::Vm(vmid, node.to_string()));
        };
        if win == vmid {
            return Ok(Done::Vm(vmid, node.to_string()));
        }
        // A parallel run of this user is converging the same VM; another user's VM is not
        // this run's, and nothing is written to it.
        if let Some(made) = qemu::creator(&self.session.client, &Vm::new(&win_node, win))
            && made.user != self.session.client.user()
        {
            let what = format!(
                "removing VM {vmid} on {node}, which this run created: VM {win} on {win_node}, another user's, carries the name '{name}' too and was created first"
            );
            match qemu::destroy(&self.session.client, &Vm::new(node, vmid), true) {
                Ok(Dispatched::Task(task)) => self.wait(&task, &what)?,
                Ok(Dispatched::Done) => {}
                Err(e) => return Err(anyhow::Error::new(e).context(what)),
            }
            return Err(anyhow!(
                "VM {win} on {win_node} carries the name '{name}' too and was created first, by {} at {} \
                 (the node's clock; task {made}), between this run's look and its create: it is not this \
                 run's VM, and nothing was written to it. VM {vmid}, which this run created with that name, \
                 was removed so that one VM carries it; give another name, or run again to converge VM {win}",
                made.user,
                crate::pve::upid::utc(made.starttime)
            ));
        }
        let what = format!(
            "removing VM {vmid} on {node}, which this run created: VM {win} on {win_node} carries the name '{name}' too and was created first (a parallel run)"
        );
        match qemu::destroy(&self.session.client, &Vm::new(node, vmid), true) {
            Ok(Dispatched::Task(task)) => self.wait(&task, &what)?,
            Ok(Dispatched::Done) => {}
            Err(e) => return Err(anyhow::Error::new(e).context(what)),
        }
        self.session.log.warnings.push(format!(
            "VM {win} on {win_node} and VM {vmid} were created with the name '{name}' at the same time; VM {vmid} (this run's) was removed and VM {win} is the one converged"
        ));
        Ok(Done::Vm(win, win_node))
    }
}

/// The error that ends the search for a free vmid (a parallel run took each one `nextid`
/// gave) at the run's timeout; between two tries, a short, jittered pause
/// ([`Awaiting::FreeVmid`]), so runs that collided do not collide again.
fn no_free_vmid(what: &str) -> anyhow::Result<Done> {
    Err(anyhow!("{what} (no free vmid found before the timeout)"))
}
