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
    // PVE's form decoder turns `description=` into undef: the module sends a delete.
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
