//! What the `snapshot` module must do, from the snapshots the VM has. Pure.

use super::spec::{Desired, State};
use crate::pve::answers::SnapshotListed;

/// One action, in the order it is carried out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `POST …/snapshot` (`qmsnapshot`).
    Create(String),
    /// `PUT …/snapshot/{name}/config` with the new description.
    Describe(String, String),
    /// `POST …/snapshot/{name}/rollback` (`qmrollback`).
    Rollback(String),
    /// `DELETE …/snapshot/{name}` (`qmdelsnapshot`), for `absent` or retention.
    Delete(String),
}

/// The steps for a VM with these snapshots; `Err` names a snapshot that is not there to
/// roll back to.
pub fn plan(desired: &Desired, snapshots: &[SnapshotListed]) -> Result<Vec<Step>, String> {
    let has = |name: &str| snapshots.iter().any(|s| s.name == name);
    let mut steps = Vec::new();
    match (desired.state, &desired.snapname) {
        (State::Present, Some(name)) if !has(name) => steps.push(Step::Create(name.clone())),
        (State::Present, Some(name)) => {
            let now = snapshots
                .iter()
                .find(|s| &s.name == name)
                .and_then(|s| s.description.clone())
                .unwrap_or_default();
            if let Some(wanted) = &desired.description
                && *wanted != now
            {
                steps.push(Step::Describe(name.clone(), wanted.clone()));
            }
        }
        (State::Absent, Some(name)) if has(name) => steps.push(Step::Delete(name.clone())),
        (State::Rollback, Some(name)) if has(name) => steps.push(Step::Rollback(name.clone())),
        (State::Rollback, Some(name)) => {
            return Err(format!("snapshot {name:?} does not exist to roll back to"));
        }
        _ => {}
    }
    if desired.retention > 0 {
        let created = steps.iter().any(|s| matches!(s, Step::Create(_)));
        steps.extend(
            prune(
                snapshots,
                &desired.retention_prefix,
                desired.retention,
                created,
            )
            .into_iter()
            .map(Step::Delete),
        );
    }
    Ok(steps)
}

/// Retention: the snapshots of `prefix` beyond the newest `keep` (counting one about to be
/// taken), oldest first. A snapshot in the middle of a task (`snapstate`) is left alone.
pub fn prune(snapshots: &[SnapshotListed], prefix: &str, keep: u32, adding: bool) -> Vec<String> {
    let mut ours: Vec<&SnapshotListed> = snapshots
        .iter()
        .filter(|s| s.name.starts_with(prefix) && s.snapstate.is_none())
        .collect();
    ours.sort_by_key(|s| (s.snaptime.unwrap_or(0), s.name.clone()));
    let total = ours.len() + usize::from(adding);
    let excess = total.saturating_sub(keep as usize).min(ours.len());
    ours.into_iter()
        .take(excess)
        .map(|s| s.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::VmSelector;

    fn snap(name: &str, time: u64) -> SnapshotListed {
        SnapshotListed {
            name: name.into(),
            snaptime: Some(time),
            ..Default::default()
        }
    }

    fn desired(state: State, name: Option<&str>, retention: u32) -> Desired {
        Desired {
            state,
            vm: VmSelector {
                vmid: Some(100),
                ..Default::default()
            },
            snapname: name.map(str::to_string),
            vmstate: false,
            description: None,
            retention,
            retention_prefix: "auto-".into(),
            start: false,
        }
    }

    #[test]
    fn retention_removes_the_oldest_of_the_prefix_first() {
        let snaps = [
            snap("auto-3", 300),
            snap("manual", 50),
            snap("auto-1", 100),
            snap("auto-2", 200),
        ];
        assert_eq!(prune(&snaps, "auto-", 2, false), ["auto-1"]);
        assert_eq!(prune(&snaps, "auto-", 2, true), ["auto-1", "auto-2"]);
        assert!(prune(&snaps, "auto-", 5, true).is_empty());
        let steps = plan(&desired(State::Present, Some("auto-4"), 2), &snaps).unwrap();
        assert_eq!(
            steps,
            [
                Step::Create("auto-4".into()),
                Step::Delete("auto-1".into()),
                Step::Delete("auto-2".into())
            ]
        );
    }

    #[test]
    fn present_absent_and_rollback_are_idempotent_where_they_can_be() {
        let snaps = [snap("s1", 1)];
        assert!(
            plan(&desired(State::Present, Some("s1"), 0), &snaps)
                .unwrap()
                .is_empty()
        );
        assert!(
            plan(&desired(State::Absent, Some("s2"), 0), &snaps)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            plan(&desired(State::Absent, Some("s1"), 0), &snaps).unwrap(),
            [Step::Delete("s1".into())]
        );
        assert_eq!(
            plan(&desired(State::Rollback, Some("s1"), 0), &snaps).unwrap(),
            [Step::Rollback("s1".into())]
        );
        assert!(plan(&desired(State::Rollback, Some("s2"), 0), &snaps).is_err());
    }
}
