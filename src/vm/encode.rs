//! The `vm` module's property-string encoders: the values PVE stores for a NIC, an
//! `ipconfigN`, the EFI vars disk and the TPM state, a boolean and a size, written in the
//! form PVE prints them (through the typed values of `pve::values`) so that the plan can
//! compare them with what it reads back.

use serde_json::{Map, Value};

use super::validate::plain;
use crate::ansible::text::quote;
use crate::ids::{cidr, mac};
use crate::pve::values::{Drive, IpConfig, Net, Size, ValueError};

/// Formats bytes as PVE writes sizes (`2G`, `3584M`): `format_size`, through [`Size`].
pub fn format_size(bytes: u64) -> String {
    Size(bytes).to_string()
}

/// A boolean as PVE writes it in configs and property strings (`1`, `0`).
pub fn pve_bool(value: bool) -> String {
    (if value { "1" } else { "0" }).to_string()
}

/// Builds a NIC value as `print_net` prints it: `virtio[=MAC],bridge=…,…`.
pub fn net_value(index: usize, nic: &Map<String, Value>) -> Result<String, String> {
    let option = |key: &str| format!("net[{index}].{key}");
    let bad = |key: &str, e: ValueError| format!("{}: {}", option(key), e.message);
    let model = nic["model"].as_str().unwrap_or("virtio");
    let mut net = Net::new(model).map_err(|e| bad("model", e))?;
    if let Some(bridge) = nic["bridge"].as_str() {
        net.set("bridge", &plain(&option("bridge"), bridge)?)
            .map_err(|e| bad("bridge", e))?;
    }
    for key in ["firewall", "link_down"] {
        if let Some(value) = nic[key].as_bool() {
            net.set(key, &pve_bool(value)).map_err(|e| bad(key, e))?;
        }
    }
    for key in ["mtu", "queues", "tag"] {
        if let Some(value) = nic[key].as_i64() {
            net.set(key, &value.to_string()).map_err(|e| bad(key, e))?;
        }
    }
    if let Some(rate) = nic["rate"].as_str() {
        let rate = plain(&option("rate"), rate)?;
        net.set("rate", &rate).map_err(|_| {
            format!(
                "{} must be a number (MB/s), got {rate}",
                option("rate"),
                rate = quote(&rate)
            )
        })?;
    }
    if let Some(macaddr) = nic["macaddr"].as_str() {
        net.set("macaddr", &mac(&option("macaddr"), macaddr)?)
            .map_err(|e| bad("macaddr", e))?;
    }
    Ok(net.to_string())
}

/// Builds an `ipconfigN` value as PVE prints it (`gw=…,gw6=…,ip=…,ip6=…`), checked as
/// `parse_ipconfig` checks it.
pub fn ipconfig_value(index: usize, item: &Map<String, Value>) -> Result<String, String> {
    let mut config = IpConfig::new();
    for key in ["gw", "gw6", "ip", "ip6"] {
        if let Some(value) = item[key].as_str() {
            let value = plain(&format!("ipconfig[{index}].{key}"), value)?;
            let valid = match key {
                // pve-common `pve_verify_ipv4_config`, `pve_verify_ipv6_config`.
                "ip" => matches!(value.as_str(), "dhcp" | "manual") || cidr(&value, false),
                "ip6" => matches!(value.as_str(), "dhcp" | "auto" | "manual") || cidr(&value, true),
                _ => true,
            };
            if !valid || config.set(key, &value).is_err() {
                return Err(format!(
                    "ipconfig[{index}].{key} is not valid: {value} (ip: dhcp, manual or an IPv4/CIDR; ip6: dhcp, auto, manual or an IPv6/CIDR; gw, gw6: an address)",
                    value = quote(&value)
                ));
            }
        }
    }
    if item["gw"].is_string() && !item["ip"].is_string() {
        return Err(format!("ipconfig[{index}].gw needs ipconfig[{index}].ip"));
    }
    if config.get("ip").is_none() && config.get("ip6").is_none() {
        return Err(format!("ipconfig[{index}] needs at least one of ip, ip6"));
    }
    config
        .check()
        .map_err(|e| format!("ipconfig[{index}]: {}", e.message))?;
    Ok(config.to_string())
}

/// Builds the EFI vars disk of a create: `storage:1,efitype=…,pre-enrolled-keys=…`.
pub fn efidisk_value(
    storage: &str,
    efitype: &str,
    pre_enrolled_keys: &str,
) -> Result<String, String> {
    let bad = |e: ValueError| format!("efidisk: {}", e.message);
    let mut drive = Drive::allocate("efidisk0", storage, Size::gib(1)).map_err(bad)?;
    drive.set("efitype", efitype).map_err(bad)?;
    drive
        .set("pre-enrolled-keys", pre_enrolled_keys)
        .map_err(bad)?;
    Ok(drive.to_string())
}

/// Builds the TPM state of a create: `storage:1,version=…`.
pub fn tpmstate_value(storage: &str, version: &str) -> Result<String, String> {
    let bad = |e: ValueError| format!("tpmstate: {}", e.message);
    let mut drive = Drive::allocate("tpmstate0", storage, Size::gib(1)).map_err(bad)?;
    drive.set("version", version).map_err(bad)?;
    Ok(drive.to_string())
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
        let nic = serde_json::json!({"model": "virtio", "bridge": "vmbr0", "firewall": true, "tag": 20, "macaddr": null, "mtu": null, "queues": null, "rate": null, "link_down": null});
        assert_eq!(
            net_value(0, nic.as_object().unwrap()).unwrap(),
            "virtio,bridge=vmbr0,firewall=1,tag=20"
        );
        let nic =
            serde_json::json!({"model": "virtio", "bridge": "vmbr0,firewall=0", "macaddr": null});
        assert!(net_value(0, nic.as_object().unwrap()).is_err());
    }
}
