//! `sankofa.proxmox`: Ansible modules, written in Rust, that build Proxmox VE virtual machines
//! from cloud images and wait on PVE's tasks by their UPIDs instead of guessing how long they take.
//!
//! * [`ansible`]: Ansible's contract for binary modules (arguments, spec, results).
//! * [`pve`]: the PVE API client (transport, TLS, auth, errors, UPIDs, task waits).
//! * [`vm`]: the `vm` module's logic (spec, plan, apply); [`image`]: the `image` module's;
//!   [`snapshot`]: the `snapshot` module's; [`vm_info`]: the read-only `vm_info` module's.
//! * [`runner`]: one module run (wait settings, session, task log, the common result keys,
//!   and the one place an error chain becomes Ansible's failed result);
//!   [`connection`]: the connection options and how they become a client; [`ids`]: PVE's
//!   identifier formats; [`interrupt`]: signal handling; [`files`]: bounded reads of the
//!   files a user names.
//!
//! The arrows go one way: `bin` → `vm`/`image` → `runner`/`connection` → `pve` and
//! `ansible`; `pve` (its own crate) never uses `ansible`, and `ansible` uses only `pve::encode`
//! (the spellings: percent-encoding, bounded quotes) and `pve::task_progress` (the live
//! progress it writes on stderr for the action plugins). See ARCHITECTURE.md.

// A failed result carries its context (messages, task data); it ends the run, so its size
// on the error path does not matter and boxing it would only add noise.
#![allow(clippy::result_large_err)]

pub mod ansible;
pub mod connection;
pub mod files;
pub mod ids;
pub mod image;
/// The PVE API client (the `sankofa-pve` crate in `pve/`).
pub use ::pve;
pub use pve::interrupt;
pub mod privileges;
pub mod pve_version;
pub mod runner;
pub mod snapshot;
pub mod vm;
pub mod vm_info;
