//! Exactly once under least privilege (issue 35): the lost-answer recovery of creates and
//! clones (`pve::api::made`) for the identities organisations give automation, neither of
//! which sees other users' tasks (pve-manager API2/Tasks.pm node_tasks without `Sys.Audit` on
//! the node, API2/Cluster.pm tasks without it on `/`):
//!
//! * a privilege-separated API token granted the use's role on the pool (a token sees only
//!   its own tasks);
//! * a user holding that role, without `Sys.Audit` (it sees only its own tasks and its
//!   tokens').
//!
//! The answer to the create or clone is lost after PVE acted, then pveproxy is down for a
//! while; the run sends it once, finds its task by PVE's record, and reports the one VM.

use std::time::Duration;

use serde_json::{Value, json};

use super::forwarder::{Action, Forwarder, Rule};
use super::{CLONE, CREATE, carried, named_by_log, ok_via, sorted_vms, trace, vms};
use crate::support::least_privilege::{USER, USER_PASSWORD, scoped_sim, token_options, usage};
use crate::support::*;

/// Who runs the module.
#[derive(Clone, Copy, Debug)]
enum Identity {
    /// [`USER`]'s token `all`, with privilege separation.
    PrivsepToken,
    /// [`USER`] by ticket.
    UserWithoutSysAudit,
}

impl Identity {
    /// The id PVE writes into the UPIDs of this identity's tasks.
    fn task_user(self) -> String {
        match self {
            Identity::PrivsepToken => format!("{USER}!all"),
            Identity::UserWithoutSysAudit => USER.to_string(),
        }
    }

    /// Connection options through `fwd` as this identity.
    fn conn(self, fwd: &Forwarder) -> Value {
        let mut conn = fwd.conn();
        let options = conn.as_object_mut().unwrap();
        options.remove("api_password");
        let login = match self {
            Identity::PrivsepToken => token_options("all"),
            Identity::UserWithoutSysAudit => {
                json!({"api_user": USER, "api_password": USER_PASSWORD})
            }
        };
        options.extend(login.as_object().unwrap().clone());
        conn
    }
}

/// The role of `name`, which must not hold `Sys.Audit` (else the identity would see every
/// task and this would test nothing beyond the admin's case).
fn role_without_sys_audit(name: &str) -> &'static sankofa_proxmox::privileges::Use {
    let role = usage(name);
    assert!(
        role.privileges.iter().all(|(p, _)| *p != "Sys.Audit"),
        "{name}'s role holds Sys.Audit"
    );
    role
}

/// Whether, after the answer to `path` was lost, the run looked for its task on the node's
/// task list (`made::MadeBefore::look`), rather than learning of it some other way.
fn looked_for_its_task(fwd: &Forwarder, path: &str, task_type: &str) {
    let seen = fwd.seen();
    let lost = seen
        .iter()
        .position(|s| s.method == "POST" && s.path == path && s.outcome == "answer lost")
        .unwrap_or_else(|| panic!("no answer to {path} was lost:\n{}", trace(fwd)));
    assert!(
        seen[lost..].iter().any(|s| s.method == "GET"
            && s.path.starts_with("/nodes/pve1/tasks?")
            && s.path.contains(&format!("typefilter={task_type}"))
            && s.outcome == "forwarded"),
        "no look at pve1's {task_type} tasks after the lost answer:\n{}",
        trace(fwd)
    );
}

/// The UPID of the run's first task, checked to be `identity`'s `task_type` of `id`.
fn first_task_is(r: &Value, identity: Identity, task_type: &str, id: u64) -> String {
    let upid = r["tasks"][0]["upid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        upid.contains(&format!(":{task_type}:{id}:{}:", identity.task_user())),
        "{identity:?}: {upid} in {r}"
    );
    upid
}

fn a_lost_create_answer_creates_one_vm_for(identity: Identity) {
    let img = small_image();
    let role = role_without_sys_audit("create a VM from an image");
    let sim = scoped_sim(
        role,
        &[&img],
        &[],
        &["--plain-http", "--import-rate", "80M"],
    );
    let fwd = Forwarder::start(&sim);
    fwd.rule(
        Rule::new(Some("POST"), CREATE, Action::LoseAnswer)
            .times(1)
            .then_down(Duration::from_secs(8)),
    );
    let name = format!("lost-{identity:?}").to_lowercase();
    let args = merge(&[
        identity.conn(&fwd),
        json!({"node": "pve1", "name": name, "pool": "automation", "cores": 1, "timeout": "90s",
               "disks": [{"slot": "scsi0", "storage": "local-lvm",
                          "import_from": "local:import/small.qcow2"}]}),
    ]);
    let r = ok_via(&fwd, run(args));
    assert_eq!(fwd.count("POST", CREATE), 1, "{}", trace(&fwd));
    looked_for_its_task(&fwd, CREATE, "qmcreate");
    assert_eq!(carried(&sim, "POST", CREATE), 1);
    assert_eq!(sim.task_count("qmcreate"), 1);
    let id = auto_vmid(&name, &[]);
    assert_eq!(vms(&sim, "pve1"), vec![(id, name.clone())]);
    assert_eq!(r["changed"], true, "{r}");
    assert_eq!(r["vmid"], id, "{r}");
    first_task_is(&r, identity, "qmcreate", id);
}

#[test]
fn a_lost_create_answer_creates_one_vm_for_a_privsep_token() {
    a_lost_create_answer_creates_one_vm_for(Identity::PrivsepToken);
}

#[test]
fn a_lost_create_answer_creates_one_vm_for_a_user_without_sys_audit() {
    a_lost_create_answer_creates_one_vm_for(Identity::UserWithoutSysAudit);
}

fn a_lost_clone_answer_clones_one_vm_for(identity: Identity) {
    let role = role_without_sys_audit("clone a template");
    let sim = scoped_sim(role, &[], &[], &["--plain-http"]);
    let fwd = Forwarder::start(&sim);
    // Root's template in the pool: root's create is a task the identity does not see.
    ok(run(merge(&[
        fwd.conn(),
        json!({"node": "pve1", "vmid": 900, "name": "tpl", "cores": 1, "template": true,
               "pool": "automation",
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}]}),
    ])));
    fwd.rule(
        Rule::new(Some("POST"), CLONE, Action::LoseAnswer)
            .times(1)
            .then_down(Duration::from_secs(8)),
    );
    let name = format!("clone-{identity:?}").to_lowercase();
    let args = merge(&[
        identity.conn(&fwd),
        json!({"name": name, "pool": "automation", "clone": {"vmid": 900}, "timeout": "90s"}),
    ]);
    let r = ok_via(&fwd, run(args));
    assert_eq!(fwd.count("POST", CLONE), 1, "{}", trace(&fwd));
    looked_for_its_task(&fwd, CLONE, "qmclone");
    assert_eq!(carried(&sim, "POST", CLONE), 1);
    assert_eq!(sim.task_count("qmclone"), 1);
    let id = auto_vmid(&name, &[900]);
    let mut expected = vec![(id, name.clone()), (900, "tpl".to_string())];
    expected.sort();
    assert_eq!(sorted_vms(&sim), expected);
    assert_eq!(r["changed"], true, "{r}");
    assert_eq!(r["vmid"], id, "{r}");
    assert_eq!(r["config"]["name"], name.as_str(), "{r}");
    let upid = first_task_is(&r, identity, "qmclone", 900);
    assert_eq!(named_by_log(&sim, &upid), id.to_string(), "{upid}");
}

#[test]
fn a_lost_clone_answer_clones_one_vm_for_a_privsep_token() {
    a_lost_clone_answer_clones_one_vm_for(Identity::PrivsepToken);
}

#[test]
fn a_lost_clone_answer_clones_one_vm_for_a_user_without_sys_audit() {
    a_lost_clone_answer_clones_one_vm_for(Identity::UserWithoutSysAudit);
}
