//! The copies `clone_disk` makes for `move_vm_disk` other than a plain `qemu-img convert`: a
//! running VM's disk by a drive mirror (`QemuServer/BlockJob.pm`: `mirror`, then
//! `qemu_drive_mirror` before machine version 10.0 and `blockdev_mirror` from it, each watched
//! by `monitor` with the `complete` completion), and an EFI disk's vars by `qemu-img dd`
//! (`clone_disk_copy_data`). Kept apart from `disks.rs` because the copies, their pacing and
//! the lines the block-job monitor prints are one concern, whichever handler asks for them.

use std::process::Command;
use std::time::Duration;

use crate::qemu::migrate::pve_format::render_duration;
use crate::storage::volumes::{self, Volume, render_bytes};
use crate::tasks::TaskCtx;

/// The block job's id as `monitor` names it in its lines: `drive-scsi0` for
/// `qemu_drive_mirror` (`drive-mirror` on the drive), `mirror-scsi0` for `blockdev_mirror`
/// (machine version 10.0 or later: `is_machine_version_at_least($machine_type, 10, 0)`).
/// `machine` is the config's; without a version the VM runs pve-sim's running machine
/// (`pc-i440fx-9.2+pve1`, as its snapshots record it).
pub fn job_id(machine: Option<&str>, drive: &str) -> String {
    let version = machine
        .map(|m| m.split(',').next().unwrap_or(m))
        .map(|m| m.strip_prefix("type=").unwrap_or(m))
        .and_then(|m| m.rsplit_once('-').map(|(_, v)| v.to_string()))
        .and_then(|v| {
            let v = v.split('+').next().unwrap_or(&v).to_string();
            let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
        });
    match version {
        Some((major, _)) if major >= 10 => format!("mirror-{drive}"),
        _ => format!("drive-{drive}"),
    }
}

/// One `monitor` line for a job not yet ready: `drive-scsi0: transferred 512.0 MiB of 1.0 GiB
/// (50.00%) in 1s` (render_bytes with one decimal, the percent with two, render_duration),
/// `, ready` once QEMU says so.
pub fn progress_line(job: &str, done: u64, total: u64, secs: u64, ready: bool) -> String {
    let pct = if total > 0 {
        done as f64 * 100.0 / total as f64
    } else {
        100.0
    };
    format!(
        "{job}: transferred {} of {} ({pct:.2}%) in {}{}",
        render_bytes(done),
        render_bytes(total),
        render_duration(secs),
        if ready { ", ready" } else { "" }
    )
}

/// Mirrors `src` (a running VM's drive `drive`) onto the new volume `dst` (in its format, on
/// its storage), logging what `common_mirror_qmp_options` and `monitor` print: the start
/// (with `bwlimit` in KiB/s where one applies), a line a second while the copy runs (at the
/// pace `--import-rate` gives, at once without one), the ready line, `all 'mirror' jobs are
/// ready`, then the job completed (the drive switched to the target) and finished. Returns the
/// target's size.
pub fn mirror(
    ctx: &TaskCtx,
    src: &Volume,
    dst: &Volume,
    job: &str,
    drive: &str,
    bwlimit: Option<u64>,
) -> Result<u64, String> {
    let src_fmt = volumes::detect_format(&src.path)?;
    let total = volumes::virtual_size(&src.path, &src_fmt)?;
    let (dst_fmt, size) = (&dst.format, volumes::allocated_size(&dst.storage, total));
    volumes::create_image(&dst.path, dst_fmt, size)?;
    // What the allocation printed, as before an offline copy (`storage::volumes::import`).
    ctx.log(format!(
        "Formatting '{}', fmt={dst_fmt} size={size} preallocation=off",
        dst.path.display()
    ));
    match bwlimit {
        Some(limit) => ctx.log(format!(
            "drive mirror is starting for drive-{drive} with bandwidth limit: {limit} KiB/s"
        )),
        None => ctx.log(format!("drive mirror is starting for drive-{drive}")),
    }
    let out = Command::new("qemu-img")
        .args(["convert", "-n", "-f", &src_fmt, "-O", dst_fmt])
        .arg(&src.path)
        .arg(&dst.path)
        .output()
        .map_err(|e| format!("mirroring error: unable to run qemu-img: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "mirroring error: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    // The monitor's first look is at once, then one a second (`sleep 1`); QEMU's offset
    // grows by the rate each second.
    let mut secs = 0;
    if let Some(rate) = ctx.sim.opts.import_rate.filter(|r| *r > 0) {
        ctx.log(progress_line(job, 0, total, 0, false));
        loop {
            ctx.sleep(Duration::from_secs(1))
                .map_err(|e| format!("block job (mirror) error: {e}"))?;
            secs += 1;
            let done = rate.saturating_mul(secs).min(total);
            if done >= total {
                break;
            }
            ctx.log(progress_line(job, done, total, secs, false));
        }
    }
    ctx.log(progress_line(job, total, total, secs, true));
    ctx.log("all 'mirror' jobs are ready");
    ctx.log(format!("{job}: Completing block job..."));
    ctx.log(format!("{job}: Completed successfully."));
    ctx.log(format!("{job}: mirror-job finished"));
    Ok(size)
}

/// An EFI disk copied offline (`clone_disk_copy_data`'s `efidisk0` branch): only the OVMF
/// vars, `efisize` bytes (`get_efivars_size`), by `qemu-img dd … osize=…`, onto a volume of
/// that size as the target storage allocates it (4 MiB extents on LVM-thin). Returns that size.
pub fn copy_efivars(src: &Volume, dst: &Volume, efisize: u64) -> Result<u64, String> {
    let src_fmt = volumes::detect_format(&src.path)?;
    if let Some(dir) = dst.path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let out = Command::new("qemu-img")
        .args(["dd", "-f", &src_fmt, "-O", &dst.format, "count=1"])
        .arg(format!("bs={efisize}"))
        .arg(format!("if={}", src.path.display()))
        .arg(format!("of={}", dst.path.display()))
        .output()
        .map_err(|e| format!("unable to run qemu-img: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "command 'qemu-img dd' failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let size = volumes::allocated_size(&dst.storage, efisize);
    if size != efisize {
        volumes::resize_image(&dst.path, &dst.format, size)?;
    }
    Ok(size)
}

/// `get_efivars_size` of an EFI disk: the OVMF vars template's size, 540672 bytes for
/// `efitype=4m`, 131072 for the 2m default.
pub fn efivars_size(efidisk: &std::collections::BTreeMap<String, String>) -> u64 {
    match efidisk.get("efitype").map(String::as_str) {
        Some("4m") => 540672,
        _ => 131072,
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn job_ids_follow_the_machine_version() {
        assert_eq!(job_id(None, "scsi0"), "drive-scsi0");
        assert_eq!(job_id(Some("q35"), "scsi0"), "drive-scsi0");
        assert_eq!(
            job_id(Some("pc-i440fx-9.2+pve1"), "virtio0"),
            "drive-virtio0"
        );
        assert_eq!(job_id(Some("pc-q35-10.0"), "scsi1"), "mirror-scsi1");
        assert_eq!(
            job_id(Some("type=pc-q35-10.1+pve1,viommu=intel"), "scsi0"),
            "mirror-scsi0"
        );
    }

    #[test]
    fn progress_lines_are_the_monitors() {
        assert_eq!(
            progress_line("drive-scsi0", 512 << 20, 1 << 30, 1, false),
            "drive-scsi0: transferred 512.0 MiB of 1.0 GiB (50.00%) in 1s"
        );
        assert_eq!(
            progress_line("drive-scsi0", 1 << 30, 1 << 30, 65, true),
            "drive-scsi0: transferred 1.0 GiB of 1.0 GiB (100.00%) in 1m 5s, ready"
        );
        assert_eq!(
            progress_line("mirror-scsi0", 0, 1 << 30, 0, false),
            "mirror-scsi0: transferred 0.0 B of 1.0 GiB (0.00%) in 0s"
        );
    }
}
