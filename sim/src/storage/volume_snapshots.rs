//! A snapshot's storage side, after pve-storage: which volumes of a config snapshot
//! (QemuConfig.pm `has_feature`, Storage.pm `volume_has_feature`), and `volume_snapshot`,
//! `volume_snapshot_rollback`, `volume_snapshot_delete` on real files: `qemu-img snapshot
//! -c/-a/-d` for a qcow2 one (Plugin.pm), a sparse copy beside a raw LVM-thin one
//! (`snap_<lv>_<snap>`, as LvmThinPlugin.pm's `lvcreate -s` names it).
//!
//! Apart from `snapshots` (the config side: sections, locks, the workers), which uses it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::schema;
use crate::state::Sim;
use crate::storage::volumes;

/// The drives of a config section that hold a volume: (key, volid), CD-ROMs left out
/// (Drive.pm drive_is_cdrom: `media=cdrom`, the cloud-init drive included).
pub fn volumes(conf: &BTreeMap<String, String>) -> Vec<(String, String)> {
    conf.iter()
        .filter(|(k, _)| schema::is_drive_key(k))
        .filter_map(|(k, v)| {
            let file = v.split(',').next().unwrap_or("");
            let cdrom = v.split(',').any(|p| p == "media=cdrom");
            (!cdrom && file != "none" && !file.is_empty()).then(|| (k.clone(), file.to_string()))
        })
        .collect()
}

/// pve-storage `volume_has_feature($cfg, 'snapshot', $volid)` for a current volume: the
/// directory-like plugins (Plugin.pm) snapshot qcow2 (and qed) files only; LVM-thin and RBD
/// snapshot any volume but a template's base volume; plain LVM only qcow2 (volume chains),
/// which pve-sim's raw LVM volumes are not; an absolute path cannot be snapshotted.
fn can_snapshot(volid: &str) -> bool {
    let Some((sid, name)) = crate::tools::volume_parts(volid) else {
        return false;
    };
    let Some(def) = volumes::storage(sid) else {
        return false;
    };
    let own = name.rsplit('/').next().unwrap_or(name);
    let format = own.rsplit_once('.').map(|(_, ext)| ext).unwrap_or("raw");
    match def.kind {
        "lvmthin" | "rbd" => !own.starts_with("base-"),
        "lvm" => false,
        _ => matches!(format, "qcow2" | "qed"),
    }
}

/// QemuConfig.pm `has_feature('snapshot', $conf)`: every volume but CD-ROMs can snapshot.
pub fn has_snapshot_feature(conf: &BTreeMap<String, String>) -> bool {
    volumes(conf).iter().all(|(_, volid)| can_snapshot(volid))
}

/// The file behind a volume on this node.
pub fn volume_path(sim: &Sim, node: &str, volid: &str) -> Result<PathBuf, String> {
    volumes::parse_volume(&sim.opts.data_dir, node, volid).map(|v| v.path)
}

fn is_qcow2(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"QFI\xfb"
}

/// Where a raw volume's snapshot is kept: `snap_<volume>_<snap>` beside it (LvmThinPlugin.pm,
/// `snap_${volname}_$snap`).
fn snap_copy(path: &Path, snap: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("snap_{stem}_{snap}.raw"))
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: unable to run: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// What is done to one volume's snapshot.
#[derive(Clone, Copy)]
pub enum VolumeOp {
    Create,
    Rollback,
    Delete,
}

/// pve-storage `volume_snapshot`, `volume_snapshot_rollback`, `volume_snapshot_delete` on a
/// volume's file: `qemu-img snapshot` for a qcow2 file, a sparse copy for a raw one.
pub fn volume_op(path: &Path, snap: &str, op: VolumeOp) -> Result<(), String> {
    if is_qcow2(path) {
        let flag = match op {
            VolumeOp::Create => "-c",
            VolumeOp::Rollback => "-a",
            VolumeOp::Delete => "-d",
        };
        return run(
            Command::new("qemu-img")
                .args(["snapshot", flag, snap])
                .arg(path),
            "qemu-img snapshot",
        );
    }
    let copy = snap_copy(path, snap);
    let cp = |from: &Path, to: &Path| {
        run(
            Command::new("cp").arg("--sparse=always").arg(from).arg(to),
            "lvcreate snapshot",
        )
    };
    match op {
        VolumeOp::Create => cp(path, &copy),
        VolumeOp::Rollback => cp(&copy, path),
        VolumeOp::Delete => std::fs::remove_file(&copy)
            .map_err(|e| format!("lvremove '{}' error: {e}", copy.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_volumes_can_snapshot() {
        assert!(can_snapshot("local:100/vm-100-disk-0.qcow2"));
        assert!(!can_snapshot("local:100/vm-100-disk-0.raw"));
        assert!(can_snapshot("local-lvm:vm-100-disk-0"));
        assert!(!can_snapshot("local-lvm:base-100-disk-0"));
        assert!(can_snapshot("local-lvm:base-100-disk-0/vm-101-disk-0"));
        assert!(!can_snapshot("/dev/sdb"));
    }
}
