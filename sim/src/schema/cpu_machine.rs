//! The checks qemu-server makes of a VM's `cpu` and `machine` values beyond their property
//! strings' sub-key types: CPUConfig.pm's `pve-vm-cpu-conf` format (the flags pattern, and
//! `validate_vm_cpu_conf`'s VM-specific limits, both a 400 at parameter verification) and
//! Machine.pm's `assert_valid_machine_property` (a `die` in create_vm's worker and in
//! update_vm_api: a failed create task, a 500 on update).

use std::collections::BTreeMap;

/// CPUFlags.pm `supported_cpu_flags_names` (x86_64): the flags a VM's own `cpu` may set.
const VM_CPU_FLAGS: &[&str] = &[
    "aes",
    "amd-no-ssb",
    "amd-ssbd",
    "hv-evmcs",
    "hv-tlbflush",
    "ibpb",
    "md-clear",
    "nested-virt",
    "pcid",
    "pdpe1gb",
    "spec-ctrl",
    "ssbd",
    "virt-ssbd",
];

/// CPUConfig.pm `$cpu_fmt` `flags` pattern, `$cpu_flag_any_re(;$cpu_flag_any_re)*` with
/// CPUFlags.pm `cpu_flag_any_re` `([+-])([a-zA-Z0-9\-_\.]+)`: every flag signed.
pub fn is_cpu_flag_list(flags: &str) -> bool {
    flags.split(';').all(|flag| {
        flag.strip_prefix(['+', '-']).is_some_and(|name| {
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        })
    })
}

/// CPUConfig.pm `validate_vm_cpu_conf`, after the model check: VM-specific flags only from
/// [`VM_CPU_FLAGS`] (`cpu_flag_supported_re`), and no `reported-model` (custom models only).
pub fn validate_vm_cpu_limits(cpu: &BTreeMap<String, String>) -> Result<(), String> {
    if let Some(flags) = cpu.get("flags").filter(|f| !f.is_empty() && *f != "0") {
        let supported = flags.split(';').all(|flag| {
            flag.strip_prefix(['+', '-'])
                .is_some_and(|name| VM_CPU_FLAGS.contains(&name))
        });
        if !supported {
            return Err(format!(
                "VM-specific CPU flags must be a subset of: {}",
                VM_CPU_FLAGS.join(", ")
            ));
        }
    }
    if cpu.contains_key("reported-model") {
        return Err("Property 'reported-model' not allowed in VM-specific CPU config.".into());
    }
    Ok(())
}

/// Machine.pm `assert_valid_machine_property` of a parsed `machine` value: an Intel vIOMMU
/// needs a q35 machine type and an `aw-bits` of 39 or 48; `aw-bits` needs a vIOMMU.
pub fn check_machine_properties(conf: &BTreeMap<String, String>) -> Result<(), String> {
    let aw_bits = conf
        .get("aw-bits")
        .filter(|bits| bits.parse::<f64>().is_ok_and(|n| n != 0.0));
    if conf.get("viommu").is_some_and(|v| v == "intel") {
        if !conf.get("type").is_some_and(|t| t.contains("q35")) {
            return Err("to use Intel vIOMMU please set the machine type to q35".into());
        }
        if aw_bits.is_some_and(|bits| !matches!(bits.parse::<f64>(), Ok(39.0) | Ok(48.0))) {
            return Err("Intel vIOMMU supports only 39 or 48 bits as address width".into());
        }
    }
    if aw_bits.is_some() && conf.get("viommu").is_none_or(|v| v.is_empty()) {
        return Err("cannot set aw-bits if no vIOMMU is configured".into());
    }
    Ok(())
}

#[cfg(test)]
mod unit {
    use super::*;

    fn assert_valid_machine_property(machine: &str) -> Result<(), String> {
        let mut items = machine.split(',');
        let mut conf = BTreeMap::from([("type".to_string(), items.next().unwrap().to_string())]);
        for item in items {
            let (key, value) = item.split_once('=').unwrap();
            conf.insert(key.to_string(), value.to_string());
        }
        check_machine_properties(&conf)
    }

    #[test]
    fn machine_properties_as_assert_valid_machine_property_checks_them() {
        assert!(assert_valid_machine_property("q35,viommu=intel,aw-bits=48").is_ok());
        assert!(assert_valid_machine_property("pc,viommu=virtio").is_ok());
        assert!(assert_valid_machine_property("pc-i440fx-9.2,viommu=intel").is_err());
        assert!(assert_valid_machine_property("q35,viommu=intel,aw-bits=64").is_err());
        assert!(assert_valid_machine_property("q35,aw-bits=48").is_err());
    }

    #[test]
    fn cpu_flags_signed_and_vm_specific() {
        assert!(is_cpu_flag_list("+aes;-pcid"));
        assert!(!is_cpu_flag_list("aes"));
        let cpu = |flags: &str| BTreeMap::from([("flags".to_string(), flags.to_string())]);
        assert!(validate_vm_cpu_limits(&cpu("+aes;-pcid")).is_ok());
        assert!(validate_vm_cpu_limits(&cpu("+avx2")).is_err());
    }
}
