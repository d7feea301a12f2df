//! pve-sim's VM config write path against PVE's source, one test per row of
//! `sim/WRITE_PATH.md`: what a value becomes between the request and what `GET …/config`
//! answers (and what the config file holds, read on the admin port).

use serde_json::json;

use crate::oracle_found::raw_form;
use crate::support::*;

/// A real ed25519 public key (made with ssh-keygen for these tests).
const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEy4xSYhokTxpCt5FoODp6IoFKsiOf3vpdJceoBUhYvO sim@sankofa";

fn fast() -> Sim {
    Sim::plain(&["--time-scale", "0.05"], &[])
}

/// A create that must fail in its task; returns the exit status.
fn create_fails(s: &Session, params: &[(&str, &str)]) -> String {
    let upid = s.data("POST", "/nodes/pve1/qemu", params);
    let st = s.wait(upid.as_str().unwrap());
    st["exitstatus"].as_str().unwrap().to_string()
}

fn put(s: &Session, vmid: &str, params: &[(&str, &str)]) -> (u16, String) {
    let (status, reason, _) = s.call("PUT", &format!("/nodes/pve1/qemu/{vmid}/config"), params);
    (status, reason)
}

/// pve-http-server AnyEvent.pm `decode_urlencoded`: a key without `=` is undef (`key=` is
/// `''`: `oracle_found::an_empty_form_value_is_an_empty_string`). qemu-server API2/Qemu.pm
/// update_vm_api puts it in `$conf->{pending}`; QemuServer.pm write_vm_config skips an undef
/// `description` (nothing changes, and the update alone is not "no options specified") and
/// dies on any other key in `check_type` ("got undefined value"); undef `tags` is
/// GuestHelpers.pm get_unique_tags(undef), `''`: the `tags: ` line reads back as `" "`.
#[test]
fn an_empty_form_value_is_undef() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("description", "old notes"), ("tags", "a")]);
    let path = "/nodes/pve1/qemu/100/config";
    assert_eq!(raw_form(&s, "PUT", path, "description").0, 200);
    assert_eq!(raw_form(&s, "PUT", path, "tags").0, 200);
    let c = config(&s, "100");
    assert_eq!(c["description"], "old notes");
    assert_eq!(c["tags"], " ");
    let (status, reason, _) = raw_form(&s, "PUT", path, "name");
    assert_eq!(
        (status, reason.as_str()),
        (500, "unable to parse value of 'name' - got undefined value")
    );
    // A drive without a value: check_drive_param.
    let (status, _, v) = raw_form(&s, "PUT", path, "scsi1");
    assert_eq!(status, 400);
    assert_eq!(v["errors"]["scsi1"], "unable to parse drive options");
    // `;` separates pairs too, and only the first two `=` fields count.
    let (status, _, _) = raw(
        &s.addr,
        "PUT",
        "/api2/json/nodes/pve1/qemu/100/config",
        &[
            ("Cookie", s.cookie.as_str()),
            ("CSRFPreventionToken", s.csrf.as_str()),
        ],
        "name=web1;cores=2",
    );
    assert_eq!(status, 200);
    let c = config(&s, "100");
    assert_eq!(
        (c["name"].clone(), c["cores"].clone()),
        (json!("web1"), json!(2))
    );
}

/// create_vm: `$conf = $param` reaches write_vm_config with the undef `sshkeys` (a key
/// without `=`), whose check_type dies, so the create fails and is cleaned up ("unable to
/// create VM …").
#[test]
fn an_empty_value_fails_the_create() {
    let sim = fast();
    let s = Session::login(&sim);
    let (status, _, v) = raw_form(&s, "POST", "/nodes/pve1/qemu", "vmid=100&sshkeys");
    assert_eq!(status, 200);
    let exit = s.wait(v["data"].as_str().unwrap())["exitstatus"].clone();
    assert_eq!(
        exit,
        "unable to create VM 100 - unable to parse value of 'sshkeys' - got undefined value"
    );
    let (status, _, _) = s.call("GET", "/nodes/pve1/qemu/100/config", &[]);
    assert_eq!(status, 500);
    // An undef `description` is no description.
    let (status, _, v) = raw_form(
        &s,
        "POST",
        "/nodes/pve1/qemu",
        "vmid=101&memory=2048&description",
    );
    assert_eq!(status, 200);
    assert_eq!(s.wait(v["data"].as_str().unwrap())["exitstatus"], "OK");
    assert!(config(&s, "101").get("description").is_none());
}

/// QemuServer.pm write_vm_config/parse_vm_config: the description is kept as `#` comment lines
/// and read back with trailing whitespace trimmed.
#[test]
fn the_description_is_read_back_trimmed() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "100",
        &[("description", "first line\nsecond: 100%\n\n")],
    );
    assert_eq!(config(&s, "100")["description"], "first line\nsecond: 100%");
    assert!(file(&sim, "100").starts_with("#first line\n#second%3A 100%25\n"));
}

/// `boot`: create_vm keeps a given value as it is and, without one, writes
/// `get_default_bootdevices` (the first disk, the first CD-ROM — a cloud-init drive is one —
/// and the first NIC); update_vm_api checks each `order=` device exists and prints the list
/// again with `print_bootorder` (`order=scsi0; net0;` becomes `order=scsi0;net0`); a deleted
/// device leaves the order.
#[test]
fn boot_orders_as_pve_prints_them() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "100",
        &[
            ("scsi0", "local-lvm:1"),
            ("scsi1", "local-lvm:1"),
            ("ide2", "local-lvm:cloudinit"),
            ("net0", "virtio,bridge=vmbr0"),
            ("net1", "virtio,bridge=vmbr0"),
        ],
    );
    assert_eq!(config(&s, "100")["boot"], "order=scsi0;ide2;net0");
    quick_vm(
        &s,
        "101",
        &[
            ("scsi0", "local-lvm:1"),
            ("net0", "virtio,bridge=vmbr0"),
            ("boot", "order=scsi0; net0;"),
        ],
    );
    assert_eq!(config(&s, "101")["boot"], "order=scsi0; net0;");
    assert_eq!(put(&s, "101", &[("boot", "order=scsi0; net0;")]).0, 200);
    assert_eq!(config(&s, "101")["boot"], "order=scsi0;net0");
    assert_eq!(
        put(&s, "101", &[("boot", "order=virtio0")]),
        (
            500,
            "invalid bootorder: device 'virtio0' does not exist'".to_string()
        )
    );
    assert_eq!(put(&s, "101", &[("delete", "net0")]).0, 200);
    assert_eq!(config(&s, "101")["boot"], "order=scsi0");
    // The schema's pve-qm-bootdev: no EFI disk, no unknown device.
    let (status, _, v) = s.call(
        "PUT",
        "/nodes/pve1/qemu/101/config",
        &[("boot", "order=efidisk0")],
    );
    assert_eq!(status, 400, "{v}");
}

/// `vmgenid: 1` is a fresh UUID on each write (create_vm, and update_vm_api's `vmgenid`
/// branch, QemuServer.pm generate_uuid); `0` stays. create_vm makes an `smbios1` UUID.
#[test]
fn vmgenid_one_is_a_new_uuid_on_each_write() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("vmgenid", "1")]);
    let first = config(&s, "100")["vmgenid"].as_str().unwrap().to_string();
    assert_eq!(first.len(), 36, "{first}");
    assert_eq!(put(&s, "100", &[("vmgenid", "1")]).0, 200);
    let second = config(&s, "100")["vmgenid"].as_str().unwrap().to_string();
    assert_eq!(second.len(), 36);
    assert_ne!(first, second);
    quick_vm(&s, "101", &[("vmgenid", "0")]);
    assert_eq!(config(&s, "101")["vmgenid"], "0");
    // create_vm: no smbios1 is `uuid=<new>` (generate_smbios1_uuid).
    let smbios = config(&s, "101")["smbios1"].as_str().unwrap().to_string();
    assert!(
        smbios.starts_with("uuid=") && smbios.len() == 41,
        "{smbios}"
    );
}

/// pve-common CGroup.pm `clamp_cpu_shares` (create_vm, update_vm_api): on cgroup v2 a
/// `cpuunits` above 10000 is 10000.
#[test]
fn cpuunits_are_clamped_to_the_cgroup_v2_range() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("cpuunits", "262144")]);
    assert_eq!(config(&s, "100")["cpuunits"], 10000);
    assert_eq!(put(&s, "100", &[("cpuunits", "50000")]).0, 200);
    assert_eq!(config(&s, "100")["cpuunits"], 10000);
    assert_eq!(put(&s, "100", &[("cpuunits", "2048")]).0, 200);
    assert_eq!(config(&s, "100")["cpuunits"], 2048);
}

/// Machine.pm `check_and_pin_machine_string`: at create a Windows `ostype` pins a `q35` (or
/// absent) machine to the installed version (`pc-q35-9.2+pve1`, `pc-i440fx-9.2+pve1`), and
/// every machine value is printed again (`type` first); update_vm_api pins it when `ostype`
/// becomes Windows without `machine` in the same update.
#[test]
fn windows_machines_are_pinned() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("ostype", "win11"), ("machine", "q35")]);
    assert_eq!(config(&s, "100")["machine"], "pc-q35-9.2+pve1");
    quick_vm(&s, "101", &[("ostype", "win10")]);
    assert_eq!(config(&s, "101")["machine"], "pc-i440fx-9.2+pve1");
    quick_vm(
        &s,
        "102",
        &[("ostype", "l26"), ("machine", "viommu=intel,type=q35")],
    );
    assert_eq!(config(&s, "102")["machine"], "q35,viommu=intel");
    quick_vm(&s, "103", &[("ostype", "l26"), ("machine", "q35")]);
    assert_eq!(put(&s, "103", &[("ostype", "win11")]).0, 200);
    assert_eq!(config(&s, "103")["machine"], "pc-q35-9.2+pve1");
    quick_vm(&s, "104", &[("ostype", "l26"), ("machine", "q35")]);
    assert_eq!(
        put(&s, "104", &[("ostype", "win11"), ("machine", "q35")]).0,
        200
    );
    assert_eq!(config(&s, "104")["machine"], "q35");
}

/// pve-common Tools.pm `validate_ssh_public_keys` (create_vm and update_vm_api, after
/// uri_unescape): every non-blank line must be a key `ssh-keygen -l` reads, or the request
/// dies with "SSH public key validation error" before anything is written; valid keys are
/// stored as sent (url-encoded).
#[test]
fn ssh_keys_are_checked_as_ssh_keygen_reads_them() {
    let sim = fast();
    let s = Session::login(&sim);
    let fake = enc("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITest me@laptop");
    let (status, reason, _) = s.call(
        "POST",
        "/nodes/pve1/qemu",
        &[("vmid", "100"), ("sshkeys", fake.as_str())],
    );
    assert_eq!(
        (status, reason.as_str()),
        (500, "SSH public key validation error")
    );
    let (status, _, _) = s.call("GET", "/nodes/pve1/qemu/100/config", &[]);
    assert_eq!(status, 500, "nothing was created");
    let good = enc(&format!("{KEY}\n\n{KEY}\n"));
    quick_vm(&s, "100", &[("sshkeys", good.as_str())]);
    assert_eq!(config(&s, "100")["sshkeys"], good.as_str());
    assert_eq!(
        put(&s, "100", &[("sshkeys", fake.as_str())]),
        (500, "SSH public key validation error".to_string())
    );
    assert_eq!(config(&s, "100")["sshkeys"], good.as_str());
}

/// `cipassword`: create_vm stores it as given (it does not call encrypt_pw); update_vm_api
/// hashes it (Tools.pm encrypt_pw, `$5$…`) unless it already is a crypt() hash or the
/// guest's `ostype` is Windows; GET masks it.
#[test]
fn cipassword_is_plain_at_create_and_hashed_by_an_update() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("cipassword", "s3cret")]);
    assert_eq!(config(&s, "100")["cipassword"], "**********");
    assert!(file(&sim, "100").contains("cipassword: ********\n"));
    assert_eq!(put(&s, "100", &[("cipassword", "s3cret")]).0, 200);
    assert!(file(&sim, "100").contains("cipassword: $5$"));
    let hash = "$5$abcdefgh$0123456789abcdef";
    assert_eq!(put(&s, "100", &[("cipassword", hash)]).0, 200);
    assert!(file(&sim, "100").contains(&format!("cipassword: {hash}\n")));
    quick_vm(&s, "101", &[("ostype", "win11")]);
    assert_eq!(put(&s, "101", &[("cipassword", "s3cret")]).0, 200);
    assert!(file(&sim, "101").contains("cipassword: ********\n"));
}

/// QemuServer.pm `check_type` at write and read: `number` keys keep the file's spelling and GET
/// answers them as strings (`"2.0"`, not a JSON float); integers lose leading zeros and are
/// numbers, a signed one passes the schema (JSONSchema.pm is_integer) but fails the write;
/// booleans are 1/0; a plain string loses surrounding quotes.
#[test]
fn values_are_typed_as_the_config_file_makes_them() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "100",
        &[
            ("cpulimit", "2.0"),
            ("cores", "02"),
            ("ciuser", "\"bob\""),
            ("migrate_downtime", "0.5"),
        ],
    );
    let c = config(&s, "100");
    assert_eq!(c["cpulimit"], json!("2.0"));
    assert_eq!(c["migrate_downtime"], json!("0.5"));
    assert_eq!(c["cores"], json!(2));
    assert_eq!(c["ciuser"], "bob");
    let exit = create_fails(&s, &[("vmid", "101"), ("cores", "+2")]);
    assert_eq!(
        exit,
        "unable to create VM 101 - unable to parse value of 'cores' - type check ('integer') failed - got '+2'"
    );
    let (status, _, v) = s.call("PUT", "/nodes/pve1/qemu/100/config", &[("cpulimit", "inf")]);
    assert_eq!(status, 400, "{v}");
}

/// update_vm_api → create_disks: a drive re-specified with an existing volume gets its size
/// from the volume (`volume_size_info`), whatever the request said; `print_drive` prints
/// booleans as 0/1 and the keys sorted after `file`.
#[test]
fn a_respecified_drive_keeps_its_size() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("scsi0", "local-lvm:1")]);
    assert_eq!(
        config(&s, "100")["scsi0"],
        "local-lvm:vm-100-disk-0,size=1G"
    );
    assert_eq!(
        put(
            &s,
            "100",
            &[("scsi0", "local-lvm:vm-100-disk-0,ssd=on,discard=on")]
        )
        .0,
        200
    );
    assert_eq!(
        config(&s, "100")["scsi0"],
        "local-lvm:vm-100-disk-0,discard=on,size=1G,ssd=1"
    );
    assert_eq!(
        put(&s, "100", &[("scsi0", "local-lvm:vm-100-disk-0,size=20G")]).0,
        200
    );
    assert_eq!(
        config(&s, "100")["scsi0"],
        "local-lvm:vm-100-disk-0,size=1G"
    );
}

/// Tags (GuestHelpers.pm `get_unique_tags`, create_vm and update_vm_api): split as a list,
/// lower-cased, sorted, duplicates dropped, joined by `;`.
#[test]
fn tags_are_made_unique() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("tags", "Web;db,web")]);
    assert_eq!(config(&s, "100")["tags"], "db;web");
    assert_eq!(put(&s, "100", &[("tags", "b a,B")]).0, 200);
    assert_eq!(config(&s, "100")["tags"], "a;b");
}

/// NICs (Network.pm parse_net/print_net in create_vm's add_random_macs and update_vm_api):
/// printed again, `model=MAC` first, booleans as 1/0, a MAC address made where none was given.
/// `memory` is stored as given (`current=2048` stays; only a memory hotplug prints it again).
#[test]
fn nics_are_printed_again_and_memory_is_kept() {
    let sim = fast();
    let s = Session::login(&sim);
    let upid = s.data(
        "POST",
        "/nodes/pve1/qemu",
        &[
            ("vmid", "100"),
            ("net0", "bridge=vmbr0,firewall=on,model=virtio"),
            ("memory", "current=2048"),
        ],
    );
    assert_eq!(s.wait(upid.as_str().unwrap())["exitstatus"], "OK");
    let c = config(&s, "100");
    let net = c["net0"].as_str().unwrap();
    assert!(net.starts_with("virtio=BC:24:11:"), "{net}");
    assert!(net.ends_with(",bridge=vmbr0,firewall=1"), "{net}");
    assert_eq!(c["memory"], "current=2048");
}

fn volume_exists(sim: &Sim, s: &Session, volid: &str) -> bool {
    let _ = sim;
    let storage = volid.split(':').next().unwrap();
    let content = s.data(
        "GET",
        &format!("/nodes/pve1/storage/{storage}/content"),
        &[],
    );
    content
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["volid"] == volid)
}

/// update_vm_api's delete loop: a deleted disk of a stopped VM becomes `unusedN`
/// (vmconfig_apply_pending → vmconfig_delete_or_detach_drive), or with `force=1` is freed
/// (try_deallocate_drive; the pending delete printed `!key`, GET pending `delete: 2`);
/// deleting an `unusedN` frees its volume at once (try_deallocate_drive); both are refused
/// under `protection` (AbstractConfig.pm check_protection); a key that is not set is only
/// logged ("cannot delete '…' - not set in current configuration!").
#[test]
fn deleted_disks_become_unused_or_are_freed() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "100",
        &[
            ("scsi0", "local-lvm:1"),
            ("scsi1", "local-lvm:1"),
            ("scsi2", "local-lvm:1"),
        ],
    );
    assert_eq!(put(&s, "100", &[("delete", "scsi1")]).0, 200);
    let c = config(&s, "100");
    assert_eq!(c["unused0"], "local-lvm:vm-100-disk-1");
    assert!(volume_exists(&sim, &s, "local-lvm:vm-100-disk-1"));
    assert_eq!(
        put(&s, "100", &[("delete", "scsi2"), ("force", "1")]).0,
        200
    );
    let c = config(&s, "100");
    assert!(
        c.get("scsi2").is_none() && c.get("unused1").is_none(),
        "{c}"
    );
    assert!(!volume_exists(&sim, &s, "local-lvm:vm-100-disk-2"));
    assert_eq!(put(&s, "100", &[("protection", "1")]).0, 200);
    assert_eq!(
        put(&s, "100", &[("delete", "unused0")]),
        (
            500,
            "can't remove unused disk 'local-lvm:vm-100-disk-1' - protection mode enabled"
                .to_string()
        )
    );
    assert_eq!(
        put(&s, "100", &[("delete", "scsi0")]),
        (
            500,
            "can't remove drive 'scsi0' - protection mode enabled".to_string()
        )
    );
    assert_eq!(put(&s, "100", &[("delete", "protection")]).0, 200);
    assert_eq!(put(&s, "100", &[("delete", "unused0")]).0, 200);
    assert!(config(&s, "100").get("unused0").is_none());
    assert!(!volume_exists(&sim, &s, "local-lvm:vm-100-disk-1"));
    let upid = s.data(
        "POST",
        "/nodes/pve1/qemu/100/config",
        &[("delete", "serial3")],
    );
    let upid = upid.as_str().unwrap();
    assert_eq!(s.wait(upid)["exitstatus"], "OK");
    assert!(
        s.log(upid)
            .contains(&"cannot delete 'serial3' - not set in current configuration!".to_string()),
        "{:?}",
        s.log(upid)
    );
}

/// A forced delete on a running VM waits in the pending section as `!scsi1` (GET pending
/// `delete: 2`, AbstractConfig.pm print_pending_delete / GuestHelpers.pm
/// config_with_pending_array) and frees the volume when the VM next starts.
#[test]
fn a_forced_delete_is_pending_as_force_on_a_running_vm() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "100",
        &[
            ("scsi0", "local-lvm:1"),
            ("scsi1", "local-lvm:1"),
            ("hotplug", "0"),
        ],
    );
    let upid = s.data("POST", "/nodes/pve1/qemu/100/status/start", &[]);
    assert_eq!(s.wait(upid.as_str().unwrap())["exitstatus"], "OK");
    assert_eq!(
        put(&s, "100", &[("delete", "scsi1"), ("force", "1")]).0,
        200
    );
    let pending = s.data("GET", "/nodes/pve1/qemu/100/pending", &[]);
    let item = pending
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["key"] == "scsi1")
        .unwrap()
        .clone();
    assert_eq!(item["delete"], 2, "{pending}");
    assert!(file(&sim, "100").contains("delete: !scsi1\n"));
    let upid = s.data("POST", "/nodes/pve1/qemu/100/status/reboot", &[]);
    assert_eq!(s.wait(upid.as_str().unwrap())["exitstatus"], "OK");
    let c = config(&s, "100");
    assert!(
        c.get("scsi1").is_none() && c.get("unused0").is_none(),
        "{c}"
    );
    assert!(!volume_exists(&sim, &s, "local-lvm:vm-100-disk-1"));
}

/// pve-http-server AnyEvent.pm decode_urlencoded: a key given twice is an array; RESTHandler.pm
/// normalize_legacy_param_formats joins it with `,` for a `-list` format (`delete`), and
/// JSONSchema.pm check_type refuses it for any other ("type check ('integer') failed - got
/// ARRAY").
#[test]
fn a_repeated_key_is_an_array() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("onboot", "1"), ("protection", "0")]);
    assert_eq!(
        put(&s, "100", &[("delete", "onboot"), ("delete", "protection")]).0,
        200
    );
    let c = config(&s, "100");
    assert!(
        c.get("onboot").is_none() && c.get("protection").is_none(),
        "{c}"
    );
    let (status, _, v) = s.call(
        "PUT",
        "/nodes/pve1/qemu/100/config",
        &[("cores", "2"), ("cores", "4")],
    );
    assert_eq!(status, 400);
    assert_eq!(
        v["errors"]["cores"],
        "type check ('integer') failed - got ARRAY"
    );
}
