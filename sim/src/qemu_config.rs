//! A VM's config as pve-guest-common's AbstractConfig and qemu-server's QemuConfig.pm keep
//! it: loading it (or PVE's "does not exist"), its `lock`, its digest, and the values PVE
//! generates for it (MAC addresses, UUIDs). Every VM handler reads configs through here.

use std::collections::BTreeMap;

use crate::handler::ApiErr;
use crate::pending::Pending;
use crate::state::Sim;
use crate::storage::Volume;

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

/// SHA-1 of the config file as PVE would write it (its `[PENDING]` section included), hex.
pub fn digest(conf: &BTreeMap<String, String>, pending: &Pending) -> String {
    let mut text: String = conf.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
    text.push_str(&pending.section());
    let d = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, text.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
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
