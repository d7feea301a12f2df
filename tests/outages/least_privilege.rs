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
//! while; the run sends it once, finds its task by PVE's record, and reports the one VM. And
//! a user sees its own tokens' ended tasks: a clone or a create by the user's token is never
//! taken for the user's run's.

use std::time::Duration;

use serde_json::{Value, json};

use super::forwarder::{Action, Forwarder, Rule};
use super::{CLONE, CREATE, carried, failed_via, named_by_log, ok_via, sorted_vms, trace, vms};
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

/// The lowest free vmid of these tests' clusters (PVE's `next-id` lower bound, 100): what
/// `/cluster/nextid` gives an identity that cannot read datacenter.cfg's range.
const NEXTID_LOWEST: u64 = 100;

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
    // Without Sys.Audit on / PVE shows no `next-id` in /cluster/options: the run takes the
    // lowest free id `/cluster/nextid` gives, not one spread by name.
    let id = NEXTID_LOWEST;
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
    // Without Sys.Audit on / PVE shows no `next-id` in /cluster/options: the run takes the
    // lowest free id `/cluster/nextid` gives, not one spread by name.
    let id = NEXTID_LOWEST;
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

/// A `POST` to the simulator (plain HTTP on `sim_port`) by [`USER`]'s token `all`, bypassing
/// the forwarder: PVE's `data`, or the status and message.
fn post_as_token(sim_port: u16, path: &str, params: &[(&str, &str)]) -> Result<Value, String> {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut resp = agent
        .post(&format!("http://127.0.0.1:{sim_port}/api2/json{path}"))
        .header(
            "Authorization",
            &format!("PVEAPIToken={USER}!all=secret-all"),
        )
        .send_form(params.iter().copied())
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let v: Value = serde_json::from_str(&resp.body_mut().read_to_string().unwrap_or_default())
        .unwrap_or_default();
    if status == 200 {
        Ok(v["data"].clone())
    } else {
        Err(format!("{status} {}", v["message"].as_str().unwrap_or("")))
    }
}

/// While the user's clone is lost in the outage, the user's own token clones the same
/// template: a user sees its tokens' ended tasks (Tasks.pm `$check_task_user`), of the same
/// type and id, so only the UPID's user (the token's whole id) keeps the token's clone from
/// being taken for the user's run's.
#[test]
fn a_clone_by_the_users_own_token_is_not_taken_for_the_users_run() {
    let role = role_without_sys_audit("clone a template");
    let sim = scoped_sim(role, &[], &[], &["--plain-http"]);
    let fwd = Forwarder::start(&sim);
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
    let identity = Identity::UserWithoutSysAudit;
    let args = merge(&[
        identity.conn(&fwd),
        json!({"name": "ours", "pool": "automation", "clone": {"vmid": 900}, "timeout": "90s"}),
    ]);
    let module = std::thread::spawn(move || run(args));
    let t = std::time::Instant::now();
    while sim.task_count("qmclone") == 0 && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        sim.task_count("qmclone"),
        1,
        "the run's clone never started"
    );
    let theirs = post_as_token(
        sim.port(),
        CLONE,
        &[("newid", "555"), ("name", "tokens"), ("pool", "automation")],
    )
    .unwrap();
    let theirs = theirs.as_str().unwrap().to_string();
    assert!(
        theirs.contains(&format!(":qmclone:900:{USER}!all:")),
        "{theirs}"
    );
    let r = ok_via(&fwd, module.join().unwrap());
    assert_eq!(fwd.count("POST", CLONE), 1, "{}", trace(&fwd));
    looked_for_its_task(&fwd, CLONE, "qmclone");
    assert_eq!(sim.task_count("qmclone"), 2);
    // Without Sys.Audit on / PVE shows no `next-id` in /cluster/options: the run takes the
    // lowest free id `/cluster/nextid` gives, not one spread by name.
    let ours = NEXTID_LOWEST;
    let mut expected = vec![
        (ours, "ours".to_string()),
        (555, "tokens".to_string()),
        (900, "tpl".to_string()),
    ];
    expected.sort();
    assert_eq!(sorted_vms(&sim), expected);
    assert_eq!(r["vmid"], ours, "{r}");
    assert_eq!(r["changed"], true, "{r}");
    let upid = first_task_is(&r, identity, "qmclone", 900);
    assert_ne!(upid, theirs, "the token's clone was taken for the run's");
    assert_eq!(named_by_log(&sim, &upid), ours.to_string(), "{upid}");
}

/// Between the user's look and its create (vmid given), the user's own token creates that
/// vmid. A user sees its tokens' ended tasks, of the type and id its own create's would have:
/// the run must not take the token's for its own (the UPID's user is the token's whole id).
/// It fails naming the token and writes nothing to the VM.
#[test]
fn a_vm_the_users_own_token_made_is_not_taken_for_the_users() {
    let role = role_without_sys_audit("create a VM from an image");
    let sim = scoped_sim(role, &[], &[], &["--plain-http"]);
    let fwd = Forwarder::start(&sim);
    let port = sim.port();
    fwd.rule(
        Rule::new(
            Some("POST"),
            CREATE,
            Action::Before(Box::new(move || {
                let upid = post_as_token(
                    port,
                    CREATE,
                    &[
                        ("vmid", "500"),
                        ("name", "tokens"),
                        ("pool", "automation"),
                        ("memory", "512"),
                        ("cores", "1"),
                    ],
                )
                .unwrap();
                // The token's create ends before the user's reaches PVE.
                let t = std::time::Instant::now();
                while t.elapsed() < Duration::from_secs(20) {
                    let status = ureq::get(&format!(
                        "http://127.0.0.1:{port}/api2/json/nodes/pve1/tasks/{}/status",
                        super::forwarder::percent_encode(upid.as_str().unwrap())
                    ))
                    .header(
                        "Authorization",
                        &format!("PVEAPIToken={USER}!all=secret-all"),
                    )
                    .call()
                    .ok()
                    .and_then(|mut resp| resp.body_mut().read_to_string().ok())
                    .and_then(|text| serde_json::from_str::<Value>(&text).ok());
                    if status.is_some_and(|s| s["data"]["status"] == "stopped") {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })),
        )
        .times(1),
    );
    let args = merge(&[
        Identity::UserWithoutSysAudit.conn(&fwd),
        json!({"node": "pve1", "vmid": 500, "name": "ours", "pool": "automation", "cores": 2,
               "memory": 2048, "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}]}),
    ]);
    let f = failed_via(&fwd, run(args));
    let m = f["msg"].as_str().unwrap_or_default();
    assert!(m.contains("VM 500"), "{m}");
    assert!(m.contains(&format!("{USER}!all")), "{m}");
    assert_eq!(f["changed"], false, "{f}");
    let writes: Vec<String> = fwd
        .seen()
        .iter()
        .filter(|s| s.method != "GET" && s.path != "/access/ticket")
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert_eq!(writes, vec![format!("POST {CREATE}")], "{writes:?}");
    let cfg = &sim.get("/nodes/pve1/qemu/500/config")["data"];
    assert_eq!(cfg["name"], "tokens", "{cfg}");
    assert_eq!(cfg["memory"].to_string().trim_matches('"'), "512", "{cfg}");
    assert_eq!(sim.task_count("qmcreate"), 1);
}
