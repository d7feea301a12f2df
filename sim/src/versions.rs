//! The PVE releases pve-sim plays (`--pve-version`) and the one table of what differs between
//! them on the paths our modules and common clients use.
//!
//! A release is played as its last point release (the `version` `/version` answers), with the
//! package versions that pve-manager's `debian/control` required there. Each row of
//! [`CHANGES`] starts at the first pve-manager version whose dependencies guarantee the package
//! change, and cites it: the package's `debian/changelog` entry and, where one is known, the
//! commit. Handlers ask [`has`] (or the row's own function) instead of comparing versions.
//!
//! API schemas: pve-sim transcribes one schema (9.1's, `sim/src/schema/`); each release takes
//! from it what its own official schema lacks ([`schema_of`]), as computed from the
//! `api-viewer/apidata.js` of pve-docs' last point release of each minor ([`Release::apidoc`])
//! for the endpoints the modules use. No pve-docs of 9.2 was found: 9.2 is checked against
//! 9.1's. The 8.x disk sub-keys `cyls`, `heads`, `secs` and `trans` are not played.

use crate::schema::{Param, Ty};

/// A pve-manager version, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u8,
    pub minor: u8,
    pub patch: u8,
}

const fn version(major: u8, minor: u8, patch: u8) -> Version {
    Version {
        major,
        minor,
        patch,
    }
}

/// A release pve-sim plays.
pub struct Release {
    /// `major.minor`, as `--pve-version` takes it and `/version` answers it as `release`.
    pub name: &'static str,
    /// The point release played: `/version`'s `version`.
    pub version: Version,
    /// `/version`'s `repoid`: the first 16 hex digits of pve-manager's "bump version to"
    /// commit of that point release.
    pub repoid: &'static str,
    /// The pve-docs whose `api-viewer/apidata.js` the release's schema differences come from.
    pub apidoc: &'static str,
}

/// Every release `--pve-version` takes, oldest first.
pub const RELEASES: &[Release] = &[
    Release {
        name: "8.0",
        version: version(8, 0, 9),
        repoid: "fd1a0ae1b385cdcd",
        apidoc: "pve-docs 8.0.5 (ba2a819)",
    },
    Release {
        name: "8.1",
        version: version(8, 1, 11),
        repoid: "cb1653fdade58a8b",
        apidoc: "pve-docs 8.1.5 (093bd98)",
    },
    Release {
        name: "8.2",
        version: version(8, 2, 10),
        repoid: "536023790079895f",
        apidoc: "pve-docs 8.2.5 (3734b4f)",
    },
    Release {
        name: "8.3",
        version: version(8, 3, 7),
        repoid: "9fb05d2f3a99619d",
        apidoc: "pve-docs 8.3.2 (1aaa3ec)",
    },
    Release {
        name: "8.4",
        version: version(8, 4, 14),
        repoid: "b502d23c55afcba1",
        apidoc: "pve-docs 8.4.2 (fa0b4f6)",
    },
    Release {
        name: "9.0",
        version: version(9, 0, 18),
        repoid: "5cacb35d7ee87217",
        apidoc: "pve-docs 9.0.9 (eb93dad)",
    },
    Release {
        name: "9.1",
        version: version(9, 1, 19),
        repoid: "076d7c3c108f0346",
        apidoc: "pve-docs 9.1.3 (e5010dc)",
    },
    Release {
        name: "9.2",
        version: version(9, 2, 11),
        repoid: "f6997e698c7933ea",
        apidoc: "pve-docs 9.1.3 (e5010dc), the newest found",
    },
];

/// The names `--pve-version` takes.
pub const NAMES: [&str; 8] = ["8.0", "8.1", "8.2", "8.3", "8.4", "9.0", "9.1", "9.2"];

/// The release named `name`; an unknown name (the command line refuses one) plays the
/// newest.
pub fn release(name: &str) -> &'static Release {
    RELEASES
        .iter()
        .find(|r| r.name == name)
        .unwrap_or(&RELEASES[RELEASES.len() - 1])
}

/// A behaviour that changed between the releases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// `import-from` takes volumes of the `import` content type (before: `images` only).
    ImportFromImportVolumes,
    /// The `import` content type: upload and download-url take `content=import` (only an
    /// ESXi storage holds it).
    ImportContentType,
    /// Directory storages hold the `import` content type.
    ImportOnDirStorages,
    /// download-url and upload into `import` take `.qcow2`, `.raw` and `.vmdk` (before:
    /// `.ova` only).
    ImportDiskImages,
    /// The VM privileges: `VM.Monitor` gone, `VM.GuestAgent.*` and `VM.Replicate` there.
    GuestAgentPrivileges,
    /// HA groups are migrated to HA rules; the groups API refuses once they are.
    HaRules,
    /// `/cluster/resources` lists a VM's `memhost`.
    ResourcesMemhost,
    /// The cluster-wide guest bulk actions and their task types.
    ClusterBulkActions,
    /// `POST /nodes/{node}/qemu` takes `ha-managed`.
    CreateHaManaged,
    /// `ha-managed=1` at create needs `Sys.Console` on `/`.
    CreateHaNeedsConsole,
}

/// One row of the table.
pub struct Row {
    pub change: Change,
    /// The first pve-manager version that has it.
    pub starts: Version,
    /// What changed, in PVE's words where it has them.
    pub what: &'static str,
    /// Where it comes from.
    pub source: &'static str,
}

/// The behaviour differences, oldest first.
pub const CHANGES: &[Row] = &[
    Row {
        change: Change::ImportFromImportVolumes,
        starts: version(8, 3, 0),
        what: "import-from accepts `import` volumes; the refusal reads \"needs to be 'images' \
               or 'import'\" (before: \"not an image\")",
        source: "qemu-server 8.2.7, commit 0d41c7f5 \"api: create: implement extracting disks \
                 when needed for import-from\"; pve-manager 8.3.0 depends on qemu-server >= 8.2.7",
    },
    Row {
        change: Change::ImportContentType,
        starts: version(8, 2, 0),
        what: "the `import` content type; upload and download-url take `content=import`",
        source: "libpve-storage-perl 8.1.1 \"storage plugins: add 'import' content type\" (ESXi \
                 import); pve-manager 8.2.0 depends on libpve-storage-perl >= 8.1.5; the enum \
                 in pve-docs 8.2.5's schema, not in 8.1.5's",
    },
    Row {
        change: Change::ImportOnDirStorages,
        starts: version(8, 3, 0),
        what: "directory storages hold `import` content (before: \"storage 'local' is not \
               configured for content-type 'import'\")",
        source: "libpve-storage-perl 8.2.8 (OVA upload and download); pve-manager 8.3.0 \
                 depends on libpve-storage-perl >= 8.2.8",
    },
    Row {
        change: Change::ImportDiskImages,
        starts: version(8, 4, 0),
        what: "download-url and upload into `import` take .qcow2, .raw and .vmdk",
        source: "libpve-storage-perl 8.3.6, commit 76f695f; pve-manager 8.4.0 depends on \
                 libpve-storage-perl >= 8.3.6",
    },
    Row {
        change: Change::GuestAgentPrivileges,
        starts: version(9, 0, 0),
        what: "VM.Monitor dropped for VM.GuestAgent.{Audit,FileRead,FileWrite,\
               FileSystemMgmt,Unrestricted}; VM.Replicate added",
        source: "libpve-access-control 9.0.2 \"privileges: drop VM.Monitor in favor of more \
                 granular VM.GuestAgent.* privileges\" (commits 922f710, 0706945) and 9.0.3 \"add \
                 VM.Replicate privilege\"; pve-manager 9.0.0 depends on \
                 libpve-access-control >= 9.0.3",
    },
    Row {
        change: Change::HaRules,
        starts: version(9, 0, 0),
        what: "HA groups migrated to node-affinity rules; the groups endpoints refuse once \
               migrated (\"ha groups have been migrated to rules\")",
        source: "pve-ha-manager 5.0.2 \"introduce HA affinity rules, which will replace the HA \
                 groups\", \"api: groups: disallow calls to HA groups endpoints if already fully \
                 migrated\"; pve-manager 9.0.0 depends on pve-ha-manager >= 5.0.3",
    },
    Row {
        change: Change::ResourcesMemhost,
        starts: version(9, 0, 0),
        what: "/cluster/resources lists `memhost` for VMs",
        source: "pve-manager commit e3ac6efa \"api2tools: extract_vm_status add new vm memhost \
                 column\" (2025-07-26), in 9.0.0",
    },
    Row {
        change: Change::ClusterBulkActions,
        starts: version(9, 0, 13),
        what: "/cluster/bulk-action/guest/{start,shutdown,suspend,migrate}, tasks bulk-start, \
               bulk-shutdown, bulk-suspend, bulk-migrate",
        source: "pve-manager 9.0.13 \"api: implement node-independent cluster wide guest bulk \
                 actions like start, stop, migrate or suspend\" \
                 (PVE/API2/Cluster/BulkAction/Guest.pm fork_worker)",
    },
    Row {
        change: Change::CreateHaManaged,
        starts: version(9, 0, 12),
        what: "POST /nodes/{node}/qemu takes `ha-managed` (then `ha-manager add vm:N --state \
               started|stopped`)",
        source: "qemu-server 9.0.24, commit 14823177 \"api: create/store: allow adding VM as HA \
                 resource after creation\"; pve-manager 9.0.12 depends on qemu-server >= 9.0.26",
    },
    Row {
        change: Change::CreateHaNeedsConsole,
        starts: version(9, 1, 9),
        what: "ha-managed=1 at create needs Sys.Console on /",
        source: "qemu-server 9.1.8 (2026-04-22), commit bfdad557 \"api: check Sys.Console \
                 privilege when adding or restoring a VM to HA\"; first in the pve-manager \
                 9.1.9 updates, required from pve-manager 9.2.0 (qemu-server >= 9.1.13)",
    },
];

/// Whether the release named `name` has `change`.
pub fn has(name: &str, change: Change) -> bool {
    let played = release(name).version;
    CHANGES
        .iter()
        .find(|row| row.change == change)
        .is_some_and(|row| played >= row.starts)
}

/// Whether HA groups have become rules in the release named `name` (pve-ha-manager 5.0.2): the
/// HA code's switch between `/cluster/ha/groups` and `/cluster/ha/rules`.
pub fn ha_groups_are_rules(name: &str) -> bool {
    has(name, Change::HaRules)
}

/// The task types the release named `name` can start that the cluster's task list may show,
/// beyond the VM's own: the cluster bulk actions from 9.0.13.
pub fn bulk_task_types(name: &str) -> &'static [&'static str] {
    if has(name, Change::ClusterBulkActions) {
        &[
            "bulk-start",
            "bulk-shutdown",
            "bulk-suspend",
            "bulk-migrate",
        ]
    } else {
        &[]
    }
}

/// The admin port's `GET /version-table`: the release played, and each row with whether it
/// applies.
pub fn played(name: &str) -> serde_json::Value {
    let played = release(name);
    let shown = |v: Version| format!("{}.{}.{}", v.major, v.minor, v.patch);
    serde_json::json!({
        "release": played.name,
        "version": shown(played.version),
        "apidoc": played.apidoc,
        "ha_groups_are_rules": ha_groups_are_rules(name),
        "bulk_task_types": bulk_task_types(name),
        "changes": CHANGES.iter().map(|row| serde_json::json!({
            "change": format!("{:?}", row.change),
            "applies": played.version >= row.starts,
            "starts": shown(row.starts),
            "what": row.what,
            "source": row.source,
        })).collect::<Vec<_>>(),
    })
}

/// `POST /nodes/{node}/qemu`'s parameters of pve-sim's schema that came later than 8.0, with
/// the version each came in: the first pve-docs schema that has it (`api-viewer/apidata.js`
/// of 8.2.5 and 9.0.9), the create's `ha-managed` by its row.
const CREATE_PARAMS_SINCE: &[(&str, Version)] = &[
    ("import-working-storage", version(8, 2, 0)),
    ("allow-ksm", version(9, 0, 0)),
    ("intel-tdx", version(9, 0, 0)),
];

/// An endpoint whose schema differs between the releases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endpoint {
    /// `POST /nodes/{node}/qemu`.
    CreateVm,
    /// `POST …/storage/{storage}/upload` and `…/download-url`.
    StorageTransfer,
}

/// The schema `endpoint` has in the release named `name`: pve-sim's (9.1's) with what the
/// release lacks taken out.
fn schema_of(name: &str, endpoint: Endpoint, params: Vec<Param>) -> Vec<Param> {
    let played = release(name).version;
    match endpoint {
        Endpoint::CreateVm => {
            let lacks = |p: &Param| match p.name {
                "ha-managed" => !has(name, Change::CreateHaManaged),
                other => CREATE_PARAMS_SINCE
                    .iter()
                    .any(|(param, since)| *param == other && played < *since),
            };
            params.into_iter().filter(|p| !lacks(p)).collect()
        }
        Endpoint::StorageTransfer if !has(name, Change::ImportContentType) => params
            .into_iter()
            .map(|p| match p.name {
                "content" => Param {
                    ty: Ty::Enum(&["iso", "vztmpl"]),
                    ..p
                },
                _ => p,
            })
            .collect(),
        Endpoint::StorageTransfer => params,
    }
}

/// `POST /nodes/{node}/qemu`'s schema in the release named `name`.
pub fn create_vm_schema(name: &str) -> Vec<Param> {
    schema_of(name, Endpoint::CreateVm, crate::schema::create_vm())
}

/// `POST …/storage/{storage}/upload`'s schema in the release named `name`.
pub fn upload_schema(name: &str) -> Vec<Param> {
    schema_of(name, Endpoint::StorageTransfer, crate::schema::upload())
}

/// `POST …/storage/{storage}/download-url`'s schema in the release named `name`.
pub fn download_url_schema(name: &str) -> Vec<Param> {
    schema_of(
        name,
        Endpoint::StorageTransfer,
        crate::schema::download_url(),
    )
}

/// Whether a storage of the release named `name` may hold `content` as configured (pve-sim's
/// storages are directory-based ones; before 8.3 no such plugin held `import`).
pub fn holds_content(name: &str, content: &str) -> bool {
    content != "import" || has(name, Change::ImportOnDirStorages)
}

/// The refusal of an `import-from` source whose volume type is not `vtype` allowed
/// (qemu-server API2/Qemu.pm `$check_storage_access`); `None` when it is allowed.
pub fn import_from_refusal(name: &str, source: &str, vtype: &str) -> Option<String> {
    if has(name, Change::ImportFromImportVolumes) {
        (vtype != "images" && vtype != "import").then(|| {
            format!("{source} has wrong type '{vtype}' - needs to be 'images' or 'import'")
        })
    } else {
        (vtype != "images").then(|| format!("{source} has wrong type '{vtype}' - not an image"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The newest release before `row` starts and the oldest from it, among those played.
    fn sides(row: &Row) -> (Option<&'static Release>, Option<&'static Release>) {
        let before = RELEASES.iter().rev().find(|r| r.version < row.starts);
        let from = RELEASES.iter().find(|r| r.version >= row.starts);
        (before, from)
    }

    #[test]
    fn each_change_is_played_on_both_sides() {
        for row in CHANGES {
            let (before, from) = sides(row);
            let (before, from) = (before.expect("a release before"), from.expect("one from"));
            assert!(
                !has(before.name, row.change),
                "{:?} in {}",
                row.change,
                before.name
            );
            assert!(
                has(from.name, row.change),
                "{:?} not in {}",
                row.change,
                from.name
            );
            assert!(!row.source.is_empty() && !row.what.is_empty());
        }
    }

    #[test]
    fn the_releases_are_the_names_in_order() {
        let names: Vec<_> = RELEASES.iter().map(|r| r.name).collect();
        assert_eq!(names, NAMES);
        assert!(RELEASES.windows(2).all(|w| w[0].version < w[1].version));
        for r in RELEASES {
            let Version { major, minor, .. } = r.version;
            assert_eq!(format!("{major}.{minor}"), r.name);
            assert_eq!(r.repoid.len(), 16);
            assert!(r.apidoc.starts_with("pve-docs "), "{}", r.name);
        }
    }

    #[test]
    fn the_import_rows_by_release() {
        assert!(!has("8.1", Change::ImportContentType));
        assert!(has("8.2", Change::ImportContentType));
        assert!(!holds_content("8.2", "import") && holds_content("8.2", "iso"));
        assert!(holds_content("8.3", "import"));
        assert!(!has("8.3", Change::ImportDiskImages));
        assert!(has("8.4", Change::ImportDiskImages));
        assert_eq!(
            import_from_refusal("8.2", "local:import/a.qcow2", "import").as_deref(),
            Some("local:import/a.qcow2 has wrong type 'import' - not an image")
        );
        assert_eq!(
            import_from_refusal("8.3", "local:import/a.qcow2", "import"),
            None
        );
        assert_eq!(
            import_from_refusal("9.1", "local:iso/a.img", "iso").as_deref(),
            Some("local:iso/a.img has wrong type 'iso' - needs to be 'images' or 'import'")
        );
        assert_eq!(
            import_from_refusal("8.0", "local:100/vm-100-disk-0.raw", "images"),
            None
        );
    }

    #[test]
    fn ha_and_bulk_rows_by_release() {
        assert!(!ha_groups_are_rules("8.4"));
        assert!(ha_groups_are_rules("9.0"));
        assert!(bulk_task_types("8.4").is_empty());
        assert!(bulk_task_types("9.0").contains(&"bulk-migrate"));
        assert!(!has("8.4", Change::CreateHaManaged));
        assert!(has("9.0", Change::CreateHaManaged));
        assert!(!has("9.0", Change::CreateHaNeedsConsole));
        assert!(has("9.1", Change::CreateHaNeedsConsole));
    }

    #[test]
    fn the_create_schema_by_release() {
        use crate::schema::opt;
        let given = || {
            vec![
                opt("ha-managed", Ty::Bool),
                opt("allow-ksm", Ty::Bool),
                opt("import-working-storage", Ty::Str),
                opt("name", Ty::Str),
            ]
        };
        let names = |name: &str| -> Vec<&str> {
            schema_of(name, Endpoint::CreateVm, given())
                .iter()
                .map(|p| p.name)
                .collect()
        };
        assert_eq!(names("8.1"), ["name"]);
        assert_eq!(names("8.4"), ["import-working-storage", "name"]);
        let all = ["ha-managed", "allow-ksm", "import-working-storage", "name"];
        assert_eq!(names("9.0"), all);
        assert_eq!(names("9.2"), all);
        let content = |name: &str| {
            schema_of(
                name,
                Endpoint::StorageTransfer,
                vec![opt("content", Ty::Enum(&["iso", "vztmpl", "import"]))],
            )
            .remove(0)
            .ty
        };
        assert!(matches!(content("8.1"), Ty::Enum(e) if e == ["iso", "vztmpl"]));
        assert!(matches!(content("8.2"), Ty::Enum(e) if e.contains(&"import")));
    }

    #[test]
    fn an_unknown_name_plays_the_newest() {
        assert_eq!(release("7.4").name, "9.2");
    }
}
