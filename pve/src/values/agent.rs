//! The guest agent setting (`agent`), with the format of qemu-server's
//! `src/PVE/QemuServer/Agent.pm` (`$agent_fmt`): `enabled` is the default key and required,
//! `freeze-fs-on-backup` and `guest-fsfreeze` are read as `freeze-fs`.
//!
//! `update_vm_api` stores the value as it was sent; `parse_guest_agent` ignores every other
//! key while the agent is disabled.

use std::fmt;
use std::str::FromStr;

use super::property::{Key, Kind, PropertyString, Schema, ValueError};

static KEYS: &[Key] = &[
    Key::new("enabled", Kind::Bool)
        .required()
        .default_key()
        .default("0"),
    Key::new("fstrim_cloned_disks", Kind::Bool).default("0"),
    Key::alias("freeze-fs-on-backup", "freeze-fs"),
    Key::alias("guest-fsfreeze", "freeze-fs"),
    Key::new("freeze-fs", Kind::Bool).default("1"),
    Key::new("type", Kind::Enum(&["virtio", "isa"])).default("virtio"),
];

static AGENT: Schema = Schema {
    name: "agent",
    keys: &[KEYS],
    skip: &[],
};

/// The guest agent setting.
#[derive(Clone, Debug, PartialEq)]
pub struct Agent {
    props: PropertyString,
}

impl Agent {
    /// The agent on or off, nothing else set.
    pub fn enabled(on: bool) -> Agent {
        let mut props = PropertyString::new(&AGENT);
        props
            .set("enabled", if on { "1" } else { "0" })
            .expect("a boolean is a valid `enabled`");
        Agent { props }
    }

    /// Whether the agent is on.
    pub fn is_enabled(&self) -> bool {
        self.props.get("enabled") == Some("1")
    }

    /// True when `have` holds what this setting asks for: the agent on or off as asked, and,
    /// while it is on, each key given here as `have` has it (absent keys count as their
    /// default). Keys not given here are left as they are.
    pub fn satisfied_by(&self, have: &Agent) -> bool {
        if !self.is_enabled() {
            return !have.is_enabled();
        }
        self.props.differing_keys(&have.props).is_empty()
    }
}

impl FromStr for Agent {
    type Err = ValueError;

    fn from_str(value: &str) -> Result<Agent, ValueError> {
        Ok(Agent {
            props: PropertyString::parse(&AGENT, value)?,
        })
    }
}

impl fmt::Display for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.props.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(text: &str) -> Agent {
        text.parse().unwrap()
    }

    #[test]
    fn reads_and_prints() {
        assert_eq!(agent("1").to_string(), "1");
        assert_eq!(agent("enabled=yes").to_string(), "1");
        assert_eq!(
            agent("fstrim_cloned_disks=on,1,freeze-fs-on-backup=0").to_string(),
            "1,freeze-fs=0,fstrim_cloned_disks=1"
        );
        assert_eq!(agent("on,type=isa").to_string(), "1,type=isa");
        assert!(agent("true").is_enabled() && !agent("0").is_enabled());
        assert!(
            "fstrim_cloned_disks=1".parse::<Agent>().is_err(),
            "enabled is required"
        );
        assert!("1,type=usb".parse::<Agent>().is_err());
    }

    #[test]
    fn compares_what_is_asked() {
        let stored = agent("1,fstrim_cloned_disks=1");
        assert!(agent("1").satisfied_by(&stored));
        assert!(agent("enabled=on,fstrim_cloned_disks=yes").satisfied_by(&stored));
        assert!(
            agent("1,freeze-fs=1").satisfied_by(&stored),
            "freeze-fs defaults to 1"
        );
        assert!(!agent("1,fstrim_cloned_disks=0").satisfied_by(&stored));
        assert!(!agent("0").satisfied_by(&stored));
        assert!(agent("0").satisfied_by(&agent("0,fstrim_cloned_disks=1")));
        assert!(!agent("1").satisfied_by(&agent("0")));
    }
}
