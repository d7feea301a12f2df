//! The local volumes a migration moves, as QemuMigrate.pm holds them
//! (`$self->{local_volumes}`, filled by `scan_local_volumes`).
//!
//! Apart from `prepare` (which scans them) because the worker's state (`phases`) holds them
//! and the copies (`disk_copy`) read them: all three use this leaf, and it uses none of them.

/// How a scanned local volume is referenced (QemuMigrate.pm, scan_local_volumes: `ref`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Reference {
    /// A local file or device (an absolute path).
    Config,
    Attached,
    Unused,
    Pending,
    /// The cloud-init drive or the TPM state.
    Generated,
}

/// A local volume to move (`$self->{local_volumes}->{$volid}`).
#[derive(Clone, Debug)]
pub(super) struct LocalVolume {
    pub(super) reference: Reference,
    pub(super) targetsid: String,
    pub(super) size: u64,
    pub(super) format: String,
    pub(super) is_cloudinit: bool,
    pub(super) drivename: Option<String>,
    /// Mirrored while the VM runs (`migration_mode: online`), else copied first.
    pub(super) online: bool,
}
