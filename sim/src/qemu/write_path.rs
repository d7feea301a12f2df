//! The VM config write path: every change PVE makes to a value between the request and what
//! `GET …/config` answers, step by step, after qemu-server's API2/Qemu.pm (`create_vm`,
//! `update_vm_api`), QemuServer.pm (`write_vm_config`/`parse_vm_config`, `check_type`),
//! Machine.pm, pve-common and pve-guest-common. Each step is one function here, named in the
//! table in `sim/WRITE_PATH.md` with its source and its test. The form decoding (empty value →
//! undef) is `http::server::decode_urlencoded`; drive values are `qemu/drives.rs` (`create_disks`).

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::http::handler::{ApiErr, Params, Undefined};
use crate::http::server::percent_decode;
use crate::qemu::config_file::{random_mac, uuid};
use crate::schema::{self, Ty};
use crate::state::Sim;
use crate::tools::split_list;

/// The QEMU version pve-sim's nodes run (`meta: creation-qemu=`, and what a Windows guest's
/// machine is pinned to).
pub const QEMU_VERSION: &str = "9.2.0";

/// pve-guest-common GuestHelpers.pm `get_unique_tags` with the default `tag-style` of
/// datacenter.cfg (not case-sensitive, ordered): lower-cased, sorted, duplicates dropped,
/// joined by `;`.
pub fn unique_tags(text: &str) -> String {
    let mut tags: Vec<String> = split_list(text)
        .into_iter()
        .map(|t| t.to_lowercase())
        .collect();
    tags.sort();
    tags.dedup();
    tags.join(";")
}

/// QemuServer.pm `print_bootorder`: `order=a;b`, or nothing for no devices.
pub fn print_bootorder(devices: &[String]) -> String {
    if devices.is_empty() {
        String::new()
    } else {
        format!("order={}", devices.join(";"))
    }
}

/// The devices of a boot value's `order=` (none for the legacy `cdn` form).
pub fn boot_devices(boot: &str) -> Vec<String> {
    boot.split(',')
        .find_map(|part| part.strip_prefix("order="))
        .map(split_list)
        .unwrap_or_default()
}

/// QemuServer.pm `get_default_bootdevices` (create_vm without `boot`): the first disk, the
/// first CD-ROM (a cloud-init drive counts: `drive_is_cdrom` without exclude_cloudinit) and the
/// first NIC, the drives in Drive.pm `valid_drive_names` order (ide, scsi, virtio, sata).
pub fn default_boot(conf: &BTreeMap<String, String>) -> String {
    let drive = |cdrom: bool| {
        [("ide", 4), ("scsi", 31), ("virtio", 16), ("sata", 6)]
            .iter()
            .flat_map(|(bus, count)| (0..*count).map(move |i| format!("{bus}{i}")))
            .find(|key| {
                conf.get(key).is_some_and(|v| {
                    let is_cdrom = schema::parse_drive(v)
                        .is_ok_and(|d| d.get("media").is_some_and(|m| m == "cdrom"));
                    is_cdrom == cdrom
                })
            })
    };
    let mut devices: Vec<String> = [drive(false), drive(true)].into_iter().flatten().collect();
    if let Some(net) = (0..32)
        .map(|i| format!("net{i}"))
        .find(|k| conf.contains_key(k))
    {
        devices.push(net);
    }
    print_bootorder(&devices)
}

/// update_vm_api's `boot` branch: an `order=` is checked against the VM's devices ("invalid
/// bootorder: device '…' does not exist'") and printed again with `print_bootorder`; a legacy
/// value is kept.
pub fn update_boot(
    value: &str,
    exists: impl Fn(&str) -> bool,
    deleted: &[String],
) -> Result<String, String> {
    let devices = boot_devices(value);
    if devices.is_empty() {
        return Ok(value.to_string());
    }
    for device in &devices {
        if !exists(device) || deleted.contains(device) {
            return Err(format!(
                "invalid bootorder: device '{device}' does not exist'"
            ));
        }
    }
    Ok(print_bootorder(&devices))
}

/// pve-common CGroup.pm `clamp_cpu_shares` on a cgroup v2 host (PVE 8+): 10000 at most.
pub fn clamp_cpu_shares(value: &str) -> String {
    match value.trim_start_matches('+').parse::<i64>() {
        Ok(n) if n >= 10000 => "10000".into(),
        _ => value.to_string(),
    }
}

/// Helpers.pm `windows_version`: whether an `ostype` is a Windows one.
pub fn is_windows(ostype: Option<&str>) -> bool {
    match ostype {
        Some("wxp" | "w2k" | "w2k3" | "w2k8" | "wvista") => true,
        Some(os) => os
            .strip_prefix("win")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    }
}

/// Machine.pm `latest_installed_machine_version` for [`QEMU_VERSION`]: `major.minor` with the
/// highest `+pveN` revision of `$PVE_MACHINE_VERSION` for it.
fn pinned_version() -> String {
    let version: String = QEMU_VERSION
        .split('.')
        .take(2)
        .collect::<Vec<_>>()
        .join(".");
    let highest = match version.as_str() {
        "4.1" | "11.0" => 2,
        "9.2" | "10.0" => 1,
        _ => 0,
    };
    if highest > 0 {
        format!("{version}+pve{highest}")
    } else {
        version
    }
}

/// Machine.pm `check_and_pin_machine_string` (create_vm, and update_vm_api's `ostype` branch):
/// the machine value printed again (`type` first), and for a Windows `ostype` with no machine
/// type, `pc` or `q35` the type pinned to the installed version (`pc-i440fx-9.2+pve1`,
/// `pc-q35-9.2+pve1`). `None` where the printed value is empty.
pub fn pin_machine(machine: Option<&str>, ostype: Option<&str>) -> Option<String> {
    let mut kv = machine
        .filter(|m| !m.is_empty())
        .and_then(|m| schema::parse_machine(m).ok())
        .unwrap_or_default();
    let machine_type = kv.get("type").cloned();
    let pinnable = machine_type
        .as_deref()
        .is_none_or(|t| matches!(t, "pc" | "q35" | "virt"));
    if pinnable && is_windows(ostype) {
        let base = machine_type.unwrap_or_else(|| "pc".into());
        let pinned = match base.as_str() {
            "pc" => format!("pc-i440fx-{}", pinned_version()),
            "q35" => format!("pc-q35-{}", pinned_version()),
            _ => format!("virt-{}", pinned_version()),
        };
        kv.insert("type".into(), pinned);
    }
    let printed = schema::print_property_string("type", &kv);
    (!printed.is_empty()).then_some(printed)
}

/// The pattern update_vm_api uses to leave a `cipassword` that is already a crypt() hash
/// as it is: `^\$(?:[156]|2[ay])(\$.+){2}`.
pub fn is_crypted(value: &str) -> bool {
    let Some(rest) = value.strip_prefix('$') else {
        return false;
    };
    let Some(rest) = ["1$", "5$", "6$", "2a$", "2y$"]
        .iter()
        .find_map(|p| rest.strip_prefix(p))
    else {
        return false;
    };
    matches!(rest.split_once('$'), Some((salt, hash)) if !salt.is_empty() && !hash.is_empty())
}

/// update_vm_api's `cipassword` branch: for a guest that is not Windows (by the config's
/// `ostype`), a password that is not already a crypt() hash is hashed (Tools.pm `encrypt_pw`,
/// SHA-256 crypt `$5$salt$hash`; pve-sim's hash has that shape, not crypt's bytes). A Windows
/// guest's is kept in plain. create_vm stores it as given in every case.
pub fn update_cipassword(sim: &Sim, value: &str, ostype: Option<&str>) -> String {
    if is_windows(ostype) || is_crypted(value) {
        return value.to_string();
    }
    let salt = format!("{:08x}", sim.random() as u32);
    let mut input = salt.clone().into_bytes();
    input.extend_from_slice(value.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA256, &input);
    let hash: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("$5${salt}${hash}")
}

/// The `net` branch (create_vm `add_random_macs`, update_vm_api): parsed and printed again
/// (`model=MAC` first, booleans as 0/1), with a new MAC address where none was given.
pub fn print_net(sim: &Sim, value: &str) -> String {
    let mut kv = schema::parse_net(value).unwrap_or_default();
    kv.entry("macaddr".into())
        .or_insert_with(|| random_mac(sim));
    schema::print_net(&kv)
}

/// `vmgenid: 1` (and, at create, no `vmgenid`) asks for a fresh generation id on each write
/// (create_vm; update_vm_api's `vmgenid` branch).
pub fn vmgenid(sim: &Sim, value: Option<&str>) -> Option<String> {
    match value {
        None | Some("1") => Some(uuid(sim)),
        Some(v) => Some(v.to_string()),
    }
}

/// Tools.pm `validate_ssh_public_keys` after `uri_unescape` (create_vm and update_vm_api,
/// before anything is written): each non-blank line must be a key `ssh-keygen -l` reads. With
/// `ssh-keygen` on the machine it is run as PVE runs it; without, the line is read as it would
/// (a key type and a base64 blob that starts with that type).
pub fn validate_ssh_public_keys(encoded: &str) -> Result<(), String> {
    let raw = percent_decode(encoded, false);
    for line in raw.split('\n').filter(|l| !l.trim().is_empty()) {
        let valid = match ssh_keygen_accepts(line) {
            Some(accepted) => accepted,
            None => key_line_is_valid(line),
        };
        if !valid {
            return Err("SSH public key validation error".into());
        }
    }
    Ok(())
}

/// `ssh-keygen -l -f FILE` on the line; `None` when ssh-keygen cannot be run here.
fn ssh_keygen_accepts(line: &str) -> Option<bool> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "pve-sim-sshkey-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let mut file = std::fs::File::create(&path).ok()?;
    file.write_all(line.as_bytes()).ok()?;
    drop(file);
    let status = Command::new("ssh-keygen")
        .arg("-l")
        .arg("-f")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let _ = std::fs::remove_file(&path);
    status.ok().map(|s| s.success())
}

/// Reads an authorized_keys line as ssh-keygen does: a known key type followed by a base64
/// blob made of exactly the fields that type has (its name first), e.g. an ed25519 key's
/// 32 bytes.
fn key_line_is_valid(line: &str) -> bool {
    let fields: Vec<&str> = line.split_whitespace().collect();
    fields.windows(2).any(|pair| {
        base64_decode(pair[1]).is_some_and(|blob| {
            ssh_strings(&blob).is_some_and(|parts| key_blob_is_valid(pair[0], &parts))
        })
    })
}

/// The length-prefixed fields of an SSH key blob, all of it used.
fn ssh_strings(mut blob: &[u8]) -> Option<Vec<&[u8]>> {
    let mut parts = Vec::new();
    while !blob.is_empty() {
        let len = u32::from_be_bytes(blob.get(..4)?.try_into().ok()?) as usize;
        parts.push(blob.get(4..4 + len)?);
        blob = &blob[4 + len..];
    }
    Some(parts)
}

fn key_blob_is_valid(key_type: &str, parts: &[&[u8]]) -> bool {
    if parts.first() != Some(&key_type.as_bytes()) {
        return false;
    }
    let curve_matches = |curve: &[u8]| key_type.ends_with(&*String::from_utf8_lossy(curve));
    match (key_type, parts.len()) {
        ("ssh-ed25519", 2) => parts[1].len() == 32,
        ("sk-ssh-ed25519@openssh.com", 3) => parts[1].len() == 32,
        ("ssh-rsa", 3) => parts[2].len() >= 64,
        ("ssh-dss", 5) => true,
        ("ecdsa-sha2-nistp256" | "ecdsa-sha2-nistp384" | "ecdsa-sha2-nistp521", 3) => {
            curve_matches(parts[1]) && parts[2].first() == Some(&4)
        }
        ("sk-ecdsa-sha2-nistp256@openssh.com", 4) => parts[1] == b"nistp256",
        _ => false,
    }
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let body = text.trim_end_matches('=');
    if !text.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in body.bytes() {
        acc = (acc << 6) | value(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Keys QemuServer.pm's schema types as plain strings without a format: `check_type` strips
/// one pair of surrounding double quotes from their values.
fn unformatted_string(key: &str) -> bool {
    matches!(
        key,
        "args" | "ciuser" | "cipassword" | "searchdomain" | "keyboard"
    ) || matches!(schema::config_key_type(key), Some(Ty::Enum(_) | Ty::Pat(_)))
}

/// What one value becomes in the config file and back (QemuServer.pm `write_vm_config`, which
/// runs `check_type` on every key but `description`, then `parse_vm_config`, which reads each
/// `key: value` line trimmed and runs `check_type` again): undef dies ("got undefined value"),
/// a line feed dies, a boolean is `1`/`0`, an integer loses its leading zeros and dies with a
/// sign, a number is kept as written (`2.0`) but must be digits with an optional fraction, a
/// plain string loses surrounding quotes. `Ok(None)`: the line is not written (an empty
/// `description`), so the key is absent.
pub fn write_value(key: &str, value: Option<&str>) -> Result<Option<String>, String> {
    let fail = |why: &str| format!("unable to parse value of '{key}' - {why}");
    if key == "description" {
        return Ok(value.and_then(description));
    }
    let value = value.ok_or_else(|| fail("got undefined value"))?;
    if value.contains(['\n', '\r']) {
        return Err(fail("property contains a line feed"));
    }
    let value = match schema::config_key_type(key) {
        Some(Ty::Bool) => match value.to_ascii_lowercase().as_str() {
            "1" | "on" | "yes" | "true" => "1".to_string(),
            "0" | "off" | "no" | "false" => "0".to_string(),
            _ => {
                return Err(fail(&format!(
                    "type check ('boolean') failed - got '{value}'"
                )));
            }
        },
        Some(Ty::Int(..)) => {
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(fail(&format!(
                    "type check ('integer') failed - got '{value}'"
                )));
            }
            value
                .parse::<u64>()
                .map(|n| n.to_string())
                .map_err(|_| fail(&format!("type check ('integer') failed - got '{value}'")))?
        }
        Some(Ty::Num(..)) => {
            let (int, frac) = value.split_once('.').unwrap_or((value, "0"));
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            if !digits(int) || !digits(frac) {
                return Err(fail(&format!(
                    "type check ('number') failed - got '{value}'"
                )));
            }
            value.to_string()
        }
        _ if unformatted_string(key) => value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value)
            .to_string(),
        _ => value.to_string(),
    };
    // parse_vm_config: `^([a-z][a-z_\-]*\d*):\s*(.+?)\s*$` reads a value trimmed; a value
    // of nothing but blanks is kept as written here and read as `" "` ([`read_back`]).
    let read = value.trim();
    Ok(Some(if read.is_empty() {
        value
    } else {
        read.to_string()
    }))
}

/// A stored value as parse_vm_config reads the `key: value` line back: the regex
/// `^([a-z][a-z_\-]*\d*):\s*(.+?)\s*$` needs one character for `(.+?)`, so a line of
/// nothing but blanks after the colon (`boot: `, written for an empty `boot` or `tags`) is
/// `" "`. That is what GET answers, and what the next write of the file keeps (`boot:  `).
pub fn read_back(value: &str) -> &str {
    if value.trim().is_empty() { " " } else { value }
}

/// The `description` as the config file keeps it: `#` comment lines (Tools.pm encode_text),
/// read back with trailing whitespace trimmed; an empty one (and, Perl's truth, `0`) is not
/// written at all.
fn description(value: &str) -> Option<String> {
    if value.is_empty() || value == "0" {
        return None;
    }
    let read = value.trim_end();
    (!read.is_empty()).then(|| read.to_string())
}

/// What create_vm and update_vm_api do to the parameters before the worker forks: SSH keys
/// checked ([`validate_ssh_public_keys`]), `cpuunits` clamped, NICs printed again with a MAC
/// address ([`print_net`]); and for drives given without a value, check_drive_param's
/// "unable to parse drive options".
pub fn prepare_params(sim: &Sim, params: &Params, undef: &Undefined) -> Result<Params, ApiErr> {
    if let Some(drive) = undef.iter().find(|k| schema::is_drive_key(k)) {
        return Err(ApiErr::param(drive, "unable to parse drive options"));
    }
    let mut params = params.clone();
    if let Some(keys) = params.get("sshkeys") {
        validate_ssh_public_keys(keys).map_err(ApiErr::die)?;
    }
    if let Some(shares) = params.get_mut("cpuunits") {
        *shares = clamp_cpu_shares(shares);
    }
    for (key, value) in params.iter_mut() {
        if is_net_key(key) {
            *value = print_net(sim, value);
        }
    }
    Ok(params)
}

fn is_net_key(key: &str) -> bool {
    key.strip_prefix("net")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// create_vm's worker after create_disks, up to `write_config`: a default `boot`
/// ([`default_boot`]) where none is set, an `smbios1` UUID, a fresh `vmgenid` (none given, or
/// `1`), the machine printed and pinned for Windows ([`pin_machine`]), the tags made unique
/// ([`unique_tags`]), `cipassword` as given (create_vm does not hash it), the creation meta;
/// then every value as the file keeps it ([`write_value`]), an undef one failing the create.
pub fn create_config(
    sim: &Sim,
    params: &Params,
    undef: &Undefined,
    drives: Vec<(String, String)>,
) -> Result<BTreeMap<String, String>, String> {
    let mut conf: BTreeMap<String, Option<String>> = BTreeMap::new();
    for (key, value) in params {
        if schema::is_config_key(key) && !schema::is_drive_key(key) && key != "lock" {
            conf.insert(key.clone(), Some(value.clone()));
        }
    }
    for key in undef.iter().filter(|k| schema::is_config_key(k)) {
        conf.insert(key.clone(), None);
    }
    for (key, value) in drives {
        conf.insert(key, Some(value));
    }
    let truthy = |v: &Option<String>| v.as_deref().is_some_and(|v| !v.is_empty() && v != "0");
    if !conf.get("boot").is_some_and(truthy) {
        let defined: BTreeMap<String, String> = conf
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
            .collect();
        conf.insert("boot".into(), Some(default_boot(&defined)));
    }
    if !conf.get("smbios1").is_some_and(truthy) {
        conf.insert("smbios1".into(), Some(format!("uuid={}", uuid(sim))));
    }
    let genid = vmgenid(sim, conf.get("vmgenid").cloned().flatten().as_deref());
    conf.insert("vmgenid".into(), genid);
    let machine = conf.get("machine").cloned().flatten();
    if let Some(machine) = &machine {
        // check_and_pin_machine_string: assert_valid_machine_property dies in the worker.
        schema::assert_valid_machine_property(machine)?;
    }
    let ostype = conf.get("ostype").cloned().flatten();
    if let Some(pinned) = pin_machine(machine.as_deref(), ostype.as_deref()) {
        conf.insert("machine".into(), Some(pinned));
    }
    if let Some(Some(tags)) = conf.get_mut("tags") {
        *tags = unique_tags(tags);
    }
    conf.insert(
        "meta".into(),
        Some(format!(
            "creation-qemu={QEMU_VERSION},ctime={}",
            crate::state::epoch() as u64
        )),
    );
    let mut file = BTreeMap::new();
    for (key, value) in conf {
        if let Some(stored) = write_value(&key, value.as_deref())? {
            file.insert(key, stored);
        }
    }
    Ok(file)
}

/// A config value as `GET …/config` answers it (API2/Qemu.pm vm_config, the values
/// `parse_vm_config` made): integers and booleans are numbers (check_type's `int($1)`, `1`/`0`),
/// `number` keys the string the file has (`"2.0"`, not a JSON float), the rest strings;
/// `cipassword` masked.
pub(crate) fn typed(key: &str, value: &str) -> Value {
    let value = read_back(value);
    match (key, schema::config_key_type(key)) {
        ("cipassword", _) => json!("**********"),
        (_, Some(Ty::Int(..)) | Some(Ty::Bool)) => value
            .parse::<i64>()
            .map(|n| json!(n))
            .unwrap_or(json!(value)),
        _ => json!(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_tags() {
        assert_eq!(split_list(" a, b;c  d;"), ["a", "b", "c", "d"]);
        assert_eq!(unique_tags("Web;db,web prod"), "db;prod;web");
        assert_eq!(unique_tags(""), "");
    }

    #[test]
    fn boot_orders() {
        assert_eq!(boot_devices("order=scsi0; net0;"), ["scsi0", "net0"]);
        let exists = |d: &str| d == "scsi0" || d == "net0";
        assert_eq!(
            update_boot("order=scsi0; net0;", exists, &[]).unwrap(),
            "order=scsi0;net0"
        );
        assert_eq!(update_boot("cdn", exists, &[]).unwrap(), "cdn");
        assert!(update_boot("order=virtio0", exists, &[]).is_err());
        let mut conf = BTreeMap::new();
        conf.insert(
            "scsi1".to_string(),
            "local-lvm:vm-1-disk-1,size=1G".to_string(),
        );
        conf.insert(
            "scsi0".to_string(),
            "local-lvm:vm-1-disk-0,size=1G".to_string(),
        );
        conf.insert(
            "ide2".to_string(),
            "local-lvm:vm-1-cloudinit,media=cdrom".to_string(),
        );
        conf.insert("net1".to_string(), "virtio=BC:24:11:00:00:01".to_string());
        assert_eq!(default_boot(&conf), "order=scsi0;ide2;net1");
    }

    #[test]
    fn machines_and_windows() {
        assert_eq!(
            pin_machine(Some("q35"), Some("win11")).as_deref(),
            Some("pc-q35-9.2+pve1")
        );
        assert_eq!(
            pin_machine(None, Some("win10")).as_deref(),
            Some("pc-i440fx-9.2+pve1")
        );
        assert_eq!(
            pin_machine(Some("pc-q35-8.1"), Some("win11")).as_deref(),
            Some("pc-q35-8.1")
        );
        assert_eq!(
            pin_machine(Some("viommu=intel,type=q35"), Some("l26")).as_deref(),
            Some("q35,viommu=intel")
        );
        assert_eq!(pin_machine(None, Some("l26")), None);
    }

    #[test]
    fn check_type_at_write() {
        assert_eq!(write_value("onboot", Some("yes")).unwrap().unwrap(), "1");
        assert_eq!(write_value("cores", Some("02")).unwrap().unwrap(), "2");
        assert!(write_value("cores", Some("+2")).is_err());
        assert_eq!(
            write_value("cpulimit", Some("2.0")).unwrap().unwrap(),
            "2.0"
        );
        assert!(write_value("cpulimit", Some(".5")).is_err());
        assert_eq!(
            write_value("ciuser", Some("\"bob\"")).unwrap().unwrap(),
            "bob"
        );
        assert_eq!(
            write_value("sshkeys", None).unwrap_err(),
            "unable to parse value of 'sshkeys' - got undefined value"
        );
        assert_eq!(write_value("description", None).unwrap(), None);
        assert_eq!(
            write_value("description", Some("notes \n"))
                .unwrap()
                .unwrap(),
            "notes"
        );
        assert!(write_value("name", Some("a\nb")).is_err());
        assert_eq!(write_value("name", Some(" web ")).unwrap().unwrap(), "web");
        // An empty value is written (`ciuser: `) and read back as " " (parse_vm_config).
        assert_eq!(write_value("ciuser", Some("")).unwrap().unwrap(), "");
        assert_eq!(read_back(""), " ");
        assert_eq!(read_back("web"), "web");
    }

    #[test]
    fn crypt_and_keys() {
        assert!(is_crypted("$5$salt$hash"));
        assert!(is_crypted("$6$x$y"));
        assert!(!is_crypted("$5$salt"));
        assert!(!is_crypted("secret"));
        assert!(key_line_is_valid(
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEy4xSYhokTxpCt5FoODp6IoFKsiOf3vpdJceoBUhYvO sim@x"
        ));
        assert!(key_line_is_valid(
            "from=\"10.0.0.1\" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEy4xSYhokTxpCt5FoODp6IoFKsiOf3vpdJceoBUhYvO"
        ));
        assert!(!key_line_is_valid(
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMoleculeTestKey molecule@sankofa"
        ));
        assert!(!key_line_is_valid(
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITest me@laptop"
        ));
        assert_eq!(clamp_cpu_shares("262144"), "10000");
        assert_eq!(clamp_cpu_shares("100"), "100");
    }
}
