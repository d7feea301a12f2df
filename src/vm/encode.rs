//! The `vm` module's property-string encoders: the values PVE stores for a NIC, an
//! `ipconfigN`, the EFI vars disk and the TPM state, a boolean and a size, written in the
//! form PVE prints them so that the plan can compare them with what it reads back.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::validate::plain;
use crate::ansible::text::quote;
use crate::ids::{cidr, mac};

/// Formats bytes as PVE writes sizes (`2G`, `3584M`).
pub fn format_size(bytes: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        let m = 1u64 << shift;
        if bytes >= m && bytes % m == 0 {
            return format!("{}{unit}", bytes / m);
        }
    }
    bytes.to_string()
}

/// A boolean as PVE writes it in configs and property strings (`1`, `0`).
pub fn pve_bool(v: bool) -> String {
    (if v { "1" } else { "0" }).to_string()
}

/// Builds a NIC value: `virtio[=MAC],bridge=…,…` (options alphabetical, as PVE prints them).
pub fn net_value(i: usize, n: &Map<String, Value>) -> Result<String, String> {
    let o = |k: &str| format!("net[{i}].{k}");
    let model = n["model"].as_str().unwrap_or("virtio");
    let mut kv: BTreeMap<&str, String> = BTreeMap::new();
    if let Some(br) = n["bridge"].as_str() {
        kv.insert("bridge", plain(&o("bridge"), br)?);
    }
    if let Some(v) = n["firewall"].as_bool() {
        kv.insert("firewall", pve_bool(v));
    }
    if let Some(v) = n["link_down"].as_bool() {
        kv.insert("link_down", pve_bool(v));
    }
    for k in ["mtu", "queues", "tag"] {
        if let Some(v) = n[k].as_i64() {
            kv.insert(k, v.to_string());
        }
    }
    if let Some(r) = n["rate"].as_str() {
        let r = plain(&o("rate"), r)?;
        r.parse::<f64>().map_err(|_| {
            format!(
                "{} must be a number (MB/s), got {r}",
                o("rate"),
                r = quote(&r)
            )
        })?;
        kv.insert("rate", r);
    }
    let head = match n["macaddr"].as_str() {
        Some(m) => format!("{model}={}", mac(&o("macaddr"), m)?),
        None => model.to_string(),
    };
    Ok(std::iter::once(head)
        .chain(kv.iter().map(|(k, v)| format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(","))
}

/// Builds an `ipconfigN` value: `gw=…,gw6=…,ip=…,ip6=…` (keys alphabetical, as PVE prints them).
pub fn ipconfig_value(i: usize, m: &Map<String, Value>) -> Result<String, String> {
    let mut parts = Vec::new();
    for k in ["gw", "gw6", "ip", "ip6"] {
        if let Some(v) = m[k].as_str() {
            let v = plain(&format!("ipconfig[{i}].{k}"), v)?;
            let valid = match k {
                "ip" => v == "dhcp" || cidr(&v, false),
                "ip6" => v == "dhcp" || v == "auto" || cidr(&v, true),
                "gw" => v.parse::<std::net::Ipv4Addr>().is_ok(),
                _ => v.parse::<std::net::Ipv6Addr>().is_ok(),
            };
            if !valid {
                return Err(format!(
                    "ipconfig[{i}].{k} is not valid: {v} (ip: dhcp or an IPv4/CIDR; ip6: dhcp, auto or an IPv6/CIDR; gw, gw6: an address)",
                    v = quote(&v)
                ));
            }
            parts.push(format!("{k}={v}"));
        }
    }
    if m["gw"].is_string() && !m["ip"].is_string() {
        return Err(format!("ipconfig[{i}].gw needs ipconfig[{i}].ip"));
    }
    if parts.is_empty() {
        return Err(format!("ipconfig[{i}] needs at least one of ip, ip6"));
    }
    Ok(parts.join(","))
}

/// Builds the EFI vars disk of a create: `storage:1,efitype=…,pre-enrolled-keys=…`.
pub fn efidisk_value(storage: &str, efitype: &str, pre_enrolled_keys: &str) -> String {
    format!("{storage}:1,efitype={efitype},pre-enrolled-keys={pre_enrolled_keys}")
}

/// Builds the TPM state of a create: `storage:1,version=…`.
pub fn tpmstate_value(storage: &str, version: &str) -> String {
    format!("{storage}:1,version={version}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_written_as_pve_writes_them() {
        assert_eq!(format_size(20 << 30), "20G");
        assert_eq!(format_size(3584 << 20), "3584M");
    }

    #[test]
    fn net_values_are_canonical() {
        let m = serde_json::json!({"model": "virtio", "bridge": "vmbr0", "firewall": true, "tag": 20, "macaddr": null, "mtu": null, "queues": null, "rate": null, "link_down": null});
        assert_eq!(
            net_value(0, m.as_object().unwrap()).unwrap(),
            "virtio,bridge=vmbr0,firewall=1,tag=20"
        );
        let m =
            serde_json::json!({"model": "virtio", "bridge": "vmbr0,firewall=0", "macaddr": null});
        assert!(net_value(0, m.as_object().unwrap()).is_err());
    }
}
