//! `snapshot_before_change`: before a run changes an existing VM, a snapshot named with the
//! option's prefix and the time is taken (its `qmsnapshot` waited on by its UPID), and the
//! newest `snapshot_retention` snapshots of the prefix are kept; so every converge can be
//! rolled back with `sankofa.proxmox.snapshot`.

use anyhow::Context;

use super::shell::Runner;
use crate::pve::api::qemu::Vm;
use crate::pve::api::{Dispatched, snapshot};
use crate::snapshot::plan::prune;

/// The snapshot's name: the prefix and the UTC time as `YYYYmmddHHMMSS`.
pub(super) fn name(prefix: &str, epoch: u64) -> String {
    let digits: String = crate::pve::upid::utc(epoch)
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    format!("{prefix}{digits}")
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The name the snapshot would get now (check mode).
pub(super) fn predicted(prefix: &str) -> String {
    name(prefix, now())
}

/// Takes the snapshot of `vm` and applies the retention; returns the snapshot's name.
pub(super) fn take(
    runner: &mut Runner,
    vm: &Vm,
    prefix: &str,
    keep: u32,
) -> anyhow::Result<String> {
    let snapname = name(prefix, now());
    let on = format!("VM {} on {}", vm.vmid, vm.node);
    let what =
        format!("taking snapshot {snapname} of {on} before changing it (snapshot_before_change)");
    let sent = snapshot::create(&runner.session.client, vm, &snapname, false, None)
        .with_context(|| what.clone())?;
    if let Dispatched::Task(task) = sent {
        runner.session.wait(&task, &what)?;
    }
    // The snapshot is a change of the VM, also when a later step fails (a failed qmsnapshot
    // removes what it made: no change then).
    let _taken = runner.changes.accepted();
    if keep > 0 {
        let listed = snapshot::list(&runner.session.client, vm)
            .with_context(|| format!("listing the snapshots of {on}"))?;
        for old in prune(&listed, prefix, keep, false) {
            let what = format!("removing snapshot {old} of {on} (snapshot_retention)");
            if let Dispatched::Task(task) =
                snapshot::delete(&runner.session.client, vm, &old).with_context(|| what.clone())?
            {
                runner.session.wait(&task, &what)?;
            }
        }
    }
    Ok(snapname)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_prefix_and_the_utc_time() {
        assert_eq!(name("auto-", 1_796_115_012), "auto-20261201085012");
    }
}
