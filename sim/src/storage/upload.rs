//! `POST /nodes/{node}/storage/{storage}/upload`, after pve-storage API2/Storage/Status.pm
//! `upload`: the HTTP server has streamed the file into a temporary file (`http/server.rs`,
//! `Reader::stream_upload`); the handler checks the storage and the name, then an `imgcopy`
//! task verifies the checksum and copies the file into the storage.

use std::sync::Arc;

use serde_json::json;

use crate::http::handler::{ApiErr, ApiResult, Auth, Params};
use crate::state::Sim;
use crate::storage::download::{checksum, ext_ok, normalize_filename};
use crate::storage::volumes;
use crate::tasks;

/// `POST …/upload`: the checks before the worker, then an `imgcopy` task (no VM id).
pub fn upload(sim: &Arc<Sim>, node: &str, sid: &str, params: &Params, auth: &Auth) -> ApiResult {
    let def = volumes::storage(sid)
        .ok_or_else(|| ApiErr::die(format!("storage '{sid}' does not exist")))?;
    if !def.file_based() {
        return Err(ApiErr::die(format!(
            "can't upload to storage type '{}'",
            def.kind
        )));
    }
    let tmp = params
        .get("tmpfilename")
        .cloned()
        .ok_or_else(|| ApiErr::die("missing temporary file name"))?;
    let size = std::fs::metadata(&tmp)
        .map(|m| m.len())
        .map_err(|_| ApiErr::die(format!("temporary file '{tmp}' does not exist")))?;
    let content = params["content"].clone();
    let filename = normalize_filename(&params["filename"]);
    if !ext_ok(&content, &filename, &sim.opts.version) {
        let why = if content == "import" {
            "invalid filename or wrong extension"
        } else {
            "wrong file extension"
        };
        return Err(ApiErr::param("filename", why));
    }
    if !def.content.contains(&content.as_str()) {
        return Err(ApiErr::die(format!(
            "storage '{sid}' does not support '{content}' content"
        )));
    }
    let expect = match (params.get("checksum"), params.get("checksum-algorithm")) {
        (Some(sum), Some(algo)) => Some((algo.clone(), sum.to_ascii_lowercase())),
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
        (None, None) => None,
    };
    let prefix = match content.as_str() {
        "iso" => "iso/",
        "vztmpl" => "vztmpl/",
        _ => "import/",
    };
    let dest = volumes::parse_volume(
        &sim.opts.data_dir,
        node,
        &format!("{sid}:{prefix}{filename}"),
    )
    .map_err(ApiErr::die)?
    .path;
    // The temporary file is the HTTP server's: it goes when the request is answered, so the
    // worker copies from a hard link of its own (PVE's worker unlinks the temporary file).
    let staged = std::path::PathBuf::from(format!("{tmp}.imgcopy"));
    std::fs::hard_link(&tmp, &staged)
        .or_else(|_| std::fs::copy(&tmp, &staged).map(|_| ()))
        .map_err(|e| ApiErr::die(format!("temporary file '{tmp}': {e}")))?;
    let target = node.to_string();
    let upid = tasks::spawn(sim, node, "imgcopy", "", &auth.id, move |ctx| {
        ctx.log(format!("starting file import from: {tmp}"));
        let checked = (|| {
            if let Some((algo, want)) = &expect {
                let got = checksum(&staged, algo)?;
                if got != *want {
                    return Err(format!("checksum mismatch: got '{got}' != expect '{want}'"));
                }
                ctx.log("calculating checksum...OK, checksum verified");
            }
            Ok(())
        })();
        if let Err(e) = checked {
            let _ = std::fs::remove_file(&staged);
            return Err(e);
        }
        ctx.log(format!("target node: {target}"));
        ctx.log(format!("target file: {}", dest.display()));
        ctx.log(format!("file size is: {size}"));
        ctx.log(format!("command: cp -- {tmp} {}", dest.display()));
        // NOTE (Status.pm): an existing destination file is overwritten.
        let copied = std::fs::rename(&staged, &dest)
            .or_else(|_| std::fs::copy(&staged, &dest).map(|_| ()))
            .map_err(|e| format!("import failed: {e}"));
        let _ = std::fs::remove_file(&staged);
        copied?;
        ctx.log("finished file import successfully");
        Ok(0)
    });
    Ok(json!(upid))
}
