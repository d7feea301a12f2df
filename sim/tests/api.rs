//! pve-sim against PVE's documented behaviour, through raw HTTP (to see status lines exactly)
//! and once through HTTPS. The first test replays the incident this project exists for.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

#[test]
fn the_incident_update_during_import_is_refused_waiting_on_the_upid_succeeds() {
    let img = image("incident-660.qcow2", 2560, 660);
    let sim = Sim::plain(&["--import-rate", "400M"], &[&img]);
    let s = Session::login(&sim);
    let disk = "local-lvm:0,import-from=local:import/incident-660.qcow2";

    // The original tool: create with the import, sleep 2 s, update the config.
    let upid = s.data(
        "POST",
        "/nodes/pve1/qemu",
        &[("vmid", "100"), ("scsi0", disk), ("name", "incident")],
    );
    let upid = upid.as_str().unwrap().to_string();
    assert!(is_upid(&upid, "pve1", "qmcreate", "100"), "{upid}");
    std::thread::sleep(Duration::from_secs(2));
    let (status, reason, body) = s.call("PUT", "/nodes/pve1/qemu/100/config", &[("cores", "2")]);
    assert_eq!((status, reason.as_str()), (500, "VM is locked (create)"));
    assert_eq!(body["data"], Value::Null);
    assert_eq!(
        s.data("GET", "/nodes/pve1/qemu/100/config", &[])["lock"],
        "create"
    );

    // The fix: wait on the UPID, check the exit status, then configure.
    let st = s.wait(&upid);
    assert_eq!(st["exitstatus"], "OK");
    let log = s.log(&upid);
    assert!(
        log.iter()
            .any(|l| l.starts_with("transferred ") && l.ends_with("(100.00%)")),
        "{log:?}"
    );
    assert_eq!(log.last().unwrap(), "TASK OK");
    assert_eq!(
        s.data("PUT", "/nodes/pve1/qemu/100/config", &[("cores", "2")]),
        Value::Null
    );
    let cfg = s.data("GET", "/nodes/pve1/qemu/100/config", &[]);
    assert!(cfg.get("lock").is_none());
    assert_eq!(cfg["cores"], 2);
    let vol = sim.data().join("nodes/pve1/local-lvm/vm-100-disk-0.raw");
    assert_eq!(vsize(&vol, "raw"), vsize(&img, "qcow2"));
    assert_eq!(cfg["scsi0"], "local-lvm:vm-100-disk-0,size=2560M");
}

#[test]
fn authentication_as_pveproxy_does_it() {
    let sim = Sim::plain(&["--ticket-lifetime", "1s"], &[]);
    let addr = format!("127.0.0.1:{}", sim.port());
    let (s, r, _) = raw(&addr, "GET", "/api2/json/version", &[], "");
    assert_eq!((s, r.as_str()), (401, "No ticket"));
    let (s, r, _) = raw(
        &addr,
        "POST",
        "/api2/json/access/ticket",
        &[],
        "username=root@pam&password=nope",
    );
    assert_eq!((s, r.as_str()), (401, "authentication failure"));
    let sess = Session::login(&sim);
    let (s, r, _) = raw(
        &addr,
        "POST",
        "/api2/json/nodes/pve1/qemu",
        &[("Cookie", &sess.cookie)],
        "vmid=100",
    );
    assert_eq!(
        (s, r.as_str()),
        (401, "Permission denied - invalid csrf token")
    );
    let tok = [("Authorization", "PVEAPIToken=root@pam!ci=tok-secret")];
    let (s, _, v) = raw(&addr, "GET", "/api2/json/version", &tok, "");
    assert_eq!((s, v["data"]["release"].as_str()), (200, Some("9.1")));
    let (s, _, v) = raw(
        &addr,
        "POST",
        "/api2/json/nodes/pve1/qemu",
        &tok,
        "vmid=100",
    );
    assert_eq!(s, 200);
    assert!(
        v["data"]
            .as_str()
            .unwrap()
            .ends_with(":qmcreate:100:root@pam!ci:"),
        "token tasks carry user!token"
    );
    let (s, _, _) = raw(
        &addr,
        "POST",
        "/api2/json/access/ticket",
        &tok,
        "username=root@pam&password=rootpw",
    );
    assert_eq!(s, 403);
    let (s, r, _) = raw(
        &addr,
        "GET",
        "/api2/json/version",
        &[("Authorization", "PVEAPIToken=root@pam!ci=wrong")],
        "",
    );
    assert_eq!((s, r.as_str()), (401, "Authentication failed!"));
    // A read-only user gets 403 on writes: create_vm without VM.Allocate on the VM or a
    // pool is a bare `raise_perm_exc()` (qemu-server API2/Qemu.pm).
    let (_, _, v) = raw(
        &addr,
        "POST",
        "/api2/json/access/ticket",
        &[],
        "username=auditor@pve&password=auditpw",
    );
    let cookie = format!(
        "PVEAuthCookie={}",
        enc(v["data"]["ticket"].as_str().unwrap())
    );
    let csrf = v["data"]["CSRFPreventionToken"]
        .as_str()
        .unwrap()
        .to_string();
    let (s, r, _) = raw(
        &addr,
        "POST",
        "/api2/json/nodes/pve1/qemu",
        &[("Cookie", &cookie), ("CSRFPreventionToken", &csrf)],
        "vmid=101",
    );
    assert_eq!((s, r.as_str()), (403, "Permission check failed"));
    // Tickets expire.
    std::thread::sleep(Duration::from_millis(1200));
    let (s, r, _) = sess.call("GET", "/version", &[]);
    assert_eq!((s, r.as_str()), (401, "Authentication failed!"));
}

#[test]
fn errors_and_parameter_checking() {
    let img = image("small.qcow2", 512, 8);
    let sim = Sim::plain(&[], &[&img]);
    let s = Session::login(&sim);
    let (st, r, _) = s.call("GET", "/nodes/pve1/bogus", &[]);
    assert_eq!(
        (st, r.as_str()),
        (501, "Method 'GET /nodes/pve1/bogus' not implemented")
    );
    let (st, r, v) = s.call(
        "POST",
        "/nodes/pve1/qemu",
        &[
            ("vmid", "100"),
            ("onboot", "true"),
            ("bogus", "1"),
            ("cores", "x"),
        ],
    );
    assert_eq!((st, r.as_str()), (400, "Parameter verification failed."));
    assert_eq!(
        v["errors"]["onboot"],
        "type check ('boolean') failed - got 'true'"
    );
    assert_eq!(
        v["errors"]["cores"],
        "type check ('integer') failed - got 'x'"
    );
    assert_eq!(
        v["errors"]["bogus"],
        "property is not defined in schema and the schema does not allow additional properties"
    );
    let (st, _, v) = s.call(
        "POST",
        "/nodes/pve1/qemu",
        &[
            ("vmid", "100"),
            ("scsi0", "local-lvm:4,import-from=local:import/small.qcow2"),
        ],
    );
    assert_eq!(st, 400);
    assert_eq!(
        v["errors"]["scsi0"],
        "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>"
    );
    let (st, _, v) = s.call(
        "POST",
        "/nodes/pve1/qemu",
        &[
            ("vmid", "100"),
            ("scsi0", "local-lvm:0,import-from=local:iso/x.img"),
        ],
    );
    assert_eq!(
        (st, v["errors"]["scsi0"].as_str()),
        (
            400,
            Some("local:iso/x.img has wrong type 'iso' - needs to be 'images' or 'import'")
        )
    );
    let (st, _, v) = s.call(
        "POST",
        "/nodes/pve1/qemu",
        &[
            ("vmid", "100"),
            (
                "scsi0",
                "local-lvm:0,import-from=local:import/small.qcow2,bogus=1",
            ),
        ],
    );
    assert_eq!(st, 400);
    assert!(
        v["errors"]["scsi0"]
            .as_str()
            .unwrap()
            .contains("scsi0.bogus: property is not defined in schema")
    );
    let (st, _, v) = s.call(
        "PUT",
        "/nodes/pve1/qemu/100/config",
        &[("sshkeys", "ssh-ed25519 AAAA")],
    );
    assert_eq!(st, 400);
    assert!(
        v["errors"]["sshkeys"]
            .as_str()
            .unwrap()
            .starts_with("invalid format - invalid urlencoded string")
    );
    let (st, r, _) = s.call("GET", "/nodes/pve1/qemu/999/config", &[]);
    assert_eq!(
        (st, r.as_str()),
        (
            500,
            "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist"
        )
    );
    // nextid is a string, never reserves, and ?vmid= checks.
    assert_eq!(s.data("GET", "/cluster/nextid", &[]), "100");
    let u = s.data(
        "POST",
        "/nodes/pve1/qemu",
        &[("vmid", "100"), ("cores", "1")],
    );
    s.wait(u.as_str().unwrap());
    assert_eq!(s.data("GET", "/cluster/nextid", &[]), "101");
    let (st, _, v) = s.call("GET", "/cluster/nextid", &[("vmid", "100")]);
    assert_eq!(
        (st, v["errors"]["vmid"].as_str()),
        (400, Some("VM 100 already exists"))
    );
    let (st, r, _) = s.call("POST", "/nodes/pve1/qemu", &[("vmid", "100")]);
    assert_eq!(
        (st, r.as_str()),
        (
            500,
            "unable to create VM 100 - VM 100 already exists on node 'pve1'"
        )
    );
    // digest and delete.
    let cfg = s.data("GET", "/nodes/pve1/qemu/100/config", &[]);
    let (st, r, _) = s.call(
        "PUT",
        "/nodes/pve1/qemu/100/config",
        &[("cores", "2"), ("digest", "0000")],
    );
    assert_eq!(
        (st, r.as_str()),
        (500, "checksum mismatch (file change by other user?)")
    );
    s.data(
        "PUT",
        "/nodes/pve1/qemu/100/config",
        &[("cores", "2"), ("digest", cfg["digest"].as_str().unwrap())],
    );
    let (st, r, _) = s.call("PUT", "/nodes/pve1/qemu/100/config", &[]);
    assert_eq!((st, r.as_str()), (500, "no options specified"));
    let (st, _, v) = s.call(
        "PUT",
        "/nodes/pve1/qemu/100/config",
        &[("cores", "3"), ("delete", "cores")],
    );
    assert_eq!(
        (st, v["errors"]["delete"].as_str()),
        (
            400,
            Some("you can't use '-cores' and -delete cores' at the same time")
        )
    );
    let (st, _, v) = s.call(
        "PUT",
        "/nodes/pve1/qemu/100/config",
        &[("skiplock", "1"), ("cores", "3")],
    );
    assert_eq!(st, 200, "{v}");
}

#[test]
fn tasks_logs_stop_resize_power_and_destroy() {
    let img = image("small.qcow2", 512, 8);
    let sim = Sim::plain(&["--nodes", "pve1,pve2"], &[&img]);
    let s = Session::login(&sim);
    let u = s.data(
        "POST",
        "/nodes/pve1/qemu",
        &[
            ("vmid", "100"),
            ("scsi0", "local-lvm:0,import-from=local:import/small.qcow2"),
            ("net0", "virtio,bridge=vmbr0"),
        ],
    );
    let u = u.as_str().unwrap().to_string();
    // Active in the list while running; the task lives on its node only.
    let active = s.data(
        "GET",
        "/nodes/pve1/tasks",
        &[("source", "active"), ("vmid", "100")],
    );
    assert_eq!(active[0]["upid"], u.as_str());
    let (st, _, v) = s.call("GET", &format!("/nodes/pve2/tasks/{u}/status"), &[]);
    assert_eq!(
        (st, v["errors"]["upid"].as_str()),
        (400, Some("no such task"))
    );
    let (st, _, v) = s.call("GET", "/nodes/pve1/tasks/UPID:bogus/status", &[]);
    assert_eq!(
        (st, v["errors"]["upid"].as_str()),
        (400, Some("unable to parse worker upid"))
    );
    assert_eq!(s.wait(&u)["exitstatus"], "OK");
    let cfg = s.data("GET", "/nodes/pve1/qemu/100/config", &[]);
    let net = cfg["net0"].as_str().unwrap();
    assert!(
        net.starts_with("virtio=BC:24:11:") && net.ends_with(",bridge=vmbr0"),
        "{net}"
    );
    // Log paging.
    let (st, _, v) = s.call(
        "GET",
        &format!("/nodes/pve1/tasks/{u}/log"),
        &[("start", "1"), ("limit", "2")],
    );
    assert_eq!(st, 200);
    assert_eq!(v["data"][0]["n"], 2);
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert!(v["total"].as_u64().unwrap() >= 3);
    // Resize returns a UPID and grows the volume; shrinking fails in the task.
    let r = s.data(
        "PUT",
        "/nodes/pve1/qemu/100/resize",
        &[("disk", "scsi0"), ("size", "+512M")],
    );
    assert!(is_upid(r.as_str().unwrap(), "pve1", "resize", "100"));
    assert_eq!(s.wait(r.as_str().unwrap())["exitstatus"], "OK");
    assert_eq!(
        vsize(
            &sim.data().join("nodes/pve1/local-lvm/vm-100-disk-0.raw"),
            "raw"
        ),
        1 << 30
    );
    let r = s.data(
        "PUT",
        "/nodes/pve1/qemu/100/resize",
        &[("disk", "scsi0"), ("size", "256M")],
    );
    assert_eq!(
        s.wait(r.as_str().unwrap())["exitstatus"],
        "shrinking disks is not supported"
    );
    // Power and destroy.
    let r = s.data("POST", "/nodes/pve1/qemu/100/status/start", &[]);
    assert_eq!(s.wait(r.as_str().unwrap())["exitstatus"], "OK");
    assert_eq!(
        s.data("GET", "/nodes/pve1/qemu/100/status/current", &[])["status"],
        "running"
    );
    let (st, r, _) = s.call("DELETE", "/nodes/pve1/qemu/100", &[]);
    assert_eq!(
        (st, r.as_str()),
        (500, "VM 100 is running - destroy failed")
    );
    let r = s.data("POST", "/nodes/pve1/qemu/100/status/stop", &[]);
    s.wait(r.as_str().unwrap());
    let r = s.data(
        "DELETE",
        "/nodes/pve1/qemu/100",
        &[("purge", "1"), ("destroy-unreferenced-disks", "1")],
    );
    assert_eq!(s.wait(r.as_str().unwrap())["exitstatus"], "OK");
    assert!(
        !sim.data()
            .join("nodes/pve1/local-lvm/vm-100-disk-0.raw")
            .exists()
    );
    // Stopping a task: its log ends with "received interrupt".
    sim.admin("POST", "/faults", json!({"kind": "task", "task_type": "qmcreate", "outcome": "fail", "message": "never reached", "count": 0}));
    let u = s.data(
        "POST",
        "/nodes/pve2/qemu",
        &[("vmid", "101"), ("cores", "1")],
    );
    let u = u.as_str().unwrap().to_string();
    assert_eq!(
        s.data("DELETE", &format!("/nodes/pve2/tasks/{u}"), &[]),
        Value::Null
    );
    let st = s.wait(&u);
    assert_eq!(
        st["exitstatus"],
        "unable to create VM 101 - received interrupt"
    );
    assert_eq!(
        s.log(&u).last().unwrap(),
        "TASK ERROR: unable to create VM 101 - received interrupt"
    );
    let (st, _, _) = s.call("GET", "/nodes/pve2/qemu/101/config", &[]);
    assert_eq!(st, 500, "a stopped create leaves no config");
    // background_delay answers null when the task is done in time.
    let u = s.data("POST", "/nodes/pve1/qemu", &[("vmid", "102")]);
    s.wait(u.as_str().unwrap());
    assert_eq!(
        s.data(
            "POST",
            "/nodes/pve1/qemu/102/config",
            &[("cores", "2"), ("background_delay", "5")]
        ),
        Value::Null
    );
}

#[test]
fn faults_and_the_request_log() {
    let sim = Sim::plain(&[], &[]);
    let s = Session::login(&sim);
    sim.admin("POST", "/faults", json!([
        {"kind": "http", "path": "/version", "status": 596, "message": "Connection timed out", "count": 2},
        {"kind": "latency", "path": "/cluster/status", "ms": 300, "count": 1},
        {"kind": "hide_task", "task_type": "qmcreate", "ms": 500, "count": 1},
        {"kind": "null_upid", "method": "POST", "path": "/status/start", "count": 1}
    ]));
    for _ in 0..2 {
        let (st, r, _) = s.call("GET", "/version", &[]);
        assert_eq!((st, r.as_str()), (596, "Connection timed out"));
    }
    assert_eq!(s.call("GET", "/version", &[]).0, 200);
    let t = Instant::now();
    s.data("GET", "/cluster/status", &[]);
    assert!(t.elapsed() >= Duration::from_millis(300));
    let u = s.data("POST", "/nodes/pve1/qemu", &[("vmid", "100")]);
    let u = u.as_str().unwrap().to_string();
    let (st, _, v) = s.call("GET", &format!("/nodes/pve1/tasks/{u}/status"), &[]);
    assert_eq!(
        (st, v["errors"]["upid"].as_str()),
        (400, Some("no such task"))
    );
    std::thread::sleep(Duration::from_millis(600));
    s.wait(&u);
    assert_eq!(
        s.data("POST", "/nodes/pve1/qemu/100/status/start", &[]),
        Value::Null,
        "null UPID fault"
    );
    // A dropped connection: the answer is cut, but the request was carried out.
    sim.admin(
        "POST",
        "/faults",
        json!({"kind": "drop", "method": "POST", "path": "/status/stop", "count": 1}),
    );
    let (st, _, v) = s.call("POST", "/nodes/pve1/qemu/100/status/stop", &[]);
    assert!(st == 200 && v.is_null(), "the body should be cut");
    std::thread::sleep(Duration::from_millis(100));
    let tasks = sim.admin("GET", "/tasks", Value::Null)["data"]
        .as_array()
        .unwrap()
        .clone();
    assert!(tasks.iter().any(|t| t["type"] == "qmstop"));
    // Ticket revocation.
    sim.admin("POST", "/revoke-tickets", Value::Null);
    assert_eq!(s.call("GET", "/version", &[]).0, 401);
    // The request log: every request, secrets masked.
    let log = std::fs::read_to_string(sim.data().join("requests.jsonl")).unwrap();
    assert!(!log.contains("rootpw"));
    assert!(log.lines().any(|l| l.contains("\"password\":\"********\"")));
    assert!(log.lines().count() >= 10);
}

#[test]
fn download_url_with_checksums_and_filename_rules() {
    let img = image("small.qcow2", 512, 8);
    let bytes = std::fs::read(&img).unwrap();
    let port = serve_bytes(bytes);
    let sum =
        String::from_utf8(Command::new("sha256sum").arg(&img).output().unwrap().stdout).unwrap();
    let sum = sum.split_whitespace().next().unwrap().to_string();
    let sim = Sim::plain(&[], &[]);
    let s = Session::login(&sim);
    let url = format!("http://127.0.0.1:{port}/noble.img");
    let p = |file: &str, ck: &str| {
        vec![
            ("content", "import".to_string()),
            ("filename", file.to_string()),
            ("url", url.clone()),
            ("checksum", ck.to_string()),
            ("checksum-algorithm", "sha256".to_string()),
        ]
    };
    let call = |params: Vec<(&str, String)>| {
        let v: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
        s.call("POST", "/nodes/pve1/storage/local/download-url", &v)
    };
    // An Ubuntu .img must be saved as .qcow2 for the import content type.
    let (st, _, v) = call(p("noble.img", &sum));
    assert_eq!(
        (st, v["errors"]["filename"].as_str()),
        (400, Some("invalid filename or wrong extension"))
    );
    let (st, _, v) = call(p("noble.qcow2", &sum));
    assert_eq!(st, 200);
    let u = v["data"].as_str().unwrap().to_string();
    assert!(is_upid(&u, "pve1", "download", "noble.qcow2"));
    assert_eq!(s.wait(&u)["exitstatus"], "OK");
    let content = s.data(
        "GET",
        "/nodes/pve1/storage/local/content",
        &[("content", "import")],
    );
    assert_eq!(content[0]["volid"], "local:import/noble.qcow2");
    // Again with the same checksum: nothing to do.
    let (_, _, v) = call(p("noble.qcow2", &sum));
    let u = v["data"].as_str().unwrap().to_string();
    assert_eq!(s.wait(&u)["exitstatus"], "OK");
    assert!(
        s.log(&u)
            .iter()
            .any(|l| l == "OK, got correct file already, no need to download")
    );
    // A wrong checksum: the task fails and nothing is left.
    let (_, _, v) = call(p("other.qcow2", &"0".repeat(64)));
    let u = v["data"].as_str().unwrap().to_string();
    let exit = s.wait(&u)["exitstatus"].as_str().unwrap().to_string();
    assert!(exit.starts_with("checksum mismatch: got '"), "{exit}");
    let names: Vec<String> = std::fs::read_dir(sim.data().join("nodes/pve1/local/import"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(names, ["noble.qcow2"]);
    let (st, r, _) = s.call(
        "POST",
        "/nodes/pve1/storage/local-lvm/download-url",
        &[
            ("content", "import"),
            ("filename", "a.qcow2"),
            ("url", &url),
        ],
    );
    assert_eq!(
        (st, r.as_str()),
        (
            500,
            "can't upload to storage type 'lvmthin', not a file based storage!"
        )
    );
}

#[test]
fn https_with_the_generated_ca_and_fingerprint() {
    let sim = Sim::start(&[], &[]);
    let ca = std::fs::read(sim.info["ca"].as_str().unwrap()).unwrap();
    let certs: Vec<_> = ureq::tls::parse_pem(&ca)
        .filter_map(|i| match i.ok()? {
            ureq::tls::PemItem::Certificate(c) => Some(c),
            _ => None,
        })
        .collect();
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
        .build();
    let agent = ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut r = agent
        .get(&format!("https://127.0.0.1:{}/api2/json/nodes", sim.port()))
        .header("Authorization", "PVEAPIToken=root@pam!ci=tok-secret")
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(v["data"][0]["ssl_fingerprint"], sim.info["fingerprint"]);
    let fp = sim.info["fingerprint"].as_str().unwrap();
    assert_eq!(fp.len(), 95);
    assert!(sim.dir.join("data/pve-ssl.pem").exists());
}

// ---- Where PVE checks inside its workers, lags, and hides (issue: behave as real PVE) ----

/// qemu-server API2/Qemu.pm, update_vm_api: `$load_and_check_config` runs before forking and
/// again in the `qmconfig` worker under the file lock.
#[test]
fn config_updates_are_checked_again_inside_the_worker() {
    let sim = Sim::plain(&[], &[]);
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[]);
    let digest = s.data("GET", "/nodes/pve1/qemu/100/config", &[])["digest"]
        .as_str()
        .unwrap()
        .to_string();
    // Three updates sent with one digest all pass the early check and get a UPID; under the
    // lock, the first applies and the others find the config changed.
    let upids: Vec<String> = ["2", "3", "4"]
        .iter()
        .map(|c| {
            s.data(
                "POST",
                "/nodes/pve1/qemu/100/config",
                &[("cores", c), ("digest", &digest)],
            )
            .as_str()
            .unwrap()
            .to_string()
        })
        .collect();
    let exits: Vec<String> = upids
        .iter()
        .map(|u| s.wait(u)["exitstatus"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(exits.iter().filter(|e| *e == "OK").count(), 1, "{exits:?}");
    assert_eq!(
        exits
            .iter()
            .filter(|e| *e == "checksum mismatch (file change by other user?)")
            .count(),
        2,
        "{exits:?}"
    );
    // The balloon check is part of it: refused before forking when visible then.
    let (st, reason, _) = s.call(
        "POST",
        "/nodes/pve1/qemu/100/config",
        &[("balloon", "4096")],
    );
    assert_eq!(
        (st, reason.as_str()),
        (
            500,
            "balloon value too large (must be smaller than assigned memory)"
        )
    );
    // A lock taken after the early check fails the task, not the request.
    sim.admin(
        "POST",
        "/lock",
        json!({"vmid": 100, "ms": 2500, "config_lock": "backup", "set_after_ms": 800}),
    );
    let u = s.data("POST", "/nodes/pve1/qemu/100/config", &[("cores", "8")]);
    assert_eq!(
        s.wait(u.as_str().unwrap())["exitstatus"],
        "VM is locked (backup)"
    );
}

/// QemuServer.pm vm_start / _do_vm_stop and Qemu.pm resize_vm, destroy_vm: the lock is
/// checked in the worker; stopping a stopped VM is a no-op that ends OK; destroy writes
/// `lock: destroyed` before it removes the config.
#[test]
fn power_resize_and_destroy_check_the_lock_in_the_worker() {
    let img = image("small.qcow2", 512, 8);
    let sim = Sim::plain(&["--task-duration", "qmdestroy=3s"], &[&img]);
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "100",
        &[("scsi0", "local-lvm:0,import-from=local:import/small.qcow2")],
    );
    for action in ["stop", "shutdown"] {
        let u = s.data(
            "POST",
            &format!("/nodes/pve1/qemu/100/status/{action}"),
            &[],
        );
        assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK", "{action}");
    }
    let (st, reason, _) = s.call("POST", "/nodes/pve1/qemu/100/status/reboot", &[]);
    assert_eq!((st, reason.as_str()), (500, "VM 100 not running"));

    sim.admin(
        "POST",
        "/lock",
        json!({"vmid": 100, "ms": 4000, "config_lock": "backup"}),
    );
    for (method, path, params) in [
        ("POST", "/nodes/pve1/qemu/100/status/start", vec![]),
        (
            "PUT",
            "/nodes/pve1/qemu/100/resize",
            vec![("disk", "scsi0"), ("size", "1G")],
        ),
        ("DELETE", "/nodes/pve1/qemu/100", vec![]),
    ] {
        let (st, r, v) = s.call(method, path, &params);
        assert_eq!(st, 200, "{method} {path}: {r}");
        let u = v["data"].as_str().unwrap().to_string();
        assert_eq!(
            s.wait(&u)["exitstatus"],
            "VM is locked (backup)",
            "{method} {path}"
        );
    }
    // The backup ends; destroy shows `lock: destroyed` while it finishes.
    std::thread::sleep(Duration::from_millis(4200));
    let u = s.data("DELETE", "/nodes/pve1/qemu/100", &[]);
    let u = u.as_str().unwrap().to_string();
    let t = Instant::now();
    let mut seen = false;
    while t.elapsed() < Duration::from_secs(5) && !seen {
        let (st, _, v) = s.call("GET", "/nodes/pve1/qemu/100/config", &[]);
        seen = st == 200 && v["data"]["lock"] == "destroyed";
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(seen, "destroy never showed lock: destroyed");
    assert_eq!(s.wait(&u)["exitstatus"], "OK");
}

/// pve-manager API2/Cluster.pm resources + API2Tools.pm extract_vm_stats: `lock` and `tags`
/// at once, name/status/maxmem from pvestatd's last round.
#[test]
fn cluster_resources_lag_behind_new_vms() {
    let sim = Sim::plain(&["--stats-interval", "2s"], &[]);
    let s = Session::login(&sim);
    let t = Instant::now();
    quick_vm(&s, "100", &[("name", "web1"), ("tags", "a")]);
    let list = s.data("GET", "/cluster/resources", &[("type", "vm")]);
    if t.elapsed() < Duration::from_millis(1800) {
        assert_eq!(list[0]["status"], "unknown", "{list}");
        assert!(list[0].get("name").is_none(), "{list}");
        assert!(list[0].get("maxmem").is_none(), "{list}");
        assert_eq!(list[0]["tags"], "a", "{list}");
    }
    std::thread::sleep(Duration::from_millis(2300));
    let list = s.data("GET", "/cluster/resources", &[("type", "vm")]);
    assert_eq!(
        (list[0]["name"].as_str(), list[0]["status"].as_str()),
        (Some("web1"), Some("stopped")),
        "{list}"
    );
}

/// pve-manager API2/Tasks.pm: other users' tasks need Sys.Audit on the node; active tasks
/// are listed as RUNNING; the log of an unknown task answers 200.
#[test]
fn task_visibility_follows_sys_audit() {
    let sim = Sim::plain(&["--user", "ops@pve:opspw:nosysaudit"], &[]);
    let root = Session::login(&sim);
    let ops = Session::login_as(&sim, "ops@pve", "opspw");
    quick_vm(&root, "100", &[]);
    let u = root.data("POST", "/nodes/pve1/qemu/100/status/start", &[]);
    let u = u.as_str().unwrap().to_string();
    let active = root.data("GET", "/nodes/pve1/tasks", &[("source", "active")]);
    assert_eq!(active[0]["status"], "RUNNING", "{active}");
    assert_eq!(
        ops.data("GET", "/nodes/pve1/tasks", &[("source", "all")]),
        json!([])
    );
    for tail in ["status", "log"] {
        let (st, reason, _) = ops.call("GET", &format!("/nodes/pve1/tasks/{u}/{tail}"), &[]);
        assert_eq!(
            (st, reason.as_str()),
            (403, "Permission check failed (/nodes/pve1, Sys.Audit)"),
            "{tail}"
        );
    }
    let mine = ops.data("POST", "/nodes/pve1/qemu", &[("vmid", "101")]);
    let mine = mine.as_str().unwrap().to_string();
    assert_eq!(
        ops.data("GET", "/nodes/pve1/tasks", &[("source", "all")])[0]["upid"],
        mine.as_str()
    );
    let perms = ops.data("GET", "/access/permissions", &[("path", "/nodes/pve1")]);
    assert!(perms["/nodes/pve1"].get("Sys.Audit").is_none(), "{perms}");
    let unknown = "UPID:pve1:00001234:00ABCDEF:6B000000:qmstart:100:root@pam:";
    let (st, _, v) = root.call("GET", &format!("/nodes/pve1/tasks/{unknown}/log"), &[]);
    assert_eq!(st, 200);
    assert_eq!(
        v["data"][0]["t"],
        "unable to open file - No such file or directory"
    );
    root.wait(&u);
}

/// pve-http-server AnyEvent.pm, response: `keep_alive = 0 if $code >= 400`.
#[test]
fn error_answers_close_the_connection() {
    let sim = Sim::plain(&[], &[]);
    let mut c = TcpStream::connect(format!("127.0.0.1:{}", sim.port())).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET /api2/json/version HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");
    assert!(text.contains("Connection: close"), "{text}");
}

/// pve-storage API2/Storage/Status.pm download_url and Storage.pm normalize_content_filename.
#[test]
fn download_url_normalises_names_and_checks_compression_in_the_task() {
    let img = image("small.qcow2", 512, 8);
    let bytes = std::fs::read(&img).unwrap();
    let port = serve_bytes(bytes);
    let sim = Sim::plain(&[], &[]);
    let s = Session::login(&sim);
    let url = format!("http://127.0.0.1:{port}/x");
    let u = s.data(
        "POST",
        "/nodes/pve1/storage/local/download-url",
        &[
            ("url", &url),
            ("content", "import"),
            ("filename", "my image (1).qcow2"),
        ],
    );
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
    assert!(
        sim.data()
            .join("nodes/pve1/local/import/my_image__1_.qcow2")
            .exists()
    );
    let (st, _, v) = s.call(
        "POST",
        "/nodes/pve1/storage/local/download-url",
        &[
            ("url", &url),
            ("content", "import"),
            ("filename", "noble.QCOW2"),
        ],
    );
    assert_eq!(
        (st, v["errors"]["filename"].as_str()),
        (400, Some("invalid filename or wrong extension"))
    );
    let u = s.data(
        "POST",
        "/nodes/pve1/storage/local/download-url",
        &[
            ("url", &url),
            ("content", "import"),
            ("filename", "c.qcow2"),
            ("compression", "gz"),
        ],
    );
    assert_eq!(
        s.wait(u.as_str().unwrap())["exitstatus"],
        "decompression not supported for import"
    );
}

/// Absolute paths are format-detected (qemu-server Qemu.pm create_disks: file_size_info with
/// `auto-detect`); `import/x.img` is not an import volume (pve-storage Plugin.pm
/// parse_volname); LVM rounds volumes up to 4 MiB extents; new volumes are owner-only;
/// `--import-rate` paces every import.
#[test]
fn imports_detect_formats_round_to_extents_stay_private_and_are_paced() {
    let odd = image("odd-1001.qcow2", 1001, 4);
    let sim = Sim::plain(&["--import-rate", "200M"], &[&odd]);
    let s = Session::login(&sim);
    // A qcow2 named .img, imported from an absolute path by root.
    let named_img = sim.dir.join("cloud.img");
    std::fs::copy(&odd, &named_img).unwrap();
    let src = format!("local-lvm:0,import-from={}", named_img.display());
    let t = Instant::now();
    let u = s.data(
        "POST",
        "/nodes/pve1/qemu",
        &[("vmid", "100"), ("scsi0", &src)],
    );
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
    let cfg = s.data("GET", "/nodes/pve1/qemu/100/config", &[]);
    assert_eq!(cfg["scsi0"], "local-lvm:vm-100-disk-0,size=1004M");
    let vol = sim.data().join("nodes/pve1/local-lvm/vm-100-disk-0.raw");
    assert_eq!(vsize(&vol, "raw"), 1004 << 20);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&vol).unwrap().permissions().mode() & 0o077,
        0,
        "a volume readable by others"
    );
    // 1001 MiB at 200 MiB/s: the copy (4 MiB of data, fast on any disk) takes the 5 s the
    // rate gives it.
    assert!(
        t.elapsed() >= Duration::from_millis(4800),
        "a paced import ended after {:?}",
        t.elapsed()
    );
    let (st, _, v) = s.call(
        "POST",
        "/nodes/pve1/qemu",
        &[
            ("vmid", "101"),
            ("scsi0", "local-lvm:0,import-from=local:import/x.img"),
        ],
    );
    assert_eq!(st, 400, "{v}");
}

/// pve-common RESTEnvironment.pm, `$kill_process_group`: a worker that does not end within
/// 5 s of SIGTERM is killed; it writes no exit line (status `unexpected status`), and a
/// killed create leaves `lock: create` behind.
#[test]
fn a_worker_deaf_to_sigterm_is_killed_after_five_seconds() {
    let img = image("small.qcow2", 512, 8);
    let sim = Sim::plain(&["--import-rate", "20M"], &[&img]);
    let s = Session::login(&sim);
    sim.admin(
        "POST",
        "/faults",
        json!({"kind": "deaf_task", "task_type": "qmcreate", "count": 1}),
    );
    let u = s.data(
        "POST",
        "/nodes/pve1/qemu",
        &[
            ("vmid", "100"),
            ("scsi0", "local-lvm:0,import-from=local:import/small.qcow2"),
        ],
    );
    let u = u.as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(1500));
    let t = Instant::now();
    assert_eq!(
        s.data("DELETE", &format!("/nodes/pve1/tasks/{u}"), &[]),
        Value::Null
    );
    assert!(
        t.elapsed() >= Duration::from_millis(4900),
        "{:?}",
        t.elapsed()
    );
    let st = s.wait(&u);
    assert_eq!(st["exitstatus"], "unexpected status");
    assert!(
        !s.log(&u).iter().any(|l| l.starts_with("TASK ")),
        "a killed worker wrote an exit line"
    );
    let cfg = s.data("GET", "/nodes/pve1/qemu/100/config", &[]);
    assert_eq!(cfg["lock"], "create", "{cfg}");
    // It stays so: nothing finishes or cleans up after the kill.
    std::thread::sleep(Duration::from_secs(2));
    let cfg = s.data("GET", "/nodes/pve1/qemu/100/config", &[]);
    assert_eq!(cfg["lock"], "create", "{cfg}");
    assert!(cfg.get("scsi0").is_none(), "{cfg}");
}

/// qemu-server's pending section: a running VM takes at once what hotplugs (a name, a new
/// NIC), keeps cores and memory pending (GET config shows them, `current=1` does not, GET
/// pending lists them) until a start or reboot applies them; a stopped VM applies everything.
/// Cloud-init options apply to the config at once but wait for the drive to be regenerated.
#[test]
fn pending_changes_wait_for_the_next_start() {
    let sim = Sim::plain(&[], &[]);
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "100",
        &[
            ("cores", "1"),
            ("ide2", "local-lvm:cloudinit"),
            ("ciuser", "a"),
        ],
    );
    let u = s.data("POST", "/nodes/pve1/qemu/100/status/start", &[]);
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
    let u = s.data(
        "POST",
        "/nodes/pve1/qemu/100/config",
        &[
            ("cores", "4"),
            ("memory", "4096"),
            ("name", "renamed"),
            ("net1", "virtio,bridge=vmbr0"),
            ("ciuser", "b"),
        ],
    );
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
    let current = s.data("GET", "/nodes/pve1/qemu/100/config?current=1", &[]);
    assert_eq!(current["cores"], 1);
    assert_eq!(current["memory"], "2048");
    assert_eq!(current["name"], "renamed");
    assert!(current["net1"].as_str().unwrap().contains("bridge=vmbr0"));
    assert_eq!(current["ciuser"], "b");
    assert_eq!(
        s.data("GET", "/nodes/pve1/qemu/100/config", &[])["cores"],
        4
    );
    let pending = s.data("GET", "/nodes/pve1/qemu/100/pending", &[]);
    let with_pending: Vec<&str> = pending
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i.get("pending").is_some())
        .map(|i| i["key"].as_str().unwrap())
        .collect();
    assert_eq!(with_pending, ["cores", "memory"]);
    let ci = s.data("GET", "/nodes/pve1/qemu/100/cloudinit", &[]);
    assert!(
        ci.as_array()
            .unwrap()
            .contains(&json!({"key": "ciuser", "value": "a", "pending": "b"})),
        "{ci}"
    );
    let u = s.data("POST", "/nodes/pve1/qemu/100/status/reboot", &[]);
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
    let current = s.data("GET", "/nodes/pve1/qemu/100/config?current=1", &[]);
    assert_eq!(
        (current["cores"].clone(), current["memory"].clone()),
        (json!(4), json!("4096"))
    );
    let pending = s.data("GET", "/nodes/pve1/qemu/100/pending", &[]);
    assert!(
        pending
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i.get("pending").is_none())
    );
    let ci = s.data("GET", "/nodes/pve1/qemu/100/cloudinit", &[]);
    assert!(
        ci.as_array()
            .unwrap()
            .iter()
            .all(|i| i.get("pending").is_none()),
        "{ci}"
    );
    // Stopped: everything applies at once.
    let u = s.data("POST", "/nodes/pve1/qemu/100/status/stop", &[]);
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
    let u = s.data("POST", "/nodes/pve1/qemu/100/config", &[("cores", "2")]);
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
    assert_eq!(
        s.data("GET", "/nodes/pve1/qemu/100/config?current=1", &[])["cores"],
        2
    );
    // A stopped VM's update records nothing against the drive (cloudinit_pending reads the
    // `[special:cloudinit]` section only vmconfig_hotplug_pending makes): the option is listed
    // with its new value, nothing pending; PUT cloudinit regenerates the drive all the same.
    let u = s.data("POST", "/nodes/pve1/qemu/100/config", &[("ciuser", "c")]);
    s.wait(u.as_str().unwrap());
    let ci = s.data("GET", "/nodes/pve1/qemu/100/cloudinit", &[]);
    assert!(
        ci.as_array()
            .unwrap()
            .contains(&json!({"key": "ciuser", "value": "c"})),
        "{ci}"
    );
    assert_eq!(
        s.data("PUT", "/nodes/pve1/qemu/100/cloudinit", &[]),
        Value::Null
    );
    let ci = s.data("GET", "/nodes/pve1/qemu/100/cloudinit", &[]);
    assert!(
        ci.as_array()
            .unwrap()
            .iter()
            .all(|i| i.get("pending").is_none()),
        "{ci}"
    );
}

/// QemuServer/Agent.pm, assert_agent_available: no `agent` → not configured; stopped → not
/// running; before the agent is up → `QEMU guest agent is not running`; then the interfaces.
#[test]
fn the_guest_agent_answers_after_the_boot() {
    let sim = Sim::plain(
        &["--agent-delay", "1s", "--agent-ip", "101=198.51.100.7"],
        &[],
    );
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("net0", "virtio,bridge=vmbr0")]);
    quick_vm(
        &s,
        "101",
        &[("net0", "virtio,bridge=vmbr0"), ("agent", "1")],
    );
    let path = |id: u32| format!("/nodes/pve1/qemu/{id}/agent/network-get-interfaces");
    assert_eq!(
        s.call("GET", &path(100), &[]).1,
        "No QEMU guest agent configured"
    );
    assert_eq!(s.call("GET", &path(101), &[]).1, "VM 101 is not running");
    let u = s.data("POST", "/nodes/pve1/qemu/101/status/start", &[]);
    s.wait(u.as_str().unwrap());
    assert_eq!(
        s.call("GET", &path(101), &[]).1,
        "QEMU guest agent is not running"
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let r = s.data("GET", &path(101), &[]);
    let eth0 = &r["result"][1];
    assert_eq!(eth0["name"], "eth0");
    assert_eq!(eth0["ip-addresses"][0]["ip-address"], "198.51.100.7");
}

/// qemu-server API2/Qemu.pm template and clone_vm: a template's disks become base volumes;
/// linked clones are thin snapshots of them (refused from a non-template), made under a shared
/// lock of the source so they run in parallel; the new VM carries `lock: clone` while its task
/// runs; a full clone copies with progress lines; a base its linked clones use is not freed.
#[test]
fn templates_and_clones() {
    let img = image("tpl.qcow2", 64, 8);
    let sim = Sim::plain(&["--import-rate", "32M"], &[&img]);
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "100",
        &[
            ("scsi0", "local-lvm:0,import-from=local:import/tpl.qcow2"),
            ("ide2", "local-lvm:cloudinit"),
            ("net0", "virtio,bridge=vmbr0"),
            ("bios", "ovmf"),
            ("efidisk0", "local-lvm:1,efitype=4m,pre-enrolled-keys=1"),
            ("tpmstate0", "local-lvm:1,version=v2.0"),
        ],
    );
    let conf = s.data("GET", "/nodes/pve1/qemu/100/config", &[]);
    assert!(
        conf["efidisk0"]
            .as_str()
            .unwrap()
            .ends_with("efitype=4m,ms-cert=2023k,pre-enrolled-keys=1,size=4M"),
        "{conf}"
    );
    assert!(
        conf["tpmstate0"].as_str().unwrap().contains("size=4M"),
        "{conf}"
    );
    // A linked clone of a non-template is refused in the task.
    let u = s.data(
        "POST",
        "/nodes/pve1/qemu/100/clone",
        &[("newid", "150"), ("full", "0")],
    );
    let exit = s.wait(u.as_str().unwrap())["exitstatus"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        exit.starts_with(
            "clone failed: Linked clone feature is not supported for 'local-lvm:vm-100-disk-"
        ),
        "{exit}"
    );
    assert_eq!(s.call("GET", "/nodes/pve1/qemu/150/config", &[]).0, 500);
    // A running VM is not converted.
    let u = s.data("POST", "/nodes/pve1/qemu/100/status/start", &[]);
    s.wait(u.as_str().unwrap());
    let (st, msg, _) = s.call("POST", "/nodes/pve1/qemu/100/template", &[]);
    assert_eq!(
        (st, msg.as_str()),
        (500, "you can't convert a VM to template if VM is running")
    );
    let u = s.data("POST", "/nodes/pve1/qemu/100/status/stop", &[]);
    s.wait(u.as_str().unwrap());
    let u = s.data("POST", "/nodes/pve1/qemu/100/template", &[]);
    let t = s.wait(u.as_str().unwrap());
    assert_eq!(t["exitstatus"], "OK");
    assert!(u.as_str().unwrap().contains(":qmtemplate:100:"));
    let conf = s.data("GET", "/nodes/pve1/qemu/100/config", &[]);
    assert_eq!(conf["template"], 1);
    assert!(
        conf["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("local-lvm:base-100-disk-"),
        "{conf}"
    );
    let (st, msg, _) = s.call("POST", "/nodes/pve1/qemu/100/template", &[]);
    assert_eq!(
        (st, msg.as_str()),
        (500, "you can't convert a template to a template")
    );
    // Five linked clones at once: all succeed; each new VM is locked `clone` while it runs.
    let upids: Vec<String> = (101..=105)
        .map(|id| {
            s.data(
                "POST",
                "/nodes/pve1/qemu/100/clone",
                &[("newid", &id.to_string()), ("name", &format!("c{id}"))],
            )
            .as_str()
            .unwrap()
            .to_string()
        })
        .collect();
    for u in &upids {
        assert_eq!(s.wait(u)["exitstatus"], "OK", "{u}");
        assert!(u.contains(":qmclone:100:"));
    }
    let c = s.data("GET", "/nodes/pve1/qemu/103/config", &[]);
    let scsi0 = c["scsi0"].as_str().unwrap();
    assert!(scsi0.starts_with("local-lvm:base-100-disk-"), "{c}");
    assert!(scsi0.contains("/vm-103-disk-"), "{c}");
    assert_eq!(c["name"], "c103");
    assert!(c.get("template").is_none());
    assert!(
        c["ide2"]
            .as_str()
            .unwrap()
            .starts_with("local-lvm:vm-103-cloudinit")
    );
    assert!(
        c["tpmstate0"]
            .as_str()
            .unwrap()
            .starts_with("local-lvm:vm-103-disk-"),
        "{c}"
    );
    assert_ne!(
        c["net0"],
        s.data("GET", "/nodes/pve1/qemu/100/config", &[])["net0"]
    );
    // The linked clone's volume is a thin snapshot: it can start and be grown.
    let u = s.data(
        "PUT",
        "/nodes/pve1/qemu/103/resize",
        &[("disk", "scsi0"), ("size", "+64M")],
    );
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
    assert!(
        s.data("GET", "/nodes/pve1/qemu/103/config", &[])["scsi0"]
            .as_str()
            .unwrap()
            .contains("size=128M")
    );
    // A full clone of the template copies, with progress lines.
    let u = s.data(
        "POST",
        "/nodes/pve1/qemu/100/clone",
        &[("newid", "120"), ("full", "1"), ("storage", "local")],
    );
    let u = u.as_str().unwrap().to_string();
    let mut saw_lock = false;
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        let (st, _, body) = s.call("GET", "/nodes/pve1/qemu/120/config", &[]);
        if st == 200 && body["data"]["lock"] == "clone" {
            saw_lock = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(saw_lock, "the new VM never showed lock: clone");
    assert_eq!(s.wait(&u)["exitstatus"], "OK");
    let log = s.data(
        "GET",
        &format!("/nodes/pve1/tasks/{}/log", enc(&u)),
        &[("limit", "500")],
    );
    assert!(log.to_string().contains("transferred "), "{log}");
    let c = s.data("GET", "/nodes/pve1/qemu/120/config", &[]);
    assert!(
        c["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("local:120/vm-120-disk-"),
        "{c}"
    );
    assert!(c.get("lock").is_none());
    // Destroying the template leaves the base volumes its clones use, with a warning.
    let u = s.data("DELETE", "/nodes/pve1/qemu/100", &[("purge", "1")]);
    let t = s.wait(u.as_str().unwrap());
    assert!(
        t["exitstatus"].as_str().unwrap().starts_with("WARNINGS"),
        "{t}"
    );
    let u = s.data("POST", "/nodes/pve1/qemu/103/status/start", &[]);
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
}

/// qemu-server API2/Qemu.pm clone_vm: the `qmclone` UPID carries the source's vmid, so the
/// worker's first line, `creating a clone of VM $vmid with ID $newid` (`$clonefn`), is what
/// names the new id; the API refuses a new id whose config exists before forking anything
/// (`$load_and_check`), in PVE's words.
#[test]
fn a_clone_names_its_new_id_first_and_an_existing_id_is_refused_unforked() {
    let sim = Sim::plain(&[], &[]);
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("scsi0", "local-lvm:1")]);
    let u = s.data("POST", "/nodes/pve1/qemu/100/template", &[]);
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
    // Two clones of the template at once: one id in their UPIDs, each log names its own.
    let upids: Vec<String> = ["101", "102"]
        .iter()
        .map(|id| {
            s.data("POST", "/nodes/pve1/qemu/100/clone", &[("newid", id)])
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for (upid, id) in upids.iter().zip(["101", "102"]) {
        assert!(is_upid(upid, "pve1", "qmclone", "100"), "{upid}");
        assert_eq!(s.wait(upid)["exitstatus"], "OK", "{upid}");
        let log = s.log(upid);
        assert_eq!(
            log.first().map(String::as_str),
            Some(format!("creating a clone of VM 100 with ID {id}").as_str()),
            "{log:?}"
        );
    }
    let clones = |s: &Session| {
        s.data(
            "GET",
            "/nodes/pve1/tasks",
            &[("source", "all"), ("typefilter", "qmclone")],
        )
        .as_array()
        .unwrap()
        .len()
    };
    assert_eq!(clones(&s), 2);
    let (status, reason, _) = s.call("POST", "/nodes/pve1/qemu/100/clone", &[("newid", "101")]);
    assert_eq!(
        (status, reason.as_str()),
        (500, "unable to create VM 101: config file already exists")
    );
    assert_eq!(clones(&s), 2, "a refused clone forks no task");
}

/// A template on a directory storage: its qcow2 disk becomes `N/base-N-disk-K.qcow2`, and a
/// linked clone `N/base-N-disk-K.qcow2/M/vm-M-disk-J.qcow2`, a qcow2 backed by the base.
#[test]
fn linked_clones_on_a_directory_storage() {
    let img = image("dirtpl.qcow2", 64, 8);
    let sim = Sim::plain(&[], &[&img]);
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "200",
        &[(
            "scsi0",
            "local:0,import-from=local:import/dirtpl.qcow2,format=qcow2",
        )],
    );
    let u = s.data("POST", "/nodes/pve1/qemu/200/template", &[]);
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
    let conf = s.data("GET", "/nodes/pve1/qemu/200/config", &[]);
    assert!(
        conf["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("local:200/base-200-disk-0.qcow2"),
        "{conf}"
    );
    let u = s.data("POST", "/nodes/pve1/qemu/200/clone", &[("newid", "201")]);
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
    let c = s.data("GET", "/nodes/pve1/qemu/201/config", &[]);
    assert!(
        c["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("local:200/base-200-disk-0.qcow2/201/vm-201-disk-0.qcow2"),
        "{c}"
    );
    let listed = s.data(
        "GET",
        "/nodes/pve1/storage/local/content",
        &[("vmid", "201")],
    );
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let u = s.data(
        "PUT",
        "/nodes/pve1/qemu/201/resize",
        &[("disk", "scsi0"), ("size", "+64M")],
    );
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
}

/// What a clone's config carries, after clone_vm: the source's `meta` (its creation record;
/// only create_vm writes a new one), a new SMBIOS UUID with the source's other smbios1
/// fields, a new vmgenid where the source had one, and no `template`.
#[test]
fn a_clone_keeps_the_sources_meta_and_gets_new_ids() {
    let sim = Sim::plain(&[], &[]);
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "100",
        &[("scsi0", "local-lvm:1"), ("smbios1", "serial=abc")],
    );
    let source = s.data("GET", "/nodes/pve1/qemu/100/config", &[]);
    let u = s.data("POST", "/nodes/pve1/qemu/100/template", &[]);
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
    let u = s.data("POST", "/nodes/pve1/qemu/100/clone", &[("newid", "101")]);
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
    let clone = s.data("GET", "/nodes/pve1/qemu/101/config", &[]);
    assert_eq!(clone["meta"], source["meta"], "{clone}");
    assert!(clone.get("template").is_none(), "{clone}");
    let smbios = clone["smbios1"].as_str().unwrap();
    assert!(smbios.starts_with("serial=abc,uuid="), "{smbios}");
    assert_ne!(smbios, source["smbios1"].as_str().unwrap());
    if let Some(generation) = source["vmgenid"].as_str() {
        assert_ne!(clone["vmgenid"].as_str(), Some(generation), "{clone}");
        assert!(clone["vmgenid"].is_string(), "{clone}");
    }
}
