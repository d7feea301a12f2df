//! `plan(desired, current) -> steps`: what must happen to turn the VM that exists into the
//! one the options describe. Pure: check mode shows the plan, diff mode renders it, `apply`
//! executes it. PVE's representations are normalised before comparing, so a VM that already
//! matches yields no steps.

use std::collections::BTreeMap;

use serde_json::Value;

use super::desired::{CloneSource, Desired, Disk, State};
use super::encode::format_size;
use crate::pve::answers::{VmConfig, VmStatus};
use crate::pve::values::config::Guest;
use crate::pve::values::drive::volume_format;
use crate::pve::values::machine::is_windows;
use crate::pve::values::{self, Drive, Net, Size, ValueError, crypt};

/// The VM as PVE reports it.
#[derive(Clone, Debug)]
pub struct Current {
    pub vmid: u32,
    pub node: String,
    /// `GET …/config`, every value as a string (`digest` included).
    pub config: BTreeMap<String, String>,
    /// The config exactly as PVE answered it (numbers as numbers), for the result.
    pub raw: Value,
    pub running: bool,
}

impl Current {
    /// From the answers of `GET …/config` and `GET …/status/current`.
    pub fn from_api(vmid: u32, node: &str, config: &VmConfig, status: &VmStatus) -> Current {
        Current {
            vmid,
            node: node.to_string(),
            config: config.strings(),
            raw: config.raw(),
            running: status.running(),
        }
    }

    /// Whether the VM is a template (`template: 1`).
    pub fn is_template(&self) -> bool {
        self.config.get("template").is_some_and(|t| t == "1")
    }

    /// The lock, if the VM is locked (`create`, `backup`, …).
    pub fn lock(&self) -> Option<&str> {
        self.config.get("lock").map(String::as_str)
    }
}

/// One action on the VM.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// `POST /nodes/{node}/qemu` with the whole config, imports included (`qmcreate`), in
    /// `pool` if given.
    Create {
        node: String,
        config: Vec<(String, String)>,
        pool: Option<String>,
    },
    /// `POST /nodes/{node}/qemu/{source}/clone` (`qmclone`), to `node`; the new VM is then
    /// converged like any other.
    Clone {
        node: String,
        source: CloneSource,
    },
    /// `POST …/migrate` (`qmigrate`): the VM moves from `from` to `target`, live when it
    /// runs (`online`, as planned), its local disks with it, onto `target_storage` when
    /// given. What else is planned is planned again on the target.
    Migrate {
        from: String,
        target: String,
        online: bool,
        target_storage: Option<String>,
    },
    /// `POST …/template` (`qmtemplate`): the disks become base volumes, `template: 1`.
    Template,
    /// `POST …/config` (`qmconfig`): set keys (new disks import or allocate inside the task).
    Update {
        set: Vec<(String, String)>,
    },
    /// `PUT …/resize` to an absolute size.
    Resize {
        slot: String,
        from: u64,
        to: u64,
    },
    Start,
    Shutdown {
        timeout: u64,
        force: bool,
    },
    Stop,
    Reboot,
    Destroy {
        purge: bool,
    },
    /// The NoCloud seed (`nocloud`): uploaded unless the storage has it, attached as a CD-ROM
    /// in place of PVE's cloud-init drive and older seeds (`POST …/upload`, `imgcopy`; then
    /// `POST …/config`); old seeds no VM names are removed.
    Seed(Box<super::nocloud::plan::SeedStep>),
    /// `efidisk0` or `tpmstate0` recreated (`force: true`): `POST …/config` deleting it (PVE
    /// keeps the volume as `unusedN`), then another adding the new one.
    Recreate(Box<super::firmware_disks::Recreate>),
    /// A disk moved to another storage, or drives and unused volumes deleted (see
    /// [`super::disk_life`]).
    Disk(super::disk_life::DiskStep),
}

impl Step {
    /// A short description for messages.
    pub fn describe(&self) -> String {
        match self {
            Step::Create { .. } => "create".into(),
            Step::Clone { source, .. } => format!(
                "{} of VM {}",
                match source.full {
                    Some(true) => "full clone",
                    Some(false) => "linked clone",
                    None => "clone",
                },
                source
                    .vmid
                    .map(|v| v.to_string())
                    .or_else(|| source.name.clone())
                    .unwrap_or_default()
            ),
            Step::Migrate {
                from,
                target,
                online,
                target_storage,
            } => format!(
                "migrate from {from} to {target} ({}{})",
                if *online { "live" } else { "offline" },
                target_storage
                    .as_ref()
                    .map(|s| format!(", disks to {s}"))
                    .unwrap_or_default()
            ),
            Step::Template => "convert to template".into(),
            Step::Update { set } => {
                let keys: Vec<&str> = set
                    .iter()
                    .filter(|(key, _)| key != "delete")
                    .map(|(key, _)| key.as_str())
                    .collect();
                // A drive deleted from the config is detached (it becomes unusedN).
                let deleted = set
                    .iter()
                    .find(|(key, _)| key == "delete")
                    .map(|(_, value)| super::disk_life::describe_deleted(value));
                match (keys.is_empty(), deleted) {
                    (_, None) => format!("update {}", keys.join(", ")),
                    (true, Some(deleted)) => deleted,
                    (false, Some(deleted)) => {
                        format!("update {}, {deleted}", keys.join(", "))
                    }
                }
            }
            Step::Resize { slot, to, .. } => format!("resize {slot} to {}", format_size(*to)),
            Step::Start => "start".into(),
            Step::Shutdown { .. } => "shut down".into(),
            Step::Stop => "stop".into(),
            Step::Reboot => "reboot".into(),
            Step::Destroy { .. } => "destroy".into(),
            Step::Seed(seed) => seed.describe(),
            Step::Recreate(recreate) => recreate.describe(),
            Step::Disk(disk) => disk.describe(),
        }
    }
}

/// The steps, and the before/after of what they change (for diff mode).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub before: BTreeMap<String, String>,
    pub after: BTreeMap<String, String>,
    /// What differs and is left as it is (an EFI disk's type, a TPM's version: PVE cannot
    /// change them in place), for warnings.
    pub notes: Vec<String>,
}

/// What a comparison needs to know of the guest: Windows when the `ostype` asked for (or,
/// without one, the VM's) is a Windows one (`windows_version`).
pub fn guest(desired: &Desired, cur: Option<&Current>) -> Guest {
    let ostype = desired
        .config
        .get("ostype")
        .or_else(|| desired.create_only.get("ostype"))
        .or_else(|| cur.and_then(|current| current.config.get("ostype")));
    Guest {
        windows: ostype.is_some_and(|o| is_windows(o)),
    }
}

/// True when PVE's `have` is what `want` asks for, both read as the key's type
/// (`pve::values::config::same`); a `want` PVE would refuse is an error naming the key.
fn same(key: &str, want: &str, have: &str, guest: Guest) -> Result<bool, String> {
    values::config::same(key, want, have, guest).map_err(|e| format!("{key}: {e}"))
}

/// The value to send for a changed key; a NIC keeps its current MAC unless one is asked for.
fn value_to_set(key: &str, want: &str, have: Option<&str>) -> String {
    if key.starts_with("net")
        && let (Ok(want_net), Some(Ok(have_net))) =
            (want.parse::<Net>(), have.map(Net::parse_stored))
    {
        return want_net.keeping_mac_of(&have_net).to_string();
    }
    want.to_string()
}

/// How much larger than asked a disk may be and still count as the asked size: LVM rounds a
/// new or imported volume up to whole extents (4 MiB by default), so a disk asked for at
/// `10001M` is `10004M` and must neither be "shrunk" nor resized again.
pub const ALLOCATION_SLACK: u64 = 4 << 20;

/// The size in bytes of a drive value's `size=` (`2G`, `3584M`, bytes), read as
/// `parse_drive` reads it.
pub fn drive_size(value: &str) -> Option<u64> {
    Drive::parse_stored_any(value).ok()?.size().map(Size::bytes)
}

/// The drive that creates a disk: an import, a new volume, or a cloud-init drive, with its
/// options, as `print_drive` prints it.
pub fn new_disk(disk: &Disk) -> Result<Drive, String> {
    let bad = |e: ValueError| format!("{}: {e}", disk.slot);
    if disk.cloudinit {
        return Drive::cloudinit(&disk.slot, &disk.storage).map_err(bad);
    }
    let mut drive = match (&disk.import_from, disk.size) {
        (Some(src), _) => Drive::import(&disk.slot, &disk.storage, src),
        (None, Some(bytes)) => Drive::allocate(&disk.slot, &disk.storage, Size(bytes)),
        (None, None) => Drive::allocate(&disk.slot, &disk.storage, Size::gib(1)),
    }
    .map_err(bad)?;
    if let Some(format) = &disk.format {
        drive.set("format", format).map_err(bad)?;
    }
    for (key, value) in &disk.opts {
        drive.set(key, value).map_err(bad)?;
    }
    Ok(drive)
}

/// [`new_disk`] as the value sent.
pub fn new_disk_value(disk: &Disk) -> Result<String, String> {
    new_disk(disk).map(|drive| drive.to_string())
}

fn describe_disk(disk: &Disk) -> String {
    let mut text = if disk.cloudinit {
        format!("cloud-init drive on {}", disk.storage)
    } else if let Some(src) = &disk.import_from {
        format!("import {src} to {}", disk.storage)
    } else {
        format!("new disk on {}", disk.storage)
    };
    if let Some(bytes) = disk.size {
        text.push_str(&format!(", {}", format_size(bytes)));
    }
    for (key, value) in &disk.opts {
        text.push_str(&format!(", {key}={value}"));
    }
    text
}

/// The VM as a create of `d` leaves it, for check mode to plan the steps that would follow
/// (resize, start): the desired config, each disk with its options, stopped. A new disk has
/// its asked size; an imported disk's size is that of the image, which only the import tells,
/// so it counts as smaller than any asked size (the resize is then reported as "at most").
pub fn predict_created(desired: &Desired, vmid: u32, node: &str) -> Current {
    let mut config: BTreeMap<String, String> = desired
        .config
        .iter()
        .chain(desired.create_only.iter())
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    // An empty value is not sent at create (the plan leaves it out).
    config.retain(|_, value| !value.is_empty());
    for (i, disk) in desired.disks.iter().enumerate() {
        let predicted = || -> Result<Drive, ValueError> {
            if disk.cloudinit {
                let mut drive =
                    Drive::new(&disk.slot, &format!("{}:vm-{vmid}-cloudinit", disk.storage))?;
                drive.set("media", "cdrom")?;
                return Ok(drive);
            }
            let size = match (&disk.import_from, disk.size) {
                (Some(_), _) => 0,
                (None, Some(bytes)) => bytes,
                (None, None) => 1 << 30,
            };
            let mut drive =
                Drive::new(&disk.slot, &format!("{}:vm-{vmid}-disk-{i}", disk.storage))?;
            for (key, value) in &disk.opts {
                drive.set(key, value)?;
            }
            drive.set("size", &Size(size).to_string())?;
            Ok(drive)
        };
        // The options were checked when the create was planned; a drive that cannot be
        // predicted counts as missing, so check mode plans to add it.
        if let Ok(drive) = predicted() {
            config.insert(disk.slot.clone(), drive.to_string());
        }
    }
    Current {
        vmid,
        node: node.to_string(),
        raw: Value::Null,
        config,
        running: false,
    }
}

/// The value sent for `key`: `cipassword` hashed as PVE's `encrypt_pw` would hash it, so
/// it is never stored in plain (`create_vm` stores what it is sent; `update_vm_api` hashes),
/// except for a Windows guest, whose cloudbase-init needs it plain and which PVE keeps plain;
/// a value that is already a crypt hash is sent as it is, as PVE keeps it.
fn sendable(key: &str, value: &str, guest: Guest) -> Result<String, String> {
    if key != "cipassword" || guest.windows || crypt::is_hashed(value) {
        return Ok(value.to_string());
    }
    let hash = crypt::encrypt_pw(value).map_err(|e| format!("cipassword: {e}"))?;
    crate::ansible::protocol::register_secret(&hash);
    Ok(hash)
}

/// A drive of the VM, read as `parse_drive` reads its slot's format.
fn stored_drive(cur: &Current, slot: &str, have: &str) -> Result<Drive, String> {
    Drive::parse_stored(slot, have)
        .or_else(|_| Drive::parse_stored_any(have))
        .map_err(|err| {
            format!(
                "VM {} has {slot}: {have}, which is not a drive PVE reads ({err})",
                cur.vmid
            )
        })
}

/// Plans the steps from the current VM (or none) to the desired one.
pub fn plan(desired: &Desired, cur: Option<&Current>) -> Result<Plan, String> {
    let mut planned = Plan::default();
    let Some(cur) = cur else {
        if desired.state == State::Absent {
            return Ok(planned);
        }
        if let Some(source) = &desired.clone {
            // Without `node`, the clone goes to its source's node (empty: decided then).
            let node = desired.node.clone().unwrap_or_default();
            planned.after.insert(
                "clone of".into(),
                Step::Clone {
                    node: node.clone(),
                    source: source.clone(),
                }
                .describe(),
            );
            planned.steps.push(Step::Clone {
                node,
                source: source.clone(),
            });
            return Ok(planned);
        }
        let node = desired
            .node
            .clone()
            .ok_or("node is required to create a VM (no VM with that vmid or name exists)")?;
        let guest = guest(desired, None);
        let mut config: Vec<(String, String)> = Vec::new();
        // An empty value asks for no value: it is not sent (PVE's form decoder reads `key=` as
        // '', which it stores as a blank string key and refuses for a boolean or integer).
        for (key, value) in desired
            .config
            .iter()
            .chain(desired.create_only.iter())
            .filter(|(_, value)| !value.is_empty())
        {
            config.push((key.clone(), sendable(key, value, guest)?));
            planned.after.insert(key.clone(), value.clone());
        }
        for disk in &desired.disks {
            config.push((disk.slot.clone(), new_disk_value(disk)?));
            planned.after.insert(disk.slot.clone(), describe_disk(disk));
        }
        for (slot, value) in super::cdroms::create_values(&desired.cdroms) {
            planned.after.insert(slot.clone(), value.clone());
            config.push((slot, value));
        }
        if let Some(wanted) = &desired.nocloud {
            super::nocloud::plan::describe_new(wanted, &mut planned.after);
        }
        planned.steps.push(Step::Create {
            node,
            config,
            pool: desired.pool.clone(),
        });
        return Ok(planned);
    };

    if desired.state == State::Absent {
        if cur.running {
            planned.steps.push(Step::Stop);
        }
        planned.steps.push(Step::Destroy {
            purge: desired.purge,
        });
        planned.before.insert(
            "state".into(),
            if cur.running { "running" } else { "stopped" }.into(),
        );
        planned.after.insert("state".into(), "absent".into());
        return Ok(planned);
    }

    let guest = guest(desired, Some(cur));
    let mut set = Vec::new();
    let mut delete = Vec::new();
    for (key, want) in &desired.config {
        let have = cur.config.get(key);
        // An empty value asks for no value, so it is deleted: `key=` would be '' to PVE, a
        // blank string key (`key: `, read back " "), a 400 for a boolean or integer.
        if want.is_empty() {
            if let Some(have) = have {
                delete.push(key.clone());
                planned.before.insert(key.clone(), have.clone());
                planned.after.insert(key.clone(), String::new());
            }
            continue;
        }
        if let Some(have) = have
            && same(key, want, have, guest)?
        {
            continue;
        }
        let value = value_to_set(key, want, have.map(String::as_str));
        set.push((key.clone(), sendable(key, &value, guest)?));
        planned
            .before
            .insert(key.clone(), have.cloned().unwrap_or_default());
        planned.after.insert(key.clone(), want.clone());
    }
    // The EFI vars disk and the TPM state: added when missing; one that differs is refused,
    // or recreated with `force: true`.
    let existing = super::firmware_disks::Existing {
        vmid: cur.vmid,
        config: &cur.config,
        running: cur.running,
    };
    let recreate = super::firmware_disks::plan_fixed(
        desired,
        existing,
        &mut set,
        &mut planned.before,
        &mut planned.after,
        &mut planned.notes,
    )?;
    super::cdroms::plan_media(
        &desired.cdroms,
        (cur.vmid, &cur.config),
        &mut set,
        &mut delete,
        &mut planned.before,
        &mut planned.after,
    )?;
    // Disks moved, detached, deleted; unused volumes removed.
    let life = super::disk_life::plan(desired, cur.vmid, &cur.config, cur.is_template())?;
    delete.extend(life.detach.iter().cloned());
    planned.before.extend(life.before.clone());
    planned.after.extend(life.after.clone());
    planned.notes.extend(life.notes.iter().cloned());
    let mut resizes = Vec::new();
    for disk in &desired.disks {
        let Some(have) = cur.config.get(&disk.slot) else {
            if disk.storage.is_empty() {
                return Err(format!(
                    "{} is not in VM {}: give disks[].storage to add it",
                    disk.slot, cur.vmid
                ));
            }
            set.push((disk.slot.clone(), new_disk_value(disk)?));
            planned.before.insert(disk.slot.clone(), String::new());
            planned.after.insert(disk.slot.clone(), describe_disk(disk));
            continue;
        };
        let drive = stored_drive(cur, &disk.slot, have)?;
        if disk.cloudinit {
            if !drive.is_cloudinit() {
                return Err(format!(
                    "{} holds {have:?}, not a cloud-init drive; choose another cloudinit_slot",
                    disk.slot
                ));
            }
            continue;
        }
        if drive.is_cdrom() {
            return Err(format!(
                "{} is a CD-ROM drive ({have}); choose another slot for the disk",
                disk.slot
            ));
        }
        // The format asked for is the new volume's; PVE keeps none in the drive (create_disks
        // drops `format=`) and an import onto a storage that cannot hold it gets the
        // storage's default, so the volume's own format is what the VM has: a different one
        // is reported, never "changed" (PVE converts a disk only by moving it).
        if let (Some(want), Some(have_format)) = (&disk.format, volume_format(drive.file()))
            && want != have_format
            && !life.moves(&disk.slot)
        {
            planned.notes.push(format!(
                "VM {} has {} as a {have_format} volume ({}), not {want}: PVE keeps a disk's format (it makes the storage's own where that cannot hold {want}), so it was left (move the disk with a target format to convert it)",
                cur.vmid,
                disk.slot,
                drive.file()
            ));
        }
        // Drive options: change only those asked for, keep the volume and the rest.
        let mut asked =
            Drive::new(&disk.slot, drive.file()).map_err(|e| format!("{}: {e}", disk.slot))?;
        for (key, value) in &disk.opts {
            asked
                .set(key, value)
                .map_err(|e| format!("{}: {e}", disk.slot))?;
        }
        if !drive.differing_options(&asked).is_empty() {
            let value = drive
                .merged(&asked)
                .map_err(|e| format!("{}: {e}", disk.slot))?
                .to_string();
            planned.before.insert(disk.slot.clone(), have.clone());
            planned.after.insert(disk.slot.clone(), value.clone());
            set.push((disk.slot.clone(), value));
        }
        if let (Some(want), Some(now)) = (disk.size, drive.size().map(Size::bytes)) {
            if want < now && now - want >= ALLOCATION_SLACK {
                return Err(format!(
                    "refusing to shrink {} from {} to {}: PVE cannot shrink disks (raise disks[].size or leave it)",
                    disk.slot,
                    format_size(now),
                    format_size(want)
                ));
            }
            if want > now {
                resizes.push(Step::Resize {
                    slot: disk.slot.clone(),
                    from: now,
                    to: want,
                });
                planned
                    .before
                    .insert(format!("{}.size", disk.slot), format_size(now));
                planned
                    .after
                    .insert(format!("{}.size", disk.slot), format_size(want));
            }
        }
    }
    check_balloon(cur, &set)?;
    if let Some(boot) = boot_for_added_disks(desired, cur, &set) {
        planned.before.insert(
            "boot".into(),
            cur.config.get("boot").cloned().unwrap_or_default(),
        );
        planned.after.insert("boot".into(), boot.clone());
        set.push(("boot".into(), boot));
    }
    // The NoCloud seed of the config as this update leaves it, before the VM starts.
    let seed = match &desired.nocloud {
        Some(wanted) if !cur.is_template() => {
            let config = super::nocloud::plan::after_update(&cur.config, &set, &delete);
            super::nocloud::plan::plan_seed(
                wanted,
                cur.vmid,
                &config,
                &mut planned.before,
                &mut planned.after,
            )?
        }
        _ => None,
    };
    if !delete.is_empty() {
        set.push(("delete".into(), delete.join(",")));
    }
    planned
        .steps
        .extend(recreate.into_iter().map(|r| Step::Recreate(Box::new(r))));
    if !set.is_empty() {
        planned.steps.push(Step::Update { set });
    }
    planned.steps.extend(resizes);
    planned.steps.extend(life.steps.into_iter().map(Step::Disk));
    if let Some(seed) = seed {
        planned.steps.push(Step::Seed(Box::new(seed)));
    }
    let power = match (desired.state, cur.running) {
        (State::Started, false) => Some(Step::Start),
        (State::Stopped, true) if desired.shutdown_timeout == 0 => Some(Step::Stop),
        (State::Stopped, true) => Some(Step::Shutdown {
            timeout: desired.shutdown_timeout,
            force: desired.force_stop,
        }),
        (State::Restarted, true) => Some(Step::Reboot),
        (State::Restarted, false) => Some(Step::Start),
        _ => None,
    };
    if let Some(step) = power {
        planned.before.insert(
            "state".into(),
            if cur.running { "running" } else { "stopped" }.into(),
        );
        planned.after.insert(
            "state".into(),
            if step == Step::Stop || matches!(step, Step::Shutdown { .. }) {
                "stopped"
            } else {
                "running"
            }
            .into(),
        );
        planned.steps.push(step);
    }
    if desired.template && !cur.is_template() {
        let stops = planned
            .steps
            .iter()
            .any(|step| matches!(step, Step::Stop | Step::Shutdown { .. }));
        if cur.running && !stops {
            return Err(format!(
                "VM {} is running, and a template cannot run: give state: stopped to shut it down and convert it",
                cur.vmid
            ));
        }
        planned.before.insert("template".into(), "0".into());
        planned.after.insert("template".into(), "1".into());
        planned.steps.push(Step::Template);
    }
    if desired.migrate
        && let Some(target) = desired.node.as_ref().filter(|node| **node != cur.node)
    {
        plan_migration(&mut planned, cur, target, desired.target_storage.as_deref());
    }
    Ok(planned)
}

/// Refuses an update that sends `memory` or `balloon` and leaves the balloon's minimum above
/// the memory, as `update_vm_api` refuses it ("balloon value too large (must be smaller than
/// assigned memory)"), before it is sent: each side is what the update sends, else what the
/// VM has.
fn check_balloon(cur: &Current, set: &[(String, String)]) -> Result<(), String> {
    let sent = |key: &str| set.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    if sent("memory").is_none() && sent("balloon").is_none() {
        return Ok(());
    }
    let value = |key: &str| sent(key).or_else(|| cur.config.get(key).map(String::as_str));
    let memory = value("memory")
        .and_then(|m| m.parse::<values::Memory>().ok())
        .and_then(|m| m.main().and_then(|current| current.parse::<u64>().ok()))
        .unwrap_or(512);
    let balloon = value("balloon")
        .and_then(|b| b.parse::<u64>().ok())
        .unwrap_or(0);
    if balloon > memory {
        return Err(format!(
            "balloon ({balloon} MiB) must not be larger than memory ({memory} MiB) of VM {}: PVE refuses it (balloon value too large); lower balloon or raise memory",
            cur.vmid
        ));
    }
    Ok(())
}

/// The boot order a create would have given (the first disk), for an update that adds that
/// disk to a VM without a boot device. Such a VM has `boot: ` (PVE's `print_bootorder` of
/// nothing, answered as " "), and PVE puts no disk an update adds into it (it appends only
/// CD-ROMs to an order that lists devices), so without this the VM would boot from nothing.
/// `None` when `boot` is asked for, or the VM has a boot order, or the disk is not added now.
fn boot_for_added_disks(
    desired: &Desired,
    cur: &Current,
    set: &[(String, String)],
) -> Option<String> {
    if desired.config.contains_key("boot") {
        return None;
    }
    let boot = desired.create_only.get("boot")?;
    let blank = cur.config.get("boot").is_some_and(|b| b.trim().is_empty());
    let devices = boot.parse::<values::Boot>().ok()?;
    let added = devices
        .devices()?
        .iter()
        .all(|device| set.iter().any(|(key, _)| key == device) && !cur.config.contains_key(device));
    (blank && added).then(|| boot.clone())
}

/// Puts the move to `target` first (after a shutdown the run asks for, so a VM to be stopped
/// moves offline): the steps after it are planned again on the target, where the VM is read
/// afresh.
fn plan_migration(plan: &mut Plan, cur: &Current, target: &str, target_storage: Option<&str>) {
    let stopping = plan
        .steps
        .iter()
        .position(|step| matches!(step, Step::Stop | Step::Shutdown { .. }));
    let mut steps = Vec::new();
    if let Some(at) = stopping {
        steps.push(plan.steps.remove(at));
    }
    steps.push(Step::Migrate {
        from: cur.node.clone(),
        target: target.to_string(),
        online: cur.running && stopping.is_none(),
        target_storage: target_storage.map(str::to_string),
    });
    steps.append(&mut plan.steps);
    plan.steps = steps;
    plan.before.insert("node".into(), cur.node.clone());
    plan.after.insert("node".into(), target.to_string());
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod disk_life_tests;
