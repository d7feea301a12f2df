//! The tasks PVE names in UPIDs ([`TaskType`]), for the requests that start them.
//!
//! Apart from `api/mod.rs` (the dispatch, which recovers a lost answer by looking for a task
//! of this type) because `tasks` (the requests that look) names the types too: `api` →
//! `tasks` → `task_type`, and `api` → `task_type`, one way.

/// The tasks PVE names in UPIDs, for the requests that start them.
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
    Snapshot,
    Rollback,
    DeleteSnapshot,
}

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
            TaskType::Snapshot => "qmsnapshot",
            TaskType::Rollback => "qmrollback",
            TaskType::DeleteSnapshot => "qmdelsnapshot",
        }
    }
}
