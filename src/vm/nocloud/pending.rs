//! Whether a running guest booted with the seed its VM holds. PVE swaps a CD-ROM's medium on a
//! running VM at once (qemu-server `vmconfig_update_disk`, `change_medium`), so its pending
//! section never shows a new seed; the guest, though, reads the seed at boot only. What PVE
//! does show tells it: a seed volume written after the VM started (its `ctime` in the
//! storage's content, later than now less the VM's `uptime`, both by the node's clock) has
//! not been read by the guest, and waits for a restart, in every run until that restart, not
//! only the run that attached it.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;

use super::inherit::held_seed;
use crate::pve::api::qemu::{self, Vm};
use crate::pve::api::storage;
use crate::vm::plan::Current;
use crate::vm::shell::Runner;

/// Seconds a seed's `ctime` may pass the VM's start and still count as read at boot: the
/// volume's `ctime`, the VM's `uptime` and "now" (the API node's `Date` header,
/// `Client::server_now`) count whole seconds, and the node that holds
/// the volume may differ from the API node a little. A seed attached within this time of a
/// start is reported as pending by the run that attached it only.
pub const CLOCK_SLACK: u64 = 3;

/// Whether a seed written at `ctime` was written after a VM that has run `uptime` seconds
/// at `now` (all epoch seconds) started.
pub fn written_after_boot(ctime: u64, now: u64, uptime: u64) -> bool {
    ctime > now.saturating_sub(uptime) + CLOCK_SLACK
}

impl Runner<'_> {
    /// Whether the running VM's guest has not read the seed the VM holds yet (see the module
    /// note): reads the VM's uptime and the seed's entry in its storage's content.
    pub(in crate::vm) fn seed_untaken(&self, cur: &Current) -> anyhow::Result<bool> {
        if !cur.running {
            return Ok(false);
        }
        let Some((_, volid)) = held_seed(&cur.config) else {
            return Ok(false);
        };
        let Some((storage_id, _)) = volid.split_once(':') else {
            return Ok(false);
        };
        let id = format!("VM {} on {}", cur.vmid, cur.node);
        let client = &self.session.client;
        let status = qemu::status(client, &Vm::new(&cur.node, cur.vmid))
            .with_context(|| format!("reading the uptime of {id}"))?;
        let Some(uptime) = status.filter(|s| s.running()).and_then(|s| s.uptime) else {
            return Ok(false);
        };
        // The content list needs Datastore.Audit or Datastore.AllocateSpace on the storage
        // (pve-storage API2/Storage/Content.pm index), which a role for HA or snapshots may
        // lack: then whether the guest read the seed is not known, and said so.
        let listed = match storage::content(client, &cur.node, storage_id, "iso") {
            Ok(listed) => listed,
            Err(error) if error.status() == Some(403) => {
                let note = format!(
                    "could not tell whether the guest of {id} has read its NoCloud seed {volid} (reading {storage_id}'s content needs Datastore.Audit on /storage/{storage_id})"
                );
                let mut notes = self.notes.borrow_mut();
                if !notes.contains(&note) {
                    notes.push(note);
                }
                return Ok(false);
            }
            Err(error) => {
                return Err(anyhow::Error::new(error).context(format!(
                    "reading when the NoCloud seed {volid} of {id} was written"
                )));
            }
        };
        let Some(ctime) = listed
            .iter()
            .find(|volume| volume.volid == volid)
            .and_then(|volume| volume.ctime)
        else {
            return Ok(false);
        };
        // The node's clock, as PVE wrote the `ctime` by it; this host's only when no answer
        // carried a `Date` header.
        let now = client.server_now().unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|since| since.as_secs())
                .unwrap_or_default()
        });
        Ok(written_after_boot(ctime, now, uptime))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_written_after_the_start_waits_and_one_written_before_does_not() {
        // Started at 1000 (now 1600, up 600 s), by this host's clock.
        assert!(
            !written_after_boot(990, 1600, 600),
            "uploaded before the start"
        );
        assert!(
            !written_after_boot(1000 + CLOCK_SLACK, 1600, 600),
            "within the slack"
        );
        assert!(
            written_after_boot(1000 + CLOCK_SLACK + 1, 1600, 600),
            "attached while running"
        );
        assert!(!written_after_boot(1200, 1600, 0), "just restarted");
    }
}
