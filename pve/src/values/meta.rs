//! A VM's `meta` (qemu-server `src/PVE/QemuServer/MetaInfo.pm`, `$meta_info_fmt`): when it
//! was created (`ctime`, seconds since the epoch) and by which QEMU (`creation-qemu`). PVE
//! writes it at create (`new_meta_info_string`) and reads it with `parse_meta_info`.

use std::fmt;
use std::str::FromStr;

use super::property::{Key, Kind, PropertyString, Schema, ValueError};

/// `creation-qemu`: `\d+(\.\d+)+`.
fn qemu_version(value: &str) -> bool {
    let mut parts = value.split('.');
    parts.clone().count() >= 2
        && parts.all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

static KEYS: &[Key] = &[
    Key::new("ctime", Kind::Int(Some(0), None)),
    Key::new(
        "creation-qemu",
        Kind::Checked(qemu_version, "a QEMU version"),
    ),
];

static META: Schema = Schema {
    name: "meta",
    keys: &[KEYS],
    skip: &[],
};

/// A VM's creation record.
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    props: PropertyString,
}

impl Meta {
    /// When the VM was created (seconds since the epoch).
    pub fn ctime(&self) -> Option<u64> {
        self.props
            .get("ctime")?
            .trim_start_matches('+')
            .parse()
            .ok()
    }

    /// The QEMU version that created it.
    pub fn creation_qemu(&self) -> Option<&str> {
        self.props.get("creation-qemu")
    }
}

impl FromStr for Meta {
    type Err = ValueError;

    /// `parse_meta_info`.
    fn from_str(value: &str) -> Result<Meta, ValueError> {
        Ok(Meta {
            props: PropertyString::parse(&META, value)?,
        })
    }
}

impl fmt::Display for Meta {
    /// As `new_meta_info_string` prints it (`creation-qemu=…,ctime=…`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.props.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_create_vm_writes() {
        let meta: Meta = "creation-qemu=9.2.0,ctime=1764547200".parse().unwrap();
        assert_eq!(meta.ctime(), Some(1_764_547_200));
        assert_eq!(meta.creation_qemu(), Some("9.2.0"));
        let reordered: Meta = "ctime=1764547200,creation-qemu=9.2.0".parse().unwrap();
        assert_eq!(reordered, meta);
        assert_eq!(
            reordered.to_string(),
            "creation-qemu=9.2.0,ctime=1764547200"
        );
        assert_eq!("".parse::<Meta>().unwrap().ctime(), None);
        assert!("ctime=soon".parse::<Meta>().is_err());
        assert!("ctime=1,owner=me".parse::<Meta>().is_err());
    }
}
