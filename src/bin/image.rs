//! `sankofa.proxmox.image`: the module binary.

use sankofa_proxmox::ansible::protocol::run_module;
use sankofa_proxmox::{image, interrupt};

fn main() {
    interrupt::install();
    run_module(&image::spec::argument_spec(), image::apply::run);
}
