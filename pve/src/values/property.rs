//! PVE's property strings (`key=value,key=value`, one key possibly bare), parsed and printed as
//! pve-common's `src/PVE/JSONSchema.pm` does in `parse_property_string` and
//! `print_property_string`, and checked as its `check_object`/`check_type` check each key.
//!
//! Exists because every typed value in [`crate::values`] is one of these with its own schema;
//! the rules live here once: booleans become `1`/`0` when read (`parse_boolean`), `disk-size`
//! values print through `format_size`, the default key prints first without its name, then the
//! required keys, then the rest, each group in byte order (Perl's `sort`).

use std::collections::BTreeMap;
use std::fmt;

pub use super::error::ValueError;
use super::number::Number;
use super::size::Size;

/// What a key holds, as its schema entry types it.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// `type => 'string'` with no further check.
    Str,
    /// `type => 'string', enum => [...]`.
    Enum(&'static [&'static str]),
    /// A string checked by a format or pattern (the check and what it expects, for messages).
    Checked(fn(&str) -> bool, &'static str),
    /// `type => 'boolean'`: read through `parse_boolean` (`1|on|yes|true`, `0|off|no|false`,
    /// any case) and kept as `1`/`0`.
    Bool,
    /// `type => 'integer'` (`is_integer`: `^[+-]?\d+$`), with its bounds.
    Int(Option<i64>, Option<i64>),
    /// `type => 'number'` (`is_number`), with its lower bound.
    Number(Option<f64>),
    /// `format => 'disk-size'`: read with `parse_size`, printed with `format_size`.
    Size,
    /// `mac-addr` (`pve_verify_mac_addr`): a unicast MAC, compared without regard to case.
    Mac,
}

/// One key of a format.
#[derive(Clone, Copy, Debug)]
pub struct Key {
    /// The key's name.
    pub name: &'static str,
    /// What it holds.
    pub kind: Kind,
    /// `optional => 1`; a required key prints right after the default key.
    pub optional: bool,
    /// `default_key => 1`: the key a bare value (no `=`) is read as, printed without its name.
    pub default_key: bool,
    /// `default => …`: what PVE assumes when the key is absent (not written by PVE).
    pub default: Option<&'static str>,
    /// `alias => 'other'`: the key is read as `other` (`volume` → `file`).
    pub alias: Option<&'static str>,
    /// `keyAlias => 'k'` (with an alias): the key's own name is kept under `k`. A NIC's
    /// `virtio=MAC` is `model=virtio`, `macaddr=MAC`.
    pub key_alias: Option<&'static str>,
}

impl Key {
    /// An optional key.
    pub const fn new(name: &'static str, kind: Kind) -> Key {
        Key {
            name,
            kind,
            optional: true,
            default_key: false,
            default: None,
            alias: None,
            key_alias: None,
        }
    }

    /// A key that must be present (`optional` not set).
    pub const fn required(mut self) -> Key {
        self.optional = false;
        self
    }

    /// The key a bare value is read as.
    pub const fn default_key(mut self) -> Key {
        self.default_key = true;
        self
    }

    /// What PVE assumes when the key is absent.
    pub const fn default(mut self, value: &'static str) -> Key {
        self.default = Some(value);
        self
    }

    /// A key read as another (`volume` → `file`).
    pub const fn alias(name: &'static str, to: &'static str) -> Key {
        let mut key = Key::new(name, Kind::Str);
        key.alias = Some(to);
        key
    }

    /// A key read as `to`, its own name kept under `key` (`virtio=MAC`).
    pub const fn key_alias(name: &'static str, to: &'static str, key: &'static str) -> Key {
        let mut k = Key::alias(name, to);
        k.key_alias = Some(key);
        k
    }
}

/// A format: its name (for messages), its keys, and keys PVE drops when reading
/// (`parse_property_string`'s `skip` option).
#[derive(Debug)]
pub struct Schema {
    /// The format's name.
    pub name: &'static str,
    /// Its keys, in groups (a drive's format is its interface's groups put together, as
    /// Drive.pm puts `%drivedesc_base`, `%iothread_fmt` … together).
    pub keys: &'static [&'static [Key]],
    /// Keys read and dropped (a drive's legacy `cyls`, `heads`, `secs`, `trans`).
    pub skip: &'static [&'static str],
}

impl Schema {
    /// Every key of the format.
    pub fn all_keys(&self) -> impl Iterator<Item = &'static Key> + use<> {
        let groups: &'static [&'static [Key]] = self.keys;
        groups.iter().flat_map(|group| group.iter())
    }

    /// The entry of `key`.
    pub fn key(&self, name: &str) -> Option<&'static Key> {
        self.all_keys().find(|k| k.name == name)
    }

    fn default_key(&self) -> Option<&'static Key> {
        self.all_keys().find(|k| k.default_key)
    }
}

/// `parse_boolean`: `1|on|yes|true` and `0|off|no|false`, in any case.
pub fn parse_boolean(value: &str) -> Option<bool> {
    let lower = value.to_ascii_lowercase();
    match lower.as_str() {
        "1" | "on" | "yes" | "true" => Some(true),
        "0" | "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

/// `is_integer`: `^[+-]?\d+$`.
fn integer(value: &str) -> Option<i64> {
    let digits = value.strip_prefix(['+', '-']).unwrap_or(value);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.strip_prefix('+').unwrap_or(value).parse().ok()
}

/// `is_number` (see [`Number`]).
fn number(value: &str) -> Option<f64> {
    value.parse::<Number>().ok().map(|n| n.value())
}

/// `pve_verify_mac_addr`: `^[a-f0-9][02468ace](?::[a-f0-9]{2}){5}$`, any case (the I/G bit
/// must be clear).
pub fn is_unicast_mac(value: &str) -> bool {
    let groups: Vec<&str> = value.split(':').collect();
    groups.len() == 6
        && groups
            .iter()
            .all(|g| g.len() == 2 && g.bytes().all(|b| b.is_ascii_hexdigit()))
        && value
            .as_bytes()
            .get(1)
            .is_some_and(|b| b"02468aceACE".contains(b))
}

/// Checks and normalises one value as `check_type`/`check_format` would see it after
/// `parse_property_string` (booleans to `1`/`0`, sizes to `format_size`).
fn normalise(schema: &Schema, key: &Key, value: &str) -> Result<String, ValueError> {
    let err = |m: String| ValueError::new(schema.name, format!("{}: {m}", key.name));
    if value.contains(',') {
        return Err(err(format!("illegal value with commas: '{value}'")));
    }
    match key.kind {
        Kind::Str => Ok(value.to_string()),
        Kind::Enum(allowed) => {
            if allowed.contains(&value) {
                Ok(value.to_string())
            } else {
                Err(err(format!(
                    "value '{value}' does not have a value in the enumeration '{}'",
                    allowed.join(", ")
                )))
            }
        }
        Kind::Checked(check, expects) => {
            if check(value) {
                Ok(value.to_string())
            } else {
                Err(err(format!("value '{value}' is not {expects}")))
            }
        }
        Kind::Bool => match parse_boolean(value) {
            Some(b) => Ok(if b { "1" } else { "0" }.to_string()),
            None => Err(err(format!(
                "type check ('boolean') failed - got '{value}'"
            ))),
        },
        Kind::Int(min, max) => {
            let n = integer(value)
                .ok_or_else(|| err(format!("type check ('integer') failed - got '{value}'")))?;
            if let Some(min) = min.filter(|m| n < *m) {
                return Err(err(format!("value must have a minimum value of {min}")));
            }
            if let Some(max) = max.filter(|m| n > *m) {
                return Err(err(format!("value must have a maximum value of {max}")));
            }
            Ok(value.to_string())
        }
        Kind::Number(min) => {
            let n = number(value)
                .ok_or_else(|| err(format!("type check ('number') failed - got '{value}'")))?;
            if let Some(min) = min.filter(|m| n < *m) {
                return Err(err(format!("value must have a minimum value of {min}")));
            }
            Ok(value.to_string())
        }
        Kind::Size => value.parse::<Size>().map(|s| s.to_string()).map_err(|_| {
            err(format!(
                "value does not look like a valid disk size: {value}"
            ))
        }),
        Kind::Mac => {
            if is_unicast_mac(value) {
                Ok(value.to_string())
            } else {
                Err(err(format!(
                    "value '{value}' does not look like a valid unicast MAC address"
                )))
            }
        }
    }
}

/// True when PVE reads `a` and `b` of `key` as the same value: numbers by value, MACs in any
/// case, the rest (already normalised) as they are.
fn value_eq(key: Option<&Key>, left: &str, right: &str) -> bool {
    match key.map(|k| k.kind) {
        Some(Kind::Int(..)) => integer(left).is_some() && integer(left) == integer(right),
        Some(Kind::Number(_)) => number(left).is_some() && number(left) == number(right),
        Some(Kind::Mac) => left.eq_ignore_ascii_case(right),
        _ => left == right,
    }
}

/// A property string read against its schema: its keys (aliases resolved) and their values
/// (booleans as `1`/`0`, sizes as `format_size` prints them).
#[derive(Clone, Debug)]
pub struct PropertyString {
    schema: &'static Schema,
    values: BTreeMap<String, String>,
}

impl PropertyString {
    /// No keys yet (fill with [`PropertyString::set`]).
    pub fn new(schema: &'static Schema) -> PropertyString {
        PropertyString {
            schema,
            values: BTreeMap::new(),
        }
    }

    /// The schema this string was read against.
    pub fn schema(&self) -> &'static Schema {
        self.schema
    }

    /// Reads `data` as `parse_property_string($format, $data)` does, then checks each key as
    /// `check_object` does (unknown keys, required keys, types, enums, formats).
    pub fn parse(schema: &'static Schema, data: &str) -> Result<PropertyString, ValueError> {
        let err = |m: String| ValueError::new(schema.name, m);
        let mut raw: BTreeMap<String, String> = BTreeMap::new();
        let mut default_seen = false;
        for part in data.split(',') {
            if part.trim().is_empty() {
                continue;
            }
            // `^([^=]+)=(.+)$`: the key runs to the first `=`, the value is not empty.
            match part.split_once('=') {
                Some((k, v)) if !k.is_empty() && !v.is_empty() => {
                    if schema.skip.contains(&k) {
                        continue;
                    }
                    if raw.contains_key(k) {
                        return Err(err(format!(
                            "duplicate key in comma-separated list property: {k}"
                        )));
                    }
                    let mut name = k.to_string();
                    if let Some(entry) = schema.key(k)
                        && let Some(target) = entry.alias
                    {
                        if let Some(key_alias) = entry.key_alias {
                            if raw.contains_key(key_alias) {
                                return Err(err(format!(
                                    "key alias '{key_alias}' is already defined"
                                )));
                            }
                            raw.insert(key_alias.to_string(), k.to_string());
                        }
                        name = target.to_string();
                        if raw.contains_key(&name) {
                            return Err(err(format!(
                                "key '{name}' is already defined (via alias)"
                            )));
                        }
                    }
                    if schema.key(&name).is_none() {
                        return Err(err(format!(
                            "invalid key in comma-separated list property: {name}"
                        )));
                    }
                    raw.insert(name, v.to_string());
                }
                Some(_) => {
                    return Err(err("missing key in comma-separated list property".into()));
                }
                None => {
                    let Some(default) = schema.default_key() else {
                        return Err(err(
                            "value without key, but schema does not define a default key".into(),
                        ));
                    };
                    if default_seen || raw.contains_key(default.name) {
                        return Err(err(format!(
                            "duplicate key in comma-separated list property: {}",
                            default.name
                        )));
                    }
                    default_seen = true;
                    raw.insert(default.name.to_string(), part.to_string());
                }
            }
        }
        let mut out = PropertyString::new(schema);
        for (k, v) in raw {
            out.set(&k, &v)?;
        }
        if let Some(missing) = schema
            .all_keys()
            .find(|k| !k.optional && k.alias.is_none() && !out.values.contains_key(k.name))
        {
            return Err(err(format!(
                "{}: property is missing and it is not optional",
                missing.name
            )));
        }
        Ok(out)
    }

    /// Reads a value PVE stored: as [`PropertyString::parse`], but a key this schema does not
    /// know (one a newer PVE added) is kept as it is instead of refused, so a comparison
    /// sees it and an update that merges options keeps it.
    pub fn parse_stored(schema: &'static Schema, data: &str) -> Result<PropertyString, ValueError> {
        let mut known = Vec::new();
        let mut unknown = Vec::new();
        for part in data.split(',') {
            match part.split_once('=') {
                Some((k, v))
                    if !k.is_empty()
                        && !v.is_empty()
                        && schema.key(k).is_none()
                        && !schema.skip.contains(&k) =>
                {
                    unknown.push((k.to_string(), v.to_string()));
                }
                _ => known.push(part),
            }
        }
        let mut out = PropertyString::parse(schema, &known.join(","))?;
        for (k, v) in unknown {
            out.values.insert(k, v);
        }
        Ok(out)
    }

    /// The value of `key`, as read (normalised).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// The value of `key`, or what PVE assumes without it.
    pub fn get_or_default(&self, key: &str) -> Option<&str> {
        self.get(key)
            .or_else(|| self.schema.key(key).and_then(|k| k.default))
    }

    /// Sets `key` to `value`, checked and normalised as PVE reads it.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ValueError> {
        let entry = self.schema.key(key).ok_or_else(|| {
            ValueError::new(
                self.schema.name,
                format!("invalid key in comma-separated list property: {key}"),
            )
        })?;
        let value = normalise(self.schema, entry, value)?;
        self.values.insert(key.to_string(), value);
        Ok(())
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.values.remove(key)
    }

    /// The keys and values, in byte order of the keys.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// True when PVE reads `a` and `b` as the same value of `key`.
    pub fn value_eq(&self, key: &str, left: &str, right: &str) -> bool {
        value_eq(self.schema.key(key), left, right)
    }

    /// The keys this string gives whose value `have` does not hold (absent keys count as
    /// their schema default): what an update of only these keys would change.
    pub fn differing_keys(&self, have: &PropertyString) -> Vec<String> {
        self.values
            .iter()
            .filter(|(k, v)| {
                !have
                    .get_or_default(k)
                    .is_some_and(|h| self.value_eq(k, v, h))
            })
            .map(|(k, _)| k.clone())
            .collect()
    }
}

impl PartialEq for PropertyString {
    /// The same keys with the same values as PVE reads them (numbers by value, MACs in any
    /// case); the order the keys were written in does not matter.
    fn eq(&self, other: &PropertyString) -> bool {
        self.schema.name == other.schema.name
            && self.values.len() == other.values.len()
            && self
                .values
                .iter()
                .all(|(k, v)| other.values.get(k).is_some_and(|o| self.value_eq(k, v, o)))
    }
}

impl fmt::Display for PropertyString {
    /// As `print_property_string`: the default key first (bare, or `key=value` joined with
    /// its key alias's value, a NIC's `virtio=MAC`), then the required keys, then the rest,
    /// each group in byte order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        let mut done: Vec<&str> = Vec::new();
        if let Some(default) = self.schema.default_key()
            && let Some(value) = self.values.get(default.name)
        {
            done.push(default.name);
            let combine = self
                .schema
                .all_keys()
                .find(|k| k.key_alias == Some(default.name))
                .and_then(|k| k.alias);
            match combine.and_then(|c| self.values.get(c).map(|v| (c, v))) {
                Some((c, v)) => {
                    parts.push(format!("{value}={v}"));
                    done.push(c);
                }
                None => parts.push(value.clone()),
            }
        }
        let required = self
            .values
            .iter()
            .filter(|(k, _)| self.schema.key(k).is_some_and(|e| !e.optional));
        let optional = self
            .values
            .iter()
            .filter(|(k, _)| self.schema.key(k).is_none_or(|e| e.optional));
        for (k, v) in required.chain(optional) {
            if done.contains(&k.as_str()) {
                continue;
            }
            done.push(k);
            parts.push(format!("{k}={v}"));
        }
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static DEMO: Schema = Schema {
        name: "demo",
        keys: &[&[
            Key::new("file", Kind::Str).required().default_key(),
            Key::alias("volume", "file"),
            Key::new("flag", Kind::Bool).default("0"),
            Key::new("size", Kind::Size),
            Key::new("count", Kind::Int(Some(1), Some(10))),
            Key::new("rate", Kind::Number(Some(0.0))),
            Key::new("mode", Kind::Enum(&["on", "ignore"])),
            Key::new("zeta", Kind::Str).required(),
        ]],
        skip: &["legacy"],
    };

    #[test]
    fn reads_and_prints_as_pve() {
        let p =
            PropertyString::parse(&DEMO, "mode=on,zeta=z,volume=a:b,flag=Yes,size=2048M").unwrap();
        assert_eq!(p.to_string(), "a:b,zeta=z,flag=1,mode=on,size=2G");
        assert_eq!(p.get("flag"), Some("1"));
        let q =
            PropertyString::parse(&DEMO, "a:b,size=2G,,flag=on,zeta=z,mode=on,legacy=x").unwrap();
        assert_eq!(p, q);
    }

    #[test]
    fn refuses_what_pve_refuses() {
        for (data, wants) in [
            ("a,b,zeta=z", "duplicate key"),
            (
                "a,zeta=z,nope=1",
                "invalid key in comma-separated list property: nope",
            ),
            ("a,zeta=", "missing key"),
            ("a,zeta=z,flag=maybe", "type check ('boolean') failed"),
            ("a,zeta=z,count=11", "maximum value of 10"),
            ("a,zeta=z,count=1.5", "type check ('integer')"),
            ("a,zeta=z,rate=-1", "minimum value of 0"),
            ("a,zeta=z,mode=off", "enumeration 'on, ignore'"),
            ("a,zeta=z,size=2X", "valid disk size"),
            ("a", "zeta: property is missing"),
            ("a,volume=b,zeta=z", "already defined (via alias)"),
        ] {
            let e = PropertyString::parse(&DEMO, data).unwrap_err();
            assert!(e.to_string().contains(wants), "{data}: {e}");
        }
    }

    #[test]
    fn numbers_compare_by_value() {
        let a = PropertyString::parse(&DEMO, "a,zeta=z,rate=2.0,count=+3").unwrap();
        let b = PropertyString::parse(&DEMO, "a,zeta=z,rate=2,count=3").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "a,zeta=z,count=+3,rate=2.0");
        let c = PropertyString::parse(&DEMO, "a,zeta=z,rate=2.5,count=3").unwrap();
        assert_ne!(a, c);
    }

    #[test]
    fn stored_values_keep_keys_a_newer_pve_added() {
        assert!(PropertyString::parse(&DEMO, "a,zeta=z,future=1").is_err());
        let p = PropertyString::parse_stored(&DEMO, "a,zeta=z,future=1,flag=on").unwrap();
        assert_eq!(p.get("future"), Some("1"));
        assert_eq!(p.to_string(), "a,zeta=z,flag=1,future=1");
        assert!(PropertyString::parse_stored(&DEMO, "a,zeta=z,flag=maybe").is_err());
    }

    #[test]
    fn differing_keys_count_defaults() {
        let want = PropertyString::parse(&DEMO, "a,zeta=z,flag=off").unwrap();
        let have = PropertyString::parse(&DEMO, "a,zeta=z,size=1G").unwrap();
        assert!(want.differing_keys(&have).is_empty());
        let want = PropertyString::parse(&DEMO, "a,zeta=z,flag=on").unwrap();
        assert_eq!(want.differing_keys(&have), vec!["flag".to_string()]);
    }

    #[test]
    fn number_and_integer_grammar() {
        for ok in ["1", "+1", "-2", "1.", ".5", "1.5e3", "2E-1"] {
            assert!(number(ok).is_some(), "{ok}");
        }
        for bad in ["", ".", "e3", "1e", "0x10", "1,5", "inf", "NaN"] {
            assert!(number(bad).is_none(), "{bad}");
        }
        assert_eq!(integer("+7"), Some(7));
        assert_eq!(integer("7.0"), None);
        assert!(is_unicast_mac("BC:24:11:00:00:01"));
        assert!(is_unicast_mac("bc:24:11:00:00:01"));
        assert!(!is_unicast_mac("01:24:11:00:00:01"), "multicast");
        assert!(!is_unicast_mac("BC:24:11:00:00"));
    }
}
