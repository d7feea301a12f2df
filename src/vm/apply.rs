//! The imperative shell of the `vm` module: find the VM, wait out whatever holds its lock,
//! plan, carry the steps out (each dispatched once, each task waited on by its UPID), read
//! the VM again and re-plan until nothing is left to do.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::guest;
use super::plan::{Current, Plan, Step, plan, predict_created};
use super::spec::CloneSource;
use super::spec::{Desired, State, desired, format_size};
use crate::ansible::protocol::{Failure, Invocation, Outcome};
use crate::pve::client::{Method, Params};
use crate::pve::error::task_found_vmid_taken;
use crate::pve::ops::{self, Dispatched, backoff, dispatch};
use crate::pve::paths::{self, Node, Vm};
use crate::pve::tasks::active_tasks;
use crate::pve::upid::Upid;
use crate::runner::{Session, TaskFailed};

/// Seconds since the epoch, as UPIDs count them.
fn epoch_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// VMs by name: those that carry it, and creates in progress whose name shows at their end.
#[derive(Default)]
struct Named {
    carriers: Vec<(u32, String)>,
    in_flight: Vec<(u32, String)>,
}

/// What a step led to.
enum Done {
    /// The VM exists as (vmid, node).
    Vm(u32, String),
    /// The VM is gone.
    Gone,
    /// PVE refused because the config changed meanwhile: read again and re-plan.
    Stale,
}

struct Runner<'a> {
    s: Session,
    d: &'a Desired,
    changed: bool,
    seed: u64,
    /// A config [`Runner::find`] read while looking: (vmid, node, config).
    prefetched: std::cell::RefCell<Option<(u32, String, Value)>>,
}

fn p(pairs: &[(&str, String)]) -> Params {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// Whether a create or config request imports a disk (its task copies and reports progress).
fn imports(params: &[(String, String)]) -> bool {
    params.iter().any(|(_, v)| v.contains("import-from="))
}

impl<'a> Runner<'a> {
    fn fail(&self, msg: impl Into<String>) -> Failure {
        Failure {
            msg: msg.into(),
            changed: self.changed,
            ..Default::default()
        }
    }

    /// Finds the VM: (vmid, node).
    ///
    /// With `vmid` and `node` given, its config is read on that node directly (and kept for
    /// [`Runner::read`]); otherwise, or when it is not there, the cluster listing is searched
    /// by vmid, or else by name. The listing's power state is never used: pvestatd refreshes
    /// it (and `name`) only every 10 s (pve-manager API2Tools.pm, extract_vm_stats), so it
    /// may say `stopped` for a VM started a moment ago.
    fn find(&self) -> Result<Option<(u32, String)>, Failure> {
        if let (Some(id), Some(node)) = (self.d.vmid, self.d.node.as_deref())
            && let Some(config) = self.config_of(id, node)?
        {
            self.prefetched
                .replace(Some((id, node.to_string(), config)));
            return Ok(Some((id, node.to_string())));
        }
        let vms = self.listing()?;
        if let Some(id) = self.d.vmid {
            return Ok(vms.into_iter().find(|v| v.0 == id).map(|v| (v.0, v.1)));
        }
        let name = self.d.name.as_deref().unwrap_or_default();
        let mut hits = match self.named(name, vms)? {
            n if n.carriers.is_empty() && !n.in_flight.is_empty() => {
                // A create of this user still running may be an earlier run's VM of this
                // name (interrupted mid-import): wait for it rather than create another.
                self.settled_named(name, None)?.carriers
            }
            n => n.carriers,
        };
        // Several VMs with the name: parallel runs that created one each are removing all but
        // the first (see `claim_name`); give them a moment before calling the name ambiguous.
        let settle_until = (Instant::now() + Duration::from_secs(30)).min(self.s.deadline);
        while hits.len() > 1 && Instant::now() < settle_until {
            if !crate::interrupt::sleep(Duration::from_secs(1)) {
                break;
            }
            hits = self.named(name, self.listing()?)?.carriers;
        }
        match hits.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some((one.0, one.1.clone()))),
            many => Err(self.fail(format!(
                "name '{name}' is ambiguous: VMs {} carry it; give vmid",
                many.iter()
                    .map(|v| format!("{} (on {})", v.0, v.1))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// The cluster's VMs from `/cluster/resources`: (vmid, node, name as pvestatd last saw it).
    fn listing(&self) -> Result<Vec<(u32, String, String)>, Failure> {
        let list = ops::read(
            &self.s.client,
            paths::CLUSTER_RESOURCES,
            &p(&[("type", "vm".into())]),
            self.s.deadline,
        )
        .map_err(|e| self.fail(format!("listing the cluster's VMs: {e}")))?;
        Ok(list
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["type"].as_str() == Some("qemu"))
            .filter_map(|r| {
                let id = r["vmid"]
                    .as_u64()
                    .or_else(|| r["vmid"].as_str()?.parse().ok())?;
                Some((
                    u32::try_from(id).ok()?,
                    r["node"].as_str()?.to_string(),
                    r["name"].as_str().unwrap_or("").to_string(),
                ))
            })
            .collect())
    }

    /// The VMs that carry `name`, and the creates in flight whose name is not known yet.
    ///
    /// `listed` is `/cluster/resources` as (vmid, node, name). Its names come from pvestatd
    /// and lag up to 10 s (pve-manager API2Tools.pm, extract_vm_stats): on every node that
    /// has a VM listed without a name, `GET /nodes/{node}/qemu` is asked, which reads the
    /// configs at once (qemu-server QemuServer.pm, vmstatus: a VM without a name there is
    /// `VM <vmid>`, a create in progress also has `lock: create`).
    fn named(&self, name: &str, listed: Vec<(u32, String, String)>) -> Result<Named, Failure> {
        let mut fresh: std::collections::BTreeMap<u32, (String, bool)> = Default::default();
        let mut nodes: Vec<&str> = listed
            .iter()
            .filter(|v| v.2.is_empty())
            .map(|v| v.1.as_str())
            .collect();
        nodes.sort();
        nodes.dedup();
        for node in nodes {
            let list = ops::read(
                &self.s.client,
                &Node::new(node).qemu(),
                &Vec::new(),
                self.s.deadline,
            )
            .map_err(|e| self.fail(format!("listing the VMs on {node}: {e}")))?;
            for v in list.as_array().into_iter().flatten() {
                if let Some(id) = v["vmid"].as_u64().and_then(|i| u32::try_from(i).ok()) {
                    let n = v["name"].as_str().unwrap_or("").to_string();
                    fresh.insert(id, (n, v["lock"] == "create"));
                }
            }
        }
        let mut out = Named::default();
        for (id, node, listed_name) in listed {
            let (n, creating) = match fresh.get(&id) {
                Some((n, c)) => (n.as_str(), *c),
                None => (listed_name.as_str(), false),
            };
            if n == name {
                out.carriers.push((id, node));
            } else if creating && n == format!("VM {id}") {
                out.in_flight.push((id, node));
            }
        }
        Ok(out)
    }

    /// [`Runner::named`] once the creates in flight that this user started (the tasks it can
    /// see) have ended, or the deadline has come; `own` is this run's VM, not waited for.
    fn settled_named(&self, name: &str, own: Option<u32>) -> Result<Named, Failure> {
        loop {
            let named = self.named(name, self.listing()?)?;
            let waiting = named
                .in_flight
                .iter()
                .any(|(id, n)| Some(*id) != own && self.recover(n, *id, "qmcreate").is_some());
            if !waiting || Instant::now() >= self.s.deadline {
                return Ok(named);
            }
            if !crate::interrupt::sleep(Duration::from_millis(500)) {
                return Err(self.fail(format!(
                    "interrupted by {} while looking for the VM named '{name}'",
                    crate::interrupt::received().unwrap_or("a signal")
                )));
            }
        }
    }

    /// A VM's config on a node, or `None` when it is not there.
    fn config_of(&self, vmid: u32, node: &str) -> Result<Option<Value>, Failure> {
        match ops::read(
            &self.s.client,
            &Node::new(node).vm(vmid).config(),
            &Vec::new(),
            self.s.deadline,
        ) {
            Ok(c) => Ok(Some(c)),
            Err(e) if e.is_missing_vm() => Ok(None),
            Err(e) => Err(self.fail(format!("reading the config of VM {vmid} on {node}: {e}"))),
        }
    }

    /// Reads the VM's config (or takes the one [`Runner::find`] just read) and its power
    /// state; `None` when the VM is not (or no longer) there.
    fn read(&self, vmid: u32, node: &str) -> Result<Option<Current>, Failure> {
        let config = match self.prefetched.take() {
            Some((id, n, c)) if id == vmid && n == node => c,
            _ => match self.config_of(vmid, node)? {
                Some(c) => c,
                None => return Ok(None),
            },
        };
        let status = match ops::read(
            &self.s.client,
            &Node::new(node).vm(vmid).status_current(),
            &Vec::new(),
            self.s.deadline,
        ) {
            Ok(st) => st,
            Err(e) if e.is_missing_vm() => return Ok(None),
            Err(e) => {
                return Err(self.fail(format!("reading the status of VM {vmid} on {node}: {e}")));
            }
        };
        Ok(Some(Current::from_api(vmid, node, &config, &status)))
    }

    /// Waits for a task; every way it can end badly becomes a failed result with context.
    fn wait(&mut self, upid: Upid, what: &str) -> Result<(), Failure> {
        self.wait_copy(upid, what, false).map_err(Failure::from)
    }

    /// [`Runner::wait`] for a task that may copy a disk (`copies`: it imports one).
    fn wait_copy(&mut self, upid: Upid, what: &str, copies: bool) -> Result<(), TaskFailed> {
        let changed = self.changed;
        self.s
            .wait(&upid, what, copies)
            .map(|_| ())
            .map_err(|t| TaskFailed {
                failure: Failure {
                    changed,
                    ..t.failure
                },
                ..t
            })
    }

    /// If the VM is locked, waits for the task holding the lock (say an import from an
    /// earlier, interrupted run), then reads it again. A lock no task holds is reported.
    /// `None` when the VM is gone once the lock is (a destroy held it).
    fn settle(&mut self, cur: Option<Current>) -> Result<Option<Current>, Failure> {
        let Some(mut cur) = cur else { return Ok(None) };
        let mut quiet_since: Option<Instant> = None;
        while let Some(lock) = cur.lock().map(str::to_string) {
            let running =
                active_tasks(&self.s.client, &cur.node, Some(cur.vmid), None).map_err(|e| {
                    self.fail(format!(
                        "listing tasks of VM {} on {}: {e}",
                        cur.vmid, cur.node
                    ))
                })?;
            if let Some(upid) = running.into_iter().next() {
                quiet_since = None;
                let what = format!(
                    "waiting for {} (task {}) that holds VM {}'s lock '{lock}'",
                    upid.task_type, upid, cur.vmid
                );
                self.wait(upid, &what)?;
            } else {
                let since = *quiet_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(10) || Instant::now() >= self.s.deadline {
                    return Err(self.fail(self.unheld_lock_message(&cur, &lock)));
                }
                if !crate::interrupt::sleep(Duration::from_millis(250)) {
                    return Err(self.fail(format!(
                        "interrupted while waiting for VM {}'s lock '{lock}'",
                        cur.vmid
                    )));
                }
            }
            cur = match self.read(cur.vmid, &cur.node)? {
                Some(c) => c,
                None => return Ok(None),
            };
        }
        Ok(Some(cur))
    }

    /// What to say about a lock no visible task holds. Without `Sys.Audit` on the node, PVE
    /// lists only the user's own tasks (pve-manager API2/Tasks.pm, node_tasks), so the holder
    /// (a backup, another admin's job) may simply be hidden: say so instead of advising
    /// `qm unlock` on a VM that something may be using.
    fn unheld_lock_message(&self, cur: &Current, lock: &str) -> String {
        let (vmid, node) = (cur.vmid, &cur.node);
        let path = format!("/nodes/{node}");
        let audit = ops::read(
            &self.s.client,
            "/access/permissions",
            &p(&[("path", path.clone())]),
            self.s.deadline,
        )
        .ok()
        .map(|v| v[&path]["Sys.Audit"].as_u64() == Some(1) || v[&path]["Sys.Audit"] == true);
        match audit {
            Some(false) => format!(
                "VM {vmid} on {node} is locked ({lock}) and no task this user can see holds the lock: \
                 another user's task (a backup, say) may hold it, but listing other users' tasks needs \
                 Sys.Audit on {path}; grant it, or wait until the lock is gone and run again"
            ),
            _ => format!(
                "VM {vmid} on {node} is locked ({lock}) but no task on {node} holds the lock; if no operation is in progress, \
                 remove it on the node with `qm unlock {vmid}`"
            ),
        }
    }

    fn next_id(&self) -> Result<u32, Failure> {
        let v = ops::read(
            &self.s.client,
            paths::CLUSTER_NEXTID,
            &Vec::new(),
            self.s.deadline,
        )
        .map_err(|e| self.fail(format!("asking PVE for a free vmid: {e}")))?;
        // The schema says integer; real servers answer a string.
        v.as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .map(|n| n as u32)
            .ok_or_else(|| self.fail(format!("PVE answered an unexpected vmid: {v}")))
    }

    /// Finds a running task of `ttype` for the VM: the one a lost answer may have started.
    fn recover(&self, node: &str, vmid: u32, ttype: &str) -> Option<Upid> {
        active_tasks(&self.s.client, node, Some(vmid), Some(ttype))
            .ok()?
            .into_iter()
            .next()
    }

    /// The clone's source: by vmid, where the cluster lists it; by name, the one VM that
    /// carries it. Returns (vmid, node, whether it is a template).
    fn clone_source(&self, source: &CloneSource) -> Result<(u32, String, bool), Failure> {
        let listed = self.listing()?;
        let (id, node) = match (source.vmid, &source.name) {
            (Some(id), _) => listed
                .into_iter()
                .find(|v| v.0 == id)
                .map(|v| (v.0, v.1))
                .ok_or_else(|| self.fail(format!("clone: the source VM {id} does not exist")))?,
            (None, Some(name)) => {
                let named = self.named(name, listed)?;
                match named.carriers.as_slice() {
                    [(id, node)] => (*id, node.clone()),
                    [] => {
                        return Err(self.fail(format!("clone: no VM named '{name}' to clone from")));
                    }
                    many => {
                        return Err(self.fail(format!(
                            "clone: the name '{name}' is ambiguous: VMs {} carry it; give clone.vmid",
                            many.iter()
                                .map(|(i, n)| format!("{i} (on {n})"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )));
                    }
                }
            }
            (None, None) => return Err(self.fail("clone needs vmid or name")),
        };
        let template = self
            .config_of(id, &node)?
            .is_some_and(|c| c["template"].as_u64() == Some(1) || c["template"] == "1");
        Ok((id, node, template))
    }

    /// Clones the source into a new VM on `node` (a `qmclone` task, waited on by its UPID),
    /// with the given vmid or the next free one (another if a parallel run took it first).
    fn clone_vm(&mut self, node: &str, source: &CloneSource) -> Result<Done, Failure> {
        let (src, src_node, is_template) = self.clone_source(source)?;
        let node = if node.is_empty() {
            src_node.as_str()
        } else {
            node
        };
        // A full clone copies every disk, reporting progress as an import does.
        let copies = source.full.unwrap_or(!is_template);
        let mut attempt = 0;
        loop {
            let vmid = match self.d.vmid {
                Some(v) => v,
                None => self.next_id()?,
            };
            let mut req: Params = vec![("newid".into(), vmid.to_string())];
            if let Some(n) = &self.d.name {
                req.push(("name".into(), n.clone()));
            }
            if node != src_node {
                req.push(("target".into(), node.to_string()));
            }
            if let Some(f) = source.full {
                req.push(("full".into(), if f { "1" } else { "0" }.into()));
            }
            if let Some(s) = &source.storage {
                req.push(("storage".into(), s.clone()));
            }
            if let Some(s) = &source.snapname {
                req.push(("snapname".into(), s.clone()));
            }
            if let Some(pool) = &self.d.pool {
                req.push(("pool".into(), pool.clone()));
            }
            let what = format!("cloning VM {src} on {src_node} to VM {vmid}");
            // Parallel clones of one template share the source's id in their UPIDs, so a
            // lost answer cannot be matched to its task: it is not looked for.
            let result = dispatch(
                &self.s.client,
                Method::Post,
                &Node::new(&src_node).vm(src).clone_vm(),
                &req,
                self.s.deadline,
                || None,
            );
            match result {
                Ok(Dispatched::Task(upid)) => {
                    let before = self.changed;
                    self.changed = true;
                    match self.wait_copy(upid, &what, copies) {
                        Ok(()) => {}
                        Err(t)
                            if self.d.vmid.is_none()
                                && t.exitstatus.as_deref().is_some_and(task_found_vmid_taken) =>
                        {
                            self.changed = before;
                            attempt += 1;
                            self.before_next_id(attempt, &t.failure.msg)?;
                            continue;
                        }
                        Err(t) => {
                            // A failed clone removes what it made: then nothing changed.
                            if self.config_of(vmid, node).ok().flatten().is_none() {
                                self.changed = before;
                            }
                            return Err(Failure {
                                changed: self.changed,
                                ..t.failure
                            });
                        }
                    }
                    if self.d.vmid.is_none() && self.d.name.is_some() {
                        return self.claim_name(vmid, node);
                    }
                    return Ok(Done::Vm(vmid, node.to_string()));
                }
                Ok(Dispatched::Done) => {
                    self.changed = true;
                    return Ok(Done::Vm(vmid, node.to_string()));
                }
                // The id was taken between `nextid` and the request: another one. With a
                // vmid given, that VM exists now: read it again and converge it.
                Err(e) if e.is_already_exists() && self.d.vmid.is_none() => {
                    attempt += 1;
                    self.before_next_id(attempt, &format!("{what}: {e}"))?;
                }
                Err(e) if e.is_already_exists() => return Ok(Done::Stale),
                Err(e) => return Err(self.fail(format!("{what}: {e}"))),
            }
        }
    }

    /// Before asking for another vmid (a parallel run took the one `nextid` gave): a short,
    /// jittered pause, so runs that collided do not collide again; the deadline ends it.
    fn before_next_id(&self, attempt: u32, what: &str) -> Result<(), Failure> {
        if Instant::now() >= self.s.deadline {
            return Err(self.fail(format!("{what} (no free vmid found before the timeout)")));
        }
        crate::interrupt::sleep(backoff(attempt.min(3), self.seed).mul_f64(0.4));
        Ok(())
    }

    fn create(&mut self, node: &str, params: &[(String, String)]) -> Result<Done, Failure> {
        let mut attempt = 0;
        let sent_at = epoch_secs();
        loop {
            let vmid = match self.d.vmid {
                Some(v) => v,
                None => self.next_id()?,
            };
            let mut req: Params = vec![("vmid".into(), vmid.to_string())];
            req.extend(params.iter().cloned());
            let what = format!("creating VM {vmid} on {node}");
            let result = dispatch(
                &self.s.client,
                Method::Post,
                &Node::new(node).qemu(),
                &req,
                self.s.deadline,
                || self.recover(node, vmid, "qmcreate"),
            );
            match result {
                Ok(Dispatched::Task(upid)) => {
                    let before = self.changed;
                    self.changed = true;
                    if let Err(f) = self.wait_copy(upid, &what, imports(params)) {
                        // A failed or stopped create removes its config and volumes: then
                        // nothing changed. A create still running (timeout) did change things.
                        if matches!(self.find(), Ok(None)) {
                            self.changed = before;
                        }
                        return Err(Failure {
                            changed: self.changed,
                            ..f.failure
                        });
                    }
                    if self.d.vmid.is_none() {
                        return self.claim_name(vmid, node);
                    }
                    return Ok(Done::Vm(vmid, node.to_string()));
                }
                Ok(Dispatched::Done) => {
                    self.changed = true;
                    return Ok(Done::Vm(vmid, node.to_string()));
                }
                Err(e) if e.is_already_exists() => {
                    if self.d.vmid.is_some() {
                        // Created meanwhile: by this run, when an answer was lost and the
                        // request sent again (a qmcreate of this vmid started since this run
                        // first sent it), or by a parallel run. Converge what is there.
                        if self.created_since(node, vmid, sent_at) {
                            self.changed = true;
                        }
                        return match self.find()? {
                            Some((id, n)) => Ok(Done::Vm(id, n)),
                            None => Err(self.fail(format!("{what}: {e}"))),
                        };
                    }
                    // Another client took the id between nextid and create: take a fresh one.
                    attempt += 1;
                    self.before_next_id(attempt, &format!("{what}: {e}"))?;
                }
                Err(e) => return Err(self.fail(format!("{what}: {e}"))),
            }
        }
    }

    /// Whether a `qmcreate` of `vmid` started on `node` since `since` (epoch seconds, with
    /// a little slack for the node's clock).
    fn created_since(&self, node: &str, vmid: u32, since: u64) -> bool {
        let params = p(&[
            ("source", "all".into()),
            ("vmid", vmid.to_string()),
            ("typefilter", "qmcreate".into()),
        ]);
        ops::read(
            &self.s.client,
            &Node::new(node).tasks(),
            &params,
            self.s.deadline,
        )
        .ok()
        .and_then(|v| v.as_array().cloned())
        .into_iter()
        .flatten()
        .filter_map(|t| Upid::parse(t["upid"].as_str()?).ok())
        .any(|u| u.starttime + 5 >= since)
    }

    /// After a create by name alone, makes sure the name is carried by one VM. PVE has no
    /// unique names, so two runs (or a run whose create answer was lost and that tried again)
    /// can each create one. The VM that carries the name and was created first (`meta:
    /// ctime`, then the lower vmid) is kept; a run whose VM lost removes it and converges the
    /// winner. Creates still running for this user are waited for first: their config shows
    /// the name only at their end (qemu-server Qemu.pm create_vm writes it last).
    fn claim_name(&mut self, vmid: u32, node: &str) -> Result<Done, Failure> {
        let name = self.d.name.clone().unwrap_or_default();
        let named = self.settled_named(&name, Some(vmid))?;
        let mut carriers: Vec<(u64, u32, String)> = Vec::new();
        for (id, n) in named.carriers {
            let ctime = self
                .config_of(id, &n)?
                .and_then(|c| {
                    c["meta"]
                        .as_str()?
                        .split(',')
                        .find_map(|kv| kv.strip_prefix("ctime="))?
                        .parse()
                        .ok()
                })
                .unwrap_or(u64::MAX);
            carriers.push((ctime, id, n));
        }
        let Some((_, win, win_node)) = carriers.iter().min().cloned() else {
            return Ok(Done::Vm(vmid, node.to_string()));
        };
        if win == vmid {
            return Ok(Done::Vm(vmid, node.to_string()));
        }
        let what = format!(
            "removing VM {vmid} on {node}, which this run created: VM {win} on {win_node} carries the name '{name}' too and was created first (a parallel run)"
        );
        let params = p(&[
            ("purge", "1".into()),
            ("destroy-unreferenced-disks", "1".into()),
        ]);
        match dispatch(
            &self.s.client,
            Method::Delete,
            Node::new(node).vm(vmid).path(),
            &params,
            self.s.deadline,
            || self.recover(node, vmid, "qmdestroy"),
        ) {
            Ok(Dispatched::Task(upid)) => self.wait(upid, &what)?,
            Ok(Dispatched::Done) => {}
            Err(e) => return Err(self.fail(format!("{what}: {e}"))),
        }
        self.s.log.warnings.push(format!(
            "VM {win} on {win_node} and VM {vmid} were created with the name '{name}' at the same time; VM {vmid} (this run's) was removed and VM {win} is the one converged"
        ));
        Ok(Done::Vm(win, win_node))
    }

    /// Dispatches a task-starting request for the VM and waits on it.
    fn task(
        &mut self,
        cur: &Current,
        method: Method,
        path: fn(&Vm) -> String,
        params: Params,
        ttype: &str,
        what: &str,
    ) -> Result<Done, Failure> {
        let (node, vmid) = (cur.node.clone(), cur.vmid);
        let copies = imports(&params);
        let result = dispatch(
            &self.s.client,
            method,
            &path(&Node::new(&node).vm(vmid)),
            &params,
            self.s.deadline,
            || self.recover(&node, vmid, ttype),
        );
        match result {
            Ok(Dispatched::Task(upid)) => {
                let before = self.changed;
                self.changed = true;
                match self.wait_copy(upid, what, copies) {
                    Ok(()) => Ok(Done::Vm(vmid, node)),
                    // The worker re-checked the VM under its file lock and refused before
                    // changing anything (another run changed the config, another operation
                    // holds the VM, or its file lock stayed taken for PVE's 10 s): read the VM
                    // again and re-plan.
                    Err(t) if t.refused_before_acting && Instant::now() < self.s.deadline => {
                        self.changed = before;
                        Ok(Done::Stale)
                    }
                    Err(t) => Err(t.failure),
                }
            }
            Ok(Dispatched::Done) => {
                self.changed = true;
                Ok(Done::Vm(vmid, node))
            }
            Err(e) if e.is_checksum_mismatch() => Ok(Done::Stale),
            Err(e) => Err(self.fail(format!("{what}: {e}"))),
        }
    }

    /// The changes a VM has not taken yet: PVE's pending section (read when it runs; a
    /// stopped VM takes it at its next start) and the cloud-init options its drive does not
    /// hold (when it has a cloud-init drive). Returns (pending keys, cloud-init keys).
    fn untaken(&self, c: &Current) -> Result<(Vec<String>, Vec<String>), Failure> {
        let vm = Node::new(&c.node).vm(c.vmid);
        let id = format!("VM {} on {}", c.vmid, c.node);
        let pending = if c.running {
            let l = ops::read(&self.s.client, &vm.pending(), &Vec::new(), self.s.deadline)
                .map_err(|e| self.fail(format!("reading the pending changes of {id}: {e}")))?;
            guest::pending_keys(&l)
        } else {
            Vec::new()
        };
        let cloudinit = if guest::has_cloudinit_drive(&c.config) {
            let l = ops::read(
                &self.s.client,
                &vm.cloudinit(),
                &Vec::new(),
                self.s.deadline,
            )
            .map_err(|e| self.fail(format!("reading the cloud-init state of {id}: {e}")))?;
            guest::cloudinit_pending(&l)
        } else {
            Vec::new()
        };
        Ok((pending, cloudinit))
    }

    /// `PUT …/cloudinit`: regenerates a stopped VM's cloud-init drive from its config.
    fn regenerate_cloudinit(&mut self, c: &Current) -> Result<(), Failure> {
        let what = format!(
            "regenerating the cloud-init drive of VM {} on {}",
            c.vmid, c.node
        );
        match dispatch(
            &self.s.client,
            Method::Put,
            &Node::new(&c.node).vm(c.vmid).cloudinit(),
            &Vec::new(),
            self.s.deadline,
            || None,
        ) {
            Ok(Dispatched::Task(upid)) => self.wait(upid, &what)?,
            Ok(Dispatched::Done) => {}
            Err(e) => return Err(self.fail(format!("{what}: {e}"))),
        }
        self.changed = true;
        Ok(())
    }

    /// Polls the guest agent until it reports a reachable address, within `limit` and the
    /// run's deadline. PVE answers `500 QEMU guest agent is not running` until the agent in
    /// the guest is up; that is waited through. Returns (addresses, the agent's answer).
    fn wait_for_ip(&self, c: &Current, limit: Duration) -> Result<(Vec<String>, Value), Failure> {
        let until = (Instant::now() + limit).min(self.s.deadline);
        let path = Node::new(&c.node)
            .vm(c.vmid)
            .agent("network-get-interfaces");
        let id = format!("VM {} on {}", c.vmid, c.node);
        let mut last;
        loop {
            match self.s.client.get(&path, &Vec::new()) {
                Ok(v) => {
                    let found = guest::addresses(&v);
                    if !found.is_empty() {
                        return Ok((found, v["result"].clone()));
                    }
                    last = "the agent reported no address but loopback and link-local".into();
                }
                Err(e) if e.is_agent_not_running() => last = e.to_string(),
                Err(e) if e.is_transient() => last = e.to_string(),
                Err(e) => {
                    return Err(self.fail(format!("waiting for the address of {id}: {e}")));
                }
            }
            if Instant::now() >= until {
                return Err(self.fail(format!(
                    "{id} reported no address within {} (wait_for_ip): last, {last}. Is qemu-guest-agent installed and running in the guest?",
                    humantime::format_duration(Duration::from_secs(limit.as_secs()))
                )));
            }
            let pause = Duration::from_secs(1).min(until.saturating_duration_since(Instant::now()));
            if !crate::interrupt::sleep(pause) {
                return Err(self.fail(format!(
                    "interrupted by {} while waiting for the address of {id}",
                    crate::interrupt::received().unwrap_or("a signal")
                )));
            }
        }
    }

    fn execute(&mut self, step: Step, cur: Option<&Current>) -> Result<Done, Failure> {
        if let Step::Create { node, params } = &step {
            return self.create(node, params);
        }
        if let Step::Clone { node, source } = &step {
            return self.clone_vm(node, source);
        }
        let cur = cur.ok_or_else(|| {
            self.fail(format!(
                "internal error: {} planned for a VM that does not exist",
                step.describe()
            ))
        })?;
        let id = format!("VM {} on {}", cur.vmid, cur.node);
        match step {
            Step::Create { .. } | Step::Clone { .. } => unreachable!("handled above"),
            Step::Template => self.task(
                cur,
                Method::Post,
                Vm::template,
                Vec::new(),
                "qmtemplate",
                &format!("converting {id} to a template"),
            ),
            Step::Update { set } => {
                let mut params = set.clone();
                if let Some(d) = cur.config.get("digest") {
                    params.push(("digest".into(), d.clone()));
                }
                let keys = set
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                self.task(
                    cur,
                    Method::Post,
                    Vm::config,
                    params,
                    "qmconfig",
                    &format!("updating {keys} of {id}"),
                )
            }
            Step::Resize { slot, to, .. } => {
                let params = p(&[("disk", slot.clone()), ("size", format_size(to))]);
                self.task(
                    cur,
                    Method::Put,
                    Vm::resize,
                    params,
                    "resize",
                    &format!("resizing {slot} of {id} to {}", format_size(to)),
                )
            }
            Step::Start => self.task(
                cur,
                Method::Post,
                |v| v.power("start"),
                Vec::new(),
                "qmstart",
                &format!("starting {id}"),
            ),
            Step::Stop => self.task(
                cur,
                Method::Post,
                |v| v.power("stop"),
                Vec::new(),
                "qmstop",
                &format!("stopping {id}"),
            ),
            Step::Reboot => self.task(
                cur,
                Method::Post,
                |v| v.power("reboot"),
                Vec::new(),
                "qmreboot",
                &format!("rebooting {id}"),
            ),
            Step::Shutdown { timeout, force } => {
                let params = p(&[
                    ("timeout", timeout.to_string()),
                    ("forceStop", if force { "1" } else { "0" }.into()),
                ]);
                self.task(
                    cur,
                    Method::Post,
                    |v| v.power("shutdown"),
                    params,
                    "qmshutdown",
                    &format!("shutting down {id}"),
                )
            }
            Step::Destroy { purge } => {
                let params = p(&[
                    ("purge", if purge { "1" } else { "0" }.into()),
                    ("destroy-unreferenced-disks", "1".into()),
                ]);
                match self.task(
                    cur,
                    Method::Delete,
                    |v| v.path().to_string(),
                    params,
                    "qmdestroy",
                    &format!("destroying {id}"),
                )? {
                    Done::Stale => Ok(Done::Stale),
                    _ => Ok(Done::Gone),
                }
            }
        }
    }
}

fn diff_value(
    before: &std::collections::BTreeMap<String, String>,
    after: &std::collections::BTreeMap<String, String>,
    header: &str,
) -> Value {
    json!({"before": before, "after": after, "before_header": header, "after_header": header})
}

/// The final value of a planned key, read from the VM (for diff mode's "after").
fn observed(cur: Option<&Current>, key: &str) -> String {
    let Some(c) = cur else { return String::new() };
    if key == "state" {
        return if c.running { "running" } else { "stopped" }.into();
    }
    if let Some(slot) = key.strip_suffix(".size") {
        return c
            .config
            .get(slot)
            .and_then(|v| super::plan::drive_size(v))
            .map(format_size)
            .unwrap_or_default();
    }
    c.config.get(key).cloned().unwrap_or_default()
}

/// Runs the `vm` module.
pub fn run(inv: &Invocation) -> Result<Outcome, Failure> {
    let d = desired(inv).map_err(Failure::msg)?;
    let mut r = Runner {
        s: Session::start(inv)?,
        d: &d,
        changed: false,
        seed: ops::seed(),
        prefetched: Default::default(),
    };
    let result = converge(&mut r, inv.ctx.check_mode).map_err(|mut f| {
        if let Some(v) = d.vmid {
            f.data.entry("vmid").or_insert(json!(v));
        }
        f
    });
    r.s.finish(result, r.changed)
}

/// The keys of (pending changes, cloud-init changes), sorted, each once.
fn all_keys(untaken: &(Vec<String>, Vec<String>)) -> Vec<String> {
    let mut k: Vec<String> = untaken.0.iter().chain(&untaken.1).cloned().collect();
    k.sort();
    k.dedup();
    k
}

/// Shuts the VM down (gracefully within `shutdown_timeout`, then stopped if `force_stop`) and
/// starts it, each task waited on by its UPID; a step PVE refused before acting (another
/// operation held the VM) is tried again, spaced out, within the deadline.
fn restart(r: &mut Runner, c: &Current) -> Result<(), Failure> {
    let steps = [
        Step::Shutdown {
            timeout: r.d.shutdown_timeout,
            force: r.d.force_stop,
        },
        Step::Start,
    ];
    for step in steps {
        let mut refused = 0u32;
        loop {
            let now = r.read(c.vmid, &c.node)?.ok_or_else(|| {
                r.fail(format!(
                    "VM {} on {} disappeared while restarting it",
                    c.vmid, c.node
                ))
            })?;
            match r.execute(step.clone(), Some(&now))? {
                Done::Stale if Instant::now() < r.s.deadline => {
                    refused += 1;
                    let pause = backoff(refused.min(4), r.seed.wrapping_add(refused as u64))
                        .min(r.s.deadline.saturating_duration_since(Instant::now()));
                    if !crate::interrupt::sleep(pause) {
                        return Err(r.fail(format!(
                            "interrupted by {} while restarting VM {}",
                            crate::interrupt::received().unwrap_or("a signal"),
                            c.vmid
                        )));
                    }
                }
                Done::Stale => {
                    return Err(r.fail(format!(
                        "restarting VM {} on {}: PVE refused to {} it until the deadline (another operation holds it)",
                        c.vmid,
                        c.node,
                        step.describe()
                    )));
                }
                Done::Vm(..) | Done::Gone => break,
            }
        }
    }
    Ok(())
}

fn converge(r: &mut Runner, check_mode: bool) -> Result<Outcome, Failure> {
    let d = r.d;
    let mut cur = match r.find()? {
        Some((vmid, node)) => {
            let c = r.read(vmid, &node)?;
            if check_mode { c } else { r.settle(c)? }
        }
        None => None,
    };
    if let (Some(c), Some(n)) = (&cur, &d.node)
        && c.node != *n
        && d.state != State::Absent
    {
        r.s.log.warnings.push(format!(
            "VM {} is on node {}, not {n}; it was left there (this module does not migrate VMs)",
            c.vmid, c.node
        ));
    }
    let header = |c: Option<&Current>| match c {
        Some(c) => format!("VM {} on {}", c.vmid, c.node),
        None => format!(
            "VM {}",
            d.vmid
                .map(|v| v.to_string())
                .unwrap_or_else(|| d.name.clone().unwrap_or_default())
        ),
    };
    let first: Plan = plan(d, cur.as_ref()).map_err(|e| r.fail(e))?;
    r.s.log.warnings.extend(first.notes.iter().cloned());
    if check_mode {
        // A create is followed by what the real run does next (resize, start): plan those
        // against the VM the create would leave.
        let mut steps = first.steps.clone();
        if let [Step::Create { node, .. }] = first.steps.as_slice() {
            let predicted = predict_created(d, d.vmid.unwrap_or(0), node);
            let mut effective = d.clone();
            effective.config.remove("cipassword");
            let then = plan(&effective, Some(&predicted)).map_err(|e| r.fail(e))?;
            steps.extend(then.steps);
        }
        // On a running VM: what would wait for a restart (what is pending already, and what
        // the planned update may not apply at once; a real run reads PVE's answer instead).
        let mut restart_keys: Vec<String> = Vec::new();
        if let Some(c) = cur.as_ref().filter(|c| c.running) {
            let (p, ci) = r.untaken(c)?;
            restart_keys.extend(p);
            restart_keys.extend(ci);
            for step in &steps {
                if let Step::Update { set } = step {
                    restart_keys.extend(
                        set.iter()
                            .map(|(k, _)| k)
                            .filter(|k| *k != "delete" && guest::may_need_restart(k, &c.config))
                            .cloned(),
                    );
                }
            }
            restart_keys.sort();
            restart_keys.dedup();
        }
        let stays_running = !steps
            .iter()
            .any(|s| matches!(s, Step::Stop | Step::Shutdown { .. } | Step::Destroy { .. }));
        if !restart_keys.is_empty() && d.restart_when_needed && stays_running {
            steps.push(Step::Shutdown {
                timeout: d.shutdown_timeout,
                force: d.force_stop,
            });
            steps.push(Step::Start);
        }
        let imports_resized = steps.iter().any(|s| {
            matches!(s, Step::Resize { slot, .. }
                if d.disks.iter().any(|k| k.slot == *slot && k.import_from.is_some()))
        });
        let mut o = Outcome {
            changed: !steps.is_empty(),
            ..Default::default()
        };
        o.msg = if steps.is_empty() {
            format!("{} is up to date", header(cur.as_ref()))
        } else {
            format!(
                "would {} {}{}",
                steps
                    .iter()
                    .map(Step::describe)
                    .collect::<Vec<_>>()
                    .join(", then "),
                header(cur.as_ref()),
                if imports_resized {
                    " (an imported disk is grown only if the image is smaller than its size)"
                } else {
                    ""
                }
            )
        };
        o.data.insert(
            "planned".into(),
            json!(steps.iter().map(Step::describe).collect::<Vec<_>>()),
        );
        if let Some(c) = &cur {
            o.data.insert("vmid".into(), json!(c.vmid));
            o.data.insert("node".into(), json!(c.node));
            o.data.insert("pending".into(), json!(restart_keys));
            o.data.insert(
                "restart_needed".into(),
                json!(!restart_keys.is_empty() && stays_running),
            );
        }
        let (mut before, mut after) = (first.before.clone(), first.after.clone());
        if d.restart_when_needed && stays_running && !restart_keys.is_empty() {
            before.insert("not running yet".into(), restart_keys.join(", "));
            after.insert("not running yet".into(), String::new());
        }
        o.diff = Some(diff_value(&before, &after, &header(cur.as_ref())));
        return Ok(o);
    }
    let mut done_steps: Vec<String> = Vec::new();
    let mut pending = first.clone();
    // After the first round, "restarted" means "running", and cipassword has been sent.
    let mut effective = d.clone();
    // A round in which PVE refused a step because the VM changed meanwhile (another run, a
    // backup) does not count: it is retried, spaced out, until the deadline.
    let (mut round, mut refused) = (0, 0u32);
    loop {
        if pending.steps.is_empty() {
            break;
        }
        if round == 5 {
            return Err(r.fail(format!(
                "{} did not converge: still planned after 5 rounds: {} (is something else changing it?)",
                header(cur.as_ref()),
                pending.steps.iter().map(Step::describe).collect::<Vec<_>>().join(", ")
            )));
        }
        let mut ident = cur.as_ref().map(|c| (c.vmid, c.node.clone()));
        let mut stale = false;
        let mut cloned = false;
        for step in pending.steps.clone() {
            cloned |= matches!(step, Step::Clone { .. });
            let label = step.describe();
            match r.execute(step, cur.as_ref())? {
                Done::Vm(vmid, node) => {
                    done_steps.push(label);
                    ident = Some((vmid, node));
                }
                Done::Gone => {
                    done_steps.push(label);
                    ident = None;
                }
                Done::Stale => {
                    stale = true;
                    break;
                }
            }
        }
        if stale {
            refused += 1;
            let pause = backoff(refused.min(4), r.seed.wrapping_add(refused as u64))
                .min(r.s.deadline.saturating_duration_since(Instant::now()));
            if !crate::interrupt::sleep(pause) {
                return Err(r.fail(format!(
                    "interrupted by {} while re-planning {}",
                    crate::interrupt::received().unwrap_or("a signal"),
                    header(cur.as_ref())
                )));
            }
        } else {
            round += 1;
        }
        cur = match ident {
            Some((vmid, node)) => {
                let c = r.read(vmid, &node)?;
                r.settle(c)?
            }
            None => None,
        };
        // Once per run: a restart, and a password PVE cannot compare (it stores a hash).
        if effective.state == State::Restarted {
            effective.state = State::Started;
        }
        effective.config.remove("cipassword");
        // A clone gets the password a create would have been given, once.
        if cloned && let Some(pw) = d.create_only.get("cipassword") {
            effective.config.insert("cipassword".into(), pw.clone());
        }
        pending = plan(&effective, cur.as_ref()).map_err(|e| r.fail(e))?;
    }
    // What the guest has not taken yet: changes pending until a restart, cloud-init options
    // its drive does not hold. Restarted when asked; a stopped VM's drive is regenerated.
    let mut untaken = (Vec::new(), Vec::new());
    let mut restarted = None;
    if let Some(c) = cur.clone() {
        untaken = r.untaken(&c)?;
        if c.is_template() {
            // A template never runs: its clones regenerate their own cloud-init drives.
            untaken.1.clear();
        }
        if c.running && !all_keys(&untaken).is_empty() && d.restart_when_needed {
            let what = all_keys(&untaken).join(", ");
            restart(r, &c)?;
            done_steps.push(format!("restarted to apply {what}"));
            restarted = Some(what);
            cur = r.read(c.vmid, &c.node)?;
            if let Some(c) = &cur {
                untaken = r.untaken(c)?;
            }
        } else if !c.running && !untaken.1.is_empty() {
            let what = untaken.1.join(", ");
            r.regenerate_cloudinit(&c)?;
            done_steps.push(format!("regenerated the cloud-init drive ({what})"));
            untaken.1.clear();
        }
    }
    let untaken_keys = all_keys(&untaken);
    let restart_needed = cur.as_ref().is_some_and(|c| c.running) && !untaken_keys.is_empty();
    if restart_needed && let Some(c) = &cur {
        r.s.log.warnings.push(format!(
            "VM {} on {} runs without its changes to {} until it restarts (PVE applies them at the next start): restart it, or set restart: when_needed",
            c.vmid,
            c.node,
            untaken_keys.join(", ")
        ));
    }
    let mut guest_addresses = None;
    if let Some(limit) = d.wait_for_ip {
        match &cur {
            Some(c) if c.running => guest_addresses = Some(r.wait_for_ip(c, limit)?),
            Some(c) => {
                return Err(r.fail(format!(
                    "wait_for_ip: VM {} on {} is not running (state: present does not start it; use state: started)",
                    c.vmid, c.node
                )));
            }
            None => {}
        }
    }
    let mut before = first.before.clone();
    let mut after: std::collections::BTreeMap<String, String> = first
        .before
        .keys()
        .chain(first.after.keys())
        .map(|k| (k.clone(), observed(cur.as_ref(), k)))
        .collect();
    if let Some(what) = restarted {
        before.insert("not running yet".into(), what);
        after.insert("not running yet".into(), untaken_keys.join(", "));
    }
    let mut o = Outcome {
        changed: r.changed,
        ..Default::default()
    };
    o.diff = Some(diff_value(&before, &after, &header(cur.as_ref())));
    match &cur {
        Some(c) => {
            o.msg = if done_steps.is_empty() {
                format!("VM {} on {} is up to date", c.vmid, c.node)
            } else {
                format!("VM {} on {}: {}", c.vmid, c.node, done_steps.join(", "))
            };
            o.data.insert("vmid".into(), json!(c.vmid));
            o.data.insert("node".into(), json!(c.node));
            o.data.insert(
                "status".into(),
                json!(if c.running { "running" } else { "stopped" }),
            );
            o.data.insert("config".into(), c.raw.clone());
            o.data.insert("pending".into(), json!(untaken_keys));
            o.data
                .insert("restart_needed".into(), json!(restart_needed));
            if let Some((ips, ifaces)) = &guest_addresses {
                o.data.insert("ip_addresses".into(), json!(ips));
                o.data.insert("interfaces".into(), ifaces.clone());
            }
        }
        None => {
            o.msg = if done_steps.is_empty() {
                "VM is absent".to_string()
            } else {
                format!("{}: {}", header(None), done_steps.join(", "))
            };
            o.data.insert("status".into(), json!("absent"));
        }
    }
    Ok(o)
}
