//! `plan(desired, current) -> steps`: what must happen to turn the VM that exists into the
//! one the options describe. Pure: check mode shows the plan, diff mode renders it, `apply`
//! executes it. PVE's representations are normalised before comparing, so a VM that already
//! matches yields no steps.

use std::collections::BTreeMap;

use serde_json::Value;

use super::desired::{CloneSource, Desired, Disk, State};
use super::encode::format_size;
use crate::pve::answers::{VmConfig, VmStatus};
use crate::pve::encode::url_decode;

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

fn config_raw(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("digest");
    }
    v
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
            Step::Template => "convert to template".into(),
            Step::Update { set } => format!(
                "update {}",
                set.iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
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

/// Splits a property string into its leading value and `key=value` pairs.
fn prop(s: &str) -> (String, BTreeMap<String, String>) {
    let mut head = String::new();
    let mut kv = BTreeMap::new();
    for (i, part) in s.split(',').enumerate() {
        match part.split_once('=') {
            Some((k, v)) if !(i == 0 && is_nic_model(k)) => {
                kv.insert(k.to_string(), v.to_string());
            }
            _ if i == 0 => head = part.to_string(),
            _ => {}
        }
    }
    (head, kv)
}

fn is_nic_model(k: &str) -> bool {
    [
        "virtio",
        "e1000",
        "e1000e",
        "rtl8139",
        "vmxnet3",
        "e1000-82540em",
        "e1000-82544gc",
        "e1000-82545em",
        "i82551",
        "i82557b",
        "i82559er",
        "ne2k_isa",
        "ne2k_pci",
        "pcnet",
    ]
    .contains(&k)
}

/// Splits a NIC value into (model, mac, other keys).
fn nic(s: &str) -> (String, Option<String>, BTreeMap<String, String>) {
    let (head, kv) = prop(s);
    match head.split_once('=') {
        Some((m, mac)) => (m.to_string(), Some(mac.to_ascii_uppercase()), kv),
        None => (head, None, kv),
    }
}

/// The value with a leading `key=` of a property string's default key removed (`cputype=host` → `host`).
fn strip_default_key<'a>(v: &'a str, key: &str) -> &'a str {
    v.strip_prefix(key)
        .and_then(|r| r.strip_prefix('='))
        .unwrap_or(v)
}

fn words(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s
        .split([';', ',', ' '])
        .filter(|x| !x.is_empty())
        .map(|x| x.to_ascii_lowercase())
        .collect();
    v.sort();
    v.dedup();
    v
}

/// True when PVE's `have` means what `want` asks for.
pub fn same(key: &str, want: &str, have: &str) -> bool {
    match key {
        "tags" => words(want) == words(have),
        "nameserver" => want.split_whitespace().eq(have.split_whitespace()),
        "sshkeys" => {
            let lines = |s: &str| {
                url_decode(s)
                    .lines()
                    .map(|l| l.trim().to_string())
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
            };
            lines(want) == lines(have)
        }
        "memory" => strip_default_key(want, "current") == strip_default_key(have, "current"),
        "cpu" => strip_default_key(want, "cputype") == strip_default_key(have, "cputype"),
        "vga" | "machine" => strip_default_key(want, "type") == strip_default_key(have, "type"),
        "agent" => {
            strip_default_key(want, "enabled")
                == strip_default_key(have, "enabled")
                    .split(',')
                    .next()
                    .unwrap_or("")
        }
        "description" => want.trim_end() == have.trim_end(),
        k if k.starts_with("net") => {
            let (wm, wmac, wkv) = nic(want);
            let (hm, hmac, hkv) = nic(have);
            wm == hm && (wmac.is_none() || wmac == hmac) && wkv == hkv
        }
        k if k.starts_with("ipconfig") => {
            prop(&format!(",{want}")).1 == prop(&format!(",{have}")).1
        }
        _ => want == have,
    }
}

/// The value to send for a changed key; a NIC keeps its current MAC unless one is asked for.
fn value_to_set(key: &str, want: &str, have: Option<&str>) -> String {
    if key.starts_with("net")
        && let Some(h) = have
    {
        let (wm, wmac, _) = nic(want);
        let (_, hmac, _) = nic(h);
        if wmac.is_none()
            && let Some(mac) = hmac
        {
            let rest = want
                .split_once(',')
                .map(|(_, r)| format!(",{r}"))
                .unwrap_or_default();
            return format!("{wm}={mac}{rest}");
        }
    }
    want.to_string()
}

/// How much larger than asked a disk may be and still count as the asked size: LVM rounds a
/// new or imported volume up to whole extents (4 MiB by default), so a disk asked for at
/// `10001M` is `10004M` and must neither be "shrunk" nor resized again.
pub const ALLOCATION_SLACK: u64 = 4 << 20;

/// The size in bytes of a drive value's `size=` (`2G`, `3584M`, bytes).
pub fn drive_size(value: &str) -> Option<u64> {
    let s = prop(value).1.get("size")?.clone();
    let (num, mult) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1u64 << 10),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'G' => (&s[..s.len() - 1], 1 << 30),
        'T' => (&s[..s.len() - 1], 1 << 40),
        _ => (s.as_str(), 1),
    };
    num.parse::<f64>()
        .ok()
        .map(|n| (n * mult as f64).round() as u64)
}

/// The value that creates a disk: an import, a new volume, or a cloud-init drive.
pub fn new_disk_value(d: &Disk) -> String {
    if d.cloudinit {
        return format!("{}:cloudinit", d.storage);
    }
    let mut out = match (&d.import_from, d.size) {
        (Some(src), _) => format!("{}:0,import-from={src}", d.storage),
        (None, Some(bytes)) => format!("{}:{}", d.storage, exact_gib(bytes)),
        (None, None) => format!("{}:1", d.storage),
    };
    if let Some(f) = &d.format {
        out.push_str(&format!(",format={f}"));
    }
    for (k, v) in &d.opts {
        out.push_str(&format!(",{k}={v}"));
    }
    out
}

/// Bytes as GiB in exact decimal (`1.5`, `0.0009765625`): a new disk is asked for as
/// `storage:<GiB>`, and any whole number of KiB is a finite decimal of GiB.
pub fn exact_gib(bytes: u64) -> String {
    let whole = bytes >> 30;
    let mut frac = bytes & ((1 << 30) - 1);
    if frac == 0 {
        return whole.to_string();
    }
    let mut out = format!("{whole}.");
    while frac != 0 {
        frac *= 10;
        out.push(char::from(b'0' + (frac >> 30) as u8));
        frac &= (1 << 30) - 1;
    }
    out
}

fn describe_disk(d: &Disk) -> String {
    let mut s = if d.cloudinit {
        format!("cloud-init drive on {}", d.storage)
    } else if let Some(src) = &d.import_from {
        format!("import {src} to {}", d.storage)
    } else {
        format!("new disk on {}", d.storage)
    };
    if let Some(b) = d.size {
        s.push_str(&format!(", {}", format_size(b)));
    }
    for (k, v) in &d.opts {
        s.push_str(&format!(", {k}={v}"));
    }
    s
}

/// The VM as a create of `d` leaves it, for check mode to plan the steps that would follow
/// (resize, start): the desired config, each disk with its options, stopped. A new disk has
/// its asked size; an imported disk's size is that of the image, which only the import tells,
/// so it counts as smaller than any asked size (the resize is then reported as "at most").
pub fn predict_created(d: &Desired, vmid: u32, node: &str) -> Current {
    let mut config: BTreeMap<String, String> = d
        .config
        .iter()
        .chain(d.create_only.iter())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (i, disk) in d.disks.iter().enumerate() {
        let value = if disk.cloudinit {
            format!("{}:vm-{vmid}-cloudinit,media=cdrom", disk.storage)
        } else {
            let size = match (&disk.import_from, disk.size) {
                (Some(_), _) => 0,
                (None, Some(b)) => b,
                (None, None) => 1 << 30,
            };
            std::iter::once(format!("{}:vm-{vmid}-disk-{i}", disk.storage))
                .chain(disk.opts.iter().map(|(k, v)| format!("{k}={v}")))
                .chain(std::iter::once(format!("size={size}")))
                .collect::<Vec<_>>()
                .join(",")
        };
        config.insert(disk.slot.clone(), value);
    }
    Current {
        vmid,
        node: node.to_string(),
        raw: Value::Null,
        config,
        running: false,
    }
}

/// Plans the steps from the current VM (or none) to the desired one.
pub fn plan(d: &Desired, cur: Option<&Current>) -> Result<Plan, String> {
    let mut p = Plan::default();
    let Some(cur) = cur else {
        if d.state == State::Absent {
            return Ok(p);
        }
        if let Some(source) = &d.clone {
            // Without `node`, the clone goes to its source's node (empty: decided then).
            let node = d.node.clone().unwrap_or_default();
            p.after.insert(
                "clone of".into(),
                Step::Clone {
                    node: node.clone(),
                    source: source.clone(),
                }
                .describe(),
            );
            p.steps.push(Step::Clone {
                node,
                source: source.clone(),
            });
            return Ok(p);
        }
        let node = d
            .node
            .clone()
            .ok_or("node is required to create a VM (no VM with that vmid or name exists)")?;
        let mut config: Vec<(String, String)> = Vec::new();
        for (k, v) in d.config.iter().chain(d.create_only.iter()) {
            config.push((k.clone(), v.clone()));
            p.after.insert(k.clone(), v.clone());
        }
        for disk in &d.disks {
            config.push((disk.slot.clone(), new_disk_value(disk)));
            p.after.insert(disk.slot.clone(), describe_disk(disk));
        }
        p.steps.push(Step::Create {
            node,
            config,
            pool: d.pool.clone(),
        });
        return Ok(p);
    };

    if d.state == State::Absent {
        if cur.running {
            p.steps.push(Step::Stop);
        }
        p.steps.push(Step::Destroy { purge: d.purge });
        p.before.insert(
            "state".into(),
            if cur.running { "running" } else { "stopped" }.into(),
        );
        p.after.insert("state".into(), "absent".into());
        return Ok(p);
    }

    let mut set = Vec::new();
    for (k, want) in &d.config {
        let have = cur.config.get(k);
        if have.is_some_and(|h| same(k, want, h)) {
            continue;
        }
        set.push((k.clone(), value_to_set(k, want, have.map(String::as_str))));
        p.before
            .insert(k.clone(), have.cloned().unwrap_or_default());
        p.after.insert(k.clone(), want.clone());
    }
    // The EFI vars disk and the TPM state: added when missing, never recreated; a different
    // type or version is reported.
    for (slot, props) in &d.fixed {
        match cur.config.get(slot) {
            None => {
                let value = d.create_only.get(slot).cloned().unwrap_or_default();
                p.before.insert(slot.clone(), String::new());
                p.after.insert(slot.clone(), value.clone());
                set.push((slot.clone(), value));
            }
            Some(have) => {
                let (_, kv) = prop(have);
                for (k, want) in props {
                    let now = kv.get(k).map(String::as_str).unwrap_or(match k.as_str() {
                        "efitype" => "2m",
                        "pre-enrolled-keys" => "0",
                        _ => "",
                    });
                    if now != want {
                        p.notes.push(format!(
                            "VM {} has {slot} with {k}={now}, not {want}: PVE cannot change it in place, so it was left (remove {slot} and run again to recreate it, losing its content)",
                            cur.vmid
                        ));
                    }
                }
            }
        }
    }
    let mut resizes = Vec::new();
    for disk in &d.disks {
        let Some(have) = cur.config.get(&disk.slot) else {
            if disk.storage.is_empty() {
                return Err(format!(
                    "{} is not in VM {}: give disks[].storage to add it",
                    disk.slot, cur.vmid
                ));
            }
            set.push((disk.slot.clone(), new_disk_value(disk)));
            p.before.insert(disk.slot.clone(), String::new());
            p.after.insert(disk.slot.clone(), describe_disk(disk));
            continue;
        };
        let (file, kv) = prop(have);
        let is_cd = kv.get("media").is_some_and(|m| m == "cdrom");
        if disk.cloudinit {
            if !file.contains("cloudinit") {
                return Err(format!(
                    "{} holds {have:?}, not a cloud-init drive; choose another cloudinit_slot",
                    disk.slot
                ));
            }
            continue;
        }
        if is_cd {
            return Err(format!(
                "{} is a CD-ROM drive ({have}); choose another slot for the disk",
                disk.slot
            ));
        }
        // Drive options: change only those asked for, keep the volume and the rest.
        let changed: Vec<(&String, &String)> = disk
            .opts
            .iter()
            .filter(|(k, v)| kv.get(*k) != Some(*v))
            .collect();
        if !changed.is_empty() {
            let mut merged = kv.clone();
            for (k, v) in &disk.opts {
                merged.insert(k.clone(), v.clone());
            }
            let value = std::iter::once(file.clone())
                .chain(merged.iter().map(|(k, v)| format!("{k}={v}")))
                .collect::<Vec<_>>()
                .join(",");
            p.before.insert(disk.slot.clone(), have.clone());
            p.after.insert(disk.slot.clone(), value.clone());
            set.push((disk.slot.clone(), value));
        }
        if let (Some(want), Some(now)) = (disk.size, drive_size(have)) {
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
                p.before
                    .insert(format!("{}.size", disk.slot), format_size(now));
                p.after
                    .insert(format!("{}.size", disk.slot), format_size(want));
            }
        }
    }
    if !set.is_empty() {
        p.steps.push(Step::Update { set });
    }
    p.steps.extend(resizes);
    let power = match (d.state, cur.running) {
        (State::Started, false) => Some(Step::Start),
        (State::Stopped, true) if d.shutdown_timeout == 0 => Some(Step::Stop),
        (State::Stopped, true) => Some(Step::Shutdown {
            timeout: d.shutdown_timeout,
            force: d.force_stop,
        }),
        (State::Restarted, true) => Some(Step::Reboot),
        (State::Restarted, false) => Some(Step::Start),
        _ => None,
    };
    if let Some(step) = power {
        p.before.insert(
            "state".into(),
            if cur.running { "running" } else { "stopped" }.into(),
        );
        p.after.insert(
            "state".into(),
            if step == Step::Stop || matches!(step, Step::Shutdown { .. }) {
                "stopped"
            } else {
                "running"
            }
            .into(),
        );
        p.steps.push(step);
    }
    if d.template && !cur.is_template() {
        let stops = p
            .steps
            .iter()
            .any(|s| matches!(s, Step::Stop | Step::Shutdown { .. }));
        if cur.running && !stops {
            return Err(format!(
                "VM {} is running, and a template cannot run: give state: stopped to shut it down and convert it",
                cur.vmid
            ));
        }
        p.before.insert("template".into(), "0".into());
        p.after.insert("template".into(), "1".into());
        p.steps.push(Step::Template);
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desired() -> Desired {
        let mut config = BTreeMap::new();
        config.insert("name".into(), "web".into());
        config.insert("cores".into(), "2".into());
        config.insert("net0".into(), "virtio,bridge=vmbr0".into());
        config.insert("tags".into(), "a;b".into());
        config.insert(
            "sshkeys".into(),
            crate::pve::encode::url_encode("ssh-ed25519 AAAA me@x"),
        );
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
        }
    }

    fn current(pairs: &[(&str, &str)], running: bool) -> Current {
        Current {
            vmid: 100,
            node: "pve1".into(),
            config: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
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
                ("sshkeys", "ssh-ed25519%20AAAA%20me%40x"),
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
        let p = plan(&desired(), None).unwrap();
        let [Step::Create { node, config, .. }] = p.steps.as_slice() else {
            panic!("{:?}", p.steps)
        };
        assert_eq!(node, "pve1");
        let get = |k: &str| config.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
        assert_eq!(
            get("scsi0"),
            Some("local-lvm:0,import-from=local:import/noble.qcow2,discard=on")
        );
        assert_eq!(get("ide2"), Some("local-lvm:cloudinit"));
        assert_eq!(get("cipassword"), Some("pw"));
        assert_eq!(get("boot"), Some("order=scsi0"));
        assert!(p.before.is_empty() && p.after.contains_key("scsi0"));
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
        let p = plan(&desired(), Some(&cur)).unwrap();
        assert_eq!(
            p.steps,
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
        assert_eq!(p.before["cores"], "1");
        assert_eq!(p.after["cores"], "2");
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
        let mut d = desired();
        d.state = State::Started;
        let first = plan(&d, None).unwrap();
        assert!(matches!(first.steps.as_slice(), [Step::Create { .. }]));
        let after = plan(&d, Some(&predict_created(&d, 100, "pve1"))).unwrap();
        let labels: Vec<String> = after.steps.iter().map(Step::describe).collect();
        assert_eq!(labels, vec!["resize scsi0 to 20G", "start"], "{labels:?}");
        d.state = State::Present;
        d.disks[0].size = None;
        assert!(
            plan(&d, Some(&predict_created(&d, 100, "pve1")))
                .unwrap()
                .steps
                .is_empty()
        );
    }

    #[test]
    fn a_disk_rounded_up_to_lvm_extents_is_neither_shrunk_nor_grown() {
        let mut d = desired();
        d.disks[0].size = Some(10001 << 20);
        let mut c = matching();
        c.config.insert(
            "scsi0".into(),
            "local-lvm:vm-100-disk-0,discard=on,size=10004M".into(),
        );
        let p = plan(&d, Some(&c)).unwrap();
        assert!(
            !p.steps.iter().any(|s| matches!(s, Step::Resize { .. })),
            "{:?}",
            p.steps
        );
    }

    #[test]
    fn grows_but_never_shrinks_or_reimports() {
        let mut cur = matching();
        cur.config.insert(
            "scsi0".into(),
            "local-lvm:vm-100-disk-0,discard=on,size=2G".into(),
        );
        let p = plan(&desired(), Some(&cur)).unwrap();
        assert_eq!(
            p.steps,
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
        let p = plan(&desired(), Some(&cur)).unwrap();
        assert_eq!(
            p.steps,
            vec![Step::Update {
                set: vec![(
                    "scsi0".into(),
                    "local-lvm:0,import-from=local:import/noble.qcow2,discard=on".into()
                )]
            }]
        );
    }

    #[test]
    fn power_states() {
        let mut d = desired();
        d.state = State::Started;
        assert_eq!(
            plan(&d, Some(&matching())).unwrap().steps,
            vec![Step::Start]
        );
        let mut running = matching();
        running.running = true;
        assert_eq!(plan(&d, Some(&running)).unwrap().steps, vec![]);
        d.state = State::Stopped;
        assert_eq!(
            plan(&d, Some(&running)).unwrap().steps,
            vec![Step::Shutdown {
                timeout: 180,
                force: true
            }]
        );
        d.state = State::Restarted;
        assert_eq!(plan(&d, Some(&running)).unwrap().steps, vec![Step::Reboot]);
        d.state = State::Absent;
        assert_eq!(
            plan(&d, Some(&running)).unwrap().steps,
            vec![Step::Stop, Step::Destroy { purge: true }]
        );
        assert_eq!(plan(&d, None).unwrap().steps, vec![]);
    }

    #[test]
    fn normalisation() {
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
    fn creating_needs_a_node() {
        let mut d = desired();
        d.node = None;
        assert!(plan(&d, None).unwrap_err().contains("node is required"));
    }
}
