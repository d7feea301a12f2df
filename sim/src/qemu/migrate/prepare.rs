//! QemuMigrate.pm's checks before anything moves (`prepare`, `scan_local_volumes`, with
//! QemuServer.pm `foreach_volid`/`check_storage_availability` and QemuMigrate/Helpers.pm
//! `check_local_resources`): local resources, linked clones, the storages on both nodes, and
//! the list of local volumes the later phases move. Kept apart so each refusal has one home.

use std::collections::BTreeMap;

use super::local_volumes::{LocalVolume, Reference};
use super::options::StorageMap;
use super::phases::Migration;
use crate::qemu::config_file::check_lock;
use crate::qemu::pending::Pending;
use crate::schema;
use crate::state::Sim;
use crate::storage::volumes;

/// The installed path of QemuMigrate.pm and the line of its linked-clone `die`, which has no
/// trailing newline, so Perl appends where it died (QemuMigrate.pm, scan_local_volumes).
const CLONE_DIE_AT: &str = "at /usr/share/perl5/PVE/QemuMigrate.pm line 586.";

/// A volume's attributes as `PVE::QemuServer::foreach_volid` collects them.
#[derive(Default, Clone, Debug)]
pub(super) struct VolAttr {
    pub(super) cdrom: bool,
    pub(super) is_cloudinit: bool,
    pub(super) shared: bool,
    pub(super) is_unused: bool,
    pub(super) is_attached: bool,
    pub(super) in_pending: bool,
    pub(super) size: Option<u64>,
    pub(super) is_tpmstate: bool,
    pub(super) drivename: Option<String>,
}

/// Every volume the config names (its drives, its `unusedN` and its pending values), with
/// their attributes (QemuServer.pm, `foreach_volid`; pve-sim has no snapshots).
pub(super) fn foreach_volid(
    conf: &BTreeMap<String, String>,
    pending: &Pending,
) -> BTreeMap<String, VolAttr> {
    let mut out: BTreeMap<String, VolAttr> = BTreeMap::new();
    let mut visit = |key: &str, value: &str, in_pending: bool| {
        let unused = key
            .strip_prefix("unused")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        let (volid, drive) = if unused {
            (value.to_string(), BTreeMap::new())
        } else if schema::is_drive_key(key) {
            match schema::parse_drive(value) {
                Ok(kv) => (kv.get("file").cloned().unwrap_or_default(), kv),
                Err(_) => return,
            }
        } else {
            return;
        };
        if volid.is_empty() {
            return;
        }
        let cdrom = drive.get("media").is_some_and(|m| m == "cdrom");
        let attr = out.entry(volid.clone()).or_insert_with(|| VolAttr {
            cdrom: true,
            ..VolAttr::default()
        });
        if !cdrom {
            attr.cdrom = false;
        }
        if volid.contains("cloudinit") {
            attr.is_cloudinit = true;
        }
        if drive.get("shared").is_some_and(|s| s == "1" || s == "on") {
            attr.shared = true;
        }
        if unused {
            attr.is_unused = true;
        }
        if !attr.is_unused && !in_pending {
            attr.is_attached = true;
        }
        if in_pending {
            attr.in_pending = true;
        }
        if attr.size.is_none() {
            attr.size = drive.get("size").and_then(|s| volumes::parse_size(s));
        }
        if key == "tpmstate0" {
            attr.is_tpmstate = true;
        }
        if !unused {
            attr.drivename = Some(key.to_string());
        }
    };
    for (k, v) in conf {
        visit(k, v, false);
    }
    for (k, v) in &pending.set {
        visit(k, v, true);
    }
    out
}

/// QemuMigrate/Helpers.pm, `check_local_resources` with `$noerr`: the local resources (and
/// those given by a mapping, which pve-sim has none of, so they are missing on every node).
pub(super) fn local_resources(conf: &BTreeMap<String, String>) -> (Vec<String>, Vec<String>) {
    let mut local = Vec::new();
    let mut mapped = Vec::new();
    for key in ["hostusb", "hostpci", "ivshmem"] {
        if conf.contains_key(key) {
            local.push(key.to_string());
        }
    }
    let numbered = |k: &str, prefix: &str| {
        k.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    for (key, value) in conf {
        let props: BTreeMap<&str, &str> = value
            .split(',')
            .map(|p| p.split_once('=').unwrap_or(("host", p)))
            .collect();
        if numbered(key, "usb") {
            if props
                .get("host")
                .is_some_and(|h| h.eq_ignore_ascii_case("spice"))
            {
                continue;
            }
            if props.contains_key("mapping") {
                mapped.push(key.clone());
            }
        }
        if numbered(key, "hostpci") && props.contains_key("mapping") {
            // A mapped PCI device blocks no offline migration; pve-sim has no mapping that is
            // live-migration capable.
            mapped.push(key.clone());
            continue;
        }
        if numbered(key, "virtiofs") {
            mapped.push(key.clone());
        }
        if numbered(key, "serial") && value == "socket" {
            continue;
        }
        if ["usb", "hostpci", "serial", "parallel", "virtiofs"]
            .iter()
            .any(|p| numbered(key, p))
        {
            local.push(key.clone());
        }
    }
    (local, mapped)
}

/// Whether the VM's display clipboard is VNC (`vga: …,clipboard=vnc`), which QEMU before
/// 10.1 cannot live-migrate; pve-sim's machines are 9.2.
pub(super) fn vnc_clipboard(conf: &BTreeMap<String, String>) -> bool {
    conf.get("vga")
        .is_some_and(|v| v.split(',').any(|p| p == "clipboard=vnc"))
}

/// Whether a volume lies on a shared storage (`$scfg->{shared}`).
pub(super) fn on_shared(volid: &str) -> bool {
    crate::tools::volume_parts(volid)
        .and_then(|(sid, _)| volumes::storage(sid))
        .is_some_and(|s| s.shared)
}

/// pve-storage, `storage_check_enabled` and `storage_config`: the storage exists on the node.
pub(super) fn storage_def(sid: &str) -> Result<&'static volumes::StorageDef, String> {
    volumes::storage(sid).ok_or_else(|| format!("storage '{sid}' does not exist"))
}

/// pve-storage Storage.pm, `storage_check_enabled`: the storage exists, is not disabled and
/// is there on `node` (`nodes`, storage_check_node).
pub(super) fn storage_enabled(
    sid: &str,
    node: &str,
) -> Result<&'static volumes::StorageDef, String> {
    let def = storage_def(sid)?;
    crate::storage::storage_cfg::check_enabled(sid, node)?;
    Ok(def)
}

/// The content type of a volume (`PVE::Storage::parse_volname`'s first value).
fn vtype_of(sim: &Sim, node: &str, volid: &str) -> Result<&'static str, String> {
    volumes::parse_volume(&sim.opts.data_dir, node, volid).map(|v| v.vtype)
}

/// QemuServer.pm, `check_storage_availability`: each drive's storage exists on both nodes and
/// holds the drive's content type.
pub(super) fn check_storage_availability(
    sim: &Sim,
    node: &str,
    target: &str,
    conf: &BTreeMap<String, String>,
) -> Result<(), String> {
    for (key, value) in conf {
        if !schema::is_drive_key(key) {
            continue;
        }
        let Ok(drive) = schema::parse_drive(value) else {
            continue;
        };
        let Some((sid, _)) = drive
            .get("file")
            .and_then(|f| crate::tools::volume_parts(f))
        else {
            continue;
        };
        let def = storage_enabled(sid, node)?;
        storage_enabled(sid, target)?;
        let volid = &drive["file"];
        let vtype = vtype_of(sim, node, volid)?;
        if !def.content.contains(&vtype) {
            return Err(format!(
                "{volid}: content type '{vtype}' is not available on storage '{sid}'"
            ));
        }
    }
    Ok(())
}

impl Migration<'_> {
    /// QemuMigrate.pm, `prepare`: the config, its lock, the run state, local devices, and the
    /// storages of every volume on the target. Returns whether the VM runs.
    pub(super) fn prepare(&mut self) -> Result<bool, String> {
        self.load()?;
        check_lock(&self.conf)?;
        let running = self
            .sim
            .lock()
            .vms
            .get(&self.vmid)
            .is_some_and(|v| v.running);
        if running {
            if !self.opts.online {
                return Err("can't migrate running VM without --online".into());
            }
            self.log(
                "conntrack state migration not supported or disabled, active connections might get dropped",
            );
        }
        let (local, mapped) = local_resources(&self.conf);
        let blocking: Vec<&String> = local.iter().filter(|k| !mapped.contains(k)).collect();
        if !blocking.is_empty() {
            // `$self->{running}` is set only after prepare returns: `force` lets even a
            // running VM with local devices through.
            if !self.opts.force {
                let list: Vec<&str> = blocking.iter().map(|s| s.as_str()).collect();
                return Err(format!(
                    "can't migrate VM which uses local devices: {}",
                    list.join(", ")
                ));
            }
            self.log("migrating VM which uses local devices");
        }
        if !mapped.is_empty() {
            return Err(format!(
                "can't migrate to '{}': missing mapped devices {}",
                self.target,
                mapped.join(", ")
            ));
        }
        if running && vnc_clipboard(&self.conf) {
            return Err("VMs with 'clipboard' set to 'vnc' are not live migratable with QEMU/machine versions older than 10.1!".into());
        }
        // get_vm_volumes: each volume's storage on the source, its target storage on the
        // target, with the volume's content type.
        for volid in foreach_volid(&self.conf, &self.pending).keys() {
            let Some((sid, _)) = crate::tools::volume_parts(volid) else {
                continue;
            };
            let targetsid = self.target_sid(sid)?;
            self.target_storage_check_available(&targetsid, volid)?;
        }
        // The ssh connection test (`/bin/true` on the target).
        self.sleep(self.sim.task_duration("qmigrate") / 2)?;
        Ok(running)
    }

    /// The storage a volume on `sid` goes to: the storage map's for a local storage, its own
    /// for a shared one (`# NOTE: local ignores shared mappings`, prepare and
    /// scan_local_volumes).
    fn target_sid(&self, sid: &str) -> Result<String, String> {
        Ok(if storage_enabled(sid, &self.source)?.shared {
            sid.to_string()
        } else {
            StorageMap::map(self.opts.storagemap.as_ref(), sid)
        })
    }

    /// QemuMigrate.pm, `target_storage_check_available`.
    fn target_storage_check_available(&self, targetsid: &str, volid: &str) -> Result<(), String> {
        let def = storage_enabled(targetsid, &self.target)?;
        let vtype = vtype_of(self.sim, &self.source, volid)?;
        if !def.content.contains(&vtype) {
            return Err(format!(
                "{volid}: content type '{vtype}' is not available on storage '{targetsid}'"
            ));
        }
        Ok(())
    }

    /// QemuMigrate.pm, `scan_local_volumes`: what each volume is, what blocks it, and how it
    /// moves.
    pub(super) fn scan_local_volumes(&mut self) -> Result<(), String> {
        let mut errors: BTreeMap<String, String> = BTreeMap::new();
        let mut other_errors: Vec<String> = Vec::new();
        for (volid, attr) in foreach_volid(&self.conf, &self.pending) {
            if let Err(e) = self.test_volid(&volid, &attr, &mut other_errors) {
                errors.insert(volid, e);
            }
        }
        for (volid, vol) in &self.local_volumes {
            let how = match vol.reference {
                Reference::Attached => {
                    if self.running && !self.opts.with_local_disks {
                        errors.insert(
                            volid.clone(),
                            "can't live migrate attached local disks without with-local-disks option"
                                .into(),
                        );
                    }
                    " (attached)"
                }
                Reference::Unused => " (unused)",
                Reference::Pending => " (pending change)",
                Reference::Generated => {
                    self.log(&format!(
                        "found generated disk '{volid}' (in current VM config)"
                    ));
                    continue;
                }
                Reference::Config => "",
            };
            self.log(&format!("found local disk '{volid}'{how}"));
        }
        for (volid, e) in &errors {
            self.log(&format!("can't migrate local disk '{volid}': {e}"));
        }
        for e in &other_errors {
            self.log(e);
        }
        if !errors.is_empty() || !other_errors.is_empty() {
            return Err("can't migrate VM - check log".into());
        }
        for volid in self.local_volumes.keys() {
            // parse_volname's base name: an LVM-thin `base-N-disk-K/vm-M-disk-J`, a directory
            // storage's `N/base-N-disk-K.qcow2/M/vm-M-disk-J.qcow2`.
            let name = crate::tools::volume_parts(volid).map_or("", |(_, n)| n);
            let base = match name.split('/').collect::<Vec<_>>().as_slice() {
                [base, _] if base.starts_with("base-") => Some(base.to_string()),
                [_, base, _, _] if base.starts_with("base-") => Some(base.to_string()),
                _ => None,
            };
            if let Some(base) = base {
                return Err(format!(
                    "can't migrate '{volid}' as it's a clone of '{base}' {CLONE_DIE_AT}"
                ));
            }
        }
        let running = self.running;
        for vol in self.local_volumes.values_mut() {
            vol.online = running && vol.reference == Reference::Attached;
        }
        Ok(())
    }

    /// The `$test_volid` of scan_local_volumes for one volume.
    fn test_volid(
        &mut self,
        volid: &str,
        attr: &VolAttr,
        other_errors: &mut Vec<String>,
    ) -> Result<(), String> {
        let reference = if attr.is_tpmstate || (attr.cdrom && attr.is_cloudinit) {
            Reference::Generated
        } else if attr.is_attached {
            Reference::Attached
        } else if attr.is_unused {
            Reference::Unused
        } else {
            Reference::Pending
        };
        let entry = |reference: Reference, targetsid: &str, size: u64, format: &str| LocalVolume {
            reference,
            targetsid: targetsid.to_string(),
            size,
            format: format.to_string(),
            is_cloudinit: attr.is_cloudinit,
            drivename: attr.drivename.clone(),
            online: false,
        };
        if volid.starts_with('/') {
            if attr.shared {
                return Ok(());
            }
            self.local_volumes
                .insert(volid.to_string(), entry(Reference::Config, "", 0, "raw"));
            return Err("local file/device".into());
        }
        if attr.cdrom {
            if volid == "cdrom" {
                other_errors.push("can't migrate local cdrom drive".into());
                return Ok(());
            }
            if volid == "none" {
                return Ok(());
            }
        }
        let (sid, _) = crate::tools::volume_parts(volid)
            .ok_or_else(|| format!("unable to parse volume ID '{volid}'"))?;
        let targetsid = self.target_sid(sid)?;
        self.target_storage_check_available(&targetsid, volid)?;
        // A volume on shared storage is there on the target already.
        if storage_def(sid)?.shared {
            return Ok(());
        }
        let vol = volumes::parse_volume(&self.sim.opts.data_dir, &self.source, volid)?;
        let size = if vol.vtype == "images" {
            volumes::virtual_size(&vol.path, &vol.format)
                .map_err(|_| format!("unable to determine size for volume '{volid}'"))?
        } else {
            std::fs::metadata(&vol.path).map(|m| m.len()).unwrap_or(0)
        };
        self.local_volumes.insert(
            volid.to_string(),
            entry(reference, &targetsid, size, &vol.format),
        );
        if attr.cdrom {
            if attr.is_cloudinit {
                return Ok(());
            }
            return Err("local cdrom image".into());
        }
        if vol.vmid != Some(self.vmid) {
            let owner = vol.vmid.map(|o| o.to_string()).unwrap_or_default();
            return Err(format!("owned by other VM (owner = VM {owner})"));
        }
        if crate::qemu::templates::base_in_use(self.sim, &self.source, volid).is_some() {
            return Err("referenced by linked clone(s)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_resources_as_check_local_resources_finds_them() {
        let conf: BTreeMap<String, String> = [
            ("usb0", "host=1234:5678"),
            ("usb1", "spice"),
            ("usb2", "mapping=stick"),
            ("serial0", "socket"),
            ("serial1", "/dev/ttyS0"),
            ("hostpci0", "0000:01:00.0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let (local, mapped) = local_resources(&conf);
        assert_eq!(local, ["hostpci0", "serial1", "usb0", "usb2"]);
        assert_eq!(mapped, ["usb2"]);
    }
}
