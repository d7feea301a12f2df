//! The HTTP side of the simulator, after pve-http-server (`PVE::APIServer::AnyEvent`, pveproxy)
//! and pve-common's `PVE::RESTHandler`: the server and its certificates, PVE's two API daemons
//! (pveproxy and pvedaemon), the router of `/api2/json`, and what every endpoint handler shares.

pub mod daemons;
pub mod handler;
pub mod router;
pub mod server;
pub mod tls;
