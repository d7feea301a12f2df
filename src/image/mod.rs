//! The `image` module: put a cloud image on a node's storage with `download-url`, verified by
//! checksum and idempotent, so a playbook can go from nothing to a running VM (`image` → `vm`).

pub mod apply;
pub mod plan;
pub mod spec;
