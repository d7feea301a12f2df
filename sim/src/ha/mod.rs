//! High availability, after pve-ha-manager: the `ha-manager` side of the API (resources,
//! status, the `hastart`/`hastop` hand-off qemu-server makes), the CRM/LRM rounds that carry
//! requests out, and the HA files of the cluster file system (`PVE::HA::Config`), the HA rules (PVE 9) and
//! groups (PVE 8), and where the CRM places a service by them.

pub mod config;
pub mod groups;
pub mod manager;
pub mod placement;
pub mod rounds;
pub mod routes;
pub mod rule_checks;
pub mod rules;
pub mod version_gate;
