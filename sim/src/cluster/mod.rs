//! The cluster and node API of pve-manager: `API2/Cluster.pm` (resources, next id, status,
//! the node list), `API2/Nodes.pm` and `API2/Network.pm` (version, interfaces), and
//! `API2/Tasks.pm` (a node's task list, a task's status and log, stopping it).

pub mod datacenter;
pub mod nodes;
pub mod resources;
pub mod tasks;
