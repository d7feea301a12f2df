//! The Proxmox VE API client.

pub mod client;
pub mod encode;
pub mod error;
pub mod ops;
pub mod proxy;
pub mod tasks;
pub mod tls;
pub mod upid;
pub mod wait;
