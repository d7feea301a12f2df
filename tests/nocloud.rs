//! The `vm` module's `nocloud` option against pve-sim: the seed is built, uploaded over the
//! API and attached, the guest (pve-sim's guest model) boots with exactly what was asked, a
//! re-run uploads nothing, a change replaces the seed and removes the old one, and bad input
//! is refused before any write. The user-data here is checked by Debian's cloud-init
//! (`make cloud-init-schema`, tests/ansible/cloud_init_schema.sh) from tests/nocloud/.

use crate::support::*;
use serde_json::{Value, json};

/// The user-data of these tests (tests/nocloud/user-data.yaml, checked by cloud-init).
const USER_DATA: &str = include_str!("nocloud/user-data.yaml");
/// The changed user-data (tests/nocloud/user-data-changed.yaml).
const USER_DATA_CHANGED: &str = include_str!("nocloud/user-data-changed.yaml");

fn args(sim: &Sim, user_data: &str, extra: Value) -> Value {
    merge(&[
        sim.conn(),
        json!({
            "node": "pve1", "vmid": 100, "name": "web1", "memory": 1024, "agent": true,
            "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2"}],
            "net": [{"bridge": "vmbr0"}], "ipconfig": [{"ip": "192.0.2.10/24", "gw": "192.0.2.1"}],
            "nameserver": ["192.0.2.53"], "searchdomain": "example.org",
            "nocloud": {"user_data": user_data},
            "state": "started"
        }),
        extra,
    ])
}

/// The ISO volumes of `local` on pve1.
fn isos(sim: &Sim) -> Vec<String> {
    let listing = sim.get("/nodes/pve1/storage/local/content?content=iso");
    listing["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["volid"].as_str().unwrap().to_string())
        .collect()
}

fn uploads(sim: &Sim) -> usize {
    sim.requests()
        .iter()
        .filter(|q| q["method"] == "POST" && q["path"].as_str().unwrap().ends_with("/upload"))
        .count()
}

/// The network-config PVE's nocloud_network writes for net0 and ipconfig0 of [`args`].
fn expected_network(mac: &str) -> String {
    format!(
        "version: 1\nconfig:\n    - type: physical\n      name: eth0\n      mac_address: '{mac}'\n      subnets:\n      - type: static\n        address: '192.0.2.10'\n        netmask: '255.255.255.0'\n        gateway: '192.0.2.1'\n    - type: nameserver\n      address:\n      - '192.0.2.53'\n      search:\n      - 'example.org'\n"
    )
}

/// net0's MAC in the VM's config, lower case.
fn mac_of(config: &Value) -> String {
    let net0 = config["net0"].as_str().unwrap();
    net0.split(',')
        .next()
        .unwrap()
        .split_once('=')
        .unwrap()
        .1
        .to_ascii_lowercase()
}

#[test]
fn a_vm_boots_with_exactly_its_user_data_and_the_network_of_its_ipconfig() {
    let img = small_image();
    let sim = Sim::start(&[&img], &["--agent-delay", "0s"]);
    let r = ok(run(args(&sim, USER_DATA, json!({"_ansible_diff": true}))));
    assert_eq!(r["changed"], true);
    let types = task_types(&r);
    assert_eq!(types.first().map(String::as_str), Some("qmcreate"));
    assert!(types.contains(&"imgcopy".to_string()), "{types:?}");
    // Attached before the start: the guest read it at its first boot.
    let start = types.iter().position(|t| t == "qmstart").unwrap();
    assert!(types.iter().position(|t| t == "imgcopy").unwrap() < start);
    let slot_value = r["config"]["ide0"].as_str().unwrap();
    assert!(
        slot_value.starts_with("local:iso/sankofa-100-") && slot_value.contains(".iso,media=cdrom"),
        "{slot_value}"
    );
    // No PVE cloud-init drive beside it.
    assert!(
        !r["config"].to_string().contains("cloudinit"),
        "{}",
        r["config"]
    );
    assert_eq!(isos(&sim).len(), 1);

    let seen = sim.guest_seed(100).expect("the guest booted with a seed");
    assert_eq!(seen["files"]["user-data"], USER_DATA);
    let mac = mac_of(&r["config"]);
    assert_eq!(seen["files"]["network-config"], expected_network(&mac));
    assert_eq!(seen["hostname"], "web1");
    assert_eq!(seen["interfaces"][0]["addresses"], json!(["192.0.2.10/24"]));
    assert_eq!(seen["files"]["vendor-data"], "");
    let instance = seen["instance_id"].as_str().unwrap();
    assert_eq!(
        instance.len(),
        40,
        "sha1_hex of user-data and network-config"
    );
    // The guest agent reports the address the seed gave.
    let agent = sim.get("/nodes/pve1/qemu/100/agent/network-get-interfaces");
    assert!(agent.to_string().contains("192.0.2.10"), "{agent}");

    // user-data is secret: nowhere in the result, the diff included.
    let text = r.to_string();
    assert!(!text.contains("sankofa-marker"), "user-data leaked: {text}");
    assert!(
        r["diff"]["after"]["nocloud.user-data"]
            .as_str()
            .unwrap()
            .starts_with("(secret: "),
        "{}",
        r["diff"]
    );
    assert_eq!(
        r["diff"]["after"]["nocloud.network-config"],
        expected_network(&mac)
    );
}

#[test]
fn a_rerun_uploads_nothing_and_a_change_replaces_and_cleans_the_seed() {
    let img = small_image();
    let sim = Sim::start(&[&img], &["--agent-delay", "0s"]);
    ok(run(args(&sim, USER_DATA, json!({}))));
    let first = isos(&sim);
    assert_eq!(first.len(), 1);
    assert_eq!(uploads(&sim), 1);

    let writes = sim.writes().len();
    let again = ok(run(args(&sim, USER_DATA, json!({}))));
    assert_eq!(again["changed"], false, "{again}");
    assert_eq!(uploads(&sim), 1, "a re-run uploaded the seed again");
    assert_eq!(
        sim.writes().len(),
        writes,
        "a re-run wrote: {:?}",
        &sim.writes()[writes..]
    );

    // Check mode shows the change and writes nothing.
    let predicted = ok(run(args(
        &sim,
        USER_DATA_CHANGED,
        json!({"_ansible_check_mode": true, "_ansible_diff": true}),
    )));
    assert_eq!(predicted["changed"], true);
    assert!(
        predicted["diff"]["after"]
            .get("nocloud.user-data")
            .is_some(),
        "{}",
        predicted["diff"]
    );
    assert!(
        predicted["diff"]["after"]
            .get("nocloud.network-config")
            .is_none()
    );
    assert_eq!(sim.writes().len(), writes);

    // A change on the running VM: the new seed is uploaded and attached, the old one
    // removed; the guest takes it at its restart (restart: when_needed).
    let changed = ok(run(args(
        &sim,
        USER_DATA_CHANGED,
        json!({"restart": "when_needed"}),
    )));
    assert_eq!(changed["changed"], true);
    assert_eq!(uploads(&sim), 2);
    let now = isos(&sim);
    assert_eq!(now.len(), 1, "the old seed was not removed: {now:?}");
    assert_ne!(now, first);
    assert!(
        changed["config"]["ide0"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{},media=cdrom", now[0])),
        "{}",
        changed["config"]
    );
    let seen = sim.guest_seed(100).unwrap();
    assert_eq!(seen["files"]["user-data"], USER_DATA_CHANGED);
    assert_eq!(seen["volid"], now[0]);
    assert!(!changed.to_string().contains("sankofa-marker"));

    let settled = ok(run(args(&sim, USER_DATA_CHANGED, json!({}))));
    assert_eq!(settled["changed"], false, "{settled}");
    assert_eq!(uploads(&sim), 2);
}

#[test]
fn pve_cloud_init_drive_is_replaced_by_the_seed_and_the_result_says_so() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    let plain = json!({"nocloud": null, "cloudinit_storage": "local-lvm", "state": "stopped"});
    let r = ok(run(args(&sim, USER_DATA, plain)));
    assert!(r["config"]["ide2"].as_str().unwrap().contains("cloudinit"));
    let r = ok(run(args(&sim, USER_DATA, json!({"state": "stopped"}))));
    assert_eq!(r["changed"], true);
    assert!(
        r["config"].get("ide2").is_none()
            || !r["config"]["ide2"].as_str().unwrap().contains("cloudinit")
    );
    assert!(r["config"].to_string().contains("sankofa-100-"));
    let warned = r["warnings"].to_string();
    assert!(
        warned.contains("PVE's cloud-init drive on ide2"),
        "{warned}"
    );
}

#[test]
fn bad_input_is_refused_before_any_write() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    let bad_yaml = "#cloud-config\npackages:\n  - nginx\n runcmd: [x]\n";
    let r = failed(run(args(&sim, bad_yaml, json!({}))));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.contains("nocloud.user_data is not valid YAML at line 4"),
        "{msg}"
    );
    let both = failed(run(args(
        &sim,
        USER_DATA,
        json!({"cloudinit_storage": "local-lvm"}),
    )));
    assert!(
        both["msg"].as_str().unwrap().contains("exclude each other"),
        "{both}"
    );
    // A storage without ISO content, for a VM to create: refused before the create.
    let no_iso = failed(run(args(
        &sim,
        USER_DATA,
        json!({"nocloud": {"user_data": USER_DATA, "storage": "local-lvm"}}),
    )));
    assert!(
        no_iso["msg"]
            .as_str()
            .unwrap()
            .contains("does not hold ISO images"),
        "{no_iso}"
    );
    assert!(sim.writes().is_empty(), "{:?}", sim.writes());

    // A storage without ISO content, for a VM that exists: refused before any write.
    ok(run(args(
        &sim,
        USER_DATA,
        json!({"nocloud": null, "state": "stopped"}),
    )));
    let writes = sim.writes().len();
    let r = failed(run(args(
        &sim,
        USER_DATA,
        json!({"state": "stopped", "nocloud": {"user_data": USER_DATA, "storage": "local-lvm"}}),
    )));
    assert!(
        r["msg"]
            .as_str()
            .unwrap()
            .contains("does not hold ISO images"),
        "{r}"
    );
    assert_eq!(sim.writes().len(), writes);
}

/// A VM's args for a template or clone of these tests: `vmid`, `name`, on pve1, with `extra`.
fn vm_args(sim: &Sim, vmid: u32, name: &str, extra: Value) -> Value {
    merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": vmid, "name": name, "agent": true}),
        extra,
    ])
}

/// The template 900 (`nocloud`: the given parts) with its seed, made once: its seed's volume.
fn make_template(sim: &Sim, vmid: u32, nocloud: Value) -> String {
    let r = ok(run(vm_args(
        sim,
        vmid,
        &format!("tpl{vmid}"),
        json!({
            "memory": 1024,
            "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2"}],
            "net": [{"bridge": "vmbr0"}], "ipconfig": [{"ip": "dhcp"}],
            "nocloud": nocloud, "template": true
        }),
    )));
    assert_eq!(r["config"]["template"], 1, "{r}");
    let seed = r["config"]["ide0"].as_str().unwrap();
    assert!(
        seed.starts_with(&format!("local:iso/sankofa-{vmid}-")),
        "{seed}"
    );
    seed.split(',').next().unwrap().to_string()
}

/// A clone's own seed: its config names `sankofa-<vmid>-….iso`, its guest booted with it
/// under its own name. Returns the instance-id the guest saw.
fn own_seed(sim: &Sim, r: &Value, vmid: u32, name: &str) -> String {
    assert_eq!(r["vmid"], vmid, "{r}");
    let ide0 = r["config"]["ide0"].as_str().unwrap();
    assert!(
        ide0.starts_with(&format!("local:iso/sankofa-{vmid}-")),
        "VM {vmid} holds another VM's seed: {ide0}"
    );
    let seen = sim.guest_seed(vmid).expect("the clone booted with a seed");
    assert_eq!(seen["volid"], ide0.split(',').next().unwrap());
    assert_eq!(seen["hostname"], name, "{seen}");
    assert!(
        seen["files"]["meta-data"]
            .as_str()
            .unwrap()
            .contains(&format!("local-hostname: {name}\n")),
        "{seen}"
    );
    // Its own MAC in the network-config it generated.
    assert!(
        seen["files"]["network-config"]
            .as_str()
            .unwrap()
            .contains(&mac_of(&r["config"])),
        "{seen}"
    );
    seen["instance_id"].as_str().unwrap().to_string()
}

#[test]
fn every_clone_of_a_template_boots_with_its_own_seed() {
    let img = small_image();
    let sim = Sim::start(&[&img], &["--agent-delay", "0s"]);
    let template_seed = make_template(&sim, 900, json!({"user_data": USER_DATA}));
    let clone = |vmid: u32, name: &str, full: bool| {
        vm_args(
            &sim,
            vmid,
            name,
            json!({
                "clone": {"vmid": 900, "full": full},
                "ipconfig": [{"ip": format!("192.0.2.{}/24", vmid - 190), "gw": "192.0.2.1"}],
                "nocloud": {"user_data": USER_DATA}, "state": "started"
            }),
        )
    };
    // A linked clone and a full one, each with its own name, address and seed.
    let linked = ok(run(clone(201, "web1", false)));
    assert!(
        linked["config"]["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("local-lvm:base-900-disk-0/"),
        "{}",
        linked["config"]
    );
    let full = ok(run(clone(202, "web2", true)));
    let first = own_seed(&sim, &linked, 201, "web1");
    let second = own_seed(&sim, &full, 202, "web2");
    assert_ne!(first, second, "two clones with one instance-id");
    for (vmid, ip) in [(201, "192.0.2.11/24"), (202, "192.0.2.12/24")] {
        let seen = sim.guest_seed(vmid).unwrap();
        assert_eq!(seen["files"]["user-data"], USER_DATA);
        assert_eq!(seen["interfaces"][0]["addresses"], json!([ip]), "{seen}");
    }
    // The template's seed is untouched: still its config's, still on the storage.
    let template = sim.get("/nodes/pve1/qemu/900/config");
    assert!(
        template["data"]["ide0"]
            .as_str()
            .unwrap()
            .starts_with(&template_seed),
        "{template}"
    );
    assert!(isos(&sim).contains(&template_seed), "{:?}", isos(&sim));
    assert_eq!(isos(&sim).len(), 3, "{:?}", isos(&sim));
    // Re-runs change nothing and upload nothing.
    let uploaded = uploads(&sim);
    for (vmid, name, full) in [(201, "web1", false), (202, "web2", true)] {
        let again = ok(run(clone(vmid, name, full)));
        assert_eq!(again["changed"], false, "{again}");
        assert_eq!(again["pending"], json!([]), "{again}");
    }
    assert_eq!(uploads(&sim), uploaded);
}

#[test]
fn a_clone_run_without_nocloud_gets_a_generated_seed_of_its_own_or_is_refused() {
    let img = small_image();
    let sim = Sim::start(&[&img], &["--agent-delay", "0s"]);
    // A template whose seed is all generated (nocloud with no part given).
    let generated = make_template(&sim, 901, json!({}));
    let clone = |vmid: u32, name: &str, source: u32| {
        vm_args(
            &sim,
            vmid,
            name,
            json!({"clone": {"vmid": source}, "state": "started"}),
        )
    };
    let r = ok(run(clone(203, "web3", 901)));
    let instance = own_seed(&sim, &r, 203, "web3");
    let seen = sim.guest_seed(203).unwrap();
    assert!(
        seen["files"]["user-data"]
            .as_str()
            .unwrap()
            .contains("hostname: web3\n"),
        "{seen}"
    );
    assert_eq!(instance.len(), 40);
    assert!(isos(&sim).contains(&generated));
    let again = ok(run(clone(203, "web3", 901)));
    assert_eq!(again["changed"], false, "{again}");

    // A template whose user-data was given: the module cannot read it back, so a clone run
    // without nocloud is refused before the clone is made.
    make_template(&sim, 900, json!({"user_data": USER_DATA}));
    let writes = sim.writes().len();
    let refused = failed(run(clone(204, "web4", 900)));
    let msg = refused["msg"].as_str().unwrap();
    assert!(
        msg.contains("user-data was given to VM 900")
            && msg.contains("give the clone the nocloud option"),
        "{msg}"
    );
    assert_eq!(sim.writes().len(), writes, "{:?}", &sim.writes()[writes..]);
}

#[test]
fn a_seed_change_on_a_running_vm_stays_pending_until_its_restart() {
    let img = small_image();
    let sim = Sim::start(&[&img], &["--agent-delay", "0s"]);
    ok(run(args(&sim, USER_DATA, json!({}))));
    // Check mode predicts the restart the change needs, and writes nothing.
    let writes = sim.writes().len();
    let predicted = ok(run(args(
        &sim,
        USER_DATA_CHANGED,
        json!({"_ansible_check_mode": true, "_ansible_diff": true, "restart": "when_needed"}),
    )));
    assert_eq!(predicted["pending"], json!(["nocloud"]), "{predicted}");
    assert_eq!(predicted["restart_needed"], true);
    assert!(
        predicted["msg"]
            .as_str()
            .unwrap()
            .contains("then shut down"),
        "{predicted}"
    );
    assert_eq!(
        predicted["diff"]["before"]["not running yet"], "nocloud",
        "{}",
        predicted["diff"]
    );
    assert_eq!(sim.writes().len(), writes);

    // The seed's volume is written later than the VM started (pending::CLOCK_SLACK).
    std::thread::sleep(std::time::Duration::from_secs(5));
    let changed = ok(run(args(&sim, USER_DATA_CHANGED, json!({}))));
    assert_eq!(changed["changed"], true);
    assert_eq!(changed["pending"], json!(["nocloud"]), "{changed}");
    // Later runs, before the restart, still say so (and so does check mode).
    for extra in [json!({}), json!({"_ansible_check_mode": true})] {
        let later = ok(run(args(&sim, USER_DATA_CHANGED, extra)));
        assert_eq!(later["changed"], false, "{later}");
        assert_eq!(later["pending"], json!(["nocloud"]), "{later}");
        assert_eq!(later["restart_needed"], true, "{later}");
    }
    assert_eq!(
        sim.guest_seed(100).unwrap()["files"]["user-data"],
        USER_DATA
    );
    // restart: when_needed applies it.
    let restarted = ok(run(args(
        &sim,
        USER_DATA_CHANGED,
        json!({"restart": "when_needed"}),
    )));
    assert_eq!(restarted["changed"], true, "{restarted}");
    assert_eq!(restarted["pending"], json!([]), "{restarted}");
    assert_eq!(
        sim.guest_seed(100).unwrap()["files"]["user-data"],
        USER_DATA_CHANGED
    );
    let settled = ok(run(args(&sim, USER_DATA_CHANGED, json!({}))));
    assert_eq!(settled["changed"], false, "{settled}");
    assert_eq!(settled["pending"], json!([]), "{settled}");
    assert_eq!(settled["restart_needed"], false, "{settled}");
}

#[test]
fn a_seed_change_with_an_update_and_a_resize_takes_one_round() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    ok(run(args(&sim, USER_DATA, json!({"state": "stopped"}))));
    let before = sim.requests().len();
    let r = ok(run(args(
        &sim,
        USER_DATA_CHANGED,
        json!({"state": "stopped", "memory": 2048,
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2", "size": "2G"}]}),
    )));
    assert_eq!(r["changed"], true);
    assert_eq!(r["config"]["memory"].to_string().trim_matches('"'), "2048");
    assert!(
        r["config"]["ide0"]
            .as_str()
            .unwrap()
            .starts_with("local:iso/sankofa-100-")
    );
    let config_writes: Vec<Value> = sim.requests()[before..]
        .iter()
        .filter(|q| {
            q["method"] != "GET"
                && q["path"]
                    .as_str()
                    .unwrap()
                    .ends_with("/nodes/pve1/qemu/100/config")
        })
        .cloned()
        .collect();
    // The update and the seed's attach, each once: none refused for a stale digest.
    assert_eq!(config_writes.len(), 2, "{config_writes:?}");
    assert!(
        config_writes
            .iter()
            .all(|q| q["status"].as_u64().is_some_and(|s| s < 400)),
        "{config_writes:?}"
    );
    let settled = ok(run(args(
        &sim,
        USER_DATA_CHANGED,
        json!({"state": "stopped", "memory": 2048,
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2", "size": "2G"}]}),
    )));
    assert_eq!(settled["changed"], false, "{settled}");
}
