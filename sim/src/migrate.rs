//! Moving a VM to another node, after qemu-server and pve-guest-common:
//!
//! * `GET …/migrate` (API2/Qemu.pm, `migrate_vm_precondition`): what a migration would meet —
//!   whether the VM runs, the nodes it may go to, its local disks and local resources.
//! * `POST …/migrate` (API2/Qemu.pm, `migrate_vm`): the early refusals (the target is this
//!   node or no cluster node, root-only options, the config and its lock, a running VM without
//!   `online`, the target storages), then a `qmigrate` task under the migration lock
//!   (GuestHelpers.pm, `guest_migration_lock`) that runs `PVE::QemuMigrate` through
//!   AbstractMigrate.pm's `migrate`, phase by phase, under the VM's config lock:
//!   `prepare` (the checks again, local devices), `phase1` (`lock: migrate`, the volumes
//!   scanned, the offline ones copied with `storage_migrate`), `phase2` for a running VM (the
//!   VM started on the target, its attached disks mirrored, its memory moved), and
//!   `phase3_cleanup` (the new volume ids written, the config moved to the target, the source
//!   volumes freed, the lock cleared on the target). A failure in phase 1 or 2 cleans up
//!   (`phase1_cleanup`, `phase2_cleanup`) and leaves the VM where it was.
//!
//! The task log is PVE's: AbstractMigrate's lines stamped with the time (`log`), the
//! block-job monitor's and the target's lines as they are printed, dd's progress for offline
//! copies (pve-storage, `storage_migrate` rate-limits it) and `drive-scsi0: transferred …`
//! for mirrored disks (QemuServer/BlockJob.pm, `monitor`). Copies take the time
//! `--import-rate` gives them; the memory transfer takes the `qmigrate` task duration.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::api_schema::{self, vm_path};
use crate::handler::{ApiErr, ApiResult, Auth, Params, wait_until};
use crate::pending::Pending;
use crate::qemu_config::{check_lock, config_of, file_of};
use crate::schema::{self, Named, Param, Ty, opt, req};
use crate::state::{Sim, epoch};
use crate::storage::{self, render_bytes};
use crate::tasks::{self, INTERRUPT, TaskCtx};

/// `POST /nodes/{node}/qemu/{vmid}/migrate` (API2/Qemu.pm, migrate_vm). `migration_network`
/// (a CIDR) and `targetstorage` (a storage-pair list) are checked by [`migrate`] with PVE's
/// texts.
pub fn migrate_spec() -> Vec<Param> {
    vm_path(vec![
        req("target", Ty::Fmt(Named::Node)),
        opt("online", Ty::Bool),
        opt("force", Ty::Bool),
        opt("migration_type", Ty::Enum(&["secure", "insecure"])),
        opt("migration_network", Ty::Str),
        opt("with-local-disks", Ty::Bool),
        opt("targetstorage", Ty::Str),
        opt("bwlimit", Ty::Int(Some(0), None)),
        opt("with-conntrack-state", Ty::Bool),
    ])
}

/// `GET /nodes/{node}/qemu/{vmid}/migrate` (API2/Qemu.pm, migrate_vm_precondition).
pub fn precondition_spec() -> Vec<Param> {
    vm_path(vec![opt("target", Ty::Fmt(Named::Node))])
}

/// The installed path of QemuMigrate.pm and the line of its linked-clone `die`, which has no
/// trailing newline, so Perl appends where it died (QemuMigrate.pm, scan_local_volumes).
const CLONE_DIE_AT: &str = "at /usr/share/perl5/PVE/QemuMigrate.pm line 586.";

/// How long `guest_migration_lock` waits for `/var/lock/pve-manager/pve-migrate-N`.
const MIGRATION_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// `PVE::JSONSchema::split_list`.
fn split_list(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c == ',' || c == ';' || c == '\0' || c.is_whitespace())
        .filter(|s| !s.is_empty())
}

/// pve-common JSONSchema.pm, `parse_id` for a storage: why `id` is no storage ID, if it is not.
fn storage_id_error(id: &str) -> Option<String> {
    if id.len() < 2 {
        return Some(format!(
            "storage ID '{id}' cannot be shorter than 2 characters"
        ));
    }
    let bytes = id.as_bytes();
    let ok = bytes[0].is_ascii_alphabetic()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b));
    (!ok).then(|| format!("storage ID '{id}' contains illegal characters"))
}

/// A storage map as `PVE::JSONSchema::parse_idmap` returns it.
#[derive(Clone, Debug, Default)]
struct StorageMap {
    identity: bool,
    default: Option<String>,
    entries: BTreeMap<String, String>,
}

impl StorageMap {
    /// `parse_idmap($idmap, 'pve-storage-id')`: `Err((true, …))` for an entry that is no ID
    /// (what the `storage-pair-list` format refuses, entry by entry), `Err((false, …))` for a
    /// map that is wrong as a whole.
    fn parse(text: &str) -> Result<StorageMap, (bool, String)> {
        let mut map = StorageMap::default();
        for entry in split_list(text) {
            if entry == "1" {
                map.identity = true;
            } else if let Some((source, target)) = entry
                .split_once(':')
                .filter(|(s, t)| !s.is_empty() && !t.is_empty() && !t.contains(':'))
            {
                if let Some(e) = storage_id_error(source).or_else(|| storage_id_error(target)) {
                    return Err((true, format!("entry '{entry}' contains invalid ID - {e}")));
                }
                if map.entries.contains_key(source) {
                    return Err((false, format!("duplicate mapping for source '{source}'")));
                }
                map.entries.insert(source.into(), target.into());
            } else {
                if let Some(e) = storage_id_error(entry) {
                    return Err((true, format!("entry '{entry}' contains invalid ID - {e}")));
                }
                if map.default.is_some() {
                    return Err((false, "default target ID can only be provided once".into()));
                }
                map.default = Some(entry.into());
            }
        }
        if map.identity && (map.default.is_some() || !map.entries.is_empty()) {
            return Err((
                false,
                "identity mapping cannot be combined with other mappings".into(),
            ));
        }
        Ok(map)
    }

    /// `PVE::JSONSchema::map_id`.
    fn map(map: Option<&StorageMap>, source: &str) -> String {
        let Some(map) = map else {
            return source.into();
        };
        if let Some(t) = map.entries.get(source) {
            return t.clone();
        }
        map.default.clone().unwrap_or_else(|| source.into())
    }
}

/// pve-common JSONSchema.pm, `pve_verify_cidr`: an IPv4 (/8 to /32) or IPv6 (/8 to /128)
/// network.
fn is_cidr(text: &str) -> bool {
    let Some((addr, bits)) = text.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match addr.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => (8..=32).contains(&bits),
        Ok(std::net::IpAddr::V6(_)) => (8..=128).contains(&bits),
        Err(_) => false,
    }
}

/// Whether `ip` lies in the network `cidr`.
fn in_network(ip: std::net::Ipv4Addr, cidr: &str) -> bool {
    let Some((net, bits)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(net), Ok(bits)) = (net.parse::<std::net::Ipv4Addr>(), bits.parse::<u32>()) else {
        return false;
    };
    let mask = u32::MAX.checked_shl(32 - bits.min(32)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(net) & mask
}

/// What pve-common's `format_size` writes for a size in bytes (`4M`, `2G`, `0T` for nothing).
fn pve_format_size(size: u64) -> String {
    let kb = size / 1024;
    if kb * 1024 != size {
        return size.to_string();
    }
    let mb = kb / 1024;
    if mb * 1024 != kb {
        return format!("{kb}K");
    }
    let gb = mb / 1024;
    if gb * 1024 != mb {
        return format!("{mb}M");
    }
    let tb = gb / 1024;
    if tb * 1024 != gb {
        return format!("{gb}G");
    }
    format!("{tb}T")
}

/// The node's local time as AbstractMigrate's `log` prefixes it (`strftime("%F %H:%M:%S")`);
/// pve-sim's nodes keep UTC.
fn stamp() -> String {
    let secs = epoch() as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since the epoch (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// dd's human-readable sizes: three significant figures at most, one decimal below ten
/// (`1.1 GB`, `975 MiB`).
fn dd_human(bytes: f64, base: f64, units: &[&str]) -> String {
    let mut value = bytes;
    let mut unit = 0;
    while value >= base && unit < units.len() - 1 {
        value /= base;
        unit += 1;
    }
    if unit == 0 {
        format!("{} {}", value as u64, units[0])
    } else if value < 10.0 {
        format!("{value:.1} {}", units[unit])
    } else {
        format!("{} {}", value.round() as u64, units[unit])
    }
}

/// A dd `status=progress` (or final) line: `1073741824 bytes (1.1 GB, 1.0 GiB) copied, 2 s,
/// 537 MB/s`.
fn dd_line(bytes: u64, secs: f64, last: bool) -> String {
    let si = dd_human(bytes as f64, 1000.0, &["B", "kB", "MB", "GB", "TB"]);
    let iec = dd_human(bytes as f64, 1024.0, &["B", "KiB", "MiB", "GiB", "TiB"]);
    let rate = if secs > 0.0 {
        dd_human(bytes as f64 / secs, 1000.0, &["B", "kB", "MB", "GB", "TB"])
    } else {
        "Infinity B".into()
    };
    // dd prints the elapsed time with `%.0f` while copying and with `%g` at the end.
    let elapsed = if last {
        let text = format!("{secs:.6}");
        let text = text.trim_end_matches('0').trim_end_matches('.');
        text.to_string()
    } else {
        format!("{secs:.0}")
    };
    format!("{bytes} bytes ({si}, {iec}) copied, {elapsed} s, {rate}/s")
}

/// PVE::Format's `render_duration` (`2m 1s`, `0s`).
fn render_duration(secs: u64) -> String {
    if secs == 0 {
        return "0s".into();
    }
    let mut parts = Vec::new();
    let mut rest = secs;
    for (unit, len) in [
        ("w", 604_800),
        ("d", 86_400),
        ("h", 3600),
        ("m", 60),
        ("s", 1),
    ] {
        if rest >= len {
            parts.push(format!("{}{unit}", rest / len));
            rest %= len;
        }
    }
    parts.join(" ")
}

/// QemuMigrate.pm, `round_powerof2`.
fn round_powerof2(n: u64) -> u64 {
    if n < 2 {
        return 1;
    }
    2u64 << (63 - (n - 1).leading_zeros())
}

/// A volume's attributes as `PVE::QemuServer::foreach_volid` collects them.
#[derive(Default, Clone, Debug)]
struct VolAttr {
    cdrom: bool,
    is_cloudinit: bool,
    shared: bool,
    is_unused: bool,
    is_attached: bool,
    in_pending: bool,
    size: Option<u64>,
    is_tpmstate: bool,
    drivename: Option<String>,
}

/// Every volume the config names (its drives, its `unusedN` and its pending values), with
/// their attributes (QemuServer.pm, `foreach_volid`; pve-sim has no snapshots).
fn foreach_volid(conf: &BTreeMap<String, String>, pending: &Pending) -> BTreeMap<String, VolAttr> {
    let mut out: BTreeMap<String, VolAttr> = BTreeMap::new();
    let mut visit = |key: &str, value: &str, in_pending: bool| {
        let unused = key
            .strip_prefix("unused")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        let (volid, drive) = if unused {
            (value.to_string(), BTreeMap::new())
        } else if api_schema::is_drive_key(key) {
            match api_schema::parse_drive(value) {
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
            attr.size = drive.get("size").and_then(|s| storage::parse_size(s));
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
fn local_resources(conf: &BTreeMap<String, String>) -> (Vec<String>, Vec<String>) {
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
fn vnc_clipboard(conf: &BTreeMap<String, String>) -> bool {
    conf.get("vga")
        .is_some_and(|v| v.split(',').any(|p| p == "clipboard=vnc"))
}

/// Whether a volume lies on a shared storage (`$scfg->{shared}`).
fn on_shared(volid: &str) -> bool {
    volid
        .split_once(':')
        .and_then(|(sid, _)| storage::storage(sid))
        .is_some_and(|s| s.shared)
}

/// `GET …/migrate`.
pub fn precondition(sim: &Sim, node: &str, vmid: u32, auth: &Auth) -> ApiResult {
    if auth.readonly {
        return Err(ApiErr {
            status: 403,
            msg: format!("Permission check failed (/vms/{vmid}, VM.Migrate)"),
            errors: None,
        });
    }
    let (conf, pending) = file_of(sim, node, vmid)?;
    check_lock(&conf).map_err(ApiErr::die)?;
    let running = sim.lock().vms.get(&vmid).is_some_and(|v| v.running);
    let (mut local, mapped) = local_resources(&conf);
    if running && vnc_clipboard(&conf) {
        local.push("clipboard=vnc".into());
    }
    // check_local_storage_availability answers every node (an empty hash where all storages
    // are there), so every other node is listed under not_allowed_nodes, and allowed when
    // that hash stays empty.
    let mut allowed = Vec::new();
    let mut not_allowed = serde_json::Map::new();
    // Each drive's storage (not the unused volumes'): disabled, or not among a node's.
    let drive_storages: Vec<String> = conf
        .iter()
        .filter(|(k, _)| api_schema::is_drive_key(k))
        .filter_map(|(_, v)| api_schema::parse_drive(v).ok()?.get("file").cloned())
        .filter_map(|file| Some(file.split_once(':')?.0.to_string()))
        .filter(|sid| storage::storage(sid).is_some())
        .collect();
    for other in sim.opts.nodes.iter().filter(|n| *n != node) {
        let mut why = serde_json::Map::new();
        let mut unavailable: Vec<&String> = drive_storages
            .iter()
            .filter(|sid| crate::storage_cfg::check_enabled(sid, other).is_err())
            .collect();
        unavailable.sort();
        unavailable.dedup();
        if !unavailable.is_empty() {
            why.insert("unavailable_storages".into(), json!(unavailable));
        }
        if !mapped.is_empty() {
            why.insert("unavailable-resources".into(), json!(mapped));
        }
        if why.is_empty() {
            allowed.push(other.clone());
        }
        not_allowed.insert(other.clone(), Value::Object(why));
    }
    // $check_vm_disks_local: every volume but those on shared storage (none here), those
    // marked shared, and an empty CD-ROM drive.
    let local_disks: Vec<Value> = foreach_volid(&conf, &pending)
        .into_iter()
        .filter(|(volid, a)| !(a.shared || a.cdrom && volid == "none" || on_shared(volid)))
        .map(|(volid, a)| {
            let mut d = json!({
                "volid": volid, "cdrom": a.cdrom as u8, "is_cloudinit": a.is_cloudinit as u8,
                "replicate": 1, "shared": 0, "is_unused": a.is_unused as u8,
                "is_attached": a.is_attached as u8, "is_vmstate": 0,
                "is_tpmstate": a.is_tpmstate as u8,
            });
            if let Some(s) = a.size {
                d["size"] = json!(s);
            }
            if let Some(n) = &a.drivename {
                d["drivename"] = json!(n);
            }
            if a.in_pending {
                d["referenced_in_pending"] = json!(1);
            }
            d
        })
        .collect();
    let info: serde_json::Map<String, Value> = mapped
        .iter()
        .map(|k| {
            let name = conf[k]
                .split(',')
                .find_map(|p| {
                    p.strip_prefix("mapping=")
                        .or_else(|| p.strip_prefix("dirid="))
                })
                .unwrap_or("");
            (k.clone(), json!({ "name": name }))
        })
        .collect();
    let mut answer = json!({
        "running": running as u8,
        "allowed_nodes": allowed,
        "not_allowed_nodes": not_allowed,
        "local_disks": local_disks,
        "local_resources": local,
        "mapped-resources": mapped,
        "mapped-resource-info": info,
        "has-dbus-vmstate": 1,
    });
    // HA::Config get_resource_motion_info: pve-sim has no affinity rules, so no resource
    // moves with the VM.
    if crate::ha::vm_is_ha_managed(sim, vmid) {
        answer["dependent-ha-resources"] = json!([]);
    }
    Ok(answer)
}

/// The options a `qmigrate` task runs with (`$param` as migrate_vm passes it on).
#[derive(Clone)]
struct Opts {
    online: bool,
    force: bool,
    with_local_disks: bool,
    storagemap: Option<StorageMap>,
    bwlimit: Option<u64>,
    migration_network: Option<String>,
    insecure: bool,
}

/// pve-storage, `storage_check_enabled` and `storage_config`: the storage exists on the node.
fn storage_def(sid: &str) -> Result<&'static storage::StorageDef, String> {
    storage::storage(sid).ok_or_else(|| format!("storage '{sid}' does not exist"))
}

/// pve-storage Storage.pm, `storage_check_enabled`: the storage exists, is not disabled and
/// is there on `node` (`nodes`, storage_check_node).
fn storage_enabled(sid: &str, node: &str) -> Result<&'static storage::StorageDef, String> {
    let def = storage_def(sid)?;
    crate::storage_cfg::check_enabled(sid, node)?;
    Ok(def)
}

/// The content type of a volume (`PVE::Storage::parse_volname`'s first value).
fn vtype_of(sim: &Sim, node: &str, volid: &str) -> Result<&'static str, String> {
    storage::parse_volume(&sim.opts.data_dir, node, volid).map(|v| v.vtype)
}

/// QemuServer.pm, `check_storage_availability`: each drive's storage exists on both nodes and
/// holds the drive's content type.
fn check_storage_availability(
    sim: &Sim,
    node: &str,
    target: &str,
    conf: &BTreeMap<String, String>,
) -> Result<(), String> {
    for (key, value) in conf {
        if !api_schema::is_drive_key(key) {
            continue;
        }
        let Ok(drive) = api_schema::parse_drive(value) else {
            continue;
        };
        let Some((sid, _)) = drive.get("file").and_then(|f| f.split_once(':')) else {
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

/// `POST …/migrate`.
pub fn migrate(sim: &Arc<Sim>, node: &str, vmid: u32, params: &Params, auth: &Auth) -> ApiResult {
    migrate_in(sim, node, vmid, params, auth, false)
}

/// migrate_vm in a client's environment, or (`ha_env`) in the HA stack's, whose LRM migrates
/// an HA-managed VM itself instead of handing it to `ha-manager` again.
fn migrate_in(
    sim: &Arc<Sim>,
    node: &str,
    vmid: u32,
    params: &Params,
    auth: &Auth,
    ha_env: bool,
) -> ApiResult {
    let target = params["target"].clone();
    if target == node {
        return Err(ApiErr::param("target", "target is local node."));
    }
    if !sim.opts.nodes.contains(&target) {
        return Err(ApiErr::die(format!("no such cluster node '{target}'")));
    }
    let flag = |k: &str| params.get(k).is_some_and(|v| v == "1");
    for key in ["force", "migration_type", "migration_network"] {
        let given = if key == "force" {
            flag(key)
        } else {
            params.contains_key(key)
        };
        if given && auth.id != "root@pam" {
            return Err(ApiErr::param(key, "Only root may use this option."));
        }
    }
    if let Some(net) = params.get("migration_network")
        && !is_cidr(net)
    {
        return Err(ApiErr::param(
            "migration_network",
            "invalid format - value does not look like a valid CIDR network",
        ));
    }
    let storagemap = match params.get("targetstorage").filter(|t| !t.is_empty()) {
        Some(text) => match StorageMap::parse(text) {
            Ok(map) => Some(map),
            Err((true, e)) => {
                return Err(ApiErr::param(
                    "targetstorage",
                    format!("invalid format - {e}"),
                ));
            }
            Err((false, e)) => {
                return Err(ApiErr::param(
                    "targetstorage",
                    format!("failed to parse storage map: {e}"),
                ));
            }
        },
        None => None,
    };
    let conf = config_of(sim, node, vmid)?;
    check_lock(&conf).map_err(ApiErr::die)?;
    let running = sim.lock().vms.get(&vmid).is_some_and(|v| v.running);
    if running && !flag("online") {
        return Err(ApiErr::die("can't migrate running VM without --online"));
    }
    // $check_storage_access_migrate for every target storage of the map.
    if let Some(map) = &storagemap {
        for sid in map.entries.values().chain(map.default.iter()) {
            let def = storage_enabled(sid, &target).map_err(ApiErr::die)?;
            if !def.content.contains(&"images") {
                return Err(ApiErr::die(format!(
                    "storage '{sid}' does not support vm images"
                )));
            }
        }
    }
    if storagemap.as_ref().is_none_or(|m| m.identity) {
        check_storage_availability(sim, node, &target, &conf).map_err(ApiErr::die)?;
    }
    let opts = Opts {
        // A stopped VM migrates offline whatever `online` says.
        online: running && flag("online"),
        force: flag("force"),
        with_local_disks: flag("with-local-disks"),
        storagemap,
        bwlimit: params.get("bwlimit").and_then(|b| b.parse().ok()),
        migration_network: params.get("migration_network").cloned(),
        insecure: params
            .get("migration_type")
            .is_some_and(|t| t == "insecure"),
    };
    if crate::ha::vm_is_ha_managed(sim, vmid) && !ha_env {
        return Ok(json!(ha_migrate(sim, node, vmid, &target, auth)));
    }
    let (source, worker_sim) = (node.to_string(), sim.clone());
    let upid = tasks::spawn(
        sim,
        node,
        "qmigrate",
        &vmid.to_string(),
        &auth.id,
        move |ctx| {
            migration_locked(&worker_sim, ctx, vmid, || {
                let mut run = Migration::new(&worker_sim, ctx, vmid, source, target, opts);
                run.migrate()
            })
        },
    );
    Ok(json!(upid))
}

/// migrate_vm for an HA-managed VM: a `hamigrate` worker that runs `ha-manager migrate vm:N
/// TARGET` (pve-ha-manager API2/HA/Resources.pm, migrate: `queue_crm_commands("migrate SID
/// NODE")`) and ends; the HA stack's next round carries the migration out ([`ha_round`]).
fn ha_migrate(sim: &Arc<Sim>, node: &str, vmid: u32, target: &str, auth: &Auth) -> String {
    let (worker_sim, target) = (sim.clone(), target.to_string());
    let upid = tasks::spawn(
        sim,
        node,
        "hamigrate",
        &vmid.to_string(),
        &auth.id,
        move |ctx| {
            ctx.log(format!(
                "Requesting HA migration for VM {vmid} to node {target}"
            ));
            ctx.sleep(worker_sim.task_duration("hamigrate"))?;
            let sid = format!("vm:{vmid}");
            if !crate::ha::vm_is_ha_managed(&worker_sim, vmid) {
                return Err(format!("service '{sid}' not managed by HA"));
            }
            worker_sim.lock().ha.migrations.push((sid, target));
            Ok(0)
        },
    );
    crate::ha::ensure_loop(sim);
    upid
}

/// The migrations of one CRM/LRM round (pve-ha-manager Manager.pm update_crm_commands: a
/// `migrate SID NODE` for a service already there is ignored; LRM.pm and
/// Resources/PVEVM.pm migrate: `migrate_vm` on the service's node with `online`, `force` and
/// `with-local-disks`, as root in the HA environment). A service whose LRM is busy keeps its
/// request for a later round. Returns the services now migrating.
pub fn ha_round(sim: &Arc<Sim>) -> Vec<String> {
    let asked = std::mem::take(&mut sim.lock().ha.migrations);
    let root = Auth {
        id: "root@pam".into(),
        root_ticket: true,
        readonly: false,
    };
    let mut moving = Vec::new();
    for (sid, target) in asked {
        let Some(vmid) = sid.strip_prefix("vm:").and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let (node, busy) = {
            let st = sim.lock();
            let Some(vm) = st.vms.get(&vmid) else {
                continue;
            };
            let busy = st
                .ha
                .services
                .get(&sid)
                .and_then(|s| s.upid.as_ref())
                .is_some_and(|u| st.tasks.iter().any(|t| &t.upid == u && t.running()));
            (vm.node.clone(), busy)
        };
        if node == target {
            continue;
        }
        if busy {
            sim.lock().ha.migrations.push((sid, target));
            continue;
        }
        let params: Params = [
            ("target", target.as_str()),
            ("online", "1"),
            ("force", "1"),
            ("with-local-disks", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        if let Ok(upid) = migrate_in(sim, &node, vmid, &params, &root, true)
            && let Some(u) = upid.as_str()
            && let Some(s) = sim.lock().ha.services.get_mut(&sid)
        {
            s.state = "migrate".into();
            s.upid = Some(u.to_string());
            moving.push(sid);
        }
    }
    moving
}

/// GuestHelpers.pm, `guest_migration_lock`: `/var/lock/pve-manager/pve-migrate-N`, waited for
/// 10 s (PVE::Tools `lock_file_full` prints `trying to acquire lock...` while it waits).
fn migration_locked(
    sim: &Sim,
    ctx: &TaskCtx,
    vmid: u32,
    work: impl FnOnce() -> tasks::Outcome,
) -> tasks::Outcome {
    let free = |st: &crate::state::State| !st.migration_locks.contains(&vmid);
    if !free(&sim.lock()) {
        ctx.log("trying to acquire lock...");
        let got = wait_until(sim, MIGRATION_LOCK_TIMEOUT, free);
        if !got {
            return Err(format!(
                "can't lock file '/var/lock/pve-manager/pve-migrate-{vmid}' - got timeout"
            ));
        }
        ctx.log(" OK");
    }
    {
        let mut st = sim.lock();
        if !free(&st) {
            return Err(format!(
                "can't lock file '/var/lock/pve-manager/pve-migrate-{vmid}' - got timeout"
            ));
        }
        st.migration_locks.insert(vmid);
    }
    let res = work();
    sim.lock().migration_locks.remove(&vmid);
    sim.cv.notify_all();
    res
}

/// How a scanned local volume is referenced (QemuMigrate.pm, scan_local_volumes: `ref`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Reference {
    /// A local file or device (an absolute path).
    Config,
    Attached,
    Unused,
    Pending,
    /// The cloud-init drive or the TPM state.
    Generated,
}

/// A local volume to move (`$self->{local_volumes}->{$volid}`).
#[derive(Clone, Debug)]
struct LocalVolume {
    reference: Reference,
    targetsid: String,
    size: u64,
    format: String,
    is_cloudinit: bool,
    drivename: Option<String>,
    /// Mirrored while the VM runs (`migration_mode: online`), else copied first.
    online: bool,
}

/// One run of `PVE::QemuMigrate->migrate` (`$self`).
struct Migration<'a> {
    sim: &'a Arc<Sim>,
    ctx: &'a TaskCtx,
    vmid: u32,
    source: String,
    target: String,
    opts: Opts,
    running: bool,
    conf: BTreeMap<String, String>,
    pending: Pending,
    local_volumes: BTreeMap<String, LocalVolume>,
    /// Source volume id → its copy on the target.
    volume_map: BTreeMap<String, String>,
    /// Mirrored drives → their drive strings on the target.
    target_drives: BTreeMap<String, String>,
    errors: bool,
    phase2_errors: bool,
    started: Instant,
}

/// An error inside a phase: a stop request reaches it as AbstractMigrate's `$eval_int`
/// handler dies.
fn phase_err(e: String) -> String {
    if e == INTERRUPT {
        "interrupted by signal".into()
    } else {
        e
    }
}

impl<'a> Migration<'a> {
    fn new(
        sim: &'a Arc<Sim>,
        ctx: &'a TaskCtx,
        vmid: u32,
        source: String,
        target: String,
        opts: Opts,
    ) -> Self {
        Migration {
            sim,
            ctx,
            vmid,
            source,
            target,
            opts,
            running: false,
            conf: BTreeMap::new(),
            pending: Pending::default(),
            local_volumes: BTreeMap::new(),
            volume_map: BTreeMap::new(),
            target_drives: BTreeMap::new(),
            errors: false,
            phase2_errors: false,
            started: Instant::now(),
        }
    }

    /// AbstractMigrate.pm, `log`: every line stamped, errors marked.
    fn log(&self, msg: &str) {
        for line in msg.trim_end().lines() {
            self.ctx.log(format!("{} {line}", stamp()));
        }
    }

    fn log_err(&self, msg: &str) {
        for line in msg.trim_end().lines() {
            self.ctx.log(format!("{} ERROR: {line}", stamp()));
        }
    }

    /// A line printed directly to the task log (the block-job monitor, lvremove).
    fn print(&self, msg: &str) {
        self.ctx.log(msg.to_string());
    }

    fn duration(&self) -> String {
        let secs = self.started.elapsed().as_secs();
        format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
    }

    fn sleep(&self, d: Duration) -> Result<(), String> {
        self.ctx.sleep(d).map_err(phase_err)
    }

    /// AbstractMigrate.pm, `migrate`: prepare and the phases under `lock_vm` (the config
    /// lock), their cleanups, and the final verdict.
    fn migrate(&mut self) -> tasks::Outcome {
        let (sim, vmid, holder) = (self.sim.clone(), self.vmid, self.ctx.upid.clone());
        let locked = sim.lock_config(vmid, &holder, tasks::LOCK_CONFIG_TIMEOUT, || self.phases());
        if let Err(err) = locked {
            self.log_err(&format!(
                "migration aborted (duration {}): {err}",
                self.duration()
            ));
            return Err("migration aborted".into());
        }
        if self.errors {
            self.log_err(&format!(
                "migration finished with problems (duration {})",
                self.duration()
            ));
            return Err("migration problems".into());
        }
        self.log(&format!(
            "migration finished successfully (duration {})",
            self.duration()
        ));
        Ok(0)
    }

    fn phases(&mut self) -> Result<(), String> {
        if let Some(net) = &self.opts.migration_network {
            // SSHInfo.pm, get_ssh_info: the target's address in that network (its mtunnel).
            if !in_network(std::net::Ipv4Addr::LOCALHOST, net) {
                return Err(format!(
                    "failed to get ip for node '{}' in network '{net}'",
                    self.target
                ));
            }
        }
        self.running = self.prepare().map_err(phase_err)?;
        if self.opts.migration_network.is_some() {
            self.log("use dedicated network address for sending migration traffic (127.0.0.1)");
        }
        if let Err(err) = self.phase1().map_err(phase_err) {
            self.log_err(&err);
            self.phase1_cleanup();
            return Err(err);
        }
        if self.running {
            let err = self.phase2().map_err(phase_err).err();
            if let Some(e) = &err {
                self.errors = true;
                self.log_err(&format!("online migrate failure - {e}"));
            }
            self.phase2_cleanup();
        }
        self.phase3_cleanup();
        Ok(())
    }

    /// Reads the VM's config on the source node (`PVE::QemuConfig->load_config`).
    fn load(&mut self) -> Result<(), String> {
        let (conf, pending) = file_of(self.sim, &self.source, self.vmid).map_err(|e| e.msg)?;
        self.conf = conf;
        self.pending = pending;
        Ok(())
    }

    /// `PVE::QemuConfig->write_config`.
    fn write(&self) {
        let mut st = self.sim.lock();
        if let Some(vm) = st.vms.get_mut(&self.vmid) {
            vm.config = self.conf.clone();
            vm.pending = self.pending.clone();
        }
    }

    /// QemuMigrate.pm, `prepare`: the config, its lock, the run state, local devices, and the
    /// storages of every volume on the target. Returns whether the VM runs.
    fn prepare(&mut self) -> Result<bool, String> {
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
            let Some((sid, _)) = volid.split_once(':') else {
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

    /// QemuMigrate.pm, `phase1`.
    fn phase1(&mut self) -> Result<(), String> {
        self.log(&format!(
            "starting migration of VM {} to node '{}' (127.0.0.1)",
            self.vmid, self.target
        ));
        self.conf.insert("lock".into(), "migrate".into());
        self.write();
        self.scan_local_volumes()
            .map_err(|e| format!("Problem found while scanning volumes - {e}"))?;
        self.config_update_local_disksizes();
        self.write();
        self.sync_offline_local_volumes()
    }

    /// QemuMigrate.pm, `scan_local_volumes`: what each volume is, what blocks it, and how it
    /// moves.
    fn scan_local_volumes(&mut self) -> Result<(), String> {
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
            let name = volid.split_once(':').map_or("", |(_, n)| n);
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
        let (sid, _) = volid
            .split_once(':')
            .ok_or_else(|| format!("unable to parse volume ID '{volid}'"))?;
        let targetsid = self.target_sid(sid)?;
        self.target_storage_check_available(&targetsid, volid)?;
        // A volume on shared storage is there on the target already.
        if storage_def(sid)?.shared {
            return Ok(());
        }
        let vol = storage::parse_volume(&self.sim.opts.data_dir, &self.source, volid)?;
        let size = if vol.vtype == "images" {
            storage::virtual_size(&vol.path, &vol.format)
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
        if crate::templates::base_in_use(self.sim, &self.source, volid).is_some() {
            return Err("referenced by linked clone(s)".into());
        }
        Ok(())
    }

    /// QemuMigrate.pm, `config_update_local_disksizes`: each local drive's `size` as its
    /// volume has it (efidisk and TPM state keep their fixed sizes).
    fn config_update_local_disksizes(&mut self) {
        let keys: Vec<String> = self.conf.keys().cloned().collect();
        for key in keys {
            if !api_schema::is_drive_key(&key) || key == "efidisk0" || key == "tpmstate0" {
                continue;
            }
            let Ok(mut drive) = api_schema::parse_drive(&self.conf[&key]) else {
                continue;
            };
            let Some(vol) = self.local_volumes.get(&drive["file"]) else {
                continue;
            };
            let old = drive
                .get("size")
                .and_then(|s| storage::parse_size(s))
                .unwrap_or(0);
            if old != vol.size {
                let msg = format!(
                    "drive '{key}': size of disk '{}' updated from {} to {}",
                    drive["file"],
                    pve_format_size(old),
                    pve_format_size(vol.size)
                );
                drive.insert("size".into(), pve_format_size(vol.size));
                self.conf
                    .insert(key.clone(), schema::print_property_string("file", &drive));
                self.log(&msg);
            }
        }
        // update_efidisk_size: the size of the OVMF vars the EFI disk holds (get_efivars_size:
        // 540672 bytes for `efitype=4m`, else 131072), whatever its volume has;
        // update_tpmstate_size: TPMSTATE_DISK_SIZE (4 MiB).
        for key in ["efidisk0", "tpmstate0"] {
            let Some(Ok(mut drive)) = self.conf.get(key).map(|v| api_schema::parse_drive(v)) else {
                continue;
            };
            let size: u64 = match key {
                "efidisk0" if drive.get("efitype").is_some_and(|t| t == "4m") => 540_672,
                "efidisk0" => 131_072,
                _ => 4 << 20,
            };
            drive.insert("size".into(), pve_format_size(size));
            self.conf
                .insert(key.into(), schema::print_property_string("file", &drive));
        }
    }

    /// The name a volume gets on the target storage (pve-storage Storage.pm,
    /// `storage_migrate` and `$volname_for_storage`): the same name on a storage of the same
    /// type, else `N/name.format` on a directory storage or the bare name on LVM-thin.
    fn target_volname(&self, volid: &str, vol: &LocalVolume) -> Result<String, String> {
        let (sid, name) = volid.split_once(':').unwrap_or_default();
        let (src, dst) = (storage_def(sid)?, storage_def(&vol.targetsid)?);
        if src.kind == dst.kind {
            return Ok(name.to_string());
        }
        let valid: &[&str] = if dst.kind == "dir" {
            &["raw", "qcow2", "vmdk"]
        } else {
            &["raw"]
        };
        if !valid.contains(&vol.format.as_str()) {
            return Err(format!(
                "unsupported format '{}' for storage type {}",
                vol.format, dst.kind
            ));
        }
        let file = name.rsplit('/').next().unwrap_or(name);
        let bare = file
            .strip_suffix(&format!(".{}", vol.format))
            .unwrap_or(file);
        Ok(if dst.kind == "dir" {
            format!("{}/{bare}.{}", self.vmid, vol.format)
        } else {
            bare.to_string()
        })
    }

    /// A free `vm-N-disk-K` name on the target storage (pve-storage, `find_free_diskname`).
    fn free_name(&self, sid: &str, fmt: &str) -> Result<String, String> {
        let taken: Vec<String> = self.volume_map.values().cloned().collect();
        storage::alloc_name(
            &self.sim.opts.data_dir,
            &self.target,
            sid,
            self.vmid,
            fmt,
            &taken,
        )
    }

    /// QemuMigrate.pm, `sync_offline_local_volumes`: each volume that does not move with the
    /// running VM, copied with `storage_migrate` (`pvesm export | pvesm import` over ssh).
    fn sync_offline_local_volumes(&mut self) -> Result<(), String> {
        let offline: Vec<(String, LocalVolume)> = self
            .local_volumes
            .iter()
            .filter(|(_, v)| !v.online)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !offline.is_empty() {
            self.log("copying local disk images");
        }
        for (volid, vol) in offline {
            let new_volid = self.storage_migrate(&volid, &vol).map_err(|e| {
                format!(
                    "storage migration for '{volid}' to storage '{}' failed - {e}",
                    vol.targetsid
                )
            })?;
            self.log(&format!("volume '{volid}' is '{new_volid}' on the target"));
            self.volume_map.insert(volid, new_volid);
        }
        Ok(())
    }

    /// pve-storage Storage.pm, `storage_migrate` for one volume: the name on the target (a
    /// fresh one when it is taken and renaming is allowed, which the cloud-init drive is not),
    /// then the byte stream, logged as dd logs it.
    fn storage_migrate(&mut self, volid: &str, vol: &LocalVolume) -> Result<String, String> {
        let data = &self.sim.opts.data_dir;
        let mut name = self.target_volname(volid, vol)?;
        let target_kind = storage_def(&vol.targetsid)?.kind;
        let exists = |name: &str| {
            storage::parse_volume(data, &self.target, &format!("{}:{name}", vol.targetsid))
                .map(|v| v.path.exists())
        };
        if exists(&name)? {
            if vol.is_cloudinit {
                return Err(format!("volume '{}:{name}' already exists", vol.targetsid));
            }
            name = self.free_name(&vol.targetsid, &vol.format)?;
        }
        let new_volid = format!("{}:{name}", vol.targetsid);
        let src = storage::parse_volume(data, &self.source, volid)?;
        let dst = storage::parse_volume(data, &self.target, &new_volid)?;
        copy_file(&src.path, &dst.path)?;
        // The stream is recorded at once so that a failed run frees it (cleanup_remotedisks).
        self.volume_map.insert(volid.to_string(), new_volid.clone());
        let bytes = std::fs::metadata(&src.path).map(|m| m.len()).unwrap_or(0);
        // LVM exports with `dd bs=64k`, file storages with `bs=4k`.
        let block: u64 = if storage_def(volid.split(':').next().unwrap_or(""))?.kind == "lvmthin" {
            64 << 10
        } else {
            4 << 10
        };
        let secs = self.paced(bytes, |m, done, secs| {
            // storage_migrate shows dd's progress every 3 s in the first minute, every 10 s
            // up to ten minutes, every 30 s after.
            let whole = secs as u64;
            let every = match whole {
                0..60 => 3,
                60..600 => 10,
                _ => 30,
            };
            if whole % every == 0 {
                m.log(&dd_line(done, secs, false));
            }
        })?;
        let (full, partial) = (bytes / block, u64::from(bytes % block != 0));
        self.log(&format!("{full}+{partial} records in"));
        self.log(&format!("{full}+{partial} records out"));
        self.log(&dd_line(bytes, secs.max(0.000_001), true));
        if target_kind == "lvmthin" {
            self.log(&format!(
                "  Logical volume \"{}\" created.",
                name.rsplit('/').next().unwrap_or(&name)
            ));
        }
        self.log(&format!("successfully imported '{new_volid}'"));
        Ok(new_volid)
    }

    /// Lets a transfer of `total` bytes take the time `--import-rate` gives it (at once
    /// without one), calling `report(done, seconds)` once a second meanwhile. Returns the
    /// seconds it took.
    fn paced(&self, total: u64, mut report: impl FnMut(&Self, u64, f64)) -> Result<f64, String> {
        let start = Instant::now();
        let Some(rate) = self.sim.opts.import_rate.filter(|r| *r > 0) else {
            return Ok(start.elapsed().as_secs_f64());
        };
        loop {
            self.sleep(Duration::from_secs(1))?;
            let secs = start.elapsed().as_secs_f64();
            let done = ((rate as f64 * secs) as u64).min(total);
            if done >= total {
                return Ok(secs);
            }
            report(self, done, secs);
        }
    }

    /// QemuMigrate.pm, `phase1_cleanup`: the lock removed, the copies on the target freed.
    fn phase1_cleanup(&mut self) {
        self.log("aborting phase 1 - cleanup resources");
        self.conf.remove("lock");
        self.write();
        self.cleanup_remotedisks();
    }

    /// QemuMigrate.pm, `cleanup_remotedisks`: `pvesm free` on the target for every copy.
    fn cleanup_remotedisks(&mut self) {
        let data = &self.sim.opts.data_dir;
        for volid in self.volume_map.values() {
            if let Ok(vol) = storage::parse_volume(data, &self.target, volid) {
                let _ = std::fs::remove_file(&vol.path);
            }
        }
    }

    /// QemuMigrate.pm, `phase2` with `phase2_start_local_cluster`: the VM started on the target
    /// waiting for the incoming state, its attached local disks mirrored there over NBD, then
    /// its memory.
    fn phase2(&mut self) -> Result<(), String> {
        let vmid = self.vmid;
        self.log(&format!(
            "starting VM {vmid} on remote node '{}'",
            self.target
        ));
        // vm_migrate_get_nbd_disks: the attached disks but CD-ROMs and the TPM state, by
        // drive key (vm_migrate_alloc_nbd_disks allocates them in that order).
        let mut online: Vec<(String, String, LocalVolume)> = self
            .local_volumes
            .iter()
            .filter(|(_, v)| v.online && v.reference == Reference::Attached)
            .filter_map(|(k, v)| Some((v.drivename.clone()?, k.clone(), v.clone())))
            .filter(|(key, ..)| key != "tpmstate0")
            .collect();
        online.sort_by(|a, b| a.0.cmp(&b.0));
        // vm_migrate_alloc_nbd_disks on the target: a new volume for each mirrored drive, in
        // the source's format where the target storage has it, else its default (raw), of the
        // drive's size.
        let mut mirrors = Vec::new();
        for (drive_key, volid, vol) in &online {
            let drive_key = drive_key.clone();
            let Ok(mut drive) = api_schema::parse_drive(&self.conf[&drive_key]) else {
                continue;
            };
            let size = drive
                .get("size")
                .and_then(|s| storage::parse_size(s))
                .unwrap_or(vol.size);
            let def = storage_def(&vol.targetsid)?;
            let fmt =
                if def.kind == "dir" && ["raw", "qcow2", "vmdk"].contains(&vol.format.as_str()) {
                    vol.format.clone()
                } else {
                    "raw".to_string()
                };
            let name = self.free_name(&vol.targetsid, &fmt)?;
            let new_volid = format!("{}:{name}", vol.targetsid);
            let dst = storage::parse_volume(&self.sim.opts.data_dir, &self.target, &new_volid)?;
            storage::create_image(
                &dst.path,
                &fmt,
                storage::allocated_size(&vol.targetsid, size),
            )?;
            self.volume_map.insert(volid.clone(), new_volid.clone());
            drive.insert("file".into(), new_volid.clone());
            drive.insert("format".into(), fmt.clone());
            self.target_drives.insert(
                drive_key.clone(),
                schema::print_property_string("file", &drive),
            );
            self.log(&format!("volume '{volid}' is '{new_volid}' on the target"));
            mirrors.push((drive_key, volid.clone(), new_volid, fmt, size));
        }
        self.log("start remote tunnel");
        self.log("ssh tunnel ver 1");
        if !mirrors.is_empty() {
            self.log("starting storage migration");
        }
        let data = self.sim.opts.data_dir.clone();
        for (drive_key, volid, new_volid, fmt, size) in &mirrors {
            self.log(&format!(
                "{drive_key}: start migration to nbd:unix:/run/qemu-server/{vmid}_nbd.migrate:exportname=drive-{drive_key}"
            ));
            match self.opts.bwlimit {
                Some(limit) => self.print(&format!(
                    "drive mirror is starting for drive-{drive_key} with bandwidth limit: {limit} KiB/s"
                )),
                None => self.print(&format!("drive mirror is starting for drive-{drive_key}")),
            }
            let src = storage::parse_volume(&data, &self.source, volid)?;
            let dst = storage::parse_volume(&data, &self.target, new_volid)?;
            mirror_copy(&src.path, &dst.path, fmt, *size)?;
            let total = *size;
            let job = format!("drive-{drive_key}");
            let line = |done: u64, secs: f64, ready: bool| {
                let pct = if total > 0 {
                    done as f64 * 100.0 / total as f64
                } else {
                    100.0
                };
                format!(
                    "{job}: transferred {} of {} ({pct:.2}%) in {}{}",
                    render_bytes(done),
                    render_bytes(total),
                    render_duration(secs.round() as u64),
                    if ready { ", ready" } else { "" }
                )
            };
            // The monitor's first look is at once.
            if self.sim.opts.import_rate.is_some() {
                self.print(&line(0, 0.0, false));
            }
            let secs = self.paced(total, |m, done, secs| m.print(&line(done, secs, false)))?;
            self.print(&line(total, secs, true));
            self.print("all 'mirror' jobs are ready");
        }
        if !mirrors.is_empty() {
            self.log("switching mirror jobs to actively synced mode");
            for (drive_key, ..) in &mirrors {
                self.print(&format!(
                    "drive-{drive_key}: switching to actively synced mode"
                ));
                self.print(&format!(
                    "drive-{drive_key}: successfully switched to actively synced mode"
                ));
            }
        }
        self.migrate_memory()?;
        if !mirrors.is_empty() {
            // BlockJob::monitor with 'cancel': the source lets go of the NBD targets.
            self.print("all 'mirror' jobs are ready");
            for (drive_key, ..) in &mirrors {
                self.print(&format!("drive-{drive_key}: Completing block job..."));
                self.print(&format!("drive-{drive_key}: Completed successfully."));
            }
            for (drive_key, ..) in &mirrors {
                self.print(&format!("drive-{drive_key}: mirror-job finished"));
            }
        }
        Ok(())
    }

    /// The memory part of `phase2`: the parameters set, then `query-migrate` once a second
    /// until QEMU reports `completed`.
    fn migrate_memory(&mut self) -> Result<(), String> {
        // Secure migrations tunnel a UNIX socket over ssh; insecure ones go to the target's
        // migration port directly (phase2: `$state_uri`).
        let uri = if self.opts.insecure {
            "tcp:127.0.0.1:60000".to_string()
        } else {
            format!("unix:/run/qemu-server/{}.migrate", self.vmid)
        };
        self.log(&format!("starting online/live migration on {uri}"));
        self.log("set migration capabilities");
        if let Some(limit) = self.opts.bwlimit.filter(|l| *l > 0) {
            self.log(&format!(
                "migration speed limit: {}/s",
                render_bytes(limit * 1024)
            ));
        }
        let downtime = self
            .conf
            .get("migrate_downtime")
            .and_then(|d| d.parse::<f64>().ok())
            .unwrap_or(0.1);
        self.log(&format!(
            "migration downtime limit: {} ms",
            (downtime * 1000.0) as u64
        ));
        let memory_mib: u64 = self
            .conf
            .get("memory")
            .map(|m| {
                m.split(',')
                    .find_map(|p| p.strip_prefix("current="))
                    .unwrap_or(m)
                    .to_string()
            })
            .and_then(|m| m.parse().ok())
            .unwrap_or(512);
        let total = memory_mib * 1024 * 1024;
        self.log(&format!(
            "migration cachesize: {}",
            render_bytes(round_powerof2(total / 10))
        ));
        self.log("set migration parameters");
        self.log(&format!("start migrate command to {uri}"));
        let length = self
            .sim
            .task_duration("qmigrate")
            .max(Duration::from_millis(1));
        let start = Instant::now();
        loop {
            self.sleep(Duration::from_secs(1).min(length))?;
            let secs = start.elapsed().as_secs_f64();
            let share = (secs / length.as_secs_f64()).min(1.0);
            let done = (total as f64 * share) as u64;
            if share >= 1.0 {
                if let Some(speed) = total.checked_div(secs as u64) {
                    self.log(&format!(
                        "average migration speed: {}/s - downtime 38 ms",
                        render_bytes(speed)
                    ));
                }
                self.log(&format!(
                    "migration completed, transferred {} VM-state",
                    render_bytes(total)
                ));
                self.log("migration status: completed");
                return Ok(());
            }
            self.log(&format!(
                "migration active, transferred {} of {} VM-state, {}/s",
                render_bytes(done),
                render_bytes(total),
                render_bytes((done as f64 / secs.max(0.001)) as u64)
            ));
        }
    }

    /// QemuMigrate.pm, `phase2_cleanup`, after a failed phase 2: the migration cancelled,
    /// the lock removed, the VM started on the target stopped and its volumes freed; the VM
    /// goes on running here.
    fn phase2_cleanup(&mut self) {
        if !self.errors {
            return;
        }
        self.phase2_errors = true;
        self.log("aborting phase 2 - cleanup resources");
        self.log("migrate_cancel");
        self.conf.remove("lock");
        self.write();
        for drive in self.target_drives.keys() {
            self.print(&format!("drive-{drive}: Cancelling block job"));
            self.print(&format!("drive-{drive}: Done."));
        }
        self.cleanup_remotedisks();
    }

    /// QemuMigrate.pm, `phase3_cleanup`: the volume ids of the copies written, the config
    /// moved to the target (the VM is listed there from now on), a live VM resumed there and
    /// stopped here, the source's volumes freed, and `qm unlock` on the target.
    fn phase3_cleanup(&mut self) {
        if self.phase2_errors {
            return;
        }
        let rename = |value: &str, map: &BTreeMap<String, String>| -> String {
            let file = value.split(',').next().unwrap_or("");
            match map.get(file) {
                Some(new) => format!("{new}{}", &value[file.len()..]),
                None => value.to_string(),
            }
        };
        // update_volume_ids: the drives, the unused volumes and the pending values.
        let map = self.volume_map.clone();
        for (key, value) in self.conf.iter_mut() {
            if api_schema::is_drive_key(key) || key.starts_with("unused") {
                *value = rename(value, &map);
            }
        }
        for (key, value) in self.pending.set.iter_mut() {
            if api_schema::is_drive_key(key) || key.starts_with("unused") {
                *value = rename(value, &map);
            }
        }
        for (drive, drivestr) in &self.target_drives {
            self.conf.insert(drive.clone(), drivestr.clone());
        }
        {
            let mut st = self.sim.lock();
            let pid = 10_000 + (self.sim.random() % 50_000) as u32;
            if let Some(vm) = st.vms.get_mut(&self.vmid) {
                vm.config = self.conf.clone();
                vm.pending = self.pending.clone();
                // move_config_to_node: from here on the VM is the target's.
                vm.node = self.target.clone();
                // A live VM goes on in a new QEMU process on the target; the guest (and its
                // agent) runs on.
                if vm.running {
                    vm.pid = pid;
                }
            }
        }
        self.sim.cv.notify_all();
        if !self.target_drives.is_empty() {
            self.log("stopping NBD storage migration server on target.");
        }
        let fstrim = self
            .conf
            .get("agent")
            .is_some_and(|a| a.split(',').any(|p| p == "fstrim_cloned_disks=1"));
        if self.running && !self.target_drives.is_empty() && fstrim {
            self.log("issuing guest fstrim");
        }
        // Destroy the local copies (vdisk_free; LVM's lvremove prints its line).
        let data = self.sim.opts.data_dir.clone();
        for volid in self.local_volumes.keys() {
            let Ok(vol) = storage::parse_volume(&data, &self.source, volid) else {
                continue;
            };
            if std::fs::remove_file(&vol.path).is_ok()
                && storage::storage(&vol.storage).is_some_and(|s| s.kind == "lvmthin")
            {
                let lv = vol.name.rsplit('/').next().unwrap_or(&vol.name).to_string();
                self.print(&format!("  Logical volume \"{lv}\" successfully removed."));
            }
        }
        if self
            .ctx
            .sleep(self.sim.task_duration("qmigrate") / 2)
            .is_err()
        {
            // A stop request now is delayed (AbstractMigrate's handler outside `$eval_int`).
            self.log_err("received interrupt - delayed");
        }
        // `qm unlock` on the target.
        self.conf.remove("lock");
        self.write();
    }
}

/// A byte-exact copy of a volume's file (what `pvesm export … | pvesm import …` moves),
/// readable by its owner only, holes kept.
fn copy_file(src: &Path, dst: &Path) -> Result<(), String> {
    if let Some(dir) = dst.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let out = Command::new("cp")
        .arg("--sparse=always")
        .arg(src)
        .arg(dst)
        .output()
        .map_err(|e| format!("unable to copy '{}': {e}", src.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    std::fs::set_permissions(dst, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", dst.display()))
}

/// What a drive mirror leaves on the target volume: the `size` bytes the guest sees of the
/// source (an EFI disk's vars, not its whole LV), in the target's format.
fn mirror_copy(src: &Path, dst: &Path, dst_fmt: &str, size: u64) -> Result<(), String> {
    let src_fmt = storage::detect_format(src)?;
    let whole = storage::virtual_size(src, &src_fmt)? <= size;
    let mut cmd = Command::new("qemu-img");
    if whole {
        cmd.args(["convert", "-n", "-f", &src_fmt, "-O", dst_fmt])
            .arg(src)
            .arg(dst);
    } else {
        cmd.args(["dd", "-f", &src_fmt, "-O", dst_fmt, "count=1"])
            .arg(format!("bs={size}"))
            .arg(format!("if={}", src.display()))
            .arg(format!("of={}", dst.display()));
    }
    let out = cmd
        .output()
        .map_err(|e| format!("unable to run qemu-img: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    std::fs::set_permissions(dst, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", dst.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_maps_parse_as_parse_idmap_does() {
        let map = StorageMap::parse("local-lvm").unwrap();
        assert_eq!(StorageMap::map(Some(&map), "local"), "local-lvm");
        let map = StorageMap::parse("local:local-lvm,local-lvm:local").unwrap();
        assert_eq!(StorageMap::map(Some(&map), "local"), "local-lvm");
        assert_eq!(StorageMap::map(Some(&map), "local-lvm"), "local");
        let map = StorageMap::parse("1").unwrap();
        assert!(map.identity);
        assert_eq!(StorageMap::map(Some(&map), "local"), "local");
        assert_eq!(
            StorageMap::parse("1,local").unwrap_err(),
            (
                false,
                "identity mapping cannot be combined with other mappings".to_string()
            )
        );
        assert_eq!(
            StorageMap::parse("a:b:c").unwrap_err(),
            (
                true,
                "entry 'a:b:c' contains invalid ID - storage ID 'a:b:c' contains illegal characters"
                    .to_string()
            )
        );
        assert_eq!(
            StorageMap::parse("local:x1,local:x2").unwrap_err().1,
            "duplicate mapping for source 'local'"
        );
        assert_eq!(
            StorageMap::parse("aa,bb").unwrap_err().1,
            "default target ID can only be provided once"
        );
    }

    #[test]
    fn sizes_durations_and_dd_lines_read_as_pve_writes_them() {
        assert_eq!(pve_format_size(0), "0T");
        assert_eq!(pve_format_size(4 << 20), "4M");
        assert_eq!(pve_format_size(2 << 30), "2G");
        assert_eq!(pve_format_size(540_672), "528K");
        assert_eq!(render_duration(0), "0s");
        assert_eq!(render_duration(121), "2m 1s");
        assert_eq!(round_powerof2(53_687_091), 64 << 20);
        assert_eq!(round_powerof2(1), 1);
        assert_eq!(
            dd_line(1_073_741_824, 2.0, false),
            "1073741824 bytes (1.1 GB, 1.0 GiB) copied, 2 s, 537 MB/s"
        );
        assert_eq!(
            dd_line(34_359_738_368, 56.25, true),
            "34359738368 bytes (34 GB, 32 GiB) copied, 56.25 s, 611 MB/s"
        );
    }

    #[test]
    fn cidrs_and_networks() {
        assert!(is_cidr("10.0.0.0/24"));
        assert!(is_cidr("fd00::/64"));
        assert!(!is_cidr("10.0.0.0/4"));
        assert!(!is_cidr("10.0.0.0"));
        assert!(in_network(std::net::Ipv4Addr::LOCALHOST, "127.0.0.0/8"));
        assert!(!in_network(std::net::Ipv4Addr::LOCALHOST, "10.0.0.0/8"));
    }

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

    #[test]
    fn the_stamp_is_a_civil_date() {
        let s = stamp();
        assert_eq!(s.len(), 19, "{s}");
        assert_eq!(&s[4..5], "-");
        assert_eq!(&s[10..11], " ");
        assert!(s.starts_with("20"), "{s}");
    }
}
