//! pve-sim's permission model (`--user-cfg`, pve-access-control): `GET /access/permissions`
//! as PVE answers it, and the checks each endpoint makes, with PVE's 403 text. Each test
//! cites the Perl it follows.

use serde_json::{Value, json};

use crate::support::access::{Token, sim_with_user_cfg};
use crate::support::{Sim, raw};

/// A user whose API token has privilege separation, with a role on a pool: the setup the
/// issue's least-privilege runs use.
const USER_CFG: &str = "\
user:root@pam:1:0:::root@example.com:::
user:ci@pve:1:0::::::
user:off@pve:0:0::::::
token:ci@pve!deploy:0:1::
token:ci@pve!full:0:0::
group:ops:ci@pve::
pool:web:web servers:::
role:Starter:VM.PowerMgmt,VM.Audit:
acl:1:/pool/web:ci@pve:PVEVMAdmin:
acl:1:/pool/web:ci@pve!deploy:PVEVMUser:
acl:1:/storage/local-lvm:ci@pve,ci@pve!deploy:PVEDatastoreUser:
acl:0:/vms/200:@ops:Starter:
";

/// A simulator started with [`USER_CFG`] and secrets for the tokens and the user.
fn sim_with(cfg: &str) -> Sim {
    sim_with_user_cfg(
        cfg,
        &[
            "--user",
            "ci@pve:cipw",
            "--user",
            "off@pve:offpw",
            "--token",
            "ci@pve!deploy=dep-secret",
            "--token",
            "ci@pve!full=full-secret",
        ],
    )
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// API2/AccessControl.pm permissions with `path`, RPCEnvironment.pm permissions: a privsep
/// token gets the intersection of its own ACLs and its user's, here PVEVMUser (the token's)
/// within PVEVMAdmin (the user's) on the pool; each privilege maps to its propagate flag.
#[test]
fn a_privsep_tokens_permissions_are_the_intersection_with_its_users() {
    let sim = sim_with(USER_CFG);
    let deploy = Token::new(&sim, "ci@pve!deploy=dep-secret");
    let full = Token::new(&sim, "ci@pve!full=full-secret");
    let on_pool = deploy.data("GET", "/access/permissions", &[("path", "/pool/web")]);
    assert_eq!(on_pool["/pool/web"]["VM.PowerMgmt"], 1, "{on_pool}");
    assert!(
        on_pool["/pool/web"].get("VM.Allocate").is_none(),
        "{on_pool}"
    );
    // Not privilege-separated: the user's privileges.
    let on_pool = full.data("GET", "/access/permissions", &[("path", "/pool/web")]);
    assert_eq!(on_pool["/pool/web"]["VM.Allocate"], 1, "{on_pool}");
    // A path with nothing answers an empty set for it.
    let root = deploy.data("GET", "/access/permissions", &[("path", "/")]);
    assert_eq!(root, json!({"/": {}}));
    // Without a path, get_effective_permissions: every path with something.
    let all = deploy.data("GET", "/access/permissions", &[]);
    assert_eq!(keys(&all), ["/pool/web", "/storage/local-lvm"], "{all}");
    assert_eq!(all["/storage/local-lvm"]["Datastore.AllocateSpace"], 1);
}

/// API2/AccessControl.pm permissions: a caller may read its own permissions and those of
/// its own tokens; anyone else's need Sys.Audit on /access. A token is not its user.
#[test]
fn another_users_permissions_need_sys_audit_on_access() {
    let sim = sim_with(USER_CFG);
    let deploy = Token::new(&sim, "ci@pve!deploy=dep-secret");
    assert_eq!(
        deploy.refused("GET", "/access/permissions", &[("userid", "ci@pve")]),
        "Permission check failed (/access, Sys.Audit)"
    );
    let ci = crate::support::Session::login_as(&sim, "ci@pve", "cipw");
    let theirs = ci.data(
        "GET",
        "/access/permissions",
        &[("userid", "ci@pve!deploy"), ("path", "/pool/web")],
    );
    assert!(theirs["/pool/web"].get("VM.Allocate").is_none(), "{theirs}");
    let root = crate::support::Session::login(&sim);
    let of_ci = root.data(
        "GET",
        "/access/permissions",
        &[("userid", "ci@pve"), ("path", "/pool/web")],
    );
    assert_eq!(of_ci["/pool/web"]["VM.Allocate"], 1, "{of_ci}");
}

/// RPCEnvironment.pm permissions: root@pam has every privilege; the suite's root@pam!ci
/// token (no user.cfg line, so no privilege separation, as before `--user-cfg`) has its
/// user's. AccessControl.pm check_user_enabled: a disabled user cannot log in.
#[test]
fn root_has_everything_and_a_disabled_user_cannot_log_in() {
    let sim = sim_with(USER_CFG);
    let tok = Token::new(&sim, "root@pam!ci=tok-secret");
    let perms = tok.data("GET", "/access/permissions", &[("path", "/")]);
    assert_eq!(perms["/"]["Permissions.Modify"], 1, "{perms}");
    assert_eq!(perms["/"]["Sys.AccessNetwork"], 1, "{perms}");
    let addr = format!("127.0.0.1:{}", sim.port());
    let (s, _, _) = raw(
        &addr,
        "POST",
        "/api2/json/access/ticket",
        &[],
        "username=off%40pve&password=offpw",
    );
    assert_eq!(s, 401);
}

/// pve-sim's kinds of `--user` map onto the model: `:audit` is PVEAuditor on /.
#[test]
fn an_audit_user_is_pve_auditor_on_root() {
    let sim = Sim::plain(&[], &[]);
    let auditor = crate::support::Session::login_as(&sim, "auditor@pve", "auditpw");
    let perms = auditor.data("GET", "/access/permissions", &[("path", "/vms/100")]);
    assert_eq!(perms["/vms/100"]["VM.Audit"], 1, "{perms}");
    assert!(perms["/vms/100"].get("VM.PowerMgmt").is_none(), "{perms}");
}

/// Tokens with privilege separation of a user who is Administrator on `/`, so each token has
/// exactly its own ACLs: `deploy` PVEVMAdmin on the pool with storage and bridges, `nonet`
/// the same without SDN.Use (but PVEDatastoreAdmin on `local`), `maker` a role without VM.PowerMgmt, VM.Config.Network or
/// VM.Config.Cloudinit, `user` PVEVMUser on the pool; `deploy` also PVEVMAdmin on VM 120.
const CHECKS_CFG: &str = "\
user:ci@pve:1:0::::::
token:ci@pve!deploy:0:1::
token:ci@pve!nonet:0:1::
token:ci@pve!maker:0:1::
token:ci@pve!user:0:1::
token:root@pam!sep:0:1::
pool:web::::
role:Maker:VM.Allocate,VM.Config.Disk,VM.Config.CPU,VM.Config.Memory,VM.Config.Options,VM.Audit:
acl:1:/:ci@pve:Administrator:
acl:1:/pool/web:ci@pve!deploy,ci@pve!nonet:PVEVMAdmin:
acl:1:/pool/web:ci@pve!maker:Maker:
acl:1:/pool/web:ci@pve!user:PVEVMUser:
acl:1:/storage/local-lvm:ci@pve!deploy,ci@pve!nonet,ci@pve!maker:PVEDatastoreUser:
acl:1:/sdn/zones/localnetwork:ci@pve!deploy:PVESDNUser:
acl:1:/storage/local:ci@pve!nonet:PVEDatastoreAdmin:
acl:0:/vms/120:ci@pve!deploy:PVEVMAdmin:
";

/// A simulator with [`CHECKS_CFG`], VM 100 in pool `web` and VM 101 outside it (root made
/// both), and a caller for each token.
struct Checks {
    sim: Sim,
    root: crate::support::Session,
}

impl Checks {
    fn start(extra: &[&str]) -> Checks {
        let mut owned: Vec<String> = ["deploy", "nonet", "maker", "user"]
            .iter()
            .map(|token| format!("--token=ci@pve!{token}=s-{token}"))
            .collect();
        owned.push("--token=root@pam!sep=s-sep".into());
        owned.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = owned.iter().map(String::as_str).collect();
        let sim = sim_with_user_cfg(CHECKS_CFG, &args);
        let root = crate::support::Session::login(&sim);
        crate::support::quick_vm(&root, "100", &[("pool", "web")]);
        crate::support::quick_vm(&root, "101", &[]);
        Checks { sim, root }
    }

    fn token(&self, name: &str) -> Token {
        let secret = if name == "sep" {
            "root@pam!sep=s-sep".to_string()
        } else {
            format!("ci@pve!{name}=s-{name}")
        };
        Token::new(&self.sim, &secret)
    }
}

/// API2/Qemu.pm create_vm: `VM.Allocate` on `/vms/{vmid}` or on the pool, else a bare
/// `raise_perm_exc()`; with it, `Datastore.AllocateSpace` on each new disk's storage
/// (`$check_storage_access`) and `SDN.Use` on each NIC's bridge and VLAN
/// (`check_bridge_access` → GuestHelpers.pm check_vnet_access, zone `localnetwork`).
#[test]
fn create_needs_allocate_storage_and_the_bridge() {
    let c = Checks::start(&[]);
    let create = |token: &str, extra: &[(&str, &str)]| {
        let mut p = vec![("vmid", "102"), ("pool", "web")];
        p.extend_from_slice(extra);
        c.token(token).call("POST", "/nodes/pve1/qemu", &p)
    };
    let (s, r, _) = create("user", &[]);
    assert_eq!((s, r.as_str()), (403, "Permission check failed"));
    let (s, r, _) = create("deploy", &[("scsi0", "local:1")]);
    assert_eq!(
        (s, r.as_str()),
        (
            403,
            "Permission check failed (/storage/local, Datastore.AllocateSpace)"
        )
    );
    let (s, r, _) = create("nonet", &[("net0", "virtio,bridge=vmbr0")]);
    assert_eq!(
        (s, r.as_str()),
        (
            403,
            "Permission check failed (/sdn/zones/localnetwork/vmbr0, SDN.Use)"
        )
    );
    let (s, r, _) = create("nonet", &[("net0", "virtio,bridge=vmbr0,tag=10")]);
    assert_eq!(
        (s, r.as_str()),
        (
            403,
            "Permission check failed (/sdn/zones/localnetwork/vmbr0/10, SDN.Use)"
        )
    );
    let deploy = c.token("deploy");
    let upid = deploy.data(
        "POST",
        "/nodes/pve1/qemu",
        &[
            ("vmid", "102"),
            ("pool", "web"),
            ("scsi0", "local-lvm:1"),
            ("net0", "virtio,bridge=vmbr0,tag=10"),
        ],
    );
    assert_eq!(c.root.wait(upid.as_str().unwrap())["exitstatus"], "OK");
    // The new VM is the pool's, so the token may start it.
    deploy.data("POST", "/nodes/pve1/qemu/102/status/start", &[]);
}

/// API2/Qemu.pm create_vm checks `VM.PowerMgmt` up front for `start=1` (the worker's
/// vm_start skips its own check), before `VM.Allocate`; `$check_vm_modify_config_perm` key
/// by key: cloud-init keys take `VM.Config.Cloudinit` or `VM.Config.Network` (check_any),
/// `startup` also `Sys.Modify` on `/`, a key of no group is root@pam's alone (a `die`, 500).
#[test]
fn create_checks_start_and_each_key() {
    let c = Checks::start(&[]);
    let maker = c.token("maker");
    let deploy = c.token("deploy");
    let create = |t: &Token, extra: &[(&str, &str)]| {
        let mut p = vec![("vmid", "102"), ("pool", "web")];
        p.extend_from_slice(extra);
        t.call("POST", "/nodes/pve1/qemu", &p)
    };
    let (s, r, _) = create(&maker, &[("start", "1")]);
    assert_eq!(
        (s, r.as_str()),
        (403, "Permission check failed (/vms/102, VM.PowerMgmt)")
    );
    let (s, r, _) = create(&maker, &[("ciuser", "ops")]);
    assert_eq!(
        (s, r.as_str()),
        (
            403,
            "Permission check failed (/vms/102, VM.Config.Cloudinit|VM.Config.Network)"
        )
    );
    let (s, r, _) = create(&deploy, &[("startup", "order=1")]);
    assert_eq!(
        (s, r.as_str()),
        (403, "Permission check failed (/, Sys.Modify)")
    );
    let (s, r, _) = create(&deploy, &[("args", "-no-reboot")]);
    assert_eq!((s, r.as_str()), (500, "only root can set 'args' config"));
    // A root@pam ticket passes them all.
    let (s, _, _) = c.root.call(
        "POST",
        "/nodes/pve1/qemu",
        &[
            ("vmid", "103"),
            ("args", "-no-reboot"),
            ("startup", "order=1"),
        ],
    );
    assert_eq!(s, 200);
}

/// API2/Qemu.pm `$check_storage_access` for `import-from`: a volume owned by a VM needs that
/// VM's `VM.Clone`; an import volume pve-storage check_volume_access's
/// `Datastore.AllocateSpace` or `Datastore.Audit` on its storage; an absolute path is
/// root@pam's alone.
#[test]
fn import_sources_need_their_own_privileges() {
    let c = Checks::start(&[]);
    let deploy = c.token("deploy");
    let import = |src: &str| {
        deploy.call(
            "POST",
            "/nodes/pve1/qemu",
            &[
                ("vmid", "102"),
                ("pool", "web"),
                ("scsi0", &format!("local-lvm:0,import-from={src}")),
            ],
        )
    };
    let (s, r, _) = import("local-lvm:vm-101-disk-0");
    assert_eq!(
        (s, r.as_str()),
        (403, "Permission check failed (/vms/101, VM.Clone)")
    );
    let (s, r, _) = import("local:import/disk.qcow2");
    assert_eq!(
        (s, r.as_str()),
        (
            403,
            "Permission check failed (/storage/local, Datastore.AllocateSpace|Datastore.Audit)"
        )
    );
    let (s, r, _) = import("/tmp/disk.qcow2");
    assert_eq!(s, 500);
    assert!(
        r.starts_with("Only root can pass arbitrary filesystem paths."),
        "{r}"
    );
}

/// GuestHelpers.pm assert_tag_permissions: changing tags needs `VM.Config.Options` on the
/// VM itself (`check_vm_perm` without the pool), and a registered tag (datacenter.cfg
/// `registered-tags`) `Sys.Modify` on `/`. create_vm checks it in its worker, before
/// add_vm_to_pool, so a token whose rights come from the pool cannot create a VM with tags
/// (the task fails); update_vm_api checks it in `$updatefn` (PUT answers 403).
#[test]
fn tags_need_options_on_the_vm_and_registered_ones_sys_modify() {
    let c = Checks::start(&["--registered-tags", "prod"]);
    let deploy = c.token("deploy");
    let create = |vmid: &str, pool: &str, tags: &str| {
        let upid = deploy.data(
            "POST",
            "/nodes/pve1/qemu",
            &[("vmid", vmid), ("pool", pool), ("tags", tags)],
        );
        c.root.wait(upid.as_str().unwrap())["exitstatus"].clone()
    };
    assert_eq!(
        create("102", "web", "web"),
        "unable to create VM 102 - Permission check failed (/vms/102, VM.Config.Options)"
    );
    assert_eq!(
        create("120", "web", "prod"),
        "unable to create VM 120 - Permission check failed (/, Sys.Modify for modifying tag 'prod')"
    );
    assert_eq!(create("120", "web", "web"), "OK");
    assert_eq!(
        deploy.refused("PUT", "/nodes/pve1/qemu/100/config", &[("tags", "prod")]),
        "Permission check failed (/, Sys.Modify for modifying tag 'prod')"
    );
    // A tag that is not registered is free (user-tag-access: user-allow free).
    deploy.data("PUT", "/nodes/pve1/qemu/100/config", &[("tags", "web")]);
}

/// The schema's `permissions` (check_api2_permissions): power `VM.PowerMgmt`, destroy
/// `VM.Allocate`, snapshots `VM.Snapshot`, migrate `VM.Migrate`, config writes any
/// `VM.Config.*` (check_any), clone `VM.Clone` and then `VM.Allocate` on `newid` or the
/// pool (`or`: a bare `Permission check failed`), all through pool membership.
#[test]
fn endpoint_checks_follow_the_schema() {
    let c = Checks::start(&[]);
    let user = c.token("user");
    let upid = user.data("POST", "/nodes/pve1/qemu/100/status/start", &[]);
    assert_eq!(c.root.wait(upid.as_str().unwrap())["exitstatus"], "OK");
    assert_eq!(
        user.refused("POST", "/nodes/pve1/qemu/101/status/start", &[]),
        "Permission check failed (/vms/101, VM.PowerMgmt)"
    );
    assert_eq!(
        user.refused("DELETE", "/nodes/pve1/qemu/100", &[]),
        "Permission check failed (/vms/100, VM.Allocate)"
    );
    assert_eq!(
        user.refused(
            "POST",
            "/nodes/pve1/qemu/100/snapshot",
            &[("snapname", "s1")]
        ),
        "Permission check failed (/vms/100, VM.Snapshot)"
    );
    assert_eq!(
        user.refused(
            "POST",
            "/nodes/pve1/qemu/100/migrate",
            &[("target", "pve1")]
        ),
        "Permission check failed (/vms/100, VM.Migrate)"
    );
    assert_eq!(
        user.refused("PUT", "/nodes/pve1/qemu/101/config", &[("cores", "2")]),
        "Permission check failed (/vms/101, VM.Config.Disk|VM.Config.CDROM|VM.Config.CPU|\
         VM.Config.Memory|VM.Config.Network|VM.Config.HWType|VM.Config.Options|VM.Config.Cloudinit)"
    );
    // PVEVMUser has VM.Config.CDROM, so the endpoint lets it in; cores needs VM.Config.CPU.
    assert_eq!(
        user.refused("PUT", "/nodes/pve1/qemu/100/config", &[("cores", "2")]),
        "Permission check failed (/vms/100, VM.Config.CPU)"
    );
    assert_eq!(
        user.refused("POST", "/nodes/pve1/qemu/100/clone", &[("newid", "110")]),
        "Permission check failed (/vms/100, VM.Clone)"
    );
    let deploy = c.token("deploy");
    assert_eq!(
        deploy.refused("POST", "/nodes/pve1/qemu/100/clone", &[("newid", "110")]),
        "Permission check failed"
    );
    let upid = deploy.data(
        "POST",
        "/nodes/pve1/qemu/100/clone",
        &[("newid", "110"), ("pool", "web")],
    );
    assert_eq!(c.root.wait(upid.as_str().unwrap())["exitstatus"], "OK");
}

/// HA writes need `Sys.Console` on `/` (pve-ha-manager API2/HA/Resources.pm create); pools
/// `Pool.Allocate` (pve-manager API2/Pool.pm update_pool); download-url
/// `Datastore.AllocateTemplate` and then `Sys.Audit`+`Sys.Modify` on `/` or
/// `Sys.AccessNetwork` on the node (Storage/Status.pm download_url's `and`/`or`).
#[test]
fn ha_pools_and_downloads_need_their_privileges() {
    let c = Checks::start(&[]);
    let deploy = c.token("deploy");
    assert_eq!(
        deploy.refused("POST", "/cluster/ha/resources", &[("sid", "vm:100")]),
        "Permission check failed (/, Sys.Console)"
    );
    assert_eq!(
        deploy.refused("PUT", "/pools/web", &[("vms", "101")]),
        "Permission check failed (/pool/web, Pool.Allocate)"
    );
    let url = [
        ("url", "http://127.0.0.1:1/x.iso"),
        ("content", "iso"),
        ("filename", "x.iso"),
    ];
    assert_eq!(
        deploy.refused("POST", "/nodes/pve1/storage/local-lvm/download-url", &url),
        "Permission check failed (/storage/local-lvm, Datastore.AllocateTemplate)"
    );
    // With Datastore.AllocateTemplate but neither half of the `or`: a bare refusal.
    assert_eq!(
        c.token("nonet")
            .refused("POST", "/nodes/pve1/storage/local/download-url", &url),
        "Permission check failed"
    );
}

/// qemu-server API2/Qemu/Agent.pm: `VM.GuestAgent.Audit` (or `.Unrestricted`) on 9.x;
/// PVE 8.4's schema asks `VM.Monitor`, which 8.x's PVEVMAdmin has (pve-access-control 8.2).
#[test]
fn the_guest_agent_privilege_depends_on_the_version() {
    let path = "/nodes/pve1/qemu/100/agent/network-get-interfaces";
    let c = Checks::start(&[]);
    assert_eq!(
        c.token("maker").refused("GET", path, &[]),
        "Permission check failed (/vms/100, VM.GuestAgent.Audit|VM.GuestAgent.Unrestricted)"
    );
    let old = Checks::start(&["--pve-version", "8.4"]);
    assert_eq!(
        old.token("maker").refused("GET", path, &[]),
        "Permission check failed (/vms/100, VM.Monitor)"
    );
    let (s, _, _) = old.token("deploy").call("GET", path, &[]);
    assert_ne!(s, 403);
}

/// Only a root@pam ticket bypasses the checks (RPCEnvironment.pm check_api2_permissions):
/// a privilege-separated root@pam token has its own ACLs only (none here).
#[test]
fn a_root_token_with_privsep_is_checked() {
    let c = Checks::start(&[]);
    assert_eq!(
        c.token("sep")
            .refused("GET", "/nodes/pve1/qemu/100/config", &[]),
        "Permission check failed (/vms/100, VM.Audit)"
    );
}

/// pve-manager API2/Cluster.pm resources and API2/Tasks.pm node_tasks: a token sees the VMs
/// it has `VM.Audit` on, and without `Sys.Audit` on the node only its own tasks.
#[test]
fn a_scoped_token_sees_its_vms_and_its_own_tasks() {
    let c = Checks::start(&[]);
    let user = c.token("user");
    let vms = user.data("GET", "/cluster/resources", &[("type", "vm")]);
    let ids: Vec<u64> = vms
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["vmid"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [100], "{vms}");
    let listed = user.data("GET", "/nodes/pve1/qemu", &[]);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let upid = user.data("POST", "/nodes/pve1/qemu/100/status/start", &[]);
    c.root.wait(upid.as_str().unwrap());
    let tasks = user.data("GET", "/nodes/pve1/tasks", &[("source", "all")]);
    let users: Vec<(&Value, &Value)> = tasks
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (&t["user"], &t["tokenid"]))
        .collect();
    // A finished token task is listed split (Tasks.pm `$convert_token_task`).
    assert_eq!(users, [(&json!("ci@pve"), &json!("user"))], "{tasks}");
}
