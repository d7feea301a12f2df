//! The EFI vars disk (`efidisk0`) and the TPM state (`tpmstate0`) of an existing VM, planned
//! in plain data: added when missing, allocated as at create (qemu-server API2/Qemu.pm
//! `create_disks`: `OVMF::create_efidisk`, a TPM state of `TPMSTATE_DISK_SIZE`); on a
//! running VM PVE keeps the add pending until the next start (QemuServer.pm
//! `vmconfig_hotplug_pending` skips both). PVE changes neither in place (`prohibit_tpm_version_change`;
//! another `efitype` means other OVMF vars), so another `efitype`, `pre_enrolled_keys` or TPM
//! `version` is refused before any write, unless `force: true` asks to recreate it: the old
//! drive is detached (PVE keeps its volume as an `unusedN` disk) and a new one is added.

use std::collections::BTreeMap;

use super::desired::Desired;
use crate::pve::values::Drive;

/// The VM as the plan read it: its id, its config (`GET …/config`), whether it runs.
pub struct Existing<'a> {
    pub vmid: u32,
    pub config: &'a BTreeMap<String, String>,
    pub running: bool,
}

/// Recreating a drive whose properties differ (`force: true`): what the plan's `Recreate`
/// step does, two updates (the old drive deleted, then the new one added).
#[derive(Clone, Debug, PartialEq)]
pub struct Recreate {
    /// `efidisk0` or `tpmstate0`.
    pub slot: String,
    /// The drive as the VM has it.
    pub was: String,
    /// The new drive's value (`local-lvm:1,efitype=4m,pre-enrolled-keys=1`).
    pub value: String,
    /// The properties that differ (`efitype=2m → 4m`).
    pub differs: Vec<String>,
    /// Whether the VM runs: then the change waits for its next start.
    pub running: bool,
}

impl Recreate {
    /// A short description for messages.
    pub fn describe(&self) -> String {
        format!(
            "recreate {} ({}; the old volume kept as an unused disk)",
            self.slot,
            self.differs.join(", ")
        )
    }
}

/// What recreating `slot` loses, for the refusal.
fn what_is_lost(slot: &str) -> &'static str {
    if slot == "tpmstate0" {
        "it would reset the TPM state (the keys and secrets the guest sealed in its TPM, such as BitLocker's)"
    } else {
        "it would reset the NVRAM (the EFI variables: boot entries and Secure Boot keys)"
    }
}

/// The option that gives `slot`.
fn option_of(slot: &str) -> &'static str {
    if slot == "tpmstate0" {
        "tpmstate"
    } else {
        "efidisk"
    }
}

/// True when `left` and `right` are one value of a drive option (`pre-enrolled-keys=1` and `on`).
fn drive_value_eq(slot: &str, key: &str, left: &str, right: &str) -> bool {
    let read = |value: &str| {
        let mut drive = Drive::new(slot, "none").ok()?;
        drive.set(key, value).ok()?;
        drive.get(key).map(str::to_string)
    };
    left == right
        || read(left).is_some_and(|left_value| read(right).as_deref() == Some(left_value.as_str()))
}

/// Plans `efidisk0` and `tpmstate0` of the existing VM `cur`: a missing one added (in `set`),
/// a differing one refused, or with `force: true` recreated (returned as steps). `before`,
/// `after` get what the diff shows; `notes` what the result warns of.
pub fn plan_fixed(
    desired: &Desired,
    cur: Existing,
    set: &mut Vec<(String, String)>,
    before: &mut BTreeMap<String, String>,
    after: &mut BTreeMap<String, String>,
    notes: &mut Vec<String>,
) -> Result<Vec<Recreate>, String> {
    let mut recreate = Vec::new();
    for (slot, props) in &desired.fixed {
        let value = desired.create_only.get(slot).cloned().unwrap_or_default();
        let Some(have) = cur.config.get(slot) else {
            before.insert(slot.clone(), String::new());
            after.insert(slot.clone(), value.clone());
            set.push((slot.clone(), value));
            if cur.running && cur.config.get("template").is_none_or(|t| t != "1") {
                notes.push(format!(
                    "{slot} is added to the running VM {} as a pending change: PVE attaches it only when the VM starts, so it takes effect at the next restart (restart it, or set restart: when_needed)",
                    cur.vmid
                ));
            }
            continue;
        };
        let drive = Drive::parse_stored(slot, have).map_err(|err| {
            format!(
                "VM {} has {slot}: {have}, which is not a drive PVE reads ({err})",
                cur.vmid
            )
        })?;
        let differing: Vec<(&str, &str, &str)> = props
            .iter()
            .map(|(key, want)| {
                let now = drive.get_or_default(key).unwrap_or_default();
                (key.as_str(), now, want.as_str())
            })
            .filter(|(key, now, want)| !drive_value_eq(slot, key, now, want))
            .collect();
        let Some(&(key, now, want)) = differing.first() else {
            continue;
        };
        let differs: Vec<String> = differing
            .iter()
            .map(|(key, now, want)| format!("{key}={now} → {want}"))
            .collect();
        if !desired.recreate.contains(slot) {
            let option = option_of(slot);
            return Err(format!(
                "VM {} has {slot} with {key}={now}, not {want}: PVE cannot change it in place, and recreating it {}; refused. To recreate it, give {option}.force: true (the old {slot} is detached and kept as an unused disk, and a new one added), or keep the VM's {key}",
                cur.vmid,
                what_is_lost(slot)
            ));
        }
        before.insert(slot.clone(), have.clone());
        after.insert(slot.clone(), value.clone());
        notes.push(format!(
            "{slot} of VM {} is recreated ({}, {option}.force: true): {}; the old volume stays as an unused disk{}",
            cur.vmid,
            differs.join(", "),
            what_is_lost(slot).replacen("it would reset", "this resets", 1),
            if cur.running {
                ", and the new one takes effect at the VM's next start"
            } else {
                ""
            },
            option = option_of(slot),
        ));
        recreate.push(Recreate {
            slot: slot.clone(),
            was: have.clone(),
            value,
            differs,
            running: cur.running,
        });
    }
    Ok(recreate)
}

/// Refuses, before a clone of VM `source` (its `config`) is made, an `efidisk` or `tpmstate`
/// the clone's own plan would refuse: the clone has its source's, and the run would fail once
/// it exists. With `force: true` the clone's plan recreates it.
pub fn check_clone_source(
    desired: &Desired,
    source: u32,
    config: &BTreeMap<String, String>,
) -> Result<(), String> {
    let source_vm = Existing {
        vmid: source,
        config,
        running: false,
    };
    let (mut set, mut notes) = (Vec::new(), Vec::new());
    let (mut before, mut after) = (BTreeMap::new(), BTreeMap::new());
    plan_fixed(
        desired,
        source_vm,
        &mut set,
        &mut before,
        &mut after,
        &mut notes,
    )
    .map(drop)
    .map_err(|e| format!("the clone would have the EFI disk or TPM state of its source: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ansible::protocol::Invocation;
    use crate::ansible::spec::{Env, validate};
    use serde_json::{Value, json};

    struct NoEnv;

    impl Env for NoEnv {
        fn get(&self, _: &str) -> Option<String> {
            None
        }
    }

    fn desired(options: Value) -> Desired {
        let mut raw = options.as_object().cloned().unwrap();
        for (key, value) in [
            ("vmid", json!(100)),
            ("node", json!("pve1")),
            ("bios", json!("ovmf")),
            ("api_host", json!("pve.example")),
            ("api_password", json!("secret")),
        ] {
            raw.insert(key.into(), value);
        }
        let params = validate(&crate::vm::spec::argument_spec(), &raw, &NoEnv, false).unwrap();
        crate::vm::desired::desired(&Invocation {
            ctx: Default::default(),
            params,
        })
        .unwrap()
    }

    fn current(pairs: &[(&str, &str)], running: bool) -> (BTreeMap<String, String>, bool) {
        (
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            running,
        )
    }

    type Planned = (Vec<(String, String)>, Vec<Recreate>, Vec<String>);

    fn planned(
        desired: &Desired,
        (config, running): &(BTreeMap<String, String>, bool),
    ) -> Result<Planned, String> {
        let (mut set, mut notes) = (Vec::new(), Vec::new());
        let (mut before, mut after) = (BTreeMap::new(), BTreeMap::new());
        let cur = Existing {
            vmid: 100,
            config,
            running: *running,
        };
        let recreate = plan_fixed(desired, cur, &mut set, &mut before, &mut after, &mut notes)?;
        Ok((set, recreate, notes))
    }

    #[test]
    fn missing_ones_are_added_as_at_create_pending_on_a_running_vm() {
        let wanted = desired(json!({
            "efidisk": {"storage": "local-lvm", "pre_enrolled_keys": true},
            "tpmstate": {"storage": "local-lvm"}
        }));
        let (set, recreate, notes) = planned(&wanted, &current(&[], false)).unwrap();
        assert_eq!(
            set,
            [
                (
                    "efidisk0".to_string(),
                    "local-lvm:1,efitype=4m,pre-enrolled-keys=1".to_string()
                ),
                (
                    "tpmstate0".to_string(),
                    "local-lvm:1,version=v2.0".to_string()
                ),
            ]
        );
        assert!(recreate.is_empty() && notes.is_empty());
        let (_, _, notes) = planned(&wanted, &current(&[], true)).unwrap();
        assert!(
            notes[0].contains("efidisk0 is added to the running VM 100 as a pending change"),
            "{notes:?}"
        );
    }

    #[test]
    fn another_type_is_refused_naming_why_and_how_unless_forced() {
        let have = [
            ("efidisk0", "local-lvm:vm-100-disk-1,efitype=2m,size=128K"),
            ("tpmstate0", "local-lvm:vm-100-disk-2,size=4M,version=v1.2"),
        ];
        let efi = json!({"storage": "local-lvm", "pre_enrolled_keys": false});
        let err = planned(&desired(json!({"efidisk": efi})), &current(&have, false)).unwrap_err();
        assert!(
            err.contains("efidisk0 with efitype=2m, not 4m")
                && err.contains("reset the NVRAM")
                && err.contains("efidisk.force: true"),
            "{err}"
        );
        let err = planned(
            &desired(json!({"tpmstate": {"storage": "local-lvm"}})),
            &current(&have, false),
        )
        .unwrap_err();
        assert!(
            err.contains("tpmstate0 with version=v1.2, not v2.0")
                && err.contains("reset the TPM state")
                && err.contains("tpmstate.force: true"),
            "{err}"
        );
        let mut forced = efi.clone();
        forced["force"] = json!(true);
        let (set, recreate, notes) =
            planned(&desired(json!({"efidisk": forced})), &current(&have, true)).unwrap();
        assert!(set.is_empty());
        assert_eq!(recreate.len(), 1);
        assert_eq!(recreate[0].slot, "efidisk0");
        assert_eq!(
            recreate[0].value,
            "local-lvm:1,efitype=4m,pre-enrolled-keys=0"
        );
        assert_eq!(recreate[0].differs, ["efitype=2m → 4m"]);
        assert!(recreate[0].running);
        assert!(notes[0].contains("next start"), "{notes:?}");
        // The same type: nothing, force or not.
        let same = [("efidisk0", "local-lvm:vm-100-disk-1,efitype=4m,size=528K")];
        let (set, recreate, _) =
            planned(&desired(json!({"efidisk": forced})), &current(&same, false)).unwrap();
        assert!(set.is_empty() && recreate.is_empty());
    }
}
