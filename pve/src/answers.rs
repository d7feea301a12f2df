//! The answers the modules read, as types: what each field means and how PVE spells it.
//!
//! PVE's answers are generated from Perl values, so a number may arrive as a JSON number or
//! as a string (`nextid` answers `"100"`; a `vmid` or a flag may be either): every number is
//! read through [`number_or_string`]. A list item that does not have the shape its type
//! wants is skipped, as a reader of a hostile or foreign server must ([`lenient_list`]).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};
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
    #[serde(deserialize_with = "number_or_string")]
    pub vmid: u64,
    pub node: String,
    #[serde(default, deserialize_with = "text_or_nothing")]
    pub name: Option<String>,
}

/// One VM of `GET /nodes/{node}/qemu`, read from its config at once (qemu-server
/// QemuServer.pm, vmstatus).
#[derive(Clone, Debug, Deserialize)]
pub struct NodeVm {
    #[serde(deserialize_with = "number_or_string")]
    pub vmid: u64,
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

    /// The answer as PVE sent it.
    pub fn raw(&self) -> Value {
        Value::Object(self.keys.clone())
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
}

impl NodeStorage {
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
    #[serde(deserialize_with = "number_or_string")]
    pub vmid: u64,
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
        let ids: Vec<u64> = listed.iter().map(|r| r.vmid).collect();
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
}
