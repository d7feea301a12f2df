//! Finding a VM: by vmid and node directly, or through the cluster listing, whose names lag
//! up to 10 s behind the configs (a name is confirmed on its node); by name, waiting for the
//! creates in flight that may carry it and for parallel runs resolving a name race.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::desired::CloneSource;
use super::plan::Current;
use super::shell::{Runner, params};
use crate::ansible::protocol::Failure;
use crate::pve::ops;
use crate::pve::paths::{self, Node};

/// VMs by name: those that carry it, and creates in progress whose name shows at their end.
#[derive(Default)]
pub(super) struct Named {
    pub(super) carriers: Vec<(u32, String)>,
    pub(super) in_flight: Vec<(u32, String)>,
}

impl Runner<'_> {
    /// Finds the VM: (vmid, node).
    ///
    /// With `vmid` and `node` given, its config is read on that node directly (and kept for
    /// [`Runner::read`]); otherwise, or when it is not there, the cluster listing is searched
    /// by vmid, or else by name. The listing's power state is never used: pvestatd refreshes
    /// it (and `name`) only every 10 s (pve-manager API2Tools.pm, extract_vm_stats), so it
    /// may say `stopped` for a VM started a moment ago.
    pub(super) fn find(&self) -> Result<Option<(u32, String)>, Failure> {
        if let (Some(id), Some(node)) = (self.desired.vmid, self.desired.node.as_deref())
            && let Some(config) = self.config_of(id, node)?
        {
            self.prefetched
                .replace(Some((id, node.to_string(), config)));
            return Ok(Some((id, node.to_string())));
        }
        let vms = self.listing()?;
        if let Some(id) = self.desired.vmid {
            return Ok(vms.into_iter().find(|v| v.0 == id).map(|v| (v.0, v.1)));
        }
        let name = self.desired.name.as_deref().unwrap_or_default();
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
        let settle_until = (Instant::now() + Duration::from_secs(30)).min(self.session.deadline);
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
    pub(super) fn listing(&self) -> Result<Vec<(u32, String, String)>, Failure> {
        let list = ops::read(
            &self.session.client,
            paths::CLUSTER_RESOURCES,
            &params(&[("type", "vm".into())]),
            self.session.deadline,
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
    pub(super) fn named(
        &self,
        name: &str,
        listed: Vec<(u32, String, String)>,
    ) -> Result<Named, Failure> {
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
                &self.session.client,
                &Node::new(node).qemu(),
                &Vec::new(),
                self.session.deadline,
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
    pub(super) fn settled_named(&self, name: &str, own: Option<u32>) -> Result<Named, Failure> {
        loop {
            let named = self.named(name, self.listing()?)?;
            let waiting = named
                .in_flight
                .iter()
                .any(|(id, n)| Some(*id) != own && self.recover(n, *id, "qmcreate").is_some());
            if !waiting || Instant::now() >= self.session.deadline {
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
    pub(super) fn config_of(&self, vmid: u32, node: &str) -> Result<Option<Value>, Failure> {
        match ops::read(
            &self.session.client,
            &Node::new(node).vm(vmid).config(),
            &Vec::new(),
            self.session.deadline,
        ) {
            Ok(c) => Ok(Some(c)),
            Err(e) if e.is_missing_vm() => Ok(None),
            Err(e) => Err(self.fail(format!("reading the config of VM {vmid} on {node}: {e}"))),
        }
    }

    /// Reads the VM's config (or takes the one [`Runner::find`] just read) and its power
    /// state; `None` when the VM is not (or no longer) there.
    pub(super) fn read(&self, vmid: u32, node: &str) -> Result<Option<Current>, Failure> {
        let config = match self.prefetched.take() {
            Some((id, n, c)) if id == vmid && n == node => c,
            _ => match self.config_of(vmid, node)? {
                Some(c) => c,
                None => return Ok(None),
            },
        };
        let status = match ops::read(
            &self.session.client,
            &Node::new(node).vm(vmid).status_current(),
            &Vec::new(),
            self.session.deadline,
        ) {
            Ok(st) => st,
            Err(e) if e.is_missing_vm() => return Ok(None),
            Err(e) => {
                return Err(self.fail(format!("reading the status of VM {vmid} on {node}: {e}")));
            }
        };
        Ok(Some(Current::from_api(vmid, node, &config, &status)))
    }

    /// The clone's source: by vmid, where the cluster lists it; by name, the one VM that
    /// carries it. Returns (vmid, node, whether it is a template).
    pub(super) fn clone_source(
        &self,
        source: &CloneSource,
    ) -> Result<(u32, String, bool), Failure> {
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
}
