//! Moving a VM to another node, after qemu-server and pve-guest-common:
//!
//! * `GET …/migrate` (API2/Qemu.pm, `migrate_vm_precondition`): what a migration would meet —
//!   whether the VM runs, the nodes it may go to, its local disks and local resources.
//! * `POST …/migrate` (API2/Qemu.pm, `migrate_vm`): the early refusals (the target is this
//!   node or no cluster node, root-only options, the config and its lock, a running VM without
//!   `online`, the target storages), then a `qmigrate` task under the migration lock
//!   (GuestHelpers.pm, `guest_migration_lock`) that runs `PVE::QemuMigrate` through
//!   AbstractMigrate.pm's `migrate`, phase by phase, under the VM's config lock:
//!   `prepare` (the checks again, local devices), `phase1` (`lock: migrate`, the volumes
//!   scanned, the offline ones copied with `storage_migrate`), `phase2` for a running VM (the
//!   VM started on the target, its attached disks mirrored, its memory moved), and
//!   `phase3_cleanup` (the new volume ids written, the config moved to the target, the source
//!   volumes freed, the lock cleared on the target). A failure in phase 1 or 2 cleans up
//!   (`phase1_cleanup`, `phase2_cleanup`) and leaves the VM where it was.
//!
//! The task log is PVE's: AbstractMigrate's lines stamped with the time (`log`), the
//! block-job monitor's and the target's lines as they are printed, dd's progress for offline
//! copies (pve-storage, `storage_migrate` rate-limits it) and `drive-scsi0: transferred …`
//! for mirrored disks (QemuServer/BlockJob.pm, `monitor`). Copies take the time
//! `--import-rate` gives them; the memory transfer takes the `qmigrate` task duration.
//!
//! The model is cut by concern: [`handlers`] (the two API calls and their refusals),
//! [`options`] (the storage map, the migration network and the options a task runs with),
//! [`prepare`] (QemuMigrate's checks of local resources, clones and storages, and the
//! [`local_volumes`] it finds to move), [`phases`]
//! (the `qmigrate` worker, its phases, locks and config moves), [`disk_copy`] (the offline
//! `storage_migrate` copies and the online drive mirrors), [`ha_handoff`] (an HA-managed VM
//! handed to the HA stack), [`ha_lrm`] (the HA stack's round running its migrations) and
//! [`pve_format`] (the sizes, durations and dd lines the task log shows).

mod disk_copy;
mod ha_handoff;
mod ha_lrm;
mod handlers;
mod local_volumes;
mod options;
mod phases;
/// The migration lock, which a snapshot rollback and delete take too (`qemu/snapshots.rs`).
pub(crate) use phases::migration_locked;
mod prepare;
pub(crate) mod pve_format;

pub use ha_lrm::ha_round;
pub use handlers::{migrate, migrate_spec, precondition, precondition_spec};
