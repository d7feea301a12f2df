//! The `vm` module's `cdroms`, and `efidisk`/`tpmstate` on an existing VM, against pve-sim,
//! for a stopped and a running VM: the config PVE ends with, a re-run unchanged, check and
//! diff mode before any write, and the refusals (each before any write, naming the way out).

use crate::support::*;
use serde_json::{Value, json};

/// Puts an ISO image on `local` of pve1 (`local:iso/<name>`), as an upload would.
fn put_iso(sim: &Sim, name: &str) {
    let dir = sim.data().join("nodes/pve1/local/template/iso");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), vec![0u8; 64 << 10]).unwrap();
}

fn base(sim: &Sim, extra: Value) -> Value {
    merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 100, "name": "media", "memory": 512,
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "64M"}]}),
        extra,
    ])
}

/// The VM's config as PVE shows it (pending values applied).
fn config(sim: &Sim) -> Value {
    sim.get("/nodes/pve1/qemu/100/config")["data"].clone()
}

/// The VM's config as it runs now, without its pending values.
fn current(sim: &Sim) -> Value {
    sim.get("/nodes/pve1/qemu/100/config?current=1")["data"].clone()
}

/// Runs `args` twice: the first changes the VM, the second is unchanged.
fn converges(args: Value) -> Value {
    let first = ok(run(args.clone()));
    assert_eq!(first["changed"], true, "{first}");
    let again = ok(run(args));
    assert_eq!(again["changed"], false, "{again}");
    first
}

fn msg(r: &Value) -> String {
    r["msg"].as_str().unwrap_or_default().to_string()
}

#[test]
fn iso_media_are_inserted_changed_ejected_and_drives_removed_on_a_stopped_vm() {
    let sim = Sim::start(&[], &[]);
    put_iso(&sim, "a.iso");
    put_iso(&sim, "b.iso");
    let cd = |slot: &str, iso: &str| json!({"cdroms": [{"slot": slot, "iso": iso}]});
    // At create: the drive is in the create's config.
    let r = converges(base(&sim, cd("ide2", "local:iso/a.iso")));
    assert_eq!(task_types(&r), ["qmcreate"], "{r}");
    assert!(
        config(&sim)["ide2"]
            .as_str()
            .unwrap()
            .starts_with("local:iso/a.iso,media=cdrom"),
        "{}",
        config(&sim)
    );
    // Check and diff mode show the change, and write nothing.
    let writes = sim.writes().len();
    let r = ok(run(merge(&[
        base(&sim, cd("ide2", "local:iso/b.iso")),
        json!({"_ansible_check_mode": true, "_ansible_diff": true}),
    ])));
    assert_eq!(r["changed"], true);
    assert!(
        r["diff"]["before"]["ide2"]
            .as_str()
            .unwrap()
            .starts_with("local:iso/a.iso"),
        "{r}"
    );
    assert_eq!(r["diff"]["after"]["ide2"], "local:iso/b.iso,media=cdrom");
    assert_eq!(sim.writes().len(), writes);
    // Changed, ejected (an empty drive), removed.
    converges(base(&sim, cd("ide2", "local:iso/b.iso")));
    assert!(
        config(&sim)["ide2"]
            .as_str()
            .unwrap()
            .starts_with("local:iso/b.iso")
    );
    converges(base(&sim, cd("ide2", "none")));
    assert_eq!(config(&sim)["ide2"], "none,media=cdrom");
    // A second drive added beside it, then the first removed.
    converges(base(&sim, cd("sata1", "local:iso/a.iso")));
    assert!(
        config(&sim)["sata1"]
            .as_str()
            .unwrap()
            .starts_with("local:iso/a.iso")
    );
    converges(base(
        &sim,
        json!({"cdroms": [{"slot": "ide2", "state": "absent"}]}),
    ));
    let c = config(&sim);
    assert!(c.get("ide2").is_none(), "{c}");
    assert!(c["sata1"].is_string(), "{c}");
    assert!(c["scsi0"].is_string(), "{c}");
}

#[test]
fn media_change_at_once_on_a_running_vm_and_a_new_ide_drive_waits_for_a_restart() {
    let sim = Sim::start(&[], &[]);
    put_iso(&sim, "a.iso");
    put_iso(&sim, "b.iso");
    let started = |cdroms: Value| base(&sim, json!({"cdroms": cdroms, "state": "started"}));
    converges(started(json!([{"slot": "ide2", "iso": "none"}])));
    // A medium into the running VM's drive: PVE changes it at once (change_medium).
    let r = converges(started(json!([{"slot": "ide2", "iso": "local:iso/a.iso"}])));
    assert_eq!(r["restart_needed"], false, "{r}");
    assert_eq!(r["pending"], json!([]), "{r}");
    assert_eq!(r["config"]["boot"], "order=scsi0;ide2", "{r}");
    assert!(
        current(&sim)["ide2"]
            .as_str()
            .unwrap()
            .starts_with("local:iso/a.iso,media=cdrom"),
        "{}",
        current(&sim)
    );
    converges(started(json!([{"slot": "ide2", "iso": "local:iso/b.iso"}])));
    assert!(
        current(&sim)["ide2"]
            .as_str()
            .unwrap()
            .starts_with("local:iso/b.iso")
    );
    // Check mode on the running VM: a medium change is not predicted to wait.
    let r = ok(run(merge(&[
        started(json!([{"slot": "ide2", "iso": "none"}])),
        json!({"_ansible_check_mode": true}),
    ])));
    assert_eq!(r["restart_needed"], false, "{r}");
    // A new IDE drive waits for the next start (vmconfig_hotplug_pending skips new ide and
    // sata drives): reported pending; restart: when_needed applies it.
    let two = json!([{"slot": "ide2", "iso": "local:iso/b.iso"}, {"slot": "ide3", "iso": "local:iso/a.iso"}]);
    let r = ok(run(started(two.clone())));
    assert_eq!(r["changed"], true);
    assert_eq!(r["restart_needed"], true, "{r}");
    // PVE appends the new CD-ROM to the boot order too (update_vm), pending as well.
    assert_eq!(r["pending"], json!(["boot", "ide3"]), "{r}");
    assert!(current(&sim).get("ide3").is_none(), "{}", current(&sim));
    let again = ok(run(started(two.clone())));
    assert_eq!(again["changed"], false, "{again}");
    let r = ok(run(merge(&[
        started(two),
        json!({"restart": "when_needed"}),
    ])));
    assert_eq!(r["restart_needed"], false, "{r}");
    assert!(
        current(&sim)["ide3"]
            .as_str()
            .unwrap()
            .starts_with("local:iso/a.iso")
    );
}

#[test]
fn cdroms_refuse_disks_bad_isos_and_storages_without_iso_content_before_any_write() {
    let sim = Sim::start(&[], &[]);
    put_iso(&sim, "a.iso");
    converges(base(&sim, json!({})));
    let writes = sim.writes().len();
    // The runs name no disks: scsi0 is the VM's own.
    let refused = |cdroms: Value| {
        let mut args = base(&sim, json!({"cdroms": cdroms}));
        args.as_object_mut().unwrap().remove("disks");
        msg(&failed(run(args)))
    };
    let m = refused(json!([{"slot": "scsi0", "iso": "local:iso/a.iso"}]));
    assert!(m.contains("scsi0 of VM 100 is a disk"), "{m}");
    let m = refused(json!([{"slot": "ide2", "iso": "local:iso/a.qcow2"}]));
    assert!(m.contains("cdroms[0].iso must be an ISO volume"), "{m}");
    let m = refused(json!([{"slot": "virtio1", "iso": "none"}]));
    assert!(
        m.contains("cdroms[0].slot must be a slot that holds a CD-ROM"),
        "{m}"
    );
    let m = refused(json!([{"slot": "ide2"}]));
    assert!(
        m.contains("cdroms[0].iso is required with state: present"),
        "{m}"
    );
    let m = refused(json!([{"slot": "ide2", "iso": "local-lvm:iso/a.iso"}]));
    assert!(
        m.contains("storage local-lvm, which on node pve1 holds no ISO images"),
        "{m}"
    );
    let r = failed(run(base(
        &sim,
        json!({"cdroms": [{"slot": "scsi0", "iso": "none"}], "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "64M"}]}),
    )));
    assert!(msg(&r).contains("slot scsi0 is a disk's in disks"), "{r}");
    assert_eq!(sim.writes().len(), writes, "{:#?}", sim.writes());
}

#[test]
fn cdroms_never_touch_pves_cloud_init_drive_or_the_nocloud_seed() {
    let sim = Sim::start(&[], &[]);
    put_iso(&sim, "a.iso");
    // PVE's cloud-init drive on ide2.
    converges(base(
        &sim,
        json!({"ciuser": "ops", "cloudinit_storage": "local-lvm"}),
    ));
    let r = failed(run(base(
        &sim,
        json!({"ciuser": "ops", "cloudinit_storage": "local-lvm",
               "cdroms": [{"slot": "ide2", "iso": "local:iso/a.iso"}]}),
    )));
    assert!(
        msg(&r).contains("slot ide2 is the cloud-init drive's (cloudinit_slot)"),
        "{r}"
    );
    let r = failed(run(base(
        &sim,
        json!({"cdroms": [{"slot": "ide2", "state": "absent"}]}),
    )));
    assert!(
        msg(&r).contains("ide2 of VM 100 holds PVE's cloud-init drive"),
        "{r}"
    );
    // The NoCloud seed takes its place, on a CD-ROM the module manages.
    let seeded = json!({"nocloud": {"user_data": "#cloud-config\nhostname: media\n"}});
    ok(run(base(&sim, seeded.clone())));
    let c = config(&sim);
    let (slot, _) = c
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, v)| v.as_str().is_some_and(|v| v.contains(":iso/sankofa-100-")))
        .unwrap_or_else(|| panic!("no seed in {c}"));
    let slot = slot.clone();
    let mut args = base(&sim, seeded);
    args["cdroms"] = json!([{"slot": slot, "iso": "local:iso/a.iso"}]);
    let r = failed(run(args));
    assert!(
        msg(&r).contains(&format!("{slot} of VM 100 holds the NoCloud seed")),
        "{r}"
    );
    // Another slot is the user's: the seed stays where it is.
    let mut args = base(
        &sim,
        json!({"nocloud": {"user_data": "#cloud-config\nhostname: media\n"}}),
    );
    args["cdroms"] = json!([{"slot": "sata0", "iso": "local:iso/a.iso"}]);
    converges(args);
    assert!(
        config(&sim)[&slot]
            .as_str()
            .unwrap()
            .contains("sankofa-100-")
    );
}

#[test]
fn efi_and_tpm_are_added_to_a_stopped_vm_and_another_type_is_refused_or_recreated() {
    let sim = Sim::start(&[], &[]);
    let uefi = |extra: Value| {
        base(
            &sim,
            merge(&[json!({"bios": "ovmf", "machine": "q35"}), extra]),
        )
    };
    converges(uefi(json!({})));
    let efi = json!({"efidisk": {"storage": "local-lvm", "efitype": "4m", "pre_enrolled_keys": true},
                     "tpmstate": {"storage": "local-lvm"}});
    // Check and diff mode show both adds before any write.
    let writes = sim.writes().len();
    let r = ok(run(merge(&[
        uefi(efi.clone()),
        json!({"_ansible_check_mode": true, "_ansible_diff": true}),
    ])));
    assert_eq!(r["changed"], true);
    assert_eq!(
        r["diff"]["after"]["efidisk0"],
        "local-lvm:1,efitype=4m,pre-enrolled-keys=1"
    );
    assert_eq!(r["diff"]["after"]["tpmstate0"], "local-lvm:1,version=v2.0");
    assert_eq!(sim.writes().len(), writes);
    converges(uefi(efi.clone()));
    let c = config(&sim);
    let efidisk = c["efidisk0"].as_str().unwrap().to_string();
    assert!(
        efidisk.starts_with("local-lvm:vm-100-disk-") && efidisk.contains("efitype=4m"),
        "{c}"
    );
    assert!(efidisk.contains("pre-enrolled-keys=1"), "{c}");
    assert!(
        c["tpmstate0"].as_str().unwrap().contains("version=v2.0"),
        "{c}"
    );
    // Another efitype: refused before any write, naming why and how.
    let writes = sim.writes().len();
    let other = json!({"efidisk": {"storage": "local-lvm", "efitype": "2m", "pre_enrolled_keys": true},
                       "tpmstate": {"storage": "local-lvm"}});
    let r = failed(run(uefi(other.clone())));
    let m = msg(&r);
    assert!(
        m.contains("efidisk0 with efitype=4m, not 2m")
            && m.contains("reset the NVRAM")
            && m.contains("efidisk.force: true"),
        "{m}"
    );
    let r = failed(run(uefi(
        json!({"tpmstate": {"storage": "local-lvm", "version": "v1.2"}}),
    )));
    assert!(
        msg(&r).contains("tpmstate0 with version=v2.0, not v1.2") && msg(&r).contains("TPM state"),
        "{r}"
    );
    assert_eq!(sim.writes().len(), writes);
    // force: true recreates it: the old volume kept as an unused disk.
    let mut forced = other.clone();
    forced["efidisk"]["force"] = json!(true);
    let r = converges(uefi(forced.clone()));
    assert!(
        r["warnings"]
            .to_string()
            .contains("efidisk0 of VM 100 is recreated"),
        "{r}"
    );
    let c = config(&sim);
    let new = c["efidisk0"].as_str().unwrap();
    assert!(
        new.contains("efitype=2m") && !new.starts_with(&efidisk[..efidisk.find(',').unwrap()]),
        "{c}"
    );
    let old_volume = &efidisk[..efidisk.find(',').unwrap()];
    assert!(
        c.as_object()
            .unwrap()
            .iter()
            .any(|(k, v)| k.starts_with("unused") && v == old_volume),
        "the old volume {old_volume} is not kept as unused: {c}"
    );
}

#[test]
fn efi_and_tpm_added_to_a_running_vm_wait_for_its_restart() {
    let sim = Sim::start(&[], &[]);
    let uefi = |extra: Value| {
        base(
            &sim,
            merge(&[
                json!({"bios": "ovmf", "machine": "q35", "state": "started"}),
                extra,
            ]),
        )
    };
    converges(uefi(json!({})));
    let efi = json!({"efidisk": {"storage": "local-lvm"}, "tpmstate": {"storage": "local-lvm"}});
    let r = ok(run(merge(&[
        uefi(efi.clone()),
        json!({"_ansible_check_mode": true}),
    ])));
    assert_eq!(r["restart_needed"], true, "{r}");
    let r = ok(run(uefi(efi.clone())));
    assert_eq!(r["changed"], true);
    assert_eq!(r["restart_needed"], true, "{r}");
    assert_eq!(r["pending"], json!(["efidisk0", "tpmstate0"]), "{r}");
    assert!(
        r["warnings"]
            .to_string()
            .contains("efidisk0 is added to the running VM 100 as a pending change"),
        "{r}"
    );
    let now = current(&sim);
    assert!(
        now.get("efidisk0").is_none() && now.get("tpmstate0").is_none(),
        "{now}"
    );
    let again = ok(run(uefi(efi.clone())));
    assert_eq!(again["changed"], false, "{again}");
    let r = ok(run(merge(&[
        uefi(efi.clone()),
        json!({"restart": "when_needed"}),
    ])));
    assert_eq!(r["restart_needed"], false, "{r}");
    let now = current(&sim);
    assert!(
        now["efidisk0"].as_str().unwrap().contains("efitype=4m"),
        "{now}"
    );
    assert!(
        now["tpmstate0"].as_str().unwrap().contains("version=v2.0"),
        "{now}"
    );
    // Recreated on the running VM: pending until its restart too.
    let forced = json!({"efidisk": {"storage": "local-lvm", "efitype": "2m", "force": true},
                        "tpmstate": {"storage": "local-lvm"}});
    let r = ok(run(merge(&[
        uefi(forced.clone()),
        json!({"_ansible_check_mode": true, "_ansible_diff": true}),
    ])));
    assert_eq!(r["restart_needed"], true, "{r}");
    assert!(
        r["msg"]
            .as_str()
            .unwrap()
            .contains("recreate efidisk0 (efitype=4m → 2m"),
        "{r}"
    );
    assert!(
        current(&sim)["efidisk0"]
            .as_str()
            .unwrap()
            .contains("efitype=4m")
    );
    let r = ok(run(uefi(forced.clone())));
    assert_eq!(r["restart_needed"], true, "{r}");
    assert!(
        config(&sim)["efidisk0"]
            .as_str()
            .unwrap()
            .contains("efitype=2m")
    );
    assert!(
        current(&sim)["efidisk0"]
            .as_str()
            .unwrap()
            .contains("efitype=4m")
    );
    let again = ok(run(uefi(forced)));
    assert_eq!(again["changed"], false, "{again}");
}

/// The vm module's examples of `cdroms`, `efidisk` and `tpmstate`, each as the docs give it
/// (plugins/modules/vm.yml EXAMPLES, the connection options replaced by pve-sim's), run in
/// their order on a running UEFI VM 100: each succeeds, and a second run of it is unchanged.
#[test]
fn the_docs_examples_of_cdroms_efidisk_and_tpmstate_run_and_converge() {
    let docs: Value = serde_yaml_ng::from_str(include_str!("../plugins/modules/vm.yml")).unwrap();
    let examples: Vec<Value> = serde_yaml_ng::from_str(docs["EXAMPLES"].as_str().unwrap()).unwrap();
    let ours: Vec<(String, Value)> = examples
        .iter()
        .filter_map(|task| {
            let args = task.get("sankofa.proxmox.vm")?;
            ["cdroms", "efidisk", "tpmstate"]
                .iter()
                .any(|key| args.get(key).is_some())
                .then(|| (task["name"].as_str().unwrap().to_string(), args.clone()))
        })
        .collect();
    assert!(ours.len() >= 4, "{ours:?}");
    let sim = Sim::start(&[], &[]);
    put_iso(&sim, "debian-12.iso");
    ok(run(base(
        &sim,
        json!({"bios": "ovmf", "machine": "q35", "state": "started"}),
    )));
    for (name, args) in ours {
        let mut args = args.as_object().unwrap().clone();
        args.retain(|key, _| !key.starts_with("api_"));
        let args = merge(&[sim.conn(), Value::Object(args)]);
        let first = ok(run(args.clone()));
        assert_eq!(first["changed"], true, "{name}: {first}");
        let again = ok(run(args));
        assert_eq!(again["changed"], false, "{name}: {again}");
    }
    // The recreated EFI disk (the last example, no restart) is pending on the running VM.
    let c = config(&sim);
    assert!(c.get("ide3").is_none(), "{c}");
    assert!(
        c["efidisk0"]
            .as_str()
            .unwrap()
            .contains("pre-enrolled-keys=0"),
        "{c}"
    );
    assert!(
        current(&sim)["efidisk0"]
            .as_str()
            .unwrap()
            .contains("pre-enrolled-keys=1")
    );
    assert!(
        c["tpmstate0"].as_str().unwrap().contains("version=v2.0"),
        "{c}"
    );
}

#[test]
fn a_clone_whose_source_has_another_efi_type_is_refused_before_it_is_made() {
    let sim = Sim::start(&[], &[]);
    let uefi = json!({"bios": "ovmf", "machine": "q35",
                      "efidisk": {"storage": "local-lvm", "efitype": "2m"}, "template": true});
    converges(base(&sim, uefi));
    let clone = |efidisk: Value| {
        merge(&[
            sim.conn(),
            json!({"node": "pve1", "vmid": 101, "name": "clone", "bios": "ovmf",
                   "clone": {"vmid": 100, "full": true}, "efidisk": efidisk}),
        ])
    };
    let writes = sim.writes().len();
    let r = failed(run(clone(json!({"storage": "local-lvm"}))));
    assert!(
        msg(&r).contains("the clone would have the EFI disk or TPM state of its source")
            && msg(&r).contains("VM 100 has efidisk0 with efitype=2m, not 4m"),
        "{r}"
    );
    assert_eq!(sim.writes().len(), writes, "{:#?}", sim.writes());
    // With force: true the clone is made and its EFI disk recreated.
    let r = converges(clone(json!({"storage": "local-lvm", "force": true})));
    assert!(
        r["config"]["efidisk0"]
            .as_str()
            .unwrap()
            .contains("efitype=4m"),
        "{r}"
    );
}

#[test]
fn a_clone_whose_cdrom_slot_holds_its_sources_disk_is_refused_before_it_is_made() {
    let sim = Sim::start(&[], &[]);
    put_iso(&sim, "rescue.iso");
    let template = json!({"template": true,
        "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "64M"},
                  {"slot": "sata1", "storage": "local-lvm", "size": "64M"}]});
    converges(base(&sim, template));
    let clone = |cdroms: Value| {
        merge(&[
            sim.conn(),
            json!({"node": "pve1", "vmid": 101, "name": "clone",
                   "clone": {"vmid": 100, "full": true}, "cdroms": cdroms}),
        ])
    };
    let writes = sim.writes().len();
    let r = failed(run(clone(
        json!([{"slot": "sata1", "iso": "local:iso/rescue.iso"}]),
    )));
    assert!(
        msg(&r).contains("sata1") && msg(&r).contains("is a disk"),
        "{r}"
    );
    // An ISO named on a storage without iso content: refused before the clone too.
    let r = failed(run(clone(
        json!([{"slot": "ide3", "iso": "local-lvm:iso/rescue.iso"}]),
    )));
    assert!(msg(&r).contains("holds no ISO images"), "{r}");
    assert_eq!(sim.writes().len(), writes, "{:#?}", sim.writes());
    assert!(
        sim.get("/nodes/pve1/qemu/101/config")["data"].is_null(),
        "no clone was made"
    );
    // A free slot: the clone is made with the medium, and converges.
    let r = converges(clone(
        json!([{"slot": "ide3", "iso": "local:iso/rescue.iso"}]),
    ));
    assert!(
        r["config"]["ide3"]
            .as_str()
            .unwrap_or_default()
            .starts_with("local:iso/rescue.iso"),
        "{r}"
    );
}
