//! Moving a VM's local disks, after pve-storage Storage.pm (`storage_migrate`, dd's progress
//! lines, `find_free_diskname`) for offline volumes and qemu-server QemuMigrate.pm (`phase2`'s
//! drive mirrors, QemuServer/BlockJob.pm `monitor`'s `transferred …` lines) for a running
//! VM's attached disks, and `cleanup_remotedisks` when a phase fails. Kept apart because the
//! byte copies and their pacing are one concern, whichever phase asks for them.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::local_volumes::{LocalVolume, Reference};
use super::phases::Migration;
use super::prepare::storage_def;
use super::pve_format::{dd_line, render_duration};
use crate::schema;
use crate::storage::volumes::{self, render_bytes};

/// A byte-exact copy of a volume's file (what `pvesm export … | pvesm import …` moves),
/// readable by its owner only, holes kept.
fn copy_file(src: &Path, dst: &Path) -> Result<(), String> {
    if let Some(dir) = dst.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let out = Command::new("cp")
        .arg("--sparse=always")
        .arg(src)
        .arg(dst)
        .output()
        .map_err(|e| format!("unable to copy '{}': {e}", src.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    std::fs::set_permissions(dst, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", dst.display()))
}

/// What a drive mirror leaves on the target volume: the `size` bytes the guest sees of the
/// source (an EFI disk's vars, not its whole LV), in the target's format.
fn mirror_copy(src: &Path, dst: &Path, dst_fmt: &str, size: u64) -> Result<(), String> {
    let src_fmt = volumes::detect_format(src)?;
    let whole = volumes::virtual_size(src, &src_fmt)? <= size;
    let mut cmd = Command::new("qemu-img");
    if whole {
        cmd.args(["convert", "-n", "-f", &src_fmt, "-O", dst_fmt])
            .arg(src)
            .arg(dst);
    } else {
        cmd.args(["dd", "-f", &src_fmt, "-O", dst_fmt, "count=1"])
            .arg(format!("bs={size}"))
            .arg(format!("if={}", src.display()))
            .arg(format!("of={}", dst.display()));
    }
    let out = cmd
        .output()
        .map_err(|e| format!("unable to run qemu-img: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    std::fs::set_permissions(dst, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", dst.display()))
}

/// A drive mirrored to the target: its drive key, its volume here, its new volume there,
/// that volume's format and the size the guest sees.
pub(super) type Mirror = (String, String, String, String, u64);

impl Migration<'_> {
    /// The name a volume gets on the target storage (pve-storage Storage.pm,
    /// `storage_migrate` and `$volname_for_storage`): the same name on a storage of the same
    /// type, else `N/name.format` on a directory storage or the bare name on LVM-thin.
    fn target_volname(&self, volid: &str, vol: &LocalVolume) -> Result<String, String> {
        let (sid, name) = crate::tools::volume_parts(volid).unwrap_or_default();
        let (src, dst) = (storage_def(sid)?, storage_def(&vol.targetsid)?);
        if src.kind == dst.kind {
            return Ok(name.to_string());
        }
        let valid: &[&str] = if dst.kind == "dir" {
            &["raw", "qcow2", "vmdk"]
        } else {
            &["raw"]
        };
        if !valid.contains(&vol.format.as_str()) {
            return Err(format!(
                "unsupported format '{}' for storage type {}",
                vol.format, dst.kind
            ));
        }
        let file = name.rsplit('/').next().unwrap_or(name);
        let bare = file
            .strip_suffix(&format!(".{}", vol.format))
            .unwrap_or(file);
        Ok(if dst.kind == "dir" {
            format!("{}/{bare}.{}", self.vmid, vol.format)
        } else {
            bare.to_string()
        })
    }

    /// A free `vm-N-disk-K` name on the target storage (pve-storage, `find_free_diskname`).
    fn free_name(&self, sid: &str, fmt: &str) -> Result<String, String> {
        let taken: Vec<String> = self.volume_map.values().cloned().collect();
        volumes::alloc_name(
            &self.sim.opts.data_dir,
            &self.target,
            sid,
            self.vmid,
            fmt,
            &taken,
        )
    }

    /// QemuMigrate.pm, `sync_offline_local_volumes`: each volume that does not move with the
    /// running VM, copied with `storage_migrate` (`pvesm export | pvesm import` over ssh).
    pub(super) fn sync_offline_local_volumes(&mut self) -> Result<(), String> {
        let offline: Vec<(String, LocalVolume)> = self
            .local_volumes
            .iter()
            .filter(|(_, v)| !v.online)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !offline.is_empty() {
            self.log("copying local disk images");
        }
        for (volid, vol) in offline {
            let new_volid = self.storage_migrate(&volid, &vol).map_err(|e| {
                format!(
                    "storage migration for '{volid}' to storage '{}' failed - {e}",
                    vol.targetsid
                )
            })?;
            self.log(&format!("volume '{volid}' is '{new_volid}' on the target"));
            self.volume_map.insert(volid, new_volid);
        }
        Ok(())
    }

    /// pve-storage Storage.pm, `storage_migrate` for one volume: the name on the target (a
    /// fresh one when it is taken and renaming is allowed, which the cloud-init drive is not),
    /// then the byte stream, logged as dd logs it.
    fn storage_migrate(&mut self, volid: &str, vol: &LocalVolume) -> Result<String, String> {
        let data = &self.sim.opts.data_dir;
        let mut name = self.target_volname(volid, vol)?;
        let target_kind = storage_def(&vol.targetsid)?.kind;
        let exists = |name: &str| {
            volumes::parse_volume(data, &self.target, &format!("{}:{name}", vol.targetsid))
                .map(|v| v.path.exists())
        };
        if exists(&name)? {
            if vol.is_cloudinit {
                return Err(format!("volume '{}:{name}' already exists", vol.targetsid));
            }
            name = self.free_name(&vol.targetsid, &vol.format)?;
        }
        let new_volid = format!("{}:{name}", vol.targetsid);
        let src = volumes::parse_volume(data, &self.source, volid)?;
        let dst = volumes::parse_volume(data, &self.target, &new_volid)?;
        copy_file(&src.path, &dst.path)?;
        // The stream is recorded at once so that a failed run frees it (cleanup_remotedisks).
        self.volume_map.insert(volid.to_string(), new_volid.clone());
        let bytes = std::fs::metadata(&src.path).map(|m| m.len()).unwrap_or(0);
        // LVM exports with `dd bs=64k`, file storages with `bs=4k`.
        let block: u64 = if storage_def(volid.split(':').next().unwrap_or(""))?.kind == "lvmthin" {
            64 << 10
        } else {
            4 << 10
        };
        let secs = self.paced(bytes, |m, done, secs| {
            // storage_migrate shows dd's progress every 3 s in the first minute, every 10 s
            // up to ten minutes, every 30 s after.
            let whole = secs as u64;
            let every = match whole {
                0..60 => 3,
                60..600 => 10,
                _ => 30,
            };
            if whole.is_multiple_of(every) {
                m.log(&dd_line(done, secs, false));
            }
        })?;
        let (full, partial) = (bytes / block, u64::from(bytes % block != 0));
        self.log(&format!("{full}+{partial} records in"));
        self.log(&format!("{full}+{partial} records out"));
        self.log(&dd_line(bytes, secs.max(0.000_001), true));
        if target_kind == "lvmthin" {
            self.log(&format!(
                "  Logical volume \"{}\" created.",
                name.rsplit('/').next().unwrap_or(&name)
            ));
        }
        self.log(&format!("successfully imported '{new_volid}'"));
        Ok(new_volid)
    }

    /// Lets a transfer of `total` bytes take the time `--import-rate` gives it (at once
    /// without one), calling `report(done, seconds)` once a second meanwhile. Returns the
    /// seconds it took.
    fn paced(&self, total: u64, mut report: impl FnMut(&Self, u64, f64)) -> Result<f64, String> {
        let start = Instant::now();
        let Some(rate) = self.sim.opts.import_rate.filter(|r| *r > 0) else {
            return Ok(start.elapsed().as_secs_f64());
        };
        loop {
            self.sleep(Duration::from_secs(1))?;
            let secs = start.elapsed().as_secs_f64();
            let done = ((rate as f64 * secs) as u64).min(total);
            if done >= total {
                return Ok(secs);
            }
            report(self, done, secs);
        }
    }

    /// QemuMigrate.pm, `phase2`: vm_migrate_get_nbd_disks and, on the target,
    /// vm_migrate_alloc_nbd_disks. Returns the drives to mirror.
    pub(super) fn alloc_nbd_disks(&mut self) -> Result<Vec<Mirror>, String> {
        // vm_migrate_get_nbd_disks: the attached disks but CD-ROMs and the TPM state, by
        // drive key (vm_migrate_alloc_nbd_disks allocates them in that order).
        let mut online: Vec<(String, String, LocalVolume)> = self
            .local_volumes
            .iter()
            .filter(|(_, v)| v.online && v.reference == Reference::Attached)
            .filter_map(|(k, v)| Some((v.drivename.clone()?, k.clone(), v.clone())))
            .filter(|(key, ..)| key != "tpmstate0")
            .collect();
        online.sort_by(|a, b| a.0.cmp(&b.0));
        // vm_migrate_alloc_nbd_disks on the target: a new volume for each mirrored drive, in
        // the source's format where the target storage has it, else its default (raw), of the
        // drive's size.
        let mut mirrors = Vec::new();
        for (drive_key, volid, vol) in &online {
            let drive_key = drive_key.clone();
            let Ok(mut drive) = schema::parse_drive(&self.conf[&drive_key]) else {
                continue;
            };
            let size = drive
                .get("size")
                .and_then(|s| volumes::parse_size(s))
                .unwrap_or(vol.size);
            let def = storage_def(&vol.targetsid)?;
            let fmt =
                if def.kind == "dir" && ["raw", "qcow2", "vmdk"].contains(&vol.format.as_str()) {
                    vol.format.clone()
                } else {
                    "raw".to_string()
                };
            let name = self.free_name(&vol.targetsid, &fmt)?;
            let new_volid = format!("{}:{name}", vol.targetsid);
            let dst = volumes::parse_volume(&self.sim.opts.data_dir, &self.target, &new_volid)?;
            volumes::create_image(
                &dst.path,
                &fmt,
                volumes::allocated_size(&vol.targetsid, size),
            )?;
            self.volume_map.insert(volid.clone(), new_volid.clone());
            drive.insert("file".into(), new_volid.clone());
            drive.insert("format".into(), fmt.clone());
            self.target_drives.insert(
                drive_key.clone(),
                schema::print_property_string("file", &drive),
            );
            self.log(&format!("volume '{volid}' is '{new_volid}' on the target"));
            mirrors.push((drive_key, volid.clone(), new_volid, fmt, size));
        }
        Ok(mirrors)
    }

    /// QemuMigrate.pm, `phase2`: a drive-mirror to the target's NBD export for each drive,
    /// watched by QemuServer/BlockJob.pm `monitor` until ready, then switched to actively
    /// synced mode.
    pub(super) fn mirror_drives(&mut self, mirrors: &[Mirror]) -> Result<(), String> {
        let vmid = self.vmid;
        if !mirrors.is_empty() {
            self.log("starting storage migration");
        }
        let data = self.sim.opts.data_dir.clone();
        for (drive_key, volid, new_volid, fmt, size) in mirrors {
            self.log(&format!(
                "{drive_key}: start migration to nbd:unix:/run/qemu-server/{vmid}_nbd.migrate:exportname=drive-{drive_key}"
            ));
            match self.opts.bwlimit {
                Some(limit) => self.print(&format!(
                    "drive mirror is starting for drive-{drive_key} with bandwidth limit: {limit} KiB/s"
                )),
                None => self.print(&format!("drive mirror is starting for drive-{drive_key}")),
            }
            let src = volumes::parse_volume(&data, &self.source, volid)?;
            let dst = volumes::parse_volume(&data, &self.target, new_volid)?;
            mirror_copy(&src.path, &dst.path, fmt, *size)?;
            let total = *size;
            let job = format!("drive-{drive_key}");
            let line = |done: u64, secs: f64, ready: bool| {
                let pct = if total > 0 {
                    done as f64 * 100.0 / total as f64
                } else {
                    100.0
                };
                format!(
                    "{job}: transferred {} of {} ({pct:.2}%) in {}{}",
                    render_bytes(done),
                    render_bytes(total),
                    render_duration(secs.round() as u64),
                    if ready { ", ready" } else { "" }
                )
            };
            // The monitor's first look is at once.
            if self.sim.opts.import_rate.is_some() {
                self.print(&line(0, 0.0, false));
            }
            let secs = self.paced(total, |m, done, secs| m.print(&line(done, secs, false)))?;
            self.print(&line(total, secs, true));
            self.print("all 'mirror' jobs are ready");
        }
        if !mirrors.is_empty() {
            self.log("switching mirror jobs to actively synced mode");
            for (drive_key, ..) in mirrors {
                self.print(&format!(
                    "drive-{drive_key}: switching to actively synced mode"
                ));
                self.print(&format!(
                    "drive-{drive_key}: successfully switched to actively synced mode"
                ));
            }
        }
        Ok(())
    }

    /// QemuMigrate.pm, `phase2` after the memory moved: the mirror jobs completed.
    pub(super) fn complete_mirrors(&self, mirrors: &[Mirror]) {
        if !mirrors.is_empty() {
            // BlockJob::monitor with 'cancel': the source lets go of the NBD targets.
            self.print("all 'mirror' jobs are ready");
            for (drive_key, ..) in mirrors {
                self.print(&format!("drive-{drive_key}: Completing block job..."));
                self.print(&format!("drive-{drive_key}: Completed successfully."));
            }
            for (drive_key, ..) in mirrors {
                self.print(&format!("drive-{drive_key}: mirror-job finished"));
            }
        }
    }

    /// QemuMigrate.pm, `cleanup_remotedisks`: `pvesm free` on the target for every copy.
    pub(super) fn cleanup_remotedisks(&mut self) {
        let data = &self.sim.opts.data_dir;
        for volid in self.volume_map.values() {
            if let Ok(vol) = volumes::parse_volume(data, &self.target, volid) {
                let _ = std::fs::remove_file(&vol.path);
            }
        }
    }
}
