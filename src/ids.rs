//! PVE's identifier formats, checked in one place before any request: what pve-common's
//! JSONSchema.pm accepts for a node, a storage, a DNS name, a MAC address, an IP in CIDR
//! notation. Each check names the option it was given for.

use crate::ansible::protocol::Invocation;
use crate::ansible::spec::{Kind, Opt};
use crate::ansible::text::quote;
use crate::pve::answers::Vmid;

/// The options that name a VM, as every module takes them: `vmid`, `name` (its config's
/// `name`, a DNS name as PVE's schema has it) and `node`. What a given one means (one VM to
/// find, or a filter of many) is the module's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmSelector {
    pub vmid: Option<Vmid>,
    pub name: Option<String>,
    pub node: Option<String>,
}

impl VmSelector {
    /// The selector from validated options (the spec bounds `vmid`), each checked in PVE's
    /// format and naming its option, before any request.
    pub fn from_invocation(inv: &Invocation) -> Result<VmSelector, String> {
        Ok(VmSelector {
            vmid: inv
                .int("vmid")
                .map(|vmid| {
                    Vmid::try_from(vmid).map_err(|_| format!("vmid {vmid} is not a PVE vmid"))
                })
                .transpose()?,
            name: inv
                .str("name")
                .map(|name| dns_name("name", name))
                .transpose()?,
            node: inv
                .str("node")
                .map(|node| node_name("node", node))
                .transpose()?,
        })
    }

    /// Whether a VM (its id, its name if it has one, its node) is one every given option
    /// names.
    pub fn matches(&self, vmid: Vmid, name: Option<&str>, node: &str) -> bool {
        self.vmid.is_none_or(|id| id == vmid)
            && self
                .name
                .as_deref()
                .is_none_or(|wanted| name == Some(wanted))
            && self.node.as_deref().is_none_or(|wanted| wanted == node)
    }
}

/// An option that names a VM by its id, as PVE's `pve-vmid` format has it: 100 to
/// 999,999,999.
pub fn vmid_option(name: &'static str) -> Opt {
    Opt::new(
        name,
        Kind::Int {
            min: Some(100),
            max: Some(999_999_999),
        },
    )
}

/// A node name as PVE's `pve-node` format has it (pve-common JSONSchema.pm,
/// pve_verify_node_name): letters, digits and inner `-`.
pub fn node_name(option: &str, value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|byte| byte.is_ascii_alphanumeric() || *byte == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-';
    if ok {
        Ok(value.to_string())
    } else {
        Err(format!(
            "{option} must be a PVE node name (letters, digits and '-'), got {}",
            quote(value)
        ))
    }
}

/// A storage ID as PVE's `pve-storage-id` format has it (pve-common JSONSchema.pm,
/// parse_storage_id: `[a-z][a-z0-9_-]+`, case-insensitive).
pub fn storage_id(option: &str, value: &str) -> Result<String, String> {
    if is_config_id(value) {
        Ok(value.to_string())
    } else {
        Err(format!(
            "{option} must be a PVE storage ID such as local-lvm (a letter, then letters, digits, '-' or '_'), got {}",
            quote(value)
        ))
    }
}

/// The shape both a storage ID and a config ID (an HA group's name) are checked for: 2 to
/// 64 characters, a letter first, then letters, digits, `-` or `_`.
pub fn is_config_id(value: &str) -> bool {
    let bytes = value.as_bytes();
    (2..=64).contains(&bytes.len())
        && bytes[0].is_ascii_alphabetic()
        && bytes
            .iter()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_".contains(byte))
}

/// A DNS name (`dns-name`): dot-separated labels of letters, digits and inner `-`.
pub fn dns_name(option: &str, value: &str) -> Result<String, String> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if ok {
        Ok(value.to_string())
    } else {
        Err(format!(
            "{option} must be a valid DNS name (letters, digits, '-' and '.'), got {value}",
            value = quote(value)
        ))
    }
}

/// A MAC address (`mac-addr`), returned in upper case as PVE stores it.
pub fn mac(option: &str, value: &str) -> Result<String, String> {
    let parts: Vec<&str> = value.split(':').collect();
    if parts.len() == 6
        && parts
            .iter()
            .all(|part| part.len() == 2 && part.bytes().all(|byte| byte.is_ascii_hexdigit()))
    {
        Ok(value.to_ascii_uppercase())
    } else {
        Err(format!(
            "{option} must be a MAC address such as BC:24:11:00:00:01, got {value}",
            value = quote(value)
        ))
    }
}

/// An address with a prefix length (`cidrv4`/`cidrv6`).
pub fn cidr(value: &str, six: bool) -> bool {
    let Some((address, prefix)) = value.split_once('/') else {
        return false;
    };
    let Ok(prefix) = prefix.parse::<u8>() else {
        return false;
    };
    if six {
        address.parse::<std::net::Ipv6Addr>().is_ok() && prefix <= 128
    } else {
        address.parse::<std::net::Ipv4Addr>().is_ok() && prefix <= 32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_given_option_of_a_selector_must_match() {
        let all = VmSelector::default();
        assert!(all.matches(100, None, "pve1"));
        let by_name = VmSelector {
            name: Some("web1".into()),
            ..Default::default()
        };
        assert!(by_name.matches(100, Some("web1"), "pve1"));
        assert!(!by_name.matches(100, None, "pve1") && !by_name.matches(100, Some("web2"), "pve1"));
        let on_node = VmSelector {
            vmid: Some(101),
            node: Some("pve2".into()),
            ..Default::default()
        };
        assert!(on_node.matches(101, Some("db"), "pve2"));
        assert!(!on_node.matches(101, Some("db"), "pve1") && !on_node.matches(100, None, "pve2"));
    }

    fn invocation(params: serde_json::Value) -> Invocation {
        Invocation {
            ctx: Default::default(),
            params: params.as_object().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn a_selector_is_checked_in_pves_formats() {
        let selector = VmSelector::from_invocation(&invocation(
            serde_json::json!({"vmid": 100, "name": "web1", "node": "pve1"}),
        ))
        .unwrap();
        assert_eq!(
            selector,
            VmSelector {
                vmid: Some(100),
                name: Some("web1".into()),
                node: Some("pve1".into())
            }
        );
        assert_eq!(
            VmSelector::from_invocation(&invocation(serde_json::json!({}))).unwrap(),
            VmSelector::default()
        );
        let bad_node =
            VmSelector::from_invocation(&invocation(serde_json::json!({"node": "-pve"})));
        assert!(
            bad_node
                .unwrap_err()
                .starts_with("node must be a PVE node name")
        );
        let bad_name =
            VmSelector::from_invocation(&invocation(serde_json::json!({"name": "web_1"})));
        assert!(
            bad_name
                .unwrap_err()
                .starts_with("name must be a valid DNS name")
        );
    }
}
