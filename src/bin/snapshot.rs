//! `sankofa.proxmox.snapshot`: the module binary.

use sankofa_proxmox::ansible::protocol::run_module;
use sankofa_proxmox::{interrupt, snapshot};

fn main() {
    interrupt::install();
    run_module(&snapshot::spec::argument_spec(), snapshot::apply::run);
}
