//! What cloud-init's NoCloud datasource reads at boot: a CD-ROM holding an ISO 9660 volume
//! labelled `cidata` (the `cidata` label cloud-init looks for, `DataSourceNoCloud`), its
//! `meta-data`, `user-data`, `network-config` and `vendor-data` by the names the kernel shows
//! (Rock Ridge). The hostname is user-data's `hostname` (cloud-config `set_hostname`), else
//! meta-data's `local-hostname`; the addresses are network-config's (version 1 `subnets` or
//! version 2 `addresses`). Read when a VM starts (`qemu/vms.rs` do_start), kept per VM.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;

use hadris_iso::read::IsoImage;
use serde_json::{Value, json};

use crate::state::Sim;
use crate::storage::volumes;

/// The seed files a guest read, by name.
type Files = BTreeMap<String, String>;

/// Reads the files of the `cidata` volume in an ISO image, or why it is not one.
fn read_iso(path: &Path) -> Result<Files, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // The primary volume descriptor (sector 16) holds the volume id at bytes 40..72.
    let label = bytes
        .get(16 * 2048 + 40..16 * 2048 + 72)
        .map(|raw| String::from_utf8_lossy(raw).trim_end().to_string())
        .ok_or("not an ISO 9660 image")?;
    if !label.eq_ignore_ascii_case("cidata") {
        return Err(format!("volume id is {label:?}, not cidata"));
    }
    let iso = IsoImage::open(Cursor::new(bytes)).map_err(|e| format!("not readable: {e}"))?;
    let mut files = Files::new();
    for entry in iso.root_dir().iter(&iso).entries() {
        let entry = entry.map_err(|e| format!("reading the directory: {e}"))?;
        if entry.is_directory() {
            continue;
        }
        let name = entry.display_name().to_string();
        let content = iso
            .read_file(&entry)
            .map_err(|e| format!("reading {name}: {e}"))?;
        files.insert(name, String::from_utf8_lossy(&content).into_owned());
    }
    Ok(files)
}

/// The first CD-ROM whose ISO is a `cidata` volume: (slot, volid, files).
fn find_seed(
    sim: &Sim,
    node: &str,
    config: &BTreeMap<String, String>,
) -> Option<(String, String, Files)> {
    config.iter().find_map(|(slot, value)| {
        let drive = slot.starts_with("ide") || slot.starts_with("sata") || slot.starts_with("scsi");
        if !drive || !value.split(',').any(|part| part == "media=cdrom") {
            return None;
        }
        let volid = value.split(',').next()?;
        if !volid.contains(":iso/") {
            return None;
        }
        let path = volumes::parse_volume(&sim.opts.data_dir, node, volid)
            .ok()?
            .path;
        let files = read_iso(&path).ok()?;
        Some((slot.clone(), volid.to_string(), files))
    })
}

/// A YAML text as JSON (empty or unreadable: null).
fn yaml(text: &str) -> Value {
    serde_yaml_ng::from_str::<Value>(text).unwrap_or(Value::Null)
}

/// One interface's addresses as network-config gives them: (name, MAC, [(address, prefix)]).
type Iface = (String, Option<String>, Vec<(String, u8)>);

/// The prefix length of a dotted netmask (`255.255.255.0` → 24).
fn prefix_of(mask: &str) -> Option<u8> {
    let addr: std::net::Ipv4Addr = mask.parse().ok()?;
    Some(u32::from(addr).count_ones() as u8)
}

/// `address` with an optional `/prefix`, else `netmask`'s, else 24.
fn address(text: &str, netmask: Option<&str>) -> (String, u8) {
    match text.split_once('/') {
        Some((addr, prefix)) => (addr.to_string(), prefix.parse().unwrap_or(24)),
        None => (text.to_string(), netmask.and_then(prefix_of).unwrap_or(24)),
    }
}

/// The interfaces network-config (version 1 or 2) configures statically.
fn interfaces(network: &Value) -> Vec<Iface> {
    let mut out = Vec::new();
    match network["version"].as_u64() {
        Some(1) => {
            for item in network["config"].as_array().into_iter().flatten() {
                if item["type"] != "physical" {
                    continue;
                }
                let addrs = item["subnets"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|subnet| subnet["type"] == "static" || subnet["type"] == "static6")
                    .filter_map(|subnet| {
                        subnet["address"]
                            .as_str()
                            .map(|text| address(text, subnet["netmask"].as_str()))
                    })
                    .collect();
                out.push((
                    item["name"].as_str().unwrap_or_default().to_string(),
                    item["mac_address"].as_str().map(str::to_ascii_lowercase),
                    addrs,
                ));
            }
        }
        Some(2) => {
            for (name, eth) in network["ethernets"].as_object().into_iter().flatten() {
                let addrs = eth["addresses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a.as_str().map(|text| address(text, None)))
                    .collect();
                out.push((
                    eth["set-name"].as_str().unwrap_or(name).to_string(),
                    eth["match"]["macaddress"]
                        .as_str()
                        .map(str::to_ascii_lowercase),
                    addrs,
                ));
            }
        }
        _ => {}
    }
    out
}

/// What the guest saw of a seed, as the admin port serves it.
fn seen(slot: &str, volid: &str, files: &Files) -> Value {
    let file = |name: &str| files.get(name).cloned().unwrap_or_default();
    let meta = yaml(&file("meta-data"));
    let user_data = file("user-data");
    let user = if user_data.starts_with("#cloud-config") {
        yaml(&user_data)
    } else {
        Value::Null
    };
    let hostname = user["hostname"]
        .as_str()
        .or_else(|| meta["local-hostname"].as_str())
        .map(str::to_string);
    let network = yaml(&file("network-config"));
    let ifaces: Vec<Value> = interfaces(&network)
        .into_iter()
        .map(|(name, mac, addrs)| {
            json!({"name": name, "mac": mac, "addresses": addrs.iter().map(|(a, p)| format!("{a}/{p}")).collect::<Vec<_>>()})
        })
        .collect();
    json!({
        "slot": slot,
        "volid": volid,
        "instance_id": meta["instance-id"],
        "hostname": hostname,
        "files": files,
        "interfaces": ifaces,
    })
}

/// At the VM's start: reads its seed, if it has one, as cloud-init would (none: the guest
/// saw none, and what an earlier boot saw is forgotten).
pub fn boot(sim: &Sim, node: &str, vmid: u32) {
    let config = match sim.lock().vms.get(&vmid) {
        Some(vm) => vm.config.clone(),
        None => return,
    };
    let found =
        find_seed(sim, node, &config).map(|(slot, volid, files)| seen(&slot, &volid, &files));
    let mut st = sim.lock();
    match found {
        Some(seen) => {
            st.guest_seeds.insert(vmid, seen);
        }
        None => {
            st.guest_seeds.remove(&vmid);
        }
    }
}

/// What the guest of VM `vmid` saw at its last start, if it booted with a seed.
pub fn seen_by(sim: &Sim, vmid: u32) -> Option<Value> {
    sim.lock().guest_seeds.get(&vmid).cloned()
}

/// The static address the seed gave the interface with this MAC (or this `ethN` name), as
/// the guest agent reports it: (address, prefix).
pub fn address_of(sim: &Sim, vmid: u32, mac: &str, name: &str) -> Option<(String, u8)> {
    let st = sim.lock();
    let seen = st.guest_seeds.get(&vmid)?;
    let iface = seen["interfaces"].as_array()?.iter().find(|iface| {
        iface["mac"].as_str() == Some(mac) || (iface["mac"].is_null() && iface["name"] == name)
    })?;
    let first = iface["addresses"].as_array()?.first()?.as_str()?;
    let (addr, prefix) = first.split_once('/')?;
    Some((addr.to_string(), prefix.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_config_v1_and_v2_addresses() {
        let v1 = yaml(
            "version: 1\nconfig:\n    - type: physical\n      name: eth0\n      mac_address: 'bc:24:11:aa:bb:cc'\n      subnets:\n      - type: static\n        address: '192.0.2.10'\n        netmask: '255.255.255.0'\n",
        );
        assert_eq!(
            interfaces(&v1),
            vec![(
                "eth0".to_string(),
                Some("bc:24:11:aa:bb:cc".to_string()),
                vec![("192.0.2.10".to_string(), 24)]
            )]
        );
        let v2 = yaml("version: 2\nethernets:\n  eth0:\n    addresses: [198.51.100.7/25]\n");
        assert_eq!(
            interfaces(&v2),
            vec![(
                "eth0".to_string(),
                None,
                vec![("198.51.100.7".to_string(), 25)]
            )]
        );
    }
}
