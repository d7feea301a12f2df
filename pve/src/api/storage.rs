//! A node's storages (pve-storage PVE/API2/Storage/Content.pm, Status.pm): their volumes,
//! removing one, downloading a file into one, and uploading one.

use super::{Dispatched, Recover, TaskType, dispatch, flag};
use crate::answers::{NodeStorage, Volume, lenient_list};
use crate::client::{Client, Method, Params};
use crate::error::ApiError;
use crate::ops;
use crate::paths::Node;

/// `GET /nodes/{node}/storage`: the node's storages, which of them are shared (a read).
pub fn list(client: &Client, node: &str) -> Result<Vec<NodeStorage>, ApiError> {
    ops::read(client, &Node::new(node).storages(), &Vec::new()).map(lenient_list)
}

/// `GET …/storage/{storage}/content?content=…`: the storage's volumes of that content type
/// (a read).
pub fn content(
    client: &Client,
    node: &str,
    storage: &str,
    content: &str,
) -> Result<Vec<Volume>, ApiError> {
    let params: Params = vec![("content".into(), content.to_string())];
    let path = Node::new(node).storage(storage).content();
    ops::read(client, &path, &params).map(lenient_list)
}

/// `DELETE …/content/{volid}`: removes a volume (the volid travels as one encoded segment).
pub fn delete_volume(
    client: &Client,
    node: &str,
    storage: &str,
    volid: &str,
) -> Result<Dispatched, ApiError> {
    let path = Node::new(node).storage(storage).volume(volid);
    dispatch(
        client,
        Method::Delete,
        &path,
        &Vec::new(),
        false,
        Recover::Never,
    )
}

/// What `download-url` fetches.
#[derive(Clone, Debug)]
pub struct Download<'a> {
    pub url: &'a str,
    /// `iso` or `import`.
    pub content: &'a str,
    pub filename: &'a str,
    pub verify_certificates: bool,
    /// (algorithm, checksum).
    pub checksum: Option<(&'a str, &'a str)>,
}

/// `POST …/download-url` (`download`): the node downloads the file. A lost answer is
/// recovered by the running download whose task id names the file. Its log has no progress
/// lines the wait reads.
pub fn download_url(
    client: &Client,
    node: &str,
    storage: &str,
    download: &Download,
) -> Result<Dispatched, ApiError> {
    let mut params: Params = vec![
        ("content".into(), download.content.to_string()),
        ("filename".into(), download.filename.to_string()),
        ("url".into(), download.url.to_string()),
        (
            "verify-certificates".into(),
            flag(download.verify_certificates),
        ),
    ];
    if let Some((algorithm, sum)) = download.checksum {
        params.push(("checksum".into(), sum.to_string()));
        params.push(("checksum-algorithm".into(), algorithm.to_string()));
    }
    let path = Node::new(node).storage(storage).download_url();
    let recover = Recover::Named {
        node,
        task_type: TaskType::Download,
        id_contains: download.filename,
    };
    dispatch(client, Method::Post, &path, &params, false, recover)
}

/// What an upload sends: the file's name and bytes, its content type (`iso`, `vztmpl`,
/// `import`), and its SHA-256, which the `imgcopy` task checks before it stores the file.
#[derive(Clone, Debug)]
pub struct Upload<'a> {
    pub content: &'a str,
    pub filename: &'a str,
    pub contents: &'a [u8],
    pub sha256: &'a str,
}

/// `POST …/upload` (Status.pm `upload`): pveproxy streams the file to a temporary file, then
/// an `imgcopy` task checks the checksum and moves it into the storage (an existing file of
/// that name is overwritten). Sent once: its task's id names no file to recover it by; a
/// repeat after a lost answer overwrites the same file with the same bytes.
pub fn upload(
    client: &Client,
    node: &str,
    storage: &str,
    upload: &Upload,
) -> Result<Dispatched, ApiError> {
    let fields: Params = vec![
        ("content".into(), upload.content.to_string()),
        ("checksum-algorithm".into(), "sha256".into()),
        ("checksum".into(), upload.sha256.to_string()),
    ];
    let path = Node::new(node).storage(storage).upload();
    match client.upload(&path, &fields, upload.filename, upload.contents)? {
        serde_json::Value::String(answer) => crate::upid::Upid::parse(&answer)
            .map(|upid| {
                Dispatched::Task(super::Task {
                    upid,
                    reports_progress: false,
                })
            })
            .map_err(|e| ApiError::NotPve {
                source: None,
                detail: format!("PVE answered {e}"),
            }),
        serde_json::Value::Null => Ok(Dispatched::Done),
        other => Err(ApiError::NotPve {
            source: None,
            detail: format!("unexpected answer to {path}: {other}"),
        }),
    }
}

/// Whether a finished `download` task's log says the node kept the file it had: a file
/// already at the target that matched the checksum is not fetched again (pve-storage
/// API2/Storage/Status.pm download_url, through pve-common PVE::Tools download_file_from_url:
/// `OK, got correct file already, no need to download`).
pub fn download_kept_existing(log: &[String]) -> bool {
    log.iter()
        .any(|line| line.contains("got correct file already"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_file_is_read_from_the_log() {
        let kept = [
            "downloading https://example.com/a.img to /var/lib/vz/import/a.img".to_string(),
            "OK, got correct file already, no need to download".to_string(),
        ];
        assert!(download_kept_existing(&kept));
        assert!(!download_kept_existing(&kept[..1]));
    }
}
