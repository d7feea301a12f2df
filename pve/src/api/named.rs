//! Finding VMs by name, the one place both the `vm` and `snapshot` modules do it: the
//! cluster listing (`/cluster/resources`), whose names come from pvestatd and lag up to 10 s
//! behind the configs (pve-manager API2Tools.pm, extract_vm_stats), confirmed by each node's
//! own list (`GET /nodes/{node}/qemu`, qemu-server QemuServer.pm vmstatus, which reads the
//! configs at once: a VM without a name there is `VM <vmid>`, a create in progress also has
//! `lock: create`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::cluster::ListedVm;
use super::task_type::TaskType;
pub use super::tasks::RecentTask;
use super::{qemu, tasks};
use crate::answers::Vmid;
use crate::client::{Client, Made};
use crate::error::ApiError;
use crate::upid::Upid;

/// Which nodes' own lists confirm the cluster listing's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Confirm {
    /// Every node with a listed VM: a VM renamed a moment ago is found by its new name (one
    /// request per node).
    EveryNode,
    /// Only the nodes with a VM pvestatd has not named yet whose create has ended (a VM just
    /// created): no request at all when every listed VM has a name or is still being
    /// created (the listing shows `lock: create` at once; such a VM's name shows only at its
    /// end, so its node's list could not tell it either).
    Unnamed,
}

/// The run's own new VM, against which another create's chance at the name is judged: of VMs
/// that carry one name, the one with the earliest `meta: ctime` keeps it, the lower vmid
/// within one second (the `vm` module's `find::name_keeper`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnVm {
    /// Its `meta: ctime` (its node's clock, in seconds).
    pub ctime: u64,
    pub vmid: Vmid,
}

impl OwnVm {
    /// Whether the VM `vmid` whose create started at `start` (its node's clock, in seconds)
    /// loses the name to this one, whatever it is named: qemu-server sets `ctime` in the
    /// create's worker, after the task's start, so its (ctime, vmid) is at least (`start`,
    /// `vmid`), later than this VM's when it started in a later second, or in the same
    /// second with a higher vmid.
    pub fn outruns(&self, start: u64, vmid: Vmid) -> bool {
        start > self.ctime || (start == self.ctime && vmid > self.vmid)
    }
}

/// The VMs whose newest create in `recent` (the cluster's recent tasks) started so that it
/// loses the name to `own` ([`OwnVm::outruns`]); `own` itself is never among them.
pub fn outrun_by(recent: &[RecentTask], own: OwnVm) -> Vec<Vmid> {
    let mut newest: BTreeMap<(String, Vmid), u64> = BTreeMap::new();
    for task in recent
        .iter()
        .filter(|task| task.upid.task_type == TaskType::Create.as_str())
    {
        let Ok(vmid) = task.upid.id.parse::<Vmid>() else {
            continue;
        };
        let start = newest.entry((task.upid.node.clone(), vmid)).or_default();
        *start = (*start).max(task.upid.starttime);
    }
    let mut out: Vec<Vmid> = newest
        .into_iter()
        .filter(|((_, vmid), start)| *vmid != own.vmid && own.outruns(*start, *vmid))
        .map(|((_, vmid), _)| vmid)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The listing with the names the roster gives ([`crate::client::Roster::made`]: VMs this
/// controller's live runs are making, or made a moment ago, with the name their create gave):
/// a VM the listing does not name (no name yet, or a create in flight) whose record fits it
/// ([`Made::fits`]: a VM under `lock: create` only a running create's record, one under
/// `lock: clone` only a running clone's) and names it other than `name` is taken as named so, and no longer as held by a
/// create: its create gave it another name, so it is neither waited for nor its name read. A record of `name` itself (a
/// parallel run for the same name) changes nothing: that VM is judged as before, as does a
/// VM whose records disagree. Pure.
pub fn named_by_roster(listed: Vec<ListedVm>, made: &[Made], name: &str) -> Vec<ListedVm> {
    listed
        .into_iter()
        .map(|mut vm| {
            let mut names = made
                .iter()
                .filter(|made| {
                    made.vmid == vm.vmid && made.node == vm.node && made.fits(vm.holder())
                })
                .map(|made| made.name.as_str());
            let first = names.next();
            // Records that disagree (an id taken again) tell nothing.
            if vm.unnamed()
                && let Some(record) = first
                && names.all(|other| other == record)
                && !record.is_empty()
                && record != name
            {
                vm.name = record.to_string();
                vm.creating = false;
                vm.cloning = false;
            }
            vm
        })
        .collect()
}

/// The nodes whose own lists [`named_knowing`] reads for `listed`: those with a VM pvestatd
/// has not named yet, that no create holds and whose name `known` does not hold.
pub fn nodes_to_confirm(listed: &[ListedVm], known: &BTreeMap<Vmid, String>) -> Vec<String> {
    let mut nodes: Vec<String> = listed
        .iter()
        .filter(|vm| vm.unnamed() && !vm.creating && !known.contains_key(&vm.vmid))
        .map(|vm| vm.node.clone())
        .collect();
    nodes.sort();
    nodes.dedup();
    nodes
}

/// VMs by name: those that carry it, and creates in progress whose name shows only at their
/// end (qemu-server's create_vm writes it last). Each is (vmid, node), in the listing's order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Named {
    pub carriers: Vec<(Vmid, String)>,
    pub in_flight: Vec<(Vmid, String)>,
    /// The names read on the nodes' own lists, of VMs no create holds (`""`: none): what a
    /// later look can take as known ([`named_knowing`]).
    pub confirmed: BTreeMap<Vmid, String>,
}

/// A node's list that could not be read: the node, and PVE's answer (its
/// [`std::error::Error::source`]).
#[derive(Debug)]
pub struct NodeListFailed {
    pub node: String,
    pub error: ApiError,
}

impl fmt::Display for NodeListFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "listing the VMs on {}", self.node)
    }
}

impl std::error::Error for NodeListFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// The VMs of `listed` (the cluster listing, [`super::cluster::vms`]) that carry `name`, with
/// their names confirmed on the nodes `confirm` says, and the creates in flight whose name is
/// not known yet. Each node's list is a read.
pub fn named(
    client: &Client,
    name: &str,
    listed: Vec<ListedVm>,
    confirm: Confirm,
) -> Result<Named, NodeListFailed> {
    named_with(client, name, listed, confirm, &BTreeMap::new())
}

/// [`named`] with [`Confirm::Unnamed`], where the VMs of `known` (vmid → its name, as an
/// earlier look read it on its node, or as its own config says) need no confirming: only
/// the nodes with another VM pvestatd has not named yet, and that no create holds, are
/// listed. A VM a create holds now is never taken from `known`.
pub fn named_knowing(
    client: &Client,
    name: &str,
    listed: Vec<ListedVm>,
    known: &BTreeMap<Vmid, String>,
) -> Result<Named, NodeListFailed> {
    named_with(client, name, listed, Confirm::Unnamed, known)
}

fn named_with(
    client: &Client,
    name: &str,
    listed: Vec<ListedVm>,
    confirm: Confirm,
    known: &BTreeMap<Vmid, String>,
) -> Result<Named, NodeListFailed> {
    let mut fresh: BTreeMap<Vmid, (String, bool)> = BTreeMap::new();
    let mut confirmed = BTreeMap::new();
    for vm in listed.iter().filter(|vm| vm.unnamed() && !vm.creating) {
        if let Some(known_name) = known.get(&vm.vmid) {
            fresh.insert(vm.vmid, (known_name.clone(), false));
        }
    }
    let nodes = match confirm {
        Confirm::EveryNode => {
            let mut nodes: Vec<String> = listed.iter().map(|vm| vm.node.clone()).collect();
            nodes.sort();
            nodes.dedup();
            nodes
        }
        Confirm::Unnamed => nodes_to_confirm(&listed, known),
    };
    for node in &nodes {
        let on_node = qemu::list(client, node).map_err(|error| NodeListFailed {
            node: node.clone(),
            error,
        })?;
        for vm in on_node {
            let creating = matches!(vm.lock.as_deref(), Some("create" | "clone"));
            let vm_name = vm.name.unwrap_or_default();
            if !creating {
                confirmed.insert(vm.vmid, vm_name.clone());
            }
            fresh.insert(vm.vmid, (vm_name, creating));
        }
    }
    Ok(Named {
        confirmed,
        ..carrying(name, listed, &fresh)
    })
}

/// The pure part of [`named`]: `fresh` is each confirmed VM's (name, whether a create holds
/// it); a VM not confirmed keeps its listed name.
fn carrying(name: &str, listed: Vec<ListedVm>, fresh: &BTreeMap<Vmid, (String, bool)>) -> Named {
    let mut out = Named::default();
    for ListedVm {
        vmid,
        node,
        name: listed_name,
        creating: listed_creating,
        ..
    } in listed
    {
        let (current_name, creating) = match fresh.get(&vmid) {
            Some((current, creating)) => (current.as_str(), *creating),
            None => (listed_name.as_str(), listed_creating),
        };
        if current_name == name {
            out.carriers.push((vmid, node));
        } else if creating && (current_name.is_empty() || current_name == format!("VM {vmid}")) {
            out.in_flight.push((vmid, node));
        }
    }
    out
}

/// Waiting for creates in flight. A look lists the cluster's recent tasks (`GET
/// /cluster/tasks`, one read for every node and VM: [`Settling::observe_cluster`]); a VM
/// whose create that list does not show at all (it lists only the caller's own tasks without
/// `Sys.Audit` on `/`, and none of a token's; a create appears there only once its worker
/// has forked, after its `lock: create` was written) is looked at on its node instead, one
/// node's running creates per look (`GET /nodes/{node}/tasks?source=active`:
/// [`Settling::observe`]). A VM whose create a list shows ended (or no longer lists, once
/// seen running) is done, as on the node's own list. So a wait costs about one read per
/// pause, not one per VM or node. Pure: the shell lists and sleeps, [`Settling::next_look`]
/// and the observations decide.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settling {
    /// Per node, the VMs whose create may still be running.
    pending: BTreeMap<String, Vec<Vmid>>,
    /// Only the creates that may win the name from this VM are waited for: a later one
    /// cannot (see [`Settling::new`]).
    since: Option<OwnVm>,
    /// VMs whose create was seen running.
    seen_running: Vec<Vmid>,
    /// VMs no longer waited for whose name is to be read: (vmid, node).
    to_confirm: Vec<(Vmid, String)>,
    /// Nodes with a VM whose create the cluster's list did not show: looked at on the node.
    on_node: BTreeSet<String>,
    /// The looks made since the last pause.
    looked: Vec<Look>,
    /// The creates the latest look at the cluster's recent tasks listed.
    recent: Vec<RecentTask>,
    /// Of the waited VMs, those a clone holds (`lock: clone`, [`Settling::cloning`]).
    clones: BTreeSet<Vmid>,
}

/// Where a look of [`Settling`] lists running creates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Look {
    /// `GET /cluster/tasks`.
    Cluster,
    /// `GET /nodes/{node}/tasks?source=active&typefilter=qmcreate` on this node.
    Node(String),
}

impl Settling {
    /// A wait for `in_flight` (VMs under `lock: create`, with no name yet). With `since`
    /// (the run's own new VM), only for the creates that may win the name from it: the VM
    /// created first keeps it (`meta: ctime`, then the lower vmid), and a create that
    /// started in a later second, or in the same second for a higher vmid, makes a VM that
    /// loses to it ([`OwnVm::outruns`]), which its own run removes.
    pub fn new(in_flight: &[(Vmid, String)], since: Option<OwnVm>) -> Settling {
        let mut pending: BTreeMap<String, Vec<Vmid>> = BTreeMap::new();
        for (vmid, node) in in_flight {
            pending.entry(node.clone()).or_default().push(*vmid);
        }
        Settling {
            pending,
            since,
            ..Settling::default()
        }
    }

    /// Of the waited VMs, those a clone holds (`lock: clone`): a `qmclone` task carries its
    /// source's id, not the new VM's (qemu-server API2/Qemu.pm clone_vm, `fork_worker
    /// ('qmclone', $vmid, …)`), so such a VM is waited for on its node while any clone runs
    /// there, and whatever the clone's start: a clone keeps its source's `meta: ctime`, so
    /// its VM may win the name from any VM made since.
    pub fn cloning(mut self, clones: impl IntoIterator<Item = Vmid>) -> Settling {
        self.clones = clones.into_iter().collect();
        self
    }

    /// The nodes with VMs whose create may still be running.
    pub fn waited_nodes(&self) -> Vec<String> {
        self.pending.keys().cloned().collect()
    }

    /// The node to look at next, or `None` when no create is waited for any more.
    pub fn next_node(&self) -> Option<&str> {
        self.pending.keys().next().map(String::as_str)
    }

    /// The next look, and whether a pause comes before it (every look a round needs was
    /// made since the last pause); `None` when no create is waited for any more. A round is
    /// one look at the cluster's list while some waited VM is told by it, and one at each
    /// node whose VMs it does not tell.
    pub fn next_look(&mut self) -> Option<(Look, bool)> {
        let mut due = Vec::new();
        if self.pending.keys().any(|node| !self.on_node.contains(node)) {
            due.push(Look::Cluster);
        }
        for node in self
            .pending
            .keys()
            .filter(|node| self.on_node.contains(*node))
        {
            due.push(Look::Node(node.clone()));
        }
        if let Some(look) = due.iter().find(|look| !self.looked.contains(look)) {
            return Some((look.clone(), false));
        }
        self.looked.clear();
        due.into_iter().next().map(|look| (look, true))
    }

    /// What a look at the cluster's recent tasks saw. For each waited VM not looked at on its
    /// node, its newest create listed there: running, it is waited for (unless it started
    /// after `since`); ended, the VM is done. One not listed is done if its create was seen
    /// running before (a list holds 25 tasks a node, so an ended one may have left it), and
    /// else is looked at on its node.
    pub fn observe_cluster(&mut self, listed: &[RecentTask]) {
        self.looked.push(Look::Cluster);
        self.recent = listed
            .iter()
            .filter(|task| task.upid.task_type == TaskType::Create.as_str())
            .cloned()
            .collect();
        let nodes: Vec<String> = self
            .pending
            .keys()
            .filter(|node| !self.on_node.contains(*node))
            .cloned()
            .collect();
        for node in nodes {
            let Some(vmids) = self.pending.remove(&node) else {
                continue;
            };
            let mut still = Vec::new();
            for vmid in vmids {
                if self.clones.contains(&vmid) {
                    // The list names the clone by its source: only the node tells.
                    self.on_node.insert(node.clone());
                    still.push(vmid);
                    continue;
                }
                let newest = listed
                    .iter()
                    .filter(|task| {
                        task.upid.node == node
                            && task.upid.task_type == TaskType::Create.as_str()
                            && task.upid.id == vmid.to_string()
                    })
                    .max_by_key(|task| task.upid.starttime);
                match newest {
                    Some(task) if task.running => {
                        if self
                            .since
                            .is_some_and(|own| own.outruns(task.upid.starttime, vmid))
                        {
                            continue;
                        }
                        if !self.seen_running.contains(&vmid) {
                            self.seen_running.push(vmid);
                        }
                        still.push(vmid);
                    }
                    Some(_) => self.to_confirm.push((vmid, node.clone())),
                    None if self.seen_running.contains(&vmid) => {
                        self.to_confirm.push((vmid, node.clone()));
                    }
                    None => {
                        self.on_node.insert(node.clone());
                        still.push(vmid);
                    }
                }
            }
            if !still.is_empty() {
                self.pending.insert(node, still);
            }
        }
    }

    /// What a look at `node` saw: its running creates and clones. A VM whose create no
    /// longer runs is done (its name is to be read); one whose create loses to `since` is not
    /// waited for; one whose create runs stays, as does a clone's VM while any clone runs on
    /// its node ([`Settling::cloning`]).
    pub fn observe(&mut self, node: &str, running: &[Upid]) {
        self.looked.push(Look::Node(node.to_string()));
        let Some(vmids) = self.pending.remove(node) else {
            return;
        };
        let mut still = Vec::new();
        for vmid in vmids {
            let cloned = self.clones.contains(&vmid);
            let holder = running.iter().find(|upid| {
                upid.node == node
                    && if cloned {
                        upid.task_type == TaskType::Clone.as_str()
                    } else {
                        upid.task_type == TaskType::Create.as_str() && upid.id == vmid.to_string()
                    }
            });
            match holder {
                Some(upid)
                    if !cloned
                        && self
                            .since
                            .is_some_and(|own| own.outruns(upid.starttime, vmid)) => {}
                Some(_) => {
                    if !self.seen_running.contains(&vmid) {
                        self.seen_running.push(vmid);
                    }
                    still.push(vmid);
                }
                None => self.to_confirm.push((vmid, node.to_string())),
            }
        }
        if !still.is_empty() {
            self.pending.insert(node.to_string(), still);
        }
    }

    /// The VMs whose newest create the latest look at the cluster's recent tasks listed as
    /// losing the name to `own` ([`outrun_by`]): a name of theirs does not matter.
    pub fn created_after(&self, own: OwnVm) -> Vec<Vmid> {
        outrun_by(&self.recent, own)
    }

    /// The VMs whose name is to be read now that their creates have ended (or were not
    /// running at the first look), and of those, the ones never seen running (a leftover,
    /// if its name is still unknown).
    pub fn ended(self) -> (Vec<(Vmid, String)>, Vec<Vmid>) {
        let unseen = self
            .to_confirm
            .iter()
            .filter(|(vmid, _)| !self.seen_running.contains(vmid))
            .map(|(vmid, _)| *vmid)
            .collect();
        (self.to_confirm, unseen)
    }
}

/// The cluster's recent tasks (a read): for [`Settling::observe_cluster`].
pub fn recent_tasks(client: &Client) -> Result<Vec<RecentTask>, ApiError> {
    tasks::cluster_recent(client)
}

/// One node's running creates and clones (a read, of its running tasks: a typefilter takes
/// one type): for [`Settling::observe`].
pub fn running_creates(client: &Client, node: &str) -> Result<Vec<Upid>, NodeListFailed> {
    let kinds = [TaskType::Create.as_str(), TaskType::Clone.as_str()];
    tasks::running(client, node, None, None)
        .map(|running| {
            running
                .into_iter()
                .filter(|upid| kinds.contains(&upid.task_type.as_str()))
                .collect()
        })
        .map_err(|error| NodeListFailed {
            node: node.to_string(),
            error,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(vmid: Vmid, node: &str, name: &str) -> ListedVm {
        ListedVm {
            vmid,
            node: node.into(),
            name: name.into(),
            creating: false,
            cloning: false,
        }
    }

    #[test]
    fn the_roster_names_a_fleets_vms_of_other_names_and_leaves_the_runs_own_name_alone() {
        let made = |vmid: Vmid, node: &str, name: &str| Made {
            vmid,
            node: node.into(),
            name: name.into(),
            upid: format!("UPID:{node}:1:2:3:qmcreate:{vmid}:root@pam:"),
            task_type: "qmcreate".into(),
            ended: (vmid % 2 == 1).then_some(crate::client::Ended { at: 1, ok: true }),
        };
        let creating = |vmid: Vmid, node: &str| ListedVm {
            creating: true,
            cloning: false,
            ..listed(vmid, node, "")
        };
        let cluster = vec![
            creating(100, "pve1"),
            listed(101, "pve2", ""),
            creating(102, "pve1"),
            listed(103, "pve3", "VM 103"),
            creating(104, "pve2"),
            listed(105, "pve1", "listed"),
            creating(106, "pve3"),
            creating(107, "pve1"),
        ];
        let records = vec![
            made(100, "pve1", "peer-a"),
            made(101, "pve2", "peer-b"),
            made(102, "pve1", "web"),
            made(103, "pve3", "peer-c"),
            made(104, "pve1", "elsewhere"),
            made(105, "pve1", "renamed?"),
            made(106, "pve3", "one"),
            made(106, "pve3", "two"),
            made(107, "pve1", "ended-before"),
        ];
        let out = named_by_roster(cluster, &records, "web");
        let seen: Vec<(Vmid, &str, bool)> = out
            .iter()
            .map(|vm| (vm.vmid, vm.name.as_str(), vm.creating))
            .collect();
        assert_eq!(
            seen,
            vec![
                (100, "peer-a", false),
                (101, "peer-b", false),
                (102, "", true),
                (103, "peer-c", false),
                (104, "", true),
                (105, "listed", false),
                (106, "", true),
                (107, "", true),
            ],
            "the run's own name (102), another node (104), a listed name (105), records that \
             disagree (106) and a create's record that ended for a VM a create holds now (107) \
             are left as the listing has them"
        );
        let named = carrying("web", out, &BTreeMap::new());
        assert_eq!(
            named.in_flight,
            vec![
                (102, "pve1".to_string()),
                (104, "pve2".to_string()),
                (106, "pve3".to_string()),
                (107, "pve1".to_string())
            ]
        );
        assert!(named.carriers.is_empty());
    }

    #[test]
    fn names_confirmed_on_their_node_win_over_the_listing() {
        let cluster = vec![
            listed(100, "pve1", "web"),
            listed(101, "pve1", "old-name"),
            listed(102, "pve2", ""),
            listed(103, "pve2", ""),
            listed(104, "pve2", "web"),
        ];
        let fresh: BTreeMap<Vmid, (String, bool)> = [
            (101, ("web".to_string(), false)),
            (102, ("VM 102".to_string(), true)),
            (103, ("db".to_string(), false)),
        ]
        .into();
        let named = carrying("web", cluster, &fresh);
        assert_eq!(
            named.carriers,
            [
                (100, "pve1".to_string()),
                (101, "pve1".to_string()),
                (104, "pve2".to_string())
            ]
        );
        assert_eq!(named.in_flight, [(102, "pve2".to_string())]);
        let none = carrying("web", vec![listed(105, "pve1", "VM 105")], &BTreeMap::new());
        assert_eq!(
            none,
            Named::default(),
            "a create is told by its lock, not its name"
        );
    }

    fn upid(node: &str, vmid: Vmid, starttime: u64) -> Upid {
        let text =
            format!("UPID:{node}:0000AB12:00C0FFEE:{starttime:08X}:qmcreate:{vmid}:ops@pve:");
        Upid::parse(&text).expect("a well-formed UPID")
    }

    #[test]
    fn a_create_in_flight_is_told_by_the_listings_lock_without_its_nodes_list() {
        let mut building = listed(110, "pve2", "");
        building.creating = true;
        let named = carrying(
            "web",
            vec![building, listed(111, "pve2", "db")],
            &BTreeMap::new(),
        );
        assert_eq!(named.in_flight, [(110, "pve2".to_string())]);
        assert!(named.carriers.is_empty());
    }

    #[test]
    fn a_wait_looks_at_one_node_until_its_creates_end_then_at_the_next() {
        let in_flight = [
            (120, "pve1".to_string()),
            (121, "pve2".to_string()),
            (122, "pve2".to_string()),
        ];
        let mut settling = Settling::new(&in_flight, None);
        assert_eq!(settling.next_node(), Some("pve1"));
        settling.observe("pve1", &[upid("pve1", 120, 999)]);
        assert_eq!(
            settling.next_node(),
            Some("pve1"),
            "120's create still runs"
        );
        settling.observe("pve1", &[]);
        assert_eq!(settling.next_node(), Some("pve2"));
        // 121's create runs on pve2; a create of vmid 122 on another node does not hold it.
        settling.observe("pve2", &[upid("pve2", 121, 1000), upid("pve1", 122, 1001)]);
        assert_eq!(settling.next_node(), Some("pve2"));
        settling.observe("pve2", &[]);
        assert_eq!(settling.next_node(), None);
        let (to_confirm, unseen) = settling.ended();
        let confirm: Vec<Vmid> = to_confirm.iter().map(|(vmid, _)| *vmid).collect();
        assert_eq!(
            confirm,
            [120, 122, 121],
            "every VM's name is read at the end"
        );
        assert_eq!(
            unseen,
            [122],
            "no create was seen holding 122: a leftover, or just ended"
        );
    }

    fn clone_upid(node: &str, source: Vmid, starttime: u64) -> Upid {
        let text =
            format!("UPID:{node}:0000AB13:00C0FFEF:{starttime:08X}:qmclone:{source}:ops@pve:");
        Upid::parse(&text).expect("a well-formed UPID")
    }

    #[test]
    fn a_clones_vm_is_waited_for_on_its_node_while_a_clone_runs_there_whatever_its_start() {
        // 140 is a clone's (its qmclone carries the template's id, 900), 141 a create's.
        let in_flight = [(140, "pve1".to_string()), (141, "pve1".to_string())];
        let own = OwnVm {
            ctime: 1_000,
            vmid: 100,
        };
        let mut settling = Settling::new(&in_flight, Some(own)).cloning([140]);
        assert_eq!(settling.next_look(), Some((Look::Cluster, false)));
        // The cluster's list shows the clone by its source only: 140 goes to its node.
        settling.observe_cluster(&[
            RecentTask {
                upid: clone_upid("pve1", 900, 2_000),
                running: true,
            },
            recent("pve1", 141, 999, true),
        ]);
        assert_eq!(
            settling.next_look(),
            Some((Look::Node("pve1".into()), false))
        );
        // A clone that started after the run's own VM still runs: 140 may win the name (a
        // clone keeps its template's ctime), so it is waited for; a create of 140's id
        // would not hold a clone's VM.
        settling.observe(
            "pve1",
            &[clone_upid("pve1", 900, 2_000), upid("pve1", 141, 999)],
        );
        assert_eq!(settling.waited_nodes(), ["pve1"]);
        settling.observe("pve1", &[upid("pve1", 140, 2_001)]);
        assert_eq!(settling.next_node(), None, "no clone runs on pve1 any more");
        let (to_confirm, unseen) = settling.ended();
        let confirm: Vec<Vmid> = to_confirm.iter().map(|(vmid, _)| *vmid).collect();
        assert_eq!(confirm, [140, 141]);
        assert!(unseen.is_empty(), "both were seen held: {unseen:?}");
    }

    #[test]
    fn only_creates_that_started_by_a_ctime_are_waited_for() {
        let in_flight = [(130, "pve1".to_string()), (131, "pve1".to_string())];
        // The run's own VM has a higher vmid than both: only the second decides.
        let own = OwnVm {
            ctime: 1_005,
            vmid: 999,
        };
        let mut settling = Settling::new(&in_flight, Some(own));
        settling.observe(
            "pve1",
            &[upid("pve1", 130, 1_005), upid("pve1", 131, 1_006)],
        );
        assert_eq!(
            settling.next_node(),
            Some("pve1"),
            "the same second may tie: waited for"
        );
        settling.observe("pve1", &[upid("pve1", 131, 1_006)]);
        assert_eq!(
            settling.next_node(),
            None,
            "131 started later and cannot win"
        );
        let (to_confirm, _) = settling.ended();
        assert_eq!(to_confirm, [(130, "pve1".to_string())]);
    }

    fn recent(node: &str, vmid: Vmid, starttime: u64, running: bool) -> RecentTask {
        RecentTask {
            upid: upid(node, vmid, starttime),
            running,
        }
    }

    #[test]
    fn one_look_at_the_clusters_tasks_settles_every_node_it_shows() {
        let in_flight = [
            (140, "pve1".to_string()),
            (141, "pve2".to_string()),
            (142, "pve3".to_string()),
        ];
        let mut settling = Settling::new(&in_flight, None);
        assert_eq!(settling.next_look(), Some((Look::Cluster, false)));
        settling.observe_cluster(&[
            recent("pve1", 140, 1_000, true),
            // An older create of 141 ended; its newest one runs.
            recent("pve2", 141, 900, false),
            recent("pve2", 141, 1_001, true),
            recent("pve3", 142, 1_002, false),
        ]);
        assert_eq!(
            settling.next_look(),
            Some((Look::Cluster, true)),
            "140 and 141 still run: the next look at the cluster comes after a pause"
        );
        settling.observe_cluster(&[recent("pve1", 140, 1_000, false)]);
        assert_eq!(
            settling.next_look(),
            None,
            "140 ended; 141, seen running, left the list"
        );
        let (to_confirm, unseen) = settling.ended();
        let confirm: Vec<Vmid> = to_confirm.iter().map(|(vmid, _)| *vmid).collect();
        assert_eq!(confirm, [142, 140, 141]);
        assert_eq!(unseen, [142], "142's create was only ever seen ended");
    }

    #[test]
    fn a_vm_whose_create_the_clusters_list_does_not_show_is_looked_at_on_its_node() {
        // A token without Sys.Audit on / sees none of its tasks there; a create shows only
        // once its worker has forked.
        let in_flight = [(150, "pve1".to_string()), (151, "pve2".to_string())];
        let mut settling = Settling::new(&in_flight, None);
        assert_eq!(settling.next_look(), Some((Look::Cluster, false)));
        settling.observe_cluster(&[recent("pve2", 151, 1_000, true)]);
        assert_eq!(
            settling.next_look(),
            Some((Look::Node("pve1".into()), false)),
            "no pause: pve1 was not looked at in this round"
        );
        settling.observe("pve1", &[upid("pve1", 150, 999)]);
        assert_eq!(settling.next_look(), Some((Look::Cluster, true)));
        settling.observe_cluster(&[recent("pve2", 151, 1_000, false)]);
        assert_eq!(
            settling.next_look(),
            Some((Look::Node("pve1".into()), false)),
            "pve1's VMs stay with pve1's own list"
        );
        settling.observe("pve1", &[]);
        assert_eq!(settling.next_look(), None);
        let (_, unseen) = settling.ended();
        assert!(unseen.is_empty(), "both were seen running");
    }

    #[test]
    fn creates_the_clusters_list_shows_started_after_a_ctime_are_told() {
        let in_flight = [(160, "pve1".to_string()), (161, "pve2".to_string())];
        let own = OwnVm {
            ctime: 1_005,
            vmid: 999,
        };
        let mut settling = Settling::new(&in_flight, Some(own));
        settling.observe_cluster(&[
            recent("pve1", 160, 1_006, true),
            recent("pve2", 161, 1_005, false),
            recent("pve3", 162, 1_007, false),
            recent("pve3", 163, 1_004, false),
        ]);
        assert_eq!(
            settling.next_look(),
            None,
            "160 started later and is not waited for"
        );
        assert_eq!(
            settling.created_after(own),
            [160, 162],
            "the same second is not later for a lower vmid"
        );
        let (to_confirm, _) = settling.ended();
        assert_eq!(to_confirm, [(161, "pve2".to_string())]);
    }

    #[test]
    fn in_one_second_a_create_for_a_higher_vmid_loses_to_the_runs_own_vm() {
        let own = OwnVm {
            ctime: 2_000,
            vmid: 500,
        };
        assert!(
            own.outruns(2_001, 100),
            "a later second loses, whatever its vmid"
        );
        assert!(own.outruns(2_000, 501), "the same second, a higher vmid");
        assert!(
            !own.outruns(2_000, 499),
            "the same second, a lower vmid may win"
        );
        assert!(!own.outruns(1_999, 900), "an earlier second may win");
        let listed = [
            recent("pve1", 600, 2_000, true),
            recent("pve2", 400, 2_000, true),
            recent("pve3", 700, 1_999, false),
            // An older create of 401 ended; its newest one started later.
            recent("pve1", 401, 1_990, false),
            recent("pve1", 401, 2_003, true),
            recent("pve2", 500, 2_000, false),
        ];
        assert_eq!(
            outrun_by(&listed, own),
            [401, 600],
            "the newest create counts; the run's own VM is never listed"
        );
        let mut settling = Settling::new(
            &[(400, "pve2".to_string()), (600, "pve1".to_string())],
            Some(own),
        );
        settling.observe_cluster(&listed);
        assert_eq!(
            settling.waited_nodes(),
            ["pve2"],
            "only 400's create may still win: 600's is not waited for"
        );
    }

    #[test]
    fn only_nodes_with_a_vm_of_unknown_name_whose_create_ended_are_listed() {
        let mut building = listed(172, "pve3", "");
        building.creating = true;
        let cluster = [
            listed(170, "pve1", ""),
            listed(171, "pve2", "VM 171"),
            building,
            listed(173, "pve2", "web"),
            listed(174, "pve1", ""),
        ];
        let known: BTreeMap<Vmid, String> = [(171, "db".to_string())].into();
        assert_eq!(
            nodes_to_confirm(&cluster, &known),
            ["pve1"],
            "171's name is known, 172 is still being created, 173 is named"
        );
        assert!(nodes_to_confirm(&cluster[1..4], &known).is_empty());
    }
}
