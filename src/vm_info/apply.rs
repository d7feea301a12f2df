//! The shell of the `vm_info` module: one cluster listing selects the VMs, one listing per
//! node gives their power state, then the per-VM facts the `facts` option asks for (the
//! config, current and pending, in one read; the snapshots; the guest agent's addresses) are
//! read by a bounded set of threads, each with its own client of the same run.
//!
//! Requests: 1 + nodes, whatever the cluster's size, plus per VM 1 for `config`, 1 for
//! `snapshots`, and for `agent` 1 per running VM with the agent on (after a config read, for
//! running VMs only when `config` is not asked for). PVE has no cluster-wide read of configs
//! or snapshots, so those stay per VM; the power state comes from the node's
//! `GET /nodes/{node}/qemu` (qemu-server API2/Qemu.pm `vmlist`, which is QemuServer.pm
//! `vmstatus` over every VM of the node: `status` from the live process list, as
//! `status/current` reads it for one VM), not from `/cluster/resources`, whose status is
//! pvestatd's, up to 10 s old.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context;
use serde_json::{Value, json};

use super::spec::{Facts, Selection, facts as asked_facts, selection};
use crate::ansible::protocol::{Failure, Invocation, Outcome};
use crate::privileges::{explain_refusal, preflight, vm_info_needs};
use crate::pve::answers::{VmResource, Vmid};
use crate::pve::api::qemu::{self, Vm};
use crate::pve::api::{cluster, snapshot};
use crate::pve::client::Client;
use crate::runner::{Session, failure};
use crate::snapshot::apply::snapshots_json;

/// Runs the `vm_info` module.
pub fn run(inv: &Invocation) -> Result<Outcome, Failure> {
    let selection = selection(inv).map_err(|e| failure(anyhow::Error::msg(e)))?;
    let asked = asked_facts(inv);
    let session = Session::start(inv).map_err(failure)?;
    let result = facts(&session, &selection, asked).map_err(explain_refusal);
    session.finish(result, false, &[])
}

/// Whether a listed VM is one the selection asks for.
pub fn selected(selection: &Selection, vm: &VmResource) -> bool {
    let tags = vm.tag_list();
    selection.vm.matches(vm.vmid, vm.name.as_deref(), &vm.node)
        && selection
            .pool
            .as_ref()
            .is_none_or(|p| vm.pool.as_ref() == Some(p))
        && selection.tags.iter().all(|t| tags.contains(t))
}

/// The guest agent's addresses (the reachable ones, as the `vm` module's `wait_for_ip` waits
/// for them: `pve::answers::GuestInterfaces::addresses`), or `None` when it does not answer.
fn agent_addresses(client: &Client, vm: &Vm) -> Option<Vec<String>> {
    qemu::agent_interfaces(client, vm)
        .ok()
        .map(|interfaces| interfaces.addresses())
}

/// The power state of every VM on `node`, by vmid, from the node's VM list (live, as
/// `status/current`; see the module's note).
fn node_states(client: &Client, node: &str) -> anyhow::Result<HashMap<Vmid, String>> {
    let listed =
        qemu::list(client, node).with_context(|| format!("listing the VMs of node {node}"))?;
    Ok(listed
        .into_iter()
        .filter_map(|vm| Some((vm.vmid, vm.status?)))
        .collect())
}

/// What the listings alone tell of a VM; `status` is its node's answer (`None`: the node no
/// longer lists it, removed or moved after the cluster listing: the rare race in between).
fn listed_facts(listed: &VmResource, status: Option<&str>) -> Value {
    json!({
        "vmid": listed.vmid, "node": listed.node, "name": listed.name,
        "status": status.unwrap_or_default(), "pool": listed.pool, "tags": listed.tag_list(),
        "template": listed.template.unwrap_or(0) == 1,
    })
}

/// One VM's facts, the listings' and the per-VM reads `asked` names, read with `client`.
fn read_vm(
    client: &Client,
    listed: &VmResource,
    status: Option<&str>,
    asked: Facts,
) -> anyhow::Result<Value> {
    let vmid = listed.vmid;
    let vm = Vm::new(&listed.node, vmid);
    let on = format!("VM {vmid} on {}", listed.node);
    let status = status.unwrap_or_default();
    let mut facts = listed_facts(listed, Some(status));
    let config = if asked.reads_config(status) {
        Some(
            qemu::pending_config(client, &vm)
                .with_context(|| format!("reading the config of {on}"))?,
        )
    } else {
        None
    };
    if asked.snapshots {
        let snapshots = snapshot::list(client, &vm)
            .with_context(|| format!("listing the snapshots of {on}"))?;
        facts["snapshots"] = snapshots_json(&snapshots);
    }
    if asked.agent {
        let addresses = config
            .as_ref()
            .filter(|c| c.current.agent_enabled() && status == "running")
            .and_then(|_| agent_addresses(client, &vm));
        facts["agent_addresses"] = json!(addresses);
    }
    if let Some(config) = config {
        if listed.name.is_none() {
            facts["name"] = json!(config.current.name());
        }
        if asked.config {
            facts["config"] = json!(config.current.keys);
            facts["pending"] = json!(config.pending);
            facts["pending_delete"] = json!(config.pending_delete);
        }
    }
    Ok(facts)
}

/// Reads the selected VMs, the per-VM reads `parallel` at a time; the result keeps the
/// listing's order.
fn facts(session: &Session, selection: &Selection, asked: Facts) -> anyhow::Result<Outcome> {
    let mut listed = cluster::vm_resources(&session.client).context("listing the cluster's VMs")?;
    listed.retain(|vm| selected(selection, vm));
    listed.sort_by_key(|vm| vm.vmid);
    let requests = AtomicUsize::new(0);
    let nodes: BTreeSet<&str> = listed.iter().map(|vm| vm.node.as_str()).collect();
    let mut states = HashMap::new();
    let per_node: Vec<anyhow::Result<HashMap<Vmid, String>>> = std::thread::scope(|scope| {
        let reads: Vec<_> = nodes
            .iter()
            .map(|node| {
                let client = session.client.worker();
                let requests = &requests;
                scope.spawn(move || {
                    let answer = node_states(&client, node);
                    requests.fetch_add(client.requests() as usize, Ordering::SeqCst);
                    answer
                })
            })
            .collect();
        reads
            .into_iter()
            .map(|read| {
                read.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a node's VM list failed")))
            })
            .collect()
    });
    for answer in per_node {
        states.extend(answer?);
    }
    let status_of = |vm: &VmResource| states.get(&vm.vmid).map(String::as_str);
    // The VMs that need a per-VM read; the others are told by the listings alone.
    let to_read: Vec<usize> = (0..listed.len())
        .filter(|&i| asked.reads_any(status_of(&listed[i]).unwrap_or_default()))
        .collect();
    // The agent is read only on running VMs: its privilege is checked on them first, so a
    // token without it is told so rather than getting no addresses.
    if asked.agent {
        let running: Vec<u32> = to_read
            .iter()
            .map(|&i| &listed[i])
            .filter(|vm| status_of(vm) == Some("running"))
            .map(|vm| vm.vmid)
            .collect();
        let needs: Vec<_> = vm_info_needs(&running, true);
        preflight(&session.client, &needs)?;
    }
    let results: Mutex<Vec<Option<anyhow::Result<Value>>>> = Mutex::new(
        listed
            .iter()
            .map(|vm| Some(Ok(listed_facts(vm, status_of(vm)))))
            .collect(),
    );
    let next = AtomicUsize::new(0);
    let threads = selection.parallel.min(to_read.len());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let client = session.client.worker();
            let (next, results, listed, requests, to_read) =
                (&next, &results, &listed, &requests, &to_read);
            scope.spawn(move || {
                while let Some(&i) = to_read.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let vm = &listed[i];
                    let answer = read_vm(&client, vm, status_of(vm), asked);
                    results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(answer);
                }
                requests.fetch_add(client.requests() as usize, Ordering::SeqCst);
            });
        }
    });
    let mut vms = Vec::new();
    for answer in results.into_inner().unwrap_or_else(|e| e.into_inner()) {
        match answer {
            Some(Ok(v)) => vms.push(v),
            // A VM removed between the listing and its reads is left out.
            Some(Err(e)) if is_gone(&e) => {}
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    let mut o = Outcome {
        msg: format!("{} VMs", vms.len()),
        ..Default::default()
    };
    o.data.insert("vms".into(), json!(vms));
    o.data
        .insert("vm_requests".into(), json!(requests.load(Ordering::SeqCst)));
    Ok(o)
}

fn is_gone(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<crate::pve::error::ApiError>()
            .is_some_and(|a| a.is_missing_vm())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::VmSelector;

    fn vm(vmid: Vmid, node: &str, pool: Option<&str>, tags: &str) -> VmResource {
        VmResource {
            kind: "qemu".into(),
            vmid,
            node: node.into(),
            name: Some(format!("vm{vmid}")),
            pool: pool.map(str::to_string),
            tags: Some(tags.into()),
            ..Default::default()
        }
    }

    #[test]
    fn every_given_selector_must_match() {
        let all = Selection::default();
        let web = Selection {
            tags: vec!["web".into(), "prod".into()],
            ..Default::default()
        };
        let pool_on_pve2 = Selection {
            vm: VmSelector {
                node: Some("pve2".into()),
                ..Default::default()
            },
            pool: Some("team".into()),
            ..Default::default()
        };
        let a = vm(100, "pve1", None, "prod;web");
        let b = vm(101, "pve2", Some("team"), "web");
        assert!(selected(&all, &a) && selected(&all, &b));
        assert!(selected(&web, &a) && !selected(&web, &b));
        assert!(!selected(&pool_on_pve2, &a) && selected(&pool_on_pve2, &b));
        let by_name = Selection {
            vm: VmSelector {
                name: Some("vm101".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(selected(&by_name, &b) && !selected(&by_name, &a));
    }
}
