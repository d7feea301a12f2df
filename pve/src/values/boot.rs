//! The boot order (`boot`), with qemu-server's `src/PVE/QemuServer.pm` format (`$boot_fmt`):
//! the deprecated `legacy=[acdn]{1,4}` is the default key (and `cdn` is assumed without
//! `boot`), and `order=` lists devices (`pve-qm-bootdev-list`, split by `split_list`: `;`,
//! `,` or spaces, each checked by `verify_bootdev`).
//!
//! At create PVE stores `boot` as sent; `update_vm_api` prints an `order` again through
//! `print_bootorder` (`order=a;b`, the legacy value dropped), so `order=scsi0; net0` is stored
//! as `order=scsi0;net0`. Two values are the same boot order when the devices `order` lists
//! are (PVE boots from `order` when it is set, from `legacy` otherwise: `device_bootorder`).

use std::fmt;
use std::str::FromStr;

use super::drive::is_drive_key;
use super::property::{Key, Kind, PropertyString, Schema, ValueError};

/// `split_list` (pve-common `src/PVE/ParseUtils.pm`): `,` and `;` are spaces, then split on
/// whitespace; leading whitespace yields nothing.
pub fn split_list(list: &str) -> Vec<String> {
    if list.contains('\0') {
        return list.split('\0').map(str::to_string).collect();
    }
    list.replace([',', ';'], " ")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// `verify_bootdev`: a drive (not the EFI disk or TPM state), or `netN`, `usbN`, `hostpciN`
/// within PVE's counts (32 NICs, 14 USB devices, 16 PCI devices).
pub fn is_boot_device(dev: &str) -> bool {
    if dev.starts_with("efidisk") || dev.starts_with("tpmstate") {
        return false;
    }
    if is_drive_key(dev) {
        return true;
    }
    [("net", 32u32), ("usb", 14), ("hostpci", 16)]
        .iter()
        .any(|(base, max)| {
            dev.strip_prefix(base).is_some_and(|n| {
                !n.is_empty()
                    && n.bytes().all(|b| b.is_ascii_digit())
                    && n.parse::<u32>()
                        .is_ok_and(|i| i < *max && i.to_string() == n)
            })
        })
}

fn legacy(value: &str) -> bool {
    (1..=4).contains(&value.len()) && value.bytes().all(|b| b"acdn".contains(&b))
}

fn device_list(value: &str) -> bool {
    split_list(value).iter().all(|d| is_boot_device(d))
}

static KEYS: &[Key] = &[
    Key::new("legacy", Kind::Checked(legacy, "[acdn]{1,4}"))
        .default_key()
        .default("cdn"),
    Key::new(
        "order",
        Kind::Checked(device_list, "a list of boot devices (device[;device...])"),
    ),
];

static BOOT: Schema = Schema {
    name: "boot",
    keys: &[KEYS],
    skip: &[],
};

/// A boot order.
#[derive(Clone, Debug)]
pub struct Boot {
    legacy: Option<String>,
    order: Option<Vec<String>>,
}

impl Boot {
    /// Boot from these devices, in order.
    pub fn order<I: IntoIterator<Item = S>, S: Into<String>>(devices: I) -> Boot {
        Boot {
            legacy: None,
            order: Some(devices.into_iter().map(Into::into).collect()),
        }
    }

    /// The devices of `order=`, if it is set.
    pub fn devices(&self) -> Option<&[String]> {
        self.order.as_deref()
    }
}

impl FromStr for Boot {
    type Err = ValueError;

    fn from_str(value: &str) -> Result<Boot, ValueError> {
        let props = PropertyString::parse(&BOOT, value)?;
        let order = props.get("order").map(split_list);
        if order.as_ref().is_some_and(Vec::is_empty) {
            return Err(ValueError::new(
                "boot",
                "order lists no device (PVE would store an empty boot)",
            ));
        }
        Ok(Boot {
            legacy: props.get("legacy").map(str::to_string),
            order,
        })
    }
}

impl PartialEq for Boot {
    /// The same devices in `order`, or (neither having one) the same legacy letters.
    fn eq(&self, other: &Boot) -> bool {
        match (&self.order, &other.order) {
            (Some(a), Some(b)) => a == b,
            (None, None) => {
                self.legacy.as_deref().unwrap_or("cdn") == other.legacy.as_deref().unwrap_or("cdn")
            }
            _ => false,
        }
    }
}

impl fmt::Display for Boot {
    /// `print_bootorder` when `order` is set, else the legacy letters.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.order, &self.legacy) {
            (Some(devices), _) => write!(f, "order={}", devices.join(";")),
            (None, Some(legacy)) => f.write_str(legacy),
            (None, None) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boot(text: &str) -> Boot {
        text.parse().unwrap()
    }

    #[test]
    fn reads_every_separator_and_prints_print_bootorder() {
        for spelling in [
            "order=scsi0;net0",
            "order=scsi0; net0",
            "order=scsi0;net0;",
            "order=scsi0 net0",
            "order= scsi0;;net0 ",
            "cdn,order=scsi0;net0",
        ] {
            assert_eq!(boot(spelling).to_string(), "order=scsi0;net0", "{spelling}");
            assert_eq!(boot(spelling), Boot::order(["scsi0", "net0"]), "{spelling}");
        }
        assert_ne!(boot("order=net0;scsi0"), boot("order=scsi0;net0"));
        assert_eq!(boot("dc").to_string(), "dc");
        assert_eq!(boot("legacy=cdn"), boot("cdn"));
        assert_ne!(boot("cdn"), boot("order=scsi0"));
    }

    #[test]
    fn refuses_what_pve_refuses() {
        for (value, wants) in [
            ("order=scsi0;efidisk0", "boot devices"),
            ("order=scsi0;net32", "boot devices"),
            ("order=sda", "boot devices"),
            ("cdnx", "[acdn]{1,4}"),
            ("order=;", "no device"),
            ("order=scsi0,priority=1", "invalid key"),
        ] {
            let e = value.parse::<Boot>().unwrap_err();
            assert!(e.to_string().contains(wants), "{value}: {e}");
        }
        assert!(is_boot_device("hostpci15") && is_boot_device("usb13") && is_boot_device("ide2"));
        assert!(!is_boot_device("hostpci16") && !is_boot_device("net01"));
    }

    #[test]
    fn split_list_as_pve() {
        assert_eq!(split_list("a;b,c d"), vec!["a", "b", "c", "d"]);
        assert_eq!(split_list(" ;a;; "), vec!["a"]);
        assert!(split_list("").is_empty());
    }
}
