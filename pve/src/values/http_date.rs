//! The `Date` header of PVE's answers (pve-http-server AnyEvent.pm `response`:
//! `HTTP::Date::time2str`, RFC 7231's IMF-fixdate such as `Sun, 06 Nov 1994 08:49:37 GMT`):
//! the API node's clock, which a comparison with a volume's `ctime` or a VM's `uptime` needs
//! where this host's clock may differ.

/// The epoch seconds an IMF-fixdate names, or `None` for anything else.
pub fn parse(text: &str) -> Option<u64> {
    let (_, rest) = text.trim().split_once(", ")?;
    let mut fields = rest.split(' ');
    let day: i64 = fields.next()?.parse().ok()?;
    let month = match fields.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = fields.next()?.parse().ok()?;
    let mut clock = fields
        .next()?
        .split(':')
        .map(|part| part.parse::<i64>().ok());
    let (hour, minute, second) = (clock.next()??, clock.next()??, clock.next()??);
    if fields.next()? != "GMT"
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second;
    u64::try_from(seconds).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pves_date_header_and_refuses_other_text() {
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(parse("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(parse("Wed, 02 Dec 2026 04:35:00 GMT"), Some(1_796_186_100));
        assert_eq!(parse("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 CET"), None);
        assert_eq!(parse(""), None);
    }
}
