//! The answers the modules read, as types: what each field means and how PVE spells it.
//!
//! PVE's answers are generated from Perl values, so a number may arrive as a JSON number or
//! as a string (`nextid` answers `"100"`; a `vmid` or a flag may be either): every number is
//! read through [`number_or_string`]. A list item that does not have the shape its type
//! wants is skipped, as a reader of a hostile or foreign server must ([`lenient_list`]).

use std::collections::BTreeMap;

use std::net::IpAddr;

use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Reads a number sent as a JSON number or as a string of digits.
pub fn number_or_string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Spelled {
        Number(u64),
        Text(String),
    }
    match Spelled::deserialize(deserializer)? {
        Spelled::Number(n) => Ok(n),
        Spelled::Text(text) => text
            .trim()
            .parse()
            .map_err(|_| serde::de::Error::custom(format!("not a number: {text:?}"))),
    }
}

/// A VM's id, as every answer and request carries it (pve-common JSONSchema.pm `pve-vmid`:
/// 100 to 999,999,999, so it fits 32 bits).
pub type Vmid = u32;

/// A [`Vmid`] sent as a JSON number or as a string of digits; one beyond 32 bits is not a
/// vmid, and the item that holds it is not read.
pub fn vmid_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vmid, D::Error> {
    let number = number_or_string(deserializer)?;
    Vmid::try_from(number).map_err(|_| serde::de::Error::custom(format!("not a vmid: {number}")))
}

/// [`number_or_string`] for a field that may be missing or null.
pub fn optional_number<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    struct Wrapped(#[serde(deserialize_with = "number_or_string")] u64);
    Option::<Wrapped>::deserialize(deserializer).map(|w| w.map(|Wrapped(n)| n))
}

/// A text field; any other value (a number, an object) reads as absent.
fn text_or_nothing<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    Value::deserialize(deserializer).map(|v| v.as_str().map(str::to_string))
}

/// A field that counts when present at all, even as `null`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// The items of a list answer that have the shape `T` wants; anything else (a non-list,
/// an item of another shape) is skipped.
pub fn lenient_list<T: DeserializeOwned>(answer: Value) -> Vec<T> {
    match answer {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|item| serde_json::from_value(item).ok())
            .collect(),
        _ => Vec::new(),
    }
}

/// An object answer as `T`, or `T`'s default when it has another shape.
pub fn lenient<T: DeserializeOwned + Default>(answer: Value) -> T {
    serde_json::from_value(answer).unwrap_or_default()
}

/// `GET /nodes/{node}/tasks/{upid}/status`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct TaskStatus {
    /// `running` or `stopped`.
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub status: Option<String>,
    /// Once stopped: `OK`, `WARNINGS: N`, or the error.
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub exitstatus: Option<String>,
}

impl TaskStatus {
    /// Whether the task has ended.
    pub fn stopped(&self) -> bool {
        self.status.as_deref() == Some("stopped")
    }

    /// The exit status; a stopped task without one was killed (PVE says `unexpected status`).
    pub fn exit(&self) -> String {
        self.exitstatus
            .clone()
            .unwrap_or_else(|| "unexpected status".into())
    }
}

/// One line of `GET …/tasks/{upid}/log`.
#[derive(Clone, Debug, Deserialize)]
pub struct LogLine {
    /// The line's number (1-based; PVE's `n`).
    #[serde(rename = "n", deserialize_with = "number_or_string")]
    pub number: u64,
    /// Its text (PVE's `t`).
    #[serde(rename = "t", default)]
    pub text: String,
}

/// A page of a task log: its lines, and the log's line count when the server sends it.
#[derive(Clone, Debug, Default)]
pub struct LogPage {
    pub total: Option<u64>,
    pub lines: Vec<LogLine>,
}

/// One task of `GET /nodes/{node}/tasks`.
#[derive(Clone, Debug, Deserialize)]
pub struct TaskListed {
    pub upid: String,
}

/// One guest of `GET /cluster/resources?type=vm` (its name as pvestatd last saw it).
#[derive(Clone, Debug, Deserialize)]
pub struct Resource {
    /// `qemu` or `lxc`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(deserialize_with = "vmid_number")]
    pub vmid: Vmid,
    pub node: String,
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub name: Option<String>,
    /// The config's lock, read from the config at once (pve-manager API2/Cluster.pm,
    /// resources: `get_guest_config_properties(['lock', 'tags'])`), unlike `name`.
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub lock: Option<String>,
}

/// One VM of `GET /nodes/{node}/qemu`, read from its config at once (qemu-server
/// QemuServer.pm, vmstatus).
#[derive(Clone, Debug, Deserialize)]
pub struct NodeVm {
    #[serde(deserialize_with = "vmid_number")]
    pub vmid: Vmid,
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub name: Option<String>,
    /// `create` while a create is in progress.
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub lock: Option<String>,
    /// `running` or `stopped`, from the node's live process list (vmstatus, as
    /// `status/current` reads it for one VM).
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub status: Option<String>,
}

/// `GET …/qemu/{vmid}/config`: each key with its value as PVE sent it (numbers as numbers).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(transparent)]
pub struct VmConfig {
    pub keys: Map<String, Value>,
}

impl VmConfig {
    /// Every value as a string, as PVE stores it in the config file.
    pub fn strings(&self) -> BTreeMap<String, String> {
        self.keys
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string()),
                )
            })
            .collect()
    }

    /// The answer as PVE sent it (numbers as numbers) without its `digest`, for a result.
    pub fn raw(&self) -> Value {
        let mut keys = self.keys.clone();
        keys.remove("digest");
        Value::Object(keys)
    }

    /// The VM's `name`, when it has one.
    pub fn name(&self) -> Option<&str> {
        self.keys.get("name")?.as_str()
    }

    /// Whether the guest agent is on: `agent` read as qemu-server reads it
    /// ([`crate::values::Agent`]: `1`, `on`, `yes`, `true`, `enabled=…`); unset, or a value
    /// PVE would not accept, is off.
    pub fn agent_enabled(&self) -> bool {
        let Some(value) = self.keys.get("agent") else {
            return false;
        };
        let text = value
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| value.to_string());
        text.parse::<crate::values::Agent>()
            .is_ok_and(|agent| agent.is_enabled())
    }

    /// Whether the VM is a template (`template: 1`).
    pub fn is_template(&self) -> bool {
        self.keys
            .get("template")
            .is_some_and(|t| t.as_u64() == Some(1) || t == "1")
    }

    /// When the VM was created (`meta: ctime=…`, epoch seconds).
    pub fn ctime(&self) -> Option<u64> {
        self.keys
            .get("meta")?
            .as_str()?
            .parse::<crate::values::Meta>()
            .ok()?
            .ctime()
    }
}

/// `GET …/qemu/{vmid}/status/current`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct VmStatus {
    /// `running` or `stopped`.
    #[serde(default)]
    pub status: String,
    /// The HA manager's view of the VM (pve-ha-manager Config.pm get_service_status):
    /// `managed`, and the CRM's service `state` once it has one.
    #[serde(default)]
    pub ha: HaServiceStatus,
    /// How long the VM has run, in seconds (0 when stopped).
    #[serde(default, deserialize_with = "optional_number")]
    pub uptime: Option<u64>,
}

/// The `ha` object of a VM's `status/current`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct HaServiceStatus {
    /// `1` when the VM is an HA resource not in state `ignored` (Config.pm vm_is_ha_managed).
    #[serde(default, deserialize_with = "optional_number")]
    pub managed: Option<u64>,
    /// The CRM's service state (`started`, `request_stop`, `stopped`, …), once it has one.
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub state: Option<String>,
}

impl VmStatus {
    /// Whether the HA stack manages the VM: its start, stop and shutdown requests are handed
    /// to the HA stack (`hastart`, `hastop`), which carries them out in a later round.
    pub fn ha_managed(&self) -> bool {
        self.ha.managed.is_some_and(|m| m != 0)
    }

    /// Whether the VM runs.
    pub fn running(&self) -> bool {
        self.status == "running"
    }
}

/// One key of `GET …/pending` or `GET …/cloudinit`: its value, and a change not taken yet.
#[derive(Clone, Debug, Deserialize)]
pub struct PendingKey {
    pub key: String,
    /// The value not taken yet, when there is one.
    #[serde(default, deserialize_with = "present")]
    pub pending: Option<Value>,
    /// `1` when the key is to be removed.
    #[serde(default, deserialize_with = "optional_number")]
    pub delete: Option<u64>,
}

impl PendingKey {
    /// Whether the key has a change not taken yet (a pending value or a pending removal).
    pub fn changes(&self) -> bool {
        self.pending.is_some() || self.delete.is_some_and(|d| d != 0)
    }
}

/// One storage of `GET /nodes/{node}/storage` (pve-storage API2/Storage/Status.pm, index).
#[derive(Clone, Debug, Deserialize)]
pub struct NodeStorage {
    pub storage: String,
    /// `1` for a storage every node reaches (NFS, Ceph, …): its volumes need no copy to move
    /// a VM, and a clone may be made on another node.
    #[serde(default, deserialize_with = "optional_number")]
    pub shared: Option<u64>,
    /// The content types it holds (`iso,vztmpl,backup`).
    #[serde(default)]
    pub content: Option<String>,
    /// Its free space in bytes.
    #[serde(default, deserialize_with = "optional_number")]
    pub avail: Option<u64>,
    /// The storage's plugin type (`dir`, `lvmthin`, `zfspool`, `rbd`, …), as PVE sent it.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

impl NodeStorage {
    /// Whether the storage holds this content type (`iso`).
    pub fn holds(&self, content: &str) -> bool {
        self.content
            .as_deref()
            .is_some_and(|list| list.split(',').any(|c| c.trim() == content))
    }

    /// Whether the storage is shared between the nodes.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some_and(|s| s != 0)
    }
}

/// One volume of `GET /nodes/{node}/storage/{storage}/content`.
#[derive(Clone, Debug, Deserialize)]
pub struct Volume {
    pub volid: String,
    /// Its size in bytes, as PVE sent it.
    #[serde(default)]
    pub size: Value,
    /// Its format (`qcow2`, `raw`, `iso`), as PVE sent it.
    #[serde(default)]
    pub format: Value,
    /// When the volume was written (epoch seconds), for file-based storages.
    #[serde(default, deserialize_with = "optional_number")]
    pub ctime: Option<u64>,
}

/// One item of `GET /nodes/{node}/qemu/{vmid}/snapshot` (qemu-server API2/Qemu.pm
/// snapshot_list); the item named `current` is the VM's present state, not a snapshot.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct SnapshotListed {
    pub name: String,
    #[serde(default, deserialize_with = "optional_number")]
    pub snaptime: Option<u64>,
    #[serde(default, deserialize_with = "optional_number")]
    pub vmstate: Option<u64>,
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub description: Option<String>,
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub parent: Option<String>,
    /// `prepare` or `delete` while a snapshot task works on it (or after one failed).
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub snapstate: Option<String>,
}

impl SnapshotListed {
    /// Whether this is a snapshot (not the `current` item).
    pub fn is_snapshot(&self) -> bool {
        self.name != "current"
    }
}

/// One guest of `GET /cluster/resources?type=vm` with what a facts query selects by and
/// reports (pve-manager API2/Cluster.pm resources; `status` and `name` from pvestatd).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct VmResource {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(deserialize_with = "vmid_number")]
    pub vmid: Vmid,
    #[serde(default)]
    pub node: String,
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub status: Option<String>,
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub pool: Option<String>,
    /// `;`-separated, as the config keeps them.
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub tags: Option<String>,
    #[serde(default, deserialize_with = "optional_number")]
    pub template: Option<u64>,
}

impl VmResource {
    /// The tags, split as PVE splits them (`;`, `,` or spaces).
    pub fn tag_list(&self) -> Vec<String> {
        self.tags
            .as_deref()
            .unwrap_or_default()
            .split([';', ',', ' '])
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect()
    }
}

/// One key of `GET …/pending` with its current `value` too (qemu-server API2/Qemu.pm
/// vm_pending).
#[derive(Clone, Debug, Deserialize)]
pub struct PendingItem {
    pub key: String,
    #[serde(default)]
    pub value: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    pub pending: Option<Value>,
    #[serde(default, deserialize_with = "optional_number")]
    pub delete: Option<u64>,
}

/// A VM's config as `GET …/pending` gives it in one read: the values it has, the values not
/// taken yet, and the keys to be removed (the `digest` left out).
#[derive(Clone, Debug, Default)]
pub struct PendingConfig {
    /// The values the VM has now (`value`).
    pub current: VmConfig,
    /// The values not taken yet (`pending`).
    pub pending: Map<String, Value>,
    /// The keys to be removed (`delete`), in PVE's order.
    pub pending_delete: Vec<String>,
}

impl PendingConfig {
    /// The config the listing's keys make.
    pub fn from_items(items: Vec<PendingItem>) -> PendingConfig {
        let mut config = PendingConfig::default();
        for item in items {
            if item.key == "digest" {
                continue;
            }
            if let Some(value) = item.value {
                config.current.keys.insert(item.key.clone(), value);
            }
            if let Some(pending) = item.pending {
                config.pending.insert(item.key.clone(), pending);
            }
            if item.delete.is_some_and(|d| d != 0) {
                config.pending_delete.push(item.key);
            }
        }
        config
    }
}

/// `GET …/agent/network-get-interfaces`: the guest's interfaces as its agent reports them
/// (qemu-guest-agent's `guest-network-get-interfaces`, which PVE passes on under `result`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct GuestInterfaces {
    #[serde(default, deserialize_with = "lenient_items")]
    pub result: Vec<GuestInterface>,
}

/// One interface of the guest (qemu-guest-agent's `GuestNetworkInterface`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct GuestInterface {
    #[serde(default)]
    pub name: String,
    /// The MAC address, when the interface has one.
    #[serde(
        rename = "hardware-address",
        default,
        deserialize_with = "text_or_nothing",
        skip_serializing_if = "Option::is_none"
    )]
    pub hardware_address: Option<String>,
    #[serde(rename = "ip-addresses", default, deserialize_with = "lenient_items")]
    pub ip_addresses: Vec<GuestIpAddress>,
    /// The interface's counters (`rx-bytes`, `tx-packets`, …), as the agent sends them.
    #[serde(
        default,
        deserialize_with = "counters",
        skip_serializing_if = "Option::is_none"
    )]
    pub statistics: Option<BTreeMap<String, u64>>,
}

/// One address of a guest interface (qemu-guest-agent's `GuestIpAddress`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct GuestIpAddress {
    /// `ipv4` or `ipv6`.
    #[serde(rename = "ip-address-type", default)]
    pub kind: String,
    #[serde(rename = "ip-address")]
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<u8>,
}

impl GuestInterfaces {
    /// The guest's addresses a client can reach it at: every address the agent reports
    /// but loopback (`127.0.0.0/8`, `::1`), link-local (`169.254.0.0/16`, `fe80::/10`, which
    /// need the guest's interface to be named to be used) and unspecified (`0.0.0.0`, `::`),
    /// IPv4 first, each once, in the guest's order. The vm module waits for the first of
    /// these (`wait_for_ip`), and vm_info and the inventory report them (`ansible_host` is the
    /// first).
    pub fn addresses(&self) -> Vec<String> {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        let ips = self
            .result
            .iter()
            .flat_map(|iface| &iface.ip_addresses)
            .filter_map(|a| a.address.parse::<IpAddr>().ok());
        for ip in ips {
            let usable = match ip {
                IpAddr::V4(v4) => !(v4.is_loopback() || v4.is_link_local() || v4.is_unspecified()),
                IpAddr::V6(v6) => {
                    !(v6.is_loopback()
                        || v6.is_unspecified()
                        || (v6.segments()[0] & 0xffc0) == 0xfe80)
                }
            };
            let list = if ip.is_ipv4() { &mut v4 } else { &mut v6 };
            let text = ip.to_string();
            if usable && !list.contains(&text) {
                list.push(text);
            }
        }
        v4.extend(v6);
        v4
    }
}

/// An interface's counters; counters of another shape read as absent (the interface's
/// addresses are still read).
fn counters<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, u64>>, D::Error> {
    Value::deserialize(deserializer).map(|v| serde_json::from_value(v).ok())
}

/// A list field read as [`lenient_list`] reads a list answer: an item of another shape is
/// skipped, and a field that is not a list reads as empty.
fn lenient_items<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    deserializer: D,
) -> Result<Vec<T>, D::Error> {
    Value::deserialize(deserializer).map(lenient_list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_are_read_as_numbers_or_strings() {
        let listed: Vec<Resource> = lenient_list(json!([
            {"type": "qemu", "vmid": 100, "node": "pve1", "name": "web"},
            {"type": "qemu", "vmid": "101", "node": "pve1"},
            {"type": "qemu", "vmid": "x", "node": "pve1"},
            {"type": "qemu", "node": "pve1"},
        ]));
        let ids: Vec<Vmid> = listed.iter().map(|r| r.vmid).collect();
        assert_eq!(ids, vec![100, 101]);
        let pending: Vec<PendingKey> = lenient_list(json!([
            {"key": "cores", "value": 1, "pending": 2},
            {"key": "net1", "delete": "1"},
            {"key": "memory", "value": 2048},
            {"key": "tags", "pending": null},
        ]));
        let changed: Vec<&str> = pending
            .iter()
            .filter(|k| k.changes())
            .map(|k| k.key.as_str())
            .collect();
        assert_eq!(changed, vec!["cores", "net1", "tags"]);
    }

    #[test]
    fn a_config_reads_its_flags_and_creation_time() {
        let config: VmConfig = lenient(
            json!({"template": 1, "meta": "creation-qemu=9.0,ctime=1700000000", "cores": 2}),
        );
        assert!(config.is_template());
        assert_eq!(config.ctime(), Some(1_700_000_000));
        assert_eq!(config.strings()["cores"], "2");
        assert!(!lenient::<VmConfig>(json!({"template": "0"})).is_template());
        assert!(!lenient::<TaskStatus>(json!("garbage")).stopped());
        let killed: TaskStatus = lenient(json!({"status": "stopped", "exitstatus": 7}));
        assert!(killed.stopped());
        assert_eq!(killed.exit(), "unexpected status");
    }

    /// The shape PVE passes on from qemu-guest-agent (`guest-network-get-interfaces` under
    /// `result`), with loopback, link-local and unspecified addresses, a duplicate, an item
    /// that is no address, and an interface without addresses or MAC.
    fn guest_answer() -> Value {
        json!({"result": [
            {"name": "lo", "hardware-address": "00:00:00:00:00:00",
             "ip-addresses": [
                {"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8},
                {"ip-address-type": "ipv6", "ip-address": "::1", "prefix": 128}],
             "statistics": {"rx-bytes": 100, "rx-dropped": 0, "rx-errs": 0, "rx-packets": 2,
                            "tx-bytes": 100, "tx-dropped": 0, "tx-errs": 0, "tx-packets": 2}},
            {"name": "eth0", "hardware-address": "bc:24:11:00:00:01",
             "ip-addresses": [
                {"ip-address-type": "ipv6", "ip-address": "fe80::be24:11ff:fe00:1", "prefix": 64},
                {"ip-address-type": "ipv6", "ip-address": "2001:db8::5", "prefix": 64},
                {"ip-address-type": "ipv4", "ip-address": "169.254.3.4", "prefix": 16},
                {"ip-address-type": "ipv4", "ip-address": "192.0.2.10", "prefix": 24}],
             "statistics": {"rx-bytes": "odd"}},
            {"name": "eth1", "ip-addresses": [
                {"ip-address-type": "ipv4", "ip-address": "192.0.2.10", "prefix": 24},
                {"ip-address-type": "ipv4", "ip-address": "0.0.0.0", "prefix": 0},
                {"ip-address-type": "ipv4", "ip-address": "not an address"},
                {"ip-address-type": "ipv4"}]},
            {"name": "dummy0"}
        ]})
    }

    #[test]
    fn the_guest_agents_reachable_addresses_ipv4_first() {
        let interfaces: GuestInterfaces = lenient(guest_answer());
        assert_eq!(interfaces.result.len(), 4);
        assert_eq!(interfaces.addresses(), ["192.0.2.10", "2001:db8::5"]);
        let eth0 = &interfaces.result[1];
        assert_eq!(eth0.hardware_address.as_deref(), Some("bc:24:11:00:00:01"));
        assert_eq!(eth0.ip_addresses[3].prefix, Some(24));
        assert_eq!(eth0.statistics, None, "counters of another shape");
        assert_eq!(
            interfaces.result[0]
                .statistics
                .as_ref()
                .map(|c| c["rx-packets"]),
            Some(2)
        );
        assert_eq!(
            interfaces.result[2].ip_addresses.len(),
            3,
            "one has no address"
        );
        assert!(interfaces.result[3].ip_addresses.is_empty());
        assert!(
            lenient::<GuestInterfaces>(json!({"result": []}))
                .addresses()
                .is_empty()
        );
        assert!(
            lenient::<GuestInterfaces>(json!("no agent"))
                .result
                .is_empty()
        );
    }

    #[test]
    fn the_guest_interfaces_print_as_the_agent_sent_them() {
        let answer = json!({"result": [{"name": "eth0", "hardware-address": "bc:24:11:00:00:01",
            "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "192.0.2.20", "prefix": 24}]}]});
        let interfaces: GuestInterfaces = lenient(answer.clone());
        assert_eq!(serde_json::to_value(&interfaces).unwrap(), answer);
    }

    #[test]
    fn a_vmid_beyond_32_bits_is_not_read() {
        let listed: Vec<NodeVm> = lenient_list(json!([
            {"vmid": 4294967396u64, "name": "huge"},
            {"vmid": "100", "name": "web"},
        ]));
        let ids: Vec<Vmid> = listed.iter().map(|vm| vm.vmid).collect();
        assert_eq!(ids, [100]);
    }

    #[test]
    fn the_pending_listing_makes_a_config() {
        let items: Vec<PendingItem> = lenient_list(json!([
            {"key": "digest", "value": "abc"},
            {"key": "name", "value": "web1"},
            {"key": "memory", "value": 512},
            {"key": "cores", "value": 1, "pending": 4},
            {"key": "serial0", "value": "socket", "delete": 1},
            {"key": "tags", "pending": "prod"},
            {"key": "agent", "value": "enabled=yes,fstrim_cloned_disks=1"}
        ]));
        let config = PendingConfig::from_items(items);
        assert!(!config.current.keys.contains_key("digest"));
        assert_eq!(config.current.keys["memory"], json!(512));
        assert_eq!(config.current.name(), Some("web1"));
        assert_eq!(config.pending["cores"], json!(4));
        assert_eq!(config.pending["tags"], json!("prod"));
        assert_eq!(config.pending_delete, ["serial0"]);
        assert!(config.current.agent_enabled());
    }

    #[test]
    fn the_agent_is_on_as_qemu_server_reads_it() {
        let agent = |value: Value| lenient::<VmConfig>(json!({ "agent": value })).agent_enabled();
        for on in [
            json!(1),
            json!("1"),
            json!("on"),
            json!("yes"),
            json!("true"),
            json!("enabled=1"),
            json!("enabled=on,type=isa"),
            json!("type=virtio,enabled=true"),
        ] {
            assert!(agent(on.clone()), "{on}");
        }
        for off in [
            json!(0),
            json!("0"),
            json!("off"),
            json!("enabled=0,fstrim_cloned_disks=1"),
            json!("type=isa"),
            json!("maybe"),
        ] {
            assert!(!agent(off.clone()), "{off}");
        }
        assert!(!lenient::<VmConfig>(json!({})).agent_enabled());
    }

    #[test]
    fn a_config_is_shown_without_its_digest() {
        let config: VmConfig = lenient(json!({"digest": "abc", "memory": 512, "name": "web1"}));
        assert_eq!(config.raw(), json!({"memory": 512, "name": "web1"}));
        assert_eq!(config.strings()["memory"], "512");
    }
}
