//! A VM's snapshot sections as data (qemu-server's config file: the `[snapname]` sections
//! `PVE::QemuConfig` keeps under `snapshots`), held in each VM of [`crate::state::State`].
//!
//! Apart from `snapshots` (the snapshot API handlers and their workers, which use the state,
//! the tasks, the storages and the migration lock) so that `state` uses this leaf and never
//! `snapshots` back: `snapshots` → `state` → `snapshot_sections`.

use std::collections::BTreeMap;

/// A VM's snapshot sections, by name: each one's keys as the config file has them.
pub type Snapshots = BTreeMap<String, BTreeMap<String, String>>;
