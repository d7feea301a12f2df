//! Values whose property string is mostly its default key: `cpu` (`$cpu_fmt`, qemu-server
//! `src/PVE/QemuServer/CPUConfig.pm`, default key `cputype`), `memory` (`$memory_fmt`,
//! `Memory.pm`, default key `current`) and `vga` (`$vga_fmt`, `QemuServer.pm`, default key
//! `type`).
//!
//! PVE stores each as it was sent; `host` and `cputype=host`, `2048` and `current=2048` are
//! one value.

use std::fmt;
use std::str::FromStr;

use super::cpu_models;
use super::property::{Key, Kind, PropertyString, Schema, ValueError};

/// A CPU flag list (`+aes;-pcid`): `;`-separated flags, each with its sign
/// (`cpu_flag_any_re`: `[+-][a-zA-Z0-9\-_\.]+`).
fn cpu_flags(value: &str) -> bool {
    value.split(';').all(|flag| {
        let Some(name) = flag.strip_prefix(['+', '-']) else {
            return false;
        };
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    })
}

/// `hv-vendor-id`: `[a-zA-Z0-9]{1,12}`.
fn vendor_id(value: &str) -> bool {
    (1..=12).contains(&value.len()) && value.bytes().all(|b| b.is_ascii_alphanumeric())
}

static CPU_KEYS: &[Key] = &[
    Key::new("cputype", Kind::Str)
        .default_key()
        .default("kvm64"),
    Key::new("reported-model", Kind::Str).default("kvm64"),
    Key::new("hidden", Kind::Bool).default("0"),
    Key::new(
        "hv-vendor-id",
        Kind::Checked(vendor_id, "1 to 12 letters or digits"),
    ),
    Key::new(
        "flags",
        Kind::Checked(cpu_flags, "flags such as +aes;-pcid"),
    ),
    Key::new("guest-phys-bits", Kind::Int(Some(32), Some(64))),
    Key::new("phys-bits", Kind::Str),
    Key::new("level", Kind::Int(Some(0), Some(4_294_967_295))),
];
static MEMORY_KEYS: &[Key] = &[Key::new("current", Kind::Int(Some(16), None))
    .required()
    .default_key()
    .default("512")];
static VGA_KEYS: &[Key] = &[
    Key::new(
        "type",
        Kind::Enum(&[
            "cirrus",
            "qxl",
            "qxl2",
            "qxl3",
            "qxl4",
            "none",
            "serial0",
            "serial1",
            "serial2",
            "serial3",
            "std",
            "virtio",
            "virtio-gl",
            "vmware",
        ]),
    )
    .default_key()
    .default("std"),
    Key::new("memory", Kind::Int(Some(4), Some(512))),
    Key::new("clipboard", Kind::Enum(&["vnc"])),
];

static CPU: Schema = Schema {
    name: "cpu",
    keys: &[CPU_KEYS],
    skip: &[],
};
static MEMORY: Schema = Schema {
    name: "memory",
    keys: &[MEMORY_KEYS],
    skip: &[],
};
static VGA: Schema = Schema {
    name: "vga",
    keys: &[VGA_KEYS],
    skip: &[],
};

macro_rules! keyed {
    ($(#[$doc:meta])* $name:ident, $schema:ident, $key:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $name {
            props: PropertyString,
        }

        impl $name {
            /// The default key's value.
            pub fn main(&self) -> Option<&str> {
                self.props.get($key)
            }

            /// A key's value.
            pub fn get(&self, key: &str) -> Option<&str> {
                self.props.get(key)
            }
        }

        impl FromStr for $name {
            type Err = ValueError;

            fn from_str(value: &str) -> Result<$name, ValueError> {
                Ok($name {
                    props: PropertyString::parse(&$schema, value)?,
                })
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.props.fmt(f)
            }
        }
    };
}

keyed!(
    /// `cpu`: the CPU type and its options.
    Cpu, CPU, "cputype"
);
keyed!(
    /// `memory`: the RAM in MiB (`current`).
    Memory, MEMORY, "current"
);
keyed!(
    /// `vga`: the display type and its options.
    Vga, VGA, "type"
);

impl Cpu {
    /// Checks a VM's own `cpu` as `validate_vm_cpu_conf` (CPUConfig.pm) does on every create
    /// and update: a model PVE knows (a `custom-` one is the cluster's to know), flags only
    /// from the VM-specific set, no `reported-model`. PVE answers each with a 400 on `cpu`.
    pub fn check_vm_specific(&self) -> Result<(), ValueError> {
        let model = self.main().unwrap_or("kvm64");
        if !cpu_models::is_known_model(model) && !cpu_models::is_custom_model(model) {
            return Err(ValueError::new(
                "cpu",
                format!("Built-in cputype '{model}' is not defined (missing 'custom-' prefix?)"),
            ));
        }
        if let Some(flags) = self.get("flags")
            && let Some(flag) = flags.split(';').find(|flag| {
                !cpu_models::VM_SPECIFIC_FLAGS.contains(&flag.trim_start_matches(['+', '-']))
            })
        {
            return Err(ValueError::new(
                "cpu",
                format!(
                    "flag '{flag}' is not one a VM's own CPU may set: VM-specific CPU flags must be a subset of: {} (a custom model may set others)",
                    cpu_models::VM_SPECIFIC_FLAGS.join(", ")
                ),
            ));
        }
        if self.get("reported-model").is_some() {
            return Err(ValueError::new(
                "cpu",
                "Property 'reported-model' not allowed in VM-specific CPU config (only a custom model's definition sets it)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_keys_read_bare_or_named() {
        assert_eq!(
            "host".parse::<Cpu>().unwrap(),
            "cputype=host".parse().unwrap()
        );
        assert_eq!(
            "cputype=host,flags=+aes;-pcid"
                .parse::<Cpu>()
                .unwrap()
                .to_string(),
            "host,flags=+aes;-pcid"
        );
        assert_eq!(
            "2048".parse::<Memory>().unwrap(),
            "current=2048".parse().unwrap()
        );
        assert_eq!(
            "current=2048".parse::<Memory>().unwrap().to_string(),
            "2048"
        );
        assert_ne!("2048".parse::<Memory>().unwrap(), "4096".parse().unwrap());
        assert_eq!(
            "type=std,memory=32".parse::<Vga>().unwrap().to_string(),
            "std,memory=32"
        );
        assert_eq!("serial0".parse::<Vga>().unwrap().main(), Some("serial0"));
        assert!("8".parse::<Memory>().is_err(), "below 16 MiB");
        assert!("vga9".parse::<Vga>().is_err());
        assert!("host,hidden=maybe".parse::<Cpu>().is_err());
        assert!(
            "host,flags=aes".parse::<Cpu>().is_err(),
            "a flag needs its sign"
        );
    }

    #[test]
    fn a_vms_own_cpu_as_validate_vm_cpu_conf_checks_it() {
        let check = |value: &str| value.parse::<Cpu>().unwrap().check_vm_specific();
        for ok in [
            "host",
            "x86-64-v2-AES",
            "cputype=EPYC-Rome,flags=+aes;-pcid",
            "custom-mine",
            "hidden=1",
        ] {
            assert!(check(ok).is_ok(), "{ok}");
        }
        for (bad, wants) in [
            ("Host", "Built-in cputype 'Host' is not defined"),
            ("x86-64-v5", "missing 'custom-' prefix"),
            ("host,flags=+aes;+avx2", "flag '+avx2'"),
            ("kvm64,reported-model=qemu64", "reported-model"),
        ] {
            let e = check(bad).unwrap_err();
            assert!(e.to_string().contains(wants), "{bad}: {e}");
        }
    }
}
