//! `needs(run) -> Vec<Need>`: the privileges a `vm` run's plan needs, on which paths, and
//! for which option or step, built from the table in [`crate::privileges`] (PVE's checks,
//! each cited there and here). Pure: the shell reads what the token holds once and fails
//! before any write when something is missing (`shell::Runner::preflight`).
//!
//! The first plan is all a run knows before it writes, and a new VM's later rounds (its
//! resize, its start, a clone's config) are planned only once it exists: so for a VM to be
//! made, what those rounds will need is counted from the options, as they ask it.

use std::collections::BTreeMap;

use super::desired::{Desired, State};
use super::disk_life::DiskStep;
use super::plan::{Current, Plan, Step};
use super::validate::is_drive_slot;
use crate::privileges::{
    AGENT_READ, ImportSource, NEW_VM_PATH, Need, ROOT, bridge_paths, config_key_privileges,
    import_source, pool_path, storage_path, vm_path,
};

/// The source of a clone, as the shell read it: its id and config.
pub struct CloneSourceConfig<'a> {
    pub vmid: u32,
    pub config: &'a BTreeMap<String, String>,
}

/// What one run knows before its first write.
pub struct Run<'a> {
    pub desired: &'a Desired,
    pub plan: &'a Plan,
    pub cur: Option<&'a Current>,
    pub clone_source: Option<CloneSourceConfig<'a>>,
}

/// The paths a privilege on the VM may be held on: its own, or, for a VM about to be made in
/// a pool, the pool's (API2/Qemu.pm create_vm and clone_vm check `/vms/{vmid}` or
/// `/pool/{pool}`; RPCEnvironment.pm `check_vm_perm` tries the pool first; once made, the VM
/// is a member and `/vms/{vmid}` inherits the pool's roles).
fn vm_paths(run: &Run) -> Vec<String> {
    if let Some(cur) = run.cur {
        return vec![vm_path(cur.vmid)];
    }
    let own = run
        .desired
        .vmid
        .map(vm_path)
        .unwrap_or_else(|| NEW_VM_PATH.to_string());
    let mut paths = vec![own];
    if let Some(pool) = &run.desired.pool {
        paths.push(pool_path(pool));
    }
    paths
}

/// The VM's own path only (checks PVE makes without the pool: a create's tags).
fn own_path(run: &Run) -> String {
    vm_paths(run).remove(0)
}

/// The storage of a volume or of a new disk (`local-lvm:vm-100-disk-0`, `local-lvm:4`).
fn volume_storage(file: &str) -> Option<&str> {
    file.split_once(':')
        .map(|(storage, _)| storage)
        .filter(|s| !s.is_empty())
}

/// A drive value's `file` and its other properties.
fn drive_parts(value: &str) -> (&str, BTreeMap<&str, &str>) {
    let mut parts = value.split(',');
    let first = parts.next().unwrap_or_default();
    let mut props = BTreeMap::new();
    let mut file = first.strip_prefix("file=").unwrap_or(first);
    if first.contains('=') && !first.starts_with("file=") {
        file = "";
        if let Some((k, v)) = first.split_once('=') {
            props.insert(k, v);
        }
    }
    for part in parts {
        if let Some((k, v)) = part.split_once('=') {
            if k == "file" {
                file = v;
            } else {
                props.insert(k, v);
            }
        }
    }
    (file, props)
}

/// What a drive being written needs of its storages (API2/Qemu.pm `$check_storage_access`;
/// pve-storage Storage.pm `check_volume_access`), for the option `because`.
fn drive_storage_needs(run: &Run, slot: &str, value: &str, needs: &mut Vec<Need>) {
    let (file, props) = drive_parts(value);
    let cdrom = props.get("media") == Some(&"cdrom");
    let because = slot.to_string();
    let is_new_disk = file
        .split_once(':')
        .is_some_and(|(_, size)| !size.is_empty() && size.parse::<f64>().is_ok());
    if file.is_empty() || file == "none" || file.ends_with(":cloudinit") || file == "cloudinit" {
        // nothing to check
    } else if cdrom && file == "cdrom" {
        needs.push(Need::one("Sys.Console", ROOT, &because));
    } else if !cdrom && is_new_disk {
        if let Some(storage) = volume_storage(file) {
            needs.push(Need::one(
                "Datastore.AllocateSpace",
                &storage_path(storage),
                &format!("{slot} (a new disk on {storage})"),
            ));
        }
    } else {
        volume_access(run, file, &because, needs);
    }
    if let Some(source) = props.get("import-from") {
        match import_source(source) {
            ImportSource::OwnedBy { vmid } => needs.push(Need::one(
                "VM.Clone",
                &vm_path(vmid),
                &format!("{slot}: import from {source} (a disk of VM {vmid})"),
            )),
            ImportSource::Content { .. } | ImportSource::Path => {
                volume_access(run, source, &format!("{slot}: import from {source}"), needs)
            }
        }
    }
}

/// Storage.pm `check_volume_access` for an existing volume (an ISO, an import, a disk of
/// another VM): `Datastore.Allocate` on its storage does for all; else an ISO or import
/// needs `Datastore.AllocateSpace` or `Datastore.Audit`, another VM's disk
/// `Datastore.Audit` and that VM's `VM.Config.Disk`; an absolute path is root@pam's only.
fn volume_access(run: &Run, volume: &str, because: &str, needs: &mut Vec<Need>) {
    match import_source(volume) {
        ImportSource::Content { storage } => needs.push(Need::any(
            &[
                "Datastore.AllocateSpace",
                "Datastore.Audit",
                "Datastore.Allocate",
            ],
            &[storage_path(&storage)],
            because,
        )),
        ImportSource::OwnedBy { vmid } => {
            let own = run.cur.map(|c| c.vmid).or(run.desired.vmid);
            if own != Some(vmid)
                && let Some(storage) = volume_storage(volume)
            {
                needs.push(Need::any(
                    &["Datastore.Audit", "Datastore.Allocate"],
                    &[storage_path(storage)],
                    because,
                ));
                needs.push(Need::one("VM.Config.Disk", &vm_path(vmid), because));
            }
        }
        // Refused by PVE's die, not a privilege: root@pam only ("Only root can pass
        // arbitrary filesystem paths."); the run's own checks name it.
        ImportSource::Path => {}
    }
}

/// What writing `key: value` needs (API2/Qemu.pm `$check_vm_modify_config_perm`, and for a
/// drive `$check_storage_access` and, on an update, `$check_drive_perms`; `tags`:
/// pve-guest-common GuestHelpers.pm `assert_tag_permissions`; `netN`: `check_bridge_access`).
fn key_needs(run: &Run, key: &str, value: Option<&str>, creating: bool, needs: &mut Vec<Need>) {
    let paths = vm_paths(run);
    let because = match value {
        Some(value) if key == "tags" => format!("tags: {value}"),
        Some(_) => key.to_string(),
        None => format!("removing {key}"),
    };
    if is_drive_slot(key) {
        let value = value.or_else(|| run.cur.and_then(|c| c.config.get(key).map(String::as_str)));
        if !creating {
            let (file, props) = drive_parts(value.unwrap_or_default());
            let cloudinit = file.ends_with(":cloudinit") || file.ends_with("-cloudinit");
            if cloudinit {
                needs.push(Need::any(&["VM.Config.Cloudinit"], &paths, &because));
                needs.push(Need::any(&["VM.Config.CDROM"], &paths, &because));
            } else if props.get("media") == Some(&"cdrom") {
                needs.push(Need::any(&["VM.Config.CDROM"], &paths, &because));
            } else {
                needs.push(Need::any(&["VM.Config.Disk"], &paths, &because));
            }
        }
        if let Some(value) = value.filter(|_| !because.starts_with("removing")) {
            drive_storage_needs(run, key, value, needs);
        }
        return;
    }
    if key == "tags" {
        // assert_tag_permissions: check_vm_perm($vmid, undef, …), the VM's own path; a
        // privileged tag also needs Sys.Modify on /, which only datacenter.cfg tells (a 403
        // is then explained: crate::privileges::explain_refusal).
        needs.push(Need::one("VM.Config.Options", &own_path(run), &because));
        return;
    }
    if let Some(privileges) = config_key_privileges(key) {
        needs.push(Need::any(privileges, &paths, &because));
    }
    if key == "startup" {
        // "special case for startup since it changes host behaviour": check_full on /.
        needs.push(Need::one(
            "Sys.Modify",
            ROOT,
            "startup (PVE treats it as host-wide)",
        ));
    }
    if key.starts_with("net") && config_key_privileges(key).is_some() {
        let mut values: Vec<&str> = value.into_iter().collect();
        // An update checks the NIC's bridge as it is too.
        if let Some(old) = run.cur.and_then(|c| c.config.get(key)) {
            values.push(old);
        }
        for net in values {
            for path in bridge_paths(net) {
                needs.push(Need::one("SDN.Use", &path, &format!("{key} (its bridge)")));
            }
        }
    }
}

/// The storage a disk of the VM is on (for a resize: API2/Qemu.pm resize_vm checks
/// `Datastore.AllocateSpace` on it).
fn disk_storage(run: &Run, slot: &str) -> Option<String> {
    if let Some(value) = run.cur.and_then(|c| c.config.get(slot)) {
        return volume_storage(drive_parts(value).0).map(str::to_string);
    }
    run.desired
        .disks
        .iter()
        .find(|disk| disk.slot == slot)
        .map(|disk| disk.storage.clone())
}

/// What one step needs.
fn step_needs(run: &Run, step: &Step, needs: &mut Vec<Need>) {
    let paths = vm_paths(run);
    match step {
        Step::Create { config, .. } => {
            // create_vm: VM.Allocate on /vms/{vmid} or /pool/{pool}.
            needs.push(Need::any(&["VM.Allocate"], &paths, "create"));
            for (key, value) in config {
                key_needs(run, key, Some(value), true, needs);
            }
        }
        Step::Clone { source, .. } => {
            let Some(src) = &run.clone_source else {
                return;
            };
            let from = format!("clone of VM {}", src.vmid);
            // clone_vm's schema: VM.Clone on the source, VM.Allocate on the new VM or its pool.
            needs.push(Need::one("VM.Clone", &vm_path(src.vmid), &from));
            needs.push(Need::any(&["VM.Allocate"], &paths, &from));
            // $check_storage_access_clone: each disk's storage (or the target storage),
            // a physical CD-ROM Sys.Console; check_bridge_access on the source's NICs.
            for (key, value) in src.config {
                if is_drive_slot(key) {
                    let (file, props) = drive_parts(value);
                    if file.is_empty() || file == "none" {
                        continue;
                    }
                    if props.get("media") == Some(&"cdrom") {
                        if file == "cdrom" {
                            needs.push(Need::one("Sys.Console", ROOT, &from));
                        }
                        continue;
                    }
                    let storage = source
                        .storage
                        .as_deref()
                        .or_else(|| volume_storage(file))
                        .unwrap_or_default();
                    needs.push(Need::one(
                        "Datastore.AllocateSpace",
                        &storage_path(storage),
                        &format!("{from} ({key} on {storage})"),
                    ));
                } else if key.starts_with("net") && config_key_privileges(key).is_some() {
                    for path in bridge_paths(value) {
                        needs.push(Need::one(
                            "SDN.Use",
                            &path,
                            &format!("{from} ({key}'s bridge)"),
                        ));
                    }
                }
            }
        }
        Step::Seed(seed) => {
            // pve-storage API2/Storage/Status.pm upload: Datastore.AllocateTemplate on the
            // storage; the CD-ROM written and the drives taken off, key by key.
            needs.push(Need::one(
                "Datastore.AllocateTemplate",
                &crate::privileges::storage_path(&seed.storage),
                &format!("nocloud: upload of {} to {}", seed.file, seed.storage),
            ));
            key_needs(run, &seed.slot, Some(&seed.drive), false, needs);
            for slot in &seed.delete {
                key_needs(run, slot, None, false, needs);
            }
            // API2/Storage/Content.pm delete: an ISO no VM owns takes Datastore.Allocate.
            for volume in &seed.old_volumes {
                let storage = volume_storage(volume).unwrap_or(&seed.storage);
                needs.push(Need::one(
                    "Datastore.Allocate",
                    &crate::privileges::storage_path(storage),
                    &format!("nocloud: removing the seed {volume} it replaces"),
                ));
            }
        }
        // Two updates: the drive deleted, then the new one added (key by key, as PVE checks
        // them: VM.Config.Disk, Datastore.AllocateSpace on its storage).
        Step::Recreate(recreate) => {
            key_needs(run, &recreate.slot, None, false, needs);
            key_needs(run, &recreate.slot, Some(&recreate.value), false, needs);
        }
        Step::Migrate { target_storage, .. } => {
            needs.push(Need::any(&["VM.Migrate"], &paths, &step.describe()));
            // migrate_vm with targetstorage: VM.Config.Disk, and
            // $check_storage_access_migrate: Datastore.AllocateSpace on the target storage.
            if let Some(storage) = target_storage {
                let because = format!("target_storage: {storage}");
                needs.push(Need::any(&["VM.Config.Disk"], &paths, &because));
                needs.push(Need::one(
                    "Datastore.AllocateSpace",
                    &storage_path(storage),
                    &because,
                ));
            }
        }
        // The template and destroy endpoints' schema: VM.Allocate.
        Step::Template | Step::Destroy { .. } => {
            needs.push(Need::any(&["VM.Allocate"], &paths, &step.describe()))
        }
        Step::Update { set } => {
            for (key, value) in set {
                if key == "delete" {
                    for deleted in value.split(',').filter(|k| !k.is_empty()) {
                        key_needs(run, deleted, None, false, needs);
                    }
                } else if key != "digest" {
                    key_needs(run, key, Some(value), false, needs);
                }
            }
        }
        Step::Resize { slot, .. } => {
            let because = format!("resizing {slot}");
            needs.push(Need::any(&["VM.Config.Disk"], &paths, &because));
            if let Some(storage) = disk_storage(run, slot) {
                needs.push(Need::one(
                    "Datastore.AllocateSpace",
                    &storage_path(&storage),
                    &because,
                ));
            }
        }
        Step::Disk(disk) => disk_step_needs(run, disk, &paths, needs),
        // The power endpoints' schema: VM.PowerMgmt.
        Step::Start | Step::Shutdown { .. } | Step::Stop | Step::Reboot => {
            needs.push(Need::any(&["VM.PowerMgmt"], &paths, &step.describe()))
        }
    }
}

/// What a disk step needs. A move (API2/Qemu.pm move_vm_disk): `VM.Config.Disk` on the VM
/// (its schema) and `Datastore.AllocateSpace` on the target storage (its description; the
/// new volume is allocated there). An unlink (API2/Qemu.pm unlink, update_vm's delete):
/// `VM.Config.Disk` (its schema, and `$check_drive_perms` / the `unusedN` branch), and for
/// each volume it frees `Datastore.AllocateSpace` on its storage (QemuServer.pm
/// `try_deallocate_drive`).
fn disk_step_needs(run: &Run, step: &DiskStep, paths: &[String], needs: &mut Vec<Need>) {
    let because = step.describe();
    needs.push(Need::any(&["VM.Config.Disk"], paths, &because));
    match step {
        DiskStep::Move(moved) => needs.push(Need::one(
            "Datastore.AllocateSpace",
            &storage_path(&moved.to),
            &because,
        )),
        DiskStep::Unlink { keys } => {
            for key in keys {
                let file = run
                    .cur
                    .and_then(|c| c.config.get(key))
                    .map(|value| drive_parts(value).0)
                    .unwrap_or_default();
                if let Some(storage) = volume_storage(file) {
                    needs.push(Need::one(
                        "Datastore.AllocateSpace",
                        &storage_path(storage),
                        &format!("deleting {key} ({file})"),
                    ));
                }
            }
        }
    }
}

/// What the rounds after a create or clone will need, as the options ask: a clone's config
/// and disks are converged on it; an import with a size is resized; a start.
fn new_vm_needs(run: &Run, needs: &mut Vec<Need>) {
    let desired = run.desired;
    let paths = vm_paths(run);
    let cloning = desired.clone.is_some();
    if cloning {
        for (key, value) in &desired.config {
            let value = Some(value.as_str()).filter(|v| !v.is_empty());
            key_needs(run, key, value, false, needs);
        }
        // A clone gets the password a create would have been given.
        if let Some(pw) = desired.create_only.get("cipassword") {
            key_needs(run, "cipassword", Some(pw), false, needs);
        }
        // Its CD-ROMs, written in the round after the clone (the ISO's storage too).
        for (slot, value) in super::cdroms::create_values(&desired.cdroms) {
            key_needs(run, &slot, Some(&value), false, needs);
        }
        // An EFI disk or TPM state its source lacks, added then.
        for slot in desired.fixed.keys() {
            let held = run
                .clone_source
                .as_ref()
                .is_some_and(|source| source.config.contains_key(slot));
            if let (false, Some(value)) = (held, desired.create_only.get(slot)) {
                key_needs(run, slot, Some(value), false, needs);
            }
        }
    }
    for disk in &desired.disks {
        let grows = disk.size.is_some() && (cloning || disk.import_from.is_some());
        if cloning && !disk.cloudinit {
            needs.push(Need::any(&["VM.Config.Disk"], &paths, &disk.slot));
        }
        if grows {
            let because = format!("resizing {}", disk.slot);
            needs.push(Need::any(&["VM.Config.Disk"], &paths, &because));
            if !disk.storage.is_empty() {
                needs.push(Need::one(
                    "Datastore.AllocateSpace",
                    &storage_path(&disk.storage),
                    &because,
                ));
            }
        }
    }
    if let Some(nocloud) = &desired.nocloud {
        // The seed's round after the create: the upload (pve-storage Status.pm upload:
        // Datastore.AllocateTemplate), its CD-ROM, and for a clone the PVE cloud-init drive
        // it may take off (VM.Config.Cloudinit and VM.Config.CDROM, as key_needs says).
        let because = format!("nocloud: the seed uploaded to {}", nocloud.storage);
        needs.push(Need::one(
            "Datastore.AllocateTemplate",
            &storage_path(&nocloud.storage),
            &because,
        ));
        needs.push(Need::any(
            &["VM.Config.CDROM"],
            &paths,
            "nocloud: the seed's CD-ROM",
        ));
        if cloning {
            needs.push(Need::any(
                &["VM.Config.Cloudinit"],
                &paths,
                "nocloud: PVE's cloud-init drive the seed replaces",
            ));
        }
    }
    if matches!(desired.state, State::Started | State::Restarted) {
        needs.push(Need::any(&["VM.PowerMgmt"], &paths, "start"));
    }
    if desired.template {
        needs.push(Need::any(
            &["VM.Allocate"],
            &paths,
            &Step::Template.describe(),
        ));
    }
}

/// Whether the run may regenerate a stopped VM's cloud-init drive (`PUT …/cloudinit`, whose
/// schema checks `VM.Config.Cloudinit`): a cloud-init option is written and the VM is not
/// to run.
fn regenerates_cloudinit(run: &Run, written: &[&str]) -> bool {
    let stays_stopped = match run.desired.state {
        State::Started | State::Restarted | State::Absent => false,
        State::Stopped => true,
        State::Present => run.cur.is_none_or(|c| !c.running),
    };
    stays_stopped
        && written.iter().any(|key| {
            config_key_privileges(key)
                .is_some_and(|privileges| privileges.contains(&"VM.Config.Cloudinit"))
        })
}

/// Everything the run needs, each once, in the order of its steps.
pub fn needs(run: &Run) -> Vec<Need> {
    let desired = run.desired;
    let paths = vm_paths(run);
    let mut needs = Vec::new();
    if run.plan.steps.is_empty() && desired.ha.is_none() {
        return needs;
    }
    // Reading the VM: GET …/config and …/status/current check VM.Audit.
    needs.push(Need::any(&["VM.Audit"], &paths, "reading the VM"));
    for step in &run.plan.steps {
        step_needs(run, step, &mut needs);
    }
    let makes = run
        .plan
        .steps
        .iter()
        .any(|step| matches!(step, Step::Create { .. } | Step::Clone { .. }));
    if makes {
        new_vm_needs(run, &mut needs);
    }
    let written: Vec<&str> = run
        .plan
        .steps
        .iter()
        .flat_map(|step| match step {
            Step::Create { config, .. } => config.iter().map(|(k, _)| k.as_str()).collect(),
            Step::Update { set } => set.iter().map(|(k, _)| k.as_str()).collect(),
            _ => Vec::new(),
        })
        .chain(
            makes
                .then(|| desired.config.keys().map(String::as_str))
                .into_iter()
                .flatten()
                .filter(|_| desired.clone.is_some()),
        )
        .collect();
    if regenerates_cloudinit(run, &written) {
        needs.push(Need::any(
            &["VM.Config.Cloudinit"],
            &paths,
            "regenerating the cloud-init drive",
        ));
    }
    let running_after = match desired.state {
        State::Started | State::Restarted => true,
        State::Present => run.cur.is_some_and(|c| c.running),
        State::Stopped | State::Absent => false,
    };
    if desired.restart_when_needed && running_after && !run.plan.steps.is_empty() {
        needs.push(Need::any(&["VM.PowerMgmt"], &paths, "restart: when_needed"));
    }
    if desired.snapshot_before_change.is_some()
        && run.cur.is_some()
        && !run.plan.steps.is_empty()
        && desired.state != State::Absent
    {
        // POST and DELETE …/snapshot: VM.Snapshot.
        needs.push(Need::any(
            &["VM.Snapshot"],
            &paths,
            "snapshot_before_change",
        ));
    }
    if desired.wait_for_ip.is_some() && desired.state != State::Absent {
        needs.push(Need::any(
            AGENT_READ,
            &paths,
            "wait_for_ip (the guest agent)",
        ));
    }
    if desired.ha.is_some() && desired.state != State::Absent {
        // GET /cluster/ha/resources and /cluster/ha/rules: Sys.Audit on /; their writes
        // (Resources.pm create/update, Rules.pm create_rule/update_rule/delete_rule):
        // Sys.Console on /.
        needs.push(Need::one(
            "Sys.Audit",
            ROOT,
            "ha (reading the HA resources and rules)",
        ));
        needs.push(Need::one("Sys.Console", ROOT, "ha"));
    }
    let mut unique: Vec<Need> = Vec::new();
    for need in needs {
        if !unique.contains(&need) {
            unique.push(need);
        }
    }
    unique
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod disk_life_tests;
