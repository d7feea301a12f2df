//! PVE's values as types: each property string or value the modules send or read parses
//! ([`std::str::FromStr`]), prints as PVE prints it ([`std::fmt::Display`]) and compares as PVE
//! stores it (key order, booleans, sizes in PVE's units, list separators).
//!
//! Why this exists: PVE rewrites what a client sends (it parses a property string and prints it
//! again in its own key order, turns `on`/`yes` into `1`, `2048M` into `2G`, sorts tags), so a
//! module that compares strings sees a difference that is not there and never converges. The
//! rules here are read from PVE's source, cited on each item:
//!
//! * [`property`]: `parse_property_string`/`print_property_string` (pve-common
//!   `src/PVE/JSONSchema.pm`), the engine the typed values below share.
//! * [`size`]: `parse_size`/`format_size` (JSONSchema.pm).
//! * [`drive`], [`net`], [`ipconfig`], [`agent`], [`boot`], [`machine`], [`keyed`]: the
//!   formats of qemu-server (`QemuServer/Drive.pm`, `Network.pm`, `Agent.pm`, `QemuServer.pm`,
//!   `Machine.pm`, `Memory.pm`, `CPUConfig.pm`).
//! * [`cpu_models`]: the CPU models and flags `validate_vm_cpu_conf` lets a VM name
//!   (`CPUConfig.pm`, `CPUFlags.pm`).
//! * [`meta`]: a VM's creation record (`MetaInfo.pm`).
//! * [`tags`]: `get_unique_tags` (pve-guest-common `src/PVE/GuestHelpers.pm`).
//! * [`sshkeys`]: the `urlencoded` key list and `validate_ssh_public_keys` (pve-common
//!   `src/PVE/Tools.pm`).
//! * [`crypt`]: `encrypt_pw` (Tools.pm), the SHA-256 crypt PVE stores `cipassword` as.
//! * [`error`]: [`ValueError`], what every value above reads into.
//! * [`number`]: `number`/`integer` keys, which PVE answers as strings.
//! * [`config`]: a config key's value compared by its type, and the rules PVE rewrites values by.

pub mod agent;
pub mod boot;
pub mod config;
pub mod cpu_models;
pub mod crypt;
pub mod drive;
pub mod error;
pub mod http_date;
pub mod ipconfig;
pub mod keyed;
pub mod machine;
pub mod meta;
pub mod net;
pub mod number;
pub mod property;
pub mod size;
pub mod sshkeys;
pub mod tags;

pub use agent::Agent;
pub use boot::Boot;
pub use drive::Drive;
pub use error::ValueError;
pub use ipconfig::IpConfig;
pub use keyed::{Cpu, Memory, Vga};
pub use machine::Machine;
pub use meta::Meta;
pub use net::Net;
pub use property::PropertyString;
pub use size::{Size, SizeError};
pub use sshkeys::{SshKey, SshKeys};
pub use tags::Tags;
