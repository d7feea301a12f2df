//! Values whose property string is mostly its default key: `cpu` (`$cpu_fmt`, qemu-server
//! `src/PVE/QemuServer/CPUConfig.pm`, default key `cputype`), `memory` (`$memory_fmt`,
//! `Memory.pm`, default key `current`) and `vga` (`$vga_fmt`, `QemuServer.pm`, default key
//! `type`).
//!
//! PVE stores each as it was sent; `host` and `cputype=host`, `2048` and `current=2048` are
//! one value.

use std::fmt;
use std::str::FromStr;

use super::property::{Key, Kind, PropertyString, Schema, ValueError};

/// A CPU flag list (`+aes;-pcid`): `;`-separated flags, each with an optional sign.
fn cpu_flags(value: &str) -> bool {
    value.split(';').all(|flag| {
        let name = flag.strip_prefix(['+', '-']).unwrap_or(flag);
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
    }
}
