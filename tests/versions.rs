//! The version matrix: the demo (a cloud image downloaded with `image`, a VM imported from
//! it), clone and HA scenarios against
//! pve-sim playing PVE 8.0, 8.4 and 9.1 (`--pve-version`; the rest of the suite plays 9.1).
//! Each release is asserted on what the module does differently there: an import from an
//! `import` volume refused by PVE 8.0 before it writes anything, and told with the version it
//! needs and the alternative (qemu-server 8.2.7 came with 8.3), a new
//! VM's HA resource made by the create's `ha-managed` on 9.1 and by `POST
//! /cluster/ha/resources` on 8.x, and `/version` read once per run.

use crate::support::*;
use serde_json::{Value, json};

/// The releases the matrix plays: the oldest, the last 8.x and the default.
const MATRIX: &[&str] = &["8.0", "8.4", "9.1"];

fn vm(sim: &Sim, vmid: u32, extra: Value) -> Value {
    merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": vmid, "memory": 512, "timeout": 120}),
        extra,
    ])
}

/// The requests of the log from index `from` on.
fn since(sim: &Sim, from: usize) -> Vec<Value> {
    sim.requests().into_iter().skip(from).collect()
}

#[test]
fn demo_clone_and_ha_scenarios_on_each_release_of_the_matrix() {
    let img = small_image();
    let port = serve_file(std::fs::read(&img).unwrap(), std::time::Duration::ZERO);
    let url = format!("http://127.0.0.1:{port}/noble-server-cloudimg-amd64.img");
    for release in MATRIX {
        let sim = Sim::start(
            &[&img],
            &[
                "--pve-version",
                release,
                "--time-scale",
                "0.1",
                "--stats-interval",
                "0s",
            ],
        );
        assert_eq!(sim.get("/version")["data"]["release"], *release);
        let modern = *release != "8.0";

        // The demo: the cloud image downloaded with the image module, a VM imported from it.
        let image = |content: &str, filename: &str| {
            run_image(merge(&[
                sim.conn(),
                json!({"node": "pve1", "storage": "local", "url": url,
                       "content": content, "filename": filename}),
            ]))
        };
        let demo = |source: &str| {
            vm(
                &sim,
                100,
                json!({"name": "demo", "disks": [{"slot": "scsi0", "storage": "local-lvm",
                                                   "import_from": source}]}),
            )
        };
        if modern {
            let got = ok(image("import", "noble.qcow2"));
            assert_eq!(got["volid"], "local:import/noble.qcow2", "{release}: {got}");
            let r = ok(run(demo("local:import/noble.qcow2")));
            assert_eq!(r["changed"], true, "{release}: {r}");
            assert_eq!(ok(run(demo("local:import/noble.qcow2")))["changed"], false);
        } else {
            // content=import is refused before the download, naming the version and the way.
            let r = failed(image("import", "noble.qcow2"));
            let msg = r["msg"].as_str().unwrap_or_default();
            assert!(
                msg.contains("content: import needs PVE 8.3.0"),
                "{release}: {msg}"
            );
            assert!(
                msg.contains("content: iso and a .img filename"),
                "{release}: {msg}"
            );
            assert_eq!(sim.task_count("download"), 0, "{release}: downloaded");
            // An import volume (seeded by other means) is refused by PVE before it writes
            // anything, and the module says what PVE needs.
            let r = failed(run(demo("local:import/small.qcow2")));
            let msg = r["msg"].as_str().unwrap_or_default();
            assert!(msg.contains("needs PVE 8.3.0 or later"), "{release}: {msg}");
            assert!(msg.contains("runs PVE 8.0.9"), "{release}: {msg}");
            assert!(msg.contains("absolute path"), "{release}: {msg}");
            assert!(
                msg.contains("- not an image"),
                "{release}: PVE's words: {msg}"
            );
            assert_eq!(
                sim.task_count("qmcreate"),
                0,
                "{release}: a refused import ran"
            );
            let vms = sim.get("/cluster/resources?type=vm")["data"].clone();
            assert_eq!(vms, json!([]), "{release}: a refused import left a VM");
            // The way the messages give: an ISO download with a .img name, imported by path.
            let got = ok(image("iso", "noble.img"));
            assert_eq!(got["volid"], "local:iso/noble.img", "{release}: {got}");
            let path = sim.data().join("nodes/pve1/local/template/iso/noble.img");
            let r = ok(run(demo(&path.to_string_lossy())));
            assert_eq!(r["changed"], true, "{release}: {r}");
        }

        // Clone: a blank VM made a template, then a linked clone of it.
        let blank = json!({"disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}]});
        ok(run(vm(
            &sim,
            900,
            merge(&[blank.clone(), json!({"template": true})]),
        )));
        let r = ok(run(vm(
            &sim,
            901,
            json!({"clone": {"vmid": 900, "full": false}}),
        )));
        assert_eq!(r["changed"], true, "{release}: {r}");
        assert!(
            sim.config_file(901).contains("base-900-disk-0"),
            "{release}"
        );

        // HA: a new VM made an HA resource, by the create where PVE takes `ha-managed`.
        let from = sim.requests().len();
        let r = ok(run(vm(
            &sim,
            102,
            merge(&[blank, json!({"state": "stopped", "ha": {}})]),
        )));
        assert_eq!(
            r["ha"],
            json!({"sid": "vm:102", "state": "stopped"}),
            "{release}: {r}"
        );
        let log = since(&sim, from);
        let create = log
            .iter()
            .find(|q| q["method"] == "POST" && q["path"] == "/nodes/pve1/qemu")
            .expect("a create");
        let added = log
            .iter()
            .any(|q| q["method"] == "POST" && q["path"] == "/cluster/ha/resources");
        let versions = log.iter().filter(|q| q["path"] == "/version").count();
        if *release == "9.1" {
            assert_eq!(create["params"]["ha-managed"], "1", "{release}: {create}");
            assert!(!added, "{release}: added the resource after the create");
        } else {
            assert!(
                create["params"].get("ha-managed").is_none(),
                "{release}: {create}"
            );
            assert!(added, "{release}: no POST /cluster/ha/resources");
        }
        assert_eq!(
            versions, 1,
            "{release}: /version read {versions} times in one run"
        );
        let resource = sim.get("/cluster/ha/resources/vm:102")["data"].clone();
        assert_eq!(resource["state"], "stopped", "{release}: {resource}");
    }
}

/// pve-sim refuses what a release lacks, on both sides of the rows the module meets: the
/// create's `ha-managed` (from 9.0.12) and download-url's `content=import` (from 8.2).
#[test]
fn the_simulator_refuses_what_each_release_lacks() {
    for (release, ha_managed, import) in [
        ("8.1", false, false),
        ("8.3", false, true),
        ("9.0", true, true),
    ] {
        let sim = Sim::start(&[], &["--pve-version", release]);
        let version = sim.get("/version")["data"].clone();
        assert_eq!(version["release"], release, "{version}");
        let create = sim.write(
            "POST",
            "/nodes/pve1/qemu",
            &[("vmid", "150"), ("ha-managed", "0")],
        );
        assert_eq!(create["__status"] == 200, ha_managed, "{release}: {create}");
        let download = sim.write(
            "POST",
            "/nodes/pve1/storage/local/download-url",
            &[
                ("content", "import"),
                ("filename", "a.ova"),
                ("url", "http://127.0.0.1:9/a.ova"),
            ],
        );
        let by_schema = download["errors"]["content"].is_string();
        assert_eq!(!by_schema, import, "{release}: {download}");
    }
}
