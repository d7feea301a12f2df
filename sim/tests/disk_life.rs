//! A disk's life after its create, as qemu-server's `API2/Qemu.pm` runs it: `move_vm_disk`
//! phase by phase (its checks before the fork, the `qmmove` worker under the VM's file lock,
//! `clone_disk`'s offline copy or a running VM's drive mirror and `BlockJob.pm` `monitor`'s
//! lines, the source kept as `unusedN` or freed), `unlink` (update_vm with `delete`),
//! CD-ROM media changed on a running VM (`vmconfig_hotplug_pending`, `vmconfig_update_disk`)
//! and an EFI disk or TPM state added to a stopped or a running VM (pending: neither
//! hotplugs). Rows in `sim/WRITE_PATH.md`.

use serde_json::{Value, json};

use crate::support::{Session, Sim, config, is_upid, scratch};

fn fails(s: &Session, status: u16, method: &str, path: &str, params: &[(&str, &str)]) -> String {
    let (code, reason, body) = s.call(method, path, params);
    assert_eq!(code, status, "{method} {path}: {code} {reason} {body}");
    reason
}

/// A task-returning request; returns the UPID and the task's exit status.
fn task(s: &Session, method: &str, path: &str, params: &[(&str, &str)]) -> (String, String) {
    let upid = s.data(method, path, params).as_str().unwrap().to_string();
    let end = s.wait(&upid);
    (upid, end["exitstatus"].as_str().unwrap().to_string())
}

fn task_ok(s: &Session, method: &str, path: &str, params: &[(&str, &str)]) -> String {
    let (upid, exit) = task(s, method, path, params);
    assert_eq!(exit, "OK", "{method} {path}: {:?}", s.log(&upid));
    upid
}

fn vm(s: &Session, vmid: &str, extra: &[(&str, &str)]) {
    let mut p = vec![("vmid", vmid), ("scsi0", "local-lvm:1")];
    p.extend_from_slice(extra);
    task_ok(s, "POST", "/nodes/pve1/qemu", &p);
}

fn start(s: &Session, vmid: &str) {
    task_ok(
        s,
        "POST",
        &format!("/nodes/pve1/qemu/{vmid}/status/start"),
        &[],
    );
}

fn stop(s: &Session, vmid: &str) {
    task_ok(
        s,
        "POST",
        &format!("/nodes/pve1/qemu/{vmid}/status/stop"),
        &[],
    );
}

fn mv(vmid: &str) -> String {
    format!("/nodes/pve1/qemu/{vmid}/move_disk")
}

/// The volume ids a storage holds of a VM.
fn volumes(s: &Session, storage: &str, vmid: &str) -> Vec<String> {
    s.data(
        "GET",
        &format!("/nodes/pve1/storage/{storage}/content"),
        &[("vmid", vmid)],
    )
    .as_array()
    .unwrap()
    .iter()
    .map(|v| v["volid"].as_str().unwrap().to_string())
    .collect()
}

fn pending(s: &Session, vmid: &str, key: &str) -> Value {
    s.data("GET", &format!("/nodes/pve1/qemu/{vmid}/pending"), &[])
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == key)
        .cloned()
        .unwrap_or(Value::Null)
}

/// GET config with `current`: the config without its pending changes.
fn current(s: &Session, vmid: &str) -> Value {
    s.data(
        "GET",
        &format!("/nodes/pve1/qemu/{vmid}/config"),
        &[("current", "1")],
    )
}

fn iso(sim: &Sim, name: &str) {
    let dir = sim.data().join("nodes/pve1/local/template/iso");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), vec![0u8; 4096]).unwrap();
}

/// Qemu.pm move_vm_disk, `$load_and_check_move` before the fork: each refusal is a 500 with
/// PVE's text (a storage without `images` content a 400 on `storage`), and nothing is forked.
#[test]
fn move_disk_refuses_before_forking() {
    let sim = Sim::plain(&["--task-duration", "qmcreate=50ms"], &[]);
    let s = Session::login(&sim);
    iso(&sim, "tools.iso");
    vm(&s, "100", &[("ide2", "local:iso/tools.iso,media=cdrom")]);
    let refusals: &[(&[(&str, &str)], &str)] = &[
        (
            &[("disk", "scsi0"), ("storage", "local-lvm")],
            "you can't move to the same storage with same format",
        ),
        (
            &[
                ("disk", "scsi0"),
                ("storage", "local-lvm"),
                ("format", "raw"),
            ],
            "you can't move to the same storage with same format",
        ),
        (
            &[("disk", "ide2"), ("storage", "local-lvm")],
            "you can't move a cdrom",
        ),
        (
            &[("disk", "scsi3"), ("storage", "local")],
            "disk 'scsi3' does not exist",
        ),
        (
            &[("disk", "scsi0"), ("storage", "nowhere")],
            "storage 'nowhere' does not exist",
        ),
        (
            &[("disk", "scsi0"), ("storage", "local"), ("digest", "0123")],
            "detected modified configuration - file changed by other user? Try again.",
        ),
    ];
    for (params, reason) in refusals {
        assert_eq!(
            fails(&s, 500, "POST", &mv("100"), params),
            *reason,
            "{params:?}"
        );
    }
    // check_lock: a config lock (a backup's) refuses the move.
    sim.admin(
        "POST",
        "/lock",
        json!({"vmid": 100, "ms": 3000, "config_lock": "backup"}),
    );
    assert_eq!(
        fails(
            &s,
            500,
            "POST",
            &mv("100"),
            &[("disk", "scsi0"), ("storage", "local")]
        ),
        "VM is locked (backup)"
    );
    let tasks = sim.admin("GET", "/tasks", Value::Null)["data"].clone();
    assert!(
        tasks
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["type"] != "qmmove"),
        "{tasks}"
    );
}

/// move_vm_disk's own checks past the endpoint's `VM.Config.Disk`: `Datastore.AllocateSpace`
/// on the target storage (a move) or on the volume's storage (a reassign), and, for a user
/// other than root@pam, `VM.Config.Disk` on the target VM (check_vm_perm), each a 403.
#[test]
fn move_disk_checks_the_storage_and_the_target_vm() {
    let cfg = scratch("user-cfg").join("user.cfg");
    std::fs::write(
        &cfg,
        "user:root@pam:1:0::::::\nuser:ci@pve:1:0::::::\n\
         acl:1:/vms/100:ci@pve:PVEVMAdmin:\n\
         acl:1:/storage/local-lvm:ci@pve:PVEDatastoreUser:\n",
    )
    .unwrap();
    let sim = Sim::plain(
        &[
            "--task-duration",
            "qmcreate=50ms",
            "--user-cfg",
            cfg.to_str().unwrap(),
            "--user",
            "ci@pve:cipw",
        ],
        &[],
    );
    let root = Session::login(&sim);
    vm(&root, "100", &[("scsi1", "local:1")]);
    vm(&root, "101", &[]);
    let ci = Session::login_as(&sim, "ci@pve", "cipw");
    let (code, reason, _) = ci.call(
        "POST",
        &mv("100"),
        &[("disk", "scsi0"), ("storage", "local")],
    );
    assert_eq!(
        (code, reason.as_str()),
        (
            403,
            "Permission check failed (/storage/local, Datastore.AllocateSpace)"
        )
    );
    let (code, reason, _) = ci.call(
        "POST",
        &mv("100"),
        &[("disk", "scsi0"), ("target-vmid", "101")],
    );
    assert_eq!(
        (code, reason.as_str()),
        (403, "Permission check failed (/vms/101, VM.Config.Disk)")
    );
    // Onto a storage it may allocate on, the move runs.
    task_ok(
        &ci,
        "POST",
        &mv("100"),
        &[("disk", "scsi1"), ("storage", "local-lvm"), ("delete", "1")],
    );
}

/// A stopped VM's disk moved: a `qmmove` task on the VM (`fork_worker('qmmove', $vmid)`),
/// its log as `$move_updatefn` and `clone_disk` print it, the config with the new volume and
/// the source as `unusedN`; with `delete` the source freed. The config lock is never set
/// (`lock_config` is the file lock only).
#[test]
fn a_stopped_vms_disk_is_copied_offline() {
    let sim = Sim::plain(
        &[
            "--task-duration",
            "qmcreate=50ms",
            "--import-rate",
            "512M",
            "--progress-step",
            "25",
        ],
        &[],
    );
    let s = Session::login(&sim);
    vm(&s, "100", &[]);
    let upid = s
        .data(
            "POST",
            &mv("100"),
            &[("disk", "scsi0"), ("storage", "local"), ("format", "qcow2")],
        )
        .as_str()
        .unwrap()
        .to_string();
    assert!(is_upid(&upid, "pve1", "qmmove", "100"), "{upid}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(config(&s, "100").get("lock").is_none());
    assert_eq!(s.wait(&upid)["exitstatus"], "OK");
    let log = s.log(&upid);
    let at = |line: &str| {
        log.iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("{line:?} not in {log:?}"))
    };
    let order = [
        at(
            "copying volume 'local-lvm:vm-100-disk-0' from current storage 'local-lvm' to target storage 'local'",
        ),
        at("create full clone of drive scsi0 (local-lvm:vm-100-disk-0)"),
        at("allocated target volume 'local:100/vm-100-disk-0.qcow2'"),
        at("transferred 512.0 MiB of 1.0 GiB (50.00%)"),
        at("transferred 1.0 GiB of 1.0 GiB (100.00%)"),
        at("adding source volume 'local-lvm:vm-100-disk-0' as 'unused0' to config"),
        at("TASK OK"),
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{log:?}");
    let c = config(&s, "100");
    assert_eq!(c["scsi0"], "local:100/vm-100-disk-0.qcow2,size=1G");
    assert_eq!(c["unused0"], "local-lvm:vm-100-disk-0");

    // A format the storage lacks: clone_disk warns and takes the storage's (raw); with
    // delete, the source is freed after the copy and not kept as unusedN.
    let (upid, exit) = task(
        &s,
        "POST",
        &mv("100"),
        &[
            ("disk", "scsi0"),
            ("storage", "local-lvm"),
            ("format", "qcow2"),
            ("delete", "1"),
        ],
    );
    // A plain `warn`, not `$rpcenv->warn`: the task still ends OK.
    assert_eq!(exit, "OK", "{:?}", s.log(&upid));
    let log = s.log(&upid);
    assert!(log.contains(
        &"format 'qcow2' is not supported by the target storage 'local-lvm' - using 'raw' instead"
            .to_string()
    ));
    assert!(log.contains(
        &"removing source volume 'local:100/vm-100-disk-0.qcow2' after successful copy".to_string()
    ));
    let c = config(&s, "100");
    assert_eq!(c["scsi0"], "local-lvm:vm-100-disk-1,size=1G");
    assert_eq!(c["unused0"], "local-lvm:vm-100-disk-0");
    assert!(c.get("unused1").is_none(), "{c}");
    assert!(volumes(&s, "local", "100").is_empty());

    // An unusedN moves too: offline, and its value stays a bare volume (no size).
    task_ok(
        &s,
        "POST",
        &mv("100"),
        &[("disk", "unused0"), ("storage", "local"), ("delete", "1")],
    );
    assert_eq!(config(&s, "100")["unused0"], "local:100/vm-100-disk-0.raw");
}

/// A running VM's disk moved: clone_disk's drive mirror (`qemu_drive_mirror` for machine
/// versions before 10.0: job `drive-scsi0`), `monitor`'s lines once a second until ready, the
/// job completed; the VM keeps running on the new volume. The move holds the VM's file lock:
/// a config update waits for it. A running VM's TPM state cannot be mirrored.
#[test]
fn a_running_vms_disk_is_mirrored() {
    let sim = Sim::plain(
        &["--task-duration", "qmcreate=50ms", "--import-rate", "400M"],
        &[],
    );
    let s = Session::login(&sim);
    vm(&s, "100", &[("tpmstate0", "local-lvm:1,version=v2.0")]);
    start(&s, "100");
    let upid = s
        .data(
            "POST",
            &mv("100"),
            &[
                ("disk", "scsi0"),
                ("storage", "local"),
                ("bwlimit", "409600"),
            ],
        )
        .as_str()
        .unwrap()
        .to_string();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let update = s
        .data(
            "POST",
            "/nodes/pve1/qemu/100/config",
            &[("description", "during the move")],
        )
        .as_str()
        .unwrap()
        .to_string();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let status = |u: &str| s.data("GET", &format!("/nodes/pve1/tasks/{u}/status"), &[]);
    assert_eq!(status(&upid)["status"], "running");
    assert_eq!(status(&update)["status"], "running");
    assert_eq!(s.wait(&upid)["exitstatus"], "OK", "{:?}", s.log(&upid));
    assert_eq!(s.wait(&update)["exitstatus"], "OK");
    let log = s.log(&upid);
    let at = |line: &str| {
        log.iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("{line:?} not in {log:?}"))
    };
    let order = [
        at("create full clone of drive scsi0 (local-lvm:vm-100-disk-0)"),
        at("allocated target volume 'local:100/vm-100-disk-0.raw'"),
        at("drive mirror is starting for drive-scsi0 with bandwidth limit: 409600 KiB/s"),
        at("drive-scsi0: transferred 0.0 B of 1.0 GiB (0.00%) in 0s"),
        at("drive-scsi0: transferred 400.0 MiB of 1.0 GiB (39.06%) in 1s"),
        at("drive-scsi0: transferred 1.0 GiB of 1.0 GiB (100.00%) in 3s, ready"),
        at("all 'mirror' jobs are ready"),
        at("drive-scsi0: Completing block job..."),
        at("drive-scsi0: Completed successfully."),
        at("drive-scsi0: mirror-job finished"),
        at("adding source volume 'local-lvm:vm-100-disk-0' as 'unused0' to config"),
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{log:?}");
    let c = config(&s, "100");
    assert_eq!(c["scsi0"], "local:100/vm-100-disk-0.raw,size=1G");
    assert_eq!(c["description"], "during the move");
    let st = s.data("GET", "/nodes/pve1/qemu/100/status/current", &[]);
    assert_eq!(st["status"], "running");

    let (upid, exit) = task(
        &s,
        "POST",
        &mv("100"),
        &[("disk", "tpmstate0"), ("storage", "local")],
    );
    assert_eq!(
        exit,
        "storage migration failed: cannot move TPM state while VM is running"
    );
    assert!(volumes(&s, "local", "100").len() == 1, "{:?}", s.log(&upid));
    // Stopped, it moves.
    stop(&s, "100");
    task_ok(
        &s,
        "POST",
        &mv("100"),
        &[("disk", "tpmstate0"), ("storage", "local"), ("delete", "1")],
    );
    assert_eq!(
        config(&s, "100")["tpmstate0"],
        "local:100/vm-100-disk-1.raw,size=4M,version=v2.0"
    );
}

/// clone_disk_copy_data's `efidisk0` branch: only the OVMF vars (get_efivars_size, 540672
/// bytes for `efitype=4m`) are copied, so the new volume is 528K on a directory storage and
/// 4M (one extent) on LVM-thin.
#[test]
fn an_efi_disk_moves_its_vars() {
    let sim = Sim::plain(&["--task-duration", "qmcreate=50ms"], &[]);
    let s = Session::login(&sim);
    vm(
        &s,
        "100",
        &[("bios", "ovmf"), ("efidisk0", "local-lvm:1,efitype=4m")],
    );
    task_ok(
        &s,
        "POST",
        &mv("100"),
        &[("disk", "efidisk0"), ("storage", "local")],
    );
    let c = config(&s, "100");
    assert_eq!(
        c["efidisk0"],
        "local:100/vm-100-disk-0.raw,efitype=4m,size=528K"
    );
    task_ok(
        &s,
        "POST",
        &mv("100"),
        &[
            ("disk", "efidisk0"),
            ("storage", "local-lvm"),
            ("delete", "1"),
        ],
    );
    let efidisk = config(&s, "100")["efidisk0"].as_str().unwrap().to_string();
    assert!(efidisk.ends_with(",efitype=4m,size=4M"), "{efidisk}");
    assert!(volumes(&s, "local", "100").is_empty());
}

/// A move stopped (`DELETE …/tasks/{upid}`): `$move_updatefn`'s signal handler dies
/// "interrupted by signal" in the copy (qemu-img's run_command, which names the command) or in
/// the block-job monitor;
/// the new volume is freed and the config stays as it was.
#[test]
fn a_stopped_move_frees_its_copy() {
    let sim = Sim::plain(
        &["--task-duration", "qmcreate=50ms", "--import-rate", "100M"],
        &[],
    );
    let s = Session::login(&sim);
    vm(&s, "100", &[]);
    let before = config(&s, "100");
    for (running, exit) in [
        (
            false,
            "storage migration failed: copy failed: command '/usr/bin/qemu-img convert -p -n -f raw -O raw ",
        ),
        (
            true,
            "storage migration failed: block job (mirror) error: interrupted by signal",
        ),
    ] {
        if running {
            start(&s, "100");
        }
        let upid = s
            .data(
                "POST",
                &mv("100"),
                &[("disk", "scsi0"), ("storage", "local")],
            )
            .as_str()
            .unwrap()
            .to_string();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        s.data("DELETE", &format!("/nodes/pve1/tasks/{upid}"), &[]);
        let end = s.wait(&upid)["exitstatus"].as_str().unwrap().to_string();
        assert!(
            end.starts_with(exit) && end.ends_with("interrupted by signal"),
            "{end} {:?}",
            s.log(&upid)
        );
        assert_eq!(config(&s, "100")["scsi0"], before["scsi0"]);
        assert!(config(&s, "100").get("unused0").is_none());
        assert!(volumes(&s, "local", "100").is_empty());
    }
}

/// is_volume_in_use with the disk skipped: a snapshot's. The move warns that snapshots stay
/// behind and keeps the source as `unusedN` (a delete is refused before the fork), and
/// try_deallocate_drive will not free that `unusedN` while the snapshot names it.
#[test]
fn a_disk_with_snapshots_moves_without_them() {
    let sim = Sim::plain(&["--task-duration", "qmcreate=50ms"], &[]);
    let s = Session::login(&sim);
    vm(&s, "100", &[]);
    task_ok(
        &s,
        "POST",
        "/nodes/pve1/qemu/100/snapshot",
        &[("snapname", "before")],
    );
    assert_eq!(
        fails(
            &s,
            500,
            "POST",
            &mv("100"),
            &[("disk", "scsi0"), ("storage", "local"), ("delete", "1")]
        ),
        "you can't move a disk with snapshots and delete the source"
    );
    let (upid, exit) = task(
        &s,
        "POST",
        &mv("100"),
        &[("disk", "scsi0"), ("storage", "local")],
    );
    assert_eq!(exit, "OK");
    assert!(
        s.log(&upid)
            .contains(&"moving disk with snapshots, snapshots will not be moved!".to_string())
    );
    assert_eq!(config(&s, "100")["unused0"], "local-lvm:vm-100-disk-0");
    // A reassign to another VM refuses it as well ($load_and_check_reassign_configs).
    vm(&s, "101", &[]);
    assert_eq!(
        fails(
            &s,
            500,
            "POST",
            &mv("100"),
            &[("disk", "unused0"), ("target-vmid", "101")]
        ),
        "Can't move disk used by a snapshot to another VM"
    );
    assert_eq!(
        fails(
            &s,
            500,
            "PUT",
            "/nodes/pve1/qemu/100/unlink",
            &[("idlist", "unused0")]
        ),
        "unable to delete 'local-lvm:vm-100-disk-0' - volume is still in use (snapshot?)"
    );
    assert_eq!(config(&s, "100")["unused0"], "local-lvm:vm-100-disk-0");
    assert_eq!(volumes(&s, "local-lvm", "100"), ["local-lvm:vm-100-disk-0"]);
    // Once the snapshot is gone, it is freed.
    task_ok(&s, "DELETE", "/nodes/pve1/qemu/100/snapshot/before", &[]);
    s.data(
        "PUT",
        "/nodes/pve1/qemu/100/unlink",
        &[("idlist", "unused0")],
    );
    assert!(volumes(&s, "local-lvm", "100").is_empty());
}

/// A template's disk moves as any disk, and the new volume is made a base
/// (`template_create` of the moved disk).
#[test]
fn a_templates_moved_disk_becomes_a_base() {
    let sim = Sim::plain(&["--task-duration", "qmcreate=50ms"], &[]);
    let s = Session::login(&sim);
    vm(&s, "100", &[]);
    task_ok(&s, "POST", "/nodes/pve1/qemu/100/template", &[]);
    task_ok(
        &s,
        "POST",
        &mv("100"),
        &[("disk", "scsi0"), ("storage", "local"), ("format", "qcow2")],
    );
    let c = config(&s, "100");
    assert_eq!(c["scsi0"], "local:100/base-100-disk-0.qcow2,size=1G");
    assert_eq!(c["unused0"], "local-lvm:base-100-disk-0");
    assert_eq!(
        volumes(&s, "local", "100"),
        ["local:100/base-100-disk-0.qcow2"]
    );
}

/// A linked clone's disk moves by a full copy out of its base (clone_disk is a full clone),
/// and with `delete` the thin volume goes. A template's base its linked clones use is not
/// freed by a move with `delete`: vdisk_free's refusal is a `warn` (a log line, the task OK),
/// the config names the new volume and the old base stays on the storage for the clones.
#[test]
fn linked_clones_and_their_base_move() {
    let sim = Sim::plain(&["--task-duration", "qmcreate=50ms"], &[]);
    let s = Session::login(&sim);
    vm(&s, "100", &[]);
    task_ok(&s, "POST", "/nodes/pve1/qemu/100/template", &[]);
    task_ok(
        &s,
        "POST",
        "/nodes/pve1/qemu/100/clone",
        &[("newid", "101"), ("full", "0")],
    );
    task_ok(
        &s,
        "POST",
        "/nodes/pve1/qemu/100/clone",
        &[("newid", "102"), ("full", "0")],
    );
    let linked = config(&s, "101")["scsi0"].as_str().unwrap().to_string();
    assert!(
        linked.starts_with("local-lvm:base-100-disk-0/vm-101-disk-"),
        "{linked}"
    );
    task_ok(
        &s,
        "POST",
        &mv("101"),
        &[("disk", "scsi0"), ("storage", "local"), ("delete", "1")],
    );
    assert_eq!(
        config(&s, "101")["scsi0"],
        "local:101/vm-101-disk-0.raw,size=1G"
    );
    assert!(volumes(&s, "local-lvm", "101").is_empty());

    let upid = task_ok(
        &s,
        "POST",
        &mv("100"),
        &[("disk", "scsi0"), ("storage", "local"), ("delete", "1")],
    );
    assert!(
        s.log(&upid).contains(
            &"base volume 'local-lvm:base-100-disk-0' is still in use by linked cloned".to_string()
        ),
        "{:?}",
        s.log(&upid)
    );
    let c = config(&s, "100");
    assert_eq!(c["scsi0"], "local:100/base-100-disk-0.raw,size=1G");
    assert!(c.get("unused0").is_none(), "{c}");
    assert!(volumes(&s, "local-lvm", "100").contains(&"local-lvm:base-100-disk-0".to_string()));
    // The clone left on the old base still starts.
    start(&s, "102");
}

/// Qemu.pm unlink is update_vm with `delete` = `idlist`: a drive detached to `unusedN`, with
/// `force` its volume freed; on a running VM a drive that cannot be unplugged (`sata`) waits
/// as a forced pending delete (`!sata1`, GET pending `delete: 2`), freed at the next start;
/// `protection` refuses (check_protection).
#[test]
fn unlink_detaches_or_frees_as_update_vm_does() {
    let sim = Sim::plain(&["--task-duration", "qmcreate=50ms"], &[]);
    let s = Session::login(&sim);
    vm(
        &s,
        "100",
        &[("sata1", "local-lvm:1"), ("virtio1", "local-lvm:1")],
    );
    // update_vm_api's delete list: a key the config schema does not know is 400 on `delete`.
    let (code, _, body) = s.call(
        "PUT",
        "/nodes/pve1/qemu/100/unlink",
        &[("idlist", "foo bar")],
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["errors"]["delete"], "unknown option 'foo'");
    s.data("PUT", "/nodes/pve1/qemu/100/config", &[("protection", "1")]);
    assert_eq!(
        fails(
            &s,
            500,
            "PUT",
            "/nodes/pve1/qemu/100/unlink",
            &[("idlist", "virtio1")]
        ),
        "can't remove drive 'virtio1' - protection mode enabled"
    );
    s.data(
        "PUT",
        "/nodes/pve1/qemu/100/config",
        &[("delete", "protection")],
    );
    start(&s, "100");
    let before = current(&s, "100");
    let volume = |key: &str| {
        before[key]
            .as_str()
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .to_string()
    };
    let (scsi0, sata1) = (volume("scsi0"), volume("sata1"));
    s.data(
        "PUT",
        "/nodes/pve1/qemu/100/unlink",
        &[("idlist", "sata1,virtio1"), ("force", "1")],
    );
    // virtio hotplugs (the default `hotplug` has `disk`): freed at once.
    let c = current(&s, "100");
    assert!(c.get("virtio1").is_none(), "{c}");
    assert_eq!(c["sata1"], before["sata1"]);
    assert_eq!(pending(&s, "100", "sata1")["delete"], 2);
    let mut kept = vec![scsi0.clone(), sata1];
    kept.sort();
    assert_eq!(volumes(&s, "local-lvm", "100"), kept);
    stop(&s, "100");
    start(&s, "100");
    let c = config(&s, "100");
    assert!(
        c.get("sata1").is_none() && c.get("unused0").is_none(),
        "{c}"
    );
    assert_eq!(volumes(&s, "local-lvm", "100"), [scsi0]);
}

/// vmconfig_hotplug_pending on a running VM: a CD-ROM's medium changes at once
/// (`vmconfig_update_disk`'s cdrom branch: change_medium, an eject for `none`), a new CD-ROM
/// drive on ide waits for the next start, and a CD-ROM made a disk is a hotplug problem.
#[test]
fn a_running_vms_cdrom_media_change_at_once() {
    let sim = Sim::plain(&["--task-duration", "qmcreate=50ms"], &[]);
    let s = Session::login(&sim);
    iso(&sim, "one.iso");
    iso(&sim, "two.iso");
    vm(&s, "100", &[("ide2", "local:iso/one.iso,media=cdrom")]);
    start(&s, "100");
    let put = |params: &[(&str, &str)]| s.data("PUT", "/nodes/pve1/qemu/100/config", params);
    put(&[("ide2", "local:iso/two.iso,media=cdrom")]);
    assert_eq!(
        current(&s, "100")["ide2"],
        "local:iso/two.iso,media=cdrom,size=4K"
    );
    assert_eq!(pending(&s, "100", "ide2").get("pending"), None);
    put(&[("ide2", "none,media=cdrom")]);
    let c = current(&s, "100");
    assert_eq!(c["ide2"], "none,media=cdrom");
    assert!(c.get("unused0").is_none(), "{c}");
    put(&[("ide2", "local:iso/one.iso,media=cdrom")]);
    assert_eq!(
        current(&s, "100")["ide2"],
        "local:iso/one.iso,media=cdrom,size=4K"
    );
    // A new drive on ide does not hotplug.
    put(&[("ide0", "local:iso/two.iso,media=cdrom")]);
    assert!(current(&s, "100").get("ide0").is_none());
    assert_eq!(
        pending(&s, "100", "ide0")["pending"],
        "local:iso/two.iso,media=cdrom,size=4K"
    );
    let (code, _, body) = s.call(
        "PUT",
        "/nodes/pve1/qemu/100/config",
        &[("ide2", "local-lvm:1")],
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        body["errors"]["ide2"],
        "hotplug problem - unable to change media type"
    );
    stop(&s, "100");
    start(&s, "100");
    assert_eq!(
        current(&s, "100")["ide0"],
        "local:iso/two.iso,media=cdrom,size=4K"
    );
}

/// An EFI disk and a TPM state added later: update_vm_api's create_disks allocates them at
/// once; a stopped VM applies them, a running one keeps them pending (vmconfig_hotplug_pending
/// skips `efidisk0` and `tpmstate0`) until its next start, GET pending showing them.
#[test]
fn efi_and_tpm_added_later_wait_for_a_running_vm() {
    let sim = Sim::plain(&["--task-duration", "qmcreate=50ms"], &[]);
    let s = Session::login(&sim);
    vm(&s, "100", &[("bios", "ovmf")]);
    vm(&s, "101", &[("bios", "ovmf")]);
    let put = |vmid: &str, params: &[(&str, &str)]| {
        s.data("PUT", &format!("/nodes/pve1/qemu/{vmid}/config"), params)
    };
    put(
        "100",
        &[
            ("efidisk0", "local-lvm:1,efitype=4m"),
            ("tpmstate0", "local-lvm:1,version=v2.0"),
        ],
    );
    let c = config(&s, "100");
    assert_eq!(c["efidisk0"], "local-lvm:vm-100-disk-1,efitype=4m,size=4M");
    assert_eq!(
        c["tpmstate0"],
        "local-lvm:vm-100-disk-2,size=4M,version=v2.0"
    );
    assert_eq!(current(&s, "100")["efidisk0"], c["efidisk0"]);
    assert_eq!(pending(&s, "100", "efidisk0").get("pending"), None);

    start(&s, "101");
    put(
        "101",
        &[
            ("efidisk0", "local-lvm:1,efitype=4m"),
            ("tpmstate0", "local-lvm:1,version=v2.0"),
        ],
    );
    let now = current(&s, "101");
    assert!(
        now.get("efidisk0").is_none() && now.get("tpmstate0").is_none(),
        "{now}"
    );
    // Without `current`, GET config shows the pending values applied.
    assert_eq!(
        config(&s, "101")["efidisk0"],
        "local-lvm:vm-101-disk-1,efitype=4m,size=4M"
    );
    assert_eq!(
        pending(&s, "101", "efidisk0"),
        json!({"key": "efidisk0", "pending": "local-lvm:vm-101-disk-1,efitype=4m,size=4M"})
    );
    assert_eq!(
        pending(&s, "101", "tpmstate0"),
        json!({"key": "tpmstate0", "pending": "local-lvm:vm-101-disk-2,size=4M,version=v2.0"})
    );
    assert_eq!(volumes(&s, "local-lvm", "101").len(), 3);
    stop(&s, "101");
    start(&s, "101");
    let c = config(&s, "101");
    assert_eq!(c["efidisk0"], "local-lvm:vm-101-disk-1,efitype=4m,size=4M");
    assert_eq!(
        c["tpmstate0"],
        "local-lvm:vm-101-disk-2,size=4M,version=v2.0"
    );
}
