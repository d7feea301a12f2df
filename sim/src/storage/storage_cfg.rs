//! The cluster's storage configuration (`storage.cfg`) as data: the two storages of a fresh
//! node and those added with `POST /storage`, whether a storage is enabled on a node
//! (pve-storage Storage.pm `storage_check_node`, `storage_check_enabled`), and the
//! cluster-wide storage lock an allocation on a shared storage takes (Storage/Plugin.pm
//! `cluster_lock_storage` → PVE::Cluster `cfs_lock_storage`).
//!
//! Apart from `config` (the `/storage` API handlers) and `volumes` (which allocate under the
//! lock) so that both use this leaf and neither uses the other: `config` → `storage_cfg` ←
//! `volumes`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::state::Sim;

/// A storage as `storage.cfg` would define it.
pub struct StorageDef {
    pub id: &'static str,
    pub kind: &'static str,
    pub content: &'static [&'static str],
    /// The allocation unit: LVM rounds a new or grown volume up to whole physical extents
    /// (4 MiB by default; pve-storage LVMThinPlugin.pm, alloc_image and volume_resize call
    /// `lvcreate -V` / `lvextend -L`, which round up). 1 for file storages.
    pub extent: u64,
    /// The same volumes on every node (`shared` in `storage.cfg`; see `storage/config.rs`).
    pub shared: bool,
}

impl StorageDef {
    /// Volumes named as block devices (`vm-N-disk-K`, raw), as LVM and RBD name them; the
    /// others are files in `images/N/`.
    pub fn block(&self) -> bool {
        matches!(self.kind, "lvmthin" | "lvm" | "rbd")
    }

    /// File storages keep a volume's format (qcow2, vmdk); block storages only raw.
    pub fn file_based(&self) -> bool {
        !self.block()
    }

    /// The format a new volume gets from `alloc_image` (pve-storage `vdisk_alloc`) when
    /// `format` is asked for: a file storage keeps it; RBDPlugin.pm makes an RBD image of any
    /// (raw, the volume name has no format); LvmThinPlugin.pm dies on anything but raw, and
    /// so does LVMPlugin.pm `alloc_lvm_image` (qcow2 only with `snapshot-as-volume-chain`,
    /// which pve-sim's storages do not set). The `die`s have no newline: Perl adds the place.
    pub fn alloc_format(&self, format: String) -> Result<String, String> {
        let dies = |plugin: &str, line: u32, message: String| {
            Err(format!(
                "{message} at /usr/share/perl5/PVE/Storage/{plugin}.pm line {line}."
            ))
        };
        match (self.kind, format.as_str()) {
            (_, "raw") | ("rbd", _) => Ok("raw".into()),
            ("lvmthin", _) => dies(
                "LvmThinPlugin",
                102,
                format!("unsupported format '{format}'"),
            ),
            ("lvm", "qcow2") => dies(
                "LVMPlugin",
                698,
                "snapshot-as-volume-chain option need to be enabled to use qcow2 format".into(),
            ),
            ("lvm", _) => dies("LVMPlugin", 696, format!("unsupported format '{format}'")),
            _ => Ok(format),
        }
    }

    /// pve-storage Storage.pm `resolve_format_hint`: the hinted format where the storage's
    /// plugin lists it as valid (`get_formats`: raw, qcow2 and vmdk on a file storage, raw on
    /// a block one), else the storage's default, raw.
    pub fn resolve_format_hint(&self, hint: Option<&str>) -> &'static str {
        let valid: &[&'static str] = if self.file_based() {
            &["raw", "qcow2", "vmdk"]
        } else {
            &["raw"]
        };
        hint.and_then(|h| valid.iter().find(|v| **v == h))
            .copied()
            .unwrap_or("raw")
    }
}

/// The storages every node has.
pub const STORAGES: &[StorageDef] = &[
    StorageDef {
        id: "local",
        kind: "dir",
        content: &["images", "iso", "import", "vztmpl", "snippets"],
        extent: 1,
        shared: false,
    },
    StorageDef {
        id: "local-lvm",
        kind: "lvmthin",
        content: &["images", "rootdir"],
        extent: 4 << 20,
        shared: false,
    },
];

/// The storage `id` of `storage.cfg`, if it is defined.
pub fn storage(id: &str) -> Option<&'static StorageDef> {
    all().into_iter().find(|s| s.id == id)
}

/// Every storage of `storage.cfg`: the node's own and those added with `POST /storage`.
pub fn all() -> Vec<&'static StorageDef> {
    let mut v: Vec<&'static StorageDef> = STORAGES.iter().collect();
    v.extend(added());
    v
}

/// A storage added through the API: its definition (what volumes look like) and its
/// section in `storage.cfg`.
struct Added {
    def: &'static StorageDef,
    cfg: BTreeMap<String, String>,
}

static ADDED: RwLock<Vec<Added>> = RwLock::new(Vec::new());

/// The storages added with `POST /storage`, in the order they were added.
fn added() -> Vec<&'static StorageDef> {
    ADDED
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|a| a.def)
        .collect()
}

/// A storage's section of `storage.cfg` as `$api_storage_config` gives it.
pub fn section(sid: &str) -> Option<BTreeMap<String, String>> {
    if let Some(a) = ADDED
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|a| a.def.id == sid)
    {
        return Some(a.cfg.clone());
    }
    // A fresh install's storage.cfg (pve-manager's installer writes these two).
    let pairs: &[(&str, &str)] = match sid {
        "local" => &[
            ("type", "dir"),
            ("path", "/var/lib/vz"),
            ("content", "images,import,iso,snippets,vztmpl"),
        ],
        "local-lvm" => &[
            ("type", "lvmthin"),
            ("thinpool", "data"),
            ("vgname", "pve"),
            ("content", "images,rootdir"),
        ],
        _ => return None,
    };
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

/// Adds a storage to `storage.cfg` (Config.pm create, under the storage config lock): `None`
/// if `sid` is already defined (a fresh node's or an added one), else the definition `make`
/// gives (built only then), which lives as long as the simulator (there is no
/// `DELETE /storage`).
pub fn define(
    sid: &str,
    make: impl FnOnce() -> (&'static StorageDef, BTreeMap<String, String>),
) -> Option<&'static StorageDef> {
    let mut added = ADDED.write().unwrap_or_else(|e| e.into_inner());
    let builtin = STORAGES.iter().any(|s| s.id == sid);
    if builtin || added.iter().any(|a| a.def.id == sid) {
        return None;
    }
    let (def, cfg) = make();
    added.push(Added { def, cfg });
    Some(def)
}

/// Storage.pm storage_check_node: a storage with `nodes` is there only on those.
pub fn on_node(sid: &str, node: &str) -> bool {
    section(sid)
        .and_then(|c| c.get("nodes").cloned())
        .is_none_or(|n| n.split([',', ';', ' ']).any(|x| x == node))
}

/// Storage.pm storage_check_enabled (through activate_storage, as vdisk_alloc calls it).
pub fn check_enabled(sid: &str, node: &str) -> Result<(), String> {
    if section(sid).is_some_and(|c| c.get("disable").is_some_and(|d| d == "1")) {
        return Err(format!("storage '{sid}' is disabled"));
    }
    if !on_node(sid, node) {
        return Err(format!("storage '{sid}' is not available on node '{node}'"));
    }
    Ok(())
}

/// The cluster-wide storage locks (`/etc/pve/priv/lock/storage-X`): who holds each.
struct Locks {
    held: Mutex<BTreeMap<String, Instant>>,
    cv: Condvar,
}

static LOCKS: Locks = Locks {
    held: Mutex::new(BTreeMap::new()),
    cv: Condvar::new(),
};

/// How long an allocation holds a shared storage's lock (alloc_image: the RBD or NFS round
/// trips), in microseconds; set from the simulator's timings by [`init`].
static ALLOC_HOLD_US: AtomicU64 = AtomicU64::new(100_000);

/// PVE::Cluster cfs_lock's acquire timeout (`$timeout = 10 if !$timeout`).
const CFS_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// Takes the simulator's timings: an allocation holds the lock for `--task-duration
/// cfs-alloc=…` (100 ms by default), scaled by `--time-scale`.
pub fn init(sim: &Sim) {
    let d = sim
        .opts
        .durations
        .get("cfs-alloc")
        .copied()
        .unwrap_or(Duration::from_millis(100));
    ALLOC_HOLD_US.store(sim.scaled(d).as_micros() as u64, Ordering::Relaxed);
}

fn acquire(sid: &str) -> Result<(), String> {
    let lockid = format!("storage-{sid}");
    let deadline = Instant::now() + CFS_LOCK_TIMEOUT;
    let mut held = LOCKS.held.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let now = Instant::now();
        // A holder past its end (an admin hold) has let go.
        if held.get(&lockid).is_some_and(|until| *until <= now) {
            held.remove(&lockid);
        }
        if let std::collections::btree_map::Entry::Vacant(slot) = held.entry(lockid.clone()) {
            // cfs locks expire after 120 s (pmxcfs); a holder that died lets go then.
            slot.insert(now + Duration::from_secs(120));
            return Ok(());
        }
        if now >= deadline {
            return Err(format!(
                "cfs-lock '{lockid}' error: got lock request timeout"
            ));
        }
        let wait = (deadline - now).min(Duration::from_millis(50));
        held = LOCKS
            .cv
            .wait_timeout(held, wait)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

fn release(sid: &str) {
    LOCKS
        .held
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&format!("storage-{sid}"));
    LOCKS.cv.notify_all();
}

/// Storage/Plugin.pm cluster_lock_storage for an allocation: on a shared storage, `f` runs
/// under the cluster-wide lock, which it holds for the allocation's time; a local storage
/// uses a node-local file lock, which pve-sim does not contend.
pub fn cluster_lock_storage<T>(
    sid: &str,
    f: impl FnOnce() -> Result<T, String>,
) -> Result<T, String> {
    if !storage(sid).is_some_and(|s| s.shared) {
        return f();
    }
    acquire(sid)?;
    let res = f();
    std::thread::sleep(Duration::from_micros(ALLOC_HOLD_US.load(Ordering::Relaxed)));
    release(sid);
    res
}

/// The admin endpoint's `POST /storage-lock` `{"storage": "X", "ms": N}`: another node holds
/// the storage's cluster lock for N ms (from now; waits its turn if held).
pub fn admin_hold(v: &Value) -> Result<Value, String> {
    let sid = v["storage"]
        .as_str()
        .ok_or("storage-lock needs 'storage'")?;
    if !storage(sid).is_some_and(|s| s.shared) {
        return Err(format!("storage '{sid}' is not a shared storage"));
    }
    let ms = v["ms"].as_u64().unwrap_or(5000);
    acquire(sid)?;
    LOCKS.held.lock().unwrap_or_else(|e| e.into_inner()).insert(
        format!("storage-{sid}"),
        Instant::now() + Duration::from_millis(ms),
    );
    Ok(json!(ms))
}
