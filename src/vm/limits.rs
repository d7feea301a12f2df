//! PVE's schema limits for the values the `vm` module sends (PVE 9.1: `POST
//! /nodes/{node}/qemu`, `POST …/config` and `POST …/clone`), checked before any request so
//! that a value PVE would refuse (or a body its HTTP server cuts off) fails at once with an
//! error naming the option, and nothing is written. The table is ours, from the schema's
//! `maxLength`, `minimum`/`maximum` and `pattern` of each key; the checks of the module's own
//! options (slots, sizes, property-string values) are in [`super::validate`].

use super::config_keys::managed_key;
use crate::ansible::text::quote;

/// What the schema allows for a key.
enum Limit {
    /// A string of at most this many bytes.
    MaxLength(usize),
    /// An integer within the range.
    Integer { min: i64, max: Option<i64> },
    /// A number within the range.
    Number { min: f64, max: Option<f64> },
    /// A value of this shape (described for the message).
    Shape(&'static str, fn(&str) -> bool),
}

/// The keys with a limit beyond their type, `[n]` for the numbered ones.
const LIMITS: &[(&str, Limit)] = &[
    ("description", Limit::MaxLength(8192)),
    ("smbios1", Limit::MaxLength(512)),
    ("balloon", Limit::Integer { min: 0, max: None }),
    ("cores", Limit::Integer { min: 1, max: None }),
    ("sockets", Limit::Integer { min: 1, max: None }),
    ("smp", Limit::Integer { min: 1, max: None }),
    ("vcpus", Limit::Integer { min: 1, max: None }),
    (
        "cpuunits",
        Limit::Integer {
            min: 1,
            max: Some(262_144),
        },
    ),
    (
        "shares",
        Limit::Integer {
            min: 0,
            max: Some(50_000),
        },
    ),
    ("migrate_speed", Limit::Integer { min: 0, max: None }),
    (
        "cpulimit",
        Limit::Number {
            min: 0.0,
            max: Some(128.0),
        },
    ),
    (
        "migrate_downtime",
        Limit::Number {
            min: 0.0,
            max: None,
        },
    ),
    ("serial[n]", Limit::Shape("/dev/… or socket", serial_port)),
    (
        "parallel[n]",
        Limit::Shape("/dev/parportN or /dev/usb/lpN", parallel_port),
    ),
    ("bootdisk", Limit::Shape("a disk such as scsi0", boot_disk)),
    (
        "startdate",
        Limit::Shape("now or YYYY-MM-DD[THH:MM:SS]", start_date),
    ),
    ("vmgenid", Limit::Shape("a UUID, 1 or 0", vm_generation_id)),
];

/// The longest snapshot name (`pve-configid`, maxLength 40).
const SNAPNAME_MAX: usize = 40;

fn digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// `(/dev/.+|socket)`.
fn serial_port(value: &str) -> bool {
    value == "socket"
        || value
            .strip_prefix("/dev/")
            .is_some_and(|rest| !rest.is_empty())
}

/// `/dev/parport\d+|/dev/usb/lp\d+`.
fn parallel_port(value: &str) -> bool {
    value.strip_prefix("/dev/parport").is_some_and(digits)
        || value.strip_prefix("/dev/usb/lp").is_some_and(digits)
}

/// `(ide|sata|scsi|virtio)\d+`.
fn boot_disk(value: &str) -> bool {
    ["ide", "sata", "scsi", "virtio"]
        .iter()
        .any(|bus| value.strip_prefix(bus).is_some_and(digits))
}

/// `(now|\d{4}-\d{1,2}-\d{1,2}(T\d{1,2}:\d{1,2}:\d{1,2})?)`.
fn start_date(value: &str) -> bool {
    if value == "now" {
        return true;
    }
    let (date, time) = match value.split_once('T') {
        Some((date, time)) => (date, Some(time)),
        None => (value, None),
    };
    let fields = |text: &str, sep: char, widths: &[(usize, usize)]| {
        let parts: Vec<&str> = text.split(sep).collect();
        parts.len() == widths.len()
            && parts
                .iter()
                .zip(widths)
                .all(|(part, (low, high))| digits(part) && (*low..=*high).contains(&part.len()))
    };
    fields(date, '-', &[(4, 4), (1, 2), (1, 2)])
        && time.is_none_or(|time| fields(time, ':', &[(1, 2), (1, 2), (1, 2)]))
}

/// `[a-fA-F0-9]{8}(-[a-fA-F0-9]{4}){3}-[a-fA-F0-9]{12}`, or `1` or `0`.
fn vm_generation_id(value: &str) -> bool {
    if value == "0" || value == "1" {
        return true;
    }
    let parts: Vec<&str> = value.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(part, len)| part.len() == len && part.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The limit of a config key, matching `net0` to `net[n]`.
fn limit_of(key: &str) -> Option<&'static Limit> {
    LIMITS.iter().find_map(|(name, limit)| {
        let matches = match name.strip_suffix("[n]") {
            Some(prefix) => key.strip_prefix(prefix).is_some_and(digits),
            None => *name == key,
        };
        matches.then_some(limit)
    })
}

/// The option that set a config key: the module's own (`description`, `serial[0]`) or
/// `extra_config.<key>`.
pub fn option_of(key: &str) -> String {
    if !managed_key(key) {
        return format!("extra_config.{key}");
    }
    match key.find(|c: char| c.is_ascii_digit()) {
        Some(at) if key[at..].bytes().all(|b| b.is_ascii_digit()) && key != "efidisk0" => {
            format!("{}[{}]", &key[..at], &key[at..])
        }
        _ => key.to_string(),
    }
}

/// Checks a config value against PVE's schema; the error names `option`.
pub fn check(option: &str, key: &str, value: &str) -> Result<(), String> {
    let Some(limit) = limit_of(key) else {
        return Ok(());
    };
    let shown = || quote(value);
    match limit {
        Limit::MaxLength(max) if value.len() > *max => Err(format!(
            "{option} is {} bytes long; PVE allows at most {max}",
            value.len()
        )),
        Limit::Integer { min, max } => match value.trim().parse::<i64>() {
            Ok(n) if n < *min => Err(format!("{option} must be at least {min}, got {n}")),
            Ok(n) if max.is_some_and(|max| n > max) => Err(format!(
                "{option} must be at most {}, got {n}",
                max.unwrap_or_default()
            )),
            Ok(_) => Ok(()),
            Err(_) => Err(format!("{option} must be an integer, got {}", shown())),
        },
        Limit::Number { min, max } => match value.trim().parse::<f64>() {
            Ok(n) if !n.is_finite() => Err(format!("{option} must be a number, got {}", shown())),
            Ok(n) if n < *min => Err(format!("{option} must be at least {min}, got {n}")),
            Ok(n) if max.is_some_and(|max| n > max) => Err(format!(
                "{option} must be at most {}, got {n}",
                max.unwrap_or_default()
            )),
            Ok(_) => Ok(()),
            Err(_) => Err(format!("{option} must be a number, got {}", shown())),
        },
        Limit::Shape(shape, fits) if !fits(value) => {
            Err(format!("{option} must be {shape}, got {}", shown()))
        }
        _ => Ok(()),
    }
}

/// Checks every config value the module may send.
pub fn check_config<'a>(
    values: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), String> {
    values
        .into_iter()
        .try_for_each(|(key, value)| check(&option_of(key), key, value))
}

/// A snapshot name as PVE takes it (`pve-configid`: a letter, then letters, digits and `_`,
/// at most 40).
pub fn check_snapname(option: &str, name: &str) -> Result<(), String> {
    let shaped = name.len() >= 2
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !shaped {
        return Err(format!(
            "{option} must start with a letter and hold only letters, digits and _, got {}",
            quote(name)
        ));
    }
    if name.len() > SNAPNAME_MAX {
        return Err(format!(
            "{option} is {} characters long; PVE allows at most {SNAPNAME_MAX}",
            name.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_beyond_pves_schema_are_refused_naming_the_option() {
        let long = "x".repeat(8193);
        let e = check("description", "description", &long).unwrap_err();
        assert!(
            e.starts_with("description is 8193 bytes") && e.contains("8192"),
            "{e}"
        );
        assert!(check("description", "description", &"x".repeat(8192)).is_ok());
        let e = check("extra_config.cpuunits", "cpuunits", "0").unwrap_err();
        assert!(
            e.contains("extra_config.cpuunits must be at least 1"),
            "{e}"
        );
        assert!(check("extra_config.cpulimit", "cpulimit", "129").is_err());
        assert!(check("extra_config.cpulimit", "cpulimit", "1.5").is_ok());
        assert!(check("extra_config.startdate", "startdate", "2024-1-02T3:04:05").is_ok());
        assert!(check("extra_config.startdate", "startdate", "tomorrow").is_err());
        assert!(check("extra_config.parallel0", "parallel0", "/dev/parport0").is_ok());
        assert!(check("extra_config.parallel0", "parallel0", "/etc/passwd").is_err());
        assert!(
            check(
                "extra_config.vmgenid",
                "vmgenid",
                "c6a3f3c1-0c2e-4a8a-9d4e-0123456789ab"
            )
            .is_ok()
        );
        assert!(check("extra_config.vmgenid", "vmgenid", "2").is_err());
        assert!(check("extra_config.keyboard", "keyboard", "de").is_ok());
    }

    #[test]
    fn options_are_named_as_the_user_gave_them() {
        assert_eq!(option_of("description"), "description");
        assert_eq!(option_of("serial1"), "serial[1]");
        assert_eq!(option_of("cpuunits"), "extra_config.cpuunits");
    }

    #[test]
    fn snapshot_names_follow_pves_configid() {
        assert!(check_snapname("clone.snapname", "before_upgrade").is_ok());
        assert!(check_snapname("clone.snapname", &"s".repeat(41)).is_err());
        assert!(check_snapname("clone.snapname", "1st").is_err());
    }
}
