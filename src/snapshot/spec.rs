//! The `snapshot` module's options (named as community.proxmox's `proxmox_snap` names them)
//! and the snapshot they describe.

use serde_json::json;

use crate::ansible::protocol::Invocation;
use crate::ansible::spec::{Kind, Opt, Spec, given};
use crate::ansible::text::quote;
use crate::ids::VmSelector;
use crate::{connection, runner};

/// What is asked of the snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Present,
    Absent,
    Rollback,
}

/// The options, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub state: State,
    /// The VM: `vmid` (on `node`, or where the cluster lists it) or `name`.
    pub vm: VmSelector,
    /// Absent only with `state: present` and `retention` alone (retention applied, nothing taken).
    pub snapname: Option<String>,
    pub vmstate: bool,
    pub description: Option<String>,
    /// Keep this many snapshots of [`Desired::retention_prefix`] (0: keep all).
    pub retention: u32,
    pub retention_prefix: String,
    /// After a rollback, start the VM.
    pub start: bool,
}

/// The `snapshot` module's argument spec.
pub fn argument_spec() -> Spec {
    let mut options = connection::connection_options();
    options.extend(runner::wait_options("10m"));
    options.extend(vec![
        Opt::new("state", Kind::Str)
            .default(json!("present"))
            .choices(&["present", "absent", "rollback"]),
        crate::ids::vmid_option("vmid"),
        Opt::new("name", Kind::Str),
        Opt::new("node", Kind::Str),
        Opt::new("snapname", Kind::Str),
        Opt::new("vmstate", Kind::Bool).default(json!(false)),
        Opt::new("description", Kind::Str),
        Opt::new(
            "retention",
            Kind::Int {
                min: Some(0),
                max: Some(10_000),
            },
        )
        .default(json!(0)),
        Opt::new("retention_prefix", Kind::Str),
        Opt::new("start", Kind::Bool).default(json!(false)),
    ]);
    let mut spec = Spec {
        options,
        ..Default::default()
    };
    connection::connection_rules(&mut spec);
    spec.required_one_of.push(vec!["vmid", "name"]);
    spec.required_if.push(("state", "absent", vec!["snapname"]));
    spec.required_if
        .push(("state", "rollback", vec!["snapname"]));
    spec
}

/// pve-common's `pve-snapshot-name` (a `pve-configid` of at most 40 characters), refused
/// before any request; `current` and `pending` are PVE's reserved names.
pub fn snapname(option: &str, name: &str) -> Result<String, String> {
    let bytes = name.as_bytes();
    let config_id = bytes.len() >= 2
        && bytes[0].is_ascii_alphabetic()
        && bytes[1..]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_');
    if !config_id {
        return Err(format!(
            "{option} must start with a letter and have at least 2 characters of a-z, A-Z, \
             0-9, '-' and '_' (PVE's pve-snapshot-name), got {}",
            quote(name)
        ));
    }
    if name.len() > 40 {
        return Err(format!(
            "{option} is {} characters long; PVE allows at most 40",
            name.len()
        ));
    }
    if name == "current" || name.eq_ignore_ascii_case("pending") {
        return Err(format!(
            "{option} {} is a name PVE reserves; choose another",
            quote(name)
        ));
    }
    Ok(name.to_string())
}

/// Builds the desired snapshot from validated options.
pub fn desired(inv: &Invocation) -> Result<Desired, String> {
    let state = match inv.str("state") {
        Some("absent") => State::Absent,
        Some("rollback") => State::Rollback,
        _ => State::Present,
    };
    let snapname = inv
        .str("snapname")
        .map(|n| snapname("snapname", n))
        .transpose()?;
    let retention = inv.int("retention").unwrap_or(0) as u32;
    let retention_prefix = inv.str("retention_prefix").unwrap_or_default().to_string();
    if state == State::Present && snapname.is_none() && retention == 0 {
        return Err("state=present needs snapname (or retention, to prune alone)".into());
    }
    if retention > 0 && state != State::Present {
        return Err("retention applies with state=present only".into());
    }
    if let Some(n) = &snapname
        && retention > 0
        && !n.starts_with(&retention_prefix)
    {
        return Err(format!(
            "snapname {} does not start with retention_prefix {}: retention would not count it",
            quote(n),
            quote(&retention_prefix)
        ));
    }
    let description = inv.str("description").map(str::to_string);
    if description.as_deref().is_some_and(|d| d.len() > 8192) {
        return Err("description is longer than PVE keeps (8 KiB)".into());
    }
    Ok(Desired {
        state,
        vm: VmSelector::from_invocation(inv)?,
        snapname,
        vmstate: given(inv.bool("vmstate"), "vmstate")?,
        description,
        retention,
        retention_prefix,
        start: given(inv.bool("start"), "start")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_are_pves() {
        assert_eq!(
            snapname("snapname", "before-upgrade").unwrap(),
            "before-upgrade"
        );
        assert!(
            snapname("snapname", "1st")
                .unwrap_err()
                .contains("start with a letter")
        );
        assert!(snapname("snapname", "a b").is_err());
        assert!(
            snapname("snapname", &"a".repeat(41))
                .unwrap_err()
                .contains("40")
        );
        assert!(
            snapname("snapname", "current")
                .unwrap_err()
                .contains("reserves")
        );
        assert!(snapname("snapname", "PENDING").is_err());
    }
}
