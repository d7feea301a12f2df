//! Access control (pve-access-control PVE/API2/AccessControl.pm): what the user may do.

use std::collections::BTreeMap;

use serde_json::Value;

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

/// What the run's user or token holds, as `GET /access/permissions` without `path` answers
/// (RPCEnvironment.pm `get_effective_permissions`): each path PVE lists (the top-level
/// paths, every path with an ACL, every pool member's `/vms/{id}` and `/storage/{sid}`) with
/// the privileges held *there*, inheritance, pools and a privsep token's intersection with
/// its user already applied, each with its propagate flag.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Permissions {
    /// Path → privilege → whether it propagates to the paths below.
    pub paths: BTreeMap<String, BTreeMap<String, bool>>,
}

impl Permissions {
    /// Reads the answer (`{"/": {"VM.Audit": 1, …}, …}`); a flag is `1`/`0` or a boolean.
    pub fn from_answer(answer: &Value) -> Permissions {
        let mut paths = BTreeMap::new();
        for (path, privileges) in answer.as_object().into_iter().flatten() {
            let held: BTreeMap<String, bool> = privileges
                .as_object()
                .into_iter()
                .flatten()
                .map(|(privilege, flag)| {
                    let propagates = flag.as_u64().is_some_and(|n| n != 0)
                        || flag.as_bool() == Some(true)
                        || flag.as_str().is_some_and(|s| s != "0" && !s.is_empty());
                    (privilege.clone(), propagates)
                })
                .collect();
            paths.insert(path.clone(), held);
        }
        Permissions { paths }
    }

    /// Whether `privilege` is held on `path`, as RPCEnvironment.pm `permissions` would
    /// compile it. A listed path's privileges are PVE's own answer for it. Any other path
    /// (a VM not yet made, a bridge, a node without an ACL) has no ACL and is in no pool
    /// (PVE lists both kinds), so it holds what reaches it from above: AccessControl.pm
    /// `roles` walks down from `/`, and at each level an ACL that propagates replaces what
    /// came from above, while one that does not propagate applies to its own path only.
    /// So the nearest listed ancestor with propagating privileges decides, by those
    /// (a listed ancestor whose privileges all stop there passes on what reached it).
    pub fn holds(&self, path: &str, privilege: &str) -> bool {
        if let Some(held) = self.paths.get(path) {
            return held.contains_key(privilege);
        }
        let mut at = path;
        while let Some(parent) = parent_path(at) {
            at = parent;
            if let Some(held) = self.paths.get(at)
                && held.values().any(|propagates| *propagates)
            {
                return held.get(privilege) == Some(&true);
            }
        }
        false
    }
}

/// `/a/b` → `/a`, `/a` → `/`, `/` → none.
fn parent_path(path: &str) -> Option<&str> {
    if path == "/" || path.is_empty() {
        return None;
    }
    match path.trim_end_matches('/').rfind('/') {
        Some(0) => Some("/"),
        Some(at) => Some(&path[..at]),
        None => None,
    }
}

/// `GET /access/permissions` (no `path`): everything the run's user or token holds, in one
/// request (a read; every user may read their own, AccessControl.pm `permissions`).
pub fn permissions(client: &Client) -> Result<Permissions, ApiError> {
    let answer = ops::read(client, "/access/permissions", &Vec::new())?;
    Ok(Permissions::from_answer(&answer))
}

/// A refusal PVE raised with pve-common `raise_perm_exc("$path, $priv")` (HTTP 403
/// `Permission check failed (/vms/100, VM.PowerMgmt)`): the path and the privileges it
/// checked (`check_any` joins them with `|`), and what PVE said after them
/// (`Sys.Modify for modifying tag 'prod'` gives `for modifying tag 'prod'`).
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    pub path: String,
    /// Any one of them would have done.
    pub privileges: Vec<String>,
    pub detail: Option<String>,
}

impl Refusal {
    /// The refusal in an API error, if it is one that names a path and a privilege.
    pub fn of(error: &ApiError) -> Option<Refusal> {
        let ApiError::Http {
            status: 403,
            message,
            ..
        } = error
        else {
            return None;
        };
        let inner = message
            .trim()
            .strip_prefix("Permission check failed (")?
            .strip_suffix(')')?;
        let (path, rest) = inner.split_once(", ")?;
        if !path.starts_with('/') {
            return None;
        }
        let (privileges, detail) = match rest.split_once(' ') {
            Some((privileges, detail)) => (privileges, Some(detail.to_string())),
            None => (rest, None),
        };
        Some(Refusal {
            path: path.to_string(),
            privileges: privileges.split('|').map(str::to_string).collect(),
            detail,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_listed_path_is_pves_own_answer() {
        let held = Permissions::from_answer(&json!({
            "/": {"Sys.Audit": 0},
            "/vms/100": {"VM.Audit": 0, "VM.PowerMgmt": 0},
        }));
        assert!(held.holds("/vms/100", "VM.PowerMgmt"));
        assert!(!held.holds("/vms/100", "VM.Allocate"));
        assert!(held.holds("/", "Sys.Audit"));
    }

    #[test]
    fn an_unlisted_path_holds_what_propagates_from_its_nearest_listed_ancestor() {
        // A role on /vms with propagate, a narrower one on /vms/100 (listed as such); a new
        // VM's path and a bridge are not listed.
        let held = Permissions::from_answer(&json!({
            "/": {"Sys.Audit": 1},
            "/vms": {"VM.Allocate": 1, "VM.Audit": 1},
            "/vms/100": {"VM.Audit": 1},
            "/sdn/zones/localnetwork": {"SDN.Use": 1},
        }));
        assert!(held.holds("/vms/123", "VM.Allocate"));
        assert!(!held.holds("/vms/123", "Sys.Audit"), "replaced at /vms");
        assert!(
            !held.holds("/vms/100", "VM.Allocate"),
            "replaced at /vms/100"
        );
        assert!(held.holds("/sdn/zones/localnetwork/vmbr0", "SDN.Use"));
        assert!(held.holds("/sdn/zones/localnetwork/vmbr0/20", "SDN.Use"));
        assert!(held.holds("/nodes/pve1", "Sys.Audit"));
        assert!(!held.holds("/storage/local", "Datastore.Audit"));
    }

    #[test]
    fn a_privilege_that_does_not_propagate_stays_on_its_path() {
        let held = Permissions::from_answer(&json!({
            "/": {"Sys.Audit": 1},
            "/storage/local": {"Datastore.AllocateSpace": 0},
            "/pool/web": {"VM.Allocate": 0},
        }));
        assert!(held.holds("/storage/local", "Datastore.AllocateSpace"));
        // Nothing of /storage/local propagates: what reached it from / passes on.
        assert!(held.holds("/storage/local/x", "Sys.Audit"));
        assert!(!held.holds("/storage/local/x", "Datastore.AllocateSpace"));
        assert!(held.holds("/pool/web", "VM.Allocate"));
    }

    #[test]
    fn nothing_listed_holds_nothing() {
        let held = Permissions::from_answer(&json!({}));
        assert!(!held.holds("/", "VM.Audit"));
        assert!(!held.holds("/vms/100", "VM.Audit"));
    }

    #[test]
    fn flags_read_as_numbers_booleans_or_strings() {
        let held = Permissions::from_answer(&json!({"/": {"A": 1, "B": true, "C": "1", "D": 0}}));
        let flags: Vec<bool> = held.paths["/"].values().copied().collect();
        assert_eq!(flags, vec![true, true, true, false]);
    }

    #[test]
    fn parents() {
        assert_eq!(parent_path("/vms/100"), Some("/vms"));
        assert_eq!(parent_path("/vms"), Some("/"));
        assert_eq!(parent_path("/"), None);
    }

    fn forbidden(message: &str) -> ApiError {
        ApiError::Http {
            status: 403,
            message: message.into(),
            errors: Default::default(),
        }
    }

    #[test]
    fn a_refusal_names_its_path_and_privileges() {
        assert_eq!(
            Refusal::of(&forbidden(
                "Permission check failed (/vms/123, VM.PowerMgmt)\n"
            )),
            Some(Refusal {
                path: "/vms/123".into(),
                privileges: vec!["VM.PowerMgmt".into()],
                detail: None,
            })
        );
        assert_eq!(
            Refusal::of(&forbidden(
                "Permission check failed (/storage/local, Datastore.AllocateSpace|Datastore.Audit)"
            ))
            .unwrap()
            .privileges,
            vec!["Datastore.AllocateSpace", "Datastore.Audit"]
        );
        let tag = Refusal::of(&forbidden(
            "Permission check failed (/, Sys.Modify for modifying tag 'prod')",
        ))
        .unwrap();
        assert_eq!(tag.path, "/");
        assert_eq!(tag.privileges, vec!["Sys.Modify"]);
        assert_eq!(tag.detail.as_deref(), Some("for modifying tag 'prod'"));
    }

    #[test]
    fn other_refusals_are_not_read_as_privileges() {
        assert_eq!(Refusal::of(&forbidden("Permission check failed")), None);
        assert_eq!(
            Refusal::of(&forbidden("Permission check failed (user != root@pam)")),
            None
        );
        assert_eq!(
            Refusal::of(&forbidden(
                "Permission check failed (pool 'x' does not exist)"
            )),
            None
        );
        let not_403 = ApiError::Http {
            status: 500,
            message: "Permission check failed (/vms/1, VM.Audit)".into(),
            errors: Default::default(),
        };
        assert_eq!(Refusal::of(&not_403), None);
    }
}
