//! The lists that show a caller only what it may see (`user => 'all'` endpoints that filter
//! by privilege): pve-manager `API2/Cluster.pm` resources, qemu-server `API2/Qemu.pm`
//! vmlist, pve-storage `API2/Storage/Config.pm` index and `API2/Storage/Status.pm` index.
//! Each takes the list as its handler made it and leaves out the rest. And a node's task
//! list (pve-manager `API2/Tasks.pm` node_tasks), which filters task by task.

use serde_json::Value;

use crate::access::check::Checker;

/// Keeps the entries of a JSON array for which `keep` holds (a non-array is left alone).
fn retain(mut list: Value, mut keep: impl FnMut(&mut Value) -> bool) -> Value {
    if let Some(items) = list.as_array_mut() {
        items.retain_mut(|entry| keep(entry));
    }
    list
}

fn vmid_of(entry: &Value) -> Option<u64> {
    entry["vmid"]
        .as_u64()
        .or_else(|| entry["vmid"].as_str()?.parse().ok())
}

/// Cluster.pm resources: a guest needs `VM.Audit` on `/vms/{vmid}` (its `pool` is shown
/// only with `Pool.Audit` on the pool), a pool `Pool.Audit`, a storage `Datastore.Audit`;
/// a node without `Sys.Audit` on `/nodes/{node}` is listed without its usage
/// (API2Tools.pm extract_node_stats with `$exclude_stats`).
pub fn cluster_resources(checker: &Checker, list: Value) -> Value {
    retain(list, |entry| match entry["type"].as_str().unwrap_or("") {
        "qemu" | "lxc" => {
            let Some(vmid) = vmid_of(entry) else {
                return false;
            };
            if !checker.has(&format!("/vms/{vmid}"), &["VM.Audit"]) {
                return false;
            }
            let pool = entry["pool"].as_str().map(String::from);
            if let Some(pool) = pool
                && !checker.has(&format!("/pool/{pool}"), &["Pool.Audit"])
                && let Some(obj) = entry.as_object_mut()
            {
                obj.remove("pool");
            }
            true
        }
        "pool" => {
            let pool = entry["pool"].as_str().unwrap_or("");
            checker.has(&format!("/pool/{pool}"), &["Pool.Audit"])
        }
        "storage" => {
            let sid = entry["storage"].as_str().unwrap_or("");
            checker.has(&format!("/storage/{sid}"), &["Datastore.Audit"])
        }
        "node" => {
            let node = entry["node"].as_str().unwrap_or("").to_string();
            if !checker.has(&format!("/nodes/{node}"), &["Sys.Audit"])
                && let Some(obj) = entry.as_object_mut()
            {
                for stat in [
                    "uptime", "cpu", "mem", "disk", "maxcpu", "maxmem", "maxdisk",
                ] {
                    obj.remove(stat);
                }
            }
            true
        }
        _ => true,
    })
}

/// API2/Qemu.pm vmlist: only the VMs with `VM.Audit` on `/vms/{vmid}`.
pub fn vm_list(checker: &Checker, list: Value) -> Value {
    retain(list, |entry| {
        vmid_of(entry).is_some_and(|vmid| checker.has(&format!("/vms/{vmid}"), &["VM.Audit"]))
    })
}

/// Storage/Config.pm and Storage/Status.pm index: only the storages with `Datastore.Audit`
/// or `Datastore.AllocateSpace` on `/storage/{storage}`.
pub fn storages(checker: &Checker, list: Value) -> Value {
    retain(list, |entry| {
        let sid = entry["storage"].as_str().unwrap_or("");
        checker.has_any(
            &format!("/storage/{sid}"),
            &["Datastore.Audit", "Datastore.AllocateSpace"],
        )
    })
}

/// API2/Tasks.pm node_tasks: whether a caller without `Sys.Audit` on the node (`$auditor`)
/// sees a task of `task_user` (the UPID's user, a token's whole id `user@realm!token`).
/// A finished task is read from the index and `$convert_token_task` splits a token's id
/// before `$check_task_user` filters it: the token and its user see it. A running task is
/// read from the `active` file and filtered unsplit: only `$user eq $task->{user}`, so a
/// token sees its own running tasks and its user does not.
pub fn node_task_listed(auditor: bool, authid: &str, task_user: &str, running: bool) -> bool {
    if auditor || authid == task_user {
        return true;
    }
    !running
        && task_user
            .split_once('!')
            .is_some_and(|(owner, _)| owner == authid)
}

/// API2/Tasks.pm node_tasks, `$convert_token_task`: a finished token task is listed with its
/// `user` and `tokenid` apart; a running one (from the `active` file) keeps the whole id in
/// `user`.
pub fn node_task_entry(mut entry: Value, running: bool) -> Value {
    let split = entry["user"]
        .as_str()
        .and_then(|user| user.split_once('!'))
        .map(|(user, token)| (user.to_string(), token.to_string()));
    if !running
        && let Some((user, token)) = split
        && let Some(fields) = entry.as_object_mut()
    {
        fields.insert("user".into(), Value::String(user));
        fields.insert("tokenid".into(), Value::String(token));
    }
    entry
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// pve-manager API2/Tasks.pm node_tasks: `$parse_line` runs `$convert_token_task` on each
    /// task of the index before `$filter_task`; the `active` file's tasks go to `$filter_task`
    /// as `read_file('active')` decoded them; `$check_task_user` lets a split token task be
    /// seen by `$user eq $fulltoken || $user eq $task->{user}`, an unsplit one by
    /// `$user eq $task->{user}`.
    #[test]
    fn a_node_lists_a_token_task_to_its_user_once_it_ended() {
        let token_task = "ci@pve!deploy";
        for running in [false, true] {
            assert!(node_task_listed(
                false,
                "ci@pve!deploy",
                token_task,
                running
            ));
            assert!(!node_task_listed(
                false,
                "ci@pve!other",
                token_task,
                running
            ));
            assert!(!node_task_listed(false, "ops@pve", token_task, running));
            assert!(node_task_listed(true, "ops@pve", token_task, running));
            assert!(node_task_listed(false, "ci@pve", "ci@pve", running));
            assert!(!node_task_listed(false, "ci@pve!deploy", "ci@pve", running));
        }
        assert!(node_task_listed(false, "ci@pve", token_task, false));
        assert!(!node_task_listed(false, "ci@pve", token_task, true));
    }

    #[test]
    fn a_finished_token_task_is_listed_with_its_token_apart() {
        let entry = json!({"upid": "UPID:pve1:…", "user": "ci@pve!deploy"});
        let done = node_task_entry(entry.clone(), false);
        assert_eq!(
            (&done["user"], &done["tokenid"]),
            (&json!("ci@pve"), &json!("deploy"))
        );
        let running = node_task_entry(entry, true);
        assert_eq!(running["user"], "ci@pve!deploy");
        assert!(running.get("tokenid").is_none(), "{running}");
        let users = node_task_entry(json!({"user": "ci@pve"}), false);
        assert_eq!(users, json!({"user": "ci@pve"}));
    }
}
