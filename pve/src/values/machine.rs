//! The machine type (`machine`), with qemu-server's `src/PVE/QemuServer/Machine.pm` format
//! (`$machine_fmt`: `type` is the default key).
//!
//! At create, and when `ostype` changes without `machine`, PVE pins a Windows guest's
//! machine to a version (`check_and_pin_machine_string` → `windows_get_pinned_machine_version`:
//! `q35` becomes `pc-q35-X.Y+pveN`, `pc` or none `pc-i440fx-X.Y+pveN`, `virt` `virt-X.Y+pveN`)
//! and prints it again (`print_machine`). A Windows guest asked for `q35` that PVE pinned
//! is what was asked: the pin is kept.

use std::fmt;
use std::str::FromStr;

use super::property::{Key, Kind, PropertyString, Schema, ValueError};

/// `X.Y[.Z…]`.
fn version(value: &str) -> bool {
    let mut parts = value.split('.');
    parts.clone().count() >= 2
        && parts.all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `VERSION[+pveN]`, the rest of a versioned machine type.
fn versioned(rest: &str) -> bool {
    let (ver, pve) = match rest.split_once("+pve") {
        Some((v, n)) => (v, Some(n)),
        None => (rest, None),
    };
    version(ver) && pve.is_none_or(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The base type a versioned type pins (`pc-q35-9.2+pve1` → `q35`).
fn base_of(machine: &str) -> Option<&'static str> {
    let plain = machine.strip_suffix(".pxe").unwrap_or(machine);
    if let Some(rest) = plain.strip_prefix("pc-q35-") {
        return versioned(rest).then_some("q35");
    }
    if let Some(rest) = plain
        .strip_prefix("pc-i440fx-")
        .or_else(|| plain.strip_prefix("pc-"))
    {
        return versioned(rest).then_some("pc");
    }
    if let Some(rest) = plain.strip_prefix("virt-") {
        return versioned(rest).then_some("virt");
    }
    None
}

/// The `type` pattern: `pc`, `q35`, `virt`, or a versioned one of them.
fn machine_type(value: &str) -> bool {
    value.len() <= 40 && (matches!(value, "pc" | "q35" | "virt") || base_of(value).is_some())
}

static KEYS: &[Key] = &[
    Key::new("type", Kind::Checked(machine_type, "a QEMU machine type")).default_key(),
    Key::new("viommu", Kind::Enum(&["intel", "virtio"])),
    Key::new("aw-bits", Kind::Number(Some(32.0))),
    Key::new("enable-s3", Kind::Bool),
    Key::new("enable-s4", Kind::Bool),
];

static MACHINE: Schema = Schema {
    name: "machine",
    keys: &[KEYS],
    skip: &[],
};

/// `windows_version` (qemu-server `src/PVE/QemuServer/Helpers.pm`): true for the Windows
/// `ostype`s (`wxp`, `w2k`, `w2k3`, `w2k8`, `wvista`, `winN`).
pub fn is_windows(ostype: &str) -> bool {
    matches!(ostype, "wxp" | "w2k" | "w2k3" | "w2k8" | "wvista")
        || ostype
            .strip_prefix("win")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A machine type and its options.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    props: PropertyString,
}

impl Machine {
    /// The machine type (`q35`, `pc-q35-9.2+pve1`), if set.
    pub fn machine_type(&self) -> Option<&str> {
        self.props.get("type")
    }

    /// True when the type is pinned to a version.
    pub fn is_pinned(&self) -> bool {
        self.machine_type().is_some_and(|t| base_of(t).is_some())
    }

    /// True when `have` (what PVE stores) is this machine: equal, or, for a Windows guest,
    /// `have` is the version PVE pinned this unversioned type to (`q35` →
    /// `pc-q35-X.Y+pveN`; no type → `pc-i440fx-…`, x86's default) with the same options.
    pub fn satisfied_by(&self, have: &Machine, windows: bool) -> bool {
        if self == have {
            return true;
        }
        if !windows {
            return false;
        }
        let want_base = match self.machine_type() {
            None => "pc",
            Some(t @ ("pc" | "q35" | "virt")) => t,
            Some(_) => return false,
        };
        let Some(have_type) = have.machine_type() else {
            return false;
        };
        if base_of(have_type) != Some(want_base) {
            return false;
        }
        let mut pinned = self.clone();
        pinned
            .props
            .set("type", have_type)
            .is_ok_and(|()| pinned == *have)
    }
}

impl Machine {
    /// Checks the options as `assert_valid_machine_property` (Machine.pm) does on an update
    /// (and the create's task on its first config): Intel's vIOMMU needs a `q35` type and an
    /// address width of 39 or 48 bits, and `aw-bits` needs a vIOMMU.
    pub fn check_properties(&self) -> Result<(), ValueError> {
        let aw_bits = self.props.get("aw-bits");
        if self.props.get("viommu") == Some("intel") {
            if !self.machine_type().is_some_and(|t| t.contains("q35")) {
                return Err(ValueError::new(
                    "machine",
                    "to use Intel vIOMMU please set the machine type to q35",
                ));
            }
            if aw_bits.is_some_and(|bits| bits.parse::<f64>().is_ok_and(|b| b != 39.0 && b != 48.0))
            {
                return Err(ValueError::new(
                    "machine",
                    "Intel vIOMMU supports only 39 or 48 bits as address width",
                ));
            }
        }
        if aw_bits.is_some() && self.props.get("viommu").is_none() {
            return Err(ValueError::new(
                "machine",
                "cannot set aw-bits if no vIOMMU is configured",
            ));
        }
        Ok(())
    }
}

impl FromStr for Machine {
    type Err = ValueError;

    /// `parse_machine`.
    fn from_str(value: &str) -> Result<Machine, ValueError> {
        Ok(Machine {
            props: PropertyString::parse(&MACHINE, value)?,
        })
    }
}

impl fmt::Display for Machine {
    /// `print_machine`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.props.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(text: &str) -> Machine {
        text.parse().unwrap()
    }

    #[test]
    fn reads_and_prints_as_print_machine() {
        assert_eq!(
            machine("type=q35,viommu=intel").to_string(),
            "q35,viommu=intel"
        );
        assert_eq!(machine("q35,enable-s3=on").to_string(), "q35,enable-s3=1");
        assert!(machine("pc-q35-9.2+pve1").is_pinned());
        assert!(machine("pc-i440fx-10.0").is_pinned());
        assert!(!machine("q35").is_pinned());
        assert!("q36".parse::<Machine>().is_err());
        assert!("pc-q35-9".parse::<Machine>().is_err());
    }

    #[test]
    fn options_as_assert_valid_machine_property_checks_them() {
        for ok in [
            "q35,viommu=intel",
            "pc-q35-9.2+pve1,viommu=intel,aw-bits=48",
            "q35,viommu=virtio,aw-bits=40",
            "pc",
        ] {
            assert!(machine(ok).check_properties().is_ok(), "{ok}");
        }
        for (bad, wants) in [
            ("pc,viommu=intel", "set the machine type to q35"),
            ("viommu=intel", "set the machine type to q35"),
            ("q35,viommu=intel,aw-bits=40", "only 39 or 48 bits"),
            ("q35,aw-bits=48", "no vIOMMU"),
        ] {
            let e = machine(bad).check_properties().unwrap_err();
            assert!(e.to_string().contains(wants), "{bad}: {e}");
        }
    }

    #[test]
    fn a_windows_pin_is_what_was_asked() {
        let pinned = machine("pc-q35-10.1+pve0");
        assert!(machine("q35").satisfied_by(&pinned, true));
        assert!(
            !machine("q35").satisfied_by(&pinned, false),
            "only Windows is pinned"
        );
        assert!(!machine("pc").satisfied_by(&pinned, true));
        assert!(machine("type=pc").satisfied_by(&machine("pc-i440fx-9.2+pve1"), true));
        assert!(
            machine("viommu=virtio")
                .satisfied_by(&machine("pc-i440fx-9.2+pve1,viommu=virtio"), true)
        );
        assert!(!machine("q35,viommu=intel").satisfied_by(&pinned, true));
        assert!(
            !machine("pc-q35-9.2").satisfied_by(&pinned, true),
            "a version asked is kept"
        );
        assert!(machine("q35").satisfied_by(&machine("type=q35"), false));
        assert!(
            is_windows("win11") && is_windows("w2k8") && !is_windows("l26") && !is_windows("win")
        );
    }
}
