//! The desired VM the `vm` module's options describe, in PVE's own terms: config keys with
//! values in the form PVE stores them, the keys sent only at create, and the disks to import
//! or allocate. Values that end up inside property strings are checked through
//! [`super::validate`] and written by [`super::encode`].

use std::collections::BTreeMap;

use serde_json::Value;

use super::config_keys::{managed_key, not_a_config_key};
pub use super::disks::Disk;
use super::encode::{efidisk_value, ipconfig_value, net_value, pve_bool, tpmstate_value};
use super::limits::{check_config, check_snapname};
pub use super::spec::State;
use super::validate::{nameserver, plain};
use crate::ansible::protocol::Invocation;
use crate::ansible::spec::given;
use crate::ansible::text::quote;
use crate::ids::{VmSelector, dns_name, storage_id};
use crate::pve::values::{Boot, Cpu, Machine, SshKeys, Tags, Vga};

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
    /// The slots of `fixed` whose option says `force: true`: recreated when their properties
    /// differ (see [`super::firmware_disks`]).
    pub recreate: Vec<String>,
    /// `cdroms`: the CD-ROM drives and their media (see [`super::cdroms`]).
    pub cdroms: Vec<super::cdroms::Cdrom>,
    /// `migrate`: a VM found on another node than `node` is moved there (a `qmigrate`
    /// task: live when it runs, its local disks with it).
    pub migrate: bool,
    /// `target_storage`: where a migration puts the VM's local disks on the target node
    /// (`None`: each on the storage of the same name there).
    pub target_storage: Option<String>,
    /// `ha`: the VM as an HA resource (see [`super::ha`]).
    pub ha: Option<super::ha::HaWanted>,
    /// `snapshot_before_change`: the prefix of a snapshot taken before an existing VM is
    /// changed (see [`super::snapshot_before`]), and `snapshot_retention`.
    pub snapshot_before_change: Option<String>,
    pub snapshot_retention: u32,
    /// `nocloud`: the NoCloud seed the module builds and attaches (see [`super::nocloud`]).
    pub nocloud: Option<super::nocloud::wanted::Nocloud>,
    /// The disks given `state: absent`, and `unused_disks` (see [`super::disk_life`]).
    pub absent_disks: Vec<Disk>,
    pub unused_disks: super::disk_life_options::UnusedDisks,
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

/// The `clone` option, checked: exactly one of `vmid` and `name`; `storage` only for a full
/// clone (PVE refuses it for a linked one).
fn clone_source(inv: &Invocation) -> Result<Option<CloneSource>, String> {
    let Some(clone) = inv.params.get("clone").and_then(Value::as_object) else {
        return Ok(None);
    };
    let vmid = clone.get("vmid").and_then(Value::as_u64).map(|v| v as u32);
    let name = clone
        .get("name")
        .and_then(Value::as_str)
        .map(|name| dns_name("clone.name", name))
        .transpose()?;
    if vmid.is_some() == name.is_some() {
        return Err("clone needs exactly one of vmid and name (the source VM)".into());
    }
    let full = clone.get("full").and_then(Value::as_bool);
    let storage = clone
        .get("storage")
        .and_then(Value::as_str)
        .map(|storage| storage_id("clone.storage", storage))
        .transpose()?;
    if storage.is_some() && full == Some(false) {
        return Err(
            "clone.storage is the target of a full clone; PVE refuses it for a linked clone (full: false)"
                .into(),
        );
    }
    let snapname = clone
        .get("snapname")
        .and_then(Value::as_str)
        .map(|snapname| {
            let name = plain("clone.snapname", snapname)?;
            check_snapname("clone.snapname", &name)?;
            Ok::<String, String>(name)
        })
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
    let params = &inv.params;
    for key in ["cores", "sockets", "memory", "balloon"] {
        if let Some(value) = inv.int(key) {
            config.insert(key.into(), value.to_string());
        }
    }
    // update_vm_api refuses a balloon minimum above the memory (create_vm takes it, and then
    // every update that sends either is refused).
    if let (Some(memory), Some(balloon)) = (inv.int("memory"), inv.int("balloon"))
        && balloon > memory
    {
        return Err(format!(
            "balloon ({balloon} MiB) must not be larger than memory ({memory} MiB): PVE refuses it (balloon value too large)"
        ));
    }
    for key in ["bios", "ostype", "scsihw"] {
        if let Some(value) = inv.str(key) {
            config.insert(key.into(), value.to_string());
        }
    }
    for key in ["cpu", "machine", "vga", "boot"] {
        if let Some(value) = inv.str(key) {
            if value.contains(['\n', '\r']) || value.trim().is_empty() {
                return Err(format!(
                    "{key} must be a single non-empty line, got {value}",
                    value = quote(value)
                ));
            }
            config.insert(key.into(), value.to_string());
        }
    }
    // cpu, machine and vga checked by their formats before any write (sent as written: PVE
    // stores them so, and the plan compares them by their type).
    for key in ["cpu", "machine", "vga"] {
        let Some(value) = config.get(key) else {
            continue;
        };
        // A VM's own cpu as validate_vm_cpu_conf checks it, the machine's options as
        // assert_valid_machine_property does.
        let checked = match key {
            "cpu" => value.parse::<Cpu>().and_then(|cpu| cpu.check_vm_specific()),
            "machine" => value
                .parse::<Machine>()
                .and_then(|machine| machine.check_properties()),
            _ => value.parse::<Vga>().map(drop),
        };
        checked.map_err(|e| format!("{key} is not a value PVE accepts: {}", e.message))?;
    }
    // The boot order as PVE prints it again on an update (print_bootorder: `order=a;b`),
    // checked as PVE checks it.
    if let Some(boot) = config.get_mut("boot") {
        let order = boot
            .parse::<Boot>()
            .map_err(|e| format!("boot is not a boot order PVE accepts: {}", e.message))?;
        *boot = order.to_string();
    }
    for key in ["agent", "onboot", "numa", "protection"] {
        if let Some(value) = inv.bool(key) {
            config.insert(key.into(), pve_bool(value));
        }
    }
    if let Some(tags) = params
        .get("tags")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
    {
        let mut out = Vec::new();
        for (i, tag) in tags.iter().filter_map(Value::as_str).enumerate() {
            let ok = !tag.is_empty()
                && tag
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || b"-_+.".contains(&byte))
                && !tag.starts_with(['-', '_', '+', '.']);
            if !ok {
                return Err(format!(
                    "tags[{i}] must use letters, digits and - _ + . (not first), got {tag}",
                    tag = quote(tag)
                ));
            }
            out.push(tag.to_ascii_lowercase());
        }
        // As get_unique_tags stores them: sorted, without duplicates.
        let tags = out
            .join(";")
            .parse::<Tags>()
            .map_err(|e| format!("tags: {}", e.message))?;
        config.insert("tags".into(), tags.to_string());
    } else if empty_list(params.get("tags")) {
        config.insert("tags".into(), String::new());
    }
    // A blank description asks for none, as an empty one does: PVE writes no comment for it
    // (write_vm_config), so an update deletes it, and a create reads it back as "".
    if let Some(description) = inv.str("description") {
        let notes = if description.trim().is_empty() {
            ""
        } else {
            description
        };
        config.insert("description".into(), notes.to_string());
    }
    for (i, serial) in params
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
        if !(serial == "socket"
            || (serial.starts_with("/dev/") && !serial.contains(['\n', ',', ' '])))
        {
            return Err(format!(
                "serial[{i}] must be 'socket' or a /dev/ path, got {serial}",
                serial = quote(serial)
            ));
        }
        config.insert(format!("serial{i}"), serial.to_string());
    }
    if let Some(extra) = params.get("extra_config").and_then(Value::as_object) {
        for (key, raw) in extra {
            let raw = raw.as_str().unwrap_or_default();
            let key_ok = !key.is_empty()
                && key.as_bytes()[0].is_ascii_lowercase()
                && key.bytes().all(|byte| {
                    byte.is_ascii_lowercase()
                        || byte.is_ascii_digit()
                        || byte == b'_'
                        || byte == b'-'
                });
            if !key_ok {
                return Err(format!(
                    "extra_config: {} is not a PVE config key",
                    quote(key)
                ));
            }
            if let Some(why) = not_a_config_key(key) {
                return Err(format!("extra_config: {key} {why}"));
            }
            if managed_key(key) {
                return Err(format!(
                    "extra_config: set {key} through the module's own option, not extra_config"
                ));
            }
            if raw.contains(['\n', '\r']) {
                return Err(format!("extra_config.{key} must be a single line"));
            }
            // PVE stores a blank value as a blank line (`args:  `) and answers " ", which no
            // value the module sends would match again.
            if !raw.is_empty() && raw.trim().is_empty() {
                return Err(format!(
                    "extra_config.{key} is blank: give a value, or \"\" to delete the key"
                ));
            }
            // An empty value is a delete (the plan sends it); others are checked by the
            // key's type and sent as PVE takes them.
            let value = if raw.is_empty() {
                String::new()
            } else {
                crate::pve::values::config::to_send(key, raw)
                    .map_err(|e| format!("extra_config.{key}: {}", e.message))?
            };
            config.insert(key.clone(), value);
        }
    }

    Ok(())
}

/// True for a list option given as `[]`: it asks for none, and the plan deletes the key (a
/// list option not given at all is `null`).
fn empty_list(option: Option<&Value>) -> bool {
    option
        .and_then(Value::as_array)
        .is_some_and(|items| items.is_empty())
}

/// The cloud-init keys: user, password (sent once unless `update_password: always`), SSH
/// keys, DNS, and the per-NIC `ipconfigN`.
fn cloud_init(
    inv: &Invocation,
    config: &mut BTreeMap<String, String>,
    create_only: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    let params = &inv.params;
    if let Some(value) = inv.str("citype") {
        config.insert("citype".into(), value.to_string());
    }
    if let Some(value) = inv.bool("ciupgrade") {
        config.insert("ciupgrade".into(), pve_bool(value));
    }
    // An empty ciuser, searchdomain or cipassword asks for none: the plan deletes it.
    if let Some(ciuser) = inv.str("ciuser") {
        let user = if ciuser.is_empty() {
            String::new()
        } else {
            plain("ciuser", ciuser)?
        };
        config.insert("ciuser".into(), user);
    }
    if let Some(password) = inv.str("cipassword") {
        if password.contains(['\n', '\r']) {
            return Err("cipassword must be a single line".into());
        }
        if inv.str("update_password") == Some("always") {
            config.insert("cipassword".into(), password.to_string());
        } else {
            create_only.insert("cipassword".into(), password.to_string());
        }
    }
    if let Some(items) = params
        .get("sshkeys")
        .and_then(Value::as_array)
        .filter(|items| !items.is_empty())
    {
        let keys: Vec<(usize, &str)> = items
            .iter()
            .enumerate()
            .filter_map(|(i, key)| key.as_str().map(|key| (i, key.trim())))
            .collect();
        // A private key pasted by mistake: refused, never quoted, and masked from all output.
        if let Some((i, key)) = keys
            .iter()
            .find(|(_, key)| key.contains("PRIVATE KEY") || key.starts_with("PuTTY-User-Key-File"))
        {
            crate::ansible::protocol::register_secret(key);
            for line in key.lines().filter(|line| line.len() >= 16) {
                crate::ansible::protocol::register_secret(line);
            }
            return Err(format!(
                "sshkeys[{i}] is a private key: give the public key (the .pub file, one line \
                 starting with ssh-ed25519, ssh-rsa, ecdsa-sha2-… or sk-…); the value is not shown"
            ));
        }
        // PVE's create dies on `sshkeys=`; an unset variable in a list is a mistake.
        if let Some((i, _)) = keys.iter().find(|(_, key)| key.is_empty()) {
            return Err(format!(
                "sshkeys[{i}] is empty (an unset variable?): give a public key, or leave the item out"
            ));
        }
        if let Some((_, key)) = keys.iter().find(|(_, key)| key.contains(['\n', '\r'])) {
            return Err(format!(
                "sshkeys: give one key per list item; this one spans lines: {:?}",
                key.lines().next().unwrap_or("")
            ));
        }
        // Checked as PVE's validate_ssh_public_keys checks them (ssh-keygen -l), before any
        // write.
        let keys = SshKeys::from_lines(keys.iter().map(|(_, key)| *key)).map_err(|(at, e)| {
            format!(
                "sshkeys[{}] is not a public key PVE accepts: {}",
                keys.get(at).map_or(at, |(i, _)| *i),
                e.message
            )
        })?;
        config.insert("sshkeys".into(), keys.to_string());
    } else if empty_list(params.get("sshkeys")) {
        config.insert("sshkeys".into(), String::new());
    }
    if let Some(nameservers) = params
        .get("nameserver")
        .and_then(Value::as_array)
        .filter(|items| !items.is_empty())
    {
        let mut out = Vec::new();
        for (i, server) in nameservers.iter().filter_map(Value::as_str).enumerate() {
            out.push(nameserver(&format!("nameserver[{i}]"), server)?);
        }
        config.insert("nameserver".into(), out.join(" "));
    } else if empty_list(params.get("nameserver")) {
        config.insert("nameserver".into(), String::new());
    }
    if let Some(searchdomain) = inv.str("searchdomain") {
        let domain = if searchdomain.is_empty() {
            String::new()
        } else {
            dns_name("searchdomain", searchdomain)?
        };
        config.insert("searchdomain".into(), domain);
    }
    for (i, item) in params
        .get("ipconfig")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        config.insert(
            format!("ipconfig{i}"),
            ipconfig_value(i, item.as_object().ok_or("ipconfig items must be dicts")?)?,
        );
    }
    Ok(())
}

/// The NICs, `net0`, `net1`, … in the order given.
fn network(inv: &Invocation, config: &mut BTreeMap<String, String>) -> Result<(), String> {
    let params = &inv.params;
    for (i, nic) in params
        .get("net")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        config.insert(
            format!("net{i}"),
            net_value(i, nic.as_object().ok_or("net items must be dicts")?)?,
        );
    }
    Ok(())
}

/// The EFI vars disk and the TPM state, sent only at create; returns what a re-run compares
/// (slot → properties).
fn firmware(
    inv: &Invocation,
    config: &BTreeMap<String, String>,
    create_only: &mut BTreeMap<String, String>,
) -> Result<BTreeMap<String, BTreeMap<String, String>>, String> {
    let params = &inv.params;
    let mut fixed = BTreeMap::new();
    if let Some(efi) = params.get("efidisk").and_then(Value::as_object) {
        if config.get("bios").map(String::as_str) != Some("ovmf") {
            return Err(
                "efidisk needs bios: ovmf (an EFI vars disk holds OVMF's UEFI variables)".into(),
            );
        }
        let sid = storage_id(
            "efidisk.storage",
            efi["storage"].as_str().unwrap_or_default(),
        )?;
        let efitype = given(efi["efitype"].as_str(), "efidisk.efitype")?.to_string();
        let keys = pve_bool(given(
            efi["pre_enrolled_keys"].as_bool(),
            "efidisk.pre_enrolled_keys",
        )?);
        create_only.insert("efidisk0".into(), efidisk_value(&sid, &efitype, &keys)?);
        fixed.insert(
            "efidisk0".to_string(),
            BTreeMap::from([
                ("efitype".to_string(), efitype),
                ("pre-enrolled-keys".to_string(), keys),
            ]),
        );
    }
    if let Some(tpm) = params.get("tpmstate").and_then(Value::as_object) {
        let sid = storage_id(
            "tpmstate.storage",
            tpm["storage"].as_str().unwrap_or_default(),
        )?;
        let version = given(tpm["version"].as_str(), "tpmstate.version")?.to_string();
        create_only.insert("tpmstate0".into(), tpmstate_value(&sid, &version)?);
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
    let VmSelector { vmid, name, node } = VmSelector::from_invocation(inv)?;
    if let Some(name) = &name {
        config.insert("name".into(), name.clone());
    }
    hardware(inv, &mut config)?;
    cloud_init(inv, &mut config, &mut create_only)?;
    network(inv, &mut config)?;
    let clone = clone_source(inv)?;
    let nocloud = super::nocloud::wanted::wanted(inv)?;
    let mut disks = super::disks::disks(inv, clone.is_some())?;
    if nocloud.is_some() {
        // The seed takes the place of PVE's cloud-init drive: none is created.
        disks.retain(|disk| !disk.cloudinit);
    }
    let (absent_disks, disks): (Vec<Disk>, Vec<Disk>) =
        disks.into_iter().partition(|disk| disk.absent);
    let template = given(inv.bool("template"), "template")?;
    if template && matches!(state, State::Started | State::Restarted) {
        return Err(format!(
            "a template never runs: template: true and state: {} exclude each other",
            inv.str("state").unwrap_or_default()
        ));
    }
    let fixed = firmware(inv, &config, &mut create_only)?;
    let recreate = [("efidisk", "efidisk0"), ("tpmstate", "tpmstate0")]
        .into_iter()
        .filter(|(option, _)| {
            inv.params
                .get(*option)
                .and_then(|given| given.get("force"))
                .and_then(Value::as_bool)
                == Some(true)
        })
        .map(|(_, slot)| slot.to_string())
        .collect();
    let cdroms = super::cdroms::wanted(inv, &disks)?;
    if disks
        .iter()
        .chain(&absent_disks)
        .any(|disk| disk.slot == "efidisk0" || disk.slot == "tpmstate0")
    {
        return Err(
            "give the EFI vars disk and the TPM state through efidisk and tpmstate, not disks"
                .into(),
        );
    }
    if !config.contains_key("boot")
        && let Some(first) = disks.iter().find(|disk| !disk.cloudinit)
    {
        // The CD-ROMs after the first disk, as update_vm would append each one it writes.
        let devices =
            std::iter::once(first.slot.as_str()).chain(super::cdroms::boot_devices(&cdroms));
        create_only.insert("boot".into(), Boot::order(devices).to_string());
    }
    let pool = inv
        .str("pool")
        .map(|pool| plain("pool", pool))
        .transpose()?;
    let wait_for_ip = Some(crate::ansible::spec::parse_duration(given(
        inv.str("wait_for_ip"),
        "wait_for_ip",
    )?)?)
    .filter(|wait| !wait.is_zero());
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
    let migrate = given(inv.bool("migrate"), "migrate")?;
    if migrate && node.is_none() {
        return Err(
            "migrate: true moves the VM to node, but node is not given: name the node it should be on"
                .into(),
        );
    }
    let target_storage = inv
        .str("target_storage")
        .map(|storage| storage_id("target_storage", storage))
        .transpose()?;
    if target_storage.is_some() && !migrate {
        return Err(
            "target_storage is where migrate: true puts the disks on the new node; give migrate: true or leave target_storage out"
                .into(),
        );
    }
    if migrate && state == State::Absent {
        return Err(
            "migrate: true moves a VM that is kept, but state is absent: a VM to remove is destroyed where it is"
                .into(),
        );
    }
    // PVE's schema limits, before any request: a value PVE would refuse (a description
    // over 8 KiB that pveproxy would cut off) fails here, naming its option.
    check_config(config.iter().chain(create_only.iter()))?;
    Ok(Desired {
        state,
        vmid,
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
        recreate,
        cdroms,
        migrate,
        target_storage,
        ha: super::ha::wanted(inv, state)?,
        snapshot_before_change: snapshot_prefix(inv)?,
        snapshot_retention: given(inv.int("snapshot_retention"), "snapshot_retention")? as u32,
        nocloud,
        absent_disks,
        unused_disks: super::disk_life_options::unused_disks(inv),
    })
}

/// `snapshot_before_change`: a prefix that, with the 14 digits of the time, is a snapshot name
/// PVE takes (`pve-snapshot-name`: a letter first, at most 40 characters).
fn snapshot_prefix(inv: &Invocation) -> Result<Option<String>, String> {
    let Some(prefix) = inv.str("snapshot_before_change") else {
        return Ok(None);
    };
    crate::snapshot::spec::snapname("snapshot_before_change", &format!("{prefix}00000000000000"))
        .map_err(|e| e.replace("00000000000000", ""))?;
    Ok(Some(prefix.to_string()))
}
