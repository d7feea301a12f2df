//! PVE's small text helpers, written once: pve-common's `split_list` (ParseUtils.pm, which
//! PVE::Tools re-exports), the SHA-1 hex digest PVE puts on every config it answers, the civil
//! date of a day count (for PVE's time stamps, which pve-sim writes in UTC), and pve-storage's
//! `parse_volume_id` (`storage:volume`). A leaf: it uses no other module of pve-sim.

/// pve-common ParseUtils.pm `split_list`: a text holding a NUL is split at the NULs only (as
/// multi-valued form fields arrive), any other at each run of `,`, `;` and whitespace, with no
/// empty item at either end.
pub fn split_list(text: &str) -> Vec<String> {
    if text.contains('\0') {
        let mut items: Vec<String> = text.split('\0').map(str::to_string).collect();
        while items.last().is_some_and(|item| item.is_empty()) {
            items.pop();
        }
        return items;
    }
    text.split(|c: char| c == ',' || c == ';' || c.is_whitespace())
        .filter(|item| !item.is_empty())
        .map(str::to_string)
        .collect()
}

/// The SHA-1 of `text` in lower-case hex: the `digest` PVE answers with a config
/// (`Digest::SHA::sha1_hex` over the file's text).
pub fn sha1_hex(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, text.as_bytes());
    digest
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// `time` (epoch seconds) as HTTP's IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`, as
/// pve-http-server's `response` writes its `Date` header (`HTTP::Date::time2str`).
pub fn http_date(time: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = (time / 86_400) as i64;
    let (year, month, day) = civil_from_days(days);
    let of_day = time % 86_400;
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        of_day / 3_600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// The proleptic Gregorian `(year, month, day)` of a count of days since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A volume ID's storage and volume name (`local-lvm:vm-100-disk-0` → `("local-lvm",
/// "vm-100-disk-0")`), or `None` for a value with no `:`: where pve-sim read `storage:volume`
/// by hand, as pve-storage's `parse_volume_id` splits at the first `:`.
pub fn volume_parts(volid: &str) -> Option<(&str, &str)> {
    volid.split_once(':')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_date_writes_an_imf_fixdate_as_http_date_does() {
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn split_list_splits_as_parse_utils_does() {
        assert_eq!(split_list(" a, b;c  d;"), ["a", "b", "c", "d"]);
        assert_eq!(split_list("a b\0c\0\0"), ["a b", "c"]);
        assert_eq!(split_list("a\0\0b"), ["a", "", "b"]);
        assert!(split_list("").is_empty());
    }

    #[test]
    fn civil_from_days_counts_from_the_epoch() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_423), (2025, 12, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn sha1_hex_is_lower_case_hex() {
        assert_eq!(sha1_hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    }

    #[test]
    fn volume_parts_split_at_the_first_colon() {
        assert_eq!(
            volume_parts("local:iso/a:b.iso"),
            Some(("local", "iso/a:b.iso"))
        );
        assert_eq!(volume_parts("none"), None);
    }
}
