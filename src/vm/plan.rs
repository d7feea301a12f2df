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
            raw: config_raw(&config.raw()),
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

fn config_raw(answer: &Value) -> Value {
    let mut config = answer.clone();
    if let Some(map) = config.as_object_mut() {
        map.remove("digest");
    }
    config
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
                let deleted = set
                    .iter()
                    .find(|(key, _)| key == "delete")
                    .map(|(_, value)| value);
                match (keys.is_empty(), deleted) {
                    (_, None) => format!("update {}", keys.join(", ")),
                    (true, Some(deleted)) => format!("delete {deleted}"),
                    (false, Some(deleted)) => {
                        format!("update {}, delete {deleted}", keys.join(", "))
                    }
                }
            }
            Step::Resize { slot, to, .. } => format!("resize {slot} to {}", format_size(*to)),
            Step::Start => "start".into(),
            Step::Shutdown { .. } => "shut down".into(),
            Step::Stop => "stop".into(),
            Step::Reboot => "reboot".into(),
            Step::Destroy { .. } => "destroy".into(),
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
    // An empty value is not stored (PVE's form decoder drops `key=`).
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

/// True when `a` and `b` are one value of a drive option (`pre-enrolled-keys=1` and `on`).
fn drive_value_eq(slot: &str, key: &str, left: &str, right: &str) -> bool {
    let read = |value: &str| {
        let mut drive = Drive::new(slot, "none").ok()?;
        drive.set(key, value).ok()?;
        drive.get(key).map(str::to_string)
    };
    left == right
        || read(left).is_some_and(|left_value| read(right).as_deref() == Some(left_value.as_str()))
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
        // An empty value asks for no value: it is not sent (PVE would drop `key=` anyway).
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
        // An empty value asks for no value: PVE's form decoder drops `key=`, so it is deleted.
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
    // The EFI vars disk and the TPM state: added when missing, never recreated; a different
    // type or version is reported.
    for (slot, props) in &desired.fixed {
        match cur.config.get(slot) {
            None => {
                let value = desired.create_only.get(slot).cloned().unwrap_or_default();
                planned.before.insert(slot.clone(), String::new());
                planned.after.insert(slot.clone(), value.clone());
                set.push((slot.clone(), value));
            }
            Some(have) => {
                let drive = stored_drive(cur, slot, have)?;
                for (key, want) in props {
                    let now = drive.get_or_default(key).unwrap_or_default();
                    if !drive_value_eq(slot, key, now, want) {
                        planned.notes.push(format!(
                            "VM {} has {slot} with {key}={now}, not {want}: PVE cannot change it in place, so it was left (remove {slot} and run again to recreate it, losing its content)",
                            cur.vmid
                        ));
                    }
                }
            }
        }
    }
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
    if !delete.is_empty() {
        set.push(("delete".into(), delete.join(",")));
    }
    if !set.is_empty() {
        planned.steps.push(Step::Update { set });
    }
    planned.steps.extend(resizes);
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
mod tests {
    use super::*;
    use crate::pve::values::drive::exact_gib;

    /// A real public key (tests/keys, made with ssh-keygen).
    const TEST_KEY: &str = include_str!("../../tests/keys/test_ed25519.pub").trim_ascii_end();

    fn desired() -> Desired {
        let mut config = BTreeMap::new();
        config.insert("name".into(), "web".into());
        config.insert("cores".into(), "2".into());
        config.insert("net0".into(), "virtio,bridge=vmbr0".into());
        config.insert("tags".into(), "a;b".into());
        config.insert("sshkeys".into(), crate::pve::encode::url_encode(TEST_KEY));
        Desired {
            state: State::Present,
            vmid: Some(100),
            name: Some("web".into()),
            node: Some("pve1".into()),
            config,
            create_only: BTreeMap::from([
                ("cipassword".to_string(), "pw".to_string()),
                ("boot".to_string(), "order=scsi0".to_string()),
            ]),
            disks: vec![
                Disk {
                    slot: "scsi0".into(),
                    storage: "local-lvm".into(),
                    import_from: Some("local:import/noble.qcow2".into()),
                    size: Some(20 << 30),
                    format: None,
                    opts: BTreeMap::from([("discard".to_string(), "on".to_string())]),
                    cloudinit: false,
                },
                Disk {
                    slot: "ide2".into(),
                    storage: "local-lvm".into(),
                    import_from: None,
                    size: None,
                    format: None,
                    opts: BTreeMap::new(),
                    cloudinit: true,
                },
            ],
            pool: None,
            purge: true,
            shutdown_timeout: 180,
            force_stop: true,
            restart_when_needed: false,
            wait_for_ip: None,
            clone: None,
            template: false,
            fixed: BTreeMap::new(),
            migrate: false,
            target_storage: None,
            ha: None,
            snapshot_before_change: None,
            snapshot_retention: 0,
        }
    }

    fn current(pairs: &[(&str, &str)], running: bool) -> Current {
        Current {
            vmid: 100,
            node: "pve1".into(),
            config: pairs
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
            raw: Value::Null,
            running,
        }
    }

    fn matching() -> Current {
        current(
            &[
                ("name", "web"),
                ("cores", "2"),
                ("net0", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0"),
                ("tags", "b;a"),
                (
                    "sshkeys",
                    "ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIGp1GhsuLNCCP2XBoyqIvjfAGsZ7Xr9FfmT4HYK3r0F8%20test%40sankofa",
                ),
                ("scsi0", "local-lvm:vm-100-disk-0,discard=on,size=20G"),
                ("ide2", "local-lvm:vm-100-cloudinit,media=cdrom"),
                ("cipassword", "**********"),
                ("digest", "abc"),
            ],
            false,
        )
    }

    #[test]
    fn create_carries_everything_in_one_request() {
        let planned = plan(&desired(), None).unwrap();
        let [Step::Create { node, config, .. }] = planned.steps.as_slice() else {
            panic!("{:?}", planned.steps)
        };
        assert_eq!(node, "pve1");
        let get = |key: &str| {
            config
                .iter()
                .find(|(name, _)| name == key)
                .map(|(_, value)| value.as_str())
        };
        assert_eq!(
            get("scsi0"),
            Some("local-lvm:0,discard=on,import-from=local:import/noble.qcow2")
        );
        assert_eq!(get("ide2"), Some("local-lvm:cloudinit"));
        // Hashed as encrypt_pw would (create_vm stores what it is sent), never plain.
        let hash = get("cipassword").unwrap();
        let salt = hash.strip_prefix("$5$").unwrap().split('$').next().unwrap();
        assert_eq!(crypt::sha256_crypt(b"pw", salt, None), hash);
        assert_eq!(get("boot"), Some("order=scsi0"));
        assert!(planned.before.is_empty() && planned.after.contains_key("scsi0"));
    }

    #[test]
    fn cipassword_stays_plain_for_windows_and_a_hash_is_sent_as_it_is() {
        let mut asked = desired();
        asked.config.insert("ostype".into(), "win11".into());
        let planned = plan(&asked, None).unwrap();
        let [Step::Create { config: params, .. }] = planned.steps.as_slice() else {
            panic!("{:?}", planned.steps)
        };
        assert!(
            params.contains(&("cipassword".into(), "pw".into())),
            "{params:?}"
        );
        let mut asked = desired();
        let hash = crypt::sha256_crypt(b"pw", "saltsalt", None);
        asked.create_only.insert("cipassword".into(), hash.clone());
        let planned = plan(&asked, None).unwrap();
        let [Step::Create { config: params, .. }] = planned.steps.as_slice() else {
            panic!("{:?}", planned.steps)
        };
        assert!(params.contains(&("cipassword".into(), hash)), "{params:?}");
        // An update to an existing Windows VM (ostype not given) keeps it plain too.
        let mut asked = desired();
        asked.config.insert("cipassword".into(), "pw".into());
        let mut cur = matching();
        cur.config.insert("ostype".into(), "win10".into());
        let planned = plan(&asked, Some(&cur)).unwrap();
        assert_eq!(
            planned.steps,
            vec![Step::Update {
                set: vec![("cipassword".into(), "pw".into())]
            }]
        );
    }

    #[test]
    fn an_empty_value_is_a_delete() {
        let mut asked = desired();
        asked.config.insert("description".into(), String::new());
        // Nothing to delete: nothing to do.
        assert_eq!(plan(&asked, Some(&matching())).unwrap().steps, vec![]);
        let mut cur = matching();
        cur.config.insert("description".into(), "old".into());
        let planned = plan(&asked, Some(&cur)).unwrap();
        assert_eq!(
            planned.steps,
            vec![Step::Update {
                set: vec![("delete".into(), "description".into())]
            }]
        );
        assert_eq!(planned.steps[0].describe(), "delete description");
        // At create it is not sent.
        let planned = plan(&asked, None).unwrap();
        let [Step::Create { config: params, .. }] = planned.steps.as_slice() else {
            panic!("{:?}", planned.steps)
        };
        assert!(!params.iter().any(|(key, _)| key == "description"));
    }

    #[test]
    fn matching_vm_needs_nothing() {
        assert_eq!(plan(&desired(), Some(&matching())).unwrap().steps, vec![]);
    }

    #[test]
    fn changes_only_what_differs_and_keeps_the_mac() {
        let mut cur = matching();
        cur.config.insert("cores".into(), "1".into());
        cur.config.insert(
            "net0".into(),
            "virtio=BC:24:11:AA:BB:CC,bridge=vmbr1".into(),
        );
        let planned = plan(&desired(), Some(&cur)).unwrap();
        assert_eq!(
            planned.steps,
            vec![Step::Update {
                set: vec![
                    ("cores".into(), "2".into()),
                    (
                        "net0".into(),
                        "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0".into()
                    )
                ]
            }]
        );
        assert_eq!(planned.before["cores"], "1");
        assert_eq!(planned.after["cores"], "2");
    }

    #[test]
    fn new_disks_are_asked_for_in_exact_gib() {
        assert_eq!(exact_gib(20 << 30), "20");
        assert_eq!(exact_gib(3 << 29), "1.5");
        assert_eq!(exact_gib(1 << 20), "0.0009765625");
        assert_eq!(exact_gib((1 << 30) + 1024), "1.00000095367431640625");
    }

    #[test]
    fn check_mode_sees_the_steps_after_a_create() {
        let mut asked = desired();
        asked.state = State::Started;
        let first = plan(&asked, None).unwrap();
        assert!(matches!(first.steps.as_slice(), [Step::Create { .. }]));
        let after = plan(&asked, Some(&predict_created(&asked, 100, "pve1"))).unwrap();
        let labels: Vec<String> = after.steps.iter().map(Step::describe).collect();
        assert_eq!(labels, vec!["resize scsi0 to 20G", "start"], "{labels:?}");
        asked.state = State::Present;
        asked.disks[0].size = None;
        assert!(
            plan(&asked, Some(&predict_created(&asked, 100, "pve1")))
                .unwrap()
                .steps
                .is_empty()
        );
    }

    #[test]
    fn a_disk_rounded_up_to_lvm_extents_is_neither_shrunk_nor_grown() {
        let mut asked = desired();
        asked.disks[0].size = Some(10001 << 20);
        let mut cur = matching();
        cur.config.insert(
            "scsi0".into(),
            "local-lvm:vm-100-disk-0,discard=on,size=10004M".into(),
        );
        let planned = plan(&asked, Some(&cur)).unwrap();
        assert!(
            !planned
                .steps
                .iter()
                .any(|step| matches!(step, Step::Resize { .. })),
            "{:?}",
            planned.steps
        );
    }

    #[test]
    fn grows_but_never_shrinks_or_reimports() {
        let mut cur = matching();
        cur.config.insert(
            "scsi0".into(),
            "local-lvm:vm-100-disk-0,discard=on,size=2G".into(),
        );
        let planned = plan(&desired(), Some(&cur)).unwrap();
        assert_eq!(
            planned.steps,
            vec![Step::Resize {
                slot: "scsi0".into(),
                from: 2 << 30,
                to: 20 << 30
            }]
        );
        cur.config.insert(
            "scsi0".into(),
            "local-lvm:vm-100-disk-0,discard=on,size=40G".into(),
        );
        assert!(
            plan(&desired(), Some(&cur))
                .unwrap_err()
                .contains("refusing to shrink scsi0 from 40G to 20G")
        );
    }

    #[test]
    fn missing_disk_is_added_through_the_config_task() {
        let mut cur = matching();
        cur.config.remove("scsi0");
        let planned = plan(&desired(), Some(&cur)).unwrap();
        assert_eq!(
            planned.steps,
            vec![Step::Update {
                set: vec![(
                    "scsi0".into(),
                    "local-lvm:0,discard=on,import-from=local:import/noble.qcow2".into()
                )]
            }]
        );
    }

    #[test]
    fn power_states() {
        let mut asked = desired();
        asked.state = State::Started;
        assert_eq!(
            plan(&asked, Some(&matching())).unwrap().steps,
            vec![Step::Start]
        );
        let mut running = matching();
        running.running = true;
        assert_eq!(plan(&asked, Some(&running)).unwrap().steps, vec![]);
        asked.state = State::Stopped;
        assert_eq!(
            plan(&asked, Some(&running)).unwrap().steps,
            vec![Step::Shutdown {
                timeout: 180,
                force: true
            }]
        );
        asked.state = State::Restarted;
        assert_eq!(
            plan(&asked, Some(&running)).unwrap().steps,
            vec![Step::Reboot]
        );
        asked.state = State::Absent;
        assert_eq!(
            plan(&asked, Some(&running)).unwrap().steps,
            vec![Step::Stop, Step::Destroy { purge: true }]
        );
        assert_eq!(plan(&asked, None).unwrap().steps, vec![]);
    }

    #[test]
    fn normalisation() {
        let linux = Guest::default();
        let same = |key: &str, want: &str, have: &str| same(key, want, have, linux).unwrap();
        assert!(same("tags", "a;b", "b,a"));
        assert!(same("memory", "2048", "current=2048"));
        assert!(same("cpu", "host", "cputype=host"));
        assert!(same("agent", "1", "enabled=1,fstrim_cloned_disks=1"));
        assert!(same(
            "ipconfig0",
            "gw=10.0.0.1,ip=10.0.0.5/24",
            "ip=10.0.0.5/24,gw=10.0.0.1"
        ));
        assert!(!same(
            "net0",
            "virtio,bridge=vmbr0,firewall=1",
            "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0"
        ));
        assert!(same(
            "net0",
            "virtio=bc:24:11:aa:bb:cc,bridge=vmbr0",
            "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0"
        ));
        assert_eq!(
            drive_size("local-lvm:vm-100-disk-0,size=3584M"),
            Some(3584 << 20)
        );
    }

    #[test]
    fn a_vm_elsewhere_moves_first_only_when_asked() {
        let mut cur = matching();
        cur.node = "pve2".into();
        cur.running = true;
        cur.config.insert("cores".into(), "1".into());
        // Without migrate: converged where it is.
        let planned = plan(&desired(), Some(&cur)).unwrap();
        assert!(
            !planned
                .steps
                .iter()
                .any(|step| matches!(step, Step::Migrate { .. }))
        );
        let mut asked = desired();
        asked.migrate = true;
        asked.target_storage = Some("local".into());
        let planned = plan(&asked, Some(&cur)).unwrap();
        let labels: Vec<String> = planned.steps.iter().map(Step::describe).collect();
        assert_eq!(
            labels,
            [
                "migrate from pve2 to pve1 (live, disks to local)",
                "update cores"
            ]
        );
        assert_eq!(
            (
                planned.before["node"].as_str(),
                planned.after["node"].as_str()
            ),
            ("pve2", "pve1")
        );
        // A VM to be stopped is shut down first and moves offline.
        asked.state = State::Stopped;
        let labels: Vec<String> = plan(&asked, Some(&cur))
            .unwrap()
            .steps
            .iter()
            .map(Step::describe)
            .collect();
        assert_eq!(
            labels,
            [
                "shut down",
                "migrate from pve2 to pve1 (offline, disks to local)",
                "update cores"
            ]
        );
        // On its node already: nothing moves.
        cur.node = "pve1".into();
        let planned = plan(&asked, Some(&cur)).unwrap();
        assert!(
            !planned
                .steps
                .iter()
                .any(|step| matches!(step, Step::Migrate { .. }))
        );
        assert!(!planned.after.contains_key("node"));
    }

    #[test]
    fn creating_needs_a_node() {
        let mut asked = desired();
        asked.node = None;
        assert!(plan(&asked, None).unwrap_err().contains("node is required"));
    }
}
