//! Virtual machines, after qemu-server (`API2/Qemu.pm`, `QemuServer.pm`, `QemuConfig.pm`,
//! `QemuMigrate.pm`) and the parts of pve-guest-common it builds on (AbstractConfig.pm,
//! AbstractMigrate.pm): the VM endpoints, a config's file, pending section and write path,
//! drives and disks, templates and clones, snapshots and migration.

pub mod config;
pub mod config_file;
pub mod disk_mirror;
pub mod disks;
pub mod drives;
pub mod migrate;
pub mod pending;
pub mod permissions;
pub mod snapshot_routes;
pub mod snapshot_sections;
pub mod snapshots;
pub mod templates;
pub mod vms;
pub mod volume_use;
pub mod write_path;
