//! The follow-up once the config converged, as the guest sees it: reading what a running VM
//! has not taken yet (pending changes, cloud-init options), and waiting for the guest agent to report an address. The decisions on what PVE
//! answers are in [`super::guest`], in plain data.

use std::time::Duration;

use anyhow::{Context, anyhow};

use super::guest;
use super::plan::Current;
use super::shell::{Poll, Runner};
use crate::pve::answers::GuestInterface;
use crate::pve::api::ha;
use crate::pve::api::qemu::{self, Vm};
use crate::pve::retry::{Awaiting, Step, until};

impl Runner<'_> {
    /// The changes a running VM has not taken yet: PVE's pending section and the cloud-init
    /// options its drive does not hold (when it has a cloud-init drive). A stopped VM has
    /// none: its start applies the pending section and generates the cloud-init drive from
    /// the config (qemu-server vm_start, Cloudinit.pm generate_cloudinitconfig), and PVE
    /// records no cloud-init change for it (`GET …/cloudinit` reads the
    /// `[special:cloudinit]` section only vmconfig_hotplug_pending makes).
    /// Returns (pending keys, cloud-init keys).
    pub(super) fn untaken(&self, cur: &Current) -> anyhow::Result<(Vec<String>, Vec<String>)> {
        if !cur.running {
            return Ok((Vec::new(), Vec::new()));
        }
        let vm = Vm::new(&cur.node, cur.vmid);
        let id = format!("VM {} on {}", cur.vmid, cur.node);
        let listing = qemu::pending(&self.session.client, &vm)
            .with_context(|| format!("reading the pending changes of {id}"))?;
        let mut pending = guest::pending_keys(&listing);
        if self.seed_changed_running || self.seed_untaken(cur)? {
            pending.push("nocloud".into());
        }
        let cloudinit = if guest::has_cloudinit_drive(&cur.config) {
            let listing = qemu::cloudinit(&self.session.client, &vm)
                .with_context(|| format!("reading the cloud-init state of {id}"))?;
            guest::cloudinit_pending(&listing)
        } else {
            Vec::new()
        };
        Ok((pending, cloudinit))
    }

    /// Whether the HA stack manages the VM and its resource's requested state is `started`
    /// (an admin or a `hastart` asked for it): the CRM starts it in a coming round.
    pub(super) fn ha_starting(&self, vm: &Vm) -> anyhow::Result<bool> {
        let id = format!("VM {} on {}", vm.vmid, vm.node);
        let status = qemu::status(&self.session.client, vm)
            .with_context(|| format!("reading the status of {id}"))?;
        if !status.is_some_and(|s| s.ha_managed()) {
            return Ok(false);
        }
        let resource = ha::resource(&self.session.client, vm.vmid)
            .with_context(|| format!("reading the HA resource of {id}"))?;
        Ok(resource.is_some_and(|r| r.requested_state() == "started"))
    }

    /// Polls the guest agent until it reports a reachable address, within `limit` and the
    /// run's deadline. PVE answers `500 QEMU guest agent is not running` until the agent in
    /// the guest is up, and `VM N qga command … got timeout` while it is busy; both are waited
    /// through, as is a stopped VM the HA stack is starting. Returns (addresses, the agent's answer).
    pub(super) fn wait_for_ip(
        &self,
        cur: &Current,
        limit: Duration,
    ) -> anyhow::Result<(Vec<String>, Vec<GuestInterface>)> {
        let vm = Vm::new(&cur.node, cur.vmid);
        let id = format!("VM {} on {}", cur.vmid, cur.node);
        let not_up = |last: String| {
            Err(anyhow!(
                "{id} reported no address within {} (wait_for_ip): last, {last}. Is qemu-guest-agent installed and running in the guest?",
                humantime::format_duration(Duration::from_secs(limit.as_secs()))
            ))
        };
        let tried = until(
            &self.budget().within(limit),
            Awaiting::AgentNotUp,
            |_| -> Poll<(Vec<String>, Vec<GuestInterface>)> {
                let last = match qemu::agent_interfaces(&self.session.client, &vm) {
                    Ok(answer) => {
                        let found = answer.addresses();
                        if !found.is_empty() {
                            return Ok(Step::Done(Ok((found, answer.result))));
                        }
                        "the agent reported no address but loopback and link-local".into()
                    }
                    // Not up yet, or busy: its ping or command outlasted QMPClient's timeout.
                    Err(e) if e.is_agent_not_running() || e.is_agent_timeout() => e.to_string(),
                    Err(e) if e.is_transient() => e.to_string(),
                    // Stopped while the HA stack is still to start it (its request is queued):
                    // waited through as long as HA is asked to start it.
                    Err(e) if e.is_vm_not_running() && self.ha_starting(&vm)? => {
                        format!("{e} (the HA stack is starting it)")
                    }
                    Err(e) => {
                        return Err(anyhow!("waiting for the address of {id}: {e}"));
                    }
                };
                Ok(Step::Again(not_up(last)))
            },
        );
        self.ended(tried, &format!("waiting for the address of {id}"))
    }
}
