//! `sankofa.proxmox.vm`: the module binary.

use sankofa_proxmox::ansible::protocol::run_module;
use sankofa_proxmox::{interrupt, vm};

fn main() {
    interrupt::install();
    run_module(&vm::spec::argument_spec(), vm::apply::run);
}
