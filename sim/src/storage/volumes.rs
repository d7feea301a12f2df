//! Storages backed by real files: `local` (a directory storage) and `local-lvm` (images only),
//! with volumes made, imported and resized by the real `qemu-img`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// The storages as `storage.cfg` defines them, kept in the leaf `storage_cfg` (which
/// `config`, the API handlers, uses too); named here as well, as the volumes' storages.
pub use crate::storage::storage_cfg::{StorageDef, all, storage};
use crate::tasks::{INTERRUPT, TaskCtx};

/// The size a volume of `bytes` really gets on storage `sid`.
pub fn allocated_size(sid: &str, bytes: u64) -> u64 {
    let e = storage(sid).map_or(1, |s| s.extent.max(1));
    bytes.div_ceil(e).saturating_mul(e)
}

/// The directory behind a storage on a node (one for all nodes when it is shared).
pub fn storage_dir(data: &Path, node: &str, id: &str) -> PathBuf {
    if storage(id).is_some_and(|s| s.shared) {
        return data.join("shared").join(id);
    }
    data.join("nodes").join(node).join(id)
}

/// A parsed volume id.
pub struct Volume {
    pub storage: String,
    pub name: String,
    /// `images`, `iso`, `import`, `vztmpl`, `snippets`.
    pub vtype: &'static str,
    pub vmid: Option<u32>,
    pub path: PathBuf,
    pub format: String,
}

fn format_of(name: &str) -> String {
    match name.rsplit_once('.') {
        Some((_, ext)) if ["qcow2", "raw", "vmdk", "iso", "img", "ova"].contains(&ext) => {
            ext.to_string()
        }
        _ => "raw".to_string(),
    }
}

/// Resolves `storage:name` on a node, as `PVE::Storage::parse_volname` would.
pub fn parse_volume(data: &Path, node: &str, volid: &str) -> Result<Volume, String> {
    let (sid, name) =
        crate::tools::volume_parts(volid).ok_or(format!("unable to parse volume ID '{volid}'"))?;
    let def = storage(sid).ok_or(format!("storage '{sid}' does not exist"))?;
    let dir = storage_dir(data, node, sid);
    if name.contains("..") || name.is_empty() {
        return Err(format!("unable to parse volume filename '{name}'"));
    }
    if def.block() {
        // pve-storage LvmThinPlugin.pm, parse_volname: `vm-N-…`, a template's `base-N-…`, and
        // a linked clone `base-N-disk-K/vm-M-disk-J` (a thin snapshot of the base volume).
        let lv = |n: &str| {
            (n.starts_with("vm-") || n.starts_with("base-"))
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        };
        let (base, own) = match name.split_once('/') {
            Some((b, o)) if b.starts_with("base-") && o.starts_with("vm-") => (Some(b), o),
            None => (None, name),
            _ => return Err(format!("unable to parse lvm volume name '{name}'")),
        };
        if !lv(own) || base.is_some_and(|b| !lv(b)) {
            return Err(format!("unable to parse lvm volume name '{name}'"));
        }
        let owner = own
            .strip_prefix("vm-")
            .or_else(|| own.strip_prefix("base-"))
            .and_then(|r| r.split('-').next())
            .and_then(|v| v.parse().ok());
        return Ok(Volume {
            storage: sid.into(),
            name: name.into(),
            vtype: "images",
            vmid: owner,
            path: dir.join(format!("{own}.raw")),
            format: "raw".into(),
        });
    }
    let (vtype, rel): (&'static str, PathBuf) = if let Some(f) = name.strip_prefix("import/") {
        // pve-storage Plugin.pm, parse_volname: `import/` names must end in one of
        // `$IMPORT_EXT_RE_1` (ova, ovf, qcow2, raw, vmdk; case-sensitive): `import/x.img` is
        // not a volume.
        let known = [".ova", ".ovf", ".qcow2", ".raw", ".vmdk"]
            .iter()
            .any(|e| f.ends_with(e) && f.len() > e.len());
        if !known {
            return Err(format!("unable to parse directory volume name '{name}'"));
        }
        ("import", PathBuf::from("import").join(f))
    } else if let Some(f) = name.strip_prefix("iso/") {
        ("iso", PathBuf::from("template/iso").join(f))
    } else if let Some(f) = name.strip_prefix("vztmpl/") {
        ("vztmpl", PathBuf::from("template/cache").join(f))
    } else if let Some(f) = name.strip_prefix("snippets/") {
        ("snippets", PathBuf::from("snippets").join(f))
    } else if let Some((vmid, f)) = name.split_once('/') {
        if vmid.parse::<u32>().is_err() {
            return Err(format!("unable to parse directory volume name '{name}'"));
        }
        // A linked clone: `N/base-N-disk-K.qcow2/M/vm-M-disk-J.qcow2` (pve-storage Plugin.pm,
        // parse_name_dir with a base), the volume being the last two parts.
        let parts: Vec<&str> = f.split('/').collect();
        match parts.as_slice() {
            [_] => ("images", PathBuf::from("images").join(vmid).join(f)),
            [base, owner, file] if base.starts_with("base-") && owner.parse::<u32>().is_ok() => {
                ("images", PathBuf::from("images").join(owner).join(file))
            }
            _ => return Err(format!("unable to parse directory volume name '{name}'")),
        }
    } else {
        return Err(format!("unable to parse directory volume name '{name}'"));
    };
    let file = rel
        .file_name()
        .map(|f| f.to_string_lossy().to_string())
        .unwrap_or_default();
    if file.contains('/') || rel.components().count() < 2 {
        return Err(format!("unable to parse directory volume name '{name}'"));
    }
    Ok(Volume {
        storage: sid.into(),
        name: name.into(),
        vtype,
        vmid: if vtype == "images" {
            // The owner: the directory the volume is in (for a linked clone, the clone's).
            rel.parent()
                .and_then(|d| d.file_name())
                .and_then(|d| d.to_str())
                .and_then(|v| v.parse().ok())
        } else {
            None
        },
        format: format_of(&file),
        path: dir.join(rel),
    })
}

/// Picks the next free `vm-N-disk-K` name on a storage.
pub fn alloc_name(
    data: &Path,
    node: &str,
    sid: &str,
    vmid: u32,
    fmt: &str,
    taken: &[String],
) -> Result<String, String> {
    let def = storage(sid).ok_or(format!("storage '{sid}' does not exist"))?;
    if !def.content.contains(&"images") {
        return Err(format!("storage '{sid}' does not support vm images"));
    }
    // pve-storage Storage.pm vdisk_alloc: activate_storage checks the storage is enabled on
    // the node, then alloc_image runs under cluster_lock_storage (the cluster-wide
    // `storage-X` lock on a shared storage).
    crate::storage::storage_cfg::check_enabled(sid, node)?;
    // Plugin.pm `get_next_vm_diskname`: a disk id is taken by any `(vm|base)-N-disk-K`
    // volume of the storage, whatever its format (`vm-100-disk-0.raw` makes the next qcow2
    // `vm-100-disk-1.qcow2`).
    let names = |prefix: &str, k: u32| -> Vec<String> {
        if def.block() {
            vec![format!("{prefix}-{vmid}-disk-{k}")]
        } else {
            ["raw", "qcow2", "vmdk"]
                .iter()
                .map(|ext| format!("{vmid}/{prefix}-{vmid}-disk-{k}.{ext}"))
                .collect()
        }
    };
    crate::storage::storage_cfg::cluster_lock_storage(sid, || {
        for k in 0..1000 {
            let mut in_use = false;
            for name in names("vm", k).into_iter().chain(names("base", k)) {
                let volid = format!("{sid}:{name}");
                in_use |= taken.contains(&volid)
                    || parse_volume(data, node, &volid).is_ok_and(|vol| vol.path.exists());
            }
            if !in_use {
                return Ok(if def.block() {
                    format!("vm-{vmid}-disk-{k}")
                } else {
                    format!("{vmid}/vm-{vmid}-disk-{k}.{fmt}")
                });
            }
        }
        Err("unable to allocate an image name".into())
    })
}

/// Runs a command, returning its stdout or an error naming it with its stderr.
fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("unable to run qemu-img: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The format of the file behind a volume: an LVM-thin linked clone (a thin snapshot in PVE)
/// is a qcow2 overlay on its base volume here, though the API calls it raw as PVE does.
fn file_format(path: &Path, fmt: &str) -> String {
    let mut magic = [0u8; 4];
    let is_qcow2 = std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"QFI\xfb";
    if fmt == "raw" && is_qcow2 {
        "qcow2".into()
    } else {
        fmt.into()
    }
}

/// A thin snapshot of `base` at `path` (a linked clone's volume): a qcow2 overlay whose
/// backing file is the base volume, so it costs what is written to it.
pub fn thin_snapshot(base: &Path, base_fmt: &str, path: &Path) -> Result<(), String> {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).map_err(|e| e.to_string())?;
    }
    let base_fmt = file_format(base, base_fmt);
    run(Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2", "-F", &base_fmt, "-b"])
        .arg(base)
        .arg(path))?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Whether a linked clone's volume is backed by `base`.
pub fn backs(base: &Path, volume: &Path) -> bool {
    let Ok(out) = run(Command::new("qemu-img")
        .args(["info", "--output=json", "-f", "qcow2"])
        .arg(volume))
    else {
        return false;
    };
    serde_json::from_str::<Value>(&out)
        .ok()
        .and_then(|v| v["backing-filename"].as_str().map(PathBuf::from))
        .is_some_and(|b| b == base)
}

/// The virtual size of an image, from `qemu-img info`.
pub fn virtual_size(path: &Path, fmt: &str) -> Result<u64, String> {
    // An ISO is a raw image to `qemu-img` (pve-storage Plugin.pm, parse_volname: an `iso/`
    // volume's format is `raw`, what volume_size_info asks for).
    let fmt = if fmt == "iso" { "raw" } else { fmt };
    let fmt = &file_format(path, fmt);
    let out = run(Command::new("qemu-img")
        .args(["info", "--output=json", "-f", fmt])
        .arg(path))?;
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("qemu-img info: {e}"))?;
    v["virtual-size"]
        .as_u64()
        .ok_or_else(|| "qemu-img info: no virtual-size".to_string())
}

/// The format `qemu-img info` detects (pve-storage Storage.pm, file_size_info with
/// `auto-detect`, as used for absolute-path imports).
pub fn detect_format(path: &Path) -> Result<String, String> {
    let out = run(Command::new("qemu-img")
        .args(["info", "--output=json"])
        .arg(path))?;
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("qemu-img info: {e}"))?;
    v["format"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| "qemu-img info: no format".to_string())
}

/// Creates an empty image of `size` bytes.
pub fn create_image(path: &Path, fmt: &str, size: u64) -> Result<(), String> {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).map_err(|e| e.to_string())?;
    }
    // A new volume is readable by its owner only, whatever it is filled from (an import of a
    // root-only file must not leave a world-readable copy in the data dir).
    std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    run(Command::new("qemu-img")
        .args(["create", "-q", "-f", fmt])
        .arg(path)
        .arg(size.to_string()))
    .map(|_| ())
}

/// Grows an image to `size` bytes.
pub fn resize_image(path: &Path, fmt: &str, size: u64) -> Result<(), String> {
    let fmt = &file_format(path, fmt);
    run(Command::new("qemu-img")
        .args(["resize", "-q", "-f", fmt])
        .arg(path)
        .arg(size.to_string()))
    .map(|_| ())
}

/// Renders bytes as PVE's `render_bytes` does (`660.0 MiB`).
pub fn render_bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", units[u])
}

/// Formats a size the way PVE writes `size=` in a drive (`2G`, `3584M`).
pub fn format_size(bytes: u64) -> String {
    const K: u64 = 1024;
    for (unit, mult) in [
        ("T", K * K * K * K),
        ("G", K * K * K),
        ("M", K * K),
        ("K", K),
    ] {
        if bytes >= mult && bytes.is_multiple_of(mult) {
            return format!("{}{unit}", bytes / mult);
        }
    }
    bytes.to_string()
}

/// Parses `2G`, `512M`, `+1G`, `1024` (bytes) into bytes.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.strip_prefix('+').unwrap_or(s);
    let (num, mult) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1024f64),
        'M' => (&s[..s.len() - 1], 1024f64 * 1024.0),
        'G' => (&s[..s.len() - 1], 1024f64.powi(3)),
        'T' => (&s[..s.len() - 1], 1024f64.powi(4)),
        _ => (s, 1.0),
    };
    num.parse::<f64>().ok().map(|n| (n * mult) as u64)
}

/// Copies `src` into the new raw or qcow2 volume `dst` with `qemu-img convert -p -n`, logging
/// PVE's progress lines, honouring `--import-rate` and stopping if the task is interrupted.
pub fn import(
    ctx: &TaskCtx,
    src: &Volume,
    dst: &Path,
    dst_fmt: &str,
    rate: Option<u64>,
    sid: &str,
) -> Result<u64, String> {
    let src_fmt = file_format(&src.path, &src.format);
    let source_size = virtual_size(&src.path, &src_fmt)?;
    let size = allocated_size(sid, source_size);
    create_image(dst, dst_fmt, size)?;
    ctx.log(format!(
        "Formatting '{}', fmt={dst_fmt} size={size} preallocation=off",
        dst.display()
    ));
    let mut cmd = Command::new("qemu-img");
    cmd.args(["convert", "-p", "-n", "-f", &src_fmt, "-O", dst_fmt]);
    cmd.arg(&src.path)
        .arg(dst)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // qemu-img dies with pve-sim: a simulator killed mid-import (as tests kill it) must not
    // leave a copy behind, least of all one paused by SIGSTOP.
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("unable to run qemu-img: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel::<f64>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        let mut acc = String::new();
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            acc.push_str(&String::from_utf8_lossy(&buf[..n]));
            while let Some(i) = acc.find(['\r', '\n']) {
                let line: String = acc.drain(..=i).collect();
                if let Some(p) = line
                    .trim()
                    .strip_prefix('(')
                    .and_then(|l| l.split('/').next())
                    && let Ok(p) = p.parse::<f64>()
                {
                    let _ = tx.send(p);
                }
            }
        }
    });
    // `--import-rate` paces the copy by its progress: qemu-img is paused (SIGSTOP) whenever it
    // gets ahead of rate x elapsed and resumed when time catches up, so the progress lines and
    // the end of the copy follow the rate together. (qemu-img's own -r throttles writes only:
    // its progress would reach 100 % long before it exits.)
    let pid = child.id().to_string();
    let signal = |sig: &str| {
        let _ = Command::new("kill")
            .args([sig, &pid])
            .stderr(Stdio::null())
            .status();
    };
    let started = std::time::Instant::now();
    let mut paused = false;
    let mut current = 0.0f64;
    let mut last = -1.0f64;
    let mut exited = false;
    // The share of the copy `--import-rate` allows by now (100 without a rate). The progress
    // shown and the task's end follow it even when qemu-img finishes (or reports) faster than
    // the pacing could catch, so every import takes the time the rate gives it.
    let profile = ctx.sim.opts.import_profile.clone();
    let allowed_pct = || match rate {
        Some(r) if source_size > 0 => profile.allowed(
            started.elapsed().as_secs_f64(),
            r as f64 * 100.0 / source_size as f64,
        ),
        _ => 100.0,
    };
    loop {
        if ctx.cancelled() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(INTERRUPT.into());
        }
        if rate.is_some() && !exited {
            let allowed = source_size as f64 * allowed_pct() / 100.0;
            let done = source_size as f64 * current / 100.0;
            if !paused && done > allowed {
                signal("-STOP");
                paused = true;
            } else if paused && done <= allowed {
                signal("-CONT");
                paused = false;
            }
        }
        while let Ok(p) = rx.try_recv() {
            current = p;
        }
        // Logged in whole steps (`--progress-step`; qemu-img's own are whole percents).
        let step = profile.step;
        let shown = (current.min(allowed_pct()) / step).floor() * step;
        if shown >= last + step || (shown >= 100.0 && last < 100.0) {
            last = shown.min(100.0);
            let done = (source_size as f64 * last / 100.0) as u64;
            ctx.log(format!(
                "transferred {} of {} ({last:.2}%)",
                render_bytes(done),
                render_bytes(source_size)
            ));
        }
        if !exited {
            match child.try_wait() {
                Ok(Some(status)) => {
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    if !status.success() {
                        let err = err.trim();
                        if !err.is_empty() {
                            ctx.log(err.to_string());
                        }
                        return Err(format!(
                            "copy failed: command '/usr/bin/qemu-img convert -p -n -f {} -O {dst_fmt} {} {}' failed: exit code {}",
                            src_fmt,
                            src.path.display(),
                            dst.display(),
                            status.code().unwrap_or(-1)
                        ));
                    }
                    exited = true;
                    current = 100.0;
                }
                Ok(None) => {}
                Err(e) => return Err(format!("qemu-img: {e}")),
            }
        }
        if exited && last >= 100.0 {
            // What storage does after the copy (a flush, a thin pool's commit).
            ctx.sleep(profile.tail)?;
            return Ok(size);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `content` listing of a storage on a node.
pub fn list_content(
    data: &Path,
    node: &str,
    sid: &str,
    content: Option<&str>,
    vmid: Option<u32>,
) -> Vec<Value> {
    let dir = storage_dir(data, node, sid);
    let mut out = Vec::new();
    let mut push = |volid: String, vtype: &str, path: &Path| {
        if content.is_some_and(|c| c != vtype) {
            return;
        }
        let Ok(vol) = parse_volume(data, node, &volid) else {
            return;
        };
        if vmid.is_some() && vol.vmid != vmid {
            return;
        }
        let meta = std::fs::metadata(path).ok();
        let used = meta.as_ref().map(|m| m.len()).unwrap_or(0);
        let ctime = meta
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let size = if vtype == "images" {
            virtual_size(path, &vol.format).unwrap_or(used)
        } else {
            used
        };
        let mut v = json!({"volid": volid, "content": vtype, "format": vol.format, "size": size, "used": used, "ctime": ctime});
        if let Some(id) = vol.vmid {
            v["vmid"] = json!(id);
        }
        out.push(v);
    };
    let files = |sub: &str| -> Vec<(String, PathBuf)> {
        let mut v: Vec<(String, PathBuf)> = std::fs::read_dir(dir.join(sub))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
            .map(|e| (e.file_name().to_string_lossy().to_string(), e.path()))
            .filter(|(n, _)| !n.contains(".tmp_dwnl."))
            .collect();
        v.sort();
        v
    };
    if storage(sid).is_some_and(|s| s.block()) {
        for (f, p) in files("") {
            if let Some(n) = f.strip_suffix(".raw") {
                push(format!("{sid}:{n}"), "images", &p);
            }
        }
        return out;
    }
    for (sub, prefix, vtype) in [
        ("import", "import/", "import"),
        ("template/iso", "iso/", "iso"),
        ("template/cache", "vztmpl/", "vztmpl"),
        ("snippets", "snippets/", "snippets"),
    ] {
        for (f, p) in files(sub) {
            push(format!("{sid}:{prefix}{f}"), vtype, &p);
        }
    }
    let mut vmdirs: Vec<_> = std::fs::read_dir(dir.join("images"))
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    vmdirs.sort_by_key(|e| e.file_name());
    for d in vmdirs {
        let id = d.file_name().to_string_lossy().to_string();
        for (f, p) in files(&format!("images/{id}")) {
            push(format!("{sid}:{id}/{f}"), "images", &p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_trip() {
        assert_eq!(format_size(2 * 1024 * 1024 * 1024), "2G");
        assert_eq!(format_size(3584 * 1024 * 1024), "3584M");
        assert_eq!(parse_size("2G"), Some(2 * 1024 * 1024 * 1024));
        assert_eq!(parse_size("+512M"), Some(512 * 1024 * 1024));
        assert_eq!(render_bytes(128 * 1024), "128.0 KiB");
    }

    #[test]
    fn volumes() {
        let d = Path::new("/d");
        let v = parse_volume(d, "pve1", "local:import/noble.qcow2").unwrap();
        assert_eq!((v.vtype, v.format.as_str()), ("import", "qcow2"));
        assert_eq!(v.path, Path::new("/d/nodes/pve1/local/import/noble.qcow2"));
        let v = parse_volume(d, "pve1", "local-lvm:vm-100-disk-0").unwrap();
        assert_eq!((v.vtype, v.vmid), ("images", Some(100)));
        let v = parse_volume(d, "pve1", "local-lvm:base-100-disk-0/vm-101-disk-0").unwrap();
        assert_eq!(v.vmid, Some(101));
        assert_eq!(
            v.path,
            Path::new("/d/nodes/pve1/local-lvm/vm-101-disk-0.raw")
        );
        assert_eq!(
            parse_volume(d, "pve1", "local-lvm:base-100-disk-0")
                .unwrap()
                .vmid,
            Some(100)
        );
        assert!(parse_volume(d, "pve1", "local-lvm:vm-1/vm-2").is_err());
        let v = parse_volume(
            d,
            "pve1",
            "local:100/base-100-disk-0.qcow2/101/vm-101-disk-0.qcow2",
        )
        .unwrap();
        assert_eq!(v.vmid, Some(101));
        assert_eq!(
            v.path,
            Path::new("/d/nodes/pve1/local/images/101/vm-101-disk-0.qcow2")
        );
        assert_eq!(
            parse_volume(d, "pve1", "local:100/vm-100-disk-0.qcow2")
                .unwrap()
                .vmid,
            Some(100)
        );
        assert_eq!(
            parse_volume(d, "pve1", "local:iso/x.img").unwrap().vtype,
            "iso"
        );
        assert!(parse_volume(d, "pve1", "local:import/../../etc").is_err());
        assert!(parse_volume(d, "pve1", "nope:import/a.qcow2").is_err());
    }
}
