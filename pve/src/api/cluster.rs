//! The cluster (pve-manager API2/Cluster.pm): its guests, a free vmid, and datacenter.cfg's
//! `next-id` range that free vmids come from.

use crate::answers::{Resource, VmResource, Vmid, lenient_list};
use crate::client::{Client, Params};
use crate::error::ApiError;
use crate::ops;
use crate::paths;

/// A VM as the cluster lists it. Its `name` comes from pvestatd and lags up to 10 s behind
/// the config (pve-manager API2Tools.pm, extract_vm_stats), as does its power state; its
/// lock is read from the config at once (API2/Cluster.pm, resources,
/// `get_guest_config_properties`), so a create in flight shows as one at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedVm {
    pub vmid: Vmid,
    pub node: String,
    /// Empty when pvestatd has not seen one yet.
    pub name: String,
    /// `lock: create` or `lock: clone`: a create or a clone (or a killed one's leftover)
    /// holds the VM; until its end its config has no name (qemu-server API2/Qemu.pm
    /// create_vm writes the name last; clone_vm's temporary config is `lock: clone` alone,
    /// and the name comes with its first copied disk).
    pub creating: bool,
    /// `lock: clone`: the holder is a clone, whose task (`qmclone`) carries its source's
    /// id, not this VM's: only the clone's log names this one.
    pub cloning: bool,
}

impl ListedVm {
    /// The type of the task that the VM's lock says holds it: `qmcreate` (`lock: create`),
    /// `qmclone` (`lock: clone`), or none.
    pub fn holder(&self) -> Option<&'static str> {
        match (self.creating, self.cloning) {
            (false, _) => None,
            (true, false) => Some("qmcreate"),
            (true, true) => Some("qmclone"),
        }
    }

    /// Whether the listing shows no name of the VM's own: none yet (pvestatd has not seen the
    /// VM), or the `VM <vmid>` that qemu-server's vmstatus gives a VM whose config has none (a
    /// create in flight once pvestatd has seen it: its name is written at its end).
    pub fn unnamed(&self) -> bool {
        self.name.is_empty() || self.name == format!("VM {}", self.vmid)
    }
}

/// The cluster's guests as `/cluster/resources?type=vm` lists them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Its QEMU VMs.
    pub vms: Vec<ListedVm>,
    /// The ids of every guest listed, containers too: ids a new VM cannot take.
    pub guest_ids: Vec<Vmid>,
}

/// `GET /cluster/resources?type=vm`: its QEMU VMs and every guest's id (a read).
pub fn listing(client: &Client) -> Result<Listing, ApiError> {
    let params: Params = vec![("type".into(), "vm".into())];
    let answer = ops::read(client, paths::CLUSTER_RESOURCES, &params)?;
    let mut listing = Listing::default();
    for resource in lenient_list::<Resource>(answer) {
        listing.guest_ids.push(resource.vmid);
        if resource.kind == "qemu" {
            listing.vms.push(ListedVm {
                vmid: resource.vmid,
                node: resource.node,
                name: resource.name.unwrap_or_default(),
                creating: matches!(resource.lock.as_deref(), Some("create" | "clone")),
                cloning: resource.lock.as_deref() == Some("clone"),
            });
        }
    }
    Ok(listing)
}

/// `GET /cluster/resources?type=vm`, its QEMU VMs (a read).
pub fn vms(client: &Client) -> Result<Vec<ListedVm>, ApiError> {
    listing(client).map(|listing| listing.vms)
}

/// datacenter.cfg's `next-id` (pve-cluster DataCenterConfig.pm, `$next_id_format`): the
/// range `/cluster/nextid` takes free ids from, `lower` inclusive, `upper` exclusive. An
/// id outside it may still be given to a create; the range is the cluster's admins' choice
/// of where automatic ids go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NextIdRange {
    pub lower: Vmid,
    pub upper: Vmid,
}

impl Default for NextIdRange {
    /// PVE's defaults: 100 and 1,000,000 ("lower than the maximum on purpose").
    fn default() -> NextIdRange {
        NextIdRange {
            lower: 100,
            upper: 1_000_000,
        }
    }
}

impl NextIdRange {
    /// The range in `GET /cluster/options`'s answer (datacenter.cfg parsed: `next-id` as an
    /// object of its keys, each a number or a string; a property string is read too); a
    /// key not set keeps PVE's default.
    pub fn from_options(answer: &serde_json::Value) -> NextIdRange {
        let mut range = NextIdRange::default();
        let number = |value: &serde_json::Value| -> Option<Vmid> {
            match value {
                serde_json::Value::Number(n) => n.as_u64().and_then(|n| Vmid::try_from(n).ok()),
                serde_json::Value::String(text) => text.trim().parse().ok(),
                _ => None,
            }
        };
        let keys: Vec<(String, serde_json::Value)> = match &answer["next-id"] {
            serde_json::Value::Object(keys) => keys
                .iter()
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
            serde_json::Value::String(text) => text
                .split(',')
                .filter_map(|part| part.split_once('='))
                .map(|(key, value)| (key.trim().to_string(), serde_json::json!(value)))
                .collect(),
            _ => Vec::new(),
        };
        for (key, value) in keys {
            match (key.as_str(), number(&value)) {
                ("lower", Some(lower)) => range.lower = lower,
                ("upper", Some(upper)) => range.upper = upper,
                _ => {}
            }
        }
        range
    }

    /// The range a `GET /cluster/options` answer tells: its `next-id`, or PVE's default where
    /// the answer shows datacenter.cfg whole (a key beyond the `console`, `tag-style` and
    /// `allowed-tags` every caller is shown) and sets none; `None` where it cannot tell (the
    /// caller may lack `Sys.Audit` on `/`, and PVE left `next-id` out).
    pub fn shown_in(answer: &serde_json::Value) -> Option<NextIdRange> {
        if answer.get("next-id").is_some() {
            return Some(NextIdRange::from_options(answer));
        }
        let whole = answer.as_object().is_some_and(|keys| {
            keys.keys()
                .any(|key| !matches!(key.as_str(), "console" | "tag-style" | "allowed-tags"))
        });
        whole.then(NextIdRange::default)
    }

    /// The lowest id of the range that none of `taken` has, as `/cluster/nextid` answers for
    /// a user who sees every guest; `None` when every one is taken.
    pub fn lowest_free(&self, taken: &[Vmid]) -> Option<Vmid> {
        let taken: std::collections::BTreeSet<Vmid> = taken.iter().copied().collect();
        (self.lower..self.upper).find(|id| !taken.contains(id))
    }
}

/// `GET /cluster/options`: datacenter.cfg's `next-id` range, `None` when the answer shows
/// none: datacenter.cfg sets none, or PVE left it out, as it does for a caller without
/// `Sys.Audit` on `/` (pve-manager API2/Cluster.pm `get_options` answers every user, with
/// the whole of datacenter.cfg only then, else only `console` and `tag-style`). A read.
pub fn next_id_range(client: &Client) -> Result<Option<NextIdRange>, ApiError> {
    let answer = ops::read(client, paths::CLUSTER_OPTIONS, &Vec::new())?;
    Ok(NextIdRange::shown_in(&answer))
}

/// `GET /cluster/nextid`: a free vmid, not reserved (a parallel client may take it first).
/// The schema says integer; real servers answer a string.
pub fn next_vmid(client: &Client) -> Result<u32, ApiError> {
    let answer = ops::read(client, paths::CLUSTER_NEXTID, &Vec::new())?;
    let shown = answer.to_string();
    serde_json::from_value::<NextId>(answer)
        .ok()
        .and_then(|NextId(id)| u32::try_from(id).ok())
        .ok_or_else(|| ApiError::NotPve {
            source: None,
            detail: format!("PVE answered an unexpected vmid: {shown}"),
        })
}

/// How far above the lowest free vmid [`spread_vmid`] places a new VM: parallel runs that
/// each ask `nextid` get the same answer (PVE reserves nothing), so each picks its own spot
/// in the next 1,000 ids, by its VM's name; 50 runs at once then rarely pick the same one.
pub const VMID_SPREAD: u32 = 1000;

/// The vmid a run creates its VM `name` with, with PVE's default `next-id` range: see
/// [`spread_vmid_within`].
pub fn spread_vmid(lowest_free: Vmid, taken: &[Vmid], name: &str, attempt: u32) -> Vmid {
    spread_vmid_within(lowest_free, taken, name, attempt, NextIdRange::default())
}

/// The vmid a run creates its VM `name` with: the lowest free id (`nextid`'s, or
/// [`NextIdRange::lowest_free`]) plus an offset of the name's hash (try `attempt` hashes
/// again) below `range`'s upper end, moved up past the ids `taken` (the cluster's listed
/// guests), round to the lowest free id at the upper end, as bpg's terraform provider
/// spreads its `random_vm_ids` within the range. Two runs for one name pick the same id,
/// so PVE's create lock decides between them; runs for different names rarely meet.
pub fn spread_vmid_within(
    lowest_free: Vmid,
    taken: &[Vmid],
    name: &str,
    attempt: u32,
    range: NextIdRange,
) -> Vmid {
    // FNV-1a: stable across builds and platforms, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes().chain(attempt.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let span = VMID_SPREAD.min(range.upper.saturating_sub(lowest_free));
    if span == 0 {
        return lowest_free;
    }
    let offset = (hash % u64::from(span)) as u32;
    let mut candidate = lowest_free + offset;
    for _ in 0..span {
        if !taken.contains(&candidate) {
            return candidate;
        }
        candidate += 1;
        if candidate >= range.upper {
            candidate = lowest_free;
        }
    }
    lowest_free
}

#[derive(serde::Deserialize)]
struct NextId(#[serde(deserialize_with = "crate::answers::number_or_string")] u64);

/// `GET /cluster/resources?type=vm`, its QEMU VMs with their pool, tags and status: every VM
/// of the cluster in one request (a read).
pub fn vm_resources(client: &Client) -> Result<Vec<VmResource>, ApiError> {
    let params: Params = vec![("type".into(), "vm".into())];
    let answer = ops::read(client, paths::CLUSTER_RESOURCES, &params)?;
    Ok(lenient_list::<VmResource>(answer)
        .into_iter()
        .filter(|r| r.kind == "qemu")
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vm_listed_as_vm_and_its_id_has_no_name_of_its_own() {
        let listed = |name: &str| ListedVm {
            vmid: 123,
            node: "pve1".into(),
            name: name.into(),
            creating: true,
            cloning: false,
        };
        assert!(listed("").unnamed());
        assert!(
            listed("VM 123").unnamed(),
            "vmstatus's name for a config without one"
        );
        assert!(!listed("VM 124").unnamed());
        assert!(!listed("web").unnamed());
    }

    #[test]
    fn spread_ids_are_stable_per_name_free_and_differ_between_names() {
        let first = spread_vmid(100, &[], "web-1", 0);
        assert_eq!(first, spread_vmid(100, &[], "web-1", 0), "one name, one id");
        assert!((100..100 + VMID_SPREAD).contains(&first));
        assert_ne!(
            first,
            spread_vmid(100, &[], "web-1", 1),
            "another try, another id"
        );
        assert_eq!(
            spread_vmid(100, &[first], "web-1", 0),
            first + 1,
            "a taken id is stepped over"
        );
        let ids: std::collections::BTreeSet<Vmid> = (0..50)
            .map(|host| spread_vmid(100, &[], &format!("vm{host}"), 0))
            .collect();
        assert!(
            ids.len() >= 45,
            "fifty names rarely share an id: {}",
            ids.len()
        );
        assert_eq!(
            spread_vmid(999_999, &[], "web-1", 0),
            999_999,
            "past PVE's upper end, the lowest free id"
        );
    }

    #[test]
    fn spread_ids_stay_within_the_next_id_range() {
        let range = NextIdRange {
            lower: 5_000,
            upper: 5_010,
        };
        let taken = [5_000, 5_001, 5_003];
        assert_eq!(range.lowest_free(&taken), Some(5_002));
        for host in 0..50 {
            let name = format!("vm{host}");
            let id = spread_vmid_within(5_002, &taken, &name, 0, range);
            assert!(
                (5_002..5_010).contains(&id) && !taken.contains(&id),
                "{name}: {id}"
            );
        }
        // Every id from the candidate to the upper end is taken: round to the lowest free.
        let full_top = [5_003, 5_004, 5_005, 5_006, 5_007, 5_008, 5_009];
        let ids: std::collections::BTreeSet<Vmid> = (0..20)
            .map(|host| spread_vmid_within(5_002, &full_top, &format!("vm{host}"), 0, range))
            .collect();
        assert_eq!(ids.into_iter().collect::<Vec<_>>(), [5_002]);
        let full: Vec<Vmid> = (5_000..5_010).collect();
        assert_eq!(range.lowest_free(&full), None);
        assert_eq!(
            spread_vmid_within(100, &[], "web-1", 0, NextIdRange::default()),
            spread_vmid(100, &[], "web-1", 0),
            "PVE's default range spreads as before"
        );
    }

    #[test]
    fn an_answer_without_next_id_tells_the_default_range_only_when_it_shows_the_whole_config() {
        let shown = |answer: serde_json::Value| NextIdRange::shown_in(&answer);
        assert_eq!(
            shown(serde_json::json!({"next-id": {"lower": "5000"}})).map(|range| range.lower),
            Some(5000)
        );
        assert_eq!(
            shown(serde_json::json!({"keyboard": "en-us", "allowed-tags": []})),
            Some(NextIdRange::default())
        );
        assert_eq!(
            shown(serde_json::json!({"console": "xtermjs", "allowed-tags": []})),
            None
        );
        assert_eq!(shown(serde_json::json!({})), None);
    }

    #[test]
    fn the_next_id_range_is_read_from_datacenter_cfg_as_pve_shows_it() {
        let read = |answer: serde_json::Value| NextIdRange::from_options(&answer);
        assert_eq!(read(serde_json::json!({})), NextIdRange::default());
        assert_eq!(
            read(serde_json::json!({"next-id": {"lower": "5000", "upper": 6000}})),
            NextIdRange {
                lower: 5_000,
                upper: 6_000
            }
        );
        assert_eq!(
            read(serde_json::json!({"next-id": {"upper": "200"}})),
            NextIdRange {
                lower: 100,
                upper: 200
            },
            "a key not set keeps PVE's default"
        );
        assert_eq!(
            read(serde_json::json!({"next-id": "lower=300,upper=400"})),
            NextIdRange {
                lower: 300,
                upper: 400
            }
        );
    }
}
