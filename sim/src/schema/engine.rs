//! The checking engine of `PVE::JSONSchema` (pve-common JSONSchema.pm): types, named formats,
//! `check_type`-style value checks with PVE's own error texts, and property strings
//! (`parse_property_string`, `print_property_string`). The tables it checks against, one per
//! implemented endpoint, are its siblings in `schema/`, one file per PVE package.

use std::collections::{BTreeMap, BTreeSet};

/// Errors by parameter name, as in PVE's `{"errors": {...}}`.
pub type Errors = BTreeMap<String, String>;

/// The type of a parameter or of a property-string sub-key.
#[derive(Clone, Copy)]
pub enum Ty {
    Bool,
    Int(Option<i64>, Option<i64>),
    Num(Option<f64>, Option<f64>),
    Str,
    /// A string with a maximum length.
    StrMax(usize),
    Enum(&'static [&'static str]),
    /// A string checked by a pattern (a hand-written matcher standing in for PVE's regex).
    Pat(fn(&str) -> bool),
    /// A named PVE format with its own error text.
    Fmt(Named),
    /// A property string with these sub-keys.
    Prop(&'static [Sub]),
}

/// Named string formats of `PVE::JSONSchema` used by the implemented endpoints.
#[derive(Clone, Copy)]
pub enum Named {
    Vmid,
    Node,
    StorageId,
    ConfigIdList,
    UrlEncoded,
    DnsName,
    DiskSize,
    MacAddr,
    AddressList,
    TagList,
    IpConfig,
    Boot,
    Cpu,
    VolumeId,
}

/// A property-string sub-key.
pub struct Sub {
    pub key: &'static str,
    pub ty: Ty,
    pub default_key: bool,
    pub required: bool,
    /// For an enum sub-key whose values are also written as keys (a NIC's `virtio=MAC`):
    /// the sub-key that such a key's value belongs to (`macaddr`).
    pub value_key: Option<&'static str>,
}

pub const fn sub(key: &'static str, ty: Ty) -> Sub {
    Sub {
        key,
        ty,
        default_key: false,
        required: false,
        value_key: None,
    }
}

pub const fn default_sub(key: &'static str, ty: Ty) -> Sub {
    Sub {
        key,
        ty,
        default_key: true,
        required: true,
        value_key: None,
    }
}

/// A top-level parameter. Indexed parameters (`scsi[n]`) carry their index range.
pub struct Param {
    pub name: &'static str,
    pub ty: Ty,
    pub required: bool,
    pub indexed: Option<(u32, u32)>,
}

pub const fn opt(name: &'static str, ty: Ty) -> Param {
    Param {
        name,
        ty,
        required: false,
        indexed: None,
    }
}

pub const fn req(name: &'static str, ty: Ty) -> Param {
    Param {
        name,
        ty,
        required: true,
        indexed: None,
    }
}

pub const fn idx(name: &'static str, lo: u32, hi: u32, ty: Ty) -> Param {
    Param {
        name,
        ty,
        required: false,
        indexed: Some((lo, hi)),
    }
}

/// A disk size as PVE writes it: `\+?\d+(\.\d+)?[KMGT]?`.
pub fn is_size(s: &str) -> bool {
    // \+?\d+(\.\d+)?[KMGT]?
    let s = s.strip_prefix('+').unwrap_or(s);
    let s = s.strip_suffix(['K', 'M', 'G', 'T']).unwrap_or(s);
    let (int, frac) = match s.split_once('.') {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    };
    !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
}

/// The parameter of a spec that `name` is (an indexed one by its range).
pub fn find<'a>(params: &'a [Param], name: &str) -> Option<&'a Param> {
    params.iter().find(|p| match p.indexed {
        None => p.name == name,
        Some((lo, hi)) => name
            .strip_prefix(p.name)
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| (lo..=hi).contains(&n)),
    })
}

/// JSONSchema.pm `check_object`'s refusal of a key the schema does not know.
const NOT_IN_SCHEMA: &str =
    "property is not defined in schema and the schema does not allow additional properties";

/// Checks parameters against a spec; returns PVE's per-parameter errors.
pub fn check(params: &[Param], given: &BTreeMap<String, String>) -> Result<(), Errors> {
    let mut errs = Errors::new();
    for (k, v) in given {
        match find(params, k) {
            None => {
                errs.insert(k.clone(), NOT_IN_SCHEMA.into());
            }
            Some(p) => {
                if let Err(e) = check_value(p.ty, v, false) {
                    errs.insert(k.clone(), drive_key_error(p.ty, k, e));
                }
            }
        }
    }
    for p in params {
        if p.required && !given.contains_key(p.name) {
            errs.insert(
                p.name.into(),
                "property is missing and it is not optional".into(),
            );
        }
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

/// [`check`], and the keys given without a value (undef, `a` in a form body `tags=b;a`) as
/// JSONSchema.pm `check_object` sees them: `check_prop` lets an undef value pass as an absent
/// one (a required one is missing, which [`check`] says), but its loop over the given keys
/// refuses one the schema does not know, in the same 400 as the other errors.
pub fn check_with_undefined(
    params: &[Param],
    given: &BTreeMap<String, String>,
    undefined: &BTreeSet<String>,
) -> Result<(), Errors> {
    let mut errs = check(params, given).err().unwrap_or_default();
    for k in undefined.iter().filter(|k| find(params, k).is_none()) {
        errs.insert(k.clone(), NOT_IN_SCHEMA.into());
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

/// A drive value's unknown sub-key as PVE words it: qemu-server parses a drive against all
/// drive keys, then JSONSchema.pm `check_object` checks the bus's own format, so `ssd` on
/// a virtio drive is "format error\nvirtio0.ssd: property is not defined in schema …".
fn drive_key_error(ty: Ty, key: &str, err: String) -> String {
    let is_drive =
        matches!(ty, Ty::Prop(subs) if subs.iter().any(|s| s.default_key && s.key == "file"));
    match err.strip_prefix("invalid format - invalid key in comma-separated list property: ") {
        Some(sub) if is_drive => format!(
            "invalid format - format error\n{key}.{sub}: property is not defined in schema and the schema does not allow additional properties"
        ),
        _ => err,
    }
}

fn check_value(ty: Ty, v: &str, in_prop: bool) -> Result<(), String> {
    match ty {
        Ty::Bool => {
            let ok: &[&str] = if in_prop {
                &["0", "1", "true", "false", "yes", "no", "on", "off"]
            } else {
                &["0", "1"]
            };
            if ok.contains(&v.to_ascii_lowercase().as_str()) {
                Ok(())
            } else {
                Err(format!("type check ('boolean') failed - got '{v}'"))
            }
        }
        Ty::Int(min, max) => {
            let n: i64 = v
                .strip_prefix('+')
                .unwrap_or(v)
                .parse()
                .map_err(|_| format!("type check ('integer') failed - got '{v}'"))?;
            range(n as f64, min.map(|m| m as f64), max.map(|m| m as f64))
        }
        Ty::Num(min, max) => {
            let n: f64 = Some(v)
                .filter(|v| is_number(v))
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("type check ('number') failed - got '{v}'"))?;
            range(n, min, max)
        }
        Ty::Str => Ok(()),
        Ty::StrMax(n) => {
            if v.chars().count() > n {
                Err(format!("value may only be {n} characters long"))
            } else {
                Ok(())
            }
        }
        Ty::Enum(vals) => {
            if vals.contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "value '{v}' does not have a value in the enumeration '{}'",
                    vals.join(", ")
                ))
            }
        }
        Ty::Pat(f) => {
            if f(v) {
                Ok(())
            } else {
                Err("value does not match the regex pattern".into())
            }
        }
        Ty::Fmt(n) => check_named(n, v).map_err(|e| format!("invalid format - {e}")),
        Ty::Prop(subs) => parse_property_string(subs, v)
            .map(|_| ())
            .map_err(|e| format!("invalid format - {e}")),
    }
}

/// JSONSchema.pm `is_number`: `^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$`.
fn is_number(v: &str) -> bool {
    let v = v.strip_prefix(['+', '-']).unwrap_or(v);
    let (mantissa, exponent) = match v.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e.strip_prefix(['+', '-']).unwrap_or(e))),
        None => (v, None),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => (!int.is_empty() || !frac.is_empty()) && digits(int) && digits(frac),
        None => !mantissa.is_empty() && digits(mantissa),
    };
    mantissa_ok && exponent.is_none_or(|e| !e.is_empty() && digits(e))
}

fn range(n: f64, min: Option<f64>, max: Option<f64>) -> Result<(), String> {
    if let Some(m) = min.filter(|m| n < *m) {
        return Err(format!("value must have a minimum value of {m}"));
    }
    if let Some(m) = max.filter(|m| n > *m) {
        return Err(format!("value must have a maximum value of {m}"));
    }
    Ok(())
}

fn is_dns_label_chars(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The CPU models QEMU 9.2 knows on x86_64 and aarch64 (CPUConfig.pm `initialize_cpu_models`,
/// whose fallback list names them), `host`, and PVE's built-in `x86-64-v2` … `x86-64-v4`
/// (`$builtin_models_by_arch`).
const CPU_MODELS: &[&str] = &[
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
    "host",
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
    "x86-64-v2",
    "x86-64-v2-AES",
    "x86-64-v3",
    "x86-64-v4",
];

fn check_named(n: Named, v: &str) -> Result<(), String> {
    match n {
        Named::Vmid => {
            let ok = v.len() >= 3
                && v.len() <= 9
                && !v.starts_with('0')
                && v.bytes().all(|b| b.is_ascii_digit());
            if ok {
                Ok(())
            } else {
                Err("value does not look like a valid VM ID".into())
            }
        }
        Named::Node => {
            if is_dns_label_chars(v) {
                Ok(())
            } else {
                Err("value does not look like a valid node name".into())
            }
        }
        Named::StorageId => {
            if v.len() < 2 {
                return Err(format!(
                    "storage ID '{v}' cannot be shorter than 2 characters"
                ));
            }
            let first = v.as_bytes()[0];
            let last = v.as_bytes()[v.len() - 1];
            let ok = first.is_ascii_alphabetic()
                && last.is_ascii_alphanumeric()
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if ok {
                Ok(())
            } else {
                Err(format!("storage ID '{v}' contains illegal characters"))
            }
        }
        Named::ConfigIdList => {
            for id in v.split([',', ';', ' ', '\0']).filter(|s| !s.is_empty()) {
                let ok = id.len() >= 2
                    && id.as_bytes()[0].is_ascii_alphabetic()
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                if !ok {
                    return Err(format!("invalid configuration ID '{id}'"));
                }
            }
            Ok(())
        }
        Named::UrlEncoded => {
            if v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-%_.!~*'()".contains(&b))
            {
                Ok(())
            } else {
                Err(format!("invalid urlencoded string: {v}"))
            }
        }
        Named::DnsName => {
            if v.split('.').all(is_dns_label_chars) {
                Ok(())
            } else {
                // JSONSchema.pm `pve_verify_dns_name` does not repeat the value.
                Err("value does not look like a valid DNS name".into())
            }
        }
        Named::DiskSize => {
            if is_size(v) && !v.starts_with('+') {
                Ok(())
            } else {
                Err(format!("unable to parse size '{v}'"))
            }
        }
        Named::MacAddr => {
            let parts: Vec<&str> = v.split(':').collect();
            if parts.len() == 6
                && parts
                    .iter()
                    .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                Ok(())
            } else {
                Err(format!(
                    "value '{v}' does not look like a valid MAC address"
                ))
            }
        }
        // `address-list`: JSONSchema.pm `pve_verify_address` on each item, an IP address or
        // a DNS name (`pve_verify_dns_name`).
        Named::AddressList => {
            for a in v.split([',', ';', ' ']).filter(|s| !s.is_empty()) {
                if a.parse::<std::net::IpAddr>().is_err() && !a.split('.').all(is_dns_label_chars) {
                    return Err(format!("value does not look like a valid address: {a}"));
                }
            }
            Ok(())
        }
        Named::TagList => {
            for t in v.split([',', ';', ' ']).filter(|s| !s.is_empty()) {
                let ok = t
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_+.".contains(&b))
                    && !t.starts_with(['-', '_', '+', '.']);
                if !ok {
                    return Err(format!("invalid tag '{t}'"));
                }
            }
            Ok(())
        }
        Named::IpConfig => {
            const SUBS: &[Sub] = &[
                sub("ip", Ty::Str),
                sub("gw", Ty::Str),
                sub("ip6", Ty::Str),
                sub("gw6", Ty::Str),
            ];
            let kv = parse_property_string(SUBS, v)?;
            for (k, val) in &kv {
                let ok = match k.as_str() {
                    // JSONSchema.pm `pve_verify_ipv4_config`, `pve_verify_ipv6_config`.
                    "ip" => val == "dhcp" || val == "manual" || is_cidr(val, false),
                    "ip6" => {
                        ["dhcp", "auto", "manual"].contains(&val.as_str()) || is_cidr(val, true)
                    }
                    "gw" => val.parse::<std::net::Ipv4Addr>().is_ok(),
                    "gw6" => val.parse::<std::net::Ipv6Addr>().is_ok(),
                    _ => true,
                };
                if !ok {
                    return Err(format!(
                        "format error | {k}: invalid format - value '{val}' is not valid"
                    ));
                }
            }
            if kv.contains_key("gw") && !kv.contains_key("ip") {
                return Err(
                    "format error | gw: gateway specified without specifying an IP address".into(),
                );
            }
            Ok(())
        }
        Named::Boot => {
            // QemuServer.pm `pve-qm-boot`: the legacy letters `[acdn]{1,4}` (default key), or
            // `order=` a `pve-qm-bootdev-list` (ParseUtils split_list: `;`, `,` or spaces),
            // each device checked by `verify_bootdev`.
            let mut legacy = false;
            for part in v.split(',').filter(|p| !p.trim().is_empty()) {
                match part.split_once('=') {
                    Some(("order", order)) if !order.is_empty() => {
                        let devices = order
                            .split(|c: char| c == ';' || c == ',' || c.is_whitespace())
                            .filter(|d| !d.is_empty());
                        for device in devices {
                            if !is_boot_device(device) {
                                return Err(format!(
                                    "format error | order: invalid format - invalid boot device '{device}'"
                                ));
                            }
                        }
                    }
                    Some((key, _)) => {
                        return Err(format!(
                            "invalid key in comma-separated list property: {key}"
                        ));
                    }
                    None if legacy => {
                        return Err("duplicate key in comma-separated list property: legacy".into());
                    }
                    None => {
                        legacy = true;
                        let ok = part.len() <= 4 && part.bytes().all(|b| b"acdn".contains(&b));
                        if !ok {
                            return Err(
                                "format error | legacy: value does not match the regex pattern"
                                    .into(),
                            );
                        }
                    }
                }
            }
            Ok(())
        }
        Named::Cpu => {
            const SUBS: &[Sub] = &[
                default_sub("cputype", Ty::Str),
                sub("flags", Ty::Pat(super::cpu_machine::is_cpu_flag_list)),
                sub("hidden", Ty::Bool),
                sub("hv-vendor-id", Ty::Str),
                sub("phys-bits", Ty::Str),
                sub("reported-model", Ty::Str),
            ];
            let kv = parse_property_string(SUBS, v)?;
            // CPUConfig.pm `parse_cpu_conf_basic`: a custom model needs cpu-models.conf
            // (pve-sim has none), any other must be a QEMU or PVE built-in model.
            match kv.get("cputype").map(String::as_str) {
                Some(custom) if custom.starts_with("custom-") => Err(format!(
                    "Custom cputype '{}' not found",
                    &custom["custom-".len()..]
                )),
                Some(model) if !CPU_MODELS.contains(&model) => Err(format!(
                    "Built-in cputype '{model}' is not defined (missing 'custom-' prefix?)"
                )),
                _ => super::cpu_machine::validate_vm_cpu_limits(&kv),
            }
        }
        Named::VolumeId => {
            // A volume id `storage:name`, an absolute path, or (drives only) `none`/`cdrom`.
            if v.starts_with('/') || v == "none" || v == "cdrom" {
                return Ok(());
            }
            match crate::tools::volume_parts(v) {
                Some((s, name)) if check_named(Named::StorageId, s).is_ok() && !name.is_empty() => {
                    Ok(())
                }
                _ => Err(format!("unable to parse volume ID '{v}'")),
            }
        }
    }
}

/// QemuServer.pm `verify_bootdev`: a drive but the EFI disk and the TPM state, a NIC, a USB
/// or a PCI device, by the indexes the config has.
fn is_boot_device(device: &str) -> bool {
    [
        ("ide", 3),
        ("scsi", 30),
        ("virtio", 15),
        ("sata", 5),
        ("net", 31),
        ("usb", 29),
        ("hostpci", 15),
    ]
    .iter()
    .any(|(prefix, max)| {
        device.strip_prefix(prefix).is_some_and(|n| {
            !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && (n == "0" || !n.starts_with('0'))
                && n.parse::<u32>().is_ok_and(|i| i <= *max)
        })
    })
}

fn is_cidr(v: &str, v6: bool) -> bool {
    let Some((addr, len)) = v.split_once('/') else {
        return false;
    };
    let Ok(len) = len.parse::<u8>() else {
        return false;
    };
    if v6 {
        addr.parse::<std::net::Ipv6Addr>().is_ok() && len <= 128
    } else {
        addr.parse::<std::net::Ipv4Addr>().is_ok() && len <= 32
    }
}

/// Parses a property string like PVE's `parse_property_string`, checking each sub-key.
/// NIC model keys carry the MAC (`virtio=AA:..`), which is returned as `model` + `macaddr`.
pub fn parse_property_string(subs: &[Sub], v: &str) -> Result<BTreeMap<String, String>, String> {
    let mut res = BTreeMap::new();
    let default_key = subs.iter().find(|s| s.default_key).map(|s| s.key);
    for part in v.split(',') {
        if part.trim().is_empty() {
            continue;
        }
        if let Some((k, val)) = part.split_once('=') {
            if k.is_empty() {
                return Err("missing key in comma-separated list property".into());
            }
            if val.is_empty() {
                return Err(format!("format error | {k}: value is empty"));
            }
            // `virtio=MAC` style: the model as key, the MAC as value.
            let aliased = subs.iter().find_map(|s| match (s.ty, s.value_key) {
                (Ty::Enum(values), Some(value_key)) if values.contains(&k) => {
                    Some((s.key, value_key))
                }
                _ => None,
            });
            if let Some((enum_key, value_key)) = aliased {
                if res.contains_key(enum_key) {
                    return Err(format!(
                        "duplicate key in comma-separated list property: {enum_key}"
                    ));
                }
                res.insert(enum_key.to_string(), k.to_string());
                res.insert(value_key.to_string(), val.to_string());
                continue;
            }
            if !subs.iter().any(|s| s.key == k) {
                return Err(format!("invalid key in comma-separated list property: {k}"));
            }
            if res.contains_key(k) {
                return Err(format!(
                    "duplicate key in comma-separated list property: {k}"
                ));
            }
            res.insert(k.to_string(), val.to_string());
        } else {
            let Some(dk) = default_key else {
                return Err("value without key, but schema does not define a default key".into());
            };
            if res.contains_key(dk) {
                return Err(format!(
                    "duplicate key in comma-separated list property: {dk}"
                ));
            }
            res.insert(dk.to_string(), part.to_string());
        }
    }
    // parse_property_string: a boolean sub-key's value is read with parse_boolean (`on`,
    // `yes`, `true` are 1; `off`, `no`, `false` are 0).
    for s in subs.iter().filter(|s| matches!(s.ty, Ty::Bool)) {
        if let Some(val) = res.get_mut(s.key) {
            match val.to_ascii_lowercase().as_str() {
                "1" | "on" | "yes" | "true" => *val = "1".into(),
                "0" | "off" | "no" | "false" => *val = "0".into(),
                _ => {}
            }
        }
    }
    let mut sub_errs = Vec::new();
    for (k, val) in &res {
        if let Some(s) = subs.iter().find(|s| s.key == k.as_str())
            && let Err(e) = check_value(s.ty, val, true)
        {
            sub_errs.push(format!("{k}: {e}"));
        }
    }
    for s in subs {
        if s.required && !res.contains_key(s.key) {
            sub_errs.push(format!(
                "{}: property is missing and it is not optional",
                s.key
            ));
        }
    }
    if sub_errs.is_empty() {
        Ok(res)
    } else {
        Err(format!("format error | {}", sub_errs.join(" | ")))
    }
}

/// Prints a property string the way PVE stores it: the default key's value first,
/// then the other keys in alphabetical order.
pub fn print_property_string(default_key: &str, kv: &BTreeMap<String, String>) -> String {
    let mut out: Vec<String> = Vec::new();
    if let Some(v) = kv.get(default_key) {
        out.push(v.clone());
    }
    out.extend(
        kv.iter()
            .filter(|(k, _)| k.as_str() != default_key)
            .map(|(k, v)| format!("{k}={v}")),
    );
    out.join(",")
}

/// Prints a NIC the way PVE stores it: `model=MAC` first, then the rest alphabetically.
pub fn print_net(kv: &BTreeMap<String, String>) -> String {
    let mut out = vec![format!(
        "{}={}",
        kv.get("model").map(String::as_str).unwrap_or("virtio"),
        kv.get("macaddr").map(String::as_str).unwrap_or("")
    )];
    out.extend(
        kv.iter()
            .filter(|(k, _)| k.as_str() != "model" && k.as_str() != "macaddr")
            .map(|(k, v)| format!("{k}={v}")),
    );
    out.join(",")
}

/// Parameters that only name the node and VM, plus the given extra ones.
pub fn vm_path(extra: Vec<Param>) -> Vec<Param> {
    let mut p = vec![
        req("node", Ty::Fmt(Named::Node)),
        req("vmid", Ty::Fmt(Named::Vmid)),
    ];
    p.extend(extra);
    p
}

/// Parameters that only name the node, plus the given extra ones.
pub fn node_path(extra: Vec<Param>) -> Vec<Param> {
    let mut p = vec![req("node", Ty::Fmt(Named::Node))];
    p.extend(extra);
    p
}

/// The `node` parameter every node-scoped endpoint has.
pub fn node_param() -> Param {
    req("node", Ty::Fmt(Named::Node))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert!(
            is_size("+10G")
                && is_size("2.5G")
                && is_size("1024")
                && !is_size("10X")
                && !is_size("-1G")
        );
    }
}
