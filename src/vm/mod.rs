//! The `vm` module: create a VM from a cloud image, wait on the import's UPID, converge its
//! config and power state.
//!
//! Pure parts: [`spec`] (the argument spec), [`desired`] (options → the desired VM, its disks
//! in `disks`, through [`validate`], [`encode`], `config_keys` and `limits`, PVE's schema
//! limits, `disk_formats`, a new disk's format against its storage's type,
//! [`disk_life`], an existing disk moved, detached or deleted and `unused_disks`, and [`ha`], the `ha` option checked and its changes decided in plain data), [`plan`]
//! (steps from the VM as it is to the VM as asked), [`predict`] (check mode), [`guest`] (what
//! the guest has not taken), [`report`] (the result). The shell: [`apply`] (the entry),
//! `converge` (the loop), and the concerns of one run, each an `impl` of the shared runner:
//! `find`, `locks`, `create`, `execute`, `disk_steps` (a disk move's and an unlink's
//! requests), `migrate` (moving a VM, placing a clone), `followup`
//! and `ha_converge` (the VM as an HA resource). No pure part uses the shell.

pub mod apply;
pub mod cdroms;
mod config_keys;
mod converge;
mod create;
pub mod desired;
mod disk_formats;
pub mod disk_life;
mod disk_life_options;
mod disk_steps;
mod disks;
pub mod encode;
mod execute;
mod find;
pub mod firmware_disks;
mod firmware_recreate;
mod followup;
pub mod guest;
pub mod ha;
mod ha_converge;
pub mod ha_rules;
mod limits;
mod locks;
mod migrate;
pub mod nocloud;
pub mod plan;
pub mod predict;
pub mod privileges;
pub mod report;
mod shell;
mod snapshot_before;
pub mod spec;
pub mod validate;
mod version_gates;
