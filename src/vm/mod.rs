//! The `vm` module: create a VM from a cloud image, wait on the import's UPID, converge its
//! config and power state.

pub mod apply;
pub mod guest;
pub mod plan;
pub mod spec;
