//! The texts PVE writes into a migration's task log: pve-common's `format_size`, PVE::Format
//! `render_duration`, QemuMigrate.pm `round_powerof2`, dd's `status=progress` lines (as
//! pve-storage's `storage_migrate` shows them) and AbstractMigrate.pm `log`'s time stamp.
//! Kept apart so the other modules say what happens, not how PVE spells it.

use crate::state::epoch;

/// What pve-common's `format_size` writes for a size in bytes (`4M`, `2G`, `0T` for nothing).
pub(super) fn pve_format_size(size: u64) -> String {
    let kb = size / 1024;
    if kb * 1024 != size {
        return size.to_string();
    }
    let mb = kb / 1024;
    if mb * 1024 != kb {
        return format!("{kb}K");
    }
    let gb = mb / 1024;
    if gb * 1024 != mb {
        return format!("{mb}M");
    }
    let tb = gb / 1024;
    if tb * 1024 != gb {
        return format!("{gb}G");
    }
    format!("{tb}T")
}

/// The node's local time as AbstractMigrate's `log` prefixes it (`strftime("%F %H:%M:%S")`);
/// pve-sim's nodes keep UTC.
pub(super) fn stamp() -> String {
    let secs = epoch() as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = crate::tools::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// dd's human-readable sizes: three significant figures at most, one decimal below ten
/// (`1.1 GB`, `975 MiB`).
fn dd_human(bytes: f64, base: f64, units: &[&str]) -> String {
    let mut value = bytes;
    let mut unit = 0;
    while value >= base && unit < units.len() - 1 {
        value /= base;
        unit += 1;
    }
    if unit == 0 {
        format!("{} {}", value as u64, units[0])
    } else if value < 10.0 {
        format!("{value:.1} {}", units[unit])
    } else {
        format!("{} {}", value.round() as u64, units[unit])
    }
}

/// A dd `status=progress` (or final) line: `1073741824 bytes (1.1 GB, 1.0 GiB) copied, 2 s,
/// 537 MB/s`.
pub(super) fn dd_line(bytes: u64, secs: f64, last: bool) -> String {
    let si = dd_human(bytes as f64, 1000.0, &["B", "kB", "MB", "GB", "TB"]);
    let iec = dd_human(bytes as f64, 1024.0, &["B", "KiB", "MiB", "GiB", "TiB"]);
    let rate = if secs > 0.0 {
        dd_human(bytes as f64 / secs, 1000.0, &["B", "kB", "MB", "GB", "TB"])
    } else {
        "Infinity B".into()
    };
    // dd prints the elapsed time with `%.0f` while copying and with `%g` at the end.
    let elapsed = if last {
        let text = format!("{secs:.6}");
        let text = text.trim_end_matches('0').trim_end_matches('.');
        text.to_string()
    } else {
        format!("{secs:.0}")
    };
    format!("{bytes} bytes ({si}, {iec}) copied, {elapsed} s, {rate}/s")
}

/// PVE::Format's `render_duration` (`2m 1s`, `0s`).
pub(crate) fn render_duration(secs: u64) -> String {
    if secs == 0 {
        return "0s".into();
    }
    let mut parts = Vec::new();
    let mut rest = secs;
    for (unit, len) in [
        ("w", 604_800),
        ("d", 86_400),
        ("h", 3600),
        ("m", 60),
        ("s", 1),
    ] {
        if rest >= len {
            parts.push(format!("{}{unit}", rest / len));
            rest %= len;
        }
    }
    parts.join(" ")
}

/// QemuMigrate.pm, `round_powerof2`.
pub(super) fn round_powerof2(n: u64) -> u64 {
    if n < 2 {
        return 1;
    }
    2u64 << (63 - (n - 1).leading_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_durations_and_dd_lines_read_as_pve_writes_them() {
        assert_eq!(pve_format_size(0), "0T");
        assert_eq!(pve_format_size(4 << 20), "4M");
        assert_eq!(pve_format_size(2 << 30), "2G");
        assert_eq!(pve_format_size(540_672), "528K");
        assert_eq!(render_duration(0), "0s");
        assert_eq!(render_duration(121), "2m 1s");
        assert_eq!(round_powerof2(53_687_091), 64 << 20);
        assert_eq!(round_powerof2(1), 1);
        assert_eq!(
            dd_line(1_073_741_824, 2.0, false),
            "1073741824 bytes (1.1 GB, 1.0 GiB) copied, 2 s, 537 MB/s"
        );
        assert_eq!(
            dd_line(34_359_738_368, 56.25, true),
            "34359738368 bytes (34 GB, 32 GiB) copied, 56.25 s, 611 MB/s"
        );
    }

    #[test]
    fn the_stamp_is_a_civil_date() {
        let s = stamp();
        assert_eq!(s.len(), 19, "{s}");
        assert_eq!(&s[4..5], "-");
        assert_eq!(&s[10..11], " ");
        assert!(s.starts_with("20"), "{s}");
    }
}
