//! UPIDs (`UPID:node:PID:PSTART:STARTTIME:TYPE:ID:USER:`), parsed strictly so a task is
//! always polled on the node it runs on.

use std::fmt;

/// A parsed UPID. The original text is kept for URLs and messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upid {
    pub text: String,
    pub node: String,
    pub pid: u32,
    pub pstart: u64,
    pub starttime: u64,
    pub task_type: String,
    pub id: String,
    pub user: String,
}

impl fmt::Display for Upid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn hex(text: &str, min: usize, max: usize) -> Option<u64> {
    ((min..=max).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u64::from_str_radix(text, 16).ok())?
}

fn node_ok(text: &str) -> bool {
    !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

fn field_ok(text: &str) -> bool {
    !text
        .bytes()
        .any(|b| b == b':' || b == b'/' || b.is_ascii_whitespace())
}

impl Upid {
    /// Parses a UPID as `PVE::UPID::decode` does; `pstart` may have 8 or 9 hex digits.
    pub fn parse(text: &str) -> Result<Upid, String> {
        let bad = || format!("not a valid UPID: '{text}'");
        let parts: Vec<&str> = text.split(':').collect();
        if parts.len() != 9 || parts[0] != "UPID" || !parts[8].is_empty() {
            return Err(bad());
        }
        if !node_ok(parts[1])
            || parts[5].is_empty()
            || parts[7].is_empty()
            || ![5, 6, 7].iter().all(|i| field_ok(parts[*i]))
        {
            return Err(bad());
        }
        Ok(Upid {
            text: text.to_string(),
            node: parts[1].to_string(),
            pid: hex(parts[2], 8, 8).ok_or_else(bad)? as u32,
            pstart: hex(parts[3], 8, 9).ok_or_else(bad)?,
            starttime: hex(parts[4], 8, 8).ok_or_else(bad)?,
            task_type: parts[5].to_string(),
            id: parts[6].to_string(),
            user: parts[7].to_string(),
        })
    }
}

/// Seconds since the epoch (a UPID's start, on its node's clock) as a UTC date and time,
/// `2026-12-01 08:50:12 UTC` (the proleptic Gregorian calendar, as `date -u` shows it).
pub fn utc(epoch: u64) -> String {
    let days = (epoch / 86_400) as i64;
    let secs = epoch % 86_400;
    // Howard Hinnant's civil_from_days: days since 1970-01-01 to year, month, day.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(0x6419CAF8), "2023-03-21 15:19:20 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_796_115_073), "2026-12-01 08:51:13 UTC");
    }

    #[test]
    fn parses_real_upids() {
        let u =
            Upid::parse("UPID:dahu-2:00007323:001036A5:6419CAF8:qmstart:100:root@pam:").unwrap();
        assert_eq!(
            (u.node.as_str(), u.pid, u.task_type.as_str(), u.id.as_str()),
            ("dahu-2", 0x7323, "qmstart", "100")
        );
        assert_eq!(u.starttime, 0x6419CAF8);
        let t =
            Upid::parse("UPID:elodin:0002A693:005854E2:662E9BBE:qmcreate:100:root@pam!opentofu:")
                .unwrap();
        assert_eq!(t.user, "root@pam!opentofu");
        let e = Upid::parse("UPID:example-node:0000C346:165A0CE4:68D7279C:aptupdate::root@pam:")
            .unwrap();
        assert_eq!(e.id, "");
        assert_eq!(
            Upid::parse("UPID:n:00000001:123456789:68D7279C:qmstart:1:root@pam:")
                .unwrap()
                .pstart,
            0x123456789
        );
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "UPID:n:1:2:3:qmstart:100:root@pam:",
            "UPID:n:00007323:001036A5:6419CAF8:qmstart:100:root@pam",
            "UPID::00007323:001036A5:6419CAF8:qmstart:100:root@pam:",
            "UPID:n/x:00007323:001036A5:6419CAF8:qmstart:100:root@pam:",
            "UPID:n:0000732G:001036A5:6419CAF8:qmstart:100:root@pam:",
            "UPID:n:00007323:001036A5:6419CAF8::100:root@pam:",
            "XPID:n:00007323:001036A5:6419CAF8:qmstart:100:root@pam:",
            "UPID:n:00007323:001036A5:6419CAF8:qmstart:100::",
        ] {
            assert!(Upid::parse(bad).is_err(), "{bad}");
        }
    }
}
