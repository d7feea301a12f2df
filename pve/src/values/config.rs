//! A VM config key's value compared as PVE stores it: the key picks the type (a drive, a
//! NIC, a boot order …) and both sides are read as that type, so two spellings of one value
//! are equal. Where PVE rewrites a value by a rule on every write, the rule is applied here.
//!
//! | key | what PVE stores | where (qemu-server unless named) |
//! |---|---|---|
//! | drives | `print_drive`, `size` filled in | `API2/Qemu.pm` `create_disks`, `QemuServer/Drive.pm` |
//! | `netN` | `print_net(parse_net())`, a random MAC added | `update_vm_api`, `QemuServer/Network.pm` |
//! | `boot` | `print_bootorder` of `order` on update, as sent at create | `update_vm_api`, `create_vm` |
//! | `tags` | `get_unique_tags`: lower case, sorted, `;` | pve-guest-common `GuestHelpers.pm` |
//! | `machine` | a Windows guest pinned to `pc-q35-X.Y+pveN` … | `QemuServer/Machine.pm` `check_and_pin_machine_string` |
//! | `cpuunits` | clamped to cgroup v2's 1 … 10000 (v1: at least 2) | pve-common `CGroup.pm` `clamp_cpu_shares` |
//! | `vmgenid` | `1` becomes a new UUID on each write | `update_vm_api`, `create_vm` |
//! | `description` | trailing whitespace dropped | `QemuServer.pm` `parse_vm_config` |
//! | plain strings | one pair of `"` dropped, the line trimmed | `QemuServer.pm` `check_type`, `parse_vm_config` |
//! | integers, numbers | `^\d+$` (leading zeros dropped), `^\d+(\.\d+)?$` at the write | `QemuServer.pm` `check_type` |
//! | `cipassword` | hashed by `encrypt_pw` on update (not for Windows), as sent at create; answered masked | `update_vm_api`, `vm_config` |
//! | `agent`, `ipconfigN`, `cpu`, `memory`, `vga`, numbers | as sent; compared by their format | `update_vm_api` |
//!
//! An empty value is not compared: pve-http-server's `decode_urlencoded` reads `key=` as
//! `''`, which PVE stores as a blank string key (`key: `, answered as " "), refuses for a
//! boolean or integer (`type check ('boolean') failed - got ''`), and for `description`
//! deletes. The module layer sends a `delete` instead, and refuses a blank value.

use super::agent::Agent;
use super::boot::{Boot, split_list};
use super::drive::{Drive, slot_schema};
use super::ipconfig::IpConfig;
use super::keyed::{Cpu, Memory, Vga};
use super::machine::Machine;
use super::net::Net;
use super::number::Number;
use super::property::{ValueError, parse_boolean};
use super::sshkeys::SshKeys;
use super::tags::Tags;

/// What a comparison needs to know about the guest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Guest {
    /// The guest's `ostype` is a Windows one (`windows_version`): PVE pins its machine and
    /// keeps its `cipassword` plain.
    pub windows: bool,
}

/// The `boolean` keys of a VM's config.
const BOOLEANS: &[&str] = &[
    "acpi",
    "allow-ksm",
    "autostart",
    "ciupgrade",
    "freeze",
    "keephugepages",
    "kvm",
    "localtime",
    "numa",
    "onboot",
    "protection",
    "reboot",
    "tablet",
    "tdf",
    "template",
];

/// The `integer` keys of a VM's config.
const INTEGERS: &[&str] = &[
    "balloon",
    "cores",
    "cpuunits",
    "migrate_speed",
    "shares",
    "smp",
    "sockets",
    "vcpus",
];

/// The `number` keys of a VM's config.
const NUMBERS: &[&str] = &["cpulimit", "migrate_downtime"];

/// A string as `check_type` (QemuServer.pm) writes it and `parse_vm_config` reads it back:
/// one pair of surrounding double quotes dropped (on the write and again on the read), the
/// line read trimmed.
fn stored_string(value: &str) -> &str {
    fn unquote(value: &str) -> &str {
        value
            .strip_prefix('"')
            .and_then(|value| value.strip_suffix('"'))
            .unwrap_or(value)
    }
    unquote(unquote(value).trim())
}

/// The value to send for `key`, checked as PVE's `check_type` checks the key's type before
/// any write: a boolean as `1`/`0` (PVE's API takes no other spelling, though
/// `parse_boolean`'s `yes`/`on`/`true` are what users write), a number as written, a
/// `vmgenid` as `1`, `0` or a UUID. Other keys are sent as they are.
pub fn to_send(key: &str, value: &str) -> Result<String, ValueError> {
    if BOOLEANS.contains(&key) {
        return match parse_boolean(value) {
            Some(b) => Ok(if b { "1" } else { "0" }.to_string()),
            None => Err(ValueError::new(
                "boolean",
                format!("{key} must be a boolean (1/0, yes/no, on/off, true/false), got '{value}'"),
            )),
        };
    }
    // write_vm_config's check_type: an integer is `^\d+$`, a number `^\d+(\.\d+)?$` (the
    // API's schema takes more, then the write dies on it).
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if INTEGERS.contains(&key) && !digits(value) {
        return Err(ValueError::new(
            "integer",
            format!("{key} must be a whole number (digits only), got '{value}'"),
        ));
    }
    if NUMBERS.contains(&key) {
        let (whole, frac) = value.split_once('.').unwrap_or((value, "0"));
        if !digits(whole) || !digits(frac) {
            return Err(ValueError::new(
                "number",
                format!("{key} must be a number such as 2 or 1.5, got '{value}'"),
            ));
        }
    }
    if key == "vmgenid" && !matches!(value, "0" | "1") && !is_uuid(value) {
        return Err(ValueError::new(
            "vmgenid",
            format!(
                "vmgenid must be 1 (PVE makes a generation id), 0 (none) or a UUID, got '{value}'"
            ),
        ));
    }
    Ok(value.to_string())
}

/// `cpuunits` as `clamp_cpu_shares` may store it: cgroup v2 caps it at 10000, cgroup v1
/// raises it to at least 2 (which one a node runs is not known here, so both count).
fn cpuunits_stored(want: i64, have: i64) -> bool {
    have == want || (want >= 10000 && have == 10000) || (want < 2 && have == 2)
}

/// A UUID as `generate_uuid` writes it (8-4-4-4-12 hex digits).
fn is_uuid(value: &str) -> bool {
    let groups: Vec<&str> = value.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// True when `have` (what PVE stores for `key`) is what `want` asks for, each read as the
/// key's type. An unreadable `have` differs (a write then replaces it); an unreadable `want`
/// is an error, as PVE would refuse it.
pub fn same(key: &str, want: &str, have: &str, guest: Guest) -> Result<bool, ValueError> {
    fn read<T: std::str::FromStr<Err = ValueError>>(
        want: &str,
        have: &str,
    ) -> Result<Option<(T, T)>, ValueError> {
        let want = want.parse::<T>()?;
        Ok(have.parse::<T>().ok().map(|have| (want, have)))
    }
    let digits_after = |prefix: &str| {
        key.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    Ok(match key {
        _ if slot_schema(key, true).is_some() => {
            let want = Drive::parse(key, want)?;
            Drive::parse_stored(key, have).is_ok_and(|have| have == want)
        }
        _ if digits_after("net") => {
            let want = want.parse::<Net>()?;
            Net::parse_stored(have).is_ok_and(|have| want.matches(&have))
        }
        _ if digits_after("ipconfig") => read::<IpConfig>(want, have)?.is_some_and(|(w, h)| w == h),
        "agent" => read::<Agent>(want, have)?.is_some_and(|(w, h)| w.satisfied_by(&h)),
        "boot" => read::<Boot>(want, have)?.is_some_and(|(w, h)| w == h),
        "machine" => {
            read::<Machine>(want, have)?.is_some_and(|(w, h)| w.satisfied_by(&h, guest.windows))
        }
        "cpu" => read::<Cpu>(want, have)?.is_some_and(|(w, h)| w == h),
        "memory" => read::<Memory>(want, have)?.is_some_and(|(w, h)| w == h),
        "vga" => read::<Vga>(want, have)?.is_some_and(|(w, h)| w == h),
        "tags" => read::<Tags>(want, have)?.is_some_and(|(w, h)| w == h),
        "sshkeys" => read::<SshKeys>(want, have)?.is_some_and(|(w, h)| w == h),
        "nameserver" => split_list(want) == split_list(have),
        "description" => want.trim_end() == have.trim_end(),
        "vmgenid" => match want {
            // `1` asks PVE for a generation id; any one it made is that (on aarch64,
            // create_vm leaves the `1`).
            "1" => have == "1" || is_uuid(have),
            _ => want.eq_ignore_ascii_case(have),
        },
        "cpuunits" => {
            let want = want.parse::<Number>()?;
            let have = have.parse::<Number>().ok();
            have.is_some_and(|h| {
                h == want || cpuunits_stored(want.value() as i64, h.value() as i64)
            })
        }
        _ if NUMBERS.contains(&key) || INTEGERS.contains(&key) => {
            read::<Number>(want, have)?.is_some_and(|(w, h)| w == h)
        }
        _ if BOOLEANS.contains(&key) => {
            let want = parse_boolean(want).ok_or_else(|| {
                ValueError::new(
                    "boolean",
                    format!("{key}: type check ('boolean') failed - got '{want}'"),
                )
            })?;
            parse_boolean(have) == Some(want)
        }
        _ => stored_string(want) == have,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINUX: Guest = Guest { windows: false };
    const WINDOWS: Guest = Guest { windows: true };

    fn same_linux(key: &str, want: &str, have: &str) -> bool {
        same(key, want, have, LINUX).unwrap()
    }

    #[test]
    fn each_key_by_its_type() {
        assert!(same_linux("tags", "Web, prod", "prod;web"));
        assert!(!same_linux("tags", "web", "prod;web"));
        assert!(same_linux("boot", "order=scsi0; net0;", "order=scsi0;net0"));
        assert!(same_linux("memory", "2048", "current=2048"));
        assert!(same_linux("cpu", "host", "cputype=host"));
        assert!(same_linux("vga", "type=serial0", "serial0"));
        assert!(same_linux("agent", "1", "enabled=1,fstrim_cloned_disks=1"));
        assert!(same_linux(
            "net0",
            "virtio,bridge=vmbr0,firewall=on",
            "virtio=BC:24:11:2A:3B:4C,bridge=vmbr0,firewall=1"
        ));
        assert!(same_linux(
            "ipconfig0",
            "ip6=auto,ip=dhcp",
            "ip=dhcp,ip6=auto"
        ));
        assert!(same_linux(
            "scsi0",
            "size=20480M,local-lvm:vm-100-disk-0,discard=on",
            "local-lvm:vm-100-disk-0,discard=on,size=20G"
        ));
        assert!(same_linux(
            "nameserver",
            "1.1.1.1 9.9.9.9",
            "1.1.1.1;9.9.9.9"
        ));
        assert!(!same_linux(
            "nameserver",
            "9.9.9.9 1.1.1.1",
            "1.1.1.1 9.9.9.9"
        ));
        assert!(same_linux("description", "notes\n\n", "notes"));
        assert!(same_linux("cpulimit", "2", "2.0"));
        assert!(same_linux("onboot", "1", "1"));
        assert!(!same_linux("onboot", "1", "0"));
        assert!(same_linux(
            "sshkeys",
            "ssh-ed25519%20AAAA%20a%0A",
            "ssh-ed25519%20AAAA%20a"
        ));
        assert!(same_linux("ostype", "l26", "l26"));
        assert!(
            same_linux("cores", "04", "4"),
            "an integer loses its leading zeros"
        );
        assert!(
            same_linux("args", "\"-no-hpet\"", "-no-hpet"),
            "check_type drops the quotes"
        );
        assert!(
            same_linux("hotplug", " disk ", "disk"),
            "parse_vm_config trims the line"
        );
        assert!(!same_linux("ostype", "l26", "win11"));
    }

    #[test]
    fn rewrites_compared_by_their_rule() {
        assert!(same_linux(
            "vmgenid",
            "1",
            "c5d6f9e2-8a3b-4c1d-9e0f-123456789abc"
        ));
        assert!(!same_linux("vmgenid", "1", "0"));
        assert!(same_linux("vmgenid", "0", "0"));
        assert!(
            same_linux("cpuunits", "20000", "10000"),
            "cgroup v2 caps it"
        );
        assert!(same_linux("cpuunits", "1", "2"), "cgroup v1 raises it");
        assert!(same_linux("cpuunits", "500", "500"));
        assert!(!same_linux("cpuunits", "500", "1000"));
        assert!(same("machine", "q35", "pc-q35-10.1+pve0", WINDOWS).unwrap());
        assert!(!same_linux("machine", "q35", "pc-q35-10.1+pve0"));
    }

    #[test]
    fn values_checked_before_a_write() {
        assert_eq!(to_send("acpi", "yes").unwrap(), "1");
        assert_eq!(to_send("kvm", "Off").unwrap(), "0");
        assert!(to_send("acpi", "maybe").is_err());
        assert_eq!(to_send("cpulimit", "2.0").unwrap(), "2.0");
        assert!(to_send("cpulimit", "two").is_err());
        assert!(
            to_send("cpulimit", "1e3").is_err(),
            "is_number takes it, the write does not"
        );
        assert!(to_send("cpuunits", "+5").is_err());
        assert_eq!(to_send("cpuunits", "0500").unwrap(), "0500");
        assert!(to_send("vmgenid", "1").is_ok());
        assert!(to_send("vmgenid", "c5d6f9e2-8a3b-4c1d-9e0f-123456789abc").is_ok());
        assert!(to_send("vmgenid", "new").is_err());
        assert_eq!(to_send("hotplug", "disk,network").unwrap(), "disk,network");
    }

    #[test]
    fn unreadable_sides() {
        assert!(same("boot", "order=sda", "order=scsi0", LINUX).is_err());
        assert!(same("onboot", "maybe", "1", LINUX).is_err());
        assert!(!same_linux("boot", "order=scsi0", "garbage=1"));
    }
}
