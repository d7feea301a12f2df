//! PVE's identifier formats, checked in one place before any request: what pve-common's
//! JSONSchema.pm accepts for a node, a storage, a DNS name, a MAC address, an IP in CIDR
//! notation. Each check names the option it was given for.

use crate::ansible::text::quote;

/// A node name as PVE's `pve-node` format has it (pve-common JSONSchema.pm,
/// pve_verify_node_name): letters, digits and inner `-`.
pub fn node_name(option: &str, v: &str) -> Result<String, String> {
    let b = v.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-';
    if ok {
        Ok(v.to_string())
    } else {
        Err(format!(
            "{option} must be a PVE node name (letters, digits and '-'), got {}",
            quote(v)
        ))
    }
}

/// A storage ID as PVE's `pve-storage-id` format has it (pve-common JSONSchema.pm,
/// parse_storage_id: `[a-z][a-z0-9_-]+`, case-insensitive).
pub fn storage_id(option: &str, v: &str) -> Result<String, String> {
    let b = v.as_bytes();
    let ok = b.len() >= 2
        && b.len() <= 64
        && b[0].is_ascii_alphabetic()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_".contains(c));
    if ok {
        Ok(v.to_string())
    } else {
        Err(format!(
            "{option} must be a PVE storage ID such as local-lvm (a letter, then letters, digits, '-' or '_'), got {}",
            quote(v)
        ))
    }
}

/// A DNS name (`dns-name`): dot-separated labels of letters, digits and inner `-`.
pub fn dns_name(option: &str, v: &str) -> Result<String, String> {
    let ok = !v.is_empty()
        && v.len() <= 253
        && v.split('.').all(|l| {
            !l.is_empty()
                && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    if ok {
        Ok(v.to_string())
    } else {
        Err(format!(
            "{option} must be a valid DNS name (letters, digits, '-' and '.'), got {v}",
            v = quote(v)
        ))
    }
}

/// A MAC address (`mac-addr`), returned in upper case as PVE stores it.
pub fn mac(option: &str, v: &str) -> Result<String, String> {
    let parts: Vec<&str> = v.split(':').collect();
    if parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|c| c.is_ascii_hexdigit()))
    {
        Ok(v.to_ascii_uppercase())
    } else {
        Err(format!(
            "{option} must be a MAC address such as BC:24:11:00:00:01, got {v}",
            v = quote(v)
        ))
    }
}

/// An address with a prefix length (`cidrv4`/`cidrv6`).
pub fn cidr(v: &str, six: bool) -> bool {
    let Some((a, l)) = v.split_once('/') else {
        return false;
    };
    let Ok(l) = l.parse::<u8>() else { return false };
    if six {
        a.parse::<std::net::Ipv6Addr>().is_ok() && l <= 128
    } else {
        a.parse::<std::net::Ipv4Addr>().is_ok() && l <= 32
    }
}
