//! Pending changes, as qemu-server keeps them: every change to a VM's config is first written
//! to the `[PENDING]` section (API2/Qemu.pm, update_vm_api's `$updatefn`), values equal to the
//! current ones are dropped (`PVE::QemuConfig->cleanup_pending`), and then either all of it is
//! applied (a stopped VM: QemuServer.pm, `vmconfig_apply_pending`) or only what a running VM
//! can take at once (`vmconfig_hotplug_pending`); the rest waits for the next start
//! (`vm_start_nolock` applies pending changes before it starts QEMU).
//!
//! Cloud-init options are "fast plug": they reach the config at once, but the guest sees them
//! only when the cloud-init drive is regenerated, at start or by `PUT …/cloudinit`
//! (QemuServer/Cloudinit.pm; `cloudinit_pending_properties`). Until then `GET …/cloudinit`
//! lists them with their `pending` value.

use std::collections::{BTreeMap, BTreeSet};

/// QemuServer.pm `$fast_plug_option`: applied at once even to a running VM (they have no
/// effect on QEMU), together with every cloud-init option.
const FAST_PLUG: &[&str] = &[
    "description",
    "hookscript",
    "lock",
    "migrate_downtime",
    "migrate_speed",
    "name",
    "onboot",
    "protection",
    "shares",
    "startup",
    "tags",
    "vmstatestorage",
];

/// The cloud-init options (`$confdesc_cloudinit`): what the cloud-init drive is made of.
pub fn is_cloudinit_key(k: &str) -> bool {
    matches!(
        k,
        "cicustom"
            | "cipassword"
            | "citype"
            | "ciupgrade"
            | "ciuser"
            | "nameserver"
            | "searchdomain"
            | "sshkeys"
    ) || k
        .strip_prefix("ipconfig")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn fast_plug(k: &str) -> bool {
    FAST_PLUG.contains(&k) || is_cloudinit_key(k)
}

/// QemuServer.pm `parse_hotplug_features`: `0` none, `1` (and unset) the default
/// `network,disk,usb`, else the listed features.
pub fn hotplug_features(conf: &BTreeMap<String, String>) -> BTreeSet<String> {
    let v = conf.get("hotplug").map(String::as_str).unwrap_or("1");
    let v = if v == "1" { "network,disk,usb" } else { v };
    if v == "0" {
        return BTreeSet::new();
    }
    crate::tools::split_list(v).into_iter().collect()
}

fn numbered(k: &str, prefix: &str) -> bool {
    k.strip_prefix(prefix)
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A drive key (`scsi0`, `virtio1`, `ide2`, `sata0`, `efidisk0`, `tpmstate0`).
pub fn is_drive(k: &str) -> bool {
    ["scsi", "virtio", "ide", "sata", "efidisk", "tpmstate"]
        .iter()
        .any(|p| numbered(k, p))
}

/// `key=value` properties of a property string, and its first (positional) part.
fn props(v: &str) -> (String, BTreeMap<String, String>) {
    let mut parts = v.split(',');
    let first = parts.next().unwrap_or("").to_string();
    let mut m = BTreeMap::new();
    for p in parts {
        if let Some((k, v)) = p.split_once('=') {
            m.insert(k.to_string(), v.to_string());
        }
    }
    (first, m)
}

/// A net value: `virtio=BC:24:…,bridge=vmbr0` → (model, mac, the other properties).
fn net(v: &str) -> (String, String, BTreeMap<String, String>) {
    let (first, m) = props(v);
    let (model, mac) = first.split_once('=').unwrap_or((first.as_str(), ""));
    (model.to_string(), mac.to_string(), m)
}

/// `$is_usb_hotplug_supported`: the `usb` feature, QEMU 7.1+ (always here), and a guest OS
/// that handles it (Linux 2.6+, Windows after 7).
fn usb_hotplug(conf: &BTreeMap<String, String>, features: &BTreeSet<String>) -> bool {
    let os = conf.get("ostype").map(String::as_str).unwrap_or("");
    features.contains("usb") && (os == "l26" || matches!(os, "win8" | "win10" | "win11"))
}

/// Whether a running VM takes this new value of `k` at once (`vmconfig_hotplug_pending`, the
/// add/change loop, with `vmconfig_update_net` and `vmconfig_update_disk`).
fn hotplug_set(conf: &BTreeMap<String, String>, k: &str, new: &str) -> bool {
    let features = hotplug_features(conf);
    let has = |f: &str| features.contains(f);
    if fast_plug(k) {
        return true;
    }
    match k {
        "hotplug" => {
            let cur = conf.get("hotplug").map(String::as_str).unwrap_or("");
            !(new.contains("memory")
                || cur.contains("memory")
                || new.contains("cpu")
                || cur.contains("cpu"))
        }
        "tablet" => has("usb"),
        "vcpus" => has("cpu"),
        "memory" => has("memory"),
        "cpuunits" | "cpulimit" => true,
        _ if numbered(k, "usb") => usb_hotplug(conf, &features),
        // Enabling or disabling the balloon device is not hotpluggable; a new target is.
        "balloon" => {
            let enabled = |v: Option<&str>| v.is_none_or(|b| b != "0");
            enabled(conf.get("balloon").map(String::as_str)) == enabled(Some(new))
        }
        // `vmconfig_update_agent`: with an agent already configured, only
        // `fstrim_cloned_disks` may change at once; any other option waits.
        "agent" => conf.get("agent").is_some_and(|old| {
            let parse = |v: &str| {
                let (first, mut m) = props(v);
                match first.split_once('=') {
                    Some((k, v)) => m.insert(k.to_string(), v.to_string()),
                    None => m.insert("enabled".into(), first),
                };
                m.remove("fstrim_cloned_disks");
                m
            };
            parse(old) == parse(new)
        }),
        _ if numbered(k, "net") => match conf.get(k) {
            // A new NIC needs hotplug.
            None => has("network"),
            Some(old) => {
                let (om, omac, o) = net(old);
                let (nm, nmac, n) = net(new);
                let replug = om != nm
                    || omac != nmac
                    || o.get("queues") != n.get("queues")
                    || o.get("mtu") != n.get("mtu")
                    || !(o.contains_key("bridge") && n.contains_key("bridge"));
                // Bridge, tag, trunks, firewall, rate and link_down change on the tap device.
                !replug || has("network")
            }
        },
        _ if k == "efidisk0" || k == "tpmstate0" => false,
        _ if is_drive(k) => match conf.get(k) {
            None => has("disk") && !numbered(k, "ide") && !numbered(k, "sata"),
            Some(old) => {
                let (ofile, o) = props(old);
                let (nfile, n) = props(new);
                if n.get("media").map(String::as_str).unwrap_or("disk")
                    != o.get("media").map(String::as_str).unwrap_or("disk")
                {
                    return false;
                }
                if o.get("media").is_some_and(|m| m == "cdrom") {
                    return true;
                }
                if ofile != nfile {
                    return has("disk");
                }
                // Not hotpluggable on an existing disk.
                ![
                    "aio", "discard", "iothread", "queues", "product", "cache", "ssd", "vendor",
                    "ro",
                ]
                .iter()
                .any(|p| o.get(*p) != n.get(*p))
            }
        },
        _ => false,
    }
}

/// The errors vmconfig_hotplug_pending adds for what stays pending on a running VM, of the keys
/// an update gave (its `$selection`): `vmconfig_update_disk` dies "unable to change media type"
/// for a drive whose `media` changes (a CD-ROM becoming a disk or back; not `efidisk0` and
/// `tpmstate0`, which it skips first), added as `hotplug problem - …` and raised as a 400 after
/// the config is written with the change pending.
pub fn hotplug_errors<'a>(
    conf: &BTreeMap<String, String>,
    pending: &Pending,
    selection: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<String, String> {
    let media = |v: &str| {
        let (_, m) = props(v);
        m.get("media").cloned().unwrap_or_else(|| "disk".into())
    };
    selection
        .into_iter()
        .filter(|k| is_drive(k) && *k != "efidisk0" && *k != "tpmstate0")
        .filter_map(|k| {
            let (old, new) = (conf.get(k)?, pending.set.get(k)?);
            (media(old) != media(new)).then(|| {
                (
                    k.to_string(),
                    "hotplug problem - unable to change media type".to_string(),
                )
            })
        })
        .collect()
}

/// Whether a running VM drops `k` at once (`vmconfig_hotplug_pending`, the delete loop).
fn hotplug_delete(conf: &BTreeMap<String, String>, k: &str) -> bool {
    let features = hotplug_features(conf);
    let has = |f: &str| features.contains(f);
    if fast_plug(k) {
        return true;
    }
    match k {
        "hotplug" => !conf
            .get("hotplug")
            .is_some_and(|h| h.contains("cpu") || h.contains("memory")),
        "tablet" => has("usb"),
        "vcpus" => has("cpu"),
        "balloon" => conf.get("balloon").is_none_or(|b| b != "0"),
        "memory" => has("memory"),
        "cpuunits" | "cpulimit" => true,
        _ if numbered(k, "usb") => usb_hotplug(conf, &features),
        _ if numbered(k, "net") => has("network"),
        _ if is_drive(k) => {
            has("disk")
                && !["efidisk", "ide", "sata", "tpmstate"]
                    .iter()
                    .any(|p| numbered(k, p))
        }
        _ => false,
    }
}

/// A VM's config with its pending section.
#[derive(Clone, Debug, Default)]
pub struct Pending {
    /// New values not yet applied.
    pub set: BTreeMap<String, String>,
    /// Keys to delete, not yet deleted.
    pub delete: BTreeSet<String>,
    /// Those of `delete` given with `force=1`: a drive's volume is freed, not left `unusedN`
    /// (`add_to_pending_delete($conf, $opt, $force)`, printed `!key`).
    pub force: BTreeSet<String>,
    /// The config an update's last write left an empty `[PENDING]` header beside: QemuServer.pm
    /// `write_vm_config` writes the header for a pending hash with keys, and an update with only
    /// an undef `description` leaves `{description => undef}`, whose value it does not print;
    /// parse_vm_config reads that back as no pending change, and nothing writes the file again
    /// (cleanup_pending finds nothing, update_vm_api returns before applying). The next write of
    /// the config drops the header, so it stands only while the config is this one and nothing
    /// is pending.
    pub empty_header_beside: Option<BTreeMap<String, String>>,
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.delete.is_empty()
    }

    /// Queues a new value (`$conf->{pending}->{$opt} = …`, dropping a pending delete of it).
    pub fn queue_set(&mut self, k: &str, v: &str) {
        self.empty_header_beside = None;
        self.delete.remove(k);
        self.force.remove(k);
        self.set.insert(k.to_string(), v.to_string());
    }

    /// Queues a delete (`add_to_pending_delete`, dropping a pending value of it).
    pub fn queue_delete(&mut self, k: &str) {
        self.empty_header_beside = None;
        self.set.remove(k);
        self.force.remove(k);
        self.delete.insert(k.to_string());
    }

    /// Queues a forced delete (`force=1`).
    pub fn queue_force_delete(&mut self, k: &str) {
        self.queue_delete(k);
        self.force.insert(k.to_string());
    }

    /// `cleanup_pending`: a pending value equal to the current one, or a pending delete of a
    /// key the config does not have, is no change.
    pub fn cleanup(&mut self, conf: &BTreeMap<String, String>) {
        self.set.retain(|k, v| conf.get(k) != Some(v));
        self.delete.retain(|k| conf.contains_key(k));
        let delete = &self.delete;
        self.force.retain(|k| delete.contains(k));
    }

    /// What applies now: everything for a stopped VM, what hotplugs for a running one. Returns
    /// (sets, deletes) to apply, leaving the rest pending.
    pub fn take_applicable(
        &mut self,
        conf: &BTreeMap<String, String>,
        running: bool,
    ) -> (Vec<(String, String)>, Vec<String>) {
        let deletes: Vec<String> = self
            .delete
            .iter()
            .filter(|k| !running || hotplug_delete(conf, k))
            .cloned()
            .collect();
        let sets: Vec<(String, String)> = self
            .set
            .iter()
            .filter(|(k, v)| !running || hotplug_set(conf, k, v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for k in &deletes {
            self.delete.remove(k);
        }
        for (k, _) in &sets {
            self.set.remove(k);
        }
        (sets, deletes)
    }

    /// `GET …/config` without `current=1`: the config with the pending values applied.
    pub fn overlay(&self, conf: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut out = conf.clone();
        for k in &self.delete {
            out.remove(k);
        }
        for (k, v) in &self.set {
            out.insert(k.clone(), v.clone());
        }
        out
    }

    /// The `[PENDING]` section as the config file has it beside `conf` (part of the digest),
    /// an empty header where [`Pending::empty_header_beside`] says the last write left one.
    pub fn section(&self, conf: &BTreeMap<String, String>) -> String {
        if self.is_empty() {
            return match &self.empty_header_beside {
                Some(left_beside) if left_beside == conf => "\n[PENDING]\n".into(),
                _ => String::new(),
            };
        }
        // write_vm_config prints the pending hash as any other, `delete` among the keys in
        // sorted order (`boot` before it, `memory` after).
        let mut lines: BTreeMap<&str, String> = self
            .set
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        if !self.delete.is_empty() {
            let d: Vec<String> = self
                .delete
                .iter()
                .map(|k| {
                    if self.force.contains(k) {
                        format!("!{k}")
                    } else {
                        k.clone()
                    }
                })
                .collect();
            lines.insert("delete", d.join(","));
        }
        let mut s = String::from("\n[PENDING]\n");
        for (k, v) in lines {
            s.push_str(&format!("{k}: {v}\n"));
        }
        s
    }
}

/// What the cloud-init drive was generated from, as far as it differs from the config: the
/// `[special:cloudinit]` section (QemuServer.pm, `$cloudinit_record_changed` in
/// `vmconfig_hotplug_pending`): the old value of each changed option, and the options added
/// since. Cleared when the drive is regenerated (start, `PUT …/cloudinit`).
#[derive(Clone, Debug, Default)]
pub struct CloudInitState {
    pub recorded: BTreeMap<String, String>,
    pub added: BTreeSet<String>,
    /// Whether the config file has the section: vmconfig_hotplug_pending makes it
    /// (`$conf->{'special-sections'}->{cloudinit} //= {}`) for a cloud-init option applied to
    /// a running VM, even when nothing differs; vmconfig_apply_pending (a stopped VM) never
    /// does, so what pve-sim records there is only in `GET …/cloudinit`.
    pub in_file: bool,
}

impl CloudInitState {
    /// Records a change of `key` from `old` to `new` (`None`: unset), as qemu-server does.
    pub fn record(&mut self, key: &str, old: Option<&str>, new: Option<&str>) {
        if !is_cloudinit_key(key) {
            return;
        }
        let recorded = self.recorded.get(key).cloned();
        let added = self.added.contains(key);
        match (new, old) {
            (Some(new), _) if recorded.as_deref() == Some(new) => {
                // Reverted to what the drive holds.
                self.recorded.remove(key);
                self.added.remove(key);
            }
            (Some(_), _) if recorded.is_some() || added => {}
            (Some(_), Some(old)) => {
                self.recorded.insert(key.to_string(), old.to_string());
            }
            (Some(_), None) => {
                self.added.insert(key.to_string());
            }
            (None, None) => {}
            (None, Some(_)) if recorded.is_some() => {}
            (None, Some(_)) if added => {
                self.added.remove(key);
            }
            (None, Some(old)) => {
                self.recorded.insert(key.to_string(), old.to_string());
            }
        }
    }

    /// The drive was regenerated from the current config (Cloudinit.pm
    /// `apply_cloudinit_config` deletes the section).
    pub fn regenerated(&mut self) {
        self.recorded.clear();
        self.added.clear();
        self.in_file = false;
    }

    /// The `[special:cloudinit]` section as QemuServer.pm `write_vm_config` writes it beside
    /// `conf`: only where the section exists and the VM has a cloud-init drive
    /// (`has_cloudinit`), the recorded old values and `added` (a sorted list) as sorted
    /// `key: value` lines.
    pub fn section(&self, conf: &BTreeMap<String, String>) -> String {
        let has_drive = conf
            .iter()
            .any(|(k, v)| is_drive(k) && v.split(',').next().unwrap_or("").contains("cloudinit"));
        if !self.in_file || !has_drive {
            return String::new();
        }
        let mut lines: BTreeMap<&str, String> = self
            .recorded
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        if !self.added.is_empty() {
            let added: Vec<&str> = self.added.iter().map(String::as_str).collect();
            lines.insert("added", added.join(","));
        }
        let mut s = String::from("\n[special:cloudinit]\n");
        for (k, v) in lines {
            s.push_str(&format!("{k}: {v}\n"));
        }
        s
    }

    /// `GET …/cloudinit` (API2/Qemu.pm, cloudinit_pending): each option with the value the
    /// drive holds and, when it differs, the pending one; added options with only `pending`;
    /// removed ones with `delete: 1`. `cipassword` is masked.
    pub fn listing(&self, conf: &BTreeMap<String, String>) -> Vec<serde_json::Value> {
        use serde_json::json;
        let mask = |k: &str, v: &str| {
            if k == "cipassword" {
                "**********".to_string()
            } else {
                v.to_string()
            }
        };
        let mut out = Vec::new();
        for k in &self.added {
            if let Some(v) = conf.get(k) {
                out.push(json!({"key": k, "pending": mask(k, v)}));
            }
        }
        for (k, v) in conf {
            if !is_cloudinit_key(k) || v.is_empty() || self.added.contains(k) {
                continue;
            }
            match self.recorded.get(k) {
                Some(old) => {
                    out.push(json!({"key": k, "value": mask(k, old), "pending": mask(k, v)}))
                }
                None => out.push(json!({"key": k, "value": mask(k, v)})),
            }
        }
        for k in self.recorded.keys() {
            if !conf.contains_key(k) {
                out.push(json!({"key": k, "delete": 1}));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_running_vm_takes_what_hotplugs_and_keeps_the_rest_pending() {
        let c = conf(&[
            ("cores", "1"),
            ("memory", "1024"),
            ("name", "a"),
            ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
            ("scsi0", "local-lvm:vm-100-disk-0,size=1G"),
            ("ciuser", "old"),
        ]);
        let mut p = Pending::default();
        for (k, v) in [
            ("cores", "2"),
            ("memory", "2048"),
            ("name", "b"),
            ("ciuser", "new"),
            ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr1,tag=5"),
            ("scsi0", "local-lvm:vm-100-disk-0,size=1G,cache=writeback"),
            ("scsi1", "local-lvm:vm-100-disk-1,size=1G"),
            ("onboot", "1"),
        ] {
            p.queue_set(k, v);
        }
        p.cleanup(&c);
        let (sets, _) = p.take_applicable(&c, true);
        let applied: Vec<&str> = sets.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(applied, ["ciuser", "name", "net0", "onboot", "scsi1"]);
        let left: Vec<&str> = p.set.keys().map(String::as_str).collect();
        assert_eq!(left, ["cores", "memory", "scsi0"]);
        // With memory and cpu hotplug, memory applies; cores never do.
        let mut c2 = c.clone();
        c2.insert("hotplug".into(), "network,disk,cpu,memory".into());
        let (sets, _) = p.take_applicable(&c2, true);
        assert_eq!(sets, vec![("memory".to_string(), "2048".to_string())]);
        // A stopped VM takes everything.
        let (sets, _) = p.take_applicable(&c, false);
        assert_eq!(sets.len(), 2);
        assert!(p.is_empty());
    }

    #[test]
    fn cloud_init_changes_are_pending_until_the_drive_is_regenerated() {
        let mut ci = CloudInitState::default();
        let mut c = conf(&[("ciuser", "old"), ("cores", "1")]);
        ci.record("ciuser", Some("old"), Some("new"));
        ci.record("cores", Some("1"), Some("2"));
        ci.record("sshkeys", None, Some("ssh-ed25519%20AAAA"));
        c.insert("ciuser".into(), "new".into());
        c.insert("sshkeys".into(), "ssh-ed25519%20AAAA".into());
        let l = ci.listing(&c);
        assert!(
            l.contains(&serde_json::json!({"key": "ciuser", "value": "old", "pending": "new"}))
        );
        assert!(
            l.contains(&serde_json::json!({"key": "sshkeys", "pending": "ssh-ed25519%20AAAA"}))
        );
        assert_eq!(l.len(), 2);
        // Back to what the drive holds: nothing pending.
        ci.record("ciuser", Some("new"), Some("old"));
        assert!(!ci.recorded.contains_key("ciuser"));
        ci.regenerated();
        assert!(ci.listing(&c).iter().all(|i| i.get("pending").is_none()));
    }

    #[test]
    fn unchanged_values_are_no_pending_change() {
        let c = conf(&[("cores", "1")]);
        let mut p = Pending::default();
        p.queue_set("cores", "1");
        p.queue_delete("sockets");
        p.cleanup(&c);
        assert!(p.is_empty());
    }

    #[test]
    fn only_fstrim_of_the_agent_hotplugs() {
        let c = conf(&[("agent", "1")]);
        assert!(hotplug_set(&c, "agent", "enabled=1,fstrim_cloned_disks=1"));
        assert!(!hotplug_set(&c, "agent", "1,type=isa"));
        assert!(!hotplug_set(&c, "agent", "0"));
        assert!(!hotplug_set(&conf(&[]), "agent", "1"));
    }

    #[test]
    fn a_nic_model_change_needs_network_hotplug() {
        let mut c = conf(&[("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0")]);
        let new = "e1000=BC:24:11:00:00:01,bridge=vmbr0";
        assert!(hotplug_set(&c, "net0", new));
        c.insert("hotplug".into(), "disk".into());
        assert!(!hotplug_set(&c, "net0", new));
        assert!(hotplug_set(
            &c,
            "net0",
            "virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=7"
        ));
    }
}
