//! The options of a disk's life after its create, read and checked: `disks[].state`,
//! `disks[].purge`, `disks[].keep_source` and the module's `unused_disks`. A leaf, so that
//! [`super::disks`] (the `disks` option) and [`super::disk_life`] (what they ask of a VM)
//! both read them without importing each other.

use serde_json::{Map, Value};

use crate::ansible::protocol::Invocation;

/// The `unused_disks` option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum UnusedDisks {
    /// Reported in the result, left.
    #[default]
    Keep,
    /// The `unusedN` volumes the VM owns are deleted (others are reported and left).
    Remove,
}

/// `unused_disks`, as given (`keep` unless `remove`).
pub fn unused_disks(inv: &Invocation) -> UnusedDisks {
    match inv.str("unused_disks") {
        Some("remove") => UnusedDisks::Remove,
        _ => UnusedDisks::Keep,
    }
}

/// A disk's life options.
#[derive(Clone, Copy, Debug, Default)]
pub struct LifeOptions {
    pub absent: bool,
    pub purge: bool,
    pub keep_source: bool,
}

/// The life options of `disks[i]`, checked against each other and `unused_disks`.
pub fn options(
    inv: &Invocation,
    disk: &Map<String, Value>,
    i: usize,
) -> Result<LifeOptions, String> {
    let flag = |key: &str| disk.get(key).and_then(Value::as_bool).unwrap_or(false);
    let life = LifeOptions {
        absent: disk.get("state").and_then(Value::as_str) == Some("absent"),
        purge: flag("purge"),
        keep_source: flag("keep_source"),
    };
    if life.purge && !life.absent {
        return Err(format!(
            "disks[{i}].purge deletes a detached disk's volume: give disks[{i}].state: absent with it, or leave purge out"
        ));
    }
    if life.absent {
        for key in ["import_from", "size", "format"] {
            if disk.get(key).is_some_and(|v| !v.is_null()) {
                return Err(format!(
                    "disks[{i}].{key} describes a disk to keep, but disks[{i}].state is absent: leave {key} out"
                ));
            }
        }
    }
    if life.keep_source && unused_disks(inv) == UnusedDisks::Remove {
        return Err(format!(
            "disks[{i}].keep_source keeps a moved disk's source as unusedN, which unused_disks: remove would then delete: give one of them"
        ));
    }
    Ok(life)
}
