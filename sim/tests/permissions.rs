//! pve-sim's permission model (`--user-cfg`, pve-access-control): `GET /access/permissions`
//! as PVE answers it, and the checks each endpoint makes, with PVE's 403 text. Each test
//! cites the Perl it follows.

use serde_json::{Value, json};

use crate::support::{Sim, enc, raw, scratch};

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
    let path = scratch("user-cfg").join("user.cfg");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, cfg).unwrap();
    Sim::plain(
        &[
            "--user-cfg",
            path.to_str().unwrap(),
            "--user",
            "ci@pve:cipw",
            "--user",
            "off@pve:offpw",
            "--token",
            "ci@pve!deploy=dep-secret",
            "--token",
            "ci@pve!full=full-secret",
        ],
        &[],
    )
}

/// One caller by API token.
struct Token {
    addr: String,
    header: String,
}

impl Token {
    fn new(sim: &Sim, id_secret: &str) -> Token {
        Token {
            addr: format!("127.0.0.1:{}", sim.port()),
            header: format!("PVEAPIToken={id_secret}"),
        }
    }

    fn call(&self, method: &str, path: &str, params: &[(&str, &str)]) -> (u16, String, Value) {
        let form: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
            .collect();
        let form = form.join("&");
        let headers = [("Authorization", self.header.as_str())];
        let path = format!("/api2/json{path}");
        if method == "GET" || method == "DELETE" {
            let p = if form.is_empty() {
                path
            } else {
                format!("{path}?{form}")
            };
            raw(&self.addr, method, &p, &headers, "")
        } else {
            raw(&self.addr, method, &path, &headers, &form)
        }
    }

    fn data(&self, method: &str, path: &str, params: &[(&str, &str)]) -> Value {
        let (s, r, v) = self.call(method, path, params);
        assert_eq!(s, 200, "{method} {path}: {s} {r} {v}");
        v["data"].clone()
    }

    /// The 403's reason phrase.
    fn refused(&self, method: &str, path: &str, params: &[(&str, &str)]) -> String {
        let (s, r, v) = self.call(method, path, params);
        assert_eq!(s, 403, "{method} {path}: {s} {r} {v}");
        r
    }
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
