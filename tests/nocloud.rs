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
