//! `download-url`: fetch a file from an http(s) URL into a storage as a `download` task, with
//! PVE's filename rules, checksum verification and "got correct file already" idempotency.
//! The simulator fetches plain `http://` URLs itself (tests serve images on loopback).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::http::handler::{ApiErr, ApiResult, Auth, Params};
use crate::state::Sim;
use crate::storage::volumes;
use crate::tasks::{self, TaskCtx};
use crate::versions::{Change, has, holds_content};

/// pve-storage API2/Storage/Status.pm, download_url: ISO and container-template extensions
/// are matched case-insensitively (`$ISO_EXT_RE_0`, `$VZTMPL_EXT_RE_1` are `/i`), import
/// extensions are not (`$UPLOAD_IMPORT_EXT_RE_1`: `.QCOW2` is refused).
pub(crate) fn ext_ok(content: &str, name: &str, version: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let ends_ci = |exts: &[&str]| {
        exts.iter()
            .any(|e| lower.ends_with(e) && lower.len() > e.len())
    };
    let ends = |exts: &[&str]| {
        exts.iter()
            .any(|e| name.ends_with(e) && name.len() > e.len())
    };
    match content {
        "iso" => ends_ci(&[".iso", ".img"]),
        "vztmpl" => ends_ci(&[".tar", ".tar.gz", ".tar.xz", ".tar.zst", ".tar.bz2"]),
        // Plain qcow2/raw/vmdk came with PVE 8.4; 8.3 took only .ova (versions.rs).
        "import" if !has(version, Change::ImportDiskImages) => ends(&[".ova"]),
        "import" => ends(&[".ova", ".qcow2", ".raw", ".vmdk"]),
        _ => false,
    }
}

/// pve-storage Storage.pm, normalize_content_filename: the directory part is dropped and
/// every character outside `[a-zA-Z0-9_.-]` becomes `_`.
pub fn normalize_filename(name: &str) -> String {
    let name = name.strip_suffix('\n').unwrap_or(name);
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    base.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Computes a checksum with coreutils (`sha256sum`, …).
pub fn checksum(path: &Path, algo: &str) -> Result<String, String> {
    let out = Command::new(format!("{algo}sum"))
        .arg(path)
        .output()
        .map_err(|e| format!("{algo}sum: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string())
}

/// `POST /nodes/{node}/storage/{storage}/download-url`.
pub fn download_url(
    sim: &Arc<Sim>,
    node: &str,
    sid: &str,
    params: &Params,
    auth: &Auth,
) -> ApiResult {
    let def = volumes::storage(sid)
        .ok_or_else(|| ApiErr::die(format!("storage '{sid}' does not exist")))?;
    if !def.file_based() {
        return Err(ApiErr::die(format!(
            "can't upload to storage type '{}', not a file based storage!",
            def.kind
        )));
    }
    let content = params["content"].clone();
    if !def.content.contains(&content.as_str()) || !holds_content(&sim.opts.version, &content) {
        return Err(ApiErr::die(format!(
            "storage '{sid}' is not configured for content-type '{content}'"
        )));
    }
    let filename = normalize_filename(&params["filename"]);
    if !ext_ok(&content, &filename, &sim.opts.version) {
        return Err(ApiErr::param(
            "filename",
            "invalid filename or wrong extension",
        ));
    }
    match (params.get("checksum"), params.get("checksum-algorithm")) {
        (Some(_), None) => {
            return Err(ApiErr::param(
                "checksum-algorithm",
                "missing property required by 'checksum'",
            ));
        }
        (None, Some(_)) => {
            return Err(ApiErr::param(
                "checksum",
                "missing property required by 'checksum-algorithm'",
            ));
        }
        _ => {}
    }
    let prefix = match content.as_str() {
        "iso" => "iso/",
        "vztmpl" => "vztmpl/",
        _ => "import/",
    };
    let vol = volumes::parse_volume(
        &sim.opts.data_dir,
        node,
        &format!("{sid}:{prefix}{filename}"),
    )
    .map_err(ApiErr::die)?;
    let url = params["url"].clone();
    let expect = params
        .get("checksum")
        .map(|c| (params["checksum-algorithm"].clone(), c.to_ascii_lowercase()));
    let s2 = sim.clone();
    let task_id = filename.clone();
    let compression = params.get("compression").cloned();
    let upid = tasks::spawn(sim, node, "download", &task_id, &auth.id, move |ctx| {
        // The compression is looked at only inside the worker (Status.pm, download_url).
        if let Some(c) = &compression {
            if content != "iso" {
                return Err(format!("decompression not supported for {content}"));
            }
            return Err(format!("pve-sim: decompression ({c}) is not simulated"));
        }
        let dest = vol.path.clone();
        if dest.exists() {
            return match &expect {
                Some((algo, want)) => {
                    ctx.log("calculating checksum of existing file...");
                    let got = checksum(&dest, algo)?;
                    if got == *want {
                        ctx.log("OK, got correct file already, no need to download");
                        Ok(0)
                    } else {
                        Err(format!(
                            "checksum mismatch: got '{got}' != expect '{want}', aborting"
                        ))
                    }
                }
                None => Err(format!(
                    "refusing to override existing file '{}'",
                    dest.display()
                )),
            };
        }
        if let Some(p) = dest.parent() {
            std::fs::create_dir_all(p).map_err(|e| e.to_string())?;
        }
        let tmp = dest.with_file_name(format!("{}.tmp_dwnl.{}", filename, std::process::id()));
        ctx.log(format!("downloading {url} to {}", dest.display()));
        let res = fetch(&s2, ctx, &url, &tmp).and_then(|_| {
            if let Some((algo, want)) = &expect {
                ctx.log("calculating checksum...");
                let got = checksum(&tmp, algo)?;
                if got != *want {
                    return Err(format!("checksum mismatch: got '{got}' != expect '{want}'"));
                }
                ctx.log("OK, checksum verified");
            }
            if content == "import" {
                let fmt = filename.rsplit('.').next().unwrap_or("raw");
                volumes::virtual_size(&tmp, fmt)
                    .map_err(|e| format!("file '{filename}' is not a valid {fmt} image - {e}"))?;
            }
            std::fs::rename(&tmp, &dest).map_err(|e| e.to_string())
        });
        if let Err(e) = res {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        ctx.log(format!(
            "download of '{url}' to '{}' finished",
            dest.display()
        ));
        Ok(0)
    });
    Ok(json!(upid))
}

/// A minimal HTTP/1.1 GET over plain TCP, writing the body to `to` and logging progress.
fn fetch(sim: &Sim, ctx: &TaskCtx, url: &str, to: &Path) -> Result<(), String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        "pve-sim downloads only plain http:// URLs (serve test images on loopback)".to_string()
    })?;
    let (hostport, path) = rest
        .split_once('/')
        .map(|(h, p)| (h, format!("/{p}")))
        .unwrap_or((rest, "/".into()));
    let addr = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:80")
    };
    let mut s =
        TcpStream::connect(&addr).map_err(|e| format!("unable to connect to {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\nUser-Agent: pve-sim\r\n\r\n").map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).map_err(|e| e.to_string())?;
    let code: u16 = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut len: Option<u64> = None;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).map_err(|e| e.to_string())? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().ok();
        }
    }
    if code != 200 {
        return Err(format!("download failed: {}", status.trim()));
    }
    let mut f = std::fs::File::create(to).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 1 << 16];
    let mut done: u64 = 0;
    let mut next_report = 0u64;
    let started = std::time::Instant::now();
    loop {
        if ctx.cancelled() {
            return Err(tasks::INTERRUPT.into());
        }
        let n = r
            .read(&mut buf)
            .map_err(|e| format!("download failed: {e}"))?;
        if n == 0 {
            break;
        }
        f.write_all(&buf[..n]).map_err(|e| e.to_string())?;
        done += n as u64;
        if let Some(rate) = sim.opts.import_rate {
            let should = Duration::from_secs_f64(done as f64 / rate as f64);
            if let Some(wait) = should.checked_sub(started.elapsed()) {
                ctx.sleep(wait)?;
            }
        }
        if done >= next_report {
            let total = len.map(volumes::render_bytes).unwrap_or_else(|| "?".into());
            ctx.log(format!(
                "{} of {total} downloaded",
                volumes::render_bytes(done)
            ));
            next_report = done + len.unwrap_or(u64::MAX).max(1) / 10;
        }
    }
    if len.is_some_and(|l| l != done) {
        return Err(format!(
            "download failed: got {done} of {} bytes",
            len.unwrap_or(0)
        ));
    }
    Ok(())
}
