//! The CPU models and flags a VM's own `cpu` may name, as qemu-server's
//! `src/PVE/QemuServer/CPUConfig.pm` `validate_vm_cpu_conf` checks them (the `pve-vm-cpu-conf`
//! format's verifier, run on every create and update): a QEMU model PVE knows
//! (`$cpu_models_by_arch`, every architecture's, and `host`), one of PVE's built-in models
//! (`$builtin_models_by_arch`: `x86-64-v2` …), or a `custom-` model of the cluster's
//! `cpu-models.conf`; VM-specific flags only from `CPUFlags.pm`'s supported set; no
//! `reported-model` (only a custom model's definition may set it).

/// The QEMU models of `$cpu_models_by_arch` (x86_64, then aarch64), `host`, and PVE's
/// built-in `x86-64-vN` models.
const MODELS: &[&str] = &[
    "486",
    "pentium",
    "pentium2",
    "pentium3",
    "coreduo",
    "core2duo",
    "Conroe",
    "Penryn",
    "Nehalem",
    "Nehalem-IBRS",
    "Westmere",
    "Westmere-IBRS",
    "SandyBridge",
    "SandyBridge-IBRS",
    "IvyBridge",
    "IvyBridge-IBRS",
    "Haswell",
    "Haswell-IBRS",
    "Haswell-noTSX",
    "Haswell-noTSX-IBRS",
    "Broadwell",
    "Broadwell-IBRS",
    "Broadwell-noTSX",
    "Broadwell-noTSX-IBRS",
    "Skylake-Client",
    "Skylake-Client-IBRS",
    "Skylake-Client-noTSX-IBRS",
    "Skylake-Client-v4",
    "Skylake-Server",
    "Skylake-Server-IBRS",
    "Skylake-Server-noTSX-IBRS",
    "Skylake-Server-v4",
    "Skylake-Server-v5",
    "Cascadelake-Server",
    "Cascadelake-Server-v2",
    "Cascadelake-Server-noTSX",
    "Cascadelake-Server-v4",
    "Cascadelake-Server-v5",
    "Cooperlake",
    "Cooperlake-v2",
    "KnightsMill",
    "Icelake-Client",
    "Icelake-Client-noTSX",
    "Icelake-Server",
    "Icelake-Server-noTSX",
    "Icelake-Server-v3",
    "Icelake-Server-v4",
    "Icelake-Server-v5",
    "Icelake-Server-v6",
    "Icelake-Server-v7",
    "SapphireRapids",
    "SapphireRapids-v2",
    "SapphireRapids-v3",
    "SapphireRapids-v4",
    "GraniteRapids",
    "GraniteRapids-v2",
    "GraniteRapids-v3",
    "SierraForest",
    "SierraForest-v2",
    "SierraForest-v3",
    "ClearwaterForest",
    "athlon",
    "phenom",
    "Opteron_G1",
    "Opteron_G2",
    "Opteron_G3",
    "Opteron_G4",
    "Opteron_G5",
    "EPYC",
    "EPYC-IBPB",
    "EPYC-v3",
    "EPYC-v4",
    "EPYC-v5",
    "EPYC-Rome",
    "EPYC-Rome-v2",
    "EPYC-Rome-v3",
    "EPYC-Rome-v4",
    "EPYC-Rome-v5",
    "EPYC-Milan",
    "EPYC-Milan-v2",
    "EPYC-Milan-v3",
    "EPYC-Genoa",
    "EPYC-Genoa-v2",
    "EPYC-Turin",
    "kvm32",
    "kvm64",
    "qemu32",
    "qemu64",
    "max",
    "a64fx",
    "cortex-a35",
    "cortex-a53",
    "cortex-a55",
    "cortex-a57",
    "cortex-a710",
    "cortex-a72",
    "cortex-a76",
    "neoverse-n1",
    "neoverse-n2",
    "neoverse-v1",
    "host",
    "x86-64-v2",
    "x86-64-v2-AES",
    "x86-64-v3",
    "x86-64-v4",
];

/// The flags a VM's own `cpu` may set (`$supported_vm_specific_cpu_flags_by_arch`; a custom
/// model may set any QEMU flag).
pub const VM_SPECIFIC_FLAGS: &[&str] = &[
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

/// True for a model PVE knows without a `cpu-models.conf`: a QEMU model or a built-in one.
pub fn is_known_model(model: &str) -> bool {
    MODELS.contains(&model)
}

/// True for a model of the cluster's `cpu-models.conf` (`is_custom_model`), which only the
/// cluster can say exists.
pub fn is_custom_model(model: &str) -> bool {
    model.starts_with("custom-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_and_flags() {
        for model in [
            "host",
            "kvm64",
            "x86-64-v2-AES",
            "EPYC-Genoa",
            "cortex-a72",
            "max",
        ] {
            assert!(is_known_model(model), "{model}");
        }
        for model in ["foo", "Host", "x86-64-v5", "custom-mine"] {
            assert!(!is_known_model(model), "{model}");
        }
        assert!(is_custom_model("custom-mine") && !is_custom_model("host"));
        assert!(VM_SPECIFIC_FLAGS.contains(&"nested-virt") && !VM_SPECIFIC_FLAGS.contains(&"avx2"));
    }
}
