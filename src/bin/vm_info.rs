//! `sankofa.proxmox.vm_info`: the module binary.

use sankofa_proxmox::ansible::protocol::run_module;
use sankofa_proxmox::{interrupt, vm_info};

fn main() {
    interrupt::install();
    run_module(&vm_info::spec::argument_spec(), vm_info::apply::run);
}
