//! The integration tests of `sankofa-proxmox`, gathered into one test binary (as ripgrep's
//! `tests/tests.rs` gathers its modules): the support code is compiled once, and only the
//! outages tests compile the forwarder that plays pveproxy (`outages::forwarder`). Every test
//! runs in this one process, on the harness's threads: a test keeps its state in its own
//! scratch directory and simulator, never in the process's environment or signal handlers.
//! `cargo test --test integration <module>` runs one module's tests.

mod support;

mod bad_input;
mod canonical;
mod disks;
mod docs;
mod fault_matrix;
mod fleet;
mod gate;
mod ha;
mod hostile;
mod image;
mod import_cycles;
mod inventory;
mod media;
mod migrate;
mod nocloud;
mod outages;
mod permissions;
mod pools;
mod progress;
mod proxy;
mod secrets;
mod snapshot;
mod templates;
mod tls;
mod versions;
mod vm;
mod vm_info;
