//! What a run needs of PVE's privileges, and the check before its first write. Organisations
//! give automation a scoped token (a role on a pool, privilege separation on); a run that
//! creates a VM and is then refused its start leaves a half-made VM. So each module lists
//! what its plan needs ([`Need`]: any one of some privileges, each on a path, and the option
//! or step that needs it), reads what the token holds in one `GET /access/permissions`
//! ([`preflight`]), and fails before any write naming everything [`missing`].
//!
//! The table: PVE's own checks as functions of PVE's vocabulary (a config key, a volume, a
//! bridge), each citing where PVE makes it; the modules build their needs from them
//! (`vm::privileges`, [`snapshot_needs`], [`image_needs`], [`vm_info_needs`]). [`USES`]
//! is the minimal role for each use the Permissions guide documents, rendered from here
//! ([`guide`]) and checked against the modules' needs by tests, so neither can drift.
//!
//! A 403 PVE still gives (a check this table lacks) is reported in the same words by
//! [`explain_refusal`]: the table is then the thing to fix.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use anyhow::anyhow;

use crate::pve::api::access::{self, Permissions, Refusal};
use crate::pve::client::Client;
use crate::pve::error::ApiError;

/// One privilege on one ACL path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub privilege: &'static str,
    pub path: String,
}

/// What one option or step needs: any one of `any_of` (PVE's `check_any`, or a check that
/// tries a pool before the VM's own path), and why (`tags: prod`, `start`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Need {
    pub any_of: Vec<Grant>,
    pub because: String,
}

impl Need {
    /// `privilege` on `path`, for `because`.
    pub fn one(privilege: &'static str, path: &str, because: &str) -> Need {
        Need {
            any_of: vec![Grant {
                privilege,
                path: path.to_string(),
            }],
            because: because.to_string(),
        }
    }

    /// Any one of `privileges`, each on any one of `paths`.
    pub fn any(privileges: &[&'static str], paths: &[String], because: &str) -> Need {
        Need {
            any_of: privileges
                .iter()
                .flat_map(|privilege| {
                    paths.iter().map(|path| Grant {
                        privilege,
                        path: path.clone(),
                    })
                })
                .collect(),
            because: because.to_string(),
        }
    }

    /// `VM.Config.Disk on /vms/100`, `VM.Config.Cloudinit or VM.Config.Network on /vms/100`,
    /// `VM.Allocate on /vms/100 or /pool/web`.
    pub fn wanted(&self) -> String {
        let privileges: Vec<&str> = unique(self.any_of.iter().map(|grant| grant.privilege));
        let paths: Vec<&str> = unique(self.any_of.iter().map(|grant| grant.path.as_str()));
        if privileges.len() * paths.len() == self.any_of.len() {
            return format!("{} on {}", privileges.join(" or "), paths.join(" or "));
        }
        self.any_of
            .iter()
            .map(|grant| format!("{} on {}", grant.privilege, grant.path))
            .collect::<Vec<_>>()
            .join(" or ")
    }
}

impl std::fmt::Display for Need {
    /// `tags: prod needs VM.Config.Options on /vms/100`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} needs {}", self.because, self.wanted())
    }
}

fn unique<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = Vec::new();
    for item in items {
        if !seen.contains(&item) {
            seen.push(item);
        }
    }
    seen
}

/// The needs `held` does not meet, each once, in the order given.
pub fn missing(needs: &[Need], held: &Permissions) -> Vec<Need> {
    let mut out: Vec<Need> = Vec::new();
    for need in needs {
        let met = need
            .any_of
            .iter()
            .any(|grant| held.holds(&grant.path, grant.privilege));
        if !met && !out.contains(need) {
            out.push(need.clone());
        }
    }
    out
}

/// The failure for what is missing: every missing privilege, its path, and what needs it.
pub fn missing_message(missing: &[Need]) -> String {
    format!(
        "this run's user or token lacks privileges the run needs, so nothing was changed: {} \
         (the Permissions guide lists the role for each use)",
        missing
            .iter()
            .map(Need::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    )
}

/// The shell of the check: one `GET /access/permissions`, then the run fails before any write
/// when something is missing. In check mode too (the run would fail the same way).
pub fn preflight(client: &Client, needs: &[Need]) -> anyhow::Result<()> {
    // A root@pam ticket holds every privilege, so nothing is read (pve-access-control
    // RPCEnvironment.pm `permissions`: "root can do anything"; `check_api2_permissions`:
    // `return 1 if $username eq 'root@pam'`); a token (`root@pam!name` too) is read.
    if needs.is_empty() || client.user() == "root@pam" {
        return Ok(());
    }
    let held = access::permissions(client).map_err(|e| {
        anyhow::Error::new(e).context("reading this run's privileges (GET /access/permissions)")
    })?;
    let lacking = missing(needs, &held);
    if lacking.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(missing_message(&lacking)))
    }
}

/// A 403 `Permission check failed (path, privilege)` in `error`'s chain, told in the words
/// of [`missing_message`]: the step that was refused (the error's outermost context) needs
/// that privilege on that path; the table above did not know it. Other errors pass as
/// they are.
pub fn explain_refusal(error: anyhow::Error) -> anyhow::Error {
    let Some(refusal) = error
        .chain()
        .find_map(|cause| cause.downcast_ref::<ApiError>().and_then(Refusal::of))
    else {
        return error;
    };
    let step = error.to_string();
    let sentence = refusal_sentence(&refusal, &step);
    error.context(sentence)
}

/// `tags: prod needs Sys.Modify on / (PVE treats it as privileged)`, or `{step} needs
/// {privilege} on {path}`, with where the fix belongs.
fn refusal_sentence(refusal: &Refusal, step: &str) -> String {
    if let Some(tag) = refusal
        .detail
        .as_deref()
        .and_then(|detail| detail.strip_prefix("for modifying tag '"))
        .and_then(|rest| rest.strip_suffix('\''))
    {
        // pve-guest-common GuestHelpers.pm assert_tag_permissions: a tag in datacenter.cfg's
        // registered-tags (or one user-tag-access does not allow) needs Sys.Modify on /.
        return format!(
            "tags: {tag} needs {} on {} (PVE treats it as privileged: datacenter.cfg's \
             registered-tags or user-tag-access), so PVE refused it",
            refusal.privileges.join(" or "),
            refusal.path
        );
    }
    format!(
        "{step} needs {} on {}, which PVE checked and refused; the module's privilege table \
         (src/privileges.rs) did not list it, so this was not found before the run's first \
         write: grant it, and report the missing entry",
        refusal.privileges.join(" or "),
        refusal.path
    )
}

// ---- The table: PVE's checks, each with where PVE makes it. ----

/// `/` (PVE checks `Sys.*` for the cluster there).
pub const ROOT: &str = "/";

/// `/vms/{vmid}`.
pub fn vm_path(vmid: u32) -> String {
    format!("/vms/{vmid}")
}

/// A VM that has no id yet (the module chooses it when it creates): its path has no ACL and
/// no pool, so it holds what `/vms` passes on.
pub const NEW_VM_PATH: &str = "/vms/<new vmid>";

/// `/pool/{pool}`: its VMs and storages inherit the roles granted there
/// (RPCEnvironment.pm `compile_acl_path`, pool roles).
pub fn pool_path(pool: &str) -> String {
    format!("/pool/{pool}")
}

/// `/storage/{storage}`.
pub fn storage_path(storage: &str) -> String {
    format!("/storage/{storage}")
}

/// `/nodes/{node}`.
pub fn node_path(node: &str) -> String {
    access::node_acl_path(node)
}

/// The privilege qemu-server API2/Qemu.pm `$check_vm_modify_config_perm` checks for a
/// config key, on the VM (or its pool on a create): `None` for the keys it leaves to other
/// checks (drives, `tags`, `unused*`) or that only root may set (`args`, …; refused by the
/// module's own checks first). Any one of the privileges does.
pub fn config_key_privileges(key: &str) -> Option<&'static [&'static str]> {
    let numbered = |prefix: &str| {
        key.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    };
    Some(match key {
        // $cpuoptions, numa\d+
        "cores" | "cpu" | "cpulimit" | "cpuunits" | "numa" | "smp" | "sockets" | "vcpus"
        | "affinity" => &["VM.Config.CPU"],
        _ if numbered("numa") => &["VM.Config.CPU"],
        // $memoryoptions
        "memory" | "balloon" | "shares" | "allow-ksm" => &["VM.Config.Memory"],
        // $hwtypeoptions
        "acpi" | "hotplug" | "kvm" | "machine" | "scsihw" | "smbios1" | "tablet" | "vga"
        | "watchdog" | "audio0" | "rng0" => &["VM.Config.HWType"],
        // $generaloptions (startup also needs Sys.Modify on /: see startup_needs)
        "agent" | "autostart" | "bios" | "description" | "keyboard" | "localtime"
        | "migrate_downtime" | "migrate_speed" | "name" | "onboot" | "ostype" | "protection"
        | "reboot" | "startdate" | "startup" | "tdf" | "template" => &["VM.Config.Options"],
        // $vmpoweroptions
        "freeze" => &["VM.PowerMgmt"],
        // $diskoptions
        "boot" | "bootdisk" | "vmstatestorage" => &["VM.Config.Disk"],
        _ if numbered("net") => &["VM.Config.Network"],
        // $cloudinitoptions, ipconfig\d+: check_vm_perm(..., any => 1)
        "cicustom" | "cipassword" | "citype" | "ciuser" | "ciupgrade" | "nameserver"
        | "searchdomain" | "sshkeys" => &["VM.Config.Cloudinit", "VM.Config.Network"],
        _ if numbered("ipconfig") => &["VM.Config.Cloudinit", "VM.Config.Network"],
        // serialN: socket → VM.Config.HWType ($check_vm_create_serial_perm)
        _ if numbered("serial") => &["VM.Config.HWType"],
        _ => return None,
    })
}

/// The bridge paths of a `netN` value that qemu-server QemuServer.pm `check_bridge_access`
/// (pve-guest-common GuestHelpers.pm `check_vnet_access`) checks `SDN.Use` on: a plain
/// bridge is in zone `localnetwork`; with `tag`, the VLAN's path; with `trunks`, each VLAN's.
pub fn bridge_paths(net: &str) -> Vec<String> {
    let mut bridge = None;
    let mut tag = None;
    let mut trunks = None;
    for part in net.split(',') {
        match part.split_once('=') {
            Some(("bridge", value)) => bridge = Some(value),
            Some(("tag", value)) => tag = Some(value),
            Some(("trunks", value)) => trunks = Some(value),
            _ => {}
        }
    }
    let Some(bridge) = bridge else {
        return Vec::new();
    };
    let base = format!("/sdn/zones/localnetwork/{bridge}");
    let mut paths = Vec::new();
    if let Some(tag) = tag {
        paths.push(format!("{base}/{tag}"));
    }
    for range in trunks.into_iter().flat_map(|t| t.split(';')) {
        let (low, high) = range.split_once('-').unwrap_or((range, range));
        if let (Ok(low), Ok(high)) = (low.parse::<u32>(), high.parse::<u32>()) {
            for vlan in low..=high.min(low + 4094) {
                paths.push(format!("{base}/{vlan}"));
            }
        }
    }
    if paths.is_empty() {
        paths.push(base);
    }
    paths
}

/// What a volume named in `import-from` is, as pve-storage `parse_volname` reads its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImportSource {
    /// `local:import/x.qcow2`, `local:iso/x.img`: readable with `Datastore.AllocateSpace`
    /// or `Datastore.Audit` on its storage (Storage.pm `check_volume_access`).
    Content { storage: String },
    /// A VM's disk (`local-lvm:vm-100-disk-0`, `local:100/vm-100-disk-0.qcow2`):
    /// `VM.Clone` on its VM (API2/Qemu.pm `$check_storage_access`, "might be actively used").
    OwnedBy { vmid: u32 },
    /// An absolute path: root@pam only (Storage.pm `check_volume_access`).
    Path,
}

/// Reads an `import-from` value.
pub fn import_source(volume: &str) -> ImportSource {
    let Some((storage, name)) = volume.split_once(':').filter(|_| !volume.starts_with('/')) else {
        return ImportSource::Path;
    };
    let owner = name
        .split_once('/')
        .and_then(|(dir, _)| dir.parse::<u32>().ok())
        .or_else(|| {
            let file = name.rsplit('/').next().unwrap_or(name);
            let rest = file
                .strip_prefix("vm-")
                .or_else(|| file.strip_prefix("base-"))?;
            rest.split('-').next()?.parse::<u32>().ok()
        });
    match owner {
        Some(vmid) if !name.starts_with("import/") && !name.starts_with("iso/") => {
            ImportSource::OwnedBy { vmid }
        }
        _ => ImportSource::Content {
            storage: storage.to_string(),
        },
    }
}

/// The guest agent's reads (`network-get-interfaces`, `get-osinfo`): `VM.GuestAgent.Audit`
/// on PVE 9 (schema 9.1, with `VM.GuestAgent.Unrestricted`), `VM.Monitor` on PVE 8 (schema
/// 8.4). Neither version has the other's privilege, so one of them is asked for.
pub const AGENT_READ: &[&str] = &["VM.GuestAgent.Audit", "VM.Monitor"];

// ---- The other modules' needs. ----

/// What the `snapshot` module's steps need on `vm` (schema: `GET …/snapshot`: `VM.Audit`;
/// `POST …/snapshot`,
/// `DELETE …/snapshot/{name}`, `PUT …/snapshot/{name}/config`: `VM.Snapshot`;
/// `POST …/rollback`: `VM.Snapshot` or `VM.Snapshot.Rollback`; `start` after a rollback
/// starts the VM inside the task, no other check).
pub fn snapshot_needs(vmid: u32, steps: &[crate::snapshot::plan::Step]) -> Vec<Need> {
    use crate::snapshot::plan::Step;
    let path = vm_path(vmid);
    let reading = Need::one("VM.Audit", &path, "listing the snapshots");
    std::iter::once(reading)
        .chain(steps.iter().map(|step| match step {
            Step::Create(name) => Need::one("VM.Snapshot", &path, &format!("snapshot {name}")),
            Step::Describe(name, _) => Need::one(
                "VM.Snapshot",
                &path,
                &format!("the description of snapshot {name}"),
            ),
            Step::Rollback(name) => Need::any(
                &["VM.Snapshot", "VM.Snapshot.Rollback"],
                std::slice::from_ref(&path),
                &format!("rollback to {name}"),
            ),
            Step::Delete(name) => {
                Need::one("VM.Snapshot", &path, &format!("removing snapshot {name}"))
            }
        }))
        .collect()
}

/// What the `image` module's steps need (schema `GET …/content` to look first;
/// pve-storage API2/Storage/Status.pm
/// `download_url`: `Datastore.AllocateTemplate` on the storage and `Sys.Audit` with
/// `Sys.Modify` on `/` or `Sys.AccessNetwork` on the node; Content.pm `delete`:
/// `Datastore.Allocate` on the storage).
pub fn image_needs(storage: &str, node: &str, steps: &[crate::image::plan::Step]) -> Vec<Need> {
    use crate::image::plan::Step;
    let on_storage = storage_path(storage);
    // GET …/content: Datastore.Audit or Datastore.AllocateSpace (schema).
    let mut needs = vec![Need::any(
        &["Datastore.Audit", "Datastore.AllocateSpace"],
        std::slice::from_ref(&on_storage),
        "listing the storage",
    )];
    for step in steps {
        match step {
            Step::Delete => needs.push(Need::one(
                "Datastore.Allocate",
                &on_storage,
                "removing the image",
            )),
            Step::Download => {
                needs.push(Need::one(
                    "Datastore.AllocateTemplate",
                    &on_storage,
                    "the download",
                ));
                // (Sys.Audit and Sys.Modify on /) or Sys.AccessNetwork on the node, as two
                // needs of one of two.
                for on_root in ["Sys.Audit", "Sys.Modify"] {
                    needs.push(Need {
                        any_of: vec![
                            Grant {
                                privilege: "Sys.AccessNetwork",
                                path: node_path(node),
                            },
                            Grant {
                                privilege: on_root,
                                path: ROOT.into(),
                            },
                        ],
                        because: "the download (it lets PVE probe the node's network)".into(),
                    });
                }
            }
        }
    }
    needs
}

/// What the `vm_info` module needs for the VMs it listed (the listing shows only VMs with
/// `VM.Audit`; `GET …/config` and `…/snapshot` check `VM.Audit`): the guest agent's read
/// for each running VM when its `agent` fact is asked.
pub fn vm_info_needs(vmids: &[u32], agent: bool) -> Vec<Need> {
    let mut needs = Vec::new();
    for vmid in vmids {
        let path = vm_path(*vmid);
        needs.push(Need::one("VM.Audit", &path, &format!("VM {vmid}'s facts")));
        if agent {
            needs.push(Need::any(
                AGENT_READ,
                std::slice::from_ref(&path),
                &format!("VM {vmid}'s agent facts"),
            ));
        }
    }
    needs
}

// ---- The uses the Permissions guide documents. ----

/// Where a role is granted for a use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// `/pool/{pool}`, with the VMs and the storages the runs use as its members.
    Pool,
    /// `/` without propagate (HA, `startup`).
    Root,
    /// `/sdn/zones/localnetwork/{bridge}` for each bridge the VMs use.
    Bridge,
    /// `/nodes/{node}`.
    Node,
}

impl Scope {
    /// The ACL path in the guide's commands.
    pub fn path(self) -> &'static str {
        match self {
            Scope::Pool => "/pool/automation",
            Scope::Root => "/",
            Scope::Bridge => "/sdn/zones/localnetwork/vmbr0",
            Scope::Node => "/nodes/pve1",
        }
    }

    /// The scope of a path a module's need names.
    pub fn of(path: &str) -> Scope {
        if path == ROOT {
            Scope::Root
        } else if path.starts_with("/sdn/") {
            Scope::Bridge
        } else if path.starts_with("/nodes/") {
            Scope::Node
        } else {
            Scope::Pool
        }
    }
}

/// One use the guide documents: the privileges of its minimal role, each where it is
/// granted (for a privilege with a PVE 8 name, the PVE 9 name first, then PVE 8's).
pub struct Use {
    pub name: &'static str,
    /// The role's name in the guide's `pveum` commands.
    pub role: &'static str,
    pub privileges: &'static [(&'static str, Scope)],
    /// PVE 8's name for a privilege PVE 9 renamed, if the use needs it.
    pub on_pve8: &'static [(&'static str, &'static str)],
}

/// The minimal role for each use, as the module's needs compute it for a typical run of it
/// (`vm::privileges`'s tests build those runs and compare).
pub const USES: &[Use] = &[
    Use {
        name: "the quick start",
        role: "SankofaQuickStart",
        privileges: &[
            ("VM.Allocate", Scope::Pool),
            ("VM.Audit", Scope::Pool),
            ("VM.Config.CPU", Scope::Pool),
            ("VM.Config.Memory", Scope::Pool),
            ("VM.Config.Network", Scope::Pool),
            ("VM.Config.Options", Scope::Pool),
            ("VM.Config.Disk", Scope::Pool),
            ("VM.PowerMgmt", Scope::Pool),
            ("Datastore.AllocateSpace", Scope::Pool),
            ("Datastore.AllocateTemplate", Scope::Pool),
            ("SDN.Use", Scope::Bridge),
            ("Sys.AccessNetwork", Scope::Node),
        ],
        on_pve8: &[],
    },
    Use {
        name: "create a VM from an image",
        role: "SankofaCreate",
        privileges: &[
            ("VM.Allocate", Scope::Pool),
            ("VM.Audit", Scope::Pool),
            ("VM.Config.CPU", Scope::Pool),
            ("VM.Config.Memory", Scope::Pool),
            ("VM.Config.Network", Scope::Pool),
            ("VM.Config.Options", Scope::Pool),
            ("VM.Config.Disk", Scope::Pool),
            ("VM.PowerMgmt", Scope::Pool),
            ("Datastore.AllocateSpace", Scope::Pool),
            ("SDN.Use", Scope::Bridge),
        ],
        on_pve8: &[],
    },
    Use {
        name: "clone a template",
        role: "SankofaClone",
        privileges: &[
            ("VM.Allocate", Scope::Pool),
            ("VM.Audit", Scope::Pool),
            ("VM.Clone", Scope::Pool),
            ("VM.Config.CPU", Scope::Pool),
            ("VM.Config.Memory", Scope::Pool),
            ("VM.Config.Options", Scope::Pool),
            ("VM.PowerMgmt", Scope::Pool),
            ("Datastore.AllocateSpace", Scope::Pool),
            ("SDN.Use", Scope::Bridge),
        ],
        on_pve8: &[],
    },
    Use {
        name: "cloud-init",
        role: "SankofaCloudInit",
        privileges: &[
            ("VM.Allocate", Scope::Pool),
            ("VM.Audit", Scope::Pool),
            ("VM.Config.Cloudinit", Scope::Pool),
            ("VM.Config.Disk", Scope::Pool),
            ("VM.Config.Network", Scope::Pool),
            ("VM.Config.Options", Scope::Pool),
            ("Datastore.AllocateSpace", Scope::Pool),
            ("SDN.Use", Scope::Bridge),
        ],
        on_pve8: &[],
    },
    Use {
        name: "HA",
        role: "SankofaHA",
        privileges: &[
            ("VM.Audit", Scope::Pool),
            ("Sys.Audit", Scope::Root),
            ("Sys.Console", Scope::Root),
        ],
        on_pve8: &[],
    },
    Use {
        name: "migrate",
        role: "SankofaMigrate",
        privileges: &[
            ("VM.Audit", Scope::Pool),
            ("VM.Migrate", Scope::Pool),
            ("VM.Config.Disk", Scope::Pool),
            ("Datastore.AllocateSpace", Scope::Pool),
        ],
        on_pve8: &[],
    },
    Use {
        name: "snapshots",
        role: "SankofaSnapshot",
        privileges: &[("VM.Audit", Scope::Pool), ("VM.Snapshot", Scope::Pool)],
        on_pve8: &[],
    },
    Use {
        name: "image download",
        role: "SankofaImage",
        privileges: &[
            ("Datastore.Audit", Scope::Pool),
            ("Datastore.AllocateTemplate", Scope::Pool),
            ("Sys.AccessNetwork", Scope::Node),
        ],
        on_pve8: &[],
    },
    Use {
        name: "vm_info and the inventory",
        role: "SankofaInventory",
        privileges: &[
            ("VM.Audit", Scope::Pool),
            ("VM.GuestAgent.Audit", Scope::Pool),
        ],
        on_pve8: &[("VM.GuestAgent.Audit", "VM.Monitor")],
    },
];

/// The smallest role that meets `needs` when each scope's privileges are granted there (a
/// pool's role reaches its VMs and storages): every need of one privilege, and for a need of
/// one of several, one the role has already, else the first.
pub fn minimal_role(needs: &[Need]) -> BTreeSet<(&'static str, Scope)> {
    let choice = |grant: &Grant| (grant.privilege, Scope::of(&grant.path));
    let mut role: BTreeSet<(&'static str, Scope)> = needs
        .iter()
        .filter(|need| {
            let mut choices = need.any_of.iter().map(choice);
            let first = choices.next();
            choices.all(|other| Some(other) == first)
        })
        .filter_map(|need| need.any_of.first().map(choice))
        .collect();
    for need in needs {
        let met = need
            .any_of
            .iter()
            .any(|grant| role.contains(&choice(grant)));
        if !met && let Some(first) = need.any_of.first() {
            role.insert(choice(first));
        }
    }
    role
}

/// The privileges of `role`'s use granted at `scope`, space-separated, as `pveum` takes them.
fn privileges_at(usage: &Use, scope: Scope, pve8: bool) -> Vec<&'static str> {
    usage
        .privileges
        .iter()
        .filter(|(_, at)| *at == scope)
        .map(|(privilege, _)| {
            let renamed = usage
                .on_pve8
                .iter()
                .find(|(nine, _)| nine == privilege)
                .map(|(_, eight)| *eight);
            match renamed {
                Some(eight) if pve8 => eight,
                _ => *privilege,
            }
        })
        .collect()
}

/// Where the generated part of the Permissions guide begins and ends.
pub const GUIDE_BEGIN: &str = ".. BEGIN generated from src/privileges.rs";
pub const GUIDE_END: &str = ".. END generated";

/// The generated part of `docs/docsite/rst/guide_permissions.rst`: for each use, its
/// privileges and the `pveum` commands that grant them to a privilege-separated token on a
/// pool (and, where PVE checks them elsewhere, on `/`, a bridge or a node).
pub fn guide() -> String {
    let mut out = String::new();
    for usage in USES {
        let title = capitalised(usage.name);
        let _ = writeln!(out, "{title}\n{}\n", "-".repeat(title.chars().count()));
        let _ = writeln!(out, "Role ``{}``:\n", usage.role);
        let scopes: BTreeSet<Scope> = usage.privileges.iter().map(|(_, s)| *s).collect();
        for scope in &scopes {
            let _ = writeln!(
                out,
                "- on ``{}``: {}",
                scope.path(),
                privileges_at(usage, *scope, false)
                    .iter()
                    .map(|p| format!("``{p}``"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for (nine, eight) in usage.on_pve8 {
            let _ = writeln!(out, "- on PVE 8, ``{eight}`` in place of ``{nine}``");
        }
        let _ = writeln!(out, "\n.. code-block:: console\n");
        for scope in &scopes {
            let role = role_name(usage, *scope, &scopes);
            let _ = writeln!(
                out,
                "   pveum role add {role} --privs \"{}\"",
                privileges_at(usage, *scope, false).join(" ")
            );
        }
        for scope in &scopes {
            let role = role_name(usage, *scope, &scopes);
            let propagate = if *scope == Scope::Root { "0" } else { "1" };
            let _ = writeln!(
                out,
                "   pveum acl modify {} --roles {role} --users automation@pve --tokens 'automation@pve!ansible' --propagate {propagate}",
                scope.path()
            );
        }
        let _ = writeln!(out);
    }
    out
}

/// The role of a use at one scope: the use's role, suffixed when it spans several scopes
/// (`SankofaCreate` on the pool, `SankofaCreateBridge` on the bridge).
fn role_name(usage: &Use, scope: Scope, scopes: &BTreeSet<Scope>) -> String {
    if scope == Scope::Pool || scopes.len() == 1 {
        return usage.role.to_string();
    }
    let suffix = match scope {
        Scope::Pool => "",
        Scope::Root => "Root",
        Scope::Bridge => "Bridge",
        Scope::Node => "Node",
    };
    format!("{}{suffix}", usage.role)
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests;
