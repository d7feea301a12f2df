//! The `vm_info` module: read-only facts of the VMs a playbook (or the inventory plugin)
//! selects, cluster-wide in one listing plus a few reads per VM made in parallel with a bound.
//! It never writes, so it is safe in check mode.

pub mod apply;
pub mod spec;
