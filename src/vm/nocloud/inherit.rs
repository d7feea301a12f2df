//! A clone run without `nocloud`: PVE's clone copies its source's CD-ROMs, so the clone
//! would boot with its source's seed (the source's hostname, instance-id and MACs). The seed
//! a clone holds names the VM it was made for (`sankofa-<vmid>-…`); when that is another VM
//! and every part of that seed is one the module generates from the source's config (no part
//! was given), the clone gets its own seed, generated from its own config. A part given to
//! the source cannot be read back over PVE's API (an ISO volume has no download), so then
//! the run is refused, naming the parts, and asks for `nocloud` on the clone.

use std::collections::BTreeMap;

use anyhow::{Context, anyhow};

use super::seed::{Parts, Seed, is_seed_volume, part_hashes};
use super::wanted::Nocloud;
use crate::pve::api::cluster;
use crate::pve::api::qemu::{self, Vm};
use crate::pve::values::Drive;
use crate::vm::plan::Current;
use crate::vm::shell::Runner;

/// The first seed CD-ROM of a config: (slot, volume).
pub fn held_seed(config: &BTreeMap<String, String>) -> Option<(String, String)> {
    config.iter().find_map(|(slot, value)| {
        if !(slot.starts_with("ide") || slot.starts_with("sata") || slot.starts_with("scsi")) {
            return None;
        }
        let drive = Drive::parse_stored_any(value).ok()?;
        (drive.is_cdrom() && is_seed_volume(drive.file()))
            .then(|| (slot.clone(), drive.file().to_string()))
    })
}

/// The VM a seed volume was made for (`local:iso/sankofa-<vmid>-….iso`).
pub fn seed_owner(volid: &str) -> Option<u32> {
    let file = volid.split_once(":iso/")?.1;
    file.strip_prefix(super::seed::NAME_PREFIX)?
        .split_once('-')?
        .0
        .parse()
        .ok()
}

/// The `nocloud` a clone of VM `owner` (whose config is `owner_config`) takes for the seed
/// `volid` it holds: every part generated, on the seed's storage; or the parts given to the
/// owner, which the module cannot read back.
pub fn regenerated(
    volid: &str,
    owner: u32,
    owner_config: &BTreeMap<String, String>,
) -> Result<Nocloud, Vec<&'static str>> {
    let file = volid.rsplit('/').next().unwrap_or_default();
    let held = part_hashes(file).unwrap_or_default();
    let generated = Seed::for_vm(&Parts::default(), owner, owner_config)
        .map(|seed| seed.name(owner))
        .ok()
        .and_then(|name| part_hashes(&name))
        .unwrap_or_default();
    let given: Vec<&'static str> = held
        .iter()
        .filter(|(name, hash)| {
            !generated
                .iter()
                .any(|(other, mine)| other == name && mine == hash)
        })
        .map(|(name, _)| *name)
        .collect();
    // meta-data's instance-id hashes user-data and network-config: it differs whenever
    // one of them was given, and then is not named.
    let given: Vec<&'static str> = if given
        .iter()
        .any(|name| matches!(*name, "user-data" | "network-config"))
    {
        given
            .into_iter()
            .filter(|name| *name != "meta-data")
            .collect()
    } else {
        given
    };
    if !given.is_empty() || held.is_empty() {
        return Err(if given.is_empty() {
            vec!["user-data"]
        } else {
            given
        });
    }
    Ok(Nocloud {
        parts: Parts::default(),
        storage: volid
            .split_once(':')
            .map(|(s, _)| s)
            .unwrap_or("local")
            .into(),
        show_data: false,
    })
}

impl Runner<'_> {
    /// The `nocloud` a VM run without the option takes: for a clone that holds the seed of
    /// another VM (its source), a seed of its own, generated; `None` for any other VM (a
    /// template keeps its seed, a VM keeps its own).
    pub(in crate::vm) fn inherited_nocloud(
        &self,
        cur: &Current,
    ) -> anyhow::Result<Option<Nocloud>> {
        if self.desired.nocloud.is_some() || cur.is_template() {
            return Ok(None);
        }
        let Some((_, volid)) = held_seed(&cur.config) else {
            return Ok(None);
        };
        if seed_owner(&volid) == Some(cur.vmid) {
            return Ok(None);
        }
        let id = format!("VM {} on {}", cur.vmid, cur.node);
        self.regenerable(&id, &volid, None).map(Some)
    }

    /// For a VM that exists when the run starts: a clone's copy of another VM's seed is left
    /// as it is (a clone made by an older release, or outside the module, may have booted with
    /// it; a new seed would make cloud-init run its per-instance modules again), and told.
    pub(in crate::vm) fn foreign_seed_note(&self, cur: &Current) -> Option<String> {
        if self.desired.nocloud.is_some() || cur.is_template() {
            return None;
        }
        let (_, volid) = held_seed(&cur.config)?;
        let owner = seed_owner(&volid).filter(|owner| *owner != cur.vmid)?;
        Some(format!(
            "VM {} on {} holds VM {owner}'s NoCloud seed {volid} (a clone's copy), so its guest gets VM {owner}'s hostname and instance-id; it was left (give nocloud: {{}} to give it a seed of its own)",
            cur.vmid, cur.node
        ))
    }

    /// Before a clone made without `nocloud`: the seed its source holds can be generated
    /// again for the clone, else the run is refused before the clone is made.
    pub(in crate::vm) fn check_clone_seed(&self) -> anyhow::Result<()> {
        let Some(source) = self
            .desired
            .clone
            .as_ref()
            .filter(|_| self.desired.nocloud.is_none())
        else {
            return Ok(());
        };
        let (src, src_node, _) = self.clone_source(source)?;
        let Some(config) = self.config_of(src, &src_node)? else {
            return Ok(());
        };
        let config = config.strings();
        match held_seed(&config) {
            Some((_, volid)) => self
                .regenerable(
                    &format!("the clone's source VM {src} on {src_node}"),
                    &volid,
                    Some((src, &config)),
                )
                .map(drop),
            None => Ok(()),
        }
    }

    /// The `nocloud` that generates a seed like `volid` for another VM; `holder` names who
    /// holds it, for the refusal; `known`, a VM whose config was read already (the seed's
    /// owner is then not read again).
    fn regenerable(
        &self,
        holder: &str,
        volid: &str,
        known: Option<(u32, &BTreeMap<String, String>)>,
    ) -> anyhow::Result<Nocloud> {
        let owner = seed_owner(volid).unwrap_or_default();
        let client = &self.session.client;
        let doing = format!("reading VM {owner}, whose NoCloud seed {volid} {holder} holds");
        let owner_config = match known.filter(|(vmid, _)| *vmid == owner) {
            Some((_, config)) => Some(config.clone()),
            None => {
                let listed = cluster::vms(client).with_context(|| doing.clone())?;
                match listed.iter().find(|vm| vm.vmid == owner) {
                    Some(vm) => qemu::config(client, &Vm::new(&vm.node, owner))
                        .with_context(|| doing.clone())?
                        .map(|config| config.strings()),
                    None => None,
                }
            }
        };
        let refuse = |why: String| {
            anyhow!(
                "{holder} holds the NoCloud seed of VM {owner} ({volid}), {why}: give the clone \
                 the nocloud option (the same parts as VM {owner}), so it gets a seed of its \
                 own, with its own hostname and instance-id"
            )
        };
        let Some(owner_config) = owner_config else {
            return Err(refuse(format!(
                "and VM {owner} is gone, so which of its parts were given cannot be told"
            )));
        };
        regenerated(volid, owner, &owner_config).map_err(|given| {
            refuse(format!(
                "whose {} was given to VM {owner} and cannot be read back over PVE's API",
                given.join(", ")
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_generated_seed_is_regenerated_and_a_given_part_is_named() {
        let template = config(&[
            ("name", "base"),
            ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
            ("ipconfig0", "ip=dhcp"),
        ]);
        let generated = Seed::for_vm(&Parts::default(), 9000, &template).unwrap();
        let volid = format!("local:iso/{}", generated.name(9000));
        assert_eq!(seed_owner(&volid), Some(9000));
        let wanted = regenerated(&volid, 9000, &template).unwrap();
        assert_eq!(wanted.parts, Parts::default());
        assert_eq!(wanted.storage, "local");

        let parts = Parts {
            user_data: Some("#cloud-config\npackages: [nginx]\n".into()),
            ..Parts::default()
        };
        let given = Seed::for_vm(&parts, 9000, &template).unwrap();
        let volid = format!("local:iso/{}", given.name(9000));
        assert_eq!(
            regenerated(&volid, 9000, &template).unwrap_err(),
            ["user-data"]
        );
        let with_cdrom = config(&[("ide0", &format!("{volid},media=cdrom"))]);
        assert_eq!(held_seed(&with_cdrom), Some(("ide0".into(), volid)));
    }
}
