//! The table's pure parts: reading PVE's values, what is missing, the words of a failure,
//! and the guide rendered from the uses.

use serde_json::json;

use super::*;

fn held(answer: serde_json::Value) -> Permissions {
    Permissions::from_answer(&answer)
}

#[test]
fn config_keys_take_the_privileges_pve_checks() {
    assert_eq!(config_key_privileges("cores"), Some(&["VM.Config.CPU"][..]));
    assert_eq!(config_key_privileges("numa1"), Some(&["VM.Config.CPU"][..]));
    assert_eq!(
        config_key_privileges("balloon"),
        Some(&["VM.Config.Memory"][..])
    );
    assert_eq!(
        config_key_privileges("vga"),
        Some(&["VM.Config.HWType"][..])
    );
    assert_eq!(
        config_key_privileges("onboot"),
        Some(&["VM.Config.Options"][..])
    );
    assert_eq!(config_key_privileges("boot"), Some(&["VM.Config.Disk"][..]));
    assert_eq!(
        config_key_privileges("net3"),
        Some(&["VM.Config.Network"][..])
    );
    assert_eq!(
        config_key_privileges("ipconfig0"),
        Some(&["VM.Config.Cloudinit", "VM.Config.Network"][..])
    );
    assert_eq!(
        config_key_privileges("sshkeys"),
        Some(&["VM.Config.Cloudinit", "VM.Config.Network"][..])
    );
    for left_to_other_checks in ["scsi0", "tags", "unused0", "args", "net", "netx"] {
        assert_eq!(
            config_key_privileges(left_to_other_checks),
            None,
            "{left_to_other_checks}"
        );
    }
}

#[test]
fn a_nic_needs_its_bridge_or_its_vlans() {
    assert_eq!(
        bridge_paths("virtio=BC:24:11:00:00:01,bridge=vmbr0"),
        vec!["/sdn/zones/localnetwork/vmbr0"]
    );
    assert_eq!(
        bridge_paths("virtio,bridge=vmbr0,tag=20"),
        vec!["/sdn/zones/localnetwork/vmbr0/20"]
    );
    assert_eq!(
        bridge_paths("virtio,bridge=vmbr0,trunks=10;12-13"),
        vec![
            "/sdn/zones/localnetwork/vmbr0/10",
            "/sdn/zones/localnetwork/vmbr0/12",
            "/sdn/zones/localnetwork/vmbr0/13"
        ]
    );
    assert_eq!(bridge_paths("virtio"), Vec::<String>::new());
}

#[test]
fn import_sources_are_read_as_pve_storage_reads_them() {
    assert_eq!(
        import_source("local:import/noble.qcow2"),
        ImportSource::Content {
            storage: "local".into()
        }
    );
    assert_eq!(
        import_source("local:iso/seed.img"),
        ImportSource::Content {
            storage: "local".into()
        }
    );
    assert_eq!(
        import_source("local-lvm:vm-105-disk-0"),
        ImportSource::OwnedBy { vmid: 105 }
    );
    assert_eq!(
        import_source("local:9000/base-9000-disk-0.qcow2"),
        ImportSource::OwnedBy { vmid: 9000 }
    );
    assert_eq!(import_source("/var/lib/images/x.qcow2"), ImportSource::Path);
}

#[test]
fn missing_names_each_unmet_need_once() {
    let needs = vec![
        Need::one("VM.PowerMgmt", "/vms/100", "start"),
        Need::any(
            &["VM.Config.Cloudinit", "VM.Config.Network"],
            &["/vms/100".to_string()],
            "ciuser",
        ),
        Need::one("VM.PowerMgmt", "/vms/100", "start"),
        Need::one("Sys.Console", "/", "ha"),
    ];
    let token = held(json!({"/vms/100": {"VM.Config.Network": 0}}));
    let lacking = missing(&needs, &token);
    assert_eq!(
        lacking.iter().map(Need::to_string).collect::<Vec<_>>(),
        vec![
            "start needs VM.PowerMgmt on /vms/100",
            "ha needs Sys.Console on /"
        ]
    );
    let message = missing_message(&lacking);
    assert!(message.contains("nothing was changed"), "{message}");
    assert!(
        message.contains("start needs VM.PowerMgmt on /vms/100; ha needs Sys.Console on /"),
        "{message}"
    );
    let root = held(json!({"/": {"VM.PowerMgmt": 1, "Sys.Console": 1, "VM.Config.Cloudinit": 1}}));
    assert_eq!(missing(&needs, &root), Vec::new());
}

#[test]
fn a_need_of_one_of_several_paths_and_privileges_says_so() {
    let need = Need::any(
        &["VM.Allocate"],
        &["/vms/100".to_string(), "/pool/web".to_string()],
        "create",
    );
    assert_eq!(
        need.to_string(),
        "create needs VM.Allocate on /vms/100 or /pool/web"
    );
    let download = &image_needs("local", "pve1", &[crate::image::plan::Step::Download])[2];
    assert_eq!(
        download.wanted(),
        "Sys.AccessNetwork on /nodes/pve1 or Sys.Audit on /"
    );
}

fn forbidden(message: &str) -> anyhow::Error {
    anyhow::Error::new(ApiError::Http {
        status: 403,
        message: message.into(),
        errors: Default::default(),
    })
    .context("starting VM 100 on pve1")
}

#[test]
fn a_403_is_told_in_the_words_of_the_table() {
    let told = explain_refusal(forbidden(
        "Permission check failed (/vms/100, VM.PowerMgmt)",
    ));
    let text = told.to_string();
    assert!(
        text.starts_with("starting VM 100 on pve1 needs VM.PowerMgmt on /vms/100"),
        "{text}"
    );
    assert!(text.contains("src/privileges.rs"), "{text}");
    let tag = explain_refusal(forbidden(
        "Permission check failed (/, Sys.Modify for modifying tag 'prod')",
    ));
    assert!(
        tag.to_string()
            .starts_with("tags: prod needs Sys.Modify on / (PVE treats it as privileged"),
        "{tag}"
    );
    let other = explain_refusal(anyhow!("VM 100 is locked (backup)"));
    assert_eq!(other.to_string(), "VM 100 is locked (backup)");
}

#[test]
fn snapshot_steps_need_the_snapshot_privileges() {
    use crate::snapshot::plan::Step;
    let needs = snapshot_needs(100, &[Step::Create("a".into()), Step::Rollback("a".into())]);
    let text: Vec<String> = needs.iter().map(Need::to_string).collect();
    assert_eq!(
        text,
        vec![
            "listing the snapshots needs VM.Audit on /vms/100",
            "snapshot a needs VM.Snapshot on /vms/100",
            "rollback to a needs VM.Snapshot or VM.Snapshot.Rollback on /vms/100",
        ]
    );
}

/// The uses the `vm` module's tests do not build: the image, snapshot and vm_info needs of a
/// typical run are the guide's roles.
#[test]
fn the_other_modules_need_their_uses_roles() {
    let role = |needs: &[Need]| -> BTreeSet<(&'static str, Scope)> { minimal_role(needs) };
    let of = |name: &str| -> BTreeSet<(&'static str, Scope)> {
        USES.iter()
            .find(|u| u.name == name)
            .unwrap()
            .privileges
            .iter()
            .copied()
            .collect()
    };
    use crate::image::plan::Step as ImageStep;
    use crate::snapshot::plan::Step as SnapshotStep;
    assert_eq!(
        role(&image_needs("local", "pve1", &[ImageStep::Download])),
        of("image download")
    );
    assert_eq!(
        role(&snapshot_needs(
            100,
            &[
                SnapshotStep::Create("a".into()),
                SnapshotStep::Rollback("a".into()),
                SnapshotStep::Delete("b".into())
            ]
        )),
        of("snapshots")
    );
    assert_eq!(
        role(&vm_info_needs(&[100, 101], true)),
        of("vm_info and the inventory")
    );
}

#[test]
fn the_guide_grants_each_use_on_the_pool_with_privsep() {
    let text = guide();
    for usage in USES {
        assert!(
            text.contains(&format!("Role ``{}``", usage.role)),
            "{}",
            usage.name
        );
    }
    assert!(
        text.contains("pveum role add SankofaCreate --privs \"VM.Allocate VM.Audit VM.Config.CPU")
    );
    assert!(
        text.contains("pveum acl modify /sdn/zones/localnetwork/vmbr0 --roles SankofaCreateBridge")
    );
    assert!(text.contains("- on PVE 8, ``VM.Monitor`` in place of ``VM.GuestAgent.Audit``"));
    assert!(
        text.contains("pveum acl modify / --roles SankofaHA"),
        "{text}"
    );
}

/// The Permissions guide's roles are [`guide`]'s, between its markers
/// (`SANKOFA_WRITE_GUIDE=1` writes them).
#[test]
fn the_permissions_guide_is_rendered_from_the_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/docsite/rst/guide_permissions.rst");
    let text = std::fs::read_to_string(&path).unwrap();
    let begin = text.find(GUIDE_BEGIN).expect("the guide's BEGIN marker");
    let start = begin + text[begin..].find('\n').unwrap() + 1;
    let end = text.find(GUIDE_END).expect("the guide's END marker");
    let wanted = format!("\n{}", guide());
    if std::env::var_os("SANKOFA_WRITE_GUIDE").is_some() {
        let rewritten = format!("{}{wanted}{}", &text[..start], &text[end..]);
        std::fs::write(&path, rewritten).unwrap();
        return;
    }
    assert_eq!(
        &text[start..end],
        wanted,
        "docs/docsite/rst/guide_permissions.rst differs from the table: run \
         SANKOFA_WRITE_GUIDE=1 cargo test -p sankofa-proxmox --lib privileges"
    );
}

/// The README's quick start grants the quick start's role, as the guide renders it.
#[test]
fn the_readme_grants_the_quick_starts_role() {
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let rendered = guide();
    let quick_start = rendered
        .split("Create a VM from an image\n")
        .next()
        .unwrap();
    let own: Vec<&str> = quick_start
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("pveum ") && line.contains("SankofaQuickStart"))
        .collect();
    assert!(!own.is_empty(), "{quick_start}");
    for command in own {
        assert!(readme.contains(command), "the README lacks: {command}");
    }
}
