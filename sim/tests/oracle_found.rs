//! The differences between pve-sim and PVE's own code that `make oracle-diff` (issue 34)
//! found, each pinned by a test citing the PVE function that decides it (see
//! `sim/WRITE_PATH.md`).

use serde_json::{Value, json};

use crate::support::*;

fn fast(images: &[&std::path::Path]) -> Sim {
    Sim::plain(&["--time-scale", "0.05"], images)
}

/// A form body sent as it is (`key` without `=` is PVE's undef).
pub fn raw_form(s: &Session, method: &str, path: &str, body: &str) -> (u16, String, Value) {
    raw(
        &s.addr,
        method,
        &format!("/api2/json{path}"),
        &[
            ("Cookie", s.cookie.as_str()),
            ("CSRFPreventionToken", s.csrf.as_str()),
        ],
        body,
    )
}

/// QemuServer.pm `resolve_dst_disk_format` (via create_disks' `$import_from_volid` and
/// clone_disk): without `format=`, an import onto a directory storage keeps the source's
/// format (Storage.pm `resolve_format_hint`); onto LVM it is raw. create_disks then drops
/// `format=` from the stored drive (`delete $disk->{format}`), for imports and new disks.
#[test]
fn imports_keep_the_source_format_and_drives_drop_format() {
    let img = image("small.qcow2", 512, 8);
    let sim = fast(&[&img]);
    let s = Session::login(&sim);
    let create = |vmid: &str, key: &str, value: &str| {
        let upid = s.data("POST", "/nodes/pve1/qemu", &[("vmid", vmid), (key, value)]);
        assert_eq!(s.wait(upid.as_str().unwrap())["exitstatus"], "OK");
        config(&s, vmid)[key].as_str().unwrap().to_string()
    };
    let dir = "local:0,import-from=local:import/small.qcow2";
    assert_eq!(
        create("100", "scsi0", dir),
        "local:100/vm-100-disk-0.qcow2,size=512M"
    );
    assert_eq!(
        create("101", "scsi0", &format!("{dir},format=raw")),
        "local:101/vm-101-disk-0.raw,size=512M"
    );
    assert_eq!(
        create(
            "102",
            "scsi0",
            "local-lvm:0,import-from=local:import/small.qcow2,format=qcow2"
        ),
        "local-lvm:vm-102-disk-0,size=512M"
    );
    assert_eq!(
        create("103", "scsi0", "local:1,format=qcow2"),
        "local:103/vm-103-disk-0.qcow2,size=1G"
    );
}

/// create_vm: `$conf->{boot} = print_bootorder(get_default_bootdevices($conf))`, which is
/// `''` with no device: the file says `boot: `, and parse_vm_config's
/// `^([a-z][a-z_\-]*\d*):\s*(.+?)\s*$` reads it as `" "` (PVE's own test
/// `cfg2cmd/bootorder-empty.conf`). update_vm_api's delete loop prints the order of what is
/// left, `''` after the last device; the rewritten file keeps the `" "` read back.
#[test]
fn a_vm_without_a_boot_device_has_boot_blank() {
    let sim = fast(&[]);
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[]);
    assert_eq!(config(&s, "100")["boot"], " ");
    assert!(
        file(&sim, "100").starts_with("boot: \n"),
        "{}",
        file(&sim, "100")
    );
    quick_vm(
        &s,
        "101",
        &[("scsi0", "local-lvm:1"), ("net0", "virtio,bridge=vmbr0")],
    );
    assert_eq!(config(&s, "101")["boot"], "order=scsi0;net0");
    s.data(
        "PUT",
        "/nodes/pve1/qemu/101/config",
        &[("delete", "scsi0,net0")],
    );
    assert_eq!(config(&s, "101")["boot"], " ");
    assert!(
        file(&sim, "101").starts_with("boot:  \n"),
        "{}",
        file(&sim, "101")
    );
}

/// Drive.pm: `$virtio_fmt` has no `ssd` (ide, sata and scsi have it), so PVE refuses it with
/// 400 from JSONSchema.pm `check_object`.
#[test]
fn ssd_is_refused_on_virtio() {
    let sim = fast(&[]);
    let s = Session::login(&sim);
    let (status, _, v) = s.call(
        "POST",
        "/nodes/pve1/qemu",
        &[("vmid", "100"), ("virtio0", "local-lvm:1,ssd=1")],
    );
    assert_eq!(status, 400);
    assert_eq!(
        v["errors"]["virtio0"],
        "invalid format - format error\nvirtio0.ssd: property is not defined in schema and the schema does not allow additional properties"
    );
    quick_vm(&s, "101", &[("scsi0", "local-lvm:1,ssd=1")]);
    assert_eq!(
        config(&s, "101")["scsi0"],
        "local-lvm:vm-101-disk-0,size=1G,ssd=1"
    );
}

/// QemuServer.pm `vmconfig_register_unused_drive`: a replaced drive becomes `unusedN` only if
/// it is no CD-ROM (`drive_is_cdrom`) and the VM owns its volume (`vm_is_volid_owner`):
/// ejecting an ISO leaves no `unused0`. update_vm_api appends a CD-ROM an update adds to an
/// existing boot order ("append new CD drives to bootorder to mark them bootable").
#[test]
fn an_ejected_iso_is_not_unused_and_a_new_cdrom_boots() {
    let sim = fast(&[]);
    let iso = sim
        .data()
        .join("nodes/pve1/local/template/iso/debian-12.iso");
    std::fs::write(&iso, vec![0u8; 4096]).unwrap();
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("scsi0", "local-lvm:1")]);
    assert_eq!(config(&s, "100")["boot"], "order=scsi0");
    s.data(
        "PUT",
        "/nodes/pve1/qemu/100/config",
        &[("ide2", "local:iso/debian-12.iso,media=cdrom")],
    );
    assert_eq!(config(&s, "100")["boot"], "order=scsi0;ide2");
    s.data(
        "PUT",
        "/nodes/pve1/qemu/100/config",
        &[("ide2", "none,media=cdrom")],
    );
    let c = config(&s, "100");
    assert_eq!(c["ide2"], "none,media=cdrom");
    assert!(c.get("unused0").is_none(), "{c}");
}

/// OVMF.pm `create_efidisk`: with `pre-enrolled-keys=1` and vars that carry the Microsoft
/// UEFI CA 2023 (`is_ms_2023_cert_enrolled`; PVE 9's pve-edk2-firmware templates do), the
/// new drive is marked `ms-cert=2023k`; Drive.pm's efidisk format takes `ms-cert`
/// (2011, 2023, 2023w, 2023k). Decided from PVE's code: the oracle fakes the firmware.
#[test]
fn efidisk_with_enrolled_keys_gets_ms_cert_2023k() {
    let sim = fast(&[]);
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "100",
        &[
            ("bios", "ovmf"),
            ("efidisk0", "local-lvm:1,efitype=4m,pre-enrolled-keys=1"),
        ],
    );
    assert_eq!(
        config(&s, "100")["efidisk0"],
        "local-lvm:vm-100-disk-0,efitype=4m,ms-cert=2023k,pre-enrolled-keys=1,size=4M"
    );
    quick_vm(
        &s,
        "101",
        &[
            ("bios", "ovmf"),
            ("efidisk0", "local-lvm:1,efitype=4m,pre-enrolled-keys=0"),
        ],
    );
    assert_eq!(
        config(&s, "101")["efidisk0"],
        "local-lvm:vm-101-disk-0,efitype=4m,pre-enrolled-keys=0,size=4M"
    );
}

/// pve-http-server AnyEvent.pm `decode_urlencoded`: `my ($k, $v) = split(/=/, $kv)` is a list
/// assignment, which keeps the trailing empty field: `key=` is `''`, only `key` is undef.
/// `''` meets JSONSchema.pm `check_type` (400 for a boolean or integer); an empty
/// `description` deletes it (write_vm_config writes no comment for it); `tags=` is
/// GuestHelpers.pm `get_unique_tags('')`, `tags: ` read back as `" "`. Undef stays as before:
/// `name` dies in write_vm_config's `check_type`, `description` changes nothing.
#[test]
fn an_empty_form_value_is_an_empty_string() {
    let sim = fast(&[]);
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("description", "old"), ("tags", "a")]);
    let path = "/nodes/pve1/qemu/100/config";
    assert_eq!(raw_form(&s, "PUT", path, "description").0, 200);
    assert_eq!(config(&s, "100")["description"], "old");
    assert_eq!(raw_form(&s, "PUT", path, "description=").0, 200);
    assert_eq!(raw_form(&s, "PUT", path, "tags=").0, 200);
    let c = config(&s, "100");
    assert!(c.get("description").is_none(), "{c}");
    assert_eq!(c["tags"], " ");
    let (status, _, v) = raw_form(&s, "PUT", path, "onboot=&cores=");
    assert_eq!(status, 400);
    assert_eq!(
        v["errors"],
        json!({"onboot": "type check ('boolean') failed - got ''",
               "cores": "type check ('integer') failed - got ''"})
    );
    let (status, reason, _) = raw_form(&s, "PUT", path, "name");
    assert_eq!(
        (status, reason.as_str()),
        (500, "unable to parse value of 'name' - got undefined value")
    );
    let (status, _, _) = raw_form(&s, "POST", "/nodes/pve1/qemu", "vmid=101&onboot=");
    assert_eq!(status, 400);
}

/// update_vm_api `revert`: a reverted key the config has gets its current value back (the
/// pending change is dropped); it may not be given or deleted in the same update
/// ("you can't use '-name' and -revert name' at the same time", on `delete`, as PVE says).
#[test]
fn revert_drops_a_pending_change() {
    let sim = fast(&[]);
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("name", "a")]);
    s.data("POST", "/nodes/pve1/qemu/100/status/start", &[]);
    let path = "/nodes/pve1/qemu/100/config";
    let (status, _, v) = s.call("PUT", path, &[("name", "b"), ("revert", "name")]);
    assert_eq!(status, 400);
    assert_eq!(
        v["errors"]["delete"],
        "you can't use '-name' and -revert name' at the same time"
    );
    let (status, _, v) = s.call("PUT", path, &[("delete", "name"), ("revert", "name")]);
    assert_eq!(status, 400);
    assert_eq!(
        v["errors"]["revert"],
        "you can't use '-delete name' and -revert name' at the same time"
    );
    // A pending change (the VM runs, `cores` does not hotplug) and its revert.
    let start = std::time::Instant::now();
    while config(&s, "100").get("cores").is_none() && start.elapsed().as_secs() < 10 {
        if s.call("PUT", path, &[("cores", "4")]).0 == 200 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let pending = s.data("GET", "/nodes/pve1/qemu/100/pending", &[]);
    assert!(
        pending
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["key"] == "cores"),
        "{pending}"
    );
    assert_eq!(s.call("PUT", path, &[("revert", "cores")]).0, 200);
    let pending = s.data("GET", "/nodes/pve1/qemu/100/pending", &[]);
    assert!(
        !pending
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["key"] == "cores"),
        "{pending}"
    );
}

/// `$check_drive_param`: an ISO volume needs `media=cdrom` (400 on the drive key);
/// create_disks checks an existing volume inside the worker (`volume_size_info`: "volume …
/// does not exist", a failed task), and allows one cloud-init drive (`has_cloudinit`: "ide0 -
/// cloud-init drive is already attached at 'ide2'").
#[test]
fn drives_are_checked_where_pve_checks_them() {
    let sim = fast(&[]);
    let iso = sim
        .data()
        .join("nodes/pve1/local/template/iso/debian-12.iso");
    std::fs::write(&iso, vec![0u8; 4096]).unwrap();
    let s = Session::login(&sim);
    let (status, _, v) = s.call(
        "POST",
        "/nodes/pve1/qemu",
        &[("vmid", "100"), ("ide2", "local:iso/debian-12.iso")],
    );
    assert_eq!(status, 400);
    assert_eq!(
        v["errors"]["ide2"],
        "explicit 'media=cdrom' is required for iso images"
    );
    let upid = s.data(
        "POST",
        "/nodes/pve1/qemu",
        &[("vmid", "100"), ("scsi0", "local-lvm:vm-100-disk-9")],
    );
    assert_eq!(
        s.wait(upid.as_str().unwrap())["exitstatus"],
        "unable to create VM 100 - volume local-lvm:vm-100-disk-9 does not exist"
    );
    quick_vm(&s, "101", &[("ide2", "local-lvm:cloudinit")]);
    let (status, reason, _) = s.call(
        "PUT",
        "/nodes/pve1/qemu/101/config",
        &[("ide0", "local-lvm:cloudinit")],
    );
    assert_eq!(
        (status, reason.as_str()),
        (500, "ide0 - cloud-init drive is already attached at 'ide2'")
    );
}

/// QemuServer.pm's confdesc: `bootdisk` (deprecated, `pve-qm-bootdisk`), `spice_enhancements`
/// (`$spice_enhancements_fmt`) and `numa0`…`numa7` (Memory.pm `$numa_fmt`) are keys;
/// JSONSchema.pm `pve_verify_ipv4_config` takes `ip=manual`, `pve_verify_address` a host name
/// as a `nameserver`; CPUConfig.pm refuses a CPU model QEMU and PVE do not know.
#[test]
fn the_schema_has_pves_keys_and_formats() {
    let sim = fast(&[]);
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "100",
        &[
            ("scsi0", "local-lvm:1"),
            ("bootdisk", "scsi0"),
            ("spice_enhancements", "foldersharing=1"),
            ("numa", "1"),
            ("numa0", "cpus=0,memory=512"),
            ("ipconfig0", "ip=manual"),
            ("nameserver", "dns.example.com"),
            ("cpu", "x86-64-v2-AES"),
            ("tdf", "1"),
            ("startdate", "2006-06-17T16:01:21"),
        ],
    );
    let c = config(&s, "100");
    assert_eq!(
        (
            c["bootdisk"].clone(),
            c["numa0"].clone(),
            c["ipconfig0"].clone()
        ),
        (
            json!("scsi0"),
            json!("cpus=0,memory=512"),
            json!("ip=manual")
        )
    );
    let (status, _, v) = s.call(
        "POST",
        "/nodes/pve1/qemu",
        &[("vmid", "101"), ("cpu", "nosuchcpu")],
    );
    assert_eq!(status, 400);
    assert_eq!(
        v["errors"]["cpu"],
        "invalid format - Built-in cputype 'nosuchcpu' is not defined (missing 'custom-' prefix?)"
    );
}

/// update_vm_api's `hookscript` (create_vm does not check it): GuestHelpers.pm
/// `check_hookscript`, a file in the snippets directory that exists and is executable, else
/// 400 on `hookscript`.
#[test]
fn an_update_checks_the_hookscript() {
    use std::os::unix::fs::PermissionsExt;
    let sim = fast(&[]);
    let snippets = sim.data().join("nodes/pve1/local/snippets");
    std::fs::write(snippets.join("hook.sh"), "#!/bin/sh\n").unwrap();
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("hookscript", "local:snippets/nope.sh")]);
    let path = "/nodes/pve1/qemu/100/config";
    let refused = |script: &str| {
        let (status, _, v) = s.call("PUT", path, &[("hookscript", script)]);
        assert_eq!(status, 400, "{v}");
        v["errors"]["hookscript"].as_str().unwrap().to_string()
    };
    assert_eq!(
        refused("local:snippets/nope.sh"),
        "script 'local:snippets/nope.sh' does not exist"
    );
    assert_eq!(
        refused("local:snippets/hook.sh"),
        "script 'local:snippets/hook.sh' is not executable"
    );
    assert_eq!(
        refused("local:vztmpl/a.tar.gz"),
        "'local:vztmpl/a.tar.gz' is not in the snippets directory"
    );
    let hook = snippets.join("hook.sh");
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        s.call("PUT", path, &[("hookscript", "local:snippets/hook.sh")])
            .0,
        200
    );
    assert_eq!(config(&s, "100")["hookscript"], "local:snippets/hook.sh");
}

/// JSONSchema.pm `check_object`: `check_prop` lets an undef value pass as an absent one, but
/// the loop over the given keys refuses a key the schema does not know whatever its value, so
/// `a` in `tags=b;a` (a key without `=` after pve-http-server's `decode_urlencoded` splits at
/// `;`) is a 400 on `a`, in the same answer as the other parameters' errors, for a create and
/// an update alike; an undef key the schema knows still passes.
#[test]
fn an_undef_key_the_schema_does_not_know_is_refused() {
    let sim = fast(&[]);
    let s = Session::login(&sim);
    let unknown = json!(
        "property is not defined in schema and the schema does not allow additional properties"
    );
    let (status, _, v) = raw_form(&s, "POST", "/nodes/pve1/qemu", "vmid=100&onboot=&tags=b;a");
    assert_eq!(status, 400);
    assert_eq!(
        v["errors"],
        json!({"a": unknown, "onboot": "type check ('boolean') failed - got ''"})
    );
    quick_vm(&s, "100", &[]);
    let path = "/nodes/pve1/qemu/100/config";
    let (status, _, v) = raw_form(&s, "PUT", path, "a&description");
    assert_eq!(status, 400);
    assert_eq!(v["errors"], json!({ "a": unknown }));
    assert_eq!(raw_form(&s, "PUT", path, "name=x&description").0, 200);
    assert_eq!(config(&s, "100")["name"], "x");
}

/// update_vm_api sets `$conf->{pending}->{description} = undef` and writes the config:
/// QemuServer.pm `write_vm_config` prints `[PENDING]` for a pending hash with keys and no line
/// for an undef value, parse_vm_config reads the header back as no pending change,
/// cleanup_pending finds nothing and the update returns before applying, so the file keeps an
/// empty `[PENDING]` header. The next write of the config (any change) drops it.
#[test]
fn an_update_with_only_an_undef_description_leaves_an_empty_pending_header() {
    let sim = fast(&[]);
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("name", "x")]);
    let path = "/nodes/pve1/qemu/100/config";
    assert!(!file(&sim, "100").contains("[PENDING]"));
    assert_eq!(raw_form(&s, "PUT", path, "description").0, 200);
    assert!(
        file(&sim, "100").ends_with("\n\n[PENDING]\n"),
        "{}",
        file(&sim, "100")
    );
    let pending = s.data("GET", "/nodes/pve1/qemu/100/pending", &[]);
    assert!(
        pending
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p.get("pending").is_none() && p.get("delete").is_none()),
        "{pending}"
    );
    assert_eq!(raw_form(&s, "PUT", path, "name=y").0, 200);
    assert!(
        !file(&sim, "100").contains("[PENDING]"),
        "{}",
        file(&sim, "100")
    );
}

/// A running VM 100: a started one of `quick_vm`'s with a disk, a CD-ROM and a NIC (`extra`
/// replaces or adds keys).
fn running_vm(s: &Session, extra: &[(&str, &str)]) {
    let mut params: std::collections::BTreeMap<&str, &str> = [
        ("cores", "2"),
        ("scsi0", "local-lvm:1"),
        ("ide2", "none,media=cdrom"),
        ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
    ]
    .into();
    params.extend(extra.iter().copied());
    let params: Vec<(&str, &str)> = params.into_iter().collect();
    quick_vm(s, "100", &params);
    let u = s.data("POST", "/nodes/pve1/qemu/100/status/start", &[]);
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
}

/// On a running VM (the harness's running_vm.pl, issue 34): QemuServer.pm `write_vm_config`
/// prints the pending hash as any other, so `delete` stands among its keys in sorted order
/// (after `boot`, before `memory`).
#[test]
fn the_pending_section_is_sorted_with_delete_among_its_keys() {
    let sim = fast(&[]);
    let s = Session::login(&sim);
    running_vm(&s, &[]);
    let path = "/nodes/pve1/qemu/100/config";
    s.data("PUT", path, &[("cores", "4"), ("memory", "4096")]);
    s.data("PUT", path, &[("delete", "ide2")]);
    let text = file(&sim, "100");
    let section = text.split("[PENDING]\n").nth(1).unwrap_or_default();
    assert_eq!(
        section, "boot: order=scsi0;net0\ncores: 4\ndelete: ide2\nmemory: 4096\n",
        "{text}"
    );
}

/// QemuServer.pm `vmconfig_hotplug_pending`: a cloud-init option a running VM takes is
/// recorded by `$cloudinit_record_changed` in the `[special:cloudinit]` section (the old
/// value, or the option in `added`), which write_vm_config prints where the VM has a
/// cloud-init drive (`has_cloudinit`), until the drive is regenerated
/// (Cloudinit.pm `apply_cloudinit_config`). A stopped VM's update (vmconfig_apply_pending)
/// makes no such section.
#[test]
fn a_running_vms_cloud_init_changes_are_recorded_in_the_file() {
    let sim = fast(&[]);
    let s = Session::login(&sim);
    quick_vm(&s, "101", &[("ide2", "local-lvm:cloudinit")]);
    s.data("PUT", "/nodes/pve1/qemu/101/config", &[("ciuser", "admin")]);
    assert!(!file(&sim, "101").contains("[special:cloudinit]"));
    running_vm(&s, &[("ide2", "local-lvm:cloudinit"), ("ciuser", "old")]);
    let path = "/nodes/pve1/qemu/100/config";
    s.data(
        "PUT",
        path,
        &[("ciuser", "admin"), ("ipconfig0", "ip=dhcp")],
    );
    let text = file(&sim, "100");
    assert!(
        text.ends_with("\n[special:cloudinit]\nadded: ipconfig0\nciuser: old\n"),
        "{text}"
    );
    assert_eq!(
        s.data("PUT", "/nodes/pve1/qemu/100/cloudinit", &[]),
        Value::Null
    );
    let text = file(&sim, "100");
    assert!(!text.contains("[special:cloudinit]"), "{text}");
}

/// API2/Qemu.pm `vm_pending` (pve-guest-common GuestHelpers.pm `config_with_pending_array`)
/// answers the values parse_vm_config made, as `vm_config` does: an integer or boolean is a
/// JSON number (`{"key": "cores", "value": 2, "pending": 4}`), a property string a string;
/// `cipassword` masked.
#[test]
fn pending_values_are_typed_as_get_config_types_them() {
    let sim = fast(&[]);
    let s = Session::login(&sim);
    running_vm(&s, &[("cipassword", "old")]);
    s.data(
        "PUT",
        "/nodes/pve1/qemu/100/config",
        &[("cores", "4"), ("onboot", "1"), ("memory", "4096")],
    );
    let pending = s.data("GET", "/nodes/pve1/qemu/100/pending", &[]);
    let item = |key: &str| {
        pending
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["key"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("no {key} in {pending}"))
    };
    assert_eq!(
        item("cores"),
        json!({"key": "cores", "value": 2, "pending": 4})
    );
    assert_eq!(
        item("memory"),
        json!({"key": "memory", "value": "2048", "pending": "4096"})
    );
    assert_eq!(item("onboot"), json!({"key": "onboot", "value": 1}));
    assert_eq!(item("cipassword")["value"], "**********");
}

/// API2/Qemu.pm `cloudinit_pending` reads the `[special:cloudinit]` section, which only
/// vmconfig_hotplug_pending (a running VM) makes: a stopped VM's changed cloud-init options
/// are listed with their `value` only (nothing pending; its start regenerates the drive from
/// the config, Cloudinit.pm `generate_cloudinitconfig`). update_vm_api writes `cipassword`
/// straight into the config, unrecorded, so it is never pending either.
#[test]
fn a_stopped_vm_lists_no_pending_cloud_init_changes() {
    let sim = fast(&[]);
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "101",
        &[("ide2", "local-lvm:cloudinit"), ("ciuser", "old")],
    );
    s.data(
        "PUT",
        "/nodes/pve1/qemu/101/config",
        &[
            ("ciuser", "admin"),
            ("ipconfig0", "ip=dhcp"),
            ("cipassword", "x"),
        ],
    );
    let listing = s.data("GET", "/nodes/pve1/qemu/101/cloudinit", &[]);
    let items = listing.as_array().unwrap();
    assert!(
        items
            .iter()
            .all(|i| i.get("pending").is_none() && i.get("delete").is_none()),
        "{listing}"
    );
    assert!(
        items.contains(&json!({"key": "ciuser", "value": "admin"})),
        "{listing}"
    );
    running_vm(&s, &[("ide2", "local-lvm:cloudinit"), ("ciuser", "old")]);
    s.data(
        "PUT",
        "/nodes/pve1/qemu/100/config",
        &[("ciuser", "admin"), ("cipassword", "x")],
    );
    let listing = s.data("GET", "/nodes/pve1/qemu/100/cloudinit", &[]);
    let items = listing.as_array().unwrap();
    assert!(
        items.contains(&json!({"key": "ciuser", "value": "old", "pending": "admin"})),
        "{listing}"
    );
    assert!(
        items.contains(&json!({"key": "cipassword", "value": "**********"})),
        "{listing}"
    );
}

/// QemuServer.pm `vmconfig_update_disk` on a running VM dies "unable to change media type"
/// when a drive's `media` changes; vmconfig_hotplug_pending adds it as `hotplug problem - …`,
/// writes the config with the change still pending and `raise_param_exc` makes the update a
/// 400 (a POST's task fails with it). A stopped VM applies the change.
#[test]
fn a_running_vms_media_change_is_a_hotplug_problem() {
    let sim = fast(&[]);
    let s = Session::login(&sim);
    running_vm(&s, &[]);
    let path = "/nodes/pve1/qemu/100/config";
    let (status, _, v) = s.call("PUT", path, &[("ide2", "local-lvm:1")]);
    assert_eq!(status, 400, "{v}");
    assert_eq!(
        v["errors"],
        json!({"ide2": "hotplug problem - unable to change media type"})
    );
    let pending = s.data("GET", "/nodes/pve1/qemu/100/pending", &[]);
    let ide2 = pending
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "ide2")
        .cloned()
        .unwrap();
    assert_eq!(ide2["value"], "none,media=cdrom");
    assert!(
        ide2["pending"]
            .as_str()
            .is_some_and(|p| p.starts_with("local-lvm:vm-100-disk-1")),
        "{ide2}"
    );
    let upid = s.data(
        "POST",
        path,
        &[("ide2", "none,media=cdrom"), ("scsi0", "none,media=cdrom")],
    );
    let status = s.wait(upid.as_str().unwrap());
    assert_eq!(
        status["exitstatus"],
        "400 Parameter verification failed. scsi0: hotplug problem - unable to change media type"
    );
}

/// pve-storage Plugin.pm `get_next_vm_diskname`: a disk id is taken by any
/// `(vm|base)-N-disk-K` volume, whatever its format, so a qcow2 after a raw on a directory
/// storage is `vm-100-disk-1.qcow2`, not a second `disk-0`. API2/Qemu.pm `create_disks` makes
/// a cloud-init drive in the `format=` asked (qcow2 by default on a path storage) and drops
/// `format` from the stored drive; a block storage's `alloc_image` (LvmThinPlugin.pm) dies
/// "unsupported format 'qcow2'" for anything but raw (a `die` without a newline, so Perl adds
/// where), failing the create task.
#[test]
fn disk_ids_and_formats_are_the_storages() {
    let sim = fast(&[]);
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "100",
        &[
            ("sata0", "local:1,format=raw"),
            ("scsi0", "local:1,format=qcow2"),
            ("ide2", "local:cloudinit,format=raw"),
        ],
    );
    let c = config(&s, "100");
    assert_eq!(c["sata0"], "local:100/vm-100-disk-0.raw,size=1G");
    assert_eq!(c["scsi0"], "local:100/vm-100-disk-1.qcow2,size=1G");
    assert_eq!(c["ide2"], "local:100/vm-100-cloudinit.raw,media=cdrom");
    for (vmid, key, value) in [
        ("101", "scsi0", "local-lvm:1,format=qcow2"),
        ("102", "ide2", "local-lvm:cloudinit,format=qcow2"),
    ] {
        let upid = s.data("POST", "/nodes/pve1/qemu", &[("vmid", vmid), (key, value)]);
        assert_eq!(
            s.wait(upid.as_str().unwrap())["exitstatus"],
            format!(
                "unable to create VM {vmid} - unsupported format 'qcow2' at \
                 /usr/share/perl5/PVE/Storage/LvmThinPlugin.pm line 102."
            )
        );
    }
}
