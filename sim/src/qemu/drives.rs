//! Drive values of a create or an update, after qemu-server API2/Qemu.pm: the synchronous
//! checks before the worker forks (`$check_storage_access`), then, inside the worker, what
//! `create_disks` does with each one: an import, a new volume, a cloud-init drive, or a
//! value kept as given.

use std::collections::BTreeMap;

use crate::http::handler::{ApiErr, Auth, Params};
use crate::schema;
use crate::state::Sim;
use crate::storage::volumes::{self, Volume};
use crate::tasks::TaskCtx;

/// What to do for one drive key.
pub(crate) enum DiskOp {
    Import {
        key: String,
        storage: String,
        src: Volume,
        opts: BTreeMap<String, String>,
    },
    Alloc {
        key: String,
        storage: String,
        bytes: u64,
        opts: BTreeMap<String, String>,
    },
    CloudInit {
        key: String,
        storage: String,
        opts: BTreeMap<String, String>,
    },
    /// An existing volume (or `none`, `cdrom`, a path): its value printed again with the
    /// volume's own size.
    Keep {
        key: String,
        opts: BTreeMap<String, String>,
    },
}

/// The synchronous checks on drive values (qemu-server's `$check_storage_access`).
pub(crate) fn plan_drives(
    sim: &Sim,
    node: &str,
    params: &Params,
    auth: &Auth,
) -> Result<Vec<DiskOp>, ApiErr> {
    let mut ops = Vec::new();
    for (key, value) in params.iter().filter(|(k, _)| schema::is_drive_key(k)) {
        let mut opts = schema::parse_drive(value)
            .map_err(|e| ApiErr::param(key, format!("invalid format - {e}")))?;
        let file = opts.remove("file").unwrap_or_default();
        let import = opts.remove("import-from");
        let alloc = crate::tools::volume_parts(&file).and_then(|(s, n)| {
            let ok = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit() || b == b'.');
            ok.then(|| (s.to_string(), n.parse::<f64>().unwrap_or(0.0)))
        });
        if let Some(src) = import {
            let Some((sid, size)) = alloc.filter(|(_, size)| *size == 0.0) else {
                return Err(ApiErr::param(
                    key,
                    "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>",
                ));
            };
            let _ = size;
            let def = volumes::storage(&sid)
                .ok_or_else(|| ApiErr::die(format!("storage '{sid}' does not exist")))?;
            if !def.content.contains(&"images") {
                return Err(ApiErr::param(
                    "storage",
                    format!("storage '{sid}' does not support vm images"),
                ));
            }
            let vol = if src.starts_with('/') {
                if !auth.root_ticket {
                    return Err(ApiErr::die(
                        "Only root can pass arbitrary filesystem paths. at /usr/share/perl5/PVE/Storage.pm line 651.",
                    ));
                }
                let p = std::path::PathBuf::from(&src);
                // The format is detected inside the worker (run_drives).
                let format = String::new();
                Volume {
                    storage: String::new(),
                    name: src.clone(),
                    vtype: "import",
                    vmid: None,
                    path: p,
                    format,
                }
            } else {
                let vol = volumes::parse_volume(&sim.opts.data_dir, node, &src)
                    .map_err(|e| ApiErr::param(key, e))?;
                if let Some(refusal) =
                    crate::versions::import_from_refusal(&sim.opts.version, &src, vol.vtype)
                {
                    return Err(ApiErr::param(key, refusal));
                }
                vol
            };
            ops.push(DiskOp::Import {
                key: key.clone(),
                storage: sid,
                src: vol,
                opts,
            });
        } else if let Some((sid, gib)) = alloc {
            volumes::storage(&sid)
                .ok_or_else(|| ApiErr::die(format!("storage '{sid}' does not exist")))?;
            let bytes = (gib * 1024.0 * 1024.0 * 1024.0) as u64;
            ops.push(DiskOp::Alloc {
                key: key.clone(),
                storage: sid,
                bytes,
                opts,
            });
        } else if let Some(sid) = file.strip_suffix(":cloudinit") {
            volumes::storage(sid)
                .ok_or_else(|| ApiErr::die(format!("storage '{sid}' does not exist")))?;
            ops.push(DiskOp::CloudInit {
                key: key.clone(),
                storage: sid.to_string(),
                opts,
            });
        } else {
            // `$check_drive_param`: an ISO needs `media=cdrom`; whether the volume exists is
            // create_disks' `volume_size_info`, inside the worker ([`run_drives`]).
            if file != "none" && file != "cdrom" && !file.starts_with('/') {
                let vol = volumes::parse_volume(&sim.opts.data_dir, node, &file)
                    .map_err(|e| ApiErr::param(key, e))?;
                if vol.vtype == "iso" && opts.get("media").is_none_or(|m| m != "cdrom") {
                    return Err(ApiErr::param(
                        key,
                        "explicit 'media=cdrom' is required for iso images",
                    ));
                }
            }
            opts.insert("file".into(), file);
            ops.push(DiskOp::Keep {
                key: key.clone(),
                opts,
            });
        }
    }
    Ok(ops)
}

/// Drive.pm `print_drive`: `file` first, the other keys sorted, `size` printed by
/// JSONSchema.pm `format_size` (`2048M` is `2G`), booleans already 0/1 from the parse.
pub(crate) fn print_drive(opts: &BTreeMap<String, String>) -> String {
    let mut opts = opts.clone();
    if let Some(size) = opts.get_mut("size")
        && let Some(bytes) = volumes::parse_size(size)
    {
        *size = volumes::format_size(bytes);
    }
    schema::print_property_string("file", &opts)
}

/// The drive value of a new volume (`local-lvm:vm-100-disk-0,size=2G`), logged as PVE does.
fn disk_value(
    ctx: &TaskCtx,
    key: String,
    sid: &str,
    name: &str,
    size: u64,
    mut opts: BTreeMap<String, String>,
) -> (String, String) {
    // create_disks: `delete $disk->{format}; # no longer needed`: the volume's name says it.
    opts.insert("file".into(), format!("{sid}:{name}"));
    opts.insert("size".into(), volumes::format_size(size));
    ctx.log(format!(
        "{key}: successfully created disk '{sid}:{name},size={}'",
        volumes::format_size(size)
    ));
    (key, print_drive(&opts))
}

/// pve-storage's block plugins' `alloc_image` (LvmThinPlugin.pm, LVMPlugin.pm, RBDPlugin.pm):
/// `die "unsupported format '$fmt'" if $fmt ne 'raw'`, for a new disk, EFI vars, TPM state or
/// cloud-init drive asked with another `format=` (decided from PVE's code: the oracle's
/// storage fake allocates any format).
fn block_storage_takes(sid: &str, fmt: &str) -> Result<(), String> {
    volumes::storage(sid).map_or(Ok(()), |def| def.alloc_format(fmt.to_string()).map(drop))
}

/// AbstractConfig.pm / QemuConfig.pm `has_cloudinit`: the key of a cloud-init drive among
/// these config values, if there is one.
pub(crate) fn cloudinit_key<'a>(
    values: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Option<String> {
    values
        .into_iter()
        .find(|(k, v)| {
            schema::is_drive_key(k) && v.split(',').next().is_some_and(|f| f.contains("cloudinit"))
        })
        .map(|(k, _)| k.clone())
}

/// Carries out drive operations inside a worker; returns the drive strings and the volumes
/// made. `attached` is the drive key of a cloud-init drive the VM already has (in its config
/// or pending).
pub(crate) fn run_drives(
    sim: &Sim,
    ctx: &TaskCtx,
    node: &str,
    vmid: u32,
    ops: Vec<DiskOp>,
    made: &mut Vec<Volume>,
    attached: Option<String>,
) -> Result<Vec<(String, String)>, String> {
    let mut attached = attached;
    let data = &sim.opts.data_dir;
    let mut out = Vec::new();
    let taken = |made: &Vec<Volume>| {
        made.iter()
            .map(|v| format!("{}:{}", v.storage, v.name))
            .collect::<Vec<_>>()
    };
    for op in ops {
        match op {
            DiskOp::Import {
                key,
                storage: sid,
                src,
                mut opts,
            } => {
                // create_disks → `$import_from_volid` → clone_disk →
                // QemuServer.pm `resolve_dst_disk_format`: without `format=`, the source
                // volume's own format is the hint (a qcow2 stays qcow2 on a directory
                // storage), then Storage.pm `resolve_format_hint` keeps it if the target
                // storage takes it. An absolute path goes through ImportDisk.pm `do_import`,
                // which passes no source hint: the given format or the storage's default.
                let given = opts.remove("format");
                let hint = given
                    .as_deref()
                    .or_else(|| (!src.storage.is_empty()).then_some(src.format.as_str()));
                let fmt = volumes::storage(&sid)
                    .map_or("raw", |s| s.resolve_format_hint(hint))
                    .to_string();
                let name = volumes::alloc_name(data, node, &sid, vmid, &fmt, &taken(made))?;
                let dst = volumes::parse_volume(data, node, &format!("{sid}:{name}"))?;
                let srcname = if src.storage.is_empty() {
                    src.name.clone()
                } else {
                    format!("{}:{}", src.storage, src.name)
                };
                ctx.log(format!("create full clone of drive ({srcname})"));
                // `$import_from_volid`: "could not get size of …" (`volume_size_info`).
                if !src.path.exists() {
                    let why = if src.storage.is_empty() {
                        "volume does not exist".to_string()
                    } else {
                        format!("could not get size of {srcname}")
                    };
                    return Err(format!("cannot import from '{srcname}' - {why}"));
                }
                // qemu-server API2/Qemu.pm, create_disks: an absolute path is checked as an
                // untrusted image with its format auto-detected (a qcow2 named `.img` is a
                // qcow2), not guessed from its name.
                let mut src = src;
                if src.storage.is_empty() {
                    src.format = volumes::detect_format(&src.path)
                        .map_err(|e| format!("could not get file size of {srcname} - {e}"))?;
                }
                made.push(Volume {
                    storage: sid.clone(),
                    name: name.clone(),
                    vtype: "images",
                    vmid: Some(vmid),
                    path: dst.path.clone(),
                    format: fmt.clone(),
                });
                let size = volumes::import(ctx, &src, &dst.path, &fmt, sim.opts.import_rate, &sid)
                    .map_err(|e| format!("cannot import from '{srcname}' - {e}"))?;
                out.push(disk_value(ctx, key, &sid, &name, size, opts));
            }
            DiskOp::Alloc {
                key,
                storage: sid,
                bytes,
                mut opts,
            } => {
                let fmt = opts.remove("format").unwrap_or("raw".into());
                let fmt =
                    volumes::storage(&sid).map_or(Ok(fmt.clone()), |s| s.alloc_format(fmt))?;
                let name = volumes::alloc_name(data, node, &sid, vmid, &fmt, &taken(made))?;
                let dst = volumes::parse_volume(data, node, &format!("{sid}:{name}"))?;
                // An EFI vars disk gets the size of its OVMF vars template whatever size was
                // asked (QemuServer.pm, create_efidisk / get_efivars_size: 540672 bytes for
                // `efitype=4m`, 131072 for the default 2m); a TPM state 4 MiB (Drive.pm,
                // TPMSTATE_DISK_SIZE).
                let bytes = match key.as_str() {
                    "efidisk0" if opts.get("efitype").is_some_and(|t| t == "4m") => 540672,
                    "efidisk0" => 131072,
                    "tpmstate0" => 4 << 20,
                    _ => bytes,
                };
                // OVMF.pm `create_efidisk`: with `pre-enrolled-keys=1`, vars that carry the
                // Microsoft UEFI CA 2023 (`is_ms_2023_cert_enrolled`, as the vars templates of
                // PVE 9's pve-edk2-firmware do) mark the drive `ms-cert=2023k`.
                if key == "efidisk0" && opts.get("pre-enrolled-keys").is_some_and(|k| k == "1") {
                    opts.insert("ms-cert".into(), "2023k".into());
                }
                let bytes = volumes::allocated_size(&sid, bytes);
                volumes::create_image(&dst.path, &fmt, bytes)?;
                made.push(Volume {
                    storage: sid.clone(),
                    name: name.clone(),
                    vtype: "images",
                    vmid: Some(vmid),
                    path: dst.path,
                    format: fmt.clone(),
                });
                out.push(disk_value(ctx, key, &sid, &name, bytes, opts));
            }
            DiskOp::CloudInit {
                key,
                storage: sid,
                mut opts,
            } => {
                // create_disks: one cloud-init drive per VM (`has_cloudinit` of the config,
                // its pending values and the drives made so far).
                if let Some(other) = attached.as_ref().filter(|other| **other != key) {
                    return Err(format!(
                        "{key} - cloud-init drive is already attached at '{other}'"
                    ));
                }
                attached = Some(key.clone());
                // create_disks: `$disk->{format}` or the default (qcow2 on a path storage,
                // named `.FMT`; raw on a block one), then `delete $disk->{format}`.
                let dir = volumes::storage(&sid).is_some_and(|s| s.file_based());
                let fmt = opts
                    .remove("format")
                    .unwrap_or_else(|| (if dir { "qcow2" } else { "raw" }).into());
                block_storage_takes(&sid, &fmt)?;
                let name = if dir {
                    format!("{vmid}/vm-{vmid}-cloudinit.{fmt}")
                } else {
                    format!("vm-{vmid}-cloudinit")
                };
                let dst = volumes::parse_volume(data, node, &format!("{sid}:{name}"))?;
                volumes::create_image(&dst.path, &fmt, 4 * 1024 * 1024)?;
                made.push(Volume {
                    storage: sid.clone(),
                    name: name.clone(),
                    vtype: "images",
                    vmid: Some(vmid),
                    path: dst.path,
                    format: fmt,
                });
                opts.insert("file".into(), format!("{sid}:{name}"));
                opts.insert("media".into(), "cdrom".into());
                ctx.log(format!(
                    "{key}: successfully created disk '{sid}:{name},media=cdrom'"
                ));
                out.push((key, print_drive(&opts)));
            }
            DiskOp::Keep { key, mut opts } => {
                // create_disks, an existing volume: `$disk->{size} = volume_size_info(…)`
                // (whatever size the request gave); `none`/`cdrom` lose theirs; a path
                // (`/dev/…`) keeps the value as given.
                let file = opts.get("file").cloned().unwrap_or_default();
                if file == "none" || file == "cdrom" {
                    opts.remove("size");
                } else if !file.starts_with('/') {
                    let vol = volumes::parse_volume(data, node, &file)?;
                    let size = volumes::virtual_size(&vol.path, &vol.format)
                        .map_err(|_| format!("volume {file} does not exist"))?;
                    opts.insert("size".into(), volumes::format_size(size));
                }
                out.push((key, print_drive(&opts)));
            }
        }
    }
    Ok(out)
}
