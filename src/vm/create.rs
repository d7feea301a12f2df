//! Making a new VM, by a create or a clone, through one id-allocation loop: the given vmid
//! or the next free one (another when a parallel run took it first), the request dispatched
//! once, its task waited on, and a name race with a parallel run resolved (see
//! [`Runner::claim_name`]).

use std::time::Instant;

use super::desired::CloneSource;
use super::shell::{Done, Runner, epoch_secs, imports, params};
use crate::ansible::protocol::Failure;
use crate::pve::client::{Method, Params};
use crate::pve::error::task_found_vmid_taken;
use crate::pve::ops::{self, Dispatched, backoff, dispatch};
use crate::pve::paths::{self, Node};
use crate::pve::upid::Upid;

/// How a new VM is made.
enum Making<'p> {
    /// `POST /nodes/{node}/qemu` with these parameters (the vmid is added).
    Create { params: &'p [(String, String)] },
    /// `POST …/{src}/clone` from VM `src` on `src_node`; `copies`: a full clone, which
    /// copies every disk and reports progress as an import does.
    Clone {
        source: &'p CloneSource,
        src: u32,
        src_node: String,
        copies: bool,
    },
}

impl Runner<'_> {
    /// Creates the VM on `node` from the planned parameters (a `qmcreate` task).
    pub(super) fn create(
        &mut self,
        node: &str,
        params: &[(String, String)],
    ) -> Result<Done, Failure> {
        self.make(node, &Making::Create { params })
    }

    /// Clones the source into a new VM on `node` (a `qmclone` task; without `node`, on the
    /// source's node).
    pub(super) fn clone_vm(&mut self, node: &str, source: &CloneSource) -> Result<Done, Failure> {
        let (src, src_node, is_template) = self.clone_source(source)?;
        let node = if node.is_empty() {
            src_node.clone()
        } else {
            node.to_string()
        };
        let copies = source.full.unwrap_or(!is_template);
        self.make(
            &node,
            &Making::Clone {
                source,
                src,
                src_node,
                copies,
            },
        )
    }

    /// The request that makes VM `vmid` on `node`: (method, path, parameters).
    fn request(&self, making: &Making, vmid: u32, node: &str) -> (Method, String, Params) {
        match making {
            Making::Create { params } => {
                let mut req: Params = vec![("vmid".into(), vmid.to_string())];
                req.extend(params.iter().cloned());
                (Method::Post, Node::new(node).qemu(), req)
            }
            Making::Clone {
                source,
                src,
                src_node,
                ..
            } => {
                let mut req: Params = vec![("newid".into(), vmid.to_string())];
                if let Some(name) = &self.desired.name {
                    req.push(("name".into(), name.clone()));
                }
                if node != src_node {
                    req.push(("target".into(), node.to_string()));
                }
                if let Some(full) = source.full {
                    req.push(("full".into(), if full { "1" } else { "0" }.into()));
                }
                if let Some(storage) = &source.storage {
                    req.push(("storage".into(), storage.clone()));
                }
                if let Some(snapname) = &source.snapname {
                    req.push(("snapname".into(), snapname.clone()));
                }
                if let Some(pool) = &self.desired.pool {
                    req.push(("pool".into(), pool.clone()));
                }
                (Method::Post, Node::new(src_node).vm(*src).clone_vm(), req)
            }
        }
    }

    /// The one id-allocation loop of a create and a clone.
    fn make(&mut self, node: &str, making: &Making) -> Result<Done, Failure> {
        let mut attempt = 0;
        let sent_at = epoch_secs();
        loop {
            let vmid = match self.desired.vmid {
                Some(given) => given,
                None => self.next_id()?,
            };
            let (what, copies) = match making {
                Making::Create { params } => {
                    (format!("creating VM {vmid} on {node}"), imports(params))
                }
                Making::Clone {
                    src,
                    src_node,
                    copies,
                    ..
                } => (
                    format!("cloning VM {src} on {src_node} to VM {vmid}"),
                    *copies,
                ),
            };
            let (method, path, req) = self.request(making, vmid, node);
            // Parallel clones of one template share the source's id in their UPIDs, so a
            // lost clone answer cannot be matched to its task: it is not looked for.
            let result = dispatch(
                &self.session.client,
                method,
                &path,
                &req,
                self.session.deadline,
                || match making {
                    Making::Create { .. } => self.recover(node, vmid, "qmcreate"),
                    Making::Clone { .. } => None,
                },
            );
            match result {
                Ok(Dispatched::Task(upid)) => {
                    let mark = self.changes.accepted();
                    match self.wait_copy(upid, &what, copies) {
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
                            attempt += 1;
                            self.before_next_id(attempt, &failed.failure.msg)?;
                            continue;
                        }
                        Err(failed) => {
                            // A failed or stopped create or clone removes what it made: then
                            // nothing changed. One still running (timeout) did change things.
                            let left_nothing = match making {
                                Making::Create { .. } => matches!(self.find(), Ok(None)),
                                Making::Clone { .. } => {
                                    self.config_of(vmid, node).ok().flatten().is_none()
                                }
                            };
                            if left_nothing {
                                self.changes.undo(mark);
                            }
                            return Err(failed.failure);
                        }
                    }
                    if self.desired.vmid.is_none() && self.desired.name.is_some() {
                        return self.claim_name(vmid, node);
                    }
                    return Ok(Done::Vm(vmid, node.to_string()));
                }
                Ok(Dispatched::Done) => {
                    let _ = self.changes.accepted();
                    return Ok(Done::Vm(vmid, node.to_string()));
                }
                // The id was taken between `nextid` and the request: another one.
                Err(e) if e.is_already_exists() && self.desired.vmid.is_none() => {
                    attempt += 1;
                    self.before_next_id(attempt, &format!("{what}: {e}"))?;
                }
                // With a vmid given, that VM exists now: converge it.
                Err(e) if e.is_already_exists() => match making {
                    Making::Create { .. } => {
                        // Created meanwhile: by this run, when an answer was lost and the
                        // request sent again (a qmcreate of this vmid started since this
                        // run first sent it), or by a parallel run.
                        if self.created_since(node, vmid, sent_at) {
                            let _ = self.changes.accepted();
                        }
                        return match self.find()? {
                            Some((id, found_on)) => Ok(Done::Vm(id, found_on)),
                            None => Err(self.fail(format!("{what}: {e}"))),
                        };
                    }
                    Making::Clone { .. } => return Ok(Done::Stale),
                },
                Err(e) => return Err(self.fail(format!("{what}: {e}"))),
            }
        }
    }

    /// A free vmid, from `/cluster/nextid`.
    pub(super) fn next_id(&self) -> Result<u32, Failure> {
        let v = ops::read(
            &self.session.client,
            paths::CLUSTER_NEXTID,
            &Vec::new(),
            self.session.deadline,
        )
        .map_err(|e| self.fail(format!("asking PVE for a free vmid: {e}")))?;
        // The schema says integer; real servers answer a string.
        v.as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .map(|n| n as u32)
            .ok_or_else(|| self.fail(format!("PVE answered an unexpected vmid: {v}")))
    }

    /// Before asking for another vmid (a parallel run took the one `nextid` gave): a short,
    /// jittered pause, so runs that collided do not collide again; the deadline ends it.
    pub(super) fn before_next_id(&self, attempt: u32, what: &str) -> Result<(), Failure> {
        if Instant::now() >= self.session.deadline {
            return Err(self.fail(format!("{what} (no free vmid found before the timeout)")));
        }
        crate::interrupt::sleep(backoff(attempt.min(3), self.seed).mul_f64(0.4));
        Ok(())
    }

    /// Whether a `qmcreate` of `vmid` started on `node` since `since` (epoch seconds, with
    /// a little slack for the node's clock).
    pub(super) fn created_since(&self, node: &str, vmid: u32, since: u64) -> bool {
        let params = params(&[
            ("source", "all".into()),
            ("vmid", vmid.to_string()),
            ("typefilter", "qmcreate".into()),
        ]);
        ops::read(
            &self.session.client,
            &Node::new(node).tasks(),
            &params,
            self.session.deadline,
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
    pub(super) fn claim_name(&mut self, vmid: u32, node: &str) -> Result<Done, Failure> {
        let name = self.desired.name.clone().unwrap_or_default();
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
        let params = params(&[
            ("purge", "1".into()),
            ("destroy-unreferenced-disks", "1".into()),
        ]);
        match dispatch(
            &self.session.client,
            Method::Delete,
            Node::new(node).vm(vmid).path(),
            &params,
            self.session.deadline,
            || self.recover(node, vmid, "qmdestroy"),
        ) {
            Ok(Dispatched::Task(upid)) => self.wait(upid, &what)?,
            Ok(Dispatched::Done) => {}
            Err(e) => return Err(self.fail(format!("{what}: {e}"))),
        }
        self.session.log.warnings.push(format!(
            "VM {win} on {win_node} and VM {vmid} were created with the name '{name}' at the same time; VM {vmid} (this run's) was removed and VM {win} is the one converged"
        ));
        Ok(Done::Vm(win, win_node))
    }
}
