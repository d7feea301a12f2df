//! The `vm` module's needs: a typical run of each use the Permissions guide documents needs
//! exactly that use's role ([`crate::privileges::USES`]), and each option's need names it.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::*;
use crate::ansible::protocol::Invocation;
use crate::ansible::spec::{Env, validate};
use crate::privileges::{Scope, USES};
use crate::pve::api::access::Permissions;
use crate::vm::desired::desired;
use crate::vm::plan::plan;

struct NoEnv;

impl Env for NoEnv {
    fn get(&self, _: &str) -> Option<String> {
        None
    }
}

/// The desired VM the module makes of these options (connection options added).
pub(super) fn from_options(options: Value) -> Desired {
    let mut raw: Map<String, Value> = options.as_object().cloned().unwrap();
    raw.insert("api_host".into(), json!("pve.example"));
    raw.insert("api_user".into(), json!("automation@pve"));
    raw.insert("api_password".into(), json!("secret"));
    let params = validate(&crate::vm::spec::argument_spec(), &raw, &NoEnv, false).unwrap();
    desired(&Invocation {
        ctx: Default::default(),
        params,
    })
    .unwrap()
}

pub(super) fn existing(vmid: u32, node: &str, config: &[(&str, &str)], running: bool) -> Current {
    Current {
        vmid,
        node: node.into(),
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        raw: Value::Null,
        running,
    }
}

/// What a run needs, as the guide's roles grant it: each need's first choice, where.
fn role_of(needs: &[Need]) -> BTreeSet<(&'static str, Scope)> {
    crate::privileges::minimal_role(needs)
}

fn use_role(name: &str) -> BTreeSet<(&'static str, Scope)> {
    let usage = USES.iter().find(|u| u.name == name).unwrap();
    usage.privileges.iter().copied().collect()
}

pub(super) fn needs_of(
    desired: &Desired,
    cur: Option<&Current>,
    source: Option<CloneSourceConfig>,
) -> Vec<Need> {
    let planned = plan(desired, cur).unwrap();
    needs(&Run {
        desired,
        plan: &planned,
        cur,
        clone_source: source,
    })
}

fn create_options() -> Value {
    json!({
        "vmid": 100, "name": "web1", "node": "pve1", "pool": "automation",
        "state": "started", "cores": 2, "memory": 2048,
        "net": [{"model": "virtio", "bridge": "vmbr0"}],
        "disks": [{"slot": "scsi0", "storage": "local-lvm",
                   "import_from": "local:import/noble.qcow2", "size": "8G"}],
    })
}

#[test]
fn creating_from_an_image_needs_the_create_role() {
    let desired = from_options(create_options());
    let needs = needs_of(&desired, None, None);
    assert_eq!(
        role_of(&needs),
        use_role("create a VM from an image"),
        "{needs:#?}"
    );
    // On the VM or its pool (create_vm checks either).
    let allocate = needs.iter().find(|n| n.because == "create").unwrap();
    assert_eq!(
        allocate.to_string(),
        "create needs VM.Allocate on /vms/100 or /pool/automation"
    );
    let sdn = needs
        .iter()
        .find(|n| n.any_of[0].privilege == "SDN.Use")
        .unwrap();
    assert_eq!(sdn.any_of[0].path, "/sdn/zones/localnetwork/vmbr0");
    let import = needs
        .iter()
        .find(|n| n.any_of[0].path == "/storage/local")
        .unwrap();
    assert!(
        import
            .because
            .contains("import from local:import/noble.qcow2"),
        "{import}"
    );
}

#[test]
fn cloning_a_template_needs_the_clone_role() {
    let desired = from_options(json!({
        "name": "web2", "node": "pve1", "pool": "automation", "state": "started",
        "clone": {"vmid": 9000}, "cores": 2, "memory": 2048,
    }));
    let source: BTreeMap<String, String> = [
        ("scsi0", "local-lvm:base-9000-disk-0,size=8G"),
        ("ide2", "local-lvm:vm-9000-cloudinit,media=cdrom"),
        ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
        ("template", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let needs = needs_of(
        &desired,
        None,
        Some(CloneSourceConfig {
            vmid: 9000,
            config: &source,
        }),
    );
    assert_eq!(role_of(&needs), use_role("clone a template"), "{needs:#?}");
    assert!(
        needs
            .iter()
            .any(|n| n.to_string() == "clone of VM 9000 needs VM.Clone on /vms/9000"),
        "{needs:#?}"
    );
}

#[test]
fn cloud_init_needs_the_cloud_init_role() {
    let desired = from_options(json!({
        "vmid": 100, "name": "web1", "node": "pve1", "pool": "automation", "state": "present",
        "net": [{"model": "virtio", "bridge": "vmbr0"}], "ciuser": "admin", "ipconfig": [{"ip": "dhcp"}],
        "cloudinit_storage": "local-lvm",
        "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "4G"}],
    }));
    let needs = needs_of(&desired, None, None);
    assert_eq!(role_of(&needs), use_role("cloud-init"), "{needs:#?}");
    // A cloud-init option takes either privilege; a stopped VM's drive is regenerated, which
    // only VM.Config.Cloudinit allows.
    let ciuser = needs.iter().find(|n| n.because == "ciuser").unwrap();
    assert_eq!(
        ciuser.wanted(),
        "VM.Config.Cloudinit or VM.Config.Network on /vms/100 or /pool/automation"
    );
    assert!(
        needs
            .iter()
            .any(|n| n.because == "regenerating the cloud-init drive")
    );
}

#[test]
fn ha_needs_the_ha_role() {
    let desired = from_options(json!({"vmid": 100, "node": "pve1", "ha": {"state": "started"}}));
    let cur = existing(100, "pve1", &[("name", "web1")], true);
    let needs = needs_of(&desired, Some(&cur), None);
    assert_eq!(role_of(&needs), use_role("HA"), "{needs:#?}");
}

#[test]
fn migrating_needs_the_migrate_role() {
    let desired = from_options(json!({
        "vmid": 100, "node": "pve2", "migrate": true, "target_storage": "local-lvm",
    }));
    let cur = existing(
        100,
        "pve1",
        &[("scsi0", "local-lvm:vm-100-disk-0,size=8G")],
        false,
    );
    let needs = needs_of(&desired, Some(&cur), None);
    assert_eq!(role_of(&needs), use_role("migrate"), "{needs:#?}");
}

#[test]
fn a_vm_as_asked_needs_nothing_but_reading() {
    let desired = from_options(json!({"vmid": 100, "node": "pve1", "cores": 2}));
    let cur = existing(100, "pve1", &[("cores", "2")], false);
    assert_eq!(needs_of(&desired, Some(&cur), None), Vec::new());
}

#[test]
fn each_option_names_what_it_needs() {
    let desired = from_options(json!({
        "vmid": 100, "node": "pve1", "state": "started", "tags": ["prod"],
        "extra_config": {"startup": "order=1"}, "cores": 4,
        "net": [{"model": "virtio", "bridge": "vmbr1"}],
    }));
    let cur = existing(
        100,
        "pve1",
        &[
            ("cores", "2"),
            ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
        ],
        false,
    );
    let needs = needs_of(&desired, Some(&cur), None);
    let text: Vec<String> = needs.iter().map(Need::to_string).collect();
    for expected in [
        "tags: prod needs VM.Config.Options on /vms/100",
        "startup (PVE treats it as host-wide) needs Sys.Modify on /",
        "cores needs VM.Config.CPU on /vms/100",
        "net0 (its bridge) needs SDN.Use on /sdn/zones/localnetwork/vmbr1",
        "net0 (its bridge) needs SDN.Use on /sdn/zones/localnetwork/vmbr0",
        "start needs VM.PowerMgmt on /vms/100",
    ] {
        assert!(
            text.iter().any(|t| t == expected),
            "{expected} not in {text:#?}"
        );
    }
}

#[test]
fn a_role_on_the_pool_meets_a_create_in_it_and_missing_names_each_gap() {
    let desired = from_options(create_options());
    let needs = needs_of(&desired, None, None);
    let mut pool: Map<String, Value> = Map::new();
    for (privilege, scope) in use_role("create a VM from an image") {
        if scope == Scope::Pool {
            pool.insert(privilege.into(), json!(0));
        }
    }
    let held = |pool: &Map<String, Value>| {
        Permissions::from_answer(&json!({
            "/pool/automation": pool,
            "/storage/local": pool,
            "/storage/local-lvm": pool,
            "/sdn/zones/localnetwork/vmbr0": {"SDN.Use": 1},
        }))
    };
    assert_eq!(crate::privileges::missing(&needs, &held(&pool)), Vec::new());
    let mut without = pool.clone();
    without.remove("VM.PowerMgmt");
    let missing = crate::privileges::missing(&needs, &held(&without));
    let text: Vec<String> = missing.iter().map(Need::to_string).collect();
    assert_eq!(
        text,
        vec!["start needs VM.PowerMgmt on /vms/100 or /pool/automation"]
    );
}

/// The README's quick start: the image downloaded, then a VM made from it with cloud-init,
/// started, in the pool the role is granted on.
#[test]
fn the_quick_start_needs_its_role() {
    let desired = from_options(json!({
        "vmid": 100, "name": "web1", "node": "pve1", "pool": "automation", "state": "started",
        "cores": 2, "memory": 2048,
        "disks": [{"slot": "scsi0", "storage": "local-lvm",
                   "import_from": "local:import/noble-server-cloudimg-amd64.qcow2", "size": "20G"}],
        "net": [{"bridge": "vmbr0"}], "ciuser": "ubuntu", "ipconfig": [{"ip": "dhcp"}],
    }));
    let mut all = needs_of(&desired, None, None);
    all.extend(crate::privileges::image_needs(
        "local",
        "pve1",
        &[crate::image::plan::Step::Download],
    ));
    assert_eq!(role_of(&all), use_role("the quick start"));
}

#[test]
fn media_changes_and_efi_tpm_adds_name_what_they_need() {
    // qemu-server update_vm: $check_drive_perms (a CD-ROM: VM.Config.CDROM; a disk:
    // VM.Config.Disk), $check_storage_access (an ISO: check_volume_access; a new volume:
    // Datastore.AllocateSpace).
    let desired = from_options(json!({
        "vmid": 100, "node": "pve1", "bios": "ovmf",
        "cdroms": [{"slot": "ide0", "iso": "local:iso/debian-12.iso"},
                   {"slot": "ide1", "state": "absent"}],
        "efidisk": {"storage": "local-lvm"},
        "tpmstate": {"storage": "local-lvm", "version": "v2.0", "force": true},
    }));
    let cur = existing(
        100,
        "pve1",
        &[
            ("bios", "ovmf"),
            ("ide0", "none,media=cdrom"),
            ("ide1", "local:iso/old.iso,media=cdrom"),
            ("tpmstate0", "local-lvm:vm-100-disk-1,size=4M,version=v1.2"),
        ],
        false,
    );
    let needs = needs_of(&desired, Some(&cur), None);
    let text: Vec<String> = needs.iter().map(Need::to_string).collect();
    for expected in [
        "ide0 needs VM.Config.CDROM on /vms/100",
        "ide0 needs Datastore.AllocateSpace or Datastore.Audit or Datastore.Allocate on /storage/local",
        "removing ide1 needs VM.Config.CDROM on /vms/100",
        "efidisk0 needs VM.Config.Disk on /vms/100",
        "efidisk0 (a new disk on local-lvm) needs Datastore.AllocateSpace on /storage/local-lvm",
        "removing tpmstate0 needs VM.Config.Disk on /vms/100",
        "tpmstate0 (a new disk on local-lvm) needs Datastore.AllocateSpace on /storage/local-lvm",
    ] {
        assert!(
            text.iter().any(|t| t == expected),
            "{expected} not in {text:#?}"
        );
    }
}
