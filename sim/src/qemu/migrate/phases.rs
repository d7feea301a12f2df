//! The `qmigrate` worker, after pve-guest-common AbstractMigrate.pm (`migrate`: the phases
//! under the config lock, their cleanups, the stamped log) and qemu-server QemuMigrate.pm
//! (`phase1`, `phase2`, `phase2_cleanup`, `phase3_cleanup`), under GuestHelpers.pm's
//! `guest_migration_lock`. It holds the run's state and the order of the phases; the disk
//! copies and the checks it calls live in their own modules.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::local_volumes::LocalVolume;
use super::options::{Opts, in_network};
use super::pve_format::{pve_format_size, round_powerof2, stamp};
use crate::http::handler::wait_until;
use crate::qemu::config_file::file_of;
use crate::qemu::pending::Pending;
use crate::schema;
use crate::state::Sim;
use crate::storage::volumes::{self, render_bytes};
use crate::tasks::{self, INTERRUPT, TaskCtx};

/// How long `guest_migration_lock` waits for `/var/lock/pve-manager/pve-migrate-N`.
const MIGRATION_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// GuestHelpers.pm, `guest_migration_lock`: `/var/lock/pve-manager/pve-migrate-N`, waited for
/// 10 s (PVE::Tools `lock_file_full` prints `trying to acquire lock...` while it waits).
pub(crate) fn migration_locked(
    sim: &Sim,
    ctx: &TaskCtx,
    vmid: u32,
    work: impl FnOnce() -> tasks::Outcome,
) -> tasks::Outcome {
    let free = |st: &crate::state::State| !st.migration_locks.contains(&vmid);
    if !free(&sim.lock()) {
        ctx.log("trying to acquire lock...");
        let got = wait_until(sim, MIGRATION_LOCK_TIMEOUT, free);
        if !got {
            return Err(format!(
                "can't lock file '/var/lock/pve-manager/pve-migrate-{vmid}' - got timeout"
            ));
        }
        ctx.log(" OK");
    }
    {
        let mut st = sim.lock();
        if !free(&st) {
            return Err(format!(
                "can't lock file '/var/lock/pve-manager/pve-migrate-{vmid}' - got timeout"
            ));
        }
        st.migration_locks.insert(vmid);
    }
    let res = work();
    sim.lock().migration_locks.remove(&vmid);
    sim.cv.notify_all();
    res
}

/// One run of `PVE::QemuMigrate->migrate` (`$self`).
pub(super) struct Migration<'a> {
    pub(super) sim: &'a Arc<Sim>,
    pub(super) ctx: &'a TaskCtx,
    pub(super) vmid: u32,
    pub(super) source: String,
    pub(super) target: String,
    pub(super) opts: Opts,
    pub(super) running: bool,
    pub(super) conf: BTreeMap<String, String>,
    pub(super) pending: Pending,
    pub(super) local_volumes: BTreeMap<String, LocalVolume>,
    /// Source volume id → its copy on the target.
    pub(super) volume_map: BTreeMap<String, String>,
    /// Mirrored drives → their drive strings on the target.
    pub(super) target_drives: BTreeMap<String, String>,
    pub(super) errors: bool,
    phase2_errors: bool,
    pub(super) started: Instant,
}

/// An error inside a phase: a stop request reaches it as AbstractMigrate's `$eval_int`
/// handler dies.
fn phase_err(e: String) -> String {
    if e == INTERRUPT {
        "interrupted by signal".into()
    } else {
        e
    }
}

impl<'a> Migration<'a> {
    pub(super) fn new(
        sim: &'a Arc<Sim>,
        ctx: &'a TaskCtx,
        vmid: u32,
        source: String,
        target: String,
        opts: Opts,
    ) -> Self {
        Migration {
            sim,
            ctx,
            vmid,
            source,
            target,
            opts,
            running: false,
            conf: BTreeMap::new(),
            pending: Pending::default(),
            local_volumes: BTreeMap::new(),
            volume_map: BTreeMap::new(),
            target_drives: BTreeMap::new(),
            errors: false,
            phase2_errors: false,
            started: Instant::now(),
        }
    }

    /// AbstractMigrate.pm, `log`: every line stamped, errors marked.
    pub(super) fn log(&self, msg: &str) {
        for line in msg.trim_end().lines() {
            self.ctx.log(format!("{} {line}", stamp()));
        }
    }

    fn log_err(&self, msg: &str) {
        for line in msg.trim_end().lines() {
            self.ctx.log(format!("{} ERROR: {line}", stamp()));
        }
    }

    /// A line printed directly to the task log (the block-job monitor, lvremove).
    pub(super) fn print(&self, msg: &str) {
        self.ctx.log(msg.to_string());
    }

    fn duration(&self) -> String {
        let secs = self.started.elapsed().as_secs();
        format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
    }

    pub(super) fn sleep(&self, d: Duration) -> Result<(), String> {
        self.ctx.sleep(d).map_err(phase_err)
    }

    /// AbstractMigrate.pm, `migrate`: prepare and the phases under `lock_vm` (the config
    /// lock), their cleanups, and the final verdict.
    pub(super) fn migrate(&mut self) -> tasks::Outcome {
        let (sim, vmid, holder) = (self.sim.clone(), self.vmid, self.ctx.upid.clone());
        let locked = sim.lock_config(vmid, &holder, tasks::LOCK_CONFIG_TIMEOUT, || self.phases());
        if let Err(err) = locked {
            self.log_err(&format!(
                "migration aborted (duration {}): {err}",
                self.duration()
            ));
            return Err("migration aborted".into());
        }
        if self.errors {
            self.log_err(&format!(
                "migration finished with problems (duration {})",
                self.duration()
            ));
            return Err("migration problems".into());
        }
        self.log(&format!(
            "migration finished successfully (duration {})",
            self.duration()
        ));
        Ok(0)
    }

    fn phases(&mut self) -> Result<(), String> {
        if let Some(net) = &self.opts.migration_network {
            // SSHInfo.pm, get_ssh_info: the target's address in that network (its mtunnel).
            if !in_network(std::net::Ipv4Addr::LOCALHOST, net) {
                return Err(format!(
                    "failed to get ip for node '{}' in network '{net}'",
                    self.target
                ));
            }
        }
        self.running = self.prepare().map_err(phase_err)?;
        if self.opts.migration_network.is_some() {
            self.log("use dedicated network address for sending migration traffic (127.0.0.1)");
        }
        if let Err(err) = self.phase1().map_err(phase_err) {
            self.log_err(&err);
            self.phase1_cleanup();
            return Err(err);
        }
        if self.running {
            let err = self.phase2().map_err(phase_err).err();
            if let Some(e) = &err {
                self.errors = true;
                self.log_err(&format!("online migrate failure - {e}"));
            }
            self.phase2_cleanup();
        }
        self.phase3_cleanup();
        Ok(())
    }

    /// Reads the VM's config on the source node (`PVE::QemuConfig->load_config`).
    pub(super) fn load(&mut self) -> Result<(), String> {
        let (conf, pending) = file_of(self.sim, &self.source, self.vmid).map_err(|e| e.msg)?;
        self.conf = conf;
        self.pending = pending;
        Ok(())
    }

    /// `PVE::QemuConfig->write_config`.
    fn write(&self) {
        let mut st = self.sim.lock();
        if let Some(vm) = st.vms.get_mut(&self.vmid) {
            vm.config = self.conf.clone();
            vm.pending = self.pending.clone();
        }
    }

    /// QemuMigrate.pm, `phase1`.
    fn phase1(&mut self) -> Result<(), String> {
        self.log(&format!(
            "starting migration of VM {} to node '{}' (127.0.0.1)",
            self.vmid, self.target
        ));
        self.conf.insert("lock".into(), "migrate".into());
        self.write();
        self.scan_local_volumes()
            .map_err(|e| format!("Problem found while scanning volumes - {e}"))?;
        self.config_update_local_disksizes();
        self.write();
        self.sync_offline_local_volumes()
    }

    /// QemuMigrate.pm, `config_update_local_disksizes`: each local drive's `size` as its
    /// volume has it (efidisk and TPM state keep their fixed sizes).
    fn config_update_local_disksizes(&mut self) {
        let keys: Vec<String> = self.conf.keys().cloned().collect();
        for key in keys {
            if !schema::is_drive_key(&key) || key == "efidisk0" || key == "tpmstate0" {
                continue;
            }
            let Ok(mut drive) = schema::parse_drive(&self.conf[&key]) else {
                continue;
            };
            let Some(vol) = self.local_volumes.get(&drive["file"]) else {
                continue;
            };
            let old = drive
                .get("size")
                .and_then(|s| volumes::parse_size(s))
                .unwrap_or(0);
            if old != vol.size {
                let msg = format!(
                    "drive '{key}': size of disk '{}' updated from {} to {}",
                    drive["file"],
                    pve_format_size(old),
                    pve_format_size(vol.size)
                );
                drive.insert("size".into(), pve_format_size(vol.size));
                self.conf
                    .insert(key.clone(), schema::print_property_string("file", &drive));
                self.log(&msg);
            }
        }
        // update_efidisk_size: the size of the OVMF vars the EFI disk holds (get_efivars_size:
        // 540672 bytes for `efitype=4m`, else 131072), whatever its volume has;
        // update_tpmstate_size: TPMSTATE_DISK_SIZE (4 MiB).
        for key in ["efidisk0", "tpmstate0"] {
            let Some(Ok(mut drive)) = self.conf.get(key).map(|v| schema::parse_drive(v)) else {
                continue;
            };
            let size: u64 = match key {
                "efidisk0" if drive.get("efitype").is_some_and(|t| t == "4m") => 540_672,
                "efidisk0" => 131_072,
                _ => 4 << 20,
            };
            drive.insert("size".into(), pve_format_size(size));
            self.conf
                .insert(key.into(), schema::print_property_string("file", &drive));
        }
    }

    /// QemuMigrate.pm, `phase1_cleanup`: the lock removed, the copies on the target freed.
    fn phase1_cleanup(&mut self) {
        self.log("aborting phase 1 - cleanup resources");
        self.conf.remove("lock");
        self.write();
        self.cleanup_remotedisks();
    }

    /// QemuMigrate.pm, `phase2` with `phase2_start_local_cluster`: the VM started on the target
    /// waiting for the incoming state, its attached local disks mirrored there over NBD, then
    /// its memory.
    fn phase2(&mut self) -> Result<(), String> {
        let vmid = self.vmid;
        self.log(&format!(
            "starting VM {vmid} on remote node '{}'",
            self.target
        ));
        let mirrors = self.alloc_nbd_disks()?;
        self.log("start remote tunnel");
        self.log("ssh tunnel ver 1");
        self.mirror_drives(&mirrors)?;
        self.migrate_memory()?;
        self.complete_mirrors(&mirrors);
        Ok(())
    }

    /// The memory part of `phase2`: the parameters set, then `query-migrate` once a second
    /// until QEMU reports `completed`.
    fn migrate_memory(&mut self) -> Result<(), String> {
        // Secure migrations tunnel a UNIX socket over ssh; insecure ones go to the target's
        // migration port directly (phase2: `$state_uri`).
        let uri = if self.opts.insecure {
            "tcp:127.0.0.1:60000".to_string()
        } else {
            format!("unix:/run/qemu-server/{}.migrate", self.vmid)
        };
        self.log(&format!("starting online/live migration on {uri}"));
        self.log("set migration capabilities");
        if let Some(limit) = self.opts.bwlimit.filter(|l| *l > 0) {
            self.log(&format!(
                "migration speed limit: {}/s",
                render_bytes(limit * 1024)
            ));
        }
        let downtime = self
            .conf
            .get("migrate_downtime")
            .and_then(|d| d.parse::<f64>().ok())
            .unwrap_or(0.1);
        self.log(&format!(
            "migration downtime limit: {} ms",
            (downtime * 1000.0) as u64
        ));
        let memory_mib: u64 = self
            .conf
            .get("memory")
            .map(|m| {
                m.split(',')
                    .find_map(|p| p.strip_prefix("current="))
                    .unwrap_or(m)
                    .to_string()
            })
            .and_then(|m| m.parse().ok())
            .unwrap_or(512);
        let total = memory_mib * 1024 * 1024;
        self.log(&format!(
            "migration cachesize: {}",
            render_bytes(round_powerof2(total / 10))
        ));
        self.log("set migration parameters");
        self.log(&format!("start migrate command to {uri}"));
        let length = self
            .sim
            .task_duration("qmigrate")
            .max(Duration::from_millis(1));
        let start = Instant::now();
        loop {
            self.sleep(Duration::from_secs(1).min(length))?;
            let secs = start.elapsed().as_secs_f64();
            let share = (secs / length.as_secs_f64()).min(1.0);
            let done = (total as f64 * share) as u64;
            if share >= 1.0 {
                if let Some(speed) = total.checked_div(secs as u64) {
                    self.log(&format!(
                        "average migration speed: {}/s - downtime 38 ms",
                        render_bytes(speed)
                    ));
                }
                self.log(&format!(
                    "migration completed, transferred {} VM-state",
                    render_bytes(total)
                ));
                self.log("migration status: completed");
                return Ok(());
            }
            self.log(&format!(
                "migration active, transferred {} of {} VM-state, {}/s",
                render_bytes(done),
                render_bytes(total),
                render_bytes((done as f64 / secs.max(0.001)) as u64)
            ));
        }
    }

    /// QemuMigrate.pm, `phase2_cleanup`, after a failed phase 2: the migration cancelled,
    /// the lock removed, the VM started on the target stopped and its volumes freed; the VM
    /// goes on running here.
    fn phase2_cleanup(&mut self) {
        if !self.errors {
            return;
        }
        self.phase2_errors = true;
        self.log("aborting phase 2 - cleanup resources");
        self.log("migrate_cancel");
        self.conf.remove("lock");
        self.write();
        for drive in self.target_drives.keys() {
            self.print(&format!("drive-{drive}: Cancelling block job"));
            self.print(&format!("drive-{drive}: Done."));
        }
        self.cleanup_remotedisks();
    }

    /// QemuMigrate.pm, `phase3_cleanup`: the volume ids of the copies written, the config
    /// moved to the target (the VM is listed there from now on), a live VM resumed there and
    /// stopped here, the source's volumes freed, and `qm unlock` on the target.
    fn phase3_cleanup(&mut self) {
        if self.phase2_errors {
            return;
        }
        let rename = |value: &str, map: &BTreeMap<String, String>| -> String {
            let file = value.split(',').next().unwrap_or("");
            match map.get(file) {
                Some(new) => format!("{new}{}", &value[file.len()..]),
                None => value.to_string(),
            }
        };
        // update_volume_ids: the drives, the unused volumes and the pending values.
        let map = self.volume_map.clone();
        for (key, value) in self.conf.iter_mut() {
            if schema::is_drive_key(key) || key.starts_with("unused") {
                *value = rename(value, &map);
            }
        }
        for (key, value) in self.pending.set.iter_mut() {
            if schema::is_drive_key(key) || key.starts_with("unused") {
                *value = rename(value, &map);
            }
        }
        for (drive, drivestr) in &self.target_drives {
            self.conf.insert(drive.clone(), drivestr.clone());
        }
        {
            let mut st = self.sim.lock();
            let pid = 10_000 + (self.sim.random() % 50_000) as u32;
            if let Some(vm) = st.vms.get_mut(&self.vmid) {
                vm.config = self.conf.clone();
                vm.pending = self.pending.clone();
                // move_config_to_node: from here on the VM is the target's.
                vm.node = self.target.clone();
                // A live VM goes on in a new QEMU process on the target; the guest (and its
                // agent) runs on.
                if vm.running {
                    vm.pid = pid;
                }
            }
        }
        self.sim.cv.notify_all();
        if !self.target_drives.is_empty() {
            self.log("stopping NBD storage migration server on target.");
        }
        let fstrim = self
            .conf
            .get("agent")
            .is_some_and(|a| a.split(',').any(|p| p == "fstrim_cloned_disks=1"));
        if self.running && !self.target_drives.is_empty() && fstrim {
            self.log("issuing guest fstrim");
        }
        // Destroy the local copies (vdisk_free; LVM's lvremove prints its line).
        let data = self.sim.opts.data_dir.clone();
        for volid in self.local_volumes.keys() {
            let Ok(vol) = volumes::parse_volume(&data, &self.source, volid) else {
                continue;
            };
            if std::fs::remove_file(&vol.path).is_ok()
                && volumes::storage(&vol.storage).is_some_and(|s| s.kind == "lvmthin")
            {
                let lv = vol.name.rsplit('/').next().unwrap_or(&vol.name).to_string();
                self.print(&format!("  Logical volume \"{lv}\" successfully removed."));
            }
        }
        if self
            .ctx
            .sleep(self.sim.task_duration("qmigrate") / 2)
            .is_err()
        {
            // A stop request now is delayed (AbstractMigrate's handler outside `$eval_int`).
            self.log_err("received interrupt - delayed");
        }
        // `qm unlock` on the target.
        self.conf.remove("lock");
        self.write();
    }
}
