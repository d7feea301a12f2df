//! What the guest sees after the config converged, decided in plain data: which changes a
//! running VM has not taken yet (PVE's pending section, and cloud-init options its cloud-init
//! drive does not hold), and which addresses the guest agent reports.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::Value;

use crate::pve::answers::PendingKey;

/// The keys `GET …/pending` lists with a `pending` value or a pending `delete`: changes a
/// running VM takes only at its next start (qemu-server, vmconfig_hotplug_pending).
pub fn pending_keys(listing: &[PendingKey]) -> Vec<String> {
    keys_with_changes(listing)
}

/// The cloud-init options `GET …/cloudinit` lists with a `pending` value or a `delete`: set in
/// the config, not yet on the cloud-init drive the guest reads (regenerated at start or by
/// `PUT …/cloudinit`).
pub fn cloudinit_pending(listing: &[PendingKey]) -> Vec<String> {
    keys_with_changes(listing)
}

fn keys_with_changes(listing: &[PendingKey]) -> Vec<String> {
    let mut out: Vec<String> = listing
        .iter()
        .filter(|key| key.changes())
        .map(|key| key.key.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether the VM has a cloud-init drive (a drive whose volume is a cloud-init image).
pub fn has_cloudinit_drive(config: &BTreeMap<String, String>) -> bool {
    config
        .iter()
        .any(|(k, v)| super::validate::is_drive_slot(k) && v.contains("cloudinit"))
}

/// Whether a change of `key` on a running VM may wait for a restart, for check mode's
/// prediction (a real run reads PVE's pending section instead). Conservative: only the keys
/// PVE always applies at once (its "fast plug" options) and new disks and NICs (hotplugged
/// under PVE's default `hotplug: network,disk,usb`) are assumed to apply at once; cloud-init
/// options reach the guest only with a regenerated drive.
pub fn may_need_restart(key: &str, current: &BTreeMap<String, String>) -> bool {
    const FAST: &[&str] = &[
        "description",
        "name",
        "onboot",
        "protection",
        "startup",
        "tags",
    ];
    if FAST.contains(&key) {
        return false;
    }
    let new_device = !current.contains_key(key)
        && (key.starts_with("net")
            || (super::validate::is_drive_slot(key)
                && !key.starts_with("ide")
                && !key.starts_with("sata")
                && key != "efidisk0"
                && key != "tpmstate0"));
    !new_device
}

/// The addresses in a guest agent's `network-get-interfaces` answer that a client can reach:
/// not loopback, not link-local, not unspecified; IPv4 first, each once, in the guest's order.
pub fn addresses(answer: &Value) -> Vec<String> {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    let ifaces = answer
        .get("result")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    for iface in ifaces {
        let addrs = iface
            .get("ip-addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for a in addrs {
            let Some(ip) = a
                .get("ip-address")
                .and_then(Value::as_str)
                .and_then(|s| s.parse::<IpAddr>().ok())
            else {
                continue;
            };
            let usable = match ip {
                IpAddr::V4(x) => !(x.is_loopback() || x.is_link_local() || x.is_unspecified()),
                IpAddr::V6(x) => {
                    !(x.is_loopback() || x.is_unspecified() || (x.segments()[0] & 0xffc0) == 0xfe80)
                }
            };
            let list = if ip.is_ipv4() { &mut v4 } else { &mut v6 };
            let text = ip.to_string();
            if usable && !list.contains(&text) {
                list.push(text);
            }
        }
    }
    v4.extend(v6);
    v4
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pve::answers::lenient_list;
    use serde_json::json;

    #[test]
    fn pending_and_cloudinit_listings() {
        let listing = lenient_list(json!([
            {"key": "cores", "value": 1, "pending": 2},
            {"key": "memory", "value": 1024},
            {"key": "serial0", "value": "socket", "delete": 1},
            {"key": "name", "value": "a"}
        ]));
        assert_eq!(pending_keys(&listing), ["cores", "serial0"]);
        let cloudinit = lenient_list(json!([
            {"key": "ciuser", "value": "old", "pending": "new"},
            {"key": "sshkeys", "pending": "x"},
            {"key": "ipconfig0", "value": "ip=dhcp"}
        ]));
        assert_eq!(cloudinit_pending(&cloudinit), ["ciuser", "sshkeys"]);
        assert!(pending_keys(&lenient_list(json!(null))).is_empty());
    }

    #[test]
    fn reachable_addresses_ipv4_first() {
        let a = json!({"result": [
            {"name": "lo", "ip-addresses": [
                {"ip-address-type": "ipv4", "ip-address": "127.0.0.1"},
                {"ip-address-type": "ipv6", "ip-address": "::1"}]},
            {"name": "eth0", "ip-addresses": [
                {"ip-address-type": "ipv6", "ip-address": "fe80::1"},
                {"ip-address-type": "ipv6", "ip-address": "2001:db8::5"},
                {"ip-address-type": "ipv4", "ip-address": "169.254.3.4"},
                {"ip-address-type": "ipv4", "ip-address": "192.0.2.10"}]},
            {"name": "eth1", "ip-addresses": [
                {"ip-address-type": "ipv4", "ip-address": "192.0.2.10"},
                {"ip-address-type": "ipv4", "ip-address": "not an address"}]}
        ]});
        assert_eq!(addresses(&a), ["192.0.2.10", "2001:db8::5"]);
        assert!(addresses(&json!({"result": []})).is_empty());
    }

    #[test]
    fn restart_prediction() {
        let cur: BTreeMap<String, String> = [("net0".to_string(), "virtio".to_string())].into();
        assert!(!may_need_restart("name", &cur));
        assert!(may_need_restart("cores", &cur));
        assert!(may_need_restart("ciuser", &cur));
        assert!(may_need_restart("net0", &cur));
        assert!(!may_need_restart("net1", &cur));
        assert!(!may_need_restart("scsi1", &cur));
        assert!(may_need_restart("sata1", &cur));
    }
}
