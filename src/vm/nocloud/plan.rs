//! Whether the VM holds the seed the `nocloud` option asks for, decided in plain data: the
//! seed of the VM's config as this round's update leaves it, the CD-ROM slot it goes in, PVE's
//! own cloud-init drive and older seeds to take off, and what the diff shows.

use std::collections::BTreeMap;

use super::seed::{Seed, is_seed_volume, part_hash, part_hashes};
use super::wanted::Nocloud;
use crate::pve::values::Drive;

/// Attaching a new seed: what the `Seed` step of the plan does.
#[derive(Clone, Debug, PartialEq)]
pub struct SeedStep {
    pub seed: Seed,
    /// The ISO's file name (`sankofa-<vmid>-<hash>.iso`) and volume (`local:iso/…`).
    pub file: String,
    pub volid: String,
    pub storage: String,
    /// The CD-ROM slot the seed goes in.
    pub slot: String,
    /// The drive value written there (`local:iso/….iso,media=cdrom`).
    pub drive: String,
    /// Slots whose drive comes off: PVE's cloud-init drive, other seeds.
    pub delete: Vec<String>,
    /// PVE's cloud-init drive this seed replaces (its slot), for the result.
    pub replaces_cloudinit: Option<String>,
    /// The seeds the VM held before: removed once no VM's config names them.
    pub old_volumes: Vec<String>,
    /// The parts given, and the slots' values the step was planned on: the attach reads the
    /// config again (its digest changed if this round's update or resize came first) and
    /// carries the step out only while the config still asks for exactly this seed.
    pub parts: super::seed::Parts,
    pub planned_on: Vec<(String, Option<String>)>,
}

impl SeedStep {
    /// Whether `config` (read again) still asks for this step: the same seed, the same
    /// drives in the slots it writes.
    pub fn still_wanted(&self, vmid: u32, config: &BTreeMap<String, String>) -> bool {
        Seed::for_vm(&self.parts, vmid, config).is_ok_and(|seed| seed == self.seed)
            && self
                .planned_on
                .iter()
                .all(|(slot, value)| config.get(slot) == value.as_ref())
    }
}

impl SeedStep {
    /// A short description for messages.
    pub fn describe(&self) -> String {
        let mut text = format!("attach the NoCloud seed {} on {}", self.file, self.slot);
        if let Some(slot) = &self.replaces_cloudinit {
            text.push_str(&format!(", replacing PVE's cloud-init drive on {slot}"));
        }
        text
    }
}

/// The slots a seed may go in, in the order they are chosen (PVE's CD-ROM buses).
fn cdrom_slots() -> impl Iterator<Item = String> {
    (0..4)
        .map(|n| format!("ide{n}"))
        .chain((0..6).map(|n| format!("sata{n}")))
}

/// The VM's config as this round's update (`set`, `delete`) leaves it.
pub fn after_update(
    config: &BTreeMap<String, String>,
    set: &[(String, String)],
    delete: &[String],
) -> BTreeMap<String, String> {
    let mut out = config.clone();
    for key in delete {
        out.remove(key);
    }
    for (key, value) in set {
        out.insert(key.clone(), value.clone());
    }
    out
}

/// What a part shows in the diff: its text, or, for user-data and vendor-data unless
/// `show_data`, its size and hash.
fn shown(wanted: &Nocloud, name: &str, content: &str) -> String {
    if matches!(name, "user-data" | "vendor-data") && !wanted.show_data {
        format!(
            "(secret: {} bytes, sha256 {}…; nocloud.show_data: true shows it)",
            content.len(),
            part_hash(content)
        )
    } else {
        content.to_string()
    }
}

/// The diff of a VM still to be made: the parts given, and those generated once the VM's
/// config (its id, its NICs' MACs) is known.
pub fn describe_new(wanted: &Nocloud, after: &mut BTreeMap<String, String>) {
    let parts = &wanted.parts;
    for (name, given) in [
        ("user-data", &parts.user_data),
        ("meta-data", &parts.meta_data),
        ("network-config", &parts.network_config),
        ("vendor-data", &parts.vendor_data),
    ] {
        let value = match given {
            Some(text) => shown(wanted, name, text),
            None => "(generated from the VM's config, as PVE generates it)".to_string(),
        };
        after.insert(format!("nocloud.{name}"), value);
    }
}

/// The final value of a `nocloud.<part>` diff key: the part the VM's config as it ended
/// generates (or the one given), as the diff shows it. Without `wanted` (a clone that took
/// a seed of its own, [`super::inherit`]) every part is generated.
pub fn observed(
    wanted: Option<&Nocloud>,
    vmid: u32,
    config: &BTreeMap<String, String>,
    key: &str,
) -> String {
    let generated = Nocloud {
        parts: super::seed::Parts::default(),
        storage: String::new(),
        show_data: false,
    };
    let Some(name) = key.strip_prefix("nocloud.") else {
        return String::new();
    };
    let wanted = wanted.unwrap_or(&generated);
    let Ok(seed) = Seed::for_vm(&wanted.parts, vmid, config) else {
        return String::new();
    };
    seed.files()
        .iter()
        .find(|(file, _)| *file == name)
        .map(|(file, content)| shown(wanted, file, content))
        .unwrap_or_default()
}

/// The `Seed` step for VM `vmid` whose config will be `config`, or `None` when it holds the
/// seed already; `before`/`after` get what the diff shows.
pub fn plan_seed(
    wanted: &Nocloud,
    vmid: u32,
    config: &BTreeMap<String, String>,
    before: &mut BTreeMap<String, String>,
    after: &mut BTreeMap<String, String>,
) -> Result<Option<SeedStep>, String> {
    let seed = Seed::for_vm(&wanted.parts, vmid, config)?;
    let file = seed.name(vmid);
    let volid = format!("{}:iso/{file}", wanted.storage);
    let mut seeds = Vec::new();
    let mut cloudinit = Vec::new();
    for (slot, value) in config {
        if !(slot.starts_with("ide") || slot.starts_with("sata") || slot.starts_with("scsi")) {
            continue;
        }
        let Ok(drive) = Drive::parse_stored_any(value) else {
            continue;
        };
        if drive.is_cloudinit() {
            cloudinit.push(slot.clone());
        } else if drive.is_cdrom() && is_seed_volume(drive.file()) {
            seeds.push((slot.clone(), drive.file().to_string()));
        }
    }
    if cloudinit.is_empty() && seeds.len() == 1 && seeds[0].1 == volid {
        return Ok(None);
    }
    let slot = seeds
        .iter()
        .map(|(slot, _)| slot.clone())
        .chain(cloudinit.iter().cloned())
        .find(|slot| !slot.starts_with("scsi"))
        .or_else(|| cdrom_slots().find(|slot| !config.contains_key(slot)))
        .ok_or_else(|| {
            format!(
                "VM {vmid} has no free IDE or SATA slot for the NoCloud seed's CD-ROM (ide0-ide3, sata0-sata5 are taken)"
            )
        })?;
    let delete: Vec<String> = seeds
        .iter()
        .map(|(slot, _)| slot.clone())
        .chain(cloudinit.iter().cloned())
        .filter(|other| *other != slot)
        .collect();
    let old_volumes: Vec<String> = seeds
        .iter()
        .map(|(_, volid)| volid.clone())
        .filter(|old| *old != volid)
        .collect();
    // The diff: the slot's drive, and each part whose content changes (secret parts shown
    // by size unless show_data).
    before.insert(slot.clone(), config.get(&slot).cloned().unwrap_or_default());
    let drive = format!("{volid},media=cdrom");
    after.insert(slot.clone(), drive.clone());
    for other in &delete {
        before.insert(other.clone(), config[other].clone());
        after.insert(other.clone(), String::new());
    }
    let old_hashes = seeds
        .first()
        .and_then(|(_, old)| old.rsplit('/').next().and_then(part_hashes));
    for (name, content) in seed.files() {
        let was = old_hashes
            .as_ref()
            .and_then(|hashes| hashes.iter().find(|(n, _)| *n == name))
            .map(|(_, hash)| hash.clone());
        if was.as_deref() == Some(part_hash(content).as_str()) {
            continue;
        }
        let key = format!("nocloud.{name}");
        before.insert(
            key.clone(),
            was.map(|hash| format!("(sha256 {hash}…)"))
                .unwrap_or_default(),
        );
        after.insert(key, shown(wanted, name, content));
    }
    let planned_on = std::iter::once(&slot)
        .chain(delete.iter())
        .map(|key| (key.clone(), config.get(key).cloned()))
        .collect();
    Ok(Some(SeedStep {
        seed,
        file,
        volid,
        storage: wanted.storage.clone(),
        slot,
        drive,
        delete,
        replaces_cloudinit: cloudinit.first().cloned(),
        old_volumes,
        parts: wanted.parts.clone(),
        planned_on,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::nocloud::seed::Parts;

    fn wanted() -> Nocloud {
        Nocloud {
            parts: Parts {
                user_data: Some("#cloud-config\npackages: [nginx]\n".into()),
                ..Parts::default()
            },
            storage: "local".into(),
            show_data: false,
        }
    }

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_new_seed_goes_in_the_first_free_slot_and_a_held_one_is_left() {
        let conf = config(&[("name", "web"), ("ide0", "none,media=cdrom")]);
        let (mut before, mut after) = (BTreeMap::new(), BTreeMap::new());
        let step = plan_seed(&wanted(), 100, &conf, &mut before, &mut after)
            .unwrap()
            .unwrap();
        assert_eq!(step.slot, "ide1");
        assert!(step.delete.is_empty() && step.old_volumes.is_empty());
        assert!(after["nocloud.user-data"].starts_with("(secret: 32 bytes"));
        assert!(!after.values().any(|v| v.contains("nginx")));
        let held = after_update(&conf, &[("ide1".into(), step.drive.clone())], &[]);
        let (mut before, mut after) = (BTreeMap::new(), BTreeMap::new());
        assert_eq!(
            plan_seed(&wanted(), 100, &held, &mut before, &mut after).unwrap(),
            None
        );
    }

    #[test]
    fn the_attach_goes_ahead_only_while_the_config_read_again_asks_for_it() {
        let conf = config(&[("name", "web"), ("memory", "1024"), ("digest", "a")]);
        let (mut before, mut after) = (BTreeMap::new(), BTreeMap::new());
        let step = plan_seed(&wanted(), 100, &conf, &mut before, &mut after)
            .unwrap()
            .unwrap();
        // This round's update and resize changed the digest and other keys: still wanted.
        let updated = config(&[("name", "web"), ("memory", "2048"), ("digest", "b")]);
        assert!(step.still_wanted(100, &updated));
        // Another run renamed the VM (the seed's hostname) or took the slot meanwhile.
        let renamed = config(&[("name", "db"), ("digest", "c")]);
        assert!(!step.still_wanted(100, &renamed));
        let taken = config(&[("name", "web"), ("ide0", "none,media=cdrom")]);
        assert!(!step.still_wanted(100, &taken));
    }

    #[test]
    fn pve_cloudinit_drive_is_replaced_and_an_old_seed_is_taken_off() {
        let conf = config(&[
            ("name", "web"),
            ("ide2", "local-lvm:vm-100-cloudinit,media=cdrom"),
            (
                "ide3",
                "local:iso/sankofa-100-0000000000111111111122222222223333333333.iso,media=cdrom",
            ),
        ]);
        let (mut before, mut after) = (BTreeMap::new(), BTreeMap::new());
        let step = plan_seed(&wanted(), 100, &conf, &mut before, &mut after)
            .unwrap()
            .unwrap();
        assert_eq!(step.slot, "ide3");
        assert_eq!(step.delete, ["ide2"]);
        assert_eq!(step.replaces_cloudinit.as_deref(), Some("ide2"));
        assert_eq!(
            step.old_volumes,
            ["local:iso/sankofa-100-0000000000111111111122222222223333333333.iso"]
        );
        assert_eq!(before["nocloud.user-data"], "(sha256 0000000000…)");
    }
}
