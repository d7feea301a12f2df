//! Ansible's side: what a binary module receives and must print.

pub mod progress;
pub mod protocol;
pub mod spec;
pub mod text;
