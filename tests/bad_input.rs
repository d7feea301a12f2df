//! Bad input: every invalid option fails with a message naming the option or the cause, no
//! panic, and nothing changed on the server.

use std::net::TcpListener;
use std::process::{Command, Stdio};

use crate::support::*;
use serde_json::{Value, json};

fn disk(extra: Value) -> Value {
    json!([merge(&[
        json!({"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2"}),
        extra
    ])])
}

/// (options to change, text the message must contain)
fn cases(sim: &Sim) -> Vec<(Value, String)> {
    let c = |v: Value, m: &str| (v, m.to_string());
    vec![
        c(
            json!({"api_host": null}),
            "missing required arguments: api_host",
        ),
        c(json!({"cpus": 2}), "Unsupported parameters: cpus"),
        c(
            json!({"cores": "many"}),
            "argument 'cores' is of type str and we were unable to convert to int",
        ),
        c(json!({"cores": 0}), "value of cores must be at least 1"),
        c(json!({"memory": 8}), "value of memory must be at least 16"),
        c(json!({"vmid": 99}), "value of vmid must be at least 100"),
        c(json!({"vmid": "abc"}), "argument 'vmid'"),
        c(
            json!({"state": "gone"}),
            "value of state must be one of: present, absent, started, stopped, restarted, got: gone",
        ),
        c(
            json!({"timeout": "soon"}),
            "value of timeout is not a valid duration",
        ),
        c(
            json!({"poll_interval": "10ms"}),
            "poll_interval must be between 50ms and 60s, got \"10ms\"",
        ),
        c(
            json!({"poll_interval": "5m"}),
            "poll_interval must be between 50ms and 60s, got \"5m\"",
        ),
        c(
            json!({"api_timeout": "-3"}),
            "value of api_timeout is not a valid duration",
        ),
        c(
            json!({"api_port": 70000}),
            "value of api_port must be at most 65535",
        ),
        c(json!({"onboot": "perhaps"}), "argument 'onboot'"),
        c(
            json!({"shutdown_timeout": -1}),
            "value of shutdown_timeout must be at least 0",
        ),
        c(
            json!({"disks": "scsi0"}),
            "argument 'disks' is of type str and we were unable to convert to list",
        ),
        c(
            json!({"disks": [{"storage": "local-lvm", "size": "1G"}]}),
            "missing required arguments: slot found in disks[0]",
        ),
        c(
            json!({"disks": disk(json!({"sise": "1G"}))}),
            "Unsupported parameters found in disks[0]: sise",
        ),
        c(
            json!({"disks": disk(json!({"slot": "nvme0"}))}),
            "disks[0].slot must be a drive slot",
        ),
        c(
            json!({"disks": disk(json!({"slot": "scsi0,cache=unsafe"}))}),
            "disks[0].slot must be a drive slot",
        ),
        c(
            json!({"disks": disk(json!({"import_from": "local:import/a.qcow2,format=raw"}))}),
            "disks[0].import_from must not contain ','",
        ),
        c(
            json!({"disks": disk(json!({"import_from": "local:import/a.qcow2\nscsi1: local:1"}))}),
            "disks[0].import_from must not contain '\\n'",
        ),
        c(
            json!({"disks": disk(json!({"import_from": "noble.qcow2"}))}),
            "disks[0].import_from must be a volume ID",
        ),
        c(
            json!({"disks": disk(json!({"import_from": "/var/lib/../../etc/shadow"}))}),
            "disks[0].import_from must not contain '..'",
        ),
        c(
            json!({"disks": disk(json!({"storage": "local-lvm=x"}))}),
            "disks[0].storage must be a PVE storage ID",
        ),
        c(
            json!({"disks": disk(json!({"size": "huge"}))}),
            "disks[0].size must be a size such as 20G",
        ),
        c(
            json!({"disks": disk(json!({"size": "-1G"}))}),
            "disks[0].size must be a size such as 20G",
        ),
        c(
            json!({"disks": disk(json!({"format": "iso"}))}),
            "value of disks[0].format must be one of: raw, qcow2, vmdk",
        ),
        c(
            json!({"disks": [{"slot": "scsi1", "storage": "local-lvm"}]}),
            "disks[0].slot: give import_from (a cloud image) or size",
        ),
        c(
            json!({"disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}, {"slot": "scsi0", "storage": "local-lvm", "size": "1G"}]}),
            "slot scsi0 is used twice",
        ),
        c(json!({"name": "web_1"}), "name must be a valid DNS name"),
        c(
            json!({"name": "web\nscsi1: x"}),
            "name must be a valid DNS name",
        ),
        c(
            json!({"net": [{"bridge": "vmbr0,firewall=0"}]}),
            "net[0].bridge must not contain ','",
        ),
        c(
            json!({"net": [{"macaddr": "zz:zz"}]}),
            "net[0].macaddr must be a MAC address",
        ),
        c(
            json!({"net": [{"model": "ne2k"}]}),
            "value of net[0].model must be one of",
        ),
        c(
            json!({"ipconfig": [{"ip": "10.0.0.5"}]}),
            "ipconfig[0].ip is not valid",
        ),
        c(
            json!({"ipconfig": [{"gw": "10.0.0.1"}]}),
            "ipconfig[0].gw needs ipconfig[0].ip",
        ),
        c(
            json!({"nameserver": ["dns_example"]}),
            "nameserver[0] must be an IP address",
        ),
        c(
            json!({"tags": ["my tag"]}),
            "tags[0] must use letters, digits",
        ),
        c(
            json!({"sshkeys": ["ssh-ed25519 AAAA a\nssh-rsa BBBB b"]}),
            "sshkeys: give one key per list item",
        ),
        c(
            json!({"serial": ["tcp:4444"]}),
            "serial[0] must be 'socket' or a /dev/ path",
        ),
        c(
            json!({"extra_config": {"cores": "4"}}),
            "extra_config: set cores through the module's own option",
        ),
        c(
            json!({"extra_config": {"Bad Key": "1"}}),
            "extra_config: \"Bad Key\" is not a PVE config key",
        ),
        c(
            json!({"extra_config": {"hotplug": "disk\nlock: create"}}),
            "extra_config.hotplug must be a single line",
        ),
        c(
            json!({"cipassword": "a\nb"}),
            "cipassword must be a single line",
        ),
        c(
            json!({"disks": null, "ciuser": "ubuntu"}),
            "cloud-init options need a cloud-init drive",
        ),
        c(
            json!({"api_token_id": "root@pam!ci", "api_token_secret": "x"}),
            "parameters are mutually exclusive: api_password|api_token_secret",
        ),
        c(
            json!({"api_password": null, "api_token_id": "root@pam!ci"}),
            "parameters are required together: api_token_id, api_token_secret",
        ),
        c(
            json!({"api_password": null}),
            "one of the following is required: api_password, api_token_id",
        ),
        c(
            json!({"ca_path": "/etc/ssl/certs/ca-certificates.crt"}),
            "parameters are mutually exclusive: ca_path|api_fingerprint",
        ),
        c(
            json!({"api_fingerprint": "AB:CD"}),
            "api_fingerprint must be a SHA-256 fingerprint",
        ),
        c(
            json!({"api_fingerprint": null, "ca_path": "/nonexistent/ca.pem"}),
            "ca_path /nonexistent/ca.pem",
        ),
        c(
            json!({"vmid": null, "name": null}),
            "one of the following is required: vmid, name",
        ),
        c(json!({"node": null}), "node is required to create a VM"),
        c(json!({"node": "pve9"}), "hostname lookup 'pve9' failed"),
        c(
            json!({"api_password": "wrong"}),
            "authentication failure: PVE refused the login of 'root@pam'",
        ),
        c(
            json!({"api_password": null, "api_token_id": "root@pam!ci", "api_token_secret": "wrong"}),
            "PVE refused the API token 'root@pam!ci'",
        ),
        c(
            json!({"disks": disk(json!({"import_from": "local:iso/noble.img"}))}),
            "local:iso/noble.img has wrong type 'iso' - needs to be 'images' or 'import'",
        ),
        // Numbers, durations and sizes that would overflow or wrap.
        c(
            json!({"timeout": "1e20"}),
            "value of timeout is not a valid duration: '1e20' is longer than 10 years",
        ),
        c(
            json!({"api_timeout": "1e20"}),
            "value of api_timeout is not a valid duration",
        ),
        c(json!({"poll_interval": "1e20"}), "poll_interval"),
        c(
            json!({"timeout": "99999999999999999h"}),
            "value of timeout is not a valid duration",
        ),
        c(
            json!({"vmid": 1e20}),
            "argument 'vmid' is of type float and we were unable to convert to int",
        ),
        c(json!({"cores": "18446744073709551617"}), "argument 'cores'"),
        c(
            json!({"disks": disk(json!({"size": "1K"}))}),
            "disks[0].size must be at least 1M",
        ),
        c(
            json!({"disks": disk(json!({"size": "99999999999999T"}))}),
            "disks[0].size must be at most 1024T",
        ),
        c(
            json!({"disks": disk(json!({"size": "1e3G"}))}),
            "disks[0].size must be a size",
        ),
        // Values that would land in a URL path.
        c(json!({"node": ".."}), "node must be a PVE node name"),
        c(json!({"node": "pve1/../x"}), "node must be a PVE node name"),
        c(
            json!({"disks": disk(json!({"storage": ".."}))}),
            "disks[0].storage must be a PVE storage ID",
        ),
        c(
            json!({"api_host": "127.0.0.1:8006"}),
            "give the port as api_port",
        ),
        c(
            json!({"api_host": "https://pve1"}),
            "api_host must be a host name or address",
        ),
        // Request parameters smuggled in as config.
        c(
            json!({"extra_config": {"start": "1"}}),
            "extra_config: start is a parameter of the create request",
        ),
        c(
            json!({"extra_config": {"unique": "1"}}),
            "extra_config: unique is a parameter of the create request",
        ),
        c(
            json!({"extra_config": {"lock": "backup"}}),
            "extra_config: lock is not a config key",
        ),
        c(
            json!({"extra_config": {"frobnicate": "1"}}),
            "is not a VM config key in PVE's schema",
        ),
        // Credentials no HTTP header can carry, a private key for a public one.
        c(
            json!({"api_password": null, "api_token_id": "root@pam!ci", "api_token_secret": "tok-secret\n"}),
            "api_token_secret cannot be sent in an HTTP header",
        ),
        c(
            json!({"api_password": null, "api_token_id": "root@pam!ci", "api_token_secret": "tök"}),
            "api_token_secret cannot be sent in an HTTP header",
        ),
        c(
            json!({"sshkeys": ["-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"]}),
            "sshkeys[0] is a private key",
        ),
        c(
            json!({"_ansible_check_mode": "maybe"}),
            "_ansible_check_mode must be a boolean",
        ),
        // Files that are no files: read until killed, or hung, before.
        c(
            json!({"api_fingerprint": null, "ca_path": "/dev/zero"}),
            "ca_path /dev/zero: not a regular file",
        ),
        c(
            json!({"api_port": sim.info["admin"].as_str().unwrap().rsplit(':').next().unwrap().parse::<u16>().unwrap()}),
            "connecting to the Proxmox VE API at 127.0.0.1:",
        ),
        // After the create, templates and clones, firmware: the options of issues 13 and 14.
        c(
            json!({"restart": "always"}),
            "value of restart must be one of: never, when_needed, got: always",
        ),
        c(
            json!({"wait_for_ip": "soon"}),
            "value of wait_for_ip is not a valid duration",
        ),
        c(
            json!({"wait_for_ip": "1m", "agent": false}),
            "wait_for_ip needs the QEMU guest agent",
        ),
        c(
            json!({"wait_for_ip": "1m", "state": "stopped"}),
            "wait_for_ip needs a running VM, but state is stopped",
        ),
        c(json!({"template": "sometimes"}), "argument 'template'"),
        c(
            json!({"template": true, "state": "started"}),
            "a template never runs: template: true and state: started exclude each other",
        ),
        c(
            json!({"template": true, "state": "present", "wait_for_ip": "1m"}),
            "template: true and wait_for_ip exclude each other",
        ),
        c(
            json!({"clone": {"vmid": 900, "name": "tpl"}}),
            "clone needs exactly one of vmid and name",
        ),
        c(
            json!({"clone": {}}),
            "clone needs exactly one of vmid and name",
        ),
        c(
            json!({"clone": {"vmid": 5}}),
            "value of clone.vmid must be at least 100",
        ),
        c(
            json!({"clone": {"name": "bad name"}}),
            "clone.name must be a valid DNS name",
        ),
        c(
            json!({"clone": {"vmid": 900, "storage": "../x"}}),
            "clone.storage must be a PVE storage ID",
        ),
        c(
            json!({"clone": {"vmid": 900, "full": false, "storage": "local"}}),
            "clone.storage is the target of a full clone",
        ),
        c(
            json!({"clone": {"vmid": 900}}),
            "disks[0].import_from and clone exclude each other",
        ),
        c(
            json!({"clone": {"vmid": 900, "colour": "red"}}),
            "Unsupported parameters found in clone: colour",
        ),
        c(
            json!({"efidisk": {"storage": "local-lvm"}}),
            "efidisk needs bios: ovmf",
        ),
        c(
            json!({"bios": "ovmf", "efidisk": {"storage": "local-lvm", "efitype": "8m"}}),
            "value of efidisk.efitype must be one of: 2m, 4m, got: 8m",
        ),
        c(
            json!({"bios": "ovmf", "efidisk": {}}),
            "missing required arguments: storage found in efidisk",
        ),
        c(
            json!({"tpmstate": {"storage": "local-lvm", "version": "v3"}}),
            "value of tpmstate.version must be one of: v1.2, v2.0, got: v3",
        ),
        c(
            json!({"disks": [{"slot": "efidisk0", "storage": "local-lvm", "size": "1M"}]}),
            "through efidisk and tpmstate, not disks",
        ),
        c(
            json!({"disks": [{"slot": "scsi0", "size": "1G"}]}),
            "disks[0].storage is required to create a disk",
        ),
        // PVE's schema limits (PVE 9.1), checked before any request.
        c(
            json!({"description": "d".repeat(8193)}),
            "description is 8193 bytes long; PVE allows at most 8192",
        ),
        c(
            json!({"extra_config": {"cpuunits": "0"}}),
            "extra_config.cpuunits must be at least 1, got 0",
        ),
        c(
            json!({"extra_config": {"cpulimit": "200"}}),
            "extra_config.cpulimit must be at most 128, got 200",
        ),
        c(
            json!({"extra_config": {"smbios1": format!("uuid={}", "0".repeat(600))}}),
            "extra_config.smbios1 is 605 bytes long; PVE allows at most 512",
        ),
        c(
            json!({"extra_config": {"startdate": "tomorrow"}}),
            "extra_config.startdate must be now or YYYY-MM-DD[THH:MM:SS], got \"tomorrow\"",
        ),
        c(
            json!({"clone": {"vmid": 9000, "snapname": "s".repeat(41)}, "disks": null}),
            "clone.snapname is 41 characters long; PVE allows at most 40",
        ),
    ]
}

/// A description of 1 MB (PVE allows 8 KiB; pveproxy refuses a body that large) fails at
/// once, naming the option, before any request: not after retrying until the deadline.
#[test]
fn a_value_over_pves_limit_fails_before_any_request() {
    let sim = Sim::start(&[], &[]);
    let r = failed(run(merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 100, "timeout": "20s",
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}],
               "description": "d".repeat(1 << 20)}),
    ])));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.contains("description is 1048576 bytes long; PVE allows at most 8192"),
        "{msg}"
    );
    assert!(!msg.contains("timeout"), "{msg}");
    assert!(sim.writes().is_empty(), "{:?}", sim.writes());
}

#[test]
fn invalid_inputs_fail_clearly_and_change_nothing() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    let base = merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 100, "disks": disk(json!({}))}),
    ]);
    let all = cases(&sim);
    assert!(all.len() >= 60);
    let mut report = Vec::new();
    for (change, want) in &all {
        let mut args = merge(&[base.clone(), change.clone()]);
        args.as_object_mut().unwrap().retain(|_, v| !v.is_null());
        let r = failed(run(args));
        let msg = r["msg"].as_str().unwrap();
        assert!(
            msg.contains(want.as_str()),
            "for {change}: expected {want:?} in {msg:?}"
        );
        report.push(format!("{change} -> {msg}"));
    }
    // Only inputs PVE itself must judge (an unknown node, an ISO as import source) reach it,
    // and it refuses them.
    let accepted: Vec<Value> = sim
        .writes()
        .into_iter()
        .filter(|q| q["status"] == 200)
        .collect();
    assert!(
        accepted.is_empty(),
        "bad input was accepted by the server: {accepted:?}"
    );
    assert_eq!(sim.get("/cluster/resources?type=vm")["data"], json!([]));
    eprintln!(
        "{} invalid inputs rejected:\n{}",
        all.len(),
        report.join("\n")
    );
}

#[test]
fn shrinking_a_disk_is_refused_without_any_change() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    let args = |size: &str| {
        merge(&[
            sim.conn(),
            json!({"node": "pve1", "vmid": 100, "cores": 1,
            "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2", "size": size}]}),
        ])
    };
    ok(run(args("3G")));
    let writes = sim.writes().len();
    let r = failed(run(merge(&[args("2G"), json!({"cores": 2})])));
    assert_eq!(
        r["msg"],
        "refusing to shrink scsi0 from 3G to 2G: PVE cannot shrink disks (raise disks[].size or leave it)"
    );
    assert_eq!(sim.writes().len(), writes);
    assert_eq!(sim.get("/nodes/pve1/qemu/100/config")["data"]["cores"], 1);
}

#[test]
fn unreachable_hosts_and_non_pve_servers_fail_with_the_cause() {
    // A closed port.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r = failed(run(
        json!({"api_host": "127.0.0.1", "api_port": port, "api_password": "x", "vmid": 100, "validate_certs": false}),
    ));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!(
            "connecting to the Proxmox VE API at 127.0.0.1:{port}: unable to connect"
        )),
        "{msg}"
    );
    // With a token the first request is a read: a port that never answered fails it at once
    // too, instead of being retried until the 30-minute default timeout.
    let t = std::time::Instant::now();
    let r = failed(run(
        json!({"api_host": "127.0.0.1", "api_port": port, "api_token_id": "root@pam!ci", "api_token_secret": "x",
               "vmid": 100, "node": "pve1", "validate_certs": false}),
    ));
    let msg = r["msg"].as_str().unwrap();
    assert!(msg.contains("unable to connect"), "{msg}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );

    // An HTTPS server that is not PVE (openssl's test server answers HTML).
    let dir = scratch("nonpve");
    let st = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-keyout",
        ])
        .arg(dir.join("k.pem"))
        .arg("-out")
        .arg(dir.join("c.pem"))
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new("openssl")
        .args([
            "s_server",
            "-www",
            "-quiet",
            "-accept",
            &port.to_string(),
            "-cert",
        ])
        .arg(dir.join("c.pem"))
        .arg("-key")
        .arg(dir.join("k.pem"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let r = failed(run(
        json!({"api_host": "127.0.0.1", "api_port": port, "api_token_id": "a@pam!t", "api_token_secret": "s",
                              "vmid": 100, "validate_certs": false, "api_timeout": "5s"}),
    ));
    let _ = server.kill();
    let _ = server.wait();
    let msg = r["msg"].as_str().unwrap();
    assert!(msg.contains("did not answer like a PVE API"), "{msg}");
}
