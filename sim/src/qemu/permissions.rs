//! qemu-server's own permission checks, beyond each endpoint's schema `permissions`
//! (`access/api_perms.rs`): `API2/Qemu.pm` create_vm's up-front checks,
//! `$check_storage_access`, `$check_vm_modify_config_perm`, the serial, USB and PCI device
//! checks, `QemuServer.pm` `check_bridge_access` (pve-guest-common `check_vnet_access`),
//! `GuestHelpers.pm` `assert_tag_permissions`, and pve-storage `check_volume_access`.
//!
//! A check that PVE makes with `raise_perm_exc` fails with a 403; one that PVE `die`s with
//! (`only root can set '…' config`) with a 500, as PVE answers it.

use std::collections::BTreeMap;

use crate::access::check::{Checker, perm_exc};
use crate::http::handler::{ApiErr, Params};
use crate::schema;
use crate::state::Sim;
use crate::storage::volumes;

/// The `VM.*` privilege each kind of key needs (`$cpuoptions`, `$memoryoptions`,
/// `$hwtypeoptions`, `$generaloptions`, `$vmpoweroptions`, `$diskoptions`,
/// `$cloudinitoptions` of API2/Qemu.pm, PVE 9.1).
fn key_privileges(key: &str) -> Option<(&'static [&'static str], bool)> {
    let numbered = |prefix: &str| {
        key.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    let privs: (&'static [&'static str], bool) = match key {
        "cores" | "cpu" | "runningcpu" | "cpulimit" | "cpuunits" | "numa" | "smp" | "sockets"
        | "vcpus" => (&["VM.Config.CPU"], false),
        _ if numbered("numa") => (&["VM.Config.CPU"], false),
        "memory" | "balloon" | "shares" | "allow-ksm" => (&["VM.Config.Memory"], false),
        "acpi" | "hotplug" | "kvm" | "machine" | "runningmachine" | "scsihw" | "smbios1"
        | "tablet" | "vga" | "watchdog" | "audio0" | "rng0" => (&["VM.Config.HWType"], false),
        "agent" | "autostart" | "bios" | "description" | "keyboard" | "localtime"
        | "migrate_downtime" | "migrate_speed" | "name" | "onboot" | "ostype" | "protection"
        | "reboot" | "startdate" | "startup" | "tdf" | "template" => {
            (&["VM.Config.Options"], false)
        }
        "freeze" => (&["VM.PowerMgmt"], false),
        "boot" | "bootdisk" | "vmstatestorage" => (&["VM.Config.Disk"], false),
        "running-nets-host-mtu" => (&["VM.Config.Network"], false),
        _ if numbered("net") => (&["VM.Config.Network"], false),
        "cicustom" | "cipassword" | "citype" | "ciuser" | "ciupgrade" | "nameserver"
        | "searchdomain" | "sshkeys" => (&["VM.Config.Cloudinit", "VM.Config.Network"], true),
        _ if numbered("ipconfig") => (&["VM.Config.Cloudinit", "VM.Config.Network"], true),
        "vmstate" => (&["VM.Config.Disk", "VM.PowerMgmt"], false),
        _ => return None,
    };
    Some(privs)
}

/// API2/Qemu.pm `$check_vm_modify_config_perm`: each key's privilege on the VM (or its
/// pool); `startup` also needs `Sys.Modify` on `/` (it changes the host's behaviour); a key
/// of no group (`args`, `hookscript`, `affinity`, `vmgenid`, …) is root@pam's alone. Drives,
/// `cdrom`, `unusedN`, `serialN`, `usbN`, `hostpciN`, `virtiofsN` and `tags` are checked
/// elsewhere, by their value.
pub fn check_vm_modify_config_perm<'k>(
    checker: &Checker,
    vmid: u32,
    pool: Option<&str>,
    keys: impl IntoIterator<Item = &'k str>,
) -> Result<(), ApiErr> {
    if checker.user == "root@pam" {
        return Ok(());
    }
    let by_value = ["unused", "serial", "usb", "hostpci", "virtiofs"];
    for key in keys {
        let numbered = by_value.iter().any(|p| {
            key.strip_prefix(p)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        });
        if schema::is_drive_key(key) || key == "cdrom" || key == "tags" || numbered {
            continue;
        }
        let Some((privs, any)) = key_privileges(key) else {
            return Err(ApiErr::die(format!("only root can set '{key}' config")));
        };
        checker.check_vm_perm(vmid, pool, privs, any)?;
        if key == "startup" {
            checker.check("/", &["Sys.Modify"])?;
        }
    }
    Ok(())
}

/// pve-storage Storage.pm `check_volume_access`: `Datastore.Allocate` on the storage is
/// enough; else an ISO, container template or import source needs `Datastore.AllocateSpace`
/// or `Datastore.Audit` on it, the VM's own volume nothing, another VM's image
/// `Datastore.Audit` and that VM's `VM.Config.Disk`; an absolute path is root@pam's alone.
pub fn check_volume_access(
    checker: &Checker,
    sim: &Sim,
    node: &str,
    vmid: u32,
    volid: &str,
) -> Result<(), ApiErr> {
    if volid.starts_with('/') {
        if checker.user != "root@pam" {
            return Err(ApiErr::die(
                "Only root can pass arbitrary filesystem paths. at /usr/share/perl5/PVE/Storage.pm line 651.",
            ));
        }
        return Ok(());
    }
    // A volume pve-sim cannot parse is refused by the drive checks after this.
    let Ok(vol) = volumes::parse_volume(&sim.opts.data_dir, node, volid) else {
        return Ok(());
    };
    let storage = format!("/storage/{}", vol.storage);
    if checker.has(&storage, &["Datastore.Allocate"]) {
        return Ok(());
    }
    match (vol.vtype, vol.vmid) {
        ("iso" | "vztmpl" | "import", _) => {
            checker.check_any(&storage, &["Datastore.AllocateSpace", "Datastore.Audit"])
        }
        (_, Some(owner)) if owner == vmid => Ok(()),
        ("images", Some(owner)) => {
            checker.check(&storage, &["Datastore.Audit"])?;
            checker.check(&format!("/vms/{owner}"), &["VM.Config.Disk"])
        }
        _ => Err(ApiErr::die(format!("missing privileges to access {volid}"))),
    }
}

/// qemu-server Drive.pm `$NEW_DISK_RE`: `[storage:]size`, a disk to allocate; its storage.
fn new_disk_storage(file: &str) -> Option<Option<&str>> {
    let (sid, size) = match file.split_once(':') {
        Some((sid, size)) => (Some(sid), size),
        None => (None, file),
    };
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let size_ok = match size.split_once('.') {
        Some((whole, frac)) => number(whole) && number(frac),
        None => number(size),
    };
    let sid_ok =
        sid.is_none_or(|s| !s.is_empty() && !s.contains(|c: char| c == '/' || c.is_whitespace()));
    (size_ok && sid_ok).then_some(sid)
}

/// API2/Qemu.pm `$check_storage_access`, for each drive of `settings`: a CD-ROM drive of the
/// host needs `Sys.Console` on `/`; a new disk `Datastore.AllocateSpace` on its storage (or
/// the default `storage`); an existing volume [`check_volume_access`]; an `import-from`
/// source owned by a VM that VM's `VM.Clone`, other sources [`check_volume_access`] (an OVA
/// also `Datastore.AllocateSpace` on its working storage); `unusedN` volumes and
/// `vmstatestorage` likewise.
pub fn check_storage_access(
    checker: &Checker,
    sim: &Sim,
    node: &str,
    vmid: u32,
    settings: &BTreeMap<String, String>,
    default_storage: Option<&str>,
) -> Result<(), ApiErr> {
    for (key, value) in settings {
        if !schema::is_drive_key(key) || key.starts_with("unused") {
            continue;
        }
        let Ok(drive) = schema::parse_drive(value) else {
            continue;
        };
        let file = drive.get("file").map(String::as_str).unwrap_or("");
        let cdrom = drive.get("media").is_some_and(|m| m == "cdrom");
        let volname = crate::tools::volume_parts(file).map(|(_, name)| name);
        if file.is_empty() || file == "none" || file == "cloudinit" || volname == Some("cloudinit")
        {
        } else if cdrom && file == "cdrom" {
            checker.check("/", &["Sys.Console"])?;
        } else if let Some(sid) = new_disk_storage(file).filter(|_| !cdrom) {
            let Some(sid) = sid.or(default_storage) else {
                return Err(ApiErr::die(
                    "no storage ID specified (and no default storage)",
                ));
            };
            checker.check(&format!("/storage/{sid}"), &["Datastore.AllocateSpace"])?;
        } else {
            check_volume_access(checker, sim, node, vmid, file)?;
        }
        if let Some(src) = drive.get("import-from") {
            let vol = volumes::parse_volume(&sim.opts.data_dir, node, src).ok();
            if let Some(vol) = &vol
                && vol.format == "ova"
            {
                let working = settings
                    .get("import-working-storage")
                    .cloned()
                    .unwrap_or_else(|| vol.storage.clone());
                checker.check(&format!("/storage/{working}"), &["Datastore.AllocateSpace"])?;
            }
            match vol.and_then(|v| v.vmid) {
                Some(owner) => checker.check(&format!("/vms/{owner}"), &["VM.Clone"])?,
                None => check_volume_access(checker, sim, node, vmid, src)?,
            }
        }
    }
    let unused = settings
        .iter()
        .filter(|(k, _)| k.starts_with("unused"))
        .filter_map(|(_, v)| schema::parse_drive(v).ok()?.get("file").cloned());
    for file in unused {
        check_volume_access(checker, sim, node, vmid, &file)?;
    }
    if let Some(sid) = settings.get("vmstatestorage") {
        checker.check(&format!("/storage/{sid}"), &["Datastore.AllocateSpace"])?;
    }
    Ok(())
}

/// pve-guest-common GuestHelpers.pm `get_tags_from_trunk`: `10;20-22` as 10, 20, 21, 22.
fn trunk_tags(trunks: &str) -> Vec<u32> {
    let mut tags = Vec::new();
    for part in trunks.split(';').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((from, to)) => {
                if let (Ok(from), Ok(to)) = (from.parse::<u32>(), to.parse::<u32>()) {
                    tags.extend(from..=to);
                }
            }
            None => tags.extend(part.parse::<u32>().ok()),
        }
    }
    tags.sort_unstable();
    tags.dedup();
    tags
}

/// QemuServer.pm `check_bridge_access` → GuestHelpers.pm `check_vnet_access`: each NIC's
/// `SDN.Use` on `/sdn/zones/localnetwork/{bridge}/{tag}` for its VLAN tag and each trunk
/// VLAN, or on `/sdn/zones/localnetwork/{bridge}` without them (pve-sim has no SDN vnets,
/// so every bridge is in zone `localnetwork`).
pub fn check_bridge_access<'v>(
    checker: &Checker,
    nets: impl IntoIterator<Item = (&'v String, &'v String)>,
) -> Result<(), ApiErr> {
    if checker.user == "root@pam" {
        return Ok(());
    }
    for (key, value) in nets {
        let is_net = key
            .strip_prefix("net")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !is_net {
            continue;
        }
        let Ok(net) = schema::parse_net(value) else {
            continue;
        };
        let Some(bridge) = net.get("bridge") else {
            continue;
        };
        let path = format!("/sdn/zones/localnetwork/{bridge}");
        let tag = net.get("tag").filter(|t| !t.is_empty() && *t != "0");
        if let Some(tag) = tag {
            checker.check(&format!("{path}/{tag}"), &["SDN.Use"])?;
        }
        let trunks = net.get("trunks").map(|t| trunk_tags(t)).unwrap_or_default();
        for vlan in &trunks {
            checker.check(&format!("{path}/{vlan}"), &["SDN.Use"])?;
        }
        if tag.is_none() && !net.contains_key("trunks") {
            checker.check(&path, &["SDN.Use"])?;
        }
    }
    Ok(())
}

/// API2/Qemu.pm `$check_vm_create_serial_perm`, `check_usb_perm`, `check_hostpci_perm`: a
/// serial socket, a SPICE USB port or a mapped USB or PCI device needs `VM.Config.HWType`
/// (a mapped one also `Mapping.Use` on its mapping); host devices are root@pam's alone.
pub fn check_device_perms(
    checker: &Checker,
    vmid: u32,
    pool: Option<&str>,
    settings: &BTreeMap<String, String>,
) -> Result<(), ApiErr> {
    if checker.user == "root@pam" {
        return Ok(());
    }
    let prop = |value: &str, key: &str| -> Option<String> {
        value
            .split(',')
            .find_map(|part| match part.split_once('=') {
                Some((k, v)) if k == key => Some(v.to_string()),
                None if key == "host" => Some(part.to_string()),
                _ => None,
            })
    };
    let hwtype = &["VM.Config.HWType"][..];
    for (key, value) in settings {
        if key.starts_with("serial") {
            if value != "socket" {
                return Err(ApiErr::die(format!(
                    "only root can set '{key}' config for real devices"
                )));
            }
            checker.check_vm_perm(vmid, pool, hwtype, false)?;
        } else if key.starts_with("usb") {
            checker.check_vm_perm(vmid, pool, hwtype, false)?;
            if let Some(mapping) = prop(value, "mapping") {
                checker.check(&format!("/mapping/usb/{mapping}"), &["Mapping.Use"])?;
            } else if !prop(value, "host").is_some_and(|h| h.eq_ignore_ascii_case("spice")) {
                return Err(ApiErr::die(format!(
                    "only root can set '{key}' config for real devices"
                )));
            }
        } else if key.starts_with("hostpci") {
            let Some(mapping) = prop(value, "mapping") else {
                return Err(ApiErr::die(format!(
                    "only root can set '{key}' config for non-mapped devices"
                )));
            };
            checker.check(&format!("/mapping/pci/{mapping}"), &["Mapping.Use"])?;
            checker.check_vm_perm(vmid, pool, hwtype, false)?;
        }
    }
    Ok(())
}

/// GuestHelpers.pm `assert_tag_permissions`: changing tags needs `VM.Config.Options` on the
/// VM; without `Sys.Modify` on `/`, a tag added or removed that is registered
/// (datacenter.cfg `registered-tags`, `--registered-tags`) fails. datacenter.cfg's
/// `user-tag-access` is PVE's default, `user-allow: free`.
pub fn assert_tag_permissions(
    checker: &Checker,
    sim: &Sim,
    vmid: u32,
    old: &str,
    new: &str,
) -> Result<(), ApiErr> {
    checker.check_vm_perm(vmid, None, &["VM.Config.Options"], false)?;
    if checker.has("/", &["Sys.Modify"]) {
        return Ok(());
    }
    let count = |text: &str| {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for tag in crate::tools::split_list(text) {
            *counts.entry(tag).or_default() += 1;
        }
        counts
    };
    let (old, new) = (count(old), count(new));
    let all: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for tag in all {
        if old.get(tag) != new.get(tag) && sim.opts.registered_tags.contains(tag) {
            return Err(perm_exc(Some(&format!(
                "/, Sys.Modify for modifying tag '{tag}'"
            ))));
        }
    }
    Ok(())
}

/// The parameters create_vm extracts before its config checks (they are not config keys).
fn config_keys(params: &Params) -> BTreeMap<String, String> {
    params
        .iter()
        .filter(|(k, _)| schema::is_config_key(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// API2/Qemu.pm create_vm, before it locks the config: `Datastore.AllocateSpace` on
/// `storage`; `Sys.Console` on `/` for `ha-managed`; `VM.PowerMgmt` for `start=1` (the
/// worker starts the VM without vm_start's own check); `VM.Allocate` on `/vms/{vmid}` or
/// the pool (else a bare `Permission check failed`); then the storages, the keys, the
/// devices and the bridges.
pub fn create_vm(
    sim: &Sim,
    checker: &Checker,
    node: &str,
    vmid: u32,
    params: &Params,
) -> Result<(), ApiErr> {
    let pool = params.get("pool").map(String::as_str);
    let storage = params.get("storage").map(String::as_str);
    if let Some(sid) = storage {
        checker.check(&format!("/storage/{sid}"), &["Datastore.AllocateSpace"])?;
    }
    if params.get("ha-managed").is_some_and(|v| v == "1")
        && crate::versions::has(
            &sim.opts.version,
            crate::versions::Change::CreateHaNeedsConsole,
        )
    {
        checker.check("/", &["Sys.Console"])?;
    }
    if params.get("start").is_some_and(|v| v == "1") {
        checker.check_vm_perm(vmid, pool, &["VM.PowerMgmt"], false)?;
    }
    let allocate = checker.has(&format!("/vms/{vmid}"), &["VM.Allocate"])
        || pool.is_some_and(|p| checker.has(&format!("/pool/{p}"), &["VM.Allocate"]));
    if !allocate {
        return Err(perm_exc(None));
    }
    let mut settings = config_keys(params);
    if let Some(extraction) = params.get("import-working-storage") {
        settings.insert("import-working-storage".into(), extraction.clone());
    }
    check_storage_access(checker, sim, node, vmid, &settings, storage)?;
    settings.remove("import-working-storage");
    check_vm_modify_config_perm(checker, vmid, pool, settings.keys().map(String::as_str))?;
    check_device_perms(checker, vmid, pool, &settings)?;
    check_bridge_access(checker, &settings)
}

/// API2/Qemu.pm clone_vm's `$load_and_check`: `$check_storage_access_clone` (a host CD-ROM
/// needs `Sys.Console` on `/`, each disk `Datastore.AllocateSpace` on the target `storage` or
/// its own, as does `vmstatestorage`), then `check_bridge_access` on the source's NICs.
pub fn clone_vm(
    checker: &Checker,
    conf: &BTreeMap<String, String>,
    storage: Option<&str>,
) -> Result<(), ApiErr> {
    for (key, value) in conf {
        if !schema::is_drive_key(key) || key.starts_with("unused") {
            continue;
        }
        let Ok(drive) = schema::parse_drive(value) else {
            continue;
        };
        let file = drive.get("file").map(String::as_str).unwrap_or("");
        if file.is_empty() || file == "none" {
            continue;
        }
        if drive.get("media").is_some_and(|m| m == "cdrom") {
            if file == "cdrom" {
                checker.check("/", &["Sys.Console"])?;
            }
            continue;
        }
        let own = crate::tools::volume_parts(file).map(|(sid, _)| sid);
        if let Some(sid) = storage.or(own) {
            checker.check(&format!("/storage/{sid}"), &["Datastore.AllocateSpace"])?;
        }
    }
    if let Some(sid) = conf.get("vmstatestorage") {
        checker.check(&format!("/storage/{sid}"), &["Datastore.AllocateSpace"])?;
    }
    check_bridge_access(checker, conf)
}

/// API2/Qemu.pm update_vm_api, before it loads the config: the deleted keys and the set
/// ones ([`check_vm_modify_config_perm`]), the storages, the bridges of the new NICs.
pub fn update_vm(
    sim: &Sim,
    checker: &Checker,
    node: &str,
    vmid: u32,
    sets: &[(String, String)],
    deletes: &[String],
) -> Result<(), ApiErr> {
    check_vm_modify_config_perm(checker, vmid, None, deletes.iter().map(String::as_str))?;
    check_vm_modify_config_perm(checker, vmid, None, sets.iter().map(|(k, _)| k.as_str()))?;
    let settings: BTreeMap<String, String> = sets.iter().cloned().collect();
    check_storage_access(checker, sim, node, vmid, &settings, None)?;
    check_bridge_access(checker, &settings)
}

/// API2/Qemu.pm update_vm_api's `$check_drive_perms`: a cloud-init drive needs
/// `VM.Config.Cloudinit` and `VM.Config.CDROM`, a CD-ROM `VM.Config.CDROM`, a disk
/// `VM.Config.Disk`.
fn check_drive_perms(checker: &Checker, vmid: u32, value: &str) -> Result<(), ApiErr> {
    let drive = schema::parse_drive(value).unwrap_or_default();
    let file = drive.get("file").map(String::as_str).unwrap_or("");
    let cloudinit = file.contains("cloudinit");
    let cdrom = drive.get("media").is_some_and(|m| m == "cdrom");
    let privs: &[&str] = if cloudinit {
        &["VM.Config.Cloudinit", "VM.Config.CDROM"]
    } else if cdrom {
        &["VM.Config.CDROM"]
    } else {
        &["VM.Config.Disk"]
    };
    checker.check_vm_perm(vmid, None, privs, false)
}

/// update_vm_api's `$updatefn`, key by key against the config: a deleted or replaced drive
/// and a new one ([`check_drive_perms`]); an unused disk deleted `VM.Config.Disk`; tags
/// ([`assert_tag_permissions`]); a NIC's bridge before the change
/// ([`check_bridge_access`]); devices by their value.
pub fn update_keys(
    sim: &Sim,
    checker: &Checker,
    vmid: u32,
    conf: &BTreeMap<String, String>,
    sets: &[(String, String)],
    deletes: &[String],
) -> Result<(), ApiErr> {
    for key in deletes {
        let Some(old) = conf.get(key) else {
            continue;
        };
        if key.starts_with("unused") {
            checker.check_vm_perm(vmid, None, &["VM.Config.Disk"], false)?;
        } else if schema::is_drive_key(key) {
            check_drive_perms(checker, vmid, old)?;
        } else if key == "tags" {
            assert_tag_permissions(checker, sim, vmid, old, "")?;
        } else if key.starts_with("net") {
            check_bridge_access(checker, [(key, old)])?;
        } else {
            check_device_perms(
                checker,
                vmid,
                None,
                &BTreeMap::from([(key.clone(), old.clone())]),
            )?;
        }
    }
    for (key, value) in sets {
        if schema::is_drive_key(key) && !key.starts_with("unused") {
            if let Some(old) = conf.get(key) {
                check_drive_perms(checker, vmid, old)?;
            }
            check_drive_perms(checker, vmid, value)?;
        } else if key == "tags" {
            let old = conf.get(key).map(String::as_str).unwrap_or("");
            assert_tag_permissions(checker, sim, vmid, old, value)?;
        } else if key.starts_with("net") {
            if let Some(old) = conf.get(key) {
                check_bridge_access(checker, [(key, old)])?;
            }
        } else {
            let mut devices = BTreeMap::new();
            if let Some(old) = conf.get(key) {
                devices.insert(key.clone(), old.clone());
                check_device_perms(checker, vmid, None, &devices)?;
            }
            devices.insert(key.clone(), value.clone());
            check_device_perms(checker, vmid, None, &devices)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_disks_are_storage_and_size() {
        assert_eq!(new_disk_storage("local-lvm:4"), Some(Some("local-lvm")));
        assert_eq!(new_disk_storage("0.5"), Some(None));
        assert_eq!(new_disk_storage("local-lvm:vm-100-disk-0"), None);
        assert_eq!(new_disk_storage("local:iso/x.iso"), None);
    }

    #[test]
    fn trunks_expand_ranges() {
        assert_eq!(trunk_tags("10;20-22"), [10, 20, 21, 22]);
    }

    #[test]
    fn keys_of_no_group_are_root_only() {
        assert!(key_privileges("args").is_none());
        assert!(key_privileges("hookscript").is_none());
        assert_eq!(key_privileges("ipconfig0").map(|p| p.1), Some(true));
        assert_eq!(
            key_privileges("numa1").map(|p| p.0),
            Some(&["VM.Config.CPU"][..])
        );
    }
}
