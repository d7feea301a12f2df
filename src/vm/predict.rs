//! Check mode's prediction, a pure function beside [`super::plan`]: the steps a real run
//! would take (a create followed by what the created VM would still need), and what would
//! wait for a restart, without a request beyond the reads the caller made.

use super::desired::Desired;
use super::guest;
use super::plan::{Current, Plan, Step, plan, predict_created};

/// What a real run would do.
pub struct Prediction {
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// The keys that would wait for a restart of a running VM, sorted, each once.
    pub restart_keys: Vec<String>,
    /// Whether the VM would still run at the end (no stop, shutdown or destroy planned).
    pub stays_running: bool,
    /// Whether a disk that is imported would be resized (then only if the image is smaller).
    pub imports_resized: bool,
}

/// Predicts a run from its first plan. `untaken` is, for a running VM, what it has not
/// taken yet: (pending keys, cloud-init keys), as [`super::followup`] reads them.
pub fn predict(
    desired: &Desired,
    cur: Option<&Current>,
    first: &Plan,
    untaken: Option<(Vec<String>, Vec<String>)>,
) -> Result<Prediction, String> {
    // A create is followed by what the real run does next (resize, start): plan those
    // against the VM the create would leave.
    let mut steps = first.steps.clone();
    if let [Step::Create { node, .. }] = first.steps.as_slice() {
        let predicted = predict_created(desired, desired.vmid.unwrap_or(0), node);
        let mut effective = desired.clone();
        effective.config.remove("cipassword");
        let then = plan(&effective, Some(&predicted))?;
        steps.extend(then.steps);
    }
    // On a running VM: what would wait for a restart (what is pending already, and what the
    // planned update may not apply at once; a real run reads PVE's answer instead).
    let mut restart_keys: Vec<String> = Vec::new();
    if let (Some(current), Some((pending, cloudinit))) = (cur.filter(|c| c.running), untaken) {
        restart_keys.extend(pending);
        restart_keys.extend(cloudinit);
        for step in &steps {
            // A recreated EFI disk or TPM state waits for the next start, as an added one does.
            if let Step::Recreate(recreate) = step {
                restart_keys.push(recreate.slot.clone());
            }
            // A new seed reaches the guest at its next boot only.
            if let Step::Seed(_) = step {
                restart_keys.push("nocloud".into());
            }
            if let Step::Update { set } = step {
                // A removed ide/sata drive, EFI disk or TPM state waits for the next start
                // (qemu-server vmconfig_hotplug_pending skips them when it deletes).
                restart_keys.extend(
                    set.iter()
                        .filter(|(k, _)| k == "delete")
                        .flat_map(|(_, slots)| slots.split(','))
                        .filter(|slot| {
                            slot.starts_with("ide")
                                || slot.starts_with("sata")
                                || *slot == "efidisk0"
                                || *slot == "tpmstate0"
                        })
                        .map(str::to_string),
                );
                restart_keys.extend(
                    set.iter()
                        .map(|(k, _)| k)
                        .filter(|k| *k != "delete" && guest::may_need_restart(k, &current.config))
                        .cloned(),
                );
            }
        }
        restart_keys.sort();
        restart_keys.dedup();
    }
    let stays_running = !steps.iter().any(|step| {
        matches!(
            step,
            Step::Stop | Step::Shutdown { .. } | Step::Destroy { .. }
        )
    });
    if !restart_keys.is_empty() && desired.restart_when_needed && stays_running {
        steps.push(Step::Shutdown {
            timeout: desired.shutdown_timeout,
            force: desired.force_stop,
        });
        steps.push(Step::Start);
    }
    let imports_resized = steps.iter().any(|step| {
        matches!(step, Step::Resize { slot, .. }
            if desired.disks.iter().any(|k| k.slot == *slot && k.import_from.is_some()))
    });
    Ok(Prediction {
        steps,
        restart_keys,
        stays_running,
        imports_resized,
    })
}
