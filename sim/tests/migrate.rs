//! pve-sim's migrations against qemu-server's code paths: API2/Qemu.pm (`migrate_vm`,
//! `migrate_vm_precondition`), QemuMigrate.pm (`prepare`, `scan_local_volumes`, `phase1`,
//! `phase2`, `phase3_cleanup` and the cleanups), pve-guest-common AbstractMigrate.pm
//! (`migrate`: the verdicts and the stamped log) and GuestHelpers.pm
//! (`guest_migration_lock`), on a three-node simulator over plain HTTP.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{Session, Sim, enc, image, raw, vsize};
use serde_json::{Value, json};

/// A plain-HTTP simulator with nodes pve1, pve2 and pve3.
fn cluster(args: &[&str], images: &[&Path]) -> Sim {
    let mut all = vec!["--nodes", "pve1,pve2,pve3"];
    all.extend_from_slice(args);
    Sim::plain(&all, images)
}

/// The file of a volume path on a node (`local-lvm/vm-100-disk-0.raw`).
fn volume(sim: &Sim, node: &str, rel: &str) -> PathBuf {
    sim.data().join("nodes").join(node).join(rel)
}

/// A request with root's API token (`root@pam!ci`, which is not `root@pam`).
fn token_call(
    sim: &Sim,
    method: &str,
    path: &str,
    params: &[(&str, &str)],
) -> (u16, String, Value) {
    let form: String = params
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&");
    raw(
        &format!("127.0.0.1:{}", sim.port()),
        method,
        &format!("/api2/json{path}"),
        &[("Authorization", "PVEAPIToken=root@pam!ci=tok-secret")],
        &form,
    )
}

/// What the migration tests ask of a session beside the shared ones.
trait Migrating {
    fn upid(&self, method: &str, path: &str, params: &[(&str, &str)]) -> String;
    fn exit(&self, upid: &str) -> String;
    /// The task log, each line without AbstractMigrate's time stamp.
    fn lines(&self, upid: &str) -> Vec<String>;
    fn create(&self, node: &str, vmid: &str, extra: &[(&str, &str)]);
    fn power(&self, node: &str, vmid: &str, action: &str);
    fn config(&self, node: &str, vmid: &str) -> Value;
    fn listed(&self, node: &str) -> Vec<u64>;
}

impl Migrating for Session {
    fn upid(&self, method: &str, path: &str, params: &[(&str, &str)]) -> String {
        self.data(method, path, params)
            .as_str()
            .unwrap()
            .to_string()
    }

    fn exit(&self, upid: &str) -> String {
        self.wait(upid)["exitstatus"].as_str().unwrap().to_string()
    }

    fn lines(&self, upid: &str) -> Vec<String> {
        self.log(upid).iter().map(|l| unstamp(l)).collect()
    }

    fn create(&self, node: &str, vmid: &str, extra: &[(&str, &str)]) {
        let mut p = vec![("vmid", vmid), ("memory", "1024")];
        p.extend_from_slice(extra);
        let u = self.upid("POST", &format!("/nodes/{node}/qemu"), &p);
        assert_eq!(self.exit(&u), "OK");
    }

    fn power(&self, node: &str, vmid: &str, action: &str) {
        let u = self.upid(
            "POST",
            &format!("/nodes/{node}/qemu/{vmid}/status/{action}"),
            &[],
        );
        assert_eq!(self.exit(&u), "OK");
    }

    fn config(&self, node: &str, vmid: &str) -> Value {
        self.data("GET", &format!("/nodes/{node}/qemu/{vmid}/config"), &[])
    }

    fn listed(&self, node: &str) -> Vec<u64> {
        self.data("GET", &format!("/nodes/{node}/qemu"), &[])
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["vmid"].as_u64().unwrap())
            .collect()
    }
}

/// `2026-12-01 08:30:00 text` → `text` (a line printed without the stamp stays as it is).
fn unstamp(line: &str) -> String {
    let b = line.as_bytes();
    let stamped = b.len() > 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b' '
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b' '
        && b[..4].iter().all(u8::is_ascii_digit);
    if stamped {
        line[20..].to_string()
    } else {
        line.to_string()
    }
}

fn has(log: &[String], line: &str) -> bool {
    log.iter().any(|l| l == line)
}

/// API2/Qemu.pm migrate_vm → QemuMigrate.pm: a stopped VM migrates offline, its disks copied
/// by storage_migrate (dd's progress, `successfully imported`), `lock: migrate` while it runs,
/// the config moved to the target in phase3_cleanup and the source volumes freed; back again
/// with `targetstorage`, an LVM-thin raw volume becomes a raw file on the directory storage.
#[test]
fn a_stopped_vm_migrates_offline_with_its_local_disks() {
    let img = image("offline.qcow2", 32, 8);
    let sim = cluster(&["--import-rate", "8M"], &[&img]);
    let s = Session::login(&sim);
    s.create(
        "pve1",
        "100",
        &[
            (
                "scsi0",
                "local-lvm:0,import-from=local:import/offline.qcow2",
            ),
            ("ide2", "local-lvm:cloudinit"),
            ("net0", "virtio,bridge=vmbr0"),
        ],
    );
    let before = s.config("pve1", "100");
    let upid = s.upid(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve2")],
    );
    assert!(upid.starts_with("UPID:pve1:") && upid.contains(":qmigrate:100:root@pam:"));
    // QemuMigrate.pm phase1: `lock: migrate` in the config while the copy runs.
    let t = Instant::now();
    loop {
        let c = s.config("pve1", "100");
        if c["lock"] == "migrate" {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "no migrate lock: {c}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // API2/Qemu.pm migrate_vm checks the lock before forking.
    let (st, reason, _) = s.call(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve3")],
    );
    assert_eq!((st, reason.as_str()), (500, "VM is locked (migrate)"));
    assert_eq!(s.exit(&upid), "OK");

    assert_eq!(s.listed("pve2"), [100]);
    assert!(s.listed("pve1").is_empty());
    let (st, reason, _) = s.call("GET", "/nodes/pve1/qemu/100/config", &[]);
    assert_eq!(
        (st, reason.as_str()),
        (
            500,
            "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist"
        )
    );
    let after = s.config("pve2", "100");
    assert!(after.get("lock").is_none(), "{after}");
    assert_eq!(after["scsi0"], "local-lvm:vm-100-disk-0,size=32M");
    // config_update_local_disksizes: the cloud-init drive gets its volume's size.
    assert_eq!(
        after["ide2"],
        "local-lvm:vm-100-cloudinit,media=cdrom,size=4M"
    );
    assert_eq!(after["net0"], before["net0"]);
    let moved = volume(&sim, "pve2", "local-lvm/vm-100-disk-0.raw");
    assert_eq!(vsize(&moved, "raw"), vsize(&img, "qcow2"));
    assert!(!volume(&sim, "pve1", "local-lvm/vm-100-disk-0.raw").exists());
    assert!(!volume(&sim, "pve1", "local-lvm/vm-100-cloudinit.raw").exists());

    let log = s.lines(&upid);
    for line in [
        "starting migration of VM 100 to node 'pve2' (127.0.0.1)",
        "found generated disk 'local-lvm:vm-100-cloudinit' (in current VM config)",
        "found local disk 'local-lvm:vm-100-disk-0' (attached)",
        "drive 'ide2': size of disk 'local-lvm:vm-100-cloudinit' updated from 0T to 4M",
        "copying local disk images",
        "512+0 records in",
        "512+0 records out",
        "successfully imported 'local-lvm:vm-100-disk-0'",
        "volume 'local-lvm:vm-100-disk-0' is 'local-lvm:vm-100-disk-0' on the target",
        "  Logical volume \"vm-100-disk-0\" successfully removed.",
    ] {
        assert!(has(&log, line), "{line}: {log:#?}");
    }
    // dd's progress, shown every 3 s by storage_migrate, then its final line.
    assert!(
        log.iter().any(|l| l.ends_with(" s, 8.4 MB/s")
            && l.contains(" bytes (")
            && l.contains(" copied, 3 s,")),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|l| l.starts_with("33554432 bytes (34 MB, 32 MiB) copied, 4")),
        "{log:#?}"
    );
    assert!(
        log[log.len() - 2].starts_with("migration finished successfully (duration 00:00:0"),
        "{log:#?}"
    );
    assert_eq!(log.last().unwrap(), "TASK OK");

    // Back to pve1 onto the directory storage (storage_migrate, $volname_for_storage).
    let upid = s.upid(
        "POST",
        "/nodes/pve2/qemu/100/migrate",
        &[("target", "pve1"), ("targetstorage", "local")],
    );
    assert_eq!(s.exit(&upid), "OK");
    let back = s.config("pve1", "100");
    assert_eq!(back["scsi0"], "local:100/vm-100-disk-0.raw,size=32M");
    assert_eq!(
        back["ide2"],
        "local:100/vm-100-cloudinit.raw,media=cdrom,size=4M"
    );
    let file = volume(&sim, "pve1", "local/images/100/vm-100-disk-0.raw");
    assert_eq!(vsize(&file, "raw"), vsize(&img, "qcow2"));
    assert!(!volume(&sim, "pve2", "local-lvm/vm-100-disk-0.raw").exists());
    // A qcow2 on the directory storage cannot go to LVM-thin offline.
    s.create(
        "pve1",
        "101",
        &[(
            "scsi0",
            "local:0,import-from=local:import/offline.qcow2,format=qcow2",
        )],
    );
    let upid = s.upid(
        "POST",
        "/nodes/pve1/qemu/101/migrate",
        &[("target", "pve3"), ("targetstorage", "local-lvm")],
    );
    assert_eq!(s.exit(&upid), "migration aborted");
    let log = s.lines(&upid);
    let why = "storage migration for 'local:101/vm-101-disk-0.qcow2' to storage 'local-lvm' failed - unsupported format 'qcow2' for storage type lvmthin";
    assert!(has(&log, &format!("ERROR: {why}")), "{log:#?}");
    assert!(
        has(&log, "aborting phase 1 - cleanup resources"),
        "{log:#?}"
    );
    assert!(
        log.iter().any(
            |l| l.starts_with("ERROR: migration aborted (duration 00:00:0") && l.ends_with(why)
        ),
        "{log:#?}"
    );
    assert!(s.config("pve1", "101").get("lock").is_none());
    assert_eq!(s.listed("pve3"), Vec::<u64>::new());
}

/// QemuMigrate.pm for a running VM: refused without `online` (migrate_vm), its attached local
/// disks refused without `with-local-disks` (scan_local_volumes), then mirrored to new volumes
/// the target allocated (vm_migrate_alloc_nbd_disks; BlockJob.pm's progress), its memory
/// moved, and the VM running on the target with the new drives.
#[test]
fn a_running_vm_migrates_online_with_its_local_disks() {
    let img = image("online.qcow2", 32, 8);
    let sim = cluster(&["--import-rate", "8M"], &[&img]);
    let s = Session::login(&sim);
    s.create(
        "pve1",
        "100",
        &[
            (
                "scsi0",
                "local-lvm:0,import-from=local:import/online.qcow2,iothread=1",
            ),
            ("bios", "ovmf"),
            ("efidisk0", "local-lvm:1,efitype=4m"),
            ("ide2", "local-lvm:cloudinit"),
            ("agent", "1,fstrim_cloned_disks=1"),
        ],
    );
    s.power("pve1", "100", "start");
    let pid = s.data("GET", "/nodes/pve1/qemu/100/status/current", &[])["pid"].clone();
    // create_disks made the EFI disk first (vm-100-disk-0), then scsi0.
    assert!(
        s.config("pve1", "100")["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("local-lvm:vm-100-disk-1,"),
    );
    let (st, reason, _) = s.call(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve2")],
    );
    assert_eq!(
        (st, reason.as_str()),
        (500, "can't migrate running VM without --online")
    );

    let upid = s.upid(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve2"), ("online", "1")],
    );
    assert_eq!(s.exit(&upid), "migration aborted");
    let log = s.lines(&upid);
    for line in [
        "found local disk 'local-lvm:vm-100-disk-1' (attached)",
        "can't migrate local disk 'local-lvm:vm-100-disk-1': can't live migrate attached local disks without with-local-disks option",
        "ERROR: Problem found while scanning volumes - can't migrate VM - check log",
        "aborting phase 1 - cleanup resources",
        "ERROR: migration aborted (duration 00:00:00): Problem found while scanning volumes - can't migrate VM - check log",
        "TASK ERROR: migration aborted",
    ] {
        assert!(has(&log, line), "{line}: {log:#?}");
    }
    assert!(s.config("pve1", "100").get("lock").is_none());
    assert_eq!(
        s.data("GET", "/nodes/pve1/qemu/100/status/current", &[])["status"],
        "running"
    );

    let upid = s.upid(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[
            ("target", "pve2"),
            ("online", "1"),
            ("with-local-disks", "1"),
            ("targetstorage", "local"),
        ],
    );
    assert_eq!(s.exit(&upid), "OK");
    assert_eq!(s.listed("pve2"), [100]);
    let status = s.data("GET", "/nodes/pve2/qemu/100/status/current", &[]);
    assert_eq!(status["status"], "running");
    assert_ne!(status["pid"], pid, "a new QEMU process on the target");
    let conf = s.config("pve2", "100");
    assert!(conf.get("lock").is_none(), "{conf}");
    assert_eq!(
        conf["scsi0"],
        "local:100/vm-100-disk-1.raw,format=raw,iothread=1,size=32M"
    );
    // update_efidisk_size before the copy; the target allocated the mirror's volume.
    assert_eq!(
        conf["efidisk0"],
        "local:100/vm-100-disk-0.raw,efitype=4m,format=raw,size=528K"
    );
    // The cloud-init drive is copied offline first (storage_migrate keeps its name).
    assert_eq!(
        conf["ide2"],
        "local:100/vm-100-cloudinit.raw,media=cdrom,size=4M"
    );
    let copy = volume(&sim, "pve2", "local/images/100/vm-100-disk-1.raw");
    let want = Command::new("qemu-img")
        .args(["compare", "-f", "qcow2", "-F", "raw"])
        .arg(&img)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(want.success(), "the mirrored disk holds the image");
    assert!(!volume(&sim, "pve1", "local-lvm/vm-100-disk-1.raw").exists());

    let log = s.lines(&upid);
    for line in [
        "conntrack state migration not supported or disabled, active connections might get dropped",
        "starting VM 100 on remote node 'pve2'",
        "volume 'local-lvm:vm-100-disk-0' is 'local:100/vm-100-disk-0.raw' on the target",
        "volume 'local-lvm:vm-100-disk-1' is 'local:100/vm-100-disk-1.raw' on the target",
        "starting storage migration",
        "scsi0: start migration to nbd:unix:/run/qemu-server/100_nbd.migrate:exportname=drive-scsi0",
        "drive mirror is starting for drive-scsi0",
        "drive-scsi0: transferred 0.0 B of 32.0 MiB (0.00%) in 0s",
        "all 'mirror' jobs are ready",
        "switching mirror jobs to actively synced mode",
        "starting online/live migration on unix:/run/qemu-server/100.migrate",
        "migration downtime limit: 100 ms",
        "migration cachesize: 128.0 MiB",
        "migration status: completed",
        "drive-scsi0: Completing block job...",
        "drive-scsi0: mirror-job finished",
        "stopping NBD storage migration server on target.",
        "issuing guest fstrim",
    ] {
        assert!(has(&log, line), "{line}: {log:#?}");
    }
    assert!(
        log.iter().any(|l| l
            .starts_with("drive-scsi0: transferred 32.0 MiB of 32.0 MiB (100.00%) in ")
            && l.ends_with(", ready")),
        "{log:#?}"
    );
    assert_eq!(log.last().unwrap(), "TASK OK");
}

/// The refusals of migrate_vm (before forking) and of QemuMigrate.pm (in the task, the VM
/// left where it was and unlocked).
#[test]
fn migrations_are_refused_where_pve_refuses_them() {
    let img = image("refusals.qcow2", 16, 4);
    let sim = cluster(&[], &[&img]);
    let s = Session::login(&sim);
    let disk = "local-lvm:0,import-from=local:import/refusals.qcow2";
    s.create("pve1", "100", &[("scsi0", disk)]);
    let refused = |params: &[(&str, &str)], status: u16, reason: &str| {
        let (st, r, body) = s.call("POST", "/nodes/pve1/qemu/100/migrate", params);
        assert_eq!((st, r.as_str()), (status, reason), "{params:?}: {body}");
        body
    };
    let body = refused(&[("target", "pve1")], 400, "Parameter verification failed.");
    assert_eq!(body["errors"]["target"], "target is local node.");
    refused(&[("target", "pve9")], 500, "no such cluster node 'pve9'");
    let body = refused(&[], 400, "Parameter verification failed.");
    assert_eq!(
        body["errors"]["target"],
        "property is missing and it is not optional"
    );
    let body = refused(
        &[("target", "pve2"), ("targetstorage", "a:b:c")],
        400,
        "Parameter verification failed.",
    );
    assert_eq!(
        body["errors"]["targetstorage"],
        "invalid format - entry 'a:b:c' contains invalid ID - storage ID 'a:b:c' contains illegal characters"
    );
    let body = refused(
        &[("target", "pve2"), ("targetstorage", "1,local")],
        400,
        "Parameter verification failed.",
    );
    assert_eq!(
        body["errors"]["targetstorage"],
        "failed to parse storage map: identity mapping cannot be combined with other mappings"
    );
    refused(
        &[("target", "pve2"), ("targetstorage", "nfs")],
        500,
        "storage 'nfs' does not exist",
    );
    let body = refused(
        &[("target", "pve2"), ("migration_network", "10.0.0.1")],
        400,
        "Parameter verification failed.",
    );
    assert_eq!(
        body["errors"]["migration_network"],
        "invalid format - value does not look like a valid CIDR network"
    );
    // Root-only options: a token of root is not root@pam.
    let (st, _, body) = token_call(
        &sim,
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve2"), ("force", "1")],
    );
    assert_eq!(st, 400);
    assert_eq!(body["errors"]["force"], "Only root may use this option.");
    let auditor = Session::login_as(&sim, "auditor@pve", "auditpw");
    let (st, r, _) = auditor.call(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve2")],
    );
    assert_eq!(
        (st, r.as_str()),
        (403, "Permission check failed (/vms/100, VM.Migrate)")
    );
    let (st, r, _) = auditor.call("GET", "/nodes/pve1/qemu/100/migrate", &[]);
    assert_eq!(
        (st, r.as_str()),
        (403, "Permission check failed (/vms/100, VM.Migrate)")
    );
    let (st, r, _) = s.call(
        "POST",
        "/nodes/pve2/qemu/100/migrate",
        &[("target", "pve3")],
    );
    assert_eq!(
        (st, r.as_str()),
        (
            500,
            "Configuration file 'nodes/pve2/qemu-server/100.conf' does not exist"
        )
    );
    sim.admin(
        "POST",
        "/lock",
        json!({"vmid": 100, "ms": 1500, "config_lock": "backup"}),
    );
    std::thread::sleep(Duration::from_millis(300));
    refused(&[("target", "pve2")], 500, "VM is locked (backup)");
    std::thread::sleep(Duration::from_millis(1500));

    // prepare: local devices; with `force` (root only) the VM goes anyway.
    s.data(
        "PUT",
        "/nodes/pve1/qemu/100/config",
        &[("usb0", "host=1234:5678"), ("serial0", "socket")],
    );
    let upid = s.upid(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve2")],
    );
    assert_eq!(s.exit(&upid), "migration aborted");
    let log = s.lines(&upid);
    assert!(
        has(
            &log,
            "ERROR: migration aborted (duration 00:00:00): can't migrate VM which uses local devices: usb0"
        ),
        "{log:#?}"
    );
    assert_eq!(s.listed("pve1"), [100]);
    let upid = s.upid(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve2"), ("force", "1")],
    );
    assert_eq!(s.exit(&upid), "OK");
    assert!(has(
        &s.lines(&upid),
        "migrating VM which uses local devices"
    ));

    // scan_local_volumes: an ISO on local storage in the CD-ROM drive.
    let iso = volume(&sim, "pve2", "local/template/iso/tools.iso");
    std::fs::write(&iso, vec![0u8; 4096]).unwrap();
    s.data(
        "PUT",
        "/nodes/pve2/qemu/100/config",
        &[
            ("ide0", "local:iso/tools.iso,media=cdrom"),
            ("delete", "usb0"),
        ],
    );
    let upid = s.upid(
        "POST",
        "/nodes/pve2/qemu/100/migrate",
        &[("target", "pve3")],
    );
    assert_eq!(s.exit(&upid), "migration aborted");
    let log = s.lines(&upid);
    for line in [
        "found local disk 'local:iso/tools.iso' (attached)",
        "can't migrate local disk 'local:iso/tools.iso': local cdrom image",
        "ERROR: Problem found while scanning volumes - can't migrate VM - check log",
    ] {
        assert!(has(&log, line), "{line}: {log:#?}");
    }
    // prepare: an ISO mapped onto LVM-thin, which holds no ISOs.
    let upid = s.upid(
        "POST",
        "/nodes/pve2/qemu/100/migrate",
        &[("target", "pve3"), ("targetstorage", "local-lvm")],
    );
    assert_eq!(s.exit(&upid), "migration aborted");
    assert!(has(
        &s.lines(&upid),
        "ERROR: migration aborted (duration 00:00:00): local:iso/tools.iso: content type 'iso' is not available on storage 'local-lvm'"
    ));
    assert_eq!(s.listed("pve2"), [100]);
    assert!(s.config("pve2", "100").get("lock").is_none());
}

/// scan_local_volumes: a linked clone on local storage cannot move (`can't migrate '…' as
/// it's a clone of '…'`, a `die` without newline, so Perl says where), nor can a template
/// whose base volumes back linked clones (`referenced by linked clone(s)`); a full clone can.
#[test]
fn linked_clones_and_their_templates_stay_where_they_are() {
    let img = image("clones.qcow2", 16, 4);
    let sim = cluster(&[], &[&img]);
    let s = Session::login(&sim);
    s.create(
        "pve1",
        "100",
        &[("scsi0", "local-lvm:0,import-from=local:import/clones.qcow2")],
    );
    let u = s.upid("POST", "/nodes/pve1/qemu/100/template", &[]);
    assert_eq!(s.exit(&u), "OK");
    let u = s.upid("POST", "/nodes/pve1/qemu/100/clone", &[("newid", "101")]);
    assert_eq!(s.exit(&u), "OK");
    let u = s.upid(
        "POST",
        "/nodes/pve1/qemu/100/clone",
        &[("newid", "102"), ("full", "1")],
    );
    assert_eq!(s.exit(&u), "OK");

    let upid = s.upid(
        "POST",
        "/nodes/pve1/qemu/101/migrate",
        &[("target", "pve2")],
    );
    assert_eq!(s.exit(&upid), "migration aborted");
    let why = "Problem found while scanning volumes - can't migrate 'local-lvm:base-100-disk-0/vm-101-disk-0' as it's a clone of 'base-100-disk-0' at /usr/share/perl5/PVE/QemuMigrate.pm line 586.";
    let log = s.lines(&upid);
    assert!(has(&log, &format!("ERROR: {why}")), "{log:#?}");
    assert!(
        has(&log, "aborting phase 1 - cleanup resources"),
        "{log:#?}"
    );
    assert!(s.config("pve1", "101").get("lock").is_none());

    let upid = s.upid(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve2")],
    );
    assert_eq!(s.exit(&upid), "migration aborted");
    assert!(
        has(
            &s.lines(&upid),
            "can't migrate local disk 'local-lvm:base-100-disk-0': referenced by linked clone(s)"
        ),
        "{:#?}",
        s.lines(&upid)
    );

    let upid = s.upid(
        "POST",
        "/nodes/pve1/qemu/102/migrate",
        &[("target", "pve2")],
    );
    assert_eq!(s.exit(&upid), "OK");
    assert_eq!(
        s.config("pve2", "102")["scsi0"],
        "local-lvm:vm-102-disk-0,size=16M"
    );
    let mut on_pve1 = s.listed("pve1");
    on_pve1.sort();
    assert_eq!(on_pve1, [100, 101]);
}

/// migrate_vm_precondition: the run state, the nodes (every other node, under
/// not_allowed_nodes with an empty hash when nothing blocks it), the local disks and the
/// local resources.
#[test]
fn the_precondition_check_names_nodes_disks_and_devices() {
    let img = image("pre.qcow2", 16, 4);
    let sim = cluster(&[], &[&img]);
    let s = Session::login(&sim);
    s.create(
        "pve1",
        "100",
        &[
            ("scsi0", "local-lvm:0,import-from=local:import/pre.qcow2"),
            ("ide2", "local-lvm:cloudinit"),
            ("usb0", "host=1234:5678"),
            ("usb1", "spice"),
        ],
    );
    let pre = s.data("GET", "/nodes/pve1/qemu/100/migrate", &[]);
    assert_eq!(pre["running"], 0);
    assert_eq!(pre["allowed_nodes"], json!(["pve2", "pve3"]));
    assert_eq!(pre["not_allowed_nodes"], json!({"pve2": {}, "pve3": {}}));
    assert_eq!(pre["local_resources"], json!(["usb0"]));
    assert_eq!(pre["mapped-resources"], json!([]));
    assert_eq!(pre["has-dbus-vmstate"], 1);
    let disks = pre["local_disks"].as_array().unwrap();
    assert_eq!(disks.len(), 2, "{pre}");
    assert_eq!(disks[0]["volid"], "local-lvm:vm-100-cloudinit");
    assert_eq!(disks[0]["cdrom"], 1);
    assert_eq!(disks[0]["is_cloudinit"], 1);
    assert_eq!(disks[1]["volid"], "local-lvm:vm-100-disk-0");
    assert_eq!(disks[1]["cdrom"], 0);
    assert_eq!(disks[1]["is_attached"], 1);
    assert_eq!(disks[1]["size"], 16 << 20);
    assert_eq!(disks[1]["drivename"], "scsi0");
    s.power("pve1", "100", "start");
    assert_eq!(
        s.data("GET", "/nodes/pve1/qemu/100/migrate", &[])["running"],
        1
    );
    let (st, r, _) = s.call("GET", "/nodes/pve3/qemu/100/migrate", &[]);
    assert_eq!(
        (st, r.as_str()),
        (
            500,
            "Configuration file 'nodes/pve3/qemu-server/100.conf' does not exist"
        )
    );
}

/// GuestHelpers.pm guest_migration_lock: a second migration of the VM started at once waits
/// for the first (`trying to acquire lock...`), then finds the config gone from this node.
/// A stop request aborts a migration in phase 1: the VM stays, unlocked, its copy freed.
#[test]
fn one_migration_at_a_time_and_a_stopped_one_leaves_the_vm() {
    let img = image("locks.qcow2", 32, 8);
    let sim = cluster(&["--import-rate", "8M"], &[&img]);
    let s = Session::login(&sim);
    s.create(
        "pve1",
        "100",
        &[("scsi0", "local-lvm:0,import-from=local:import/locks.qcow2")],
    );
    let first = s.upid(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve2")],
    );
    let second = s.upid(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve3")],
    );
    assert_eq!(s.exit(&first), "OK");
    assert_eq!(s.exit(&second), "migration aborted");
    let log = s.lines(&second);
    assert_eq!(log[0], "trying to acquire lock...");
    assert_eq!(log[1], " OK");
    assert!(
        has(
            &log,
            "ERROR: migration aborted (duration 00:00:00): Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist"
        ),
        "{log:#?}"
    );
    assert_eq!(s.listed("pve2"), [100]);

    let upid = s.upid(
        "POST",
        "/nodes/pve2/qemu/100/migrate",
        &[("target", "pve3")],
    );
    let t = Instant::now();
    while !s
        .lines(&upid)
        .iter()
        .any(|l| l == "copying local disk images")
    {
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    s.data("DELETE", &format!("/nodes/pve2/tasks/{}", enc(&upid)), &[]);
    assert_eq!(s.exit(&upid), "migration aborted");
    let log = s.lines(&upid);
    assert!(
        has(
            &log,
            "ERROR: storage migration for 'local-lvm:vm-100-disk-0' to storage 'local-lvm' failed - interrupted by signal"
        ),
        "{log:#?}"
    );
    assert_eq!(s.listed("pve2"), [100]);
    assert!(s.config("pve2", "100").get("lock").is_none());
    assert!(!volume(&sim, "pve3", "local-lvm/vm-100-disk-0.raw").exists());
    assert!(volume(&sim, "pve2", "local-lvm/vm-100-disk-0.raw").exists());
}

/// API2/Qemu.pm migrate_vm for an HA-managed VM: a `hamigrate` worker that asks the HA stack
/// (`ha-manager migrate vm:N NODE`, pve-ha-manager API2/HA/Resources.pm migrate) and ends;
/// the stack's next round migrates it (Manager.pm, LRM.pm; Resources/PVEVM.pm migrate: a
/// `qmigrate` on the VM's node as root, online, with local disks), and the VM runs on the
/// target.
#[test]
fn an_ha_managed_vm_migrates_through_the_ha_stack() {
    let img = image("ha.qcow2", 16, 4);
    let sim = cluster(&["--time-scale", "0.1"], &[&img]);
    let s = Session::login(&sim);
    s.create(
        "pve1",
        "100",
        &[("scsi0", "local-lvm:0,import-from=local:import/ha.qcow2")],
    );
    s.data(
        "POST",
        "/cluster/ha/resources",
        &[("sid", "vm:100"), ("state", "started")],
    );
    // The stack starts it (its requested state), in a round.
    let t = Instant::now();
    while s.data("GET", "/nodes/pve1/qemu/100/status/current", &[])["status"] != "running" {
        assert!(t.elapsed() < Duration::from_secs(20), "never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        s.data("GET", "/nodes/pve1/qemu/100/migrate", &[])["dependent-ha-resources"],
        json!([])
    );
    let upid = s.upid(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[
            ("target", "pve2"),
            ("online", "1"),
            ("with-local-disks", "1"),
        ],
    );
    assert!(upid.contains(":hamigrate:100:root@pam:"), "{upid}");
    assert_eq!(s.exit(&upid), "OK");
    assert!(has(
        &s.lines(&upid),
        "Requesting HA migration for VM 100 to node pve2"
    ));
    let t = Instant::now();
    while s.listed("pve2") != [100] {
        assert!(t.elapsed() < Duration::from_secs(30), "never moved");
        std::thread::sleep(Duration::from_millis(100));
    }
    let tasks = sim.admin("GET", "/tasks", Value::Null)["data"].clone();
    let moves: Vec<&Value> = tasks
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["type"] == "qmigrate")
        .collect();
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!(moves[0]["node"], "pve1");
    let upid = moves[0]["upid"].as_str().unwrap().to_string();
    assert!(upid.ends_with(":qmigrate:100:root@pam:"), "{upid}");
    assert_eq!(s.exit(&upid), "OK");
    assert!(has(
        &s.lines(&upid),
        "starting VM 100 on remote node 'pve2'"
    ));
    let status = s.data("GET", "/nodes/pve2/qemu/100/status/current", &[]);
    assert_eq!(status["status"], "running");
    assert_eq!(status["ha"]["managed"], 1);
    // Asked again for the node it is on: nothing to do (update_crm_commands ignores it).
    let again = s.upid(
        "POST",
        "/nodes/pve2/qemu/100/migrate",
        &[("target", "pve3"), ("online", "1")],
    );
    assert_eq!(s.exit(&again), "OK");
}

/// A volume on shared storage is on the target already: QemuMigrate.pm scan_local_volumes
/// skips it (and a linked clone on shared storage moves), storage_migrate copies only the
/// local ones, and phase3_cleanup frees only those.
#[test]
fn volumes_on_shared_storage_stay_put() {
    let img = image("shared.qcow2", 16, 4);
    let sim = cluster(&[], &[&img]);
    let s = Session::login(&sim);
    s.data(
        "POST",
        "/storage",
        &[
            ("storage", "shared1"),
            ("type", "dir"),
            ("path", "/mnt/shared1"),
            ("shared", "1"),
            ("content", "images"),
        ],
    );
    s.create(
        "pve1",
        "100",
        &[
            ("scsi0", "shared1:0,import-from=local:import/shared.qcow2"),
            ("scsi1", "local-lvm:0,import-from=local:import/shared.qcow2"),
        ],
    );
    let shared = s.config("pve1", "100")["scsi0"]
        .as_str()
        .unwrap()
        .to_string();
    let pre = s.data("GET", "/nodes/pve1/qemu/100/migrate", &[]);
    let local: Vec<&str> = pre["local_disks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["volid"].as_str().unwrap())
        .collect();
    assert_eq!(local, ["local-lvm:vm-100-disk-0"], "{pre}");
    let upid = s.upid(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve2")],
    );
    assert_eq!(s.exit(&upid), "OK");
    let log = s.lines(&upid);
    assert!(
        has(
            &log,
            "found local disk 'local-lvm:vm-100-disk-0' (attached)"
        ),
        "{log:#?}"
    );
    assert!(!log.iter().any(|l| l.contains("shared1:")), "{log:#?}");
    let conf = s.config("pve2", "100");
    assert_eq!(conf["scsi0"], shared.as_str());
    assert!(sim.dir.join("data/shared/shared1/images/100").is_dir());

    // A template on the shared storage and its linked clone: the clone moves.
    // (Its local disk detached first: a linked clone of it could not leave pve2.)
    s.data("PUT", "/nodes/pve2/qemu/100/config", &[("delete", "scsi1")]);
    let u = s.upid("POST", "/nodes/pve2/qemu/100/template", &[]);
    assert_eq!(s.exit(&u), "OK");
    let u = s.upid("POST", "/nodes/pve2/qemu/100/clone", &[("newid", "101")]);
    assert_eq!(s.exit(&u), "OK");
    // API2/Qemu.pm clone_vm: a source whose volumes are all shared clones to another node.
    let u = s.upid(
        "POST",
        "/nodes/pve2/qemu/100/clone",
        &[("newid", "102"), ("target", "pve1")],
    );
    assert_eq!(s.exit(&u), "OK");
    assert_eq!(s.listed("pve1"), [102]);
    let upid = s.upid(
        "POST",
        "/nodes/pve2/qemu/101/migrate",
        &[("target", "pve3")],
    );
    assert_eq!(s.exit(&upid), "OK", "{:#?}", s.lines(&upid));
    assert_eq!(s.listed("pve3"), [101]);
}

/// A storage only some nodes have (`nodes` in storage.cfg): migrate_vm refuses another target
/// (QemuServer.pm check_storage_availability, Storage.pm storage_check_enabled), and the
/// precondition check lists that node as not allowed with the storage
/// (check_local_storage_availability).
#[test]
fn a_storage_some_nodes_lack_limits_the_targets() {
    let sim = cluster(&[], &[]);
    let s = Session::login(&sim);
    s.data(
        "POST",
        "/storage",
        &[
            ("storage", "fast12"),
            ("type", "dir"),
            ("path", "/mnt/fast12"),
            ("nodes", "pve1,pve2"),
            ("content", "images"),
        ],
    );
    s.create("pve1", "100", &[("scsi0", "fast12:1")]);
    let pre = s.data("GET", "/nodes/pve1/qemu/100/migrate", &[]);
    assert_eq!(pre["allowed_nodes"], json!(["pve2"]), "{pre}");
    assert_eq!(
        pre["not_allowed_nodes"],
        json!({"pve2": {}, "pve3": {"unavailable_storages": ["fast12"]}})
    );
    let (st, reason, _) = s.call(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve3")],
    );
    assert_eq!(
        (st, reason.as_str()),
        (500, "storage 'fast12' is not available on node 'pve3'")
    );
    let upid = s.upid(
        "POST",
        "/nodes/pve1/qemu/100/migrate",
        &[("target", "pve2")],
    );
    assert_eq!(s.exit(&upid), "OK", "{:#?}", s.lines(&upid));
    assert_eq!(s.listed("pve2"), [100]);
}
