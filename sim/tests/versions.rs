//! `--pve-version`: each row of the table in `sim/src/versions.rs`, seen through the API on
//! both sides of the version it starts at (the release before it and the release from it).

use serde_json::{Value, json};

use crate::support::*;

fn at(release: &str, extra: &[&str], images: &[&std::path::Path]) -> (Sim, Session) {
    let mut args = vec!["--pve-version", release, "--time-scale", "0.1"];
    args.extend_from_slice(extra);
    let sim = Sim::plain(&args, images);
    let s = Session::login(&sim);
    (sim, s)
}

#[test]
fn version_answers_the_release_played() {
    for (release, full) in [("8.0", "8.0.9"), ("8.4", "8.4.14"), ("9.2", "9.2.11")] {
        let (sim, s) = at(release, &["--nodes", "pve1,pve2"], &[]);
        let v = s.data("GET", "/version", &[]);
        assert_eq!(v["release"], release, "{v}");
        assert_eq!(v["version"], full, "{v}");
        assert_eq!(v["repoid"].as_str().map(str::len), Some(16), "{v}");
        assert_eq!(s.data("GET", "/nodes/pve2/version", &[]), v);
        let table = sim.admin("GET", "/version-table", Value::Null)["data"].clone();
        assert_eq!(table["release"], release, "{table}");
    }
}

/// qemu-server 8.2.7 (PVE 8.3): `import-from` takes `import` volumes.
#[test]
fn import_from_an_import_volume_from_8_3() {
    let img = image("small.qcow2", 512, 8);
    let source = [
        ("vmid", "100"),
        ("scsi0", "local-lvm:0,import-from=local:import/small.qcow2"),
    ];
    let (_sim, s) = at("8.2", &[], &[&img]);
    let (code, _, body) = s.call("POST", "/nodes/pve1/qemu", &source);
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        body["errors"]["scsi0"],
        "local:import/small.qcow2 has wrong type 'import' - not an image"
    );
    let (_sim, s) = at("8.3", &[], &[&img]);
    let upid = s.data("POST", "/nodes/pve1/qemu", &source);
    assert_eq!(s.wait(upid.as_str().unwrap())["exitstatus"], "OK");
}

/// libpve-storage-perl 8.1.1 (PVE 8.2): `content=import` in the schema; 8.2.8 (PVE 8.3): on
/// directory storages; 8.3.6 (PVE 8.4): `.qcow2` names.
#[test]
fn download_into_import_by_release() {
    let port = serve_bytes(std::fs::read(image("small.qcow2", 512, 8)).unwrap());
    let url = format!("http://127.0.0.1:{port}/noble.img");
    let download = |s: &Session, filename: &str| {
        s.call(
            "POST",
            "/nodes/pve1/storage/local/download-url",
            &[("content", "import"), ("filename", filename), ("url", &url)],
        )
    };
    let (_sim, s) = at("8.1", &[], &[]);
    let (code, _, body) = download(&s, "noble.ova");
    assert_eq!(code, 400, "{body}");
    assert!(body["errors"]["content"].is_string(), "{body}");
    let (_sim, s) = at("8.2", &[], &[]);
    let (code, reason, _) = download(&s, "noble.ova");
    assert_eq!(
        (code, reason.as_str()),
        (
            500,
            "storage 'local' is not configured for content-type 'import'"
        )
    );
    let (_sim, s) = at("8.3", &[], &[]);
    assert_eq!(download(&s, "noble.ova").0, 200);
    let (code, _, body) = download(&s, "noble.qcow2");
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        body["errors"]["filename"],
        "invalid filename or wrong extension"
    );
    let (_sim, s) = at("8.4", &[], &[]);
    let (code, _, upid) = download(&s, "noble.qcow2");
    assert_eq!(code, 200, "{upid}");
    assert_eq!(s.wait(upid["data"].as_str().unwrap())["exitstatus"], "OK");
}

/// libpve-access-control 9.0.2: `VM.Monitor` gave way to `VM.GuestAgent.*`.
#[test]
fn the_privileges_by_release() {
    for (release, monitor) in [("8.4", true), ("9.0", false)] {
        let (_sim, s) = at(release, &[], &[]);
        let root = s.data("GET", "/access/permissions", &[("path", "/")]);
        let privs = &root["/"];
        assert_eq!(
            privs.get("VM.Monitor").is_some(),
            monitor,
            "{release}: {privs}"
        );
        assert_eq!(
            privs.get("VM.GuestAgent.Audit").is_some(),
            !monitor,
            "{release}: {privs}"
        );
    }
}

/// pve-manager e3ac6efa (9.0): `/cluster/resources` lists a VM's `memhost`.
#[test]
fn memhost_from_9_0() {
    for (release, listed) in [("8.4", false), ("9.0", true)] {
        let (_sim, s) = at(release, &["--stats-interval", "0s"], &[]);
        quick_vm(&s, "100", &[]);
        let vms = s.data("GET", "/cluster/resources", &[("type", "vm")]);
        assert_eq!(vms[0]["memhost"].is_number(), listed, "{release}: {vms}");
    }
}

/// qemu-server 9.0.24 (pve-manager 9.0.12): `ha-managed` at create; 9.1.8 (pve-sim's 9.1):
/// it needs `Sys.Console` on `/`.
#[test]
fn ha_managed_at_create_and_its_privilege_by_release() {
    let cfg = scratch("ha-managed-cfg").join("user.cfg");
    std::fs::write(
        &cfg,
        "user:ops@pve:1:0::::::\n\
         role:Maker:VM.Allocate,VM.Audit,VM.PowerMgmt:\n\
         acl:1:/:ops@pve:Maker:\n",
    )
    .unwrap();
    let cfg = cfg.to_string_lossy().to_string();
    let extra = ["--user-cfg", cfg.as_str(), "--user", "ops@pve:pw"];
    let create = |s: &Session, vmid: &str| {
        s.call(
            "POST",
            "/nodes/pve1/qemu",
            &[("vmid", vmid), ("ha-managed", "1")],
        )
    };
    let (_sim, s) = at("8.4", &extra, &[]);
    let (code, _, body) = create(&s, "100");
    assert_eq!(code, 400, "{body}");
    assert!(body["errors"]["ha-managed"].is_string(), "{body}");
    for (release, console_checked) in [("9.0", false), ("9.1", true)] {
        let (sim, root) = at(release, &extra, &[]);
        let ops = Session::login_as(&sim, "ops@pve", "pw");
        let (code, reason, body) = create(&ops, "101");
        if console_checked {
            assert_eq!(
                (code, reason.as_str()),
                (403, "Permission check failed (/, Sys.Console)")
            );
        } else {
            assert_eq!(code, 200, "{release}: {reason} {body}");
            ops.wait(body["data"].as_str().unwrap());
            let resource = root.data("GET", "/cluster/ha/resources/vm:101", &[]);
            assert_eq!(resource["state"], "stopped", "{release}: {resource}");
        }
    }
}

/// pve-ha-manager 5.0.2 (9.0) and pve-manager 9.0.13: what the table says of HA rules and the
/// bulk actions' task types, for the code that serves them.
#[test]
fn ha_rules_and_bulk_task_types_by_release() {
    for (release, rules) in [("8.4", false), ("9.0", true)] {
        let (sim, _) = at(release, &[], &[]);
        let table = sim.admin("GET", "/version-table", Value::Null)["data"].clone();
        assert_eq!(table["ha_groups_are_rules"], rules, "{table}");
        let bulk = if rules {
            json!([
                "bulk-start",
                "bulk-shutdown",
                "bulk-suspend",
                "bulk-migrate"
            ])
        } else {
            json!([])
        };
        assert_eq!(table["bulk_task_types"], bulk, "{table}");
        let rows = table["changes"].as_array().unwrap();
        assert!(
            rows.iter()
                .all(|r| r["source"].as_str().is_some_and(|s| !s.is_empty()))
        );
    }
}
