//! Values pve-sim stored or refused otherwise than PVE's own code, found by the module audit
//! of issue 34 and checked against PVE's Perl (the oracle) or, where the oracle fakes it
//! (storage), against pve-storage's source. Each test cites the PVE function that decides it
//! (see `sim/WRITE_PATH.md`).

use crate::support::*;

fn fast() -> Sim {
    Sim::plain(&["--time-scale", "0.05"], &[])
}

/// Machine.pm `$machine_fmt` has `aw-bits` (a number, 32 to 64), and
/// `assert_valid_machine_property` (create_vm's worker through `check_and_pin_machine_string`,
/// update_vm_api's `machine` branch) wants an Intel vIOMMU on q35 with `aw-bits` 39 or 48, and
/// `aw-bits` only with a vIOMMU: a failed create task, a 500 on update. create_vm prints the
/// value again (`print_machine`: the type, then the keys sorted); an update keeps it as given.
#[test]
fn machine_properties_as_assert_valid_machine_property_checks_them() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("machine", "q35,viommu=intel,aw-bits=48")]);
    assert_eq!(config(&s, "100")["machine"], "q35,aw-bits=48,viommu=intel");
    let put = |value: &str| {
        let (status, reason, _) =
            s.call("PUT", "/nodes/pve1/qemu/100/config", &[("machine", value)]);
        (status, reason)
    };
    assert_eq!(put("q35,viommu=virtio,aw-bits=48").0, 200);
    assert_eq!(config(&s, "100")["machine"], "q35,viommu=virtio,aw-bits=48");
    for (value, message) in [
        (
            "pc,viommu=intel",
            "to use Intel vIOMMU please set the machine type to q35",
        ),
        (
            "q35,viommu=intel,aw-bits=64",
            "Intel vIOMMU supports only 39 or 48 bits as address width",
        ),
        (
            "q35,aw-bits=48",
            "cannot set aw-bits if no vIOMMU is configured",
        ),
    ] {
        assert_eq!(put(value), (500, message.to_string()), "{value}");
        let upid = s.data(
            "POST",
            "/nodes/pve1/qemu",
            &[("vmid", "101"), ("machine", value)],
        );
        assert_eq!(
            s.wait(upid.as_str().unwrap())["exitstatus"],
            format!("unable to create VM 101 - {message}"),
            "{value}"
        );
    }
    assert_eq!(config(&s, "100")["machine"], "q35,viommu=virtio,aw-bits=48");
    let (status, _, v) = s.call(
        "PUT",
        "/nodes/pve1/qemu/100/config",
        &[("machine", "q35,viommu=virtio,aw-bits=30")],
    );
    assert_eq!(status, 400);
    assert!(
        v["errors"]["machine"]
            .as_str()
            .unwrap()
            .contains("aw-bits: value must have a minimum value of 32"),
        "{v}"
    );
}

/// CPUConfig.pm `$cpu_fmt`: `flags` matches `$cpu_flag_any_re(;$cpu_flag_any_re)*`, each
/// flag signed (`cpu.flags: value does not match the regex pattern`); `validate_vm_cpu_conf`
/// (the `pve-vm-cpu-conf` format's verifier) then limits a VM's flags to
/// `supported_cpu_flags_names` and refuses `reported-model`. All a 400 on `cpu`, on create and
/// update alike.
#[test]
fn cpu_values_as_validate_vm_cpu_conf_checks_them() {
    let sim = fast();
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("cpu", "host,flags=+aes;-pcid")]);
    assert_eq!(config(&s, "100")["cpu"], "host,flags=+aes;-pcid");
    for (value, message) in [
        (
            "host,flags=+avx2",
            "VM-specific CPU flags must be a subset of: aes, amd-no-ssb, amd-ssbd, hv-evmcs, \
             hv-tlbflush, ibpb, md-clear, nested-virt, pcid, pdpe1gb, spec-ctrl, ssbd, virt-ssbd",
        ),
        (
            "host,flags=aes",
            "flags: value does not match the regex pattern",
        ),
        (
            "kvm64,reported-model=host",
            "Property 'reported-model' not allowed in VM-specific CPU config.",
        ),
    ] {
        for (method, path, params) in [
            ("PUT", "/nodes/pve1/qemu/100/config", vec![("cpu", value)]),
            (
                "POST",
                "/nodes/pve1/qemu",
                vec![("vmid", "101"), ("cpu", value)],
            ),
        ] {
            let (status, _, v) = s.call(method, path, &params);
            assert_eq!(status, 400, "{method} {value}");
            let error = v["errors"]["cpu"].as_str().unwrap();
            assert!(error.contains(message), "{method} {value}: {error}");
        }
    }
    assert_eq!(config(&s, "100")["cpu"], "host,flags=+aes;-pcid");
}

/// pve-storage `vdisk_alloc` → LvmThinPlugin.pm `alloc_image`: `die "unsupported format
/// '$fmt'" if $fmt ne 'raw'` (no newline: Perl adds where). create_disks asks for the drive's
/// `format` on a new disk, so the create task fails and a PUT is a 500; nothing is allocated.
/// A directory storage keeps qcow2.
#[test]
fn a_format_the_storage_cannot_hold_fails_the_allocation() {
    let sim = fast();
    let s = Session::login(&sim);
    let message =
        "unsupported format 'qcow2' at /usr/share/perl5/PVE/Storage/LvmThinPlugin.pm line 102.";
    let upid = s.data(
        "POST",
        "/nodes/pve1/qemu",
        &[("vmid", "100"), ("scsi0", "local-lvm:1,format=qcow2")],
    );
    assert_eq!(
        s.wait(upid.as_str().unwrap())["exitstatus"],
        format!("unable to create VM 100 - {message}")
    );
    quick_vm(&s, "101", &[]);
    let (status, reason, _) = s.call(
        "PUT",
        "/nodes/pve1/qemu/101/config",
        &[("scsi1", "local-lvm:1,format=qcow2")],
    );
    assert_eq!((status, reason.as_str()), (500, message));
    assert!(config(&s, "101").get("scsi1").is_none());
    let content = s.data("GET", "/nodes/pve1/storage/local-lvm/content", &[]);
    assert_eq!(content.as_array().unwrap().len(), 0, "{content}");
    let (status, _, _) = s.call(
        "PUT",
        "/nodes/pve1/qemu/101/config",
        &[("scsi1", "local:1,format=qcow2")],
    );
    assert_eq!(status, 200);
    assert_eq!(
        config(&s, "101")["scsi1"],
        "local:101/vm-101-disk-0.qcow2,size=1G"
    );
}
