//! Which keys `extra_config` may set: a copy of the VM config keys in PVE's schema, and the
//! keys the module manages through its own options.

use super::validate::is_drive_slot;

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
pub fn not_a_config_key(key: &str) -> Option<&'static str> {
    // update_vm_api deletes bootdisk when it writes a boot order with `order=`, so a
    // bootdisk beside the boot order the module manages would not stay.
    if key == "bootdisk" {
        return Some(
            "is deprecated, and PVE deletes it when it writes a boot order (update_vm_api): give boot: order=… instead",
        );
    }
    let known = PVE_CONFIG_KEYS.iter().any(|c| match c.strip_suffix("[n]") {
        Some(prefix) => key
            .strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
        None => *c == key,
    });
    if known {
        return None;
    }
    Some(match key {
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
        // resolve_cdrom_alias (API2/Qemu.pm) stores it as ide2: it would never match.
        "cdrom" => {
            "is PVE's alias of ide2 (PVE stores it as ide2, so it would never match): give the drive through disks or cloudinit_slot"
        }
        "lock" | "template" | "digest" | "delete" | "revert" | "skiplock" | "node" | "vmid"
        | "background_delay" => "is not a config key the module may set",
        _ => "is not a VM config key in PVE's schema",
    })
}

/// Keys the module manages through its own options; `extra_config` may not set them.
pub fn managed_key(key: &str) -> bool {
    is_drive_slot(key)
        || key.starts_with("net")
        || key.starts_with("ipconfig")
        || key.starts_with("serial")
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
        .contains(&key)
}
