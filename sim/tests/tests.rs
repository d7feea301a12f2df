//! The integration tests of `pve-sim`, gathered into one test binary (as ripgrep's
//! `tests/tests.rs` gathers its modules), so the support code is compiled once. Every test
//! runs in this one process, on the harness's threads, against a simulator of its own.
//! `cargo test -p pve-sim --test integration <module>` runs one module's tests.

mod support;

mod agent;
mod api;
mod body_handling;
mod daemons;
mod disk_life;
mod ha;
mod migrate;
mod oracle_found;
mod peer_endpoints;
mod permissions;
mod snapshots;
mod values_found;
mod versions;
mod write_path;
