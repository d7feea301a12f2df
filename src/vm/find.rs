//! Finding a VM: by vmid and node directly, or through the cluster listing, whose names lag
//! up to 10 s behind the configs (a name is confirmed on its node); by name, waiting for the
//! creates in flight that may carry it and for parallel runs resolving a name race.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, anyhow};

use super::desired::CloneSource;
use super::plan::Current;
use super::shell::{Poll, Runner};
use crate::pve::answers::{VmConfig, VmStatus};
use crate::pve::api::cluster::{self, ListedVm};
use crate::pve::api::named::{self, Confirm, Look, Named, OwnVm, Settling};
use crate::pve::api::qemu::{self, Vm};
use crate::pve::retry::{Awaiting, Step, until};

/// The VMs of a listing that a create or a clone holds and that have no name of their own yet
/// (`lock: create`, `lock: clone`; the name shows at its end), but `own`.
pub(super) fn creates_in_flight(listed: &[ListedVm], own: Option<u32>) -> Vec<(u32, String)> {
    listed
        .iter()
        .filter(|vm| vm.creating && vm.unnamed() && Some(vm.vmid) != own)
        .map(|vm| (vm.vmid, vm.node.clone()))
        .collect()
}

/// Of a listing's VMs, those a clone holds (`lock: clone`): waited for by their nodes'
/// running clones, as their tasks carry their sources' ids ([`named::Settling::cloning`]).
pub(super) fn clones_in_flight(listed: &[ListedVm]) -> BTreeSet<u32> {
    listed
        .iter()
        .filter(|vm| vm.cloning)
        .map(|vm| vm.vmid)
        .collect()
}

/// What [`Runner::await_creates`] saw.
pub(super) struct Awaited {
    /// The VMs whose names are to be read now that their creates have ended.
    pub(super) ended: Vec<(u32, String)>,
    /// Of those, the ones no running create was seen holding (a leftover, if it still has no
    /// name of its own).
    pub(super) unseen: Vec<u32>,
    /// With a `since`, the VMs the cluster's recent tasks showed created so that they lose
    /// the name to it (see [`named::Settling::created_after`]).
    pub(super) created_after: Vec<u32>,
}

/// The listing with the VMs of `waited` (creates in flight once, now ended) no longer held by
/// a create: their names are to be read on their nodes (a create that failed removed its VM,
/// and the node's list no longer has it; a killed one's leftover still shows `lock: create`
/// there).
pub(super) fn ended_creates(listed: Vec<ListedVm>, waited: &[(u32, String)]) -> Vec<ListedVm> {
    listed
        .into_iter()
        .map(|mut vm| {
            if waited.iter().any(|(id, _)| *id == vm.vmid) {
                vm.creating = false;
            }
            vm
        })
        .collect()
}

/// Which of the VMs that carry a name keeps it, of (ctime, vmid, node): the one created
/// first, by `meta: ctime`; of those created in one second (ctime counts seconds, as a
/// UPID's start does), the lower vmid. Every run that carries the name decides alike from
/// the same configs. A VM without a ctime counts as created last.
pub(super) fn name_keeper(carriers: &[(u64, u32, String)]) -> Option<(u32, String)> {
    carriers
        .iter()
        .min_by_key(|(ctime, vmid, _)| (*ctime, *vmid))
        .map(|(_, vmid, node)| (*vmid, node.clone()))
}

/// Whether PVE refused a read for want of a privilege (`Permission check failed (…)`).
fn refused(error: &anyhow::Error) -> bool {
    error
        .chain()
        .filter_map(|cause| cause.downcast_ref::<crate::pve::error::ApiError>())
        .any(|api| crate::pve::api::access::Refusal::of(api).is_some())
}

/// How long parallel runs that created one VM each of a name get to remove all but the first.
const DUPLICATES_SETTLE: Duration = Duration::from_secs(30);

impl Runner<'_> {
    /// Finds the VM: (vmid, node).
    ///
    /// With `vmid` and `node` given, its config is read on that node directly (and kept for
    /// [`Runner::read`]); otherwise, or when it is not there, the cluster listing is searched
    /// by vmid, or else by name. The listing's power state is never used: pvestatd refreshes
    /// it (and `name`) only every 10 s (pve-manager API2Tools.pm, extract_vm_stats), so it
    /// may say `stopped` for a VM started a moment ago.
    pub(super) fn find(&self) -> anyhow::Result<Option<(u32, String)>> {
        if let (Some(id), Some(node)) = (self.desired.vmid, self.desired.node.as_deref()) {
            match self.config_of(id, node) {
                Ok(Some(config)) => {
                    self.prefetched
                        .replace(Some((id, node.to_string(), config)));
                    return Ok(Some((id, node.to_string())));
                }
                Ok(None) => {}
                // Without VM.Audit on /vms/{id} (a VM not yet in the token's pool), PVE
                // refuses the read before saying whether the VM exists: the listing shows
                // what the token may see.
                Err(e) if refused(&e) => {}
                Err(e) => return Err(e),
            }
        }
        let name = self.desired.name.as_deref().unwrap_or_default();
        if let Some(id) = self.desired.vmid {
            return Ok(self
                .listing()?
                .into_iter()
                .find(|v| v.vmid == id)
                .map(|v| (v.vmid, v.node)));
        }
        let vms = self.listing_by_name(name)?;
        let in_flight = creates_in_flight(&vms, None);
        let named = if in_flight.is_empty() || vms.iter().any(|vm| vm.name == name) {
            self.named(name, vms)?
        } else {
            // A create of this user running now may be an earlier run's VM of this name
            // (interrupted mid-import): wait for those, rather than create another, and read
            // the names once they have ended. A create that starts after this look cannot be
            // an earlier run's (a parallel run's VM of this name is settled by
            // `claim_name`), so neither it is waited for nor the cluster listed again: the
            // names of the VMs whose creates ended are read on their nodes, with those of
            // this listing's other VMs pvestatd has not named yet, after one pause (most have
            // ended by then, and those lists tell it: `named_once_settled`).
            let known = self.confirmed_names.borrow().clone();
            let clones = clones_in_flight(&vms);
            let (named, awaited) = self.named_once_settled(name, vms, &in_flight, None, &known)?;
            self.note_leftovers(name, &named.in_flight, &awaited.unseen, &clones);
            named
        };
        // Several VMs with the name: parallel runs that created one each are removing all but
        // the first (see `claim_name`); give them a moment before calling the name ambiguous.
        let mut first = Some(named.carriers);
        let tried = until(
            &self.budget().within(DUPLICATES_SETTLE),
            Awaiting::DuplicateNames,
            |_| -> Poll<Vec<(u32, String)>> {
                let hits = match first.take() {
                    Some(hits) => hits,
                    None => self.named(name, self.listing_by_name(name)?)?.carriers,
                };
                Ok(if hits.len() > 1 {
                    Step::Again(Ok(hits))
                } else {
                    Step::Done(Ok(hits))
                })
            },
        );
        let hits = self.ended(
            tried,
            &format!("waiting for the VMs named '{name}' to settle"),
        )?;
        match hits.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some((one.0, one.1.clone()))),
            many => Err(anyhow!(
                "name '{name}' is ambiguous: VMs {} carry it; give vmid",
                many.iter()
                    .map(|v| format!("{} (on {})", v.0, v.1))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// The cluster's VMs from `/cluster/resources` (names as pvestatd last saw them); the ids
    /// of every guest listed, containers too, are kept for choosing a new VM's id.
    pub(super) fn listing(&self) -> anyhow::Result<Vec<ListedVm>> {
        let listing =
            cluster::listing(&self.session.client).context("listing the cluster's VMs")?;
        self.listed_ids.replace(Some(listing.guest_ids));
        Ok(listing.vms)
    }

    /// [`Runner::listing`] for a search by `name`, with the names this controller's roster
    /// gives the VMs the listing does not name ([`named::named_by_roster`]: the VMs of the
    /// fleet's other runs, which cannot carry `name`, are neither waited for nor their names
    /// read).
    pub(super) fn listing_by_name(&self, name: &str) -> anyhow::Result<Vec<ListedVm>> {
        let listed = self.listing()?;
        Ok(match self.session.client.roster() {
            Some(roster) => named::named_by_roster(listed, &roster.made(), name),
            None => listed,
        })
    }

    /// The VMs that carry `name`, and the creates in flight whose name is not known yet
    /// ([`named::named`]; the listed names are confirmed only on the nodes with a VM
    /// pvestatd has not named yet).
    pub(super) fn named(&self, name: &str, listed: Vec<ListedVm>) -> anyhow::Result<Named> {
        let named = named::named(&self.session.client, name, listed, Confirm::Unnamed)?;
        self.confirmed_names.borrow_mut().extend(
            named
                .confirmed
                .iter()
                .map(|(id, vm_name)| (*id, vm_name.clone())),
        );
        Ok(named)
    }

    /// The VMs of `listed` that carry `name` once the creates of `waited` (VMs under `lock:
    /// create`, no name yet; with `since`, only those that may win the name from the run's
    /// own VM) have ended. After one pause, when most have, their nodes' own lists are read
    /// with those of `listed`'s other VMs of unknown name (`known` holds the names known
    /// already): a VM no longer held there is named at once, so a wait that one pause
    /// settles costs no read of the cluster's tasks. The creates still running then are
    /// waited for ([`Runner::await_creates`]) and their VMs' names read once they ended.
    pub(super) fn named_once_settled(
        &self,
        name: &str,
        listed: Vec<ListedVm>,
        waited: &[(u32, String)],
        since: Option<OwnVm>,
        known: &BTreeMap<u32, String>,
    ) -> anyhow::Result<(Named, Awaited)> {
        let nodes = waited
            .iter()
            .map(|(_, node)| node.clone())
            .collect::<BTreeSet<String>>()
            .into_iter()
            .collect::<Vec<_>>();
        let paused = until(
            &self.budget(),
            Awaiting::NameSettling,
            |attempt| -> Poll<()> {
                Ok(if attempt == 1 {
                    Step::Again(Err(anyhow!(
                        "creates of VMs on {} that may carry the name '{name}' were still running \
                     when the timeout came, so which VM carries it is not known yet (a re-run \
                     waits for them again)",
                        nodes.join(", ")
                    )))
                } else {
                    Step::Done(Ok(()))
                })
            },
        );
        self.ended(
            paused,
            &format!("waiting for the creates in flight that may carry the name '{name}'"),
        )?;
        // A VM waited for is held by a create: a name known of it is an older VM's.
        let mut first_known = known.clone();
        for (vmid, _) in waited {
            first_known.remove(vmid);
        }
        let first =
            self.named_knowing(name, ended_creates(listed.clone(), waited), &first_known)?;
        let still: Vec<(u32, String)> = first
            .in_flight
            .iter()
            .filter(|(vmid, _)| waited.iter().any(|(id, _)| id == vmid))
            .cloned()
            .collect();
        if still.is_empty() {
            return Ok((
                first,
                Awaited {
                    ended: waited.to_vec(),
                    unseen: Vec::new(),
                    created_after: Vec::new(),
                },
            ));
        }
        let awaited = self.await_creates(name, &still, &clones_in_flight(&listed), since)?;
        let mut known = first_known;
        known.extend(first.confirmed.clone());
        for later in &awaited.created_after {
            known.entry(*later).or_default();
        }
        // No longer held: the VMs the nodes' lists showed free of their creates, and those
        // whose creates the wait saw end.
        let done: Vec<(u32, String)> = waited
            .iter()
            .filter(|(vmid, _)| !still.iter().any(|(id, _)| id == vmid))
            .chain(awaited.ended.iter())
            .cloned()
            .collect();
        let named = self.named_knowing(name, ended_creates(listed, &done), &known)?;
        Ok((named, awaited))
    }

    /// [`named::named_knowing`], the names read kept for a later look.
    fn named_knowing(
        &self,
        name: &str,
        listed: Vec<ListedVm>,
        known: &BTreeMap<u32, String>,
    ) -> anyhow::Result<Named> {
        let named = named::named_knowing(&self.session.client, name, listed, known)?;
        self.confirmed_names.borrow_mut().extend(
            named
                .confirmed
                .iter()
                .map(|(id, vm_name)| (*id, vm_name.clone())),
        );
        Ok(named)
    }

    /// Waits until the creates this user can see running on `in_flight` (VMs under `lock:
    /// create` or, those of `clones`, `lock: clone`, no name yet) have ended, or the budget has ([`named::Settling`]: the
    /// cluster's recent tasks listed at each look, a node's running tasks for the VMs that
    /// list does not show; with `since`, the run's own new VM, only the creates that may win
    /// the name from it are waited for).
    pub(super) fn await_creates(
        &self,
        name: &str,
        in_flight: &[(u32, String)],
        clones: &BTreeSet<u32>,
        since: Option<OwnVm>,
    ) -> anyhow::Result<Awaited> {
        let client = &self.session.client;
        let mut settling = Settling::new(in_flight, since).cloning(clones.iter().copied());
        let what = format!("waiting for the creates in flight that may carry the name '{name}'");
        let still_running = |nodes: Vec<String>| {
            anyhow!(
                "creates of VMs on {} that may carry the name '{name}' were still running when \
                 the timeout came, so which VM carries it is not known yet (a re-run waits for \
                 them again)",
                nodes.join(", ")
            )
        };
        let tried = until(
            &self.budget(),
            Awaiting::NameSettling,
            |attempt| -> Poll<()> {
                // The listing just showed these creates holding their VMs: the first look comes
                // after a pause, when most have ended, so that one look often settles them all.
                if attempt == 1 {
                    return Ok(Step::Again(Err(still_running(settling.waited_nodes()))));
                }
                let Some((look, _)) = settling.next_look() else {
                    return Ok(Step::Done(Ok(())));
                };
                match look {
                    Look::Cluster => settling.observe_cluster(
                        &named::recent_tasks(client)
                            .context("listing the cluster's recent tasks")?,
                    ),
                    Look::Node(node) => {
                        settling.observe(&node, &named::running_creates(client, &node)?);
                    }
                }
                Ok(match settling.next_look() {
                    None => Step::Done(Ok(())),
                    Some((_, false)) => Step::Now,
                    // Should the budget end meanwhile, a create still running may carry the name:
                    // the run fails rather than create another VM of it.
                    Some((_, true)) => Step::Again(Err(still_running(settling.waited_nodes()))),
                })
            },
        );
        self.ended(tried, &what)?;
        let created_after = since.map(|since| settling.created_after(since));
        let (ended, unseen) = settling.ended();
        Ok(Awaited {
            ended,
            unseen,
            created_after: created_after.unwrap_or_default(),
        })
    }

    /// Warns of VMs that look like the leftovers of a create that was killed: `lock: create`
    /// and no name (qemu-server writes the name last, so a create killed mid-import leaves
    /// none, and a killed worker cleans nothing up), with no running create this user can see.
    /// They are left alone: one may be this name's, but nothing proves it.
    fn note_leftovers(
        &self,
        name: &str,
        in_flight: &[(u32, String)],
        unseen: &[u32],
        clones: &BTreeSet<u32>,
    ) {
        for (id, node) in in_flight.iter().filter(|(id, _)| unseen.contains(id)) {
            let (lock, task, what) = if clones.contains(id) {
                ("clone", "cloning", "a clone")
            } else {
                ("create", "creating", "a create")
            };
            let note = format!(
                "VM {id} on {node} has `lock: {lock}` and no name, and no task on {node} that this \
                 user can see is {task} it: it looks like the leftover of {what} that was killed \
                 (an earlier run's, perhaps for '{name}'), and it was left alone. Check it with \
                 `qm config {id}` on {node}; if it is a leftover, remove it there with \
                 `qm unlock {id} && qm destroy {id}`"
            );
            let mut notes = self.notes.borrow_mut();
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
    }

    /// A VM's config on a node, or `None` when it is not there.
    pub(super) fn config_of(&self, vmid: u32, node: &str) -> anyhow::Result<Option<VmConfig>> {
        qemu::config(&self.session.client, &Vm::new(node, vmid))
            .with_context(|| format!("reading the config of VM {vmid} on {node}"))
    }

    /// Reads the VM's config (or takes the one [`Runner::find`] just read) and its power
    /// state; `None` when the VM is not (or no longer) there.
    ///
    /// A run by name alone takes a config only from its claim (`create::claim_name`, right
    /// after its create or clone ended; [`Runner::find`] takes one only with a vmid given):
    /// that VM is this run's, just made, and stopped (qemu-server starts a new VM only when
    /// asked with `start`, which the module never sends), so its power state is not read.
    /// Should a parallel run by the same name have started it meanwhile, PVE's worker
    /// refuses a start (`VM N already running`) and the run reads it again and re-plans.
    pub(super) fn read(&self, vmid: u32, node: &str) -> anyhow::Result<Option<Current>> {
        let config = match self.prefetched.take() {
            Some((id, on, config)) if id == vmid && on == node => {
                if self.desired.vmid.is_none() {
                    let made = VmStatus {
                        status: "stopped".into(),
                        ha: Default::default(),
                        uptime: None,
                    };
                    return Ok(Some(Current::from_api(vmid, node, &config, &made)));
                }
                config
            }
            _ => match self.config_of(vmid, node)? {
                Some(config) => config,
                None => return Ok(None),
            },
        };
        let status = qemu::status(&self.session.client, &Vm::new(node, vmid))
            .with_context(|| format!("reading the status of VM {vmid} on {node}"))?;
        Ok(status.map(|status| Current::from_api(vmid, node, &config, &status)))
    }

    /// The clone's source: by vmid, where the cluster lists it; by name, the one VM that
    /// carries it. Returns (vmid, node, whether it is a template).
    pub(super) fn clone_source(&self, source: &CloneSource) -> anyhow::Result<(u32, String, bool)> {
        let listed = self.listing()?;
        let (id, node) = match (source.vmid, &source.name) {
            (Some(id), _) => listed
                .into_iter()
                .find(|v| v.vmid == id)
                .map(|v| (v.vmid, v.node))
                .ok_or_else(|| {
                    anyhow!(
                        "clone: the source VM {id} does not exist, or this user or token lacks \
                         VM.Audit on /vms/{id} (PVE lists a VM only to those who have it)"
                    )
                })?,
            (None, Some(name)) => {
                let named = self.named(name, listed)?;
                match named.carriers.as_slice() {
                    [(id, node)] => (*id, node.clone()),
                    [] => {
                        return Err(anyhow!("clone: no VM named '{name}' to clone from"));
                    }
                    many => {
                        return Err(anyhow!(
                            "clone: the name '{name}' is ambiguous: VMs {} carry it; give clone.vmid",
                            many.iter()
                                .map(|(i, n)| format!("{i} (on {n})"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    }
                }
            }
            (None, None) => return Err(anyhow!("clone needs vmid or name")),
        };
        let template = self
            .config_of(id, &node)?
            .is_some_and(|config| config.is_template());
        Ok((id, node, template))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn of_vms_made_in_one_second_the_lower_vmid_keeps_the_name_whichever_run_decides() {
        let first = (1_000, 512, "pve2".to_string());
        let tie = (1_000, 340, "pve1".to_string());
        let later = (999, 900, "pve3".to_string());
        assert_eq!(
            name_keeper(&[first.clone(), tie.clone()]),
            Some((340, "pve1".to_string()))
        );
        assert_eq!(
            name_keeper(&[tie.clone(), first.clone()]),
            Some((340, "pve1".to_string())),
            "the order the runs list them in does not matter"
        );
        assert_eq!(
            name_keeper(&[first, tie, later]),
            Some((900, "pve3".to_string())),
            "an earlier second wins over a lower vmid"
        );
        assert_eq!(
            name_keeper(&[(u64::MAX, 100, "pve1".into()), (5, 101, "pve1".into())]),
            Some((101, "pve1".to_string())),
            "a VM without a ctime counts as made last"
        );
        assert_eq!(name_keeper(&[]), None);
    }

    #[test]
    fn creates_that_ended_are_no_longer_held_by_a_create() {
        let vm = |vmid: u32| ListedVm {
            vmid,
            node: "pve1".into(),
            name: String::new(),
            creating: true,
            cloning: false,
        };
        let listed = ended_creates(vec![vm(100), vm(101)], &[(101, "pve1".to_string())]);
        assert!(listed[0].creating, "100's create was not seen ending");
        assert!(!listed[1].creating);
    }
}
