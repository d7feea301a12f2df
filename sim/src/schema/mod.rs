//! The parameter schema, after pve-common's `PVE::JSONSchema`: the checking engine (types,
//! named formats, property strings, PVE's error texts) and the tables of every implemented
//! endpoint, one file per PVE package, written out by hand from PVE 9.1's schema (which is not
//! shipped in this repository) so that a request real PVE would reject is rejected here with
//! the same 400 `Parameter verification failed.` Callers name everything as `schema::…`.

mod access;
mod cluster;
mod cpu_machine;
mod endpoints;
mod engine;
mod ha;
mod qemu;
mod storage;

pub use access::*;
pub use cluster::*;
pub use endpoints::*;
pub use engine::*;
pub use ha::*;
pub use qemu::*;
pub use storage::*;
