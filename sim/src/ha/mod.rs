//! High availability, after pve-ha-manager: the `ha-manager` side of the API (resources,
//! status, the `hastart`/`hastop` hand-off qemu-server makes), the CRM/LRM rounds that carry
//! requests out, and the HA files of the cluster file system (`PVE::HA::Config`).

pub mod config;
pub mod manager;
pub mod rounds;
