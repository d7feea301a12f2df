//! A migration's options as migrate_vm takes them (qemu-server API2/Qemu.pm): the
//! `targetstorage` storage map (pve-common JSONSchema.pm `parse_idmap`, `map_id`), the
//! `migration_network` CIDR, and the options a `qmigrate` task runs with ([`Opts`]).
//!
//! Apart from `handlers` (which parses them) because the phases and the preparation read them
//! too: `handlers`, `phases` and `prepare` all use this leaf, and it uses none of them.

use std::collections::BTreeMap;

use crate::tools::split_list;

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
pub(super) struct StorageMap {
    pub(super) identity: bool,
    pub(super) default: Option<String>,
    pub(super) entries: BTreeMap<String, String>,
}

impl StorageMap {
    /// `parse_idmap($idmap, 'pve-storage-id')`: `Err((true, …))` for an entry that is no ID
    /// (what the `storage-pair-list` format refuses, entry by entry), `Err((false, …))` for a
    /// map that is wrong as a whole.
    pub(super) fn parse(text: &str) -> Result<StorageMap, (bool, String)> {
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
                if let Some(e) = storage_id_error(&entry) {
                    return Err((true, format!("entry '{entry}' contains invalid ID - {e}")));
                }
                if map.default.is_some() {
                    return Err((false, "default target ID can only be provided once".into()));
                }
                map.default = Some(entry);
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
    pub(super) fn map(map: Option<&StorageMap>, source: &str) -> String {
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
pub(super) fn is_cidr(text: &str) -> bool {
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
pub(super) fn in_network(ip: std::net::Ipv4Addr, cidr: &str) -> bool {
    let Some((net, bits)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(net), Ok(bits)) = (net.parse::<std::net::Ipv4Addr>(), bits.parse::<u32>()) else {
        return false;
    };
    let mask = u32::MAX.checked_shl(32 - bits.min(32)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(net) & mask
}

/// The options a `qmigrate` task runs with (`$param` as migrate_vm passes it on).
#[derive(Clone)]
pub(super) struct Opts {
    pub(super) online: bool,
    pub(super) force: bool,
    pub(super) with_local_disks: bool,
    pub(super) storagemap: Option<StorageMap>,
    pub(super) bwlimit: Option<u64>,
    pub(super) migration_network: Option<String>,
    pub(super) insecure: bool,
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
    fn cidrs_and_networks() {
        assert!(is_cidr("10.0.0.0/24"));
        assert!(is_cidr("fd00::/64"));
        assert!(!is_cidr("10.0.0.0/4"));
        assert!(!is_cidr("10.0.0.0"));
        assert!(in_network(std::net::Ipv4Addr::LOCALHOST, "127.0.0.0/8"));
        assert!(!in_network(std::net::Ipv4Addr::LOCALHOST, "10.0.0.0/8"));
    }
}
