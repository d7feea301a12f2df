//! Access control (pve-access-control PVE/API2/AccessControl.pm): what the user may do.

use crate::client::{Client, Params};
use crate::error::ApiError;
use crate::ops;

/// `GET /access/permissions?path=…`: whether the user holds `privilege` on `path` (a read).
pub fn has_privilege(client: &Client, path: &str, privilege: &str) -> Result<bool, ApiError> {
    let params: Params = vec![("path".into(), path.to_string())];
    let answer = ops::read(client, "/access/permissions", &params)?;
    let held = &answer[path][privilege];
    Ok(held.as_u64() == Some(1) || *held == true)
}

/// The ACL path of a node (`/nodes/{node}`), where privileges such as `Sys.Audit` on its
/// tasks are granted.
pub fn node_acl_path(node: &str) -> String {
    format!("/nodes/{node}")
}
