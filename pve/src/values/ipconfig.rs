//! Cloud-init's `ipconfig0` …, with the format of qemu-server's
//! `src/PVE/QemuServer/Network.pm` (`$ipconfig_fmt`, `parse_ipconfig`): `ip` (`dhcp`,
//! `manual` or IPv4/CIDR), `gw` (needs `ip`, not with `dhcp`), `ip6` (`dhcp`, `auto`,
//! `manual` or IPv6/CIDR), `gw6` (needs a static `ip6`).
//!
//! `update_vm_api` stores the value as it was sent (its last branch); the keys compare as a
//! set, so the order a user writes them in does not matter.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use super::property::{Key, Kind, PropertyString, Schema, ValueError};

/// `ADDRESS/PREFIX` with the address parsed by `parse` and a prefix up to `max`.
fn cidr<A: FromStr>(value: &str, max: u8) -> bool {
    value.split_once('/').is_some_and(|(addr, prefix)| {
        addr.parse::<A>().is_ok()
            && prefix.bytes().all(|b| b.is_ascii_digit())
            && prefix.parse::<u8>().is_ok_and(|p| p <= max)
    })
}

/// `pve-ipv4-config`.
fn ipv4_config(value: &str) -> bool {
    matches!(value, "dhcp" | "manual") || cidr::<Ipv4Addr>(value, 32)
}

/// `pve-ipv6-config`.
fn ipv6_config(value: &str) -> bool {
    matches!(value, "auto" | "dhcp" | "manual") || cidr::<Ipv6Addr>(value, 128)
}

fn ipv4(value: &str) -> bool {
    value.parse::<Ipv4Addr>().is_ok()
}

fn ipv6(value: &str) -> bool {
    value.parse::<Ipv6Addr>().is_ok()
}

static KEYS: &[Key] = &[
    Key::new(
        "ip",
        Kind::Checked(ipv4_config, "dhcp, manual or an IPv4 address/CIDR"),
    )
    .default("dhcp"),
    Key::new("gw", Kind::Checked(ipv4, "an IPv4 address")),
    Key::new(
        "ip6",
        Kind::Checked(ipv6_config, "auto, dhcp, manual or an IPv6 address/CIDR"),
    )
    .default("dhcp"),
    Key::new("gw6", Kind::Checked(ipv6, "an IPv6 address")),
];

static IPCONFIG: Schema = Schema {
    name: "ipconfig",
    keys: &[KEYS],
    skip: &[],
};

/// One interface's cloud-init addresses.
#[derive(Clone, Debug, PartialEq)]
pub struct IpConfig {
    props: PropertyString,
}

impl IpConfig {
    /// No addresses yet.
    pub fn new() -> IpConfig {
        IpConfig {
            props: PropertyString::new(&IPCONFIG),
        }
    }

    /// Sets `ip`, `gw`, `ip6` or `gw6`, checked as PVE checks it (the pairing of gateways and
    /// addresses is checked by [`IpConfig::check`]).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ValueError> {
        self.props.set(key, value)
    }

    /// A key's value.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.props.get(key)
    }

    /// `parse_ipconfig`'s checks: a gateway needs an address of its family, and no gateway
    /// goes with `dhcp` (IPv4) or with a non-static IPv6.
    pub fn check(&self) -> Result<(), ValueError> {
        let err = |m: &str| Err(ValueError::new("ipconfig", m.to_string()));
        let ip = self.get("ip");
        let ip6 = self.get("ip6");
        if self.get("gw").is_some() && ip.is_none() {
            return err("gateway specified without specifying an IP address");
        }
        if self.get("gw6").is_some() && ip6.is_none() {
            return err("IPv6 gateway specified without specifying an IPv6 address");
        }
        if self.get("gw").is_some() && ip == Some("dhcp") {
            return err("gateway specified together with DHCP");
        }
        if self.get("gw6").is_some() && !ip6.is_some_and(|v| v.contains('/')) {
            return err("IPv6 gateway specified together with a dhcp, auto or manual address");
        }
        Ok(())
    }
}

impl Default for IpConfig {
    fn default() -> IpConfig {
        IpConfig::new()
    }
}

impl FromStr for IpConfig {
    type Err = ValueError;

    /// `parse_ipconfig`.
    fn from_str(value: &str) -> Result<IpConfig, ValueError> {
        let config = IpConfig {
            props: PropertyString::parse(&IPCONFIG, value)?,
        };
        config.check()?;
        Ok(config)
    }
}

impl fmt::Display for IpConfig {
    /// `print_property_string` (keys in byte order: `gw`, `gw6`, `ip`, `ip6`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.props.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_prints_and_compares() {
        let a: IpConfig = "ip=192.0.2.10/24,gw=192.0.2.1,ip6=auto".parse().unwrap();
        assert_eq!(a.to_string(), "gw=192.0.2.1,ip=192.0.2.10/24,ip6=auto");
        let b: IpConfig = "ip6=auto,gw=192.0.2.1,ip=192.0.2.10/24".parse().unwrap();
        assert_eq!(a, b);
        let c: IpConfig = "ip=dhcp".parse().unwrap();
        assert_ne!(a, c);
        let d: IpConfig = "ip6=2001:db8::5/64,gw6=2001:db8::1".parse().unwrap();
        assert_eq!(d.to_string(), "gw6=2001:db8::1,ip6=2001:db8::5/64");
    }

    #[test]
    fn refuses_what_pve_refuses() {
        for (value, wants) in [
            ("gw=192.0.2.1", "without specifying an IP"),
            ("ip=dhcp,gw=192.0.2.1", "together with DHCP"),
            ("ip6=auto,gw6=2001:db8::1", "IPv6 gateway"),
            ("ip=192.0.2.10", "IPv4 address/CIDR"),
            ("ip=192.0.2.10/33", "IPv4 address/CIDR"),
            ("ip=dhcp,dns=1.1.1.1", "invalid key"),
        ] {
            let e = value.parse::<IpConfig>().unwrap_err();
            assert!(e.to_string().contains(wants), "{value}: {e}");
        }
    }
}
