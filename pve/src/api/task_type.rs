//! The tasks PVE names in UPIDs ([`TaskType`]), for the requests that start them, and which
//! of them report a copy's progress in their logs.
//!
//! Apart from `api/mod.rs` (the dispatch, which recovers a lost answer by looking for a task
//! of this type) because `tasks` (the requests that look) names the types too: `api` →
//! `tasks` → `task_type`, and `api` → `task_type`, one way.

/// The tasks PVE names in UPIDs: those the modules start, and those whose progress a wait
/// reads when it finds one running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskType {
    Create,
    Clone,
    Config,
    Resize,
    Start,
    Stop,
    Shutdown,
    Reboot,
    Destroy,
    Template,
    Download,
    Migrate,
    /// `ha-manager migrate` run for an HA-managed VM (API2/Qemu.pm migrate_vm): it hands
    /// the move to the HA stack, whose LRM then runs a [`TaskType::Migrate`].
    HaMigrate,
    Snapshot,
    Rollback,
    DeleteSnapshot,
    /// A restore from a backup (`qmrestore`).
    Restore,
    /// A disk moved to another storage (`qmmove`).
    MoveDisk,
    /// A storage's volume copied (`imgcopy`).
    ImageCopy,
    /// A volume moved (`move_volume`).
    MoveVolume,
}

/// Every type, for reading one back from its name.
const ALL: &[TaskType] = &[
    TaskType::Create,
    TaskType::Clone,
    TaskType::Config,
    TaskType::Resize,
    TaskType::Start,
    TaskType::Stop,
    TaskType::Shutdown,
    TaskType::Reboot,
    TaskType::Destroy,
    TaskType::Template,
    TaskType::Download,
    TaskType::Migrate,
    TaskType::HaMigrate,
    TaskType::Snapshot,
    TaskType::Rollback,
    TaskType::DeleteSnapshot,
    TaskType::Restore,
    TaskType::MoveDisk,
    TaskType::ImageCopy,
    TaskType::MoveVolume,
];

impl TaskType {
    /// The type as UPIDs and task lists spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskType::Create => "qmcreate",
            TaskType::Clone => "qmclone",
            TaskType::Config => "qmconfig",
            TaskType::Resize => "resize",
            TaskType::Start => "qmstart",
            TaskType::Stop => "qmstop",
            TaskType::Shutdown => "qmshutdown",
            TaskType::Reboot => "qmreboot",
            TaskType::Destroy => "qmdestroy",
            TaskType::Template => "qmtemplate",
            TaskType::Download => "download",
            TaskType::Migrate => "qmigrate",
            TaskType::HaMigrate => "hamigrate",
            TaskType::Snapshot => "qmsnapshot",
            TaskType::Rollback => "qmrollback",
            TaskType::DeleteSnapshot => "qmdelsnapshot",
            TaskType::Restore => "qmrestore",
            TaskType::MoveDisk => "qmmove",
            TaskType::ImageCopy => "imgcopy",
            TaskType::MoveVolume => "move_volume",
        }
    }

    /// The type a UPID names, if it is one of these.
    pub fn named(name: &str) -> Option<TaskType> {
        ALL.iter().copied().find(|t| t.as_str() == name)
    }

    /// Whether the type's log may report a copy's progress, so a wait on any task of it
    /// reads the log while it runs: the copies of a create's import, a clone, a restore, a
    /// disk move, a download, and a migration's mirrored disks (`drive-scsi0: transferred …`,
    /// see [`crate::wait::transfer_part`]); a `qmconfig` imports a disk too (`import-from`).
    /// Whether one request's task is expected to copy (and so given time for it) is that
    /// request's own ([`super::Task::reports_progress`]).
    pub fn reports_progress(self) -> bool {
        matches!(
            self,
            TaskType::Create
                | TaskType::Config
                | TaskType::Restore
                | TaskType::Clone
                | TaskType::MoveDisk
                | TaskType::Download
                | TaskType::ImageCopy
                | TaskType::MoveVolume
                | TaskType::Migrate
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_reads_back_from_its_name() {
        for task_type in ALL {
            assert_eq!(TaskType::named(task_type.as_str()), Some(*task_type));
        }
        assert_eq!(TaskType::named("vzdump"), None);
        assert_eq!(TaskType::named("qmigrate"), Some(TaskType::Migrate));
    }

    #[test]
    fn the_copies_report_progress() {
        let progress: Vec<&str> = ALL
            .iter()
            .filter(|t| t.reports_progress())
            .map(|t| t.as_str())
            .collect();
        assert_eq!(
            progress,
            [
                "qmcreate",
                "qmclone",
                "qmconfig",
                "download",
                "qmigrate",
                "qmrestore",
                "qmmove",
                "imgcopy",
                "move_volume"
            ]
        );
        assert!(!TaskType::HaMigrate.reports_progress() && !TaskType::Start.reports_progress());
    }
}
