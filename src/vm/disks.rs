//! The `disks` option and the cloud-init drive, as the desired VM's disks: each checked
//! (slot, storage, import source, size, drive options), in PVE's terms.

use std::collections::BTreeMap;

use serde_json::Value;

use super::encode::pve_bool;
use super::validate::{cdrom_slot, drive_option, import_source, is_drive_slot, parse_size};
use crate::ansible::protocol::Invocation;
use crate::ansible::spec::given;
use crate::ansible::text::quote;
use crate::ids::storage_id;

/// One disk of the desired VM.
#[derive(Clone, Debug, Default, PartialEq)]
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
    /// `state: absent`: an existing disk is detached (see [`super::disk_life`]).
    pub absent: bool,
    /// `purge`: a detached disk's volume is deleted too.
    pub purge: bool,
    /// `keep_source`: a moved disk's source volume is kept as `unusedN`.
    pub keep_source: bool,
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

/// The disks (`disks`), and the cloud-init drive when cloud-init options are given (on
/// `cloudinit_storage`, or the first disk's storage). A clone's disks come from its source.
pub(super) fn disks(inv: &Invocation, cloning: bool) -> Result<Vec<Disk>, String> {
    let params = &inv.params;
    let mut disks = Vec::new();
    for (i, disk) in params
        .get("disks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let disk = disk.as_object().ok_or("disks items must be dicts")?;
        let option = |key: &str| format!("disks[{i}].{key}");
        let slot = disk["slot"].as_str().unwrap_or_default().to_string();
        let life = super::disk_life_options::options(inv, disk, i)?;
        if !is_drive_slot(&slot) {
            return Err(format!(
                "{} must be a drive slot such as scsi0, virtio0, sata0, ide0 or efidisk0, got {slot}",
                option("slot"),
                slot = quote(&slot)
            ));
        }
        if disks.iter().any(|x: &Disk| x.slot == slot) {
            return Err(format!("{}: slot {slot} is used twice", option("slot")));
        }
        // A clone's disks come from its source: a disk listed to be grown needs no storage;
        // a disk to detach needs none either.
        let storage = match disk["storage"].as_str() {
            Some(text) => storage_id(&option("storage"), text)?,
            None if cloning || life.absent => String::new(),
            None => {
                return Err(format!(
                    "{} is required to create a disk",
                    option("storage")
                ));
            }
        };
        let import_from = disk["import_from"]
            .as_str()
            .map(|text| import_source(&option("import_from"), text))
            .transpose()?;
        let size = disk["size"]
            .as_str()
            .map(|text| parse_size(&option("size"), text))
            .transpose()?;
        if import_from.is_none() && size.is_none() && !life.absent {
            return Err(format!(
                "{}: give import_from (a cloud image) or size (a new empty disk)",
                option("slot")
            ));
        }
        if import_from.is_some() && cloning {
            return Err(format!(
                "{} and clone exclude each other: a clone's disks come from its source (give size to grow one)",
                option("import_from")
            ));
        }
        let mut opts = BTreeMap::new();
        for key in DRIVE_OPTS {
            if !disk[*key].is_null() {
                drive_option(&option(key), &slot, key)?;
            }
            match &disk[*key] {
                Value::Bool(value) if *key == "discard" => {
                    opts.insert(
                        key.to_string(),
                        (if *value { "on" } else { "ignore" }).to_string(),
                    );
                }
                Value::Bool(value) => {
                    opts.insert(key.to_string(), pve_bool(*value));
                }
                Value::String(text) => {
                    opts.insert(key.to_string(), text.clone());
                }
                _ => {}
            }
        }
        disks.push(Disk {
            slot,
            storage,
            import_from,
            size,
            format: disk["format"].as_str().map(str::to_string),
            opts,
            cloudinit: false,
            absent: life.absent,
            purge: life.purge,
            keep_source: life.keep_source,
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
    .any(|key| {
        // An empty value or list asks for none (the plan deletes the key): it needs no drive.
        params.get(*key).is_some_and(|value| {
            !value.is_null()
                && value.as_array().is_none_or(|a| !a.is_empty())
                && value.as_str().is_none_or(|text| !text.is_empty())
        })
    });
    if let Some(cs) = inv
        .str("cloudinit_storage")
        .map(|text| storage_id("cloudinit_storage", text))
        .transpose()?
        .or_else(|| {
            wants_ci
                .then(|| {
                    disks
                        .iter()
                        .find(|disk| !disk.absent)
                        .map(|disk| disk.storage.clone())
                        .filter(|text| !text.is_empty())
                })
                .flatten()
        })
    {
        let slot = given(inv.str("cloudinit_slot"), "cloudinit_slot")?.to_string();
        if is_drive_slot(&slot) {
            cdrom_slot("cloudinit_slot", &slot)?;
        }
        if !is_drive_slot(&slot) || disks.iter().any(|disk| disk.slot == slot) {
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
            absent: false,
            purge: false,
            keep_source: false,
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
