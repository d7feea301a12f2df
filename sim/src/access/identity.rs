//! Who is calling, after pve-access-control and pve-manager's HTTPServer.pm: ticket login,
//! API tokens, tickets with their CSRF token, and `GET /access/permissions`. The router
//! (`http/router.rs`) authenticates every request through here.

use std::time::Instant;

use serde_json::{Value, json};

use crate::access::check::Checker;
use crate::http::handler::{ApiErr, ApiResult, Auth, Params};
use crate::http::server::Request;
use crate::schema;
use crate::state::{Sim, epoch};

/// pve-manager HTTPServer.pm auth_handler: `POST /nodes/{node}/storage/{storage}/upload` is an
/// upload (streamed, no CSRF token needed).
pub fn is_upload(req: &Request) -> bool {
    let rel = crate::http::server::rel_uri(&req.path);
    let segs: Vec<&str> = rel.trim_start_matches('/').split('/').collect();
    req.method == "POST"
        && req.path.starts_with("/api2/json/")
        && matches!(segs.as_slice(), ["nodes", node, "storage", sid, "upload"] if !node.is_empty() && !sid.is_empty())
}

/// `GET /access/permissions` (pve-access-control API2/AccessControl.pm, permissions): the
/// privileges of the caller, or of `userid` (a user or token: the caller's own tokens, or
/// anyone's with `Sys.Audit` on `/access`), on `path` when given, else on every path
/// (`get_effective_permissions`). Each privilege maps to its propagate flag.
pub fn permissions(checker: &Checker, params: &Params) -> ApiResult {
    let caller = checker.user.as_str();
    let userid = params.get("userid").map(String::as_str).unwrap_or(caller);
    let owner = userid.split_once('!').map(|(user, _)| user);
    if userid != caller && owner != Some(caller) {
        checker.check("/access", &["Sys.Audit"])?;
    }
    let target = checker.for_user(userid);
    let as_json = |privs: crate::access::acl::Privileges| -> Value {
        privs
            .into_iter()
            .map(|(p, propagate)| (p, json!(u8::from(propagate))))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let mut out = serde_json::Map::new();
    match params.get("path").filter(|p| !p.is_empty()) {
        Some(path) => {
            out.insert(path.clone(), as_json(target.permissions(path)));
        }
        None => {
            for (path, privs) in target.effective_permissions() {
                out.insert(path, as_json(privs));
            }
        }
    }
    Ok(Value::Object(out))
}

/// `POST /access/ticket` (pve-access-control API2/AccessControl.pm, create_ticket): a
/// ticket and a CSRF token for a known user and password, or a renewed one for a valid
/// ticket given as the password; a failure waits `--auth-failure-delay`, as pveproxy does.
pub fn login(sim: &Sim, params: &Params, user_out: &mut String) -> ApiResult {
    schema::check(&schema::ticket(), params)?;
    let mut username = params["username"].clone();
    if let Some(realm) = params.get("realm")
        && !username.contains('@')
    {
        username = format!("{username}@{realm}");
    }
    *user_out = username.clone();
    let password = &params["password"];
    let known = sim
        .opts
        .users
        .iter()
        .any(|(u, p)| *u == username && p == password)
        && enabled(sim, &username);
    // A valid ticket in place of the password renews it.
    let renew = sim
        .lock()
        .tickets
        .get(password)
        .is_some_and(|(u, _, _)| *u == username);
    if !(known || renew) {
        std::thread::sleep(sim.opts.auth_failure_delay);
        return Err(ApiErr {
            status: 401,
            msg: "authentication failure".into(),
            errors: None,
        });
    }
    let now = epoch() as u64;
    let sig = |n: usize| -> String {
        let mut s = String::new();
        while s.len() < n {
            s.push_str(&format!("{:016x}", sim.random()));
        }
        s.truncate(n);
        s
    };
    let ticket = format!("PVE:{username}:{now:08X}::{}", sig(86));
    let csrf = format!("{now:08X}:{}", sig(43));
    sim.lock().tickets.insert(
        ticket.clone(),
        (username.clone(), csrf.clone(), Instant::now()),
    );
    Ok(
        json!({"username": username, "ticket": ticket, "CSRFPreventionToken": csrf, "clustername": "pve-sim",
              "cap": {"vms": {"VM.Allocate": 1}, "storage": {"Datastore.AllocateSpace": 1}}}),
    )
}

/// AccessControl.pm `check_user_enabled`: a user that `user.cfg` disables (`user:` with
/// enable 0) cannot log in, nor can its tokens.
fn enabled(sim: &Sim, user: &str) -> bool {
    sim.opts.access.users.get(user).is_none_or(|u| u.enable)
}

/// pve-manager HTTPServer.pm auth_handler: an API token, or a ticket (cookie or
/// `Authorization` header) with, for a write that is not an upload, its CSRF token.
pub fn authenticate(sim: &Sim, req: &Request) -> Result<Auth, ApiErr> {
    let fail = |msg: &str| {
        std::thread::sleep(sim.opts.auth_failure_delay);
        ApiErr {
            status: 401,
            msg: msg.to_string(),
            errors: None,
        }
    };
    let authz = req.header("authorization").unwrap_or("");
    if let Some(pos) = authz.find("PVEAPIToken") {
        let v = authz[pos + "PVEAPIToken".len()..].trim_start_matches(['=', ' ']);
        let v = v.split(';').next().unwrap_or("").trim();
        let Some((id, secret)) = v.rsplit_once('=') else {
            return Err(fail("Authentication failed!"));
        };
        let ok = sim.opts.tokens.iter().any(|(t, s)| t == id && s == secret);
        let owner = id.split('!').next().unwrap_or("");
        if !ok || !enabled(sim, owner) {
            return Err(fail("Authentication failed!"));
        }
        return Ok(Auth {
            id: id.to_string(),
            root_ticket: false,
        });
    }
    let from_cookie = req
        .header("cookie")
        .and_then(|c| {
            c.split(';')
                .map(str::trim)
                .find_map(|kv| kv.strip_prefix("PVEAuthCookie="))
        })
        .map(|t| crate::http::server::percent_decode(t, false));
    let from_header = authz.strip_prefix("PVEAuthCookie=").map(str::to_string);
    let Some(ticket) = from_cookie.or(from_header) else {
        return Err(fail("No ticket"));
    };
    let (user, csrf, issued) = {
        let st = sim.lock();
        match st.tickets.get(&ticket) {
            Some(t) => t.clone(),
            None => return Err(fail("Authentication failed!")),
        }
    };
    if issued.elapsed() > sim.opts.ticket_lifetime {
        return Err(fail("Authentication failed!"));
    }
    // CSRF is not checked for an upload (HTTPServer.pm auth_handler, `$isUpload`).
    if req.method != "GET"
        && !is_upload(req)
        && req.header("csrfpreventiontoken") != Some(csrf.as_str())
    {
        return Err(ApiErr {
            status: 401,
            msg: "Permission denied - invalid csrf token".into(),
            errors: None,
        });
    }
    Ok(Auth {
        root_ticket: user == "root@pam",
        id: user,
    })
}
