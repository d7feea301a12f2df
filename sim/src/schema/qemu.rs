//! The parameter tables of qemu-server's endpoints (API2/Qemu.pm: create, config, power,
//! resize, destroy, template, clone, move_disk, unlink) and the VM config's property strings
//! (drives, NICs, machine), as PVE 9.1 declares them.

use std::collections::BTreeMap;

use super::engine::{
    Named, Param, Sub, Ty, default_sub, find, idx, is_size, node_param, opt, parse_property_string,
    req, sub, vm_path,
};

fn is_serial_dev(s: &str) -> bool {
    s == "socket" || (s.starts_with("/dev/") && s.len() > 5)
}

fn is_digest(s: &str) -> bool {
    s.len() <= 40
}

/// The sub-keys every drive key takes, with those of its bus after them (`$extra`).
macro_rules! disk_subs {
    ($($extra:expr),*) => {
        &[
            default_sub("file", Ty::Fmt(Named::VolumeId)),
            sub("aio", Ty::Enum(&["native", "threads", "io_uring"])),
            sub("backup", Ty::Bool),
            sub(
                "cache",
                Ty::Enum(&["none", "writethrough", "writeback", "unsafe", "directsync"]),
            ),
            sub("detect_zeroes", Ty::Bool),
            sub("discard", Ty::Enum(&["ignore", "on"])),
            sub(
                "format",
                Ty::Enum(&["raw", "qcow", "qed", "qcow2", "vmdk", "cloop"]),
            ),
            sub("import-from", Ty::Fmt(Named::VolumeId)),
            sub("iops", Ty::Int(None, None)),
            sub("iops_rd", Ty::Int(None, None)),
            sub("iops_wr", Ty::Int(None, None)),
            sub("iothread", Ty::Bool),
            sub("mbps", Ty::Num(None, None)),
            sub("mbps_rd", Ty::Num(None, None)),
            sub("mbps_wr", Ty::Num(None, None)),
            sub("media", Ty::Enum(&["cdrom", "disk"])),
            sub("queues", Ty::Int(Some(2), None)),
            sub("replicate", Ty::Bool),
            sub("rerror", Ty::Enum(&["ignore", "report", "stop"])),
            sub("ro", Ty::Bool),
            sub("serial", Ty::Fmt(Named::UrlEncoded)),
            sub("shared", Ty::Bool),
            sub("size", Ty::Fmt(Named::DiskSize)),
            sub("snapshot", Ty::Bool),
            sub("werror", Ty::Enum(&["enospc", "ignore", "report", "stop"])),
            sub("efitype", Ty::Enum(&["2m", "4m"])),
            sub("pre-enrolled-keys", Ty::Bool),
            sub("ms-cert", Ty::Enum(&["2011", "2023", "2023w", "2023k"])),
            sub("version", Ty::Enum(&["v1.2", "v2.0"])),
            $($extra,)*
        ]
    };
}

/// The drive sub-keys of ide, sata, scsi, efidisk0 and tpmstate0 (Drive.pm `%drivedesc_base`
/// and the buses' own: `ssd` is in `$ide_fmt`, `$scsi_fmt`, `$sata_fmt`).
const DISK_SUBS: &[Sub] = disk_subs!(sub("ssd", Ty::Bool));

/// A virtio drive's sub-keys: Drive.pm `$virtio_fmt` has no `ssd` (PVE refuses
/// `virtio0: …,ssd=1` with 400, "virtio0.ssd: property is not defined in schema").
const VIRTIO_SUBS: &[Sub] = disk_subs!();

/// QemuServer.pm `$spice_enhancements_fmt`.
const SPICE_ENHANCEMENTS_SUBS: &[Sub] = &[
    sub("foldersharing", Ty::Bool),
    sub("videostreaming", Ty::Enum(&["off", "all", "filter"])),
];

/// Memory.pm `$numa_fmt` (`numa0` … `numa7`, `$MAX_NUMA` 8): `cpus` is required.
const NUMA_SUBS: &[Sub] = &[
    Sub {
        required: true,
        ..sub("cpus", Ty::Str)
    },
    sub("hostnodes", Ty::Str),
    sub("memory", Ty::Num(None, None)),
    sub("policy", Ty::Enum(&["preferred", "bind", "interleave"])),
];

/// QemuServer.pm `startdate`: `(now|\d{4}-\d{1,2}-\d{1,2}(T\d{1,2}:\d{1,2}:\d{1,2})?)`.
fn is_startdate(s: &str) -> bool {
    let digits = |p: &str, lo: usize, hi: usize| {
        (lo..=hi).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit())
    };
    let (date, time) = match s.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (s, None),
    };
    let date_ok = matches!(date.split('-').collect::<Vec<_>>()[..],
        [y, m, d] if digits(y, 4, 4) && digits(m, 1, 2) && digits(d, 1, 2));
    let time_ok = time.is_none_or(|t| {
        matches!(t.split(':').collect::<Vec<_>>()[..],
            [h, m, sec] if digits(h, 1, 2) && digits(m, 1, 2) && digits(sec, 1, 2))
    });
    s == "now" || (date_ok && time_ok)
}

/// QemuServer.pm `bootdisk` (deprecated, `pve-qm-bootdisk`): a drive name.
fn is_bootdisk(s: &str) -> bool {
    ["ide", "sata", "scsi", "virtio"].iter().any(|bus| {
        s.strip_prefix(bus)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// NIC models; each is also a sub-key carrying the MAC (`virtio=BC:24:11:..`).
pub const NIC_MODELS: &[&str] = &[
    "e1000",
    "e1000-82540em",
    "e1000-82544gc",
    "e1000-82545em",
    "e1000e",
    "i82551",
    "i82557b",
    "i82559er",
    "ne2k_isa",
    "ne2k_pci",
    "pcnet",
    "rtl8139",
    "virtio",
    "vmxnet3",
];

const NET_SUBS: &[Sub] = &[
    Sub {
        value_key: Some("macaddr"),
        ..default_sub("model", Ty::Enum(NIC_MODELS))
    },
    sub("macaddr", Ty::Fmt(Named::MacAddr)),
    sub("bridge", Ty::Str),
    sub("firewall", Ty::Bool),
    sub("link_down", Ty::Bool),
    sub("mtu", Ty::Int(Some(1), Some(65520))),
    sub("queues", Ty::Int(Some(0), Some(64))),
    sub("rate", Ty::Num(Some(0.0), None)),
    sub("tag", Ty::Int(Some(1), Some(4094))),
    sub("trunks", Ty::Str),
];

const MEMORY_SUBS: &[Sub] = &[default_sub("current", Ty::Int(Some(16), None))];

const AGENT_SUBS: &[Sub] = &[
    default_sub("enabled", Ty::Bool),
    sub("freeze-fs-on-backup", Ty::Bool),
    sub("fstrim_cloned_disks", Ty::Bool),
    sub("type", Ty::Enum(&["virtio", "isa"])),
];

const VGA_SUBS: &[Sub] = &[
    Sub {
        key: "type",
        ty: Ty::Enum(&[
            "cirrus",
            "qxl",
            "qxl2",
            "qxl3",
            "qxl4",
            "none",
            "serial0",
            "serial1",
            "serial2",
            "serial3",
            "std",
            "virtio",
            "virtio-gl",
            "vmware",
        ]),
        default_key: true,
        required: false,
        value_key: None,
    },
    sub("clipboard", Ty::Enum(&["vnc"])),
    sub("memory", Ty::Int(Some(4), Some(512))),
];

const MACHINE_SUBS: &[Sub] = &[
    Sub {
        key: "type",
        ty: Ty::Str,
        default_key: true,
        required: false,
        value_key: None,
    },
    sub("viommu", Ty::Enum(&["intel", "virtio"])),
    sub("aw-bits", Ty::Num(Some(32.0), Some(64.0))),
    sub("enable-s3", Ty::Bool),
    sub("enable-s4", Ty::Bool),
];

const OSTYPES: &[&str] = &[
    "other", "wxp", "w2k", "w2k3", "w2k8", "wvista", "win7", "win8", "win10", "win11", "l24",
    "l26", "solaris",
];

/// VM configuration keys accepted by create and by PUT/POST config.
pub fn vm_config_params() -> Vec<Param> {
    vec![
        opt("acpi", Ty::Bool),
        opt("affinity", Ty::Str),
        opt("agent", Ty::Prop(AGENT_SUBS)),
        opt("allow-ksm", Ty::Bool),
        opt("arch", Ty::Enum(&["x86_64", "aarch64"])),
        opt("args", Ty::Str),
        opt("audio0", Ty::Str),
        opt("autostart", Ty::Bool),
        opt("balloon", Ty::Int(Some(0), None)),
        opt("bios", Ty::Enum(&["seabios", "ovmf"])),
        opt("boot", Ty::Fmt(Named::Boot)),
        opt("bootdisk", Ty::Pat(is_bootdisk)),
        opt("cicustom", Ty::Str),
        opt("cipassword", Ty::Str),
        opt(
            "citype",
            Ty::Enum(&["configdrive2", "nocloud", "opennebula"]),
        ),
        opt("ciupgrade", Ty::Bool),
        opt("ciuser", Ty::Str),
        opt("cores", Ty::Int(Some(1), None)),
        opt("cpu", Ty::Fmt(Named::Cpu)),
        opt("cpulimit", Ty::Num(Some(0.0), Some(128.0))),
        opt("cpuunits", Ty::Int(Some(1), Some(262144))),
        opt("description", Ty::StrMax(8192)),
        opt("efidisk0", Ty::Prop(DISK_SUBS)),
        opt("freeze", Ty::Bool),
        opt("hookscript", Ty::Str),
        idx("hostpci", 0, 15, Ty::Str),
        opt("hotplug", Ty::Str),
        opt("hugepages", Ty::Enum(&["any", "2", "1024"])),
        idx("ide", 0, 3, Ty::Prop(DISK_SUBS)),
        idx("ipconfig", 0, 31, Ty::Fmt(Named::IpConfig)),
        opt("keyboard", Ty::Str),
        opt("kvm", Ty::Bool),
        opt("localtime", Ty::Bool),
        opt(
            "lock",
            Ty::Enum(&[
                "backup",
                "clone",
                "create",
                "migrate",
                "rollback",
                "snapshot",
                "snapshot-delete",
                "suspending",
                "suspended",
            ]),
        ),
        opt("machine", Ty::Prop(MACHINE_SUBS)),
        opt("memory", Ty::Prop(MEMORY_SUBS)),
        opt("migrate_downtime", Ty::Num(Some(0.0), None)),
        opt("migrate_speed", Ty::Int(Some(0), None)),
        opt("name", Ty::Fmt(Named::DnsName)),
        opt("nameserver", Ty::Fmt(Named::AddressList)),
        idx("net", 0, 31, Ty::Prop(NET_SUBS)),
        opt("numa", Ty::Bool),
        idx("numa", 0, 7, Ty::Prop(NUMA_SUBS)),
        opt("onboot", Ty::Bool),
        opt("ostype", Ty::Enum(OSTYPES)),
        opt("protection", Ty::Bool),
        opt("reboot", Ty::Bool),
        opt("rng0", Ty::Str),
        idx("sata", 0, 5, Ty::Prop(DISK_SUBS)),
        idx("scsi", 0, 30, Ty::Prop(DISK_SUBS)),
        opt(
            "scsihw",
            Ty::Enum(&[
                "lsi",
                "lsi53c810",
                "virtio-scsi-pci",
                "virtio-scsi-single",
                "megasas",
                "pvscsi",
            ]),
        ),
        opt("searchdomain", Ty::Str),
        idx("serial", 0, 3, Ty::Pat(is_serial_dev)),
        opt("shares", Ty::Int(Some(0), Some(50000))),
        opt("smbios1", Ty::StrMax(512)),
        opt("sockets", Ty::Int(Some(1), None)),
        opt("startdate", Ty::Pat(is_startdate)),
        opt("spice_enhancements", Ty::Prop(SPICE_ENHANCEMENTS_SUBS)),
        opt("sshkeys", Ty::Fmt(Named::UrlEncoded)),
        opt("startup", Ty::Str),
        opt("tablet", Ty::Bool),
        opt("tdf", Ty::Bool),
        opt("tags", Ty::Fmt(Named::TagList)),
        opt("template", Ty::Bool),
        opt("tpmstate0", Ty::Prop(DISK_SUBS)),
        idx("unused", 0, 255, Ty::Str),
        idx("usb", 0, 29, Ty::Str),
        opt("vcpus", Ty::Int(Some(1), None)),
        opt("vga", Ty::Prop(VGA_SUBS)),
        idx("virtio", 0, 15, Ty::Prop(VIRTIO_SUBS)),
        opt("vmgenid", Ty::Str),
        opt("watchdog", Ty::Str),
    ]
}

/// `POST /nodes/{node}/qemu`.
pub fn create_vm() -> Vec<Param> {
    let mut p = vm_config_params();
    p.extend([
        req("node", Ty::Fmt(Named::Node)),
        req("vmid", Ty::Fmt(Named::Vmid)),
        opt("archive", Ty::StrMax(255)),
        opt("bwlimit", Ty::Int(Some(0), None)),
        opt("force", Ty::Bool),
        opt("ha-managed", Ty::Bool),
        opt("import-working-storage", Ty::Fmt(Named::StorageId)),
        opt("live-restore", Ty::Bool),
        opt("pool", Ty::Str),
        opt("start", Ty::Bool),
        opt("storage", Ty::Fmt(Named::StorageId)),
        opt("unique", Ty::Bool),
    ]);
    p
}

/// `PUT` and `POST /nodes/{node}/qemu/{vmid}/config`.
pub fn update_vm(async_api: bool) -> Vec<Param> {
    let mut p = vm_config_params();
    p.extend([
        req("node", Ty::Fmt(Named::Node)),
        req("vmid", Ty::Fmt(Named::Vmid)),
        opt("delete", Ty::Fmt(Named::ConfigIdList)),
        opt("revert", Ty::Fmt(Named::ConfigIdList)),
        opt("digest", Ty::Pat(is_digest)),
        opt("force", Ty::Bool),
        opt("skiplock", Ty::Bool),
        opt("import-working-storage", Ty::Fmt(Named::StorageId)),
    ]);
    if async_api {
        p.push(opt("background_delay", Ty::Int(Some(1), Some(30))));
    }
    p
}

/// Disk keys accepted by `PUT …/resize`.
fn is_resize_disk(s: &str) -> bool {
    let idx_in = |prefix: &str, hi: u32| {
        s.strip_prefix(prefix)
            .and_then(|n| {
                n.parse::<u32>()
                    .ok()
                    .filter(|n| n.to_string().len() == s.len() - prefix.len())
            })
            .is_some_and(|n| n <= hi)
    };
    idx_in("ide", 3)
        || idx_in("scsi", 30)
        || idx_in("virtio", 15)
        || idx_in("sata", 5)
        || s == "efidisk0"
        || s == "tpmstate0"
}

pub fn resize() -> Vec<Param> {
    vm_path(vec![
        req("disk", Ty::Pat(is_resize_disk)),
        req("size", Ty::Pat(is_size)),
        opt("digest", Ty::Pat(is_digest)),
        opt("skiplock", Ty::Bool),
    ])
}

pub fn delete_vm() -> Vec<Param> {
    vm_path(vec![
        opt("purge", Ty::Bool),
        opt("destroy-unreferenced-disks", Ty::Bool),
        opt("skiplock", Ty::Bool),
    ])
}

pub fn vm_start() -> Vec<Param> {
    vm_path(vec![
        opt("skiplock", Ty::Bool),
        opt("timeout", Ty::Int(Some(0), None)),
        opt("force-cpu", Ty::Str),
        opt("machine", Ty::Prop(MACHINE_SUBS)),
        opt("migratedfrom", Ty::Fmt(Named::Node)),
        opt("migration_network", Ty::Str),
        opt("migration_type", Ty::Enum(&["secure", "insecure"])),
        opt("stateuri", Ty::Str),
        opt("targetstorage", Ty::Str),
        opt("with-conntrack-state", Ty::Bool),
        opt("nets-host-mtu", Ty::Str),
    ])
}

pub fn vm_stop() -> Vec<Param> {
    vm_path(vec![
        opt("skiplock", Ty::Bool),
        opt("timeout", Ty::Int(Some(0), None)),
        opt("keepActive", Ty::Bool),
        opt("migratedfrom", Ty::Fmt(Named::Node)),
        opt("overrule-shutdown", Ty::Bool),
    ])
}

pub fn vm_shutdown() -> Vec<Param> {
    vm_path(vec![
        opt("skiplock", Ty::Bool),
        opt("timeout", Ty::Int(Some(0), None)),
        opt("forceStop", Ty::Bool),
        opt("keepActive", Ty::Bool),
    ])
}

pub fn vm_reboot() -> Vec<Param> {
    vm_path(vec![opt("timeout", Ty::Int(Some(0), None))])
}

/// `POST /nodes/{node}/qemu/{vmid}/template` (qemu-server API2/Qemu.pm, template).
pub fn template() -> Vec<Param> {
    vm_path(vec![opt("disk", Ty::Str)])
}

/// `POST /nodes/{node}/qemu/{vmid}/clone` (qemu-server API2/Qemu.pm, clone_vm).
pub fn clone_vm() -> Vec<Param> {
    vm_path(vec![
        req("newid", Ty::Fmt(Named::Vmid)),
        opt("name", Ty::Str),
        opt("description", Ty::Str),
        opt("full", Ty::Bool),
        opt("storage", Ty::Str),
        opt("format", Ty::Enum(&["raw", "qcow2", "vmdk"])),
        opt("target", Ty::Fmt(Named::Node)),
        opt("snapname", Ty::Str),
        opt("pool", Ty::Str),
        opt("bwlimit", Ty::Int(Some(0), None)),
    ])
}

pub fn vm_config_get() -> Vec<Param> {
    vm_path(vec![opt("current", Ty::Bool), opt("snapshot", Ty::Str)])
}

/// True when `name` is a VM configuration key (`scsi0`, `cores`, …).
pub fn is_config_key(name: &str) -> bool {
    find(&vm_config_params(), name).is_some()
}

/// The type of a VM configuration key, if it is one.
pub fn config_key_type(name: &str) -> Option<Ty> {
    find(&vm_config_params(), name).map(|p| p.ty)
}

/// True for drive keys (`scsi0`, `virtio1`, `ide2`, `efidisk0`, …).
pub fn is_drive_key(name: &str) -> bool {
    ["ide", "sata", "scsi", "virtio"].iter().any(|b| {
        name.strip_prefix(b)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
    }) && is_config_key(name)
        || name == "efidisk0"
        || name == "tpmstate0"
}

/// A parameter given more than once (pve-http-server decode_urlencoded makes it an array):
/// RESTHandler.pm `normalize_legacy_param_formats` joins it with `,` for a string of a
/// `-list` format (`delete`, `revert`, `tags`, `nameserver`, `content`, `nodes`, …); for any
/// other, JSONSchema.pm check_type refuses it ("type check ('string') failed - got ARRAY").
pub fn join_repeated(key: &str, values: &[String]) -> Result<String, String> {
    const LISTS: &[&str] = &[
        "delete",
        "revert",
        "tags",
        "nameserver",
        "content",
        "nodes",
        "statusfilter",
        "vms",
    ];
    if LISTS.contains(&key) {
        return Ok(values.join(","));
    }
    let ty = match config_key_type(key) {
        Some(Ty::Bool) => "boolean",
        Some(Ty::Int(..)) => "integer",
        Some(Ty::Num(..)) => "number",
        _ => "string",
    };
    Err(format!("type check ('{ty}') failed - got ARRAY"))
}

/// Parses a drive value (`local-lvm:vm-100-disk-0,size=2G`) into its sub-keys.
pub fn parse_drive(v: &str) -> Result<BTreeMap<String, String>, String> {
    parse_property_string(DISK_SUBS, v)
}

/// Parses a `machine` value into its sub-keys (`type`, `viommu`, …).
pub fn parse_machine(v: &str) -> Result<BTreeMap<String, String>, String> {
    parse_property_string(MACHINE_SUBS, v)
}

/// Machine.pm `assert_valid_machine_property` of a `machine` value
/// ([`super::cpu_machine::check_machine_properties`]); a value that does not parse is left to
/// the schema, which has already refused it.
pub fn assert_valid_machine_property(machine: &str) -> Result<(), String> {
    match parse_machine(machine) {
        Ok(conf) => super::cpu_machine::check_machine_properties(&conf),
        Err(_) => Ok(()),
    }
}

/// Parses a NIC value into its sub-keys (`model`, `macaddr`, `bridge`, …).
pub fn parse_net(v: &str) -> Result<BTreeMap<String, String>, String> {
    parse_property_string(NET_SUBS, v)
}

fn vmid() -> Param {
    req("vmid", Ty::Fmt(Named::Vmid))
}

/// Drive names with `unusedN` (qemu-server Drive.pm, valid_drive_names_with_unused).
pub fn drive_names_with_unused() -> Vec<String> {
    let mut out = Vec::new();
    for (bus, n) in [("ide", 4), ("scsi", 31), ("virtio", 16), ("sata", 6)] {
        out.extend((0..n).map(|i| format!("{bus}{i}")));
    }
    out.push("efidisk0".into());
    out.push("tpmstate0".into());
    out.extend((0..256).map(|i| format!("unused{i}")));
    out
}

/// `POST /nodes/{node}/qemu/{vmid}/move_disk` (qemu-server API2/Qemu.pm, move_vm_disk). The
/// `disk` and `target-disk` enums are checked by the handler (their list is long).
pub fn move_disk() -> Vec<Param> {
    vec![
        node_param(),
        vmid(),
        opt("target-vmid", Ty::Fmt(Named::Vmid)),
        req("disk", Ty::Str),
        opt("storage", Ty::Fmt(Named::StorageId)),
        opt("format", Ty::Enum(&["raw", "qcow2", "vmdk"])),
        opt("delete", Ty::Bool),
        opt("digest", Ty::StrMax(40)),
        opt("bwlimit", Ty::Int(Some(0), None)),
        opt("target-disk", Ty::Str),
        opt("target-digest", Ty::StrMax(40)),
    ]
}

/// `PUT /nodes/{node}/qemu/{vmid}/unlink` (qemu-server API2/Qemu.pm, unlink).
pub fn unlink() -> Vec<Param> {
    vec![
        node_param(),
        vmid(),
        req("idlist", Ty::Fmt(Named::ConfigIdList)),
        opt("force", Ty::Bool),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::engine::{check, print_net, print_property_string};

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn rejects_unknown_and_missing() {
        let e = check(&create_vm(), &map(&[("node", "pve1"), ("bogus", "1")])).unwrap_err();
        assert!(e["bogus"].contains("not defined in schema"));
        assert_eq!(e["vmid"], "property is missing and it is not optional");
    }

    #[test]
    fn top_level_boolean_is_strict() {
        let e = check(
            &create_vm(),
            &map(&[("node", "pve1"), ("vmid", "100"), ("onboot", "true")]),
        )
        .unwrap_err();
        assert_eq!(e["onboot"], "type check ('boolean') failed - got 'true'");
    }

    #[test]
    fn drive_property_strings() {
        assert!(parse_drive("local-lvm:0,import-from=local:import/a.qcow2,discard=on").is_ok());
        let e = parse_drive("local-lvm:0,format=raw,format=qcow2").unwrap_err();
        assert!(e.contains("duplicate key"));
        let e = parse_drive("local-lvm:0,bogus=1").unwrap_err();
        assert!(e.contains("invalid key in comma-separated list property: bogus"));
        let e = parse_drive("local-lvm:0,discard=maybe").unwrap_err();
        assert!(e.contains("discard: value 'maybe' does not have a value in the enumeration"));
    }

    #[test]
    fn indexed_ranges() {
        assert!(is_config_key("scsi30"));
        assert!(!is_config_key("scsi31"));
        assert!(!is_config_key("scsi"));
        assert!(is_config_key("ipconfig0"));
    }

    #[test]
    fn urlencoded_sshkeys() {
        let e = check(
            &update_vm(false),
            &map(&[
                ("node", "p"),
                ("vmid", "100"),
                ("sshkeys", "ssh-ed25519 AAAA"),
            ]),
        )
        .unwrap_err();
        assert!(e["sshkeys"].starts_with("invalid format - invalid urlencoded string"));
        assert!(
            check(
                &update_vm(false),
                &map(&[
                    ("node", "p"),
                    ("vmid", "100"),
                    ("sshkeys", "ssh-ed25519%20AAAA")
                ])
            )
            .is_ok()
        );
    }

    #[test]
    fn net_canonical_order() {
        let kv = parse_net("bridge=vmbr0,virtio=BC:24:11:00:00:01,firewall=1").unwrap();
        assert_eq!(
            print_net(&kv),
            "virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1"
        );
        let kv = parse_drive("local-lvm:vm-100-disk-0,ssd=1,discard=on,size=2G").unwrap();
        assert_eq!(
            print_property_string("file", &kv),
            "local-lvm:vm-100-disk-0,discard=on,size=2G,ssd=1"
        );
    }
}
