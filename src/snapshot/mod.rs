//! The `snapshot` module: take, roll back and remove a VM's snapshots, each task waited on by
//! its UPID, with retention (keep the newest N snapshots of a prefix), so a playbook can make
//! a change reversible and keep the snapshots it made in bounds.

pub mod apply;
pub mod plan;
pub mod spec;
