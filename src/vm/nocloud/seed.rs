//! The seed's four files, decided in plain data: each part the `nocloud` option gives, and
//! the others generated from the VM's config as qemu-server's `generate_nocloud`
//! (PVE/QemuServer/Cloudinit.pm) generates them: user-data from `name`, `searchdomain`,
//! `ciuser`, `cipassword`, `sshkeys` and `ciupgrade` (`cloudinit_userdata`), network-config
//! version 1 from `netN` and `ipconfigN`, `nameserver` and `searchdomain`
//! (`nocloud_network`), empty vendor-data, and meta-data whose instance-id is the SHA-1 of
//! user-data and network-config (`nocloud_gen_metadata`), so cloud-init runs again exactly
//! when one of them changes; meta-data also carries `local-hostname` (PVE's does not).

use std::collections::BTreeMap;

use crate::pve::encode::url_decode;
use crate::pve::values::Net;

/// The parts the `nocloud` option gives (each replaces the one PVE would generate).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parts {
    pub user_data: Option<String>,
    pub meta_data: Option<String>,
    pub network_config: Option<String>,
    pub vendor_data: Option<String>,
}

/// The files of a NoCloud seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Seed {
    pub user_data: String,
    pub meta_data: String,
    pub network_config: String,
    pub vendor_data: String,
}

impl Seed {
    /// A seed of these four files.
    pub fn new(
        user_data: String,
        meta_data: String,
        network_config: String,
        vendor_data: String,
    ) -> Seed {
        Seed {
            user_data,
            meta_data,
            network_config,
            vendor_data,
        }
    }

    /// The seed of VM `vmid` whose config (as it is once this round's update is made) is
    /// `config`: the parts given, the others generated as PVE generates them.
    pub fn for_vm(
        parts: &Parts,
        vmid: u32,
        config: &BTreeMap<String, String>,
    ) -> Result<Seed, String> {
        let user_data = match &parts.user_data {
            Some(text) => text.clone(),
            None => user_data(config, vmid),
        };
        let network_config = match &parts.network_config {
            Some(text) => text.clone(),
            None => network_config(config)?,
        };
        // PVE's meta-data holds the instance-id alone, and its generated user-data the
        // hostname; here meta-data also names the host (`local-hostname`), so a VM (a clone)
        // whose user-data is given still gets its own name.
        let meta_data = match &parts.meta_data {
            Some(text) => text.clone(),
            None => format!(
                "instance-id: {}\nlocal-hostname: {}\n",
                sha1_hex(format!("{user_data}{network_config}").as_bytes()),
                hostname_fqdn(config, vmid).0
            ),
        };
        let vendor_data = parts.vendor_data.clone().unwrap_or_default();
        Ok(Seed::new(user_data, meta_data, network_config, vendor_data))
    }

    /// The files by their names on the volume.
    pub fn files(&self) -> [(&'static str, &str); 4] {
        [
            ("user-data", self.user_data.as_str()),
            ("meta-data", self.meta_data.as_str()),
            ("network-config", self.network_config.as_str()),
            ("vendor-data", self.vendor_data.as_str()),
        ]
    }

    /// The seed's content hash: the first [`PART_HASH`] hex digits of each file's SHA-256,
    /// in the order of [`Seed::files`], so a name tells which parts a new seed changes.
    pub fn hash(&self) -> String {
        self.files()
            .iter()
            .map(|(_, content)| part_hash(content))
            .collect()
    }

    /// The ISO's file name: `sankofa-<vmid>-<hash>.iso`.
    pub fn name(&self, vmid: u32) -> String {
        format!("{}{vmid}-{}.iso", NAME_PREFIX, self.hash())
    }

    /// The sum of the files' sizes.
    pub fn size(&self) -> u64 {
        self.files()
            .iter()
            .map(|(_, content)| content.len() as u64)
            .sum()
    }
}

/// How many hex digits of a file's SHA-256 its part of a seed's name holds.
pub const PART_HASH: usize = 10;

/// One file's part of a seed's content hash.
pub fn part_hash(content: &str) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, content.as_bytes()).as_ref())[..PART_HASH]
        .to_string()
}

/// The part hashes a seed's file name holds (`sankofa-100-<hashes>.iso`), by file name.
pub fn part_hashes(file: &str) -> Option<Vec<(&'static str, String)>> {
    let hashes = file.strip_suffix(".iso")?.rsplit('-').next()?;
    if hashes.len() != 4 * PART_HASH || !hashes.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let names = ["user-data", "meta-data", "network-config", "vendor-data"];
    Some(
        names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                (
                    *name,
                    hashes[i * PART_HASH..(i + 1) * PART_HASH].to_string(),
                )
            })
            .collect(),
    )
}

/// How every seed's file name begins.
pub const NAME_PREFIX: &str = "sankofa-";

/// Whether an ISO volume (`local:iso/sankofa-100-….iso`) is a seed this module made.
pub fn is_seed_volume(volid: &str) -> bool {
    volid.split_once(":iso/").is_some_and(|(_, file)| {
        // `sankofa-<vmid>-<hashes>.iso`, as `file_name` makes it: a user's own ISO that
        // merely starts with the prefix is not one.
        let vmid = file
            .strip_prefix(NAME_PREFIX)
            .and_then(|rest| rest.split_once('-'))
            .map(|(vmid, _)| vmid);
        vmid.is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
            && part_hashes(file).is_some()
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// SHA-1 as hex, as Digest::SHA::sha1_hex.
fn sha1_hex(bytes: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, bytes).as_ref())
}

/// The hostname and FQDN (`get_hostname_fqdn`): `name`, or `VM<vmid>`; a dotted name is its
/// own FQDN, else `searchdomain` is appended when set.
fn hostname_fqdn(config: &BTreeMap<String, String>, vmid: u32) -> (String, String) {
    let name = config
        .get("name")
        .cloned()
        .unwrap_or_else(|| format!("VM{vmid}"));
    if let Some((host, _)) = name.split_once('.') {
        return (host.to_string(), name.clone());
    }
    match config.get("searchdomain").filter(|s| !s.is_empty()) {
        Some(search) => (name.clone(), format!("{name}.{search}")),
        None => (name.clone(), name),
    }
}

/// User-data as `cloudinit_userdata` writes it (unmasked: the seed carries the hash PVE
/// stores for `cipassword`).
fn user_data(config: &BTreeMap<String, String>, vmid: u32) -> String {
    let (hostname, fqdn) = hostname_fqdn(config, vmid);
    let mut out =
        format!("#cloud-config\nhostname: {hostname}\nmanage_etc_hosts: true\nfqdn: {fqdn}\n");
    let user = config.get("ciuser");
    if let Some(user) = user {
        out.push_str(&format!("user: {user}\n"));
        if user == "root" {
            out.push_str("disable_root: False\n");
        }
    }
    if let Some(password) = config.get("cipassword") {
        out.push_str(&format!("password: {password}\n"));
    }
    if let Some(keys) = config.get("sshkeys") {
        out.push_str("ssh_authorized_keys:\n");
        for key in url_decode(keys)
            .lines()
            .filter(|line| !line.trim().is_empty())
        {
            out.push_str(&format!("  - {key}\n"));
        }
    }
    out.push_str("chpasswd:\n  expire: False\n");
    if user.is_none_or(|user| user != "root") {
        out.push_str("users:\n  - default\n");
    }
    if config.get("ciupgrade").is_none_or(|upgrade| upgrade != "0") {
        out.push_str("package_upgrade: true\n");
    }
    out
}

/// An IPv4 netmask from a prefix length (`24` → `255.255.255.0`).
fn netmask(prefix: u32) -> Option<String> {
    (prefix <= 32).then(|| {
        let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
        std::net::Ipv4Addr::from(mask).to_string()
    })
}

/// `key=value,…` as a map (`parse_ipconfig` reads the same property string).
fn properties(value: &str) -> BTreeMap<&str, &str> {
    value
        .split(',')
        .filter_map(|part| part.split_once('='))
        .collect()
}

/// Network-config version 1 as `nocloud_network` writes it: one physical interface per
/// `netN` that has an `ipconfigN`, by its MAC, then the nameservers and search domains (PVE
/// falls back to the host's resolv.conf when `nameserver` or `searchdomain` is unset; the
/// module cannot read it, so then none is written).
fn network_config(config: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::from("version: 1\nconfig:\n");
    let mut ifaces: Vec<(&str, &String)> = config
        .iter()
        .filter_map(|(key, value)| {
            key.strip_prefix("net")
                .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
                .map(|id| (id, value))
        })
        .collect();
    // Perl's `sort keys`: as strings.
    ifaces.sort_by(|left, right| format!("net{}", left.0).cmp(&format!("net{}", right.0)));
    for (id, net) in ifaces {
        let Some(ipconfig) = config
            .get(&format!("ipconfig{id}"))
            .filter(|v| !v.is_empty())
        else {
            continue;
        };
        let net = Net::parse_stored(net).map_err(|e| format!("net{id}: {e}"))?;
        // PVE gives every NIC a MAC; only a create check mode predicts has none yet.
        out.push_str(&format!("    - type: physical\n      name: eth{id}\n"));
        if let Some(mac) = net.mac() {
            out.push_str(&format!(
                "      mac_address: '{}'\n",
                mac.to_ascii_lowercase()
            ));
        }
        out.push_str("      subnets:\n");
        let ip = properties(ipconfig);
        let indent = "      ";
        if let Some(address) = ip.get("ip") {
            if *address == "dhcp" {
                out.push_str(&format!("{indent}- type: dhcp4\n"));
            } else {
                let (addr, prefix) = address
                    .split_once('/')
                    .ok_or_else(|| format!("ipconfig{id}: not a CIDR: {address}"))?;
                let mask = prefix
                    .parse()
                    .ok()
                    .and_then(netmask)
                    .ok_or_else(|| format!("ipconfig{id}: not a CIDR: {address}"))?;
                out.push_str(&format!(
                    "{indent}- type: static\n{indent}  address: '{addr}'\n{indent}  netmask: '{mask}'\n"
                ));
                if let Some(gw) = ip.get("gw") {
                    out.push_str(&format!("{indent}  gateway: '{gw}'\n"));
                }
            }
        }
        if let Some(address) = ip.get("ip6") {
            match *address {
                "dhcp" => out.push_str(&format!("{indent}- type: dhcp6\n")),
                "auto" => out.push_str(&format!("{indent}- type: ipv6_slaac\n")),
                _ => {
                    out.push_str(&format!(
                        "{indent}- type: static6\n{indent}  address: '{address}'\n"
                    ));
                    if let Some(gw) = ip.get("gw6") {
                        out.push_str(&format!("{indent}  gateway: '{gw}'\n"));
                    }
                }
            }
        }
    }
    let split = |key: &str| -> Vec<String> {
        config
            .get(key)
            .map(|value| value.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default()
    };
    let (nameservers, searchdomains) = (split("nameserver"), split("searchdomain"));
    out.push_str("    - type: nameserver\n");
    if !nameservers.is_empty() {
        out.push_str("      address:\n");
        for server in nameservers {
            out.push_str(&format!("      - '{server}'\n"));
        }
    }
    if !searchdomains.is_empty() {
        out.push_str("      search:\n");
        for domain in searchdomains {
            out.push_str(&format!("      - '{domain}'\n"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn generated_as_pve_generates_them() {
        let conf = config(&[
            ("name", "web"),
            ("searchdomain", "example.org"),
            ("nameserver", "1.1.1.1 9.9.9.9"),
            ("ciuser", "ops"),
            ("net0", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0"),
            ("ipconfig0", "ip=192.0.2.10/24,gw=192.0.2.1"),
            ("net1", "virtio=BC:24:11:AA:BB:CD,bridge=vmbr1"),
        ]);
        let seed = Seed::for_vm(&Parts::default(), 100, &conf).unwrap();
        assert_eq!(
            seed.user_data,
            "#cloud-config\nhostname: web\nmanage_etc_hosts: true\nfqdn: web.example.org\n\
             user: ops\nchpasswd:\n  expire: False\nusers:\n  - default\npackage_upgrade: true\n"
        );
        assert_eq!(
            seed.network_config,
            "version: 1\nconfig:\n    - type: physical\n      name: eth0\n      \
             mac_address: 'bc:24:11:aa:bb:cc'\n      subnets:\n      - type: static\n        \
             address: '192.0.2.10'\n        netmask: '255.255.255.0'\n        gateway: \
             '192.0.2.1'\n    - type: nameserver\n      address:\n      - '1.1.1.1'\n      \
             - '9.9.9.9'\n      search:\n      - 'example.org'\n"
        );
        // nocloud_gen_metadata: sha1_hex(user-data . network-config).
        let id = sha1_hex(format!("{}{}", seed.user_data, seed.network_config).as_bytes());
        assert_eq!(
            seed.meta_data,
            format!("instance-id: {id}\nlocal-hostname: web\n")
        );
        assert_eq!(seed.vendor_data, "");
    }

    #[test]
    fn given_parts_replace_generated_ones_and_name_the_seed() {
        let conf = config(&[("name", "db")]);
        let parts = Parts {
            user_data: Some("#cloud-config\npackages: [nginx]\n".into()),
            ..Parts::default()
        };
        let seed = Seed::for_vm(&parts, 101, &conf).unwrap();
        assert_eq!(seed.user_data, "#cloud-config\npackages: [nginx]\n");
        assert_eq!(
            seed.network_config,
            "version: 1\nconfig:\n    - type: nameserver\n"
        );
        let name = seed.name(101);
        assert!(name.starts_with("sankofa-101-") && name.ends_with(".iso"));
        assert_eq!(name.len(), "sankofa-101-".len() + 4 * PART_HASH + 4);
        let hashes = part_hashes(&name).unwrap();
        assert_eq!(hashes[0], ("user-data", part_hash(&seed.user_data)));
        assert_eq!(hashes[3], ("vendor-data", part_hash("")));
        assert!(is_seed_volume(&format!("local:iso/{name}")));
        assert!(!is_seed_volume("local:iso/debian.iso"));
        let other = Seed::for_vm(&Parts::default(), 101, &conf).unwrap();
        assert_ne!(other.hash(), seed.hash());
    }

    #[test]
    fn netmasks() {
        assert_eq!(netmask(24).as_deref(), Some("255.255.255.0"));
        assert_eq!(netmask(0).as_deref(), Some("0.0.0.0"));
        assert_eq!(netmask(32).as_deref(), Some("255.255.255.255"));
        assert_eq!(netmask(33), None);
    }
}
