//! The `vm` module's options, and the desired VM they describe in PVE's own terms: config
//! keys with values in the form PVE stores them, plus the disks to import or allocate.
//!
//! Values that end up inside PVE property strings are checked here, so that a `,`, `=` or
//! newline in an option cannot smuggle extra keys into a drive or NIC definition.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::ansible::protocol::{Invocation, quote};
use crate::ansible::spec::{Kind, Opt, Spec, given};
use crate::ids::{cidr, dns_name, mac, storage_id};
use crate::pve::encode::url_encode;
use crate::{connection, runner};

/// The power/lifecycle state asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Present,
    Absent,
    Started,
    Stopped,
    Restarted,
}

/// One disk of the desired VM.
#[derive(Clone, Debug, PartialEq)]
pub struct Disk {
    /// `scsi0`, `virtio1`, `efidisk0`, …
    pub slot: String,
    pub storage: String,
    /// A volume (`local:import/noble.qcow2`) or absolute path to import from.
    pub import_from: Option<String>,
    /// The size to grow to after import, or to allocate, in bytes.
    pub size: Option<u64>,
    pub format: Option<String>,
    /// Drive options managed on this disk (`cache`, `discard`, `ssd`, …) in PVE's form.
    pub opts: BTreeMap<String, String>,
    /// A cloud-init drive (`storage:cloudinit`).
    pub cloudinit: bool,
}

/// The VM as the options describe it.
#[derive(Clone, Debug)]
pub struct Desired {
    pub state: State,
    pub vmid: Option<u32>,
    pub name: Option<String>,
    pub node: Option<String>,
    /// Managed config keys, compared on every run.
    pub config: BTreeMap<String, String>,
    /// Keys sent only when the VM is created (`cipassword`, the default `boot`).
    pub create_only: BTreeMap<String, String>,
    pub disks: Vec<Disk>,
    pub pool: Option<String>,
    pub purge: bool,
    pub shutdown_timeout: u64,
    pub force_stop: bool,
    /// `restart: when_needed`: a running VM with pending changes (or a cloud-init drive that
    /// does not hold the current options) is shut down and started again.
    pub restart_when_needed: bool,
    /// `wait_for_ip`: how long to wait for the guest agent to report an address (`None`: do
    /// not wait).
    pub wait_for_ip: Option<std::time::Duration>,
    /// `clone`: a VM that does not exist yet is cloned from this source instead of created.
    pub clone: Option<CloneSource>,
    /// `template`: the VM is converted to a template once it has converged.
    pub template: bool,
    /// Properties of fixed drives (`efidisk0`, `tpmstate0`) a re-run does not change but
    /// reports when they differ: slot → (property → value).
    pub fixed: BTreeMap<String, BTreeMap<String, String>>,
}

/// Where a clone comes from, and how it is made (the `clone` option).
#[derive(Clone, Debug, PartialEq)]
pub struct CloneSource {
    /// The source VM by id, or by `name` (exactly one of them).
    pub vmid: Option<u32>,
    pub name: Option<String>,
    /// `None`: PVE's default (linked from a template, full otherwise).
    pub full: Option<bool>,
    /// Target storage of a full clone.
    pub storage: Option<String>,
    pub snapname: Option<String>,
}

const DRIVE_OPTS: &[&str] = &[
    "cache",
    "discard",
    "ssd",
    "iothread",
    "backup",
    "replicate",
    "aio",
];

fn disk_options() -> Vec<Opt> {
    vec![
        Opt::new("slot", Kind::Str)
            .required()
            .aliases(&["interface"]),
        Opt::new("storage", Kind::Str),
        Opt::new("import_from", Kind::Str),
        Opt::new("size", Kind::Str),
        Opt::new("format", Kind::Str).choices(&["raw", "qcow2", "vmdk"]),
        Opt::new("cache", Kind::Str).choices(&[
            "none",
            "writethrough",
            "writeback",
            "unsafe",
            "directsync",
        ]),
        Opt::new("discard", Kind::Bool),
        Opt::new("ssd", Kind::Bool),
        Opt::new("iothread", Kind::Bool),
        Opt::new("backup", Kind::Bool),
        Opt::new("replicate", Kind::Bool),
        Opt::new("aio", Kind::Str).choices(&["native", "threads", "io_uring"]),
    ]
}

fn net_options() -> Vec<Opt> {
    vec![
        Opt::new("model", Kind::Str)
            .default(json!("virtio"))
            .choices(&["virtio", "e1000", "e1000e", "rtl8139", "vmxnet3"]),
        Opt::new("bridge", Kind::Str).default(json!("vmbr0")),
        Opt::new("macaddr", Kind::Str),
        Opt::new(
            "tag",
            Kind::Int {
                min: Some(1),
                max: Some(4094),
            },
        ),
        Opt::new("firewall", Kind::Bool),
        Opt::new(
            "mtu",
            Kind::Int {
                min: Some(1),
                max: Some(65520),
            },
        ),
        Opt::new(
            "queues",
            Kind::Int {
                min: Some(0),
                max: Some(64),
            },
        ),
        Opt::new("rate", Kind::Str),
        Opt::new("link_down", Kind::Bool),
    ]
}

fn ipconfig_options() -> Vec<Opt> {
    vec![
        Opt::new("ip", Kind::Str),
        Opt::new("gw", Kind::Str),
        Opt::new("ip6", Kind::Str),
        Opt::new("gw6", Kind::Str),
    ]
}

/// The `vm` module's argument spec.
pub fn argument_spec() -> Spec {
    let int = |min: i64, max: Option<i64>| Kind::Int {
        min: Some(min),
        max,
    };
    let mut options = connection::connection_options();
    options.extend(runner::wait_options("30m"));
    options.extend(vec![
        Opt::new("state", Kind::Str)
            .default(json!("present"))
            .choices(&["present", "absent", "started", "stopped", "restarted"]),
        Opt::new("vmid", int(100, Some(999_999_999))),
        Opt::new("name", Kind::Str),
        Opt::new("node", Kind::Str),
        Opt::new("pool", Kind::Str),
        Opt::new("disks", Kind::ListOfDicts(disk_options())),
        Opt::new("cloudinit_storage", Kind::Str),
        Opt::new("cloudinit_slot", Kind::Str).default(json!("ide2")),
        Opt::new("ciuser", Kind::Str),
        Opt::new("cipassword", Kind::Str).no_log(),
        Opt::new("update_password", Kind::Str)
            .default(json!("on_create"))
            .choices(&["on_create", "always"]),
        Opt::new("sshkeys", Kind::List(Box::new(Kind::Str))),
        Opt::new("ipconfig", Kind::ListOfDicts(ipconfig_options())),
        Opt::new("nameserver", Kind::List(Box::new(Kind::Str))),
        Opt::new("searchdomain", Kind::Str),
        Opt::new("citype", Kind::Str).choices(&["nocloud", "configdrive2", "opennebula"]),
        Opt::new("ciupgrade", Kind::Bool),
        Opt::new("cores", int(1, Some(1024))),
        Opt::new("sockets", int(1, Some(16))),
        Opt::new("memory", int(16, None)),
        Opt::new("balloon", int(0, None)),
        Opt::new("cpu", Kind::Str),
        Opt::new("machine", Kind::Str),
        Opt::new("bios", Kind::Str).choices(&["seabios", "ovmf"]),
        Opt::new("ostype", Kind::Str).choices(&[
            "other", "wxp", "w2k", "w2k3", "w2k8", "wvista", "win7", "win8", "win10", "win11",
            "l24", "l26", "solaris",
        ]),
        Opt::new("scsihw", Kind::Str).choices(&[
            "lsi",
            "lsi53c810",
            "virtio-scsi-pci",
            "virtio-scsi-single",
            "megasas",
            "pvscsi",
        ]),
        Opt::new("net", Kind::ListOfDicts(net_options())),
        Opt::new("vga", Kind::Str),
        Opt::new("serial", Kind::List(Box::new(Kind::Str))),
        Opt::new("agent", Kind::Bool),
        Opt::new("onboot", Kind::Bool),
        Opt::new("numa", Kind::Bool),
        Opt::new("protection", Kind::Bool),
        Opt::new("boot", Kind::Str),
        Opt::new("tags", Kind::List(Box::new(Kind::Str))),
        Opt::new("description", Kind::Str),
        Opt::new("extra_config", Kind::RawDict),
        Opt::new("purge", Kind::Bool).default(json!(true)),
        Opt::new("shutdown_timeout", int(0, Some(86400))).default(json!(180)),
        Opt::new("force_stop", Kind::Bool).default(json!(true)),
        Opt::new("restart", Kind::Str)
            .choices(&["never", "when_needed"])
            .default(json!("never")),
        Opt::new("wait_for_ip", Kind::Duration).default(json!("0s")),
        Opt::new("template", Kind::Bool).default(json!(false)),
        Opt::new(
            "clone",
            Kind::Dict(vec![
                Opt::new("vmid", int(100, Some(999_999_999))),
                Opt::new("name", Kind::Str),
                Opt::new("full", Kind::Bool),
                Opt::new("storage", Kind::Str),
                Opt::new("snapname", Kind::Str),
            ]),
        ),
        Opt::new(
            "efidisk",
            Kind::Dict(vec![
                Opt::new("storage", Kind::Str).required(),
                Opt::new("efitype", Kind::Str)
                    .choices(&["2m", "4m"])
                    .default(json!("4m")),
                Opt::new("pre_enrolled_keys", Kind::Bool).default(json!(false)),
            ]),
        ),
        Opt::new(
            "tpmstate",
            Kind::Dict(vec![
                Opt::new("storage", Kind::Str).required(),
                Opt::new("version", Kind::Str)
                    .choices(&["v1.2", "v2.0"])
                    .default(json!("v2.0")),
            ]),
        ),
    ]);
    let mut spec = Spec {
        options,
        ..Default::default()
    };
    connection::connection_rules(&mut spec);
    spec.required_one_of.push(vec!["vmid", "name"]);
    spec
}

/// True for drive keys PVE accepts (`ide0`–`ide3`, `sata0`–`sata5`, `scsi0`–`scsi30`,
/// `virtio0`–`virtio15`, `efidisk0`, `tpmstate0`).
pub fn is_drive_slot(s: &str) -> bool {
    let idx = |p: &str, max: u32| {
        s.strip_prefix(p)
            .filter(|n| {
                !n.is_empty()
                    && n.bytes().all(|b| b.is_ascii_digit())
                    && (n.len() == 1 || !n.starts_with('0'))
            })
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n <= max)
    };
    idx("ide", 3)
        || idx("sata", 5)
        || idx("scsi", 30)
        || idx("virtio", 15)
        || s == "efidisk0"
        || s == "tpmstate0"
}

/// Refuses characters that would break out of a property string.
fn plain(option: &str, v: &str) -> Result<String, String> {
    if v.is_empty() {
        return Err(format!("{option} must not be empty"));
    }
    if let Some(c) = v
        .chars()
        .find(|c| matches!(c, ',' | '=' | ';' | '\n' | '\r' | '\0') || c.is_whitespace())
    {
        return Err(format!(
            "{option} must not contain {c:?} (got {v}): it would change the meaning of PVE's property string",
            v = quote(v)
        ));
    }
    Ok(v.to_string())
}

/// `local:import/noble.qcow2`, `local-lvm:vm-9000-disk-0`, or an absolute path.
fn import_source(option: &str, v: &str) -> Result<String, String> {
    let v = plain(option, v)?;
    if v.starts_with('/') {
        if v.contains("/../") || v.ends_with("/..") {
            return Err(format!(
                "{option} must not contain '..', got {v}",
                v = quote(&v)
            ));
        }
        return Ok(v);
    }
    match v.split_once(':') {
        Some((sid, path))
            if storage_id(option, sid).is_ok() && !path.is_empty() && !path.contains("..") =>
        {
            Ok(v)
        }
        _ => Err(format!(
            "{option} must be a volume ID such as local:import/noble.qcow2 (or an absolute path), got {v}",
            v = quote(&v)
        )),
    }
}

/// The smallest disk size taken: PVE allocates new disks in GiB with decimals, and below a
/// MiB a value rounds to nothing.
pub const MIN_DISK_SIZE: u64 = 1 << 20;
/// The largest: 1024 TiB, beyond any storage PVE manages (and far from overflowing).
pub const MAX_DISK_SIZE: u64 = 1 << 50;

/// Parses `20G`, `512M`, `1T`, `10240K`, `1.5G` (a bare number means GiB), as PVE's size
/// grammar has it (`\d+(\.\d+)?[KMGT]?`): whole KiB, from 1 MiB to 1024 TiB.
pub fn parse_size(option: &str, v: &str) -> Result<u64, String> {
    let t = v.trim();
    let bad = || {
        format!(
            "{option} must be a size such as 20G, 512M or 1.5T (a number, then K, M, G or T), got {}",
            quote(v)
        )
    };
    let (num, shift) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 10u32),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        Some('T' | 't') => (&t[..t.len() - 1], 40),
        _ => (t, 30),
    };
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(frac) || num.ends_with('.') {
        return Err(bad());
    }
    // Exact arithmetic: whole << shift, plus the fraction's share, in u128 so no value wraps.
    let w: u128 = whole.parse().map_err(|_| bad())?;
    let frac = &frac[..frac.len().min(30)];
    let (f, scale): (u128, u128) = if frac.is_empty() {
        (0, 1)
    } else {
        (
            frac.parse().map_err(|_| bad())?,
            10u128.pow(frac.len() as u32),
        )
    };
    let bytes = w
        .checked_shl(shift)
        .filter(|b| *b >> shift == w)
        .and_then(|b| b.checked_add((f << shift) / scale))
        .filter(|b| *b <= MAX_DISK_SIZE as u128)
        .ok_or_else(|| format!("{option} must be at most 1024T, got {}", quote(v)))?;
    if (f << shift) % scale != 0 || bytes % 1024 != 0 {
        return Err(format!(
            "{option} must be a whole number of KiB, got {}",
            quote(v)
        ));
    }
    if bytes < MIN_DISK_SIZE as u128 {
        return Err(format!("{option} must be at least 1M, got {}", quote(v)));
    }
    Ok(bytes as u64)
}

/// Formats bytes as PVE writes sizes (`2G`, `3584M`).
pub fn format_size(bytes: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        let m = 1u64 << shift;
        if bytes >= m && bytes % m == 0 {
            return format!("{}{unit}", bytes / m);
        }
    }
    bytes.to_string()
}

fn b(v: bool) -> String {
    (if v { "1" } else { "0" }).to_string()
}

/// Builds a NIC value: `virtio[=MAC],bridge=…,…` (options alphabetical, as PVE prints them).
fn net_value(i: usize, n: &Map<String, Value>) -> Result<String, String> {
    let o = |k: &str| format!("net[{i}].{k}");
    let model = n["model"].as_str().unwrap_or("virtio");
    let mut kv: BTreeMap<&str, String> = BTreeMap::new();
    if let Some(br) = n["bridge"].as_str() {
        kv.insert("bridge", plain(&o("bridge"), br)?);
    }
    if let Some(v) = n["firewall"].as_bool() {
        kv.insert("firewall", b(v));
    }
    if let Some(v) = n["link_down"].as_bool() {
        kv.insert("link_down", b(v));
    }
    for k in ["mtu", "queues", "tag"] {
        if let Some(v) = n[k].as_i64() {
            kv.insert(k, v.to_string());
        }
    }
    if let Some(r) = n["rate"].as_str() {
        let r = plain(&o("rate"), r)?;
        r.parse::<f64>().map_err(|_| {
            format!(
                "{} must be a number (MB/s), got {r}",
                o("rate"),
                r = quote(&r)
            )
        })?;
        kv.insert("rate", r);
    }
    let head = match n["macaddr"].as_str() {
        Some(m) => format!("{model}={}", mac(&o("macaddr"), m)?),
        None => model.to_string(),
    };
    Ok(std::iter::once(head)
        .chain(kv.iter().map(|(k, v)| format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(","))
}

fn ipconfig_value(i: usize, m: &Map<String, Value>) -> Result<String, String> {
    let mut parts = Vec::new();
    for k in ["gw", "gw6", "ip", "ip6"] {
        if let Some(v) = m[k].as_str() {
            let v = plain(&format!("ipconfig[{i}].{k}"), v)?;
            let valid = match k {
                "ip" => v == "dhcp" || cidr(&v, false),
                "ip6" => v == "dhcp" || v == "auto" || cidr(&v, true),
                "gw" => v.parse::<std::net::Ipv4Addr>().is_ok(),
                _ => v.parse::<std::net::Ipv6Addr>().is_ok(),
            };
            if !valid {
                return Err(format!(
                    "ipconfig[{i}].{k} is not valid: {v} (ip: dhcp or an IPv4/CIDR; ip6: dhcp, auto or an IPv6/CIDR; gw, gw6: an address)",
                    v = quote(&v)
                ));
            }
            parts.push(format!("{k}={v}"));
        }
    }
    if m["gw"].is_string() && !m["ip"].is_string() {
        return Err(format!("ipconfig[{i}].gw needs ipconfig[{i}].ip"));
    }
    if parts.is_empty() {
        return Err(format!("ipconfig[{i}] needs at least one of ip, ip6"));
    }
    Ok(parts.join(","))
}

/// The VM config keys of PVE's schema (`PUT /nodes/{node}/qemu/{vmid}/config`, PVE 9.1),
/// `[n]` for the numbered ones. Only these may go through `extra_config`.
const PVE_CONFIG_KEYS: &[&str] = &[
    "acpi",
    "affinity",
    "agent",
    "allow-ksm",
    "amd-sev",
    "arch",
    "args",
    "audio0",
    "autostart",
    "balloon",
    "bios",
    "boot",
    "bootdisk",
    "cicustom",
    "cipassword",
    "citype",
    "ciupgrade",
    "ciuser",
    "cores",
    "cpu",
    "cpulimit",
    "cpuunits",
    "description",
    "efidisk0",
    "freeze",
    "hookscript",
    "hostpci[n]",
    "hotplug",
    "hugepages",
    "ide[n]",
    "intel-tdx",
    "ipconfig[n]",
    "ivshmem",
    "keephugepages",
    "keyboard",
    "kvm",
    "localtime",
    "machine",
    "memory",
    "migrate_downtime",
    "migrate_speed",
    "name",
    "nameserver",
    "net[n]",
    "numa",
    "numa[n]",
    "onboot",
    "ostype",
    "parallel[n]",
    "protection",
    "reboot",
    "rng0",
    "sata[n]",
    "scsi[n]",
    "scsihw",
    "searchdomain",
    "serial[n]",
    "shares",
    "smbios1",
    "smp",
    "sockets",
    "spice_enhancements",
    "sshkeys",
    "startdate",
    "startup",
    "tablet",
    "tags",
    "tdf",
    "tpmstate0",
    "unused[n]",
    "usb[n]",
    "vcpus",
    "vga",
    "virtio[n]",
    "virtiofs[n]",
    "vmgenid",
    "vmstatestorage",
    "watchdog",
];

/// Why `k` cannot be set as VM config (`None` when it can). Request parameters such as
/// `start` or `unique` would act on the create (start the VM although `state: present`)
/// and then fail every update with `property is not defined in schema`.
fn not_a_config_key(k: &str) -> Option<&'static str> {
    let known = PVE_CONFIG_KEYS.iter().any(|c| match c.strip_suffix("[n]") {
        Some(prefix) => k
            .strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
        None => *c == k,
    });
    if known {
        return None;
    }
    Some(match k {
        "start"
        | "unique"
        | "archive"
        | "storage"
        | "pool"
        | "force"
        | "live-restore"
        | "bwlimit"
        | "ha-managed"
        | "import-working-storage" => {
            "is a parameter of the create request, not a VM config key (use the module's options: state, pool)"
        }
        "lock" | "template" | "digest" | "delete" | "revert" | "skiplock" | "node" | "vmid"
        | "background_delay" => "is not a config key the module may set",
        _ => "is not a VM config key in PVE's schema",
    })
}

/// Keys the module manages through its own options; `extra_config` may not set them.
fn managed_key(k: &str) -> bool {
    is_drive_slot(k)
        || k.starts_with("net")
        || k.starts_with("ipconfig")
        || k.starts_with("serial")
        || [
            "name",
            "cores",
            "sockets",
            "memory",
            "balloon",
            "cpu",
            "machine",
            "bios",
            "ostype",
            "scsihw",
            "vga",
            "agent",
            "onboot",
            "numa",
            "protection",
            "boot",
            "tags",
            "description",
            "ciuser",
            "cipassword",
            "sshkeys",
            "nameserver",
            "searchdomain",
            "citype",
            "ciupgrade",
            "vmid",
            "node",
            "pool",
            "lock",
            "digest",
            "delete",
            "skiplock",
        ]
        .contains(&k)
}

/// The `clone` option, checked: exactly one of `vmid` and `name`; `storage` only for a full
/// clone (PVE refuses it for a linked one).
fn clone_source(inv: &Invocation) -> Result<Option<CloneSource>, String> {
    let Some(c) = inv.params.get("clone").and_then(Value::as_object) else {
        return Ok(None);
    };
    let vmid = c.get("vmid").and_then(Value::as_u64).map(|v| v as u32);
    let name = c
        .get("name")
        .and_then(Value::as_str)
        .map(|n| dns_name("clone.name", n))
        .transpose()?;
    if vmid.is_some() == name.is_some() {
        return Err("clone needs exactly one of vmid and name (the source VM)".into());
    }
    let full = c.get("full").and_then(Value::as_bool);
    let storage = c
        .get("storage")
        .and_then(Value::as_str)
        .map(|s| storage_id("clone.storage", s))
        .transpose()?;
    if storage.is_some() && full == Some(false) {
        return Err(
            "clone.storage is the target of a full clone; PVE refuses it for a linked clone (full: false)"
                .into(),
        );
    }
    let snapname = c
        .get("snapname")
        .and_then(Value::as_str)
        .map(|n| plain("clone.snapname", n))
        .transpose()?;
    Ok(Some(CloneSource {
        vmid,
        name,
        full,
        storage,
        snapname,
    }))
}

/// The hardware and management keys: name, CPU, memory, firmware, boot, serial ports, tags,
/// description, and `extra_config`.
fn hardware(inv: &Invocation, config: &mut BTreeMap<String, String>) -> Result<(), String> {
    let p = &inv.params;
    for k in ["cores", "sockets", "memory", "balloon"] {
        if let Some(v) = inv.int(k) {
            config.insert(k.into(), v.to_string());
        }
    }
    for k in ["bios", "ostype", "scsihw"] {
        if let Some(v) = inv.str(k) {
            config.insert(k.into(), v.to_string());
        }
    }
    for k in ["cpu", "machine", "vga", "boot"] {
        if let Some(v) = inv.str(k) {
            if v.contains(['\n', '\r']) || v.trim().is_empty() {
                return Err(format!(
                    "{k} must be a single non-empty line, got {v}",
                    v = quote(v)
                ));
            }
            config.insert(k.into(), v.to_string());
        }
    }
    for k in ["agent", "onboot", "numa", "protection"] {
        if let Some(v) = inv.bool(k) {
            config.insert(k.into(), b(v));
        }
    }
    if let Some(tags) = p
        .get("tags")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
    {
        let mut out = Vec::new();
        for (i, t) in tags.iter().filter_map(Value::as_str).enumerate() {
            let ok = !t.is_empty()
                && t.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"-_+.".contains(&c))
                && !t.starts_with(['-', '_', '+', '.']);
            if !ok {
                return Err(format!(
                    "tags[{i}] must use letters, digits and - _ + . (not first), got {t}",
                    t = quote(t)
                ));
            }
            out.push(t.to_ascii_lowercase());
        }
        config.insert("tags".into(), out.join(";"));
    }
    if let Some(d) = inv.str("description") {
        config.insert("description".into(), d.to_string());
    }
    for (i, s) in p
        .get("serial")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .enumerate()
    {
        if i > 3 {
            return Err("serial takes at most 4 entries (serial0 to serial3)".into());
        }
        if !(s == "socket" || (s.starts_with("/dev/") && !s.contains(['\n', ',', ' ']))) {
            return Err(format!(
                "serial[{i}] must be 'socket' or a /dev/ path, got {s}",
                s = quote(s)
            ));
        }
        config.insert(format!("serial{i}"), s.to_string());
    }
    if let Some(extra) = p.get("extra_config").and_then(Value::as_object) {
        for (k, v) in extra {
            let v = v.as_str().unwrap_or_default();
            let key_ok = !k.is_empty()
                && k.as_bytes()[0].is_ascii_lowercase()
                && k.bytes().all(|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-'
                });
            if !key_ok {
                return Err(format!(
                    "extra_config: {} is not a PVE config key",
                    quote(k)
                ));
            }
            if let Some(why) = not_a_config_key(k) {
                return Err(format!("extra_config: {k} {why}"));
            }
            if managed_key(k) {
                return Err(format!(
                    "extra_config: set {k} through the module's own option, not extra_config"
                ));
            }
            if v.contains(['\n', '\r']) {
                return Err(format!("extra_config.{k} must be a single line"));
            }
            config.insert(k.clone(), v.to_string());
        }
    }

    Ok(())
}

/// The cloud-init keys: user, password (sent once unless `update_password: always`), SSH
/// keys, DNS, and the per-NIC `ipconfigN`.
fn cloud_init(
    inv: &Invocation,
    config: &mut BTreeMap<String, String>,
    create_only: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    let p = &inv.params;
    if let Some(v) = inv.str("citype") {
        config.insert("citype".into(), v.to_string());
    }
    if let Some(v) = inv.bool("ciupgrade") {
        config.insert("ciupgrade".into(), b(v));
    }
    if let Some(u) = inv.str("ciuser") {
        config.insert("ciuser".into(), plain("ciuser", u)?);
    }
    if let Some(pw) = inv.str("cipassword") {
        if pw.contains(['\n', '\r']) {
            return Err("cipassword must be a single line".into());
        }
        if inv.str("update_password") == Some("always") {
            config.insert("cipassword".into(), pw.to_string());
        } else {
            create_only.insert("cipassword".into(), pw.to_string());
        }
    }
    if let Some(keys) = p
        .get("sshkeys")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
    {
        let keys: Vec<String> = keys
            .iter()
            .filter_map(Value::as_str)
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty())
            .collect();
        // A private key pasted by mistake: refused, never quoted, and masked from all output.
        if let Some(i) = keys
            .iter()
            .position(|k| k.contains("PRIVATE KEY") || k.starts_with("PuTTY-User-Key-File"))
        {
            crate::ansible::protocol::register_secret(&keys[i]);
            for line in keys[i].lines().filter(|l| l.len() >= 16) {
                crate::ansible::protocol::register_secret(line);
            }
            return Err(format!(
                "sshkeys[{i}] is a private key: give the public key (the .pub file, one line \
                 starting with ssh-ed25519, ssh-rsa, ecdsa-sha2-… or sk-…); the value is not shown"
            ));
        }
        if let Some(k) = keys.iter().find(|k| k.contains(['\n', '\r'])) {
            return Err(format!(
                "sshkeys: give one key per list item; this one spans lines: {:?}",
                k.lines().next().unwrap_or("")
            ));
        }
        config.insert("sshkeys".into(), url_encode(&keys.join("\n")));
    }
    if let Some(ns) = p
        .get("nameserver")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
    {
        let mut out = Vec::new();
        for (i, n) in ns.iter().filter_map(Value::as_str).enumerate() {
            n.parse::<std::net::IpAddr>().map_err(|_| {
                format!(
                    "nameserver[{i}] must be an IP address, got {n}",
                    n = quote(n)
                )
            })?;
            out.push(n.to_string());
        }
        config.insert("nameserver".into(), out.join(" "));
    }
    if let Some(sd) = inv.str("searchdomain") {
        config.insert("searchdomain".into(), dns_name("searchdomain", sd)?);
    }
    for (i, m) in p
        .get("ipconfig")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        config.insert(
            format!("ipconfig{i}"),
            ipconfig_value(i, m.as_object().ok_or("ipconfig items must be dicts")?)?,
        );
    }
    Ok(())
}

/// The NICs, `net0`, `net1`, … in the order given.
fn network(inv: &Invocation, config: &mut BTreeMap<String, String>) -> Result<(), String> {
    let p = &inv.params;
    for (i, n) in p
        .get("net")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        config.insert(
            format!("net{i}"),
            net_value(i, n.as_object().ok_or("net items must be dicts")?)?,
        );
    }
    Ok(())
}

/// The disks (`disks`), and the cloud-init drive when cloud-init options are given (on
/// `cloudinit_storage`, or the first disk's storage). A clone's disks come from its source.
fn disks(inv: &Invocation, cloning: bool) -> Result<Vec<Disk>, String> {
    let p = &inv.params;
    let mut disks = Vec::new();
    for (i, d) in p
        .get("disks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let d = d.as_object().ok_or("disks items must be dicts")?;
        let o = |k: &str| format!("disks[{i}].{k}");
        let slot = d["slot"].as_str().unwrap_or_default().to_string();
        if !is_drive_slot(&slot) {
            return Err(format!(
                "{} must be a drive slot such as scsi0, virtio0, sata0, ide0 or efidisk0, got {slot}",
                o("slot"),
                slot = quote(&slot)
            ));
        }
        if disks.iter().any(|x: &Disk| x.slot == slot) {
            return Err(format!("{}: slot {slot} is used twice", o("slot")));
        }
        // A clone's disks come from its source: a disk listed to be grown needs no storage.
        let storage = match d["storage"].as_str() {
            Some(s) => storage_id(&o("storage"), s)?,
            None if cloning => String::new(),
            None => return Err(format!("{} is required to create a disk", o("storage"))),
        };
        let import_from = d["import_from"]
            .as_str()
            .map(|s| import_source(&o("import_from"), s))
            .transpose()?;
        let size = d["size"]
            .as_str()
            .map(|s| parse_size(&o("size"), s))
            .transpose()?;
        if import_from.is_none() && size.is_none() {
            return Err(format!(
                "{}: give import_from (a cloud image) or size (a new empty disk)",
                o("slot")
            ));
        }
        if import_from.is_some() && cloning {
            return Err(format!(
                "{} and clone exclude each other: a clone's disks come from its source (give size to grow one)",
                o("import_from")
            ));
        }
        let mut opts = BTreeMap::new();
        for k in DRIVE_OPTS {
            match &d[*k] {
                Value::Bool(v) if *k == "discard" => {
                    opts.insert(
                        k.to_string(),
                        (if *v { "on" } else { "ignore" }).to_string(),
                    );
                }
                Value::Bool(v) => {
                    opts.insert(k.to_string(), b(*v));
                }
                Value::String(s) => {
                    opts.insert(k.to_string(), s.clone());
                }
                _ => {}
            }
        }
        disks.push(Disk {
            slot,
            storage,
            import_from,
            size,
            format: d["format"].as_str().map(str::to_string),
            opts,
            cloudinit: false,
        });
    }
    let wants_ci = [
        "ciuser",
        "cipassword",
        "sshkeys",
        "ipconfig",
        "nameserver",
        "searchdomain",
        "citype",
    ]
    .iter()
    .any(|k| {
        p.get(*k)
            .is_some_and(|v| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty()))
    });
    if let Some(cs) = inv
        .str("cloudinit_storage")
        .map(|s| storage_id("cloudinit_storage", s))
        .transpose()?
        .or_else(|| {
            wants_ci
                .then(|| {
                    disks
                        .first()
                        .map(|d| d.storage.clone())
                        .filter(|s| !s.is_empty())
                })
                .flatten()
        })
    {
        let slot = given(inv.str("cloudinit_slot"), "cloudinit_slot")?.to_string();
        if !is_drive_slot(&slot) || disks.iter().any(|d| d.slot == slot) {
            return Err(format!(
                "cloudinit_slot must be a free drive slot such as ide2, got {slot}",
                slot = quote(&slot)
            ));
        }
        disks.push(Disk {
            slot,
            storage: cs,
            import_from: None,
            size: None,
            format: None,
            opts: BTreeMap::new(),
            cloudinit: true,
        });
    } else if wants_ci && !cloning {
        // (A clone takes its source's cloud-init drive.)
        return Err(
            "cloud-init options need a cloud-init drive: set cloudinit_storage (or give disks)"
                .into(),
        );
    }
    Ok(disks)
}

/// The EFI vars disk and the TPM state, sent only at create; returns what a re-run compares
/// (slot → properties).
fn firmware(
    inv: &Invocation,
    config: &BTreeMap<String, String>,
    create_only: &mut BTreeMap<String, String>,
) -> Result<BTreeMap<String, BTreeMap<String, String>>, String> {
    let p = &inv.params;
    let mut fixed = BTreeMap::new();
    if let Some(e) = p.get("efidisk").and_then(Value::as_object) {
        if config.get("bios").map(String::as_str) != Some("ovmf") {
            return Err(
                "efidisk needs bios: ovmf (an EFI vars disk holds OVMF's UEFI variables)".into(),
            );
        }
        let sid = storage_id("efidisk.storage", e["storage"].as_str().unwrap_or_default())?;
        let efitype = given(e["efitype"].as_str(), "efidisk.efitype")?.to_string();
        let keys = b(given(
            e["pre_enrolled_keys"].as_bool(),
            "efidisk.pre_enrolled_keys",
        )?);
        create_only.insert(
            "efidisk0".into(),
            format!("{sid}:1,efitype={efitype},pre-enrolled-keys={keys}"),
        );
        fixed.insert(
            "efidisk0".to_string(),
            BTreeMap::from([
                ("efitype".to_string(), efitype),
                ("pre-enrolled-keys".to_string(), keys),
            ]),
        );
    }
    if let Some(t) = p.get("tpmstate").and_then(Value::as_object) {
        let sid = storage_id(
            "tpmstate.storage",
            t["storage"].as_str().unwrap_or_default(),
        )?;
        let version = given(t["version"].as_str(), "tpmstate.version")?.to_string();
        create_only.insert("tpmstate0".into(), format!("{sid}:1,version={version}"));
        fixed.insert(
            "tpmstate0".to_string(),
            BTreeMap::from([("version".to_string(), version)]),
        );
    }
    Ok(fixed)
}

/// Builds the desired VM from validated options.
pub fn desired(inv: &Invocation) -> Result<Desired, String> {
    let state = match given(inv.str("state"), "state")? {
        "absent" => State::Absent,
        "started" => State::Started,
        "stopped" => State::Stopped,
        "restarted" => State::Restarted,
        _ => State::Present,
    };
    let mut config = BTreeMap::new();
    let mut create_only = BTreeMap::new();
    let name = inv.str("name").map(|n| dns_name("name", n)).transpose()?;
    if let Some(n) = &name {
        config.insert("name".into(), n.clone());
    }
    hardware(inv, &mut config)?;
    cloud_init(inv, &mut config, &mut create_only)?;
    network(inv, &mut config)?;
    let clone = clone_source(inv)?;
    let disks = disks(inv, clone.is_some())?;
    let template = given(inv.bool("template"), "template")?;
    if template && matches!(state, State::Started | State::Restarted) {
        return Err(format!(
            "a template never runs: template: true and state: {} exclude each other",
            inv.str("state").unwrap_or_default()
        ));
    }
    let fixed = firmware(inv, &config, &mut create_only)?;
    if disks
        .iter()
        .any(|d| d.slot == "efidisk0" || d.slot == "tpmstate0")
    {
        return Err(
            "give the EFI vars disk and the TPM state through efidisk and tpmstate, not disks"
                .into(),
        );
    }
    if !config.contains_key("boot")
        && let Some(first) = disks.iter().find(|d| !d.cloudinit)
    {
        create_only.insert("boot".into(), format!("order={}", first.slot));
    }
    let pool = inv.str("pool").map(|s| plain("pool", s)).transpose()?;
    let wait_for_ip = Some(crate::ansible::spec::parse_duration(given(
        inv.str("wait_for_ip"),
        "wait_for_ip",
    )?)?)
    .filter(|d| !d.is_zero());
    if wait_for_ip.is_some() {
        if inv.bool("agent") == Some(false) {
            return Err(
                "wait_for_ip needs the QEMU guest agent, but agent is false: the address is \
                 read from the agent (set agent: true and install qemu-guest-agent in the image)"
                    .into(),
            );
        }
        if inv.bool("template") == Some(true) {
            return Err(
                "a template never runs: template: true and wait_for_ip exclude each other".into(),
            );
        }
        if matches!(state, State::Absent | State::Stopped) {
            return Err(format!(
                "wait_for_ip needs a running VM, but state is {}",
                inv.str("state").unwrap_or_default()
            ));
        }
    }
    let node = inv
        .str("node")
        .map(|n| crate::ids::node_name("node", n))
        .transpose()?;
    Ok(Desired {
        state,
        vmid: inv.int("vmid").map(|v| v as u32),
        name,
        node,
        config,
        create_only,
        disks,
        pool,
        purge: given(inv.bool("purge"), "purge")?,
        shutdown_timeout: given(inv.int("shutdown_timeout"), "shutdown_timeout")? as u64,
        force_stop: given(inv.bool("force_stop"), "force_stop")?,
        restart_when_needed: given(inv.str("restart"), "restart")? == "when_needed",
        wait_for_ip,
        clone,
        template,
        fixed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drive_slots() {
        for ok in ["scsi0", "scsi30", "virtio15", "sata5", "ide3", "efidisk0"] {
            assert!(is_drive_slot(ok), "{ok}");
        }
        for bad in [
            "scsi31",
            "scsi",
            "scsi01",
            "virtio16",
            "nvme0",
            "scsi0,x=1",
            "",
        ] {
            assert!(!is_drive_slot(bad), "{bad}");
        }
    }

    #[test]
    fn property_string_injection_is_refused() {
        assert!(
            import_source("import_from", "local:import/a.qcow2,format=raw")
                .unwrap_err()
                .contains("','")
        );
        assert!(import_source("import_from", "local:import/a.qcow2\nscsi1: x").is_err());
        assert!(storage_id("storage", "local-lvm,size=1").is_err());
        assert!(import_source("import_from", "local:import/noble.qcow2").is_ok());
        assert!(import_source("import_from", "/var/lib/vz/template/noble.img").is_ok());
        assert!(import_source("import_from", "noble.qcow2").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("size", "20G").unwrap(), 20 << 30);
        assert_eq!(parse_size("size", "512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("size", "10").unwrap(), 10 << 30);
        assert!(parse_size("size", "-1G").is_err());
        assert!(parse_size("size", "big").is_err());
        assert_eq!(parse_size("size", "1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("size", "2050M").unwrap(), 2050 << 20);
        for (bad, why) in [
            ("1K", "at least 1M"),
            ("0", "at least 1M"),
            ("99999999999999999999999T", "at most 1024T"),
            ("1025T", "at most 1024T"),
            ("1e3G", "must be a size"),
            ("0.0000001K", "whole number of KiB"),
            ("1.G", "must be a size"),
            (".5G", "must be a size"),
            ("NaNG", "must be a size"),
            ("infM", "must be a size"),
        ] {
            let e = parse_size("disks[0].size", bad).unwrap_err();
            assert!(
                e.contains(why) && e.starts_with("disks[0].size"),
                "{bad}: {e}"
            );
        }
        assert_eq!(format_size(20 << 30), "20G");
        assert_eq!(format_size(3584 << 20), "3584M");
    }

    #[test]
    fn net_values_are_canonical() {
        let m = serde_json::json!({"model": "virtio", "bridge": "vmbr0", "firewall": true, "tag": 20, "macaddr": null, "mtu": null, "queues": null, "rate": null, "link_down": null});
        assert_eq!(
            net_value(0, m.as_object().unwrap()).unwrap(),
            "virtio,bridge=vmbr0,firewall=1,tag=20"
        );
        let m =
            serde_json::json!({"model": "virtio", "bridge": "vmbr0,firewall=0", "macaddr": null});
        assert!(net_value(0, m.as_object().unwrap()).is_err());
    }
}
