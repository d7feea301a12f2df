//! A VM's config as pve-guest-common's AbstractConfig and qemu-server's QemuConfig.pm keep
//! it: loading it (or PVE's "does not exist"), its `lock`, its digest, and the values PVE
//! generates for it (MAC addresses, UUIDs). Every VM handler reads configs through here.

use std::collections::BTreeMap;

use crate::http::handler::ApiErr;
use crate::qemu::pending::Pending;
use crate::state::Sim;
use crate::storage::volumes::Volume;

pub(crate) fn no_conf(node: &str, vmid: u32) -> ApiErr {
    ApiErr::die(format!(
        "Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
    ))
}

/// The config of a VM on this node with its pending section, or PVE's "does not exist".
pub(crate) fn file_of(
    sim: &Sim,
    node: &str,
    vmid: u32,
) -> Result<(BTreeMap<String, String>, Pending), ApiErr> {
    let st = sim.lock();
    match st.vms.get(&vmid) {
        Some(vm) if vm.node == node => Ok((vm.config.clone(), vm.pending.clone())),
        _ => Err(no_conf(node, vmid)),
    }
}

/// The config of a VM on this node, or PVE's "does not exist".
pub(crate) fn config_of(
    sim: &Sim,
    node: &str,
    vmid: u32,
) -> Result<BTreeMap<String, String>, ApiErr> {
    let st = sim.lock();
    match st.vms.get(&vmid) {
        Some(vm) if vm.node == node => Ok(vm.config.clone()),
        _ => Err(no_conf(node, vmid)),
    }
}

pub(crate) fn check_lock(conf: &BTreeMap<String, String>) -> Result<(), String> {
    match conf.get("lock") {
        Some(l) => Err(format!("VM is locked ({l})")),
        None => Ok(()),
    }
}

/// The config file's text as QemuServer.pm `write_vm_config` writes it: the description as
/// `#` comment lines (Tools.pm encode_text) first, then `key: value` lines sorted, then the
/// `[PENDING]` section.
pub fn file_text(conf: &BTreeMap<String, String>, pending: &Pending) -> String {
    let mut text = String::new();
    if let Some(description) = conf.get("description") {
        for line in description.split('\n') {
            text.push('#');
            text.push_str(&encode_text(line));
            text.push('\n');
        }
    }
    for (k, v) in conf.iter().filter(|(k, _)| k.as_str() != "description") {
        text.push_str(&format!("{k}: {v}\n"));
    }
    text.push_str(&pending.section(conf));
    text
}

/// ParseUtils.pm `encode_text`: control characters, `%`, `:` and bytes above 0x7e as `%XX`.
fn encode_text(line: &str) -> String {
    line.bytes()
        .map(|b| match b {
            0x20..=0x24 | 0x26..=0x39 | 0x3b..=0x7e => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// SHA-1 of the config file's text ([`file_text`]), hex: PVE's `digest`.
pub fn digest(conf: &BTreeMap<String, String>, pending: &Pending) -> String {
    let text = file_text(conf, pending);
    crate::tools::sha1_hex(&text)
}

pub(crate) fn free_volumes(vols: &[Volume]) {
    for v in vols {
        let _ = std::fs::remove_file(&v.path);
    }
}

pub(crate) fn random_mac(sim: &Sim) -> String {
    let r = sim.random();
    format!(
        "BC:24:11:{:02X}:{:02X}:{:02X}",
        (r >> 8) & 0xff,
        (r >> 16) & 0xff,
        (r >> 24) & 0xff
    )
}

pub(crate) fn uuid(sim: &Sim) -> String {
    let a = sim.random();
    let b = sim.random();
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}
