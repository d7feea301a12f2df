//! The shell of the `vm_info` module: one cluster listing selects the VMs, one listing per
//! node gives their power state, then each VM's config (current and pending, in one read),
//! snapshots and guest agent addresses are read by a bounded set of threads, each with its
//! own client of the same run.
//!
//! Requests: 1 + nodes + 2 per VM (+ 1 per running VM with the agent on). PVE has no
//! cluster-wide read of configs or snapshots, so those two stay per VM; the power state comes
//! from the node's `GET /nodes/{node}/qemu` (qemu-server API2/Qemu.pm `vmlist`, which is
//! QemuServer.pm `vmstatus` over every VM of the node: `status` from the live process list,
//! as `status/current` reads it for one VM), not from `/cluster/resources`, whose status is
//! pvestatd's, up to 10 s old.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context;
use serde_json::{Value, json};

use super::spec::{Selection, selection};
use crate::ansible::protocol::{Failure, Invocation, Outcome};
use crate::pve::answers::{VmResource, Vmid};
use crate::pve::api::qemu::{self, Vm};
use crate::pve::api::{cluster, snapshot};
use crate::pve::client::Client;
use crate::runner::{Session, failure};
use crate::snapshot::apply::snapshots_json;

/// Runs the `vm_info` module.
pub fn run(inv: &Invocation) -> Result<Outcome, Failure> {
    let selection = selection(inv).map_err(|e| failure(anyhow::Error::msg(e)))?;
    let session = Session::start(inv).map_err(failure)?;
    let result = facts(&session, &selection);
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

/// One VM's facts, read with `client`; `status` is its node's answer (`None`: the node no
/// longer lists it).
fn read_vm(client: &Client, listed: &VmResource, status: Option<&str>) -> anyhow::Result<Value> {
    let vmid = listed.vmid;
    let vm = Vm::new(&listed.node, vmid);
    let on = format!("VM {vmid} on {}", listed.node);
    let config =
        qemu::pending_config(client, &vm).with_context(|| format!("reading the config of {on}"))?;
    // A VM its node no longer lists was removed (or moved) after the cluster listing; its
    // config read above would then have failed, so this is the rare race in between.
    let status = status.unwrap_or_default().to_string();
    let snapshots =
        snapshot::list(client, &vm).with_context(|| format!("listing the snapshots of {on}"))?;
    let addresses = (config.current.agent_enabled() && status == "running")
        .then(|| agent_addresses(client, &vm))
        .flatten();
    let name = listed
        .name
        .clone()
        .or_else(|| config.current.name().map(str::to_string));
    Ok(json!({
        "vmid": vmid, "node": listed.node, "name": name,
        "status": status, "pool": listed.pool, "tags": listed.tag_list(),
        "template": listed.template.unwrap_or(0) == 1,
        "config": config.current.keys, "pending": config.pending,
        "pending_delete": config.pending_delete,
        "agent_addresses": addresses, "snapshots": snapshots_json(&snapshots),
    }))
}

/// Reads the selected VMs, `parallel` at a time; the result keeps the listing's order.
fn facts(session: &Session, selection: &Selection) -> anyhow::Result<Outcome> {
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
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<anyhow::Result<Value>>>> =
        Mutex::new((0..listed.len()).map(|_| None).collect());
    let threads = selection.parallel.min(listed.len()).max(1);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let client = session.client.worker();
            let (next, results, listed, requests, states) =
                (&next, &results, &listed, &requests, &states);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(vm) = listed.get(i) else { break };
                    let status = states.get(&vm.vmid).map(String::as_str);
                    let answer = read_vm(&client, vm, status);
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
