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

fn hex(s: &str, min: usize, max: usize) -> Option<u64> {
    ((min..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u64::from_str_radix(s, 16).ok())?
}

fn node_ok(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn field_ok(s: &str) -> bool {
    !s.bytes()
        .any(|b| b == b':' || b == b'/' || b.is_ascii_whitespace())
}

impl Upid {
    /// Parses a UPID as `PVE::UPID::decode` does; `pstart` may have 8 or 9 hex digits.
    pub fn parse(s: &str) -> Result<Upid, String> {
        let bad = || format!("not a valid UPID: '{s}'");
        let parts: Vec<&str> = s.split(':').collect();
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
            text: s.to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

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
