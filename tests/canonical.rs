//! The `vm` module converges against what PVE stores: for each value PVE rewrites (reprints,
//! sorts, clamps, pins, drops), a second run with the user's own spelling is `changed=false`
//! against the canonical value, and values PVE would refuse are refused before any write.
//! The rules and their PVE sources are in `pve/src/values/config.rs`.

use crate::support::*;
use serde_json::{Value, json};

/// A real public key (made with ssh-keygen, its private half discarded).
const TEST_KEY: &str = include_str!("keys/test_ed25519.pub").trim_ascii_end();
const SECOND_KEY: &str = include_str!("keys/second_rsa.pub").trim_ascii_end();

/// A small stopped VM with a new (not imported) disk and a NIC: quick to create.
fn args(sim: &Sim, extra: Value) -> Value {
    merge(&[
        sim.conn(),
        json!({
            "node": "pve1", "vmid": 100, "name": "canon", "memory": 512,
            "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}],
            "net": [{"bridge": "vmbr0"}],
        }),
        extra,
    ])
}

fn config(sim: &Sim) -> Value {
    sim.get("/nodes/pve1/qemu/100/config")["data"].clone()
}

/// Runs `extra` twice: the first run may change the VM, the second must not.
fn converges(sim: &Sim, extra: Value) -> Value {
    ok(run(args(sim, extra.clone())));
    let again = ok(run(args(sim, extra.clone())));
    assert_eq!(
        again["changed"], false,
        "a second run of {extra} changed the VM: {again}"
    );
    assert!(
        !task_types(&again).iter().any(|t| t == "qmconfig"),
        "{again}"
    );
    again
}

#[test]
fn a_boot_order_spelled_with_spaces_and_a_trailing_separator_converges() {
    let sim = Sim::start(&[], &[]);
    ok(run(args(&sim, json!({}))));
    // On update PVE prints the order again (print_bootorder): `order=scsi0;net0`.
    converges(&sim, json!({"boot": "order=scsi0; net0;"}));
    assert_eq!(config(&sim)["boot"], "order=scsi0;net0");
    // At create PVE stores it as sent, and the module reads it as the same order.
    let sim = Sim::start(&[], &[]);
    converges(&sim, json!({"boot": "order=scsi0 net0"}));
}

#[test]
fn an_empty_description_deletes_it() {
    let sim = Sim::start(&[], &[]);
    converges(&sim, json!({"description": "old notes\n"}));
    assert_eq!(config(&sim)["description"], "old notes");
    // `description=` is '' to PVE's form decoder, and an empty description is deleted
    // (update_vm_api, write_vm_config): the module sends the delete itself.
    let r = converges(&sim, json!({"description": ""}));
    assert!(config(&sim).get("description").is_none(), "{r}");
    let deletes: Vec<Value> = sim
        .writes()
        .into_iter()
        .filter(|w| w["params"]["delete"].as_str().is_some())
        .collect();
    assert!(
        deletes
            .iter()
            .any(|w| w["params"]["delete"] == "description"),
        "{deletes:?}"
    );
}

#[test]
fn an_empty_extra_config_value_deletes_the_key() {
    let sim = Sim::start(&[], &[]);
    converges(&sim, json!({"extra_config": {"hotplug": "disk,network"}}));
    assert_eq!(config(&sim)["hotplug"], "disk,network");
    converges(&sim, json!({"extra_config": {"hotplug": ""}}));
    assert!(config(&sim).get("hotplug").is_none());
}

#[test]
fn vmgenid_one_keeps_the_generation_id_pve_made() {
    let sim = Sim::start(&[], &[]);
    converges(&sim, json!({"extra_config": {"vmgenid": "1"}}));
    let first = config(&sim)["vmgenid"].clone();
    assert_eq!(first.as_str().map(str::len), Some(36), "{first}");
    converges(&sim, json!({"extra_config": {"vmgenid": "1"}}));
    assert_eq!(config(&sim)["vmgenid"], first, "no new generation id");
}

#[test]
fn cpuunits_above_cgroup_v2s_range_is_compared_clamped() {
    let sim = Sim::start(&[], &[]);
    converges(&sim, json!({"extra_config": {"cpuunits": "20000"}}));
    assert_eq!(
        config(&sim)["cpuunits"].to_string().trim_matches('"'),
        "10000"
    );
}

#[test]
fn a_windows_machine_pin_is_kept() {
    let sim = Sim::start(&[], &[]);
    converges(&sim, json!({"ostype": "win11", "machine": "q35"}));
    let machine = config(&sim)["machine"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(machine.starts_with("pc-q35-"), "{machine}");
}

#[test]
fn spellings_pve_reads_as_one_value_converge() {
    let sim = Sim::start(&[], &[]);
    converges(
        &sim,
        json!({
            "tags": ["Web", "prod", "web"],
            "cpu": "cputype=host",
            "extra_config": {"cpulimit": "2.0", "hotplug": "disk,network,usb", "tablet": "no"},
            "net": [{"bridge": "vmbr0", "firewall": true, "tag": 20}],
            "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1024M", "ssd": true}],
        }),
    );
    assert_eq!(config(&sim)["tags"], "prod;web");
    assert_eq!(config(&sim)["tablet"].to_string().trim_matches('"'), "0");
}

#[test]
fn ssh_keys_converge_and_are_checked_before_any_write() {
    let sim = Sim::start(&[], &[]);
    let both = json!({"sshkeys": [TEST_KEY, SECOND_KEY], "cloudinit_storage": "local-lvm"});
    converges(&sim, both);
    let writes = sim.writes().len();
    for (keys, wants) in [
        (json!([""]), "sshkeys[0] is empty"),
        (
            json!([format!("ssh-rsa {}", TEST_KEY.split(' ').nth(1).unwrap())]),
            "sshkeys[0] is not a public key PVE accepts",
        ),
        (json!([TEST_KEY, "ssh-ed25519 AAAA me"]), "sshkeys[1]"),
    ] {
        let r = failed(run(args(
            &sim,
            json!({"sshkeys": keys, "cloudinit_storage": "local-lvm"}),
        )));
        let msg = r["msg"].as_str().unwrap();
        assert!(msg.contains(wants), "{keys}: {msg}");
    }
    assert_eq!(sim.writes().len(), writes, "nothing was written");
}

#[test]
fn keys_pve_would_rewrite_or_refuse_are_refused_in_extra_config() {
    let sim = Sim::start(&[], &[]);
    let r = failed(run(args(
        &sim,
        json!({"extra_config": {"cdrom": "local:iso/x.iso"}}),
    )));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.contains("extra_config") && msg.contains("ide2"),
        "{msg}"
    );
    for (extra, wants) in [
        (json!({"bootdisk": "scsi0"}), "boot: order="),
        (json!({"acpi": "perhaps"}), "extra_config.acpi"),
        (json!({"vmgenid": "fresh"}), "extra_config.vmgenid"),
        (json!({"cpulimit": "lots"}), "extra_config.cpulimit"),
    ] {
        let r = failed(run(args(&sim, json!({"extra_config": extra}))));
        let msg = r["msg"].as_str().unwrap();
        assert!(msg.contains(wants), "{extra}: {msg}");
    }
    assert!(sim.writes().is_empty());
}

#[test]
fn becoming_windows_pins_the_machine_and_the_pin_is_kept() {
    let sim = Sim::start(&[], &[]);
    converges(&sim, json!({"ostype": "l26", "machine": "q35"}));
    assert_eq!(config(&sim)["machine"], "q35");
    // update_vm_api pins the machine when ostype becomes Windows without machine in the
    // request; the module sends only the ostype, and then keeps the pin.
    converges(&sim, json!({"ostype": "win11", "machine": "q35"}));
    let machine = config(&sim)["machine"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(machine.starts_with("pc-q35-"), "{machine}");
}

#[test]
fn a_drive_option_changed_keeps_the_volume_and_its_size() {
    let sim = Sim::start(&[], &[]);
    converges(&sim, json!({}));
    let disk = |extra: Value| json!({"disks": [merge(&[json!({"slot": "scsi0", "storage": "local-lvm", "size": "1G"}), extra])]});
    converges(
        &sim,
        disk(json!({"ssd": true, "discard": true, "cache": "none"})),
    );
    assert_eq!(
        config(&sim)["scsi0"],
        "local-lvm:vm-100-disk-0,cache=none,discard=on,size=1G,ssd=1"
    );
    converges(&sim, disk(json!({"ssd": false})));
    assert_eq!(
        config(&sim)["scsi0"],
        "local-lvm:vm-100-disk-0,cache=none,discard=on,size=1G,ssd=0"
    );
}

#[test]
fn an_empty_list_deletes_the_key() {
    let sim = Sim::start(&[], &[]);
    converges(&sim, json!({"tags": ["web"]}));
    assert_eq!(config(&sim)["tags"], "web");
    converges(&sim, json!({"tags": []}));
    assert!(config(&sim).get("tags").is_none());
}

#[test]
fn integers_and_plain_strings_as_pve_writes_them() {
    let sim = Sim::start(&[], &[]);
    converges(
        &sim,
        json!({"extra_config": {"cpuunits": "0500", "keyboard": "\"de\""}}),
    );
    let c = config(&sim);
    assert_eq!(c["cpuunits"].to_string().trim_matches('"'), "500");
    assert_eq!(c["keyboard"], "de");
    let r = failed(run(args(&sim, json!({"extra_config": {"cpuunits": "+5"}}))));
    assert!(
        r["msg"].as_str().unwrap().contains("extra_config.cpuunits"),
        "{r}"
    );
}

/// The `cipassword` line of the VM's config file.
fn stored_password(sim: &Sim) -> String {
    sim.config_file(100)
        .lines()
        .find_map(|l| l.strip_prefix("cipassword: "))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn cipassword_is_never_stored_in_plain_except_for_windows() {
    let ci = json!({"cloudinit_storage": "local-lvm", "ciuser": "ops"});
    // create_vm stores what it is sent: the module sends encrypt_pw's hash.
    let sim = Sim::start(&[], &[]);
    converges(
        &sim,
        merge(&[ci.clone(), json!({"cipassword": "s3cret-create"})]),
    );
    let stored = stored_password(&sim);
    assert!(stored.starts_with("$5$"), "{stored}");
    let salt = stored[3..].split('$').next().unwrap();
    assert_eq!(
        pve::values::crypt::sha256_crypt(b"s3cret-create", salt, None),
        stored
    );
    // An update with update_password: always sends it hashed too.
    let always = merge(&[
        ci.clone(),
        json!({"cipassword": "s3cret-update", "update_password": "always"}),
    ]);
    ok(run(args(&sim, always)));
    let updated = stored_password(&sim);
    assert!(updated.starts_with("$5$") && updated != stored, "{updated}");
    // A Windows guest's cloudbase-init needs it plain, and PVE keeps it plain.
    let sim = Sim::start(&[], &[]);
    converges(
        &sim,
        merge(&[ci, json!({"cipassword": "s3cret-win", "ostype": "win11"})]),
    );
    assert_eq!(
        stored_password(&sim),
        "********",
        "plain (pve-sim masks it)"
    );
}

#[test]
fn values_pve_would_refuse_are_refused_before_any_write() {
    let sim = Sim::start(&[], &[]);
    for (extra, wants) in [
        (
            json!({"machine": "q36"}),
            "machine is not a value PVE accepts",
        ),
        (json!({"vga": "vga9"}), "vga is not a value PVE accepts"),
        (
            json!({"cpu": "host,hidden=maybe"}),
            "cpu is not a value PVE accepts",
        ),
        (
            json!({"boot": "order=sda"}),
            "boot is not a boot order PVE accepts",
        ),
        (
            json!({"boot": "order=scsi0;efidisk0"}),
            "boot is not a boot order PVE accepts",
        ),
    ] {
        let r = failed(run(args(&sim, extra.clone())));
        let msg = r["msg"].as_str().unwrap();
        assert!(msg.contains(wants), "{extra}: {msg}");
    }
    assert!(sim.writes().is_empty());
}

/// The keys the demo, molecule and the tests use are real (made with ssh-keygen), pass the
/// module's check, and are the ones committed under tests/keys.
#[test]
fn the_demo_molecule_and_tests_use_real_keys() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for (file, key) in [
        ("playbooks/demo.yml", "demo_ed25519.pub"),
        ("molecule/default/converge.yml", "molecule_ed25519.pub"),
    ] {
        let public = std::fs::read_to_string(root.join("tests/keys").join(key)).unwrap();
        let public = public.trim();
        pve::values::SshKey::parse(public).unwrap_or_else(|e| panic!("{key}: {e}"));
        let yaml = std::fs::read_to_string(root.join(file)).unwrap();
        assert!(
            yaml.contains(public),
            "{file} does not use tests/keys/{key}"
        );
    }
    for key in [TEST_KEY, SECOND_KEY] {
        pve::values::SshKey::parse(key).unwrap();
    }
}

/// `disks` with one import of the small qcow2 image at `slot` on `storage`, with `extra`.
fn imported(slot: &str, storage: &str, extra: Value) -> Value {
    json!({"disks": [merge(&[
        json!({"slot": slot, "storage": storage, "import_from": "local:import/small.qcow2"}),
        extra,
    ])]})
}

#[test]
fn an_import_keeps_the_source_format_and_format_is_not_stored() {
    let image = small_image();
    // On a directory storage, an import without format stays qcow2 (resolve_dst_disk_format);
    // with format=raw it is raw; PVE stores neither drive with format= (create_disks).
    for (format, volume) in [
        (Value::Null, "local:100/vm-100-disk-0.qcow2"),
        (json!("raw"), "local:100/vm-100-disk-0.raw"),
        (json!("qcow2"), "local:100/vm-100-disk-0.qcow2"),
    ] {
        let sim = Sim::start(&[&image], &[]);
        let again = converges(&sim, imported("scsi0", "local", json!({"format": format})));
        let scsi0 = config(&sim)["scsi0"].as_str().unwrap().to_string();
        assert!(
            scsi0.starts_with(&format!("{volume},")),
            "{format}: {scsi0}"
        );
        assert!(!scsi0.contains("format="), "{scsi0}");
        assert!(
            again["warnings"].as_array().is_none_or(Vec::is_empty),
            "{again}"
        );
    }
}

#[test]
fn a_format_the_storage_cannot_hold_is_reported_not_claimed() {
    let image = small_image();
    let sim = Sim::start(&[&image], &[]);
    // LVM-thin holds raw only: the import falls back to raw (resolve_format_hint), and the
    // second run says so instead of reporting the disk as the qcow2 asked for.
    let again = converges(
        &sim,
        imported("scsi0", "local-lvm", json!({"format": "qcow2"})),
    );
    assert!(
        config(&sim)["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("local-lvm:vm-100-disk-0,"),
        "{again}"
    );
    let warnings = again["warnings"].to_string();
    assert!(
        warnings.contains("scsi0 as a raw volume") && warnings.contains("not qcow2"),
        "{again}"
    );
}

#[test]
fn an_efidisk_with_enrolled_keys_converges_with_the_ms_cert_pve_adds() {
    let sim = Sim::start(&[], &[]);
    let efi = json!({"bios": "ovmf", "machine": "q35",
        "efidisk": {"storage": "local-lvm", "pre_enrolled_keys": true}});
    let again = converges(&sim, efi);
    let efidisk = config(&sim)["efidisk0"].as_str().unwrap().to_string();
    assert!(efidisk.contains("ms-cert=2023k"), "{efidisk}");
    assert!(efidisk.contains("pre-enrolled-keys=1"), "{efidisk}");
    assert!(
        again["warnings"].as_array().is_none_or(Vec::is_empty),
        "{again}"
    );
}

#[test]
fn a_vm_without_a_boot_device_converges_on_pves_blank_boot() {
    let sim = Sim::start(&[], &[]);
    // No disk and no NIC: PVE writes `boot: ` and answers " " (print_bootorder of nothing).
    let bare = json!({"node": "pve1", "vmid": 100, "name": "canon", "memory": 512});
    let conn = sim.conn();
    ok(run(merge(&[conn.clone(), bare.clone()])));
    assert_eq!(config(&sim)["boot"], " ");
    let again = ok(run(merge(&[conn.clone(), bare.clone()])));
    assert_eq!(again["changed"], false, "{again}");
    // Its first disk added by an update: PVE leaves the blank order (it appends only
    // CD-ROMs), so the module gives the order a create would have (the first disk).
    let disk = json!({"disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}]});
    let added = ok(run(merge(&[conn.clone(), bare.clone(), disk.clone()])));
    assert_eq!(config(&sim)["boot"], "order=scsi0", "{added}");
    let again = ok(run(merge(&[conn.clone(), bare.clone(), disk])));
    assert_eq!(again["changed"], false, "{again}");
    // A NIC added and the order asked for: then kept.
    converges(&sim, json!({"boot": "order=scsi0;net0"}));
    assert_eq!(config(&sim)["boot"], "order=scsi0;net0");
    // A boot order asked for is never replaced by the create's default.
    let sim = Sim::start(&[], &[]);
    ok(run(merge(&[sim.conn(), bare])));
    converges(&sim, json!({"boot": "order=net0"}));
    assert_eq!(config(&sim)["boot"], "order=net0");
}

#[test]
fn a_blank_description_asks_for_none_and_converges() {
    // At create PVE reads a blank description back as "" (no comment is written); on update it
    // deletes it. Either way a second run is unchanged.
    let sim = Sim::start(&[], &[]);
    converges(&sim, json!({"description": "   "}));
    converges(&sim, json!({"description": "notes"}));
    converges(&sim, json!({"description": " \n "}));
    assert!(
        config(&sim)
            .get("description")
            .is_none_or(|d| d.as_str() == Some("")),
        "{}",
        config(&sim)
    );
}

#[test]
fn drive_options_and_cpu_or_machine_values_pve_refuses_are_refused_before_any_write() {
    let sim = Sim::start(&[], &[]);
    let disk = |slot: &str, extra: Value| json!({"disks": [merge(&[json!({"slot": slot, "storage": "local-lvm", "size": "1G"}), extra])]});
    for (extra, wants) in [
        (
            disk("virtio0", json!({"ssd": true})),
            "disks[0].ssd: PVE refuses ssd on a virtio drive (virtio0)",
        ),
        (
            disk("virtio0", json!({"ssd": false})),
            "disks[0].ssd: PVE refuses ssd on a virtio drive",
        ),
        (
            disk("sata0", json!({"iothread": true})),
            "disks[0].iothread: PVE refuses iothread on a sata drive (sata0)",
        ),
        (
            disk("ide0", json!({"iothread": false})),
            "disks[0].iothread: PVE refuses iothread on a ide drive",
        ),
        (
            json!({"cloudinit_storage": "local-lvm", "cloudinit_slot": "virtio1"}),
            "cloudinit_slot must be an ide, sata or scsi slot",
        ),
        (
            json!({"cpu": "Host"}),
            "cpu is not a value PVE accepts: Built-in cputype 'Host' is not defined",
        ),
        (
            json!({"cpu": "host,flags=+avx2"}),
            "cpu is not a value PVE accepts: flag '+avx2'",
        ),
        (
            json!({"cpu": "host,flags=aes"}),
            "cpu is not a value PVE accepts",
        ),
        (
            json!({"cpu": "kvm64,reported-model=qemu64"}),
            "cpu is not a value PVE accepts: Property 'reported-model' not allowed",
        ),
        (
            json!({"machine": "pc,viommu=intel"}),
            "machine is not a value PVE accepts: to use Intel vIOMMU please set the machine type to q35",
        ),
        (
            json!({"machine": "q35,aw-bits=48"}),
            "machine is not a value PVE accepts: cannot set aw-bits if no vIOMMU",
        ),
        (
            json!({"extra_config": {"args": " "}}),
            "extra_config.args is blank",
        ),
        (
            json!({"balloon": 1024}),
            "balloon (1024 MiB) must not be larger than memory (512 MiB)",
        ),
    ] {
        let r = failed(run(args(&sim, extra.clone())));
        let msg = r["msg"].as_str().unwrap();
        assert!(msg.contains(wants), "{extra}: {msg}");
    }
    assert!(sim.writes().is_empty(), "{:?}", sim.writes());
    // An existing VM is refused the same way: nothing more is written to it.
    ok(run(args(&sim, json!({}))));
    let before = sim.config_file(100);
    let writes = sim.writes().len();
    for (extra, wants) in [
        (
            json!({"disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"},
                             {"slot": "virtio1", "storage": "local-lvm", "size": "1G", "ssd": true}]}),
            "disks[1].ssd",
        ),
        (json!({"cpu": "host,flags=+avx2"}), "cpu"),
        (
            json!({"memory": null, "balloon": 768}),
            "balloon (768 MiB) must not be larger than memory (512 MiB) of VM 100",
        ),
    ] {
        let r = failed(run(args(&sim, extra.clone())));
        assert!(r["msg"].as_str().unwrap().contains(wants), "{extra}: {r}");
    }
    assert_eq!(sim.writes().len(), writes);
    assert_eq!(sim.config_file(100), before);
}

#[test]
fn accepted_cpu_and_machine_options_converge() {
    let sim = Sim::start(&[], &[]);
    converges(
        &sim,
        json!({"cpu": "x86-64-v2-AES,flags=+aes;-pcid", "machine": "q35,viommu=intel"}),
    );
    assert_eq!(config(&sim)["cpu"], "x86-64-v2-AES,flags=+aes;-pcid");
}

#[test]
fn empty_cloud_init_values_delete_the_keys_and_need_no_drive() {
    let sim = Sim::start(&[], &[]);
    let ci = json!({"cloudinit_storage": "local-lvm", "ciuser": "ops", "searchdomain": "example.org",
        "nameserver": ["192.0.2.53"], "sshkeys": [TEST_KEY]});
    converges(&sim, ci);
    for key in ["ciuser", "searchdomain", "nameserver", "sshkeys"] {
        assert!(config(&sim).get(key).is_some(), "{key}");
    }
    let none = json!({"ciuser": "", "searchdomain": "", "nameserver": [], "sshkeys": []});
    converges(&sim, none.clone());
    for key in ["ciuser", "searchdomain", "nameserver", "sshkeys"] {
        assert!(config(&sim).get(key).is_none(), "{key}: {}", config(&sim));
    }
    // Asking for none on a VM without a cloud-init drive adds none, and is not refused for
    // the lack of one.
    let sim = Sim::start(&[], &[]);
    let bare = json!({"node": "pve1", "vmid": 100, "name": "canon", "memory": 512});
    ok(run(merge(&[sim.conn(), bare.clone(), none.clone()])));
    let again = ok(run(merge(&[sim.conn(), bare, none])));
    assert_eq!(again["changed"], false, "{again}");
    assert!(config(&sim).get("ide2").is_none(), "{}", config(&sim));
}

/// qemu-server's `$ipconfig_fmt` takes `ip=manual` and `ip6=manual` (pve-common
/// `pve_verify_ipv4_config`, `pve_verify_ipv6_config`), and `nameserver` (`address-list`,
/// `pve_verify_address`) a host name as well as an IP address: the module sends them, and a
/// second run finds them in place.
#[test]
fn manual_addresses_and_host_name_nameservers_converge() {
    let sim = Sim::start(&[], &[]);
    let ci = json!({"cloudinit_storage": "local-lvm",
        "net": [{"model": "virtio", "bridge": "vmbr0"}],
        "ipconfig": [{"ip": "manual", "ip6": "manual"}],
        "nameserver": ["dns.example.com", "192.0.2.53"]});
    converges(&sim, ci);
    assert_eq!(config(&sim)["ipconfig0"], "ip=manual,ip6=manual");
    assert_eq!(config(&sim)["nameserver"], "dns.example.com 192.0.2.53");
}

/// pve-storage's LvmThinPlugin.pm `alloc_image` dies on anything but raw (`unsupported format
/// 'qcow2'`) once the create or update has begun: a new disk's `format` its storage cannot
/// hold is refused before any write, naming the option and the storage's type; an existing
/// disk is not reallocated, so its `format` is not checked against the storage; a qcow2 disk
/// on a directory storage converges.
#[test]
fn a_format_the_storage_cannot_hold_is_refused_before_any_write() {
    let sim = Sim::start(&[], &[]);
    let qcow2_on_lvm = json!({"disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G", "format": "qcow2"}]});
    let r = failed(run(args(&sim, qcow2_on_lvm.clone())));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.contains("disks[0].format") && msg.contains("lvmthin"),
        "{msg}"
    );
    assert!(sim.writes().is_empty(), "{:?}", sim.writes());
    ok(run(args(&sim, json!({}))));
    let writes = sim.writes().len();
    let added = json!({"disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"},
                                 {"slot": "scsi1", "storage": "local-lvm", "size": "1G", "format": "vmdk"}]});
    let r = failed(run(args(&sim, added)));
    assert!(
        r["msg"].as_str().unwrap().contains("disks[1].format"),
        "{r}"
    );
    assert_eq!(sim.writes().len(), writes);
    let on_dir = json!({"disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"},
                                  {"slot": "scsi1", "storage": "local", "size": "1G", "format": "qcow2"}]});
    converges(&sim, on_dir);
    assert_eq!(
        config(&sim)["scsi1"],
        "local:100/vm-100-disk-0.qcow2,size=1G"
    );
}
