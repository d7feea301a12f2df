//! The router of `/api2/json`: request decoding, authentication, faults, routing and PVE's
//! response envelopes. The endpoints live by PVE's grouping: `vms.rs` (qemu-server's
//! API2/Qemu.pm), `task_api.rs` (pve-manager's API2/Tasks.pm), `storage_api.rs` and
//! `download.rs` (pve-storage), `cluster.rs` (API2/Cluster.pm); what they share is in
//! `handler.rs`, so no handler imports the router.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use crate::api_schema;
use crate::faults::Action;
use crate::handler::{ApiErr, ApiResult, Auth, Params, Undefined};
use crate::http::{BodyPlan, Handler, MAX_BODY, Request, Response, decode_urlencoded};
use crate::schema;
use crate::state::{Sim, epoch};
use crate::storage;
use crate::vms;
use crate::{access_api, disk_api, ha, node_api, pools, spec, storage_cfg};
use crate::{cluster, config_api, migrate, storage_api, task_api, templates};

pub struct Api {
    pub sim: Arc<Sim>,
}

fn json_body(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

fn error_response(e: &ApiErr) -> Response {
    match e.status {
        401 => Response::new(401, e.msg.clone(), Vec::new()),
        _ => {
            // A handler's `die` ends its message with a newline; rest_handler's 501 ("Method
            // '…' not implemented", pve-manager HTTPServer.pm) has none.
            let message = match e.status {
                501 => e.msg.clone(),
                _ => format!("{}\n", e.msg),
            };
            let mut body = json!({"data": null, "message": message});
            if let Some(errs) = &e.errors {
                body["errors"] = json!(errs);
            }
            Response::new(e.status, e.msg.clone(), json_body(&body))
        }
    }
}

const SECRET_KEYS: &[&str] = &[
    "password",
    "cipassword",
    "new-password",
    "otp",
    "tfa-challenge",
];

/// The path below `/api2/json`, URI-unescaped, as pveproxy's `$rel_uri`.
fn rel_uri(path: &str) -> String {
    let rel = path.strip_prefix("/api2/json").unwrap_or(path);
    let rel = crate::http::percent_decode(rel, false);
    if rel.is_empty() { "/".into() } else { rel }
}

/// pve-manager HTTPServer.pm rest_handler, for a path no handler serves: 501 `Method 'M
/// $rel_uri' not implemented`, the path without `/api2/json`.
fn not_implemented(method: &str, rel_uri: &str) -> ApiErr {
    ApiErr {
        status: 501,
        msg: format!("Method '{method} {rel_uri}' not implemented"),
        errors: None,
    }
}

/// pve-manager HTTPServer.pm auth_handler: `POST /nodes/{node}/storage/{storage}/upload` is an
/// upload (streamed, no CSRF token needed).
fn is_upload(req: &Request) -> bool {
    let rel = rel_uri(&req.path);
    let segs: Vec<&str> = rel.trim_start_matches('/').split('/').collect();
    req.method == "POST"
        && req.path.starts_with("/api2/json/")
        && matches!(segs.as_slice(), ["nodes", node, "storage", sid, "upload"] if !node.is_empty() && !sid.is_empty())
}

impl Handler for Api {
    /// pve-http-server AnyEvent.pm authenticate_and_handle_request, before the body is read:
    /// the request is authenticated first; then a body on a method other than PUT or POST is
    /// `501 Unexpected content for method 'M'`, an upload is streamed (it must be
    /// `multipart/form-data` with a boundary, and may not name a `tmpfilename`), and any other
    /// body over 512 KiB is `501 for data too large`. Each is answered with the body unread.
    fn plan_body(&self, head: &Request, len: usize) -> BodyPlan {
        if len == 0 {
            return BodyPlan::Buffer;
        }
        let refuse = |resp: Response| {
            self.sim.log_request(json!({
                "ts": epoch(), "method": head.method, "path": rel_uri(&head.path), "params": {},
                "status": resp.status, "ms": 0.0, "user": "", "dropped": false,
                "error": resp.reason,
            }));
            BodyPlan::Refuse(resp)
        };
        let login = head.method == "POST" && rel_uri(&head.path) == "/access/ticket";
        if head.path.starts_with("/api2/json/")
            && !login
            && let Err(e) = self.authenticate(head)
        {
            return refuse(error_response(&e));
        }
        if !matches!(head.method.as_str(), "PUT" | "POST") {
            let msg = format!("Unexpected content for method '{}'", head.method);
            return refuse(Response::error(501, &msg));
        }
        if is_upload(head) {
            let ctype = head.header("content-type").unwrap_or("");
            let mut parts = ctype.split([';', ',']).map(str::trim);
            let ct = parts.next().unwrap_or("");
            let boundary = parts.find_map(|p| p.strip_prefix("boundary=").map(str::to_string));
            let Some(boundary) = boundary.filter(|_| ct == "multipart/form-data") else {
                let msg = format!("upload 'Content-Type '{ctype}' not implemented");
                return refuse(Response::error(500, &msg));
            };
            if decode_urlencoded(&head.query)
                .iter()
                .any(|(k, _)| k == "tmpfilename")
            {
                let msg = "'tmpfilename' query parameter is not allowed for file uploads";
                return refuse(Response::error(500, msg));
            }
            return BodyPlan::Upload {
                dir: self.sim.opts.data_dir.join("var-tmp"),
                boundary,
            };
        }
        if len > MAX_BODY {
            return refuse(Response::error(501, "for data too large"));
        }
        BodyPlan::Buffer
    }

    fn handle(&self, req: &Request) -> Response {
        let started = Instant::now();
        if !self.sim.opts.request_cost.is_zero() {
            std::thread::sleep(self.sim.opts.request_cost);
        }
        let path = req
            .path
            .strip_prefix("/api2/json")
            .unwrap_or(&req.path)
            .to_string();
        let mut params: Params = BTreeMap::new();
        let mut user = String::new();
        let mut roll = || (self.sim.random() % 1_000_000) as f64 / 1_000_000.0;
        let actions = self
            .sim
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .for_request(&req.method, &path, &mut roll);
        let mut after: Option<ApiErr> = None;
        let mut drop = false;
        let mut null_upid = false;
        let mut drip = None;
        let mut pad = 0usize;
        let mut before: Option<ApiErr> = None;
        for a in actions {
            match a {
                Action::Latency(d) => std::thread::sleep(d),
                Action::Status {
                    status,
                    message,
                    after: false,
                } => {
                    before = Some(ApiErr {
                        status,
                        msg: message,
                        errors: None,
                    })
                }
                Action::Status {
                    status,
                    message,
                    after: true,
                } => {
                    after = Some(ApiErr {
                        status,
                        msg: message,
                        errors: None,
                    })
                }
                Action::Drop => drop = true,
                Action::NullUpid => null_upid = true,
                Action::SlowBody(gap) => drip = Some(gap),
                Action::BigBody(n) => pad = n,
            }
        }
        let result = match before {
            Some(e) => Err(e),
            None => self.dispatch(req, &path, &mut params, &mut user),
        };
        let mut resp = match (result, after) {
            (_, Some(e)) => error_response(&e),
            (Ok(v), None) => {
                let data = if null_upid && v.as_str().is_some_and(|s| s.starts_with("UPID:")) {
                    Value::Null
                } else {
                    v
                };
                let mut body = json!({"data": data});
                // A handler that answers a list with PVE's `total` beside `data` (the task
                // log) returns `{"__total": n, "lines": [...]}`; the envelope is made here.
                if let Some(total) = body["data"].get("__total").cloned() {
                    body["total"] = total;
                    body["data"] = body["data"]["lines"].take();
                }
                Response::new(200, "OK", json_body(&body))
            }
            (Err(e), None) => error_response(&e),
        };
        if drop {
            resp.drop_after = Some(resp.body.len() / 2);
        }
        resp.drip = drip;
        if resp.body.len() < pad {
            resp.body.resize(pad, b' ');
        }
        let masked: serde_json::Map<String, Value> = params
            .iter()
            .map(|(k, v)| {
                let secret =
                    SECRET_KEYS.contains(&k.as_str()) || k.contains("secret") || k == "ticket";
                (
                    k.clone(),
                    json!(if secret { "********" } else { v.as_str() }),
                )
            })
            .collect();
        self.sim.log_request(json!({
            "ts": epoch(), "method": req.method, "path": path, "params": masked, "status": resp.status,
            "ms": started.elapsed().as_secs_f64() * 1000.0, "user": user, "dropped": drop,
            "error": if resp.status >= 400 { json!(resp.reason) } else { Value::Null },
        }));
        resp
    }
}

impl Api {
    fn dispatch(
        &self,
        req: &Request,
        path: &str,
        params: &mut Params,
        user: &mut String,
    ) -> ApiResult {
        if !req.path.starts_with("/api2/json/") {
            return Err(not_implemented(&req.method, &req.path));
        }
        // pve-http-server AnyEvent.pm extract_params: the body (JSON or a form), then the
        // query on top; an empty form value or a JSON null is undef (a key without a value).
        let mut undef = Undefined::new();
        let mut put = |k: String, v: Option<String>| match v {
            Some(v) => {
                undef.remove(&k);
                params.insert(k, v);
            }
            None => {
                params.remove(&k);
                undef.insert(k);
            }
        };
        let ctype = req.header("content-type").unwrap_or("");
        if !req.body.is_empty() {
            if ctype.starts_with("application/json") {
                let v: Value = serde_json::from_slice(&req.body)
                    .map_err(|e| ApiErr::die(format!("unable to parse JSON body: {e}")))?;
                for (k, v) in v.as_object().into_iter().flatten() {
                    let s = match v {
                        Value::String(s) => Some(s.clone()),
                        Value::Bool(b) => Some((if *b { "1" } else { "0" }).to_string()),
                        Value::Null => None,
                        other => Some(other.to_string()),
                    };
                    put(k.clone(), s);
                }
            } else {
                for (k, v) in decode_urlencoded(&String::from_utf8_lossy(&req.body)) {
                    put(k, v);
                }
            }
        }
        for (k, v) in decode_urlencoded(&req.query) {
            put(k, v);
        }
        // An upload's parameters: the query and the form fields before the file, and the
        // temporary file's name (AnyEvent.pm `$upload_state->{params}`, `tmpfilename`).
        if let Some(upload) = &req.upload {
            for (k, v) in &upload.fields {
                put(k.clone(), Some(v.clone()));
            }
            put(
                "tmpfilename".into(),
                Some(upload.file.to_string_lossy().into_owned()),
            );
        }
        let segs: Vec<String> = path
            .trim_matches('/')
            .split('/')
            .map(|s| crate::http::percent_decode(s, false))
            .collect();
        let segs: Vec<&str> = segs.iter().map(String::as_str).collect();

        if req.method == "POST" && segs == ["access", "ticket"] {
            if req
                .header("authorization")
                .is_some_and(|a| a.contains("PVEAPIToken"))
            {
                return Err(ApiErr {
                    status: 403,
                    msg: format!(
                        "Permission check failed (URI '{}' not available with API token, need proper ticket.)",
                        req.path
                    ),
                    errors: None,
                });
            }
            return self.login(params, user);
        }
        let auth = self.authenticate(req)?;
        *user = auth.id.clone();
        if auth.readonly && req.method != "GET" {
            let vmid = match segs.get(3) {
                Some(id) if segs.get(2) == Some(&"qemu") => Some(id.to_string()),
                _ if segs.get(2) == Some(&"qemu") => params.get("vmid").cloned(),
                _ => None,
            };
            // API2/Qemu.pm, migrate_vm: `['perm', '/vms/{vmid}', ['VM.Migrate']]`.
            let privilege = if segs.get(4) == Some(&"migrate") {
                "VM.Migrate"
            } else {
                "VM.Allocate"
            };
            let what = match vmid {
                Some(id) => format!("/vms/{id}, {privilege}"),
                None => "/, Sys.Modify".into(),
            };
            return Err(ApiErr {
                status: 403,
                msg: format!("Permission check failed ({what})"),
                errors: None,
            });
        }
        let m = req.method.as_str();
        let sim = &self.sim;
        match segs.as_slice() {
            ["version"] if m == "GET" => Ok(self.version()),
            ["nodes"] if m == "GET" => Ok(self.nodes()),
            ["cluster", "status"] if m == "GET" => Ok(self.cluster_status()),
            ["cluster", "resources"] if m == "GET" => {
                schema::check(&api_schema::cluster_resources(), params)?;
                Ok(cluster::cluster_resources(
                    sim,
                    params.get("type").map(String::as_str),
                ))
            }
            ["access", "permissions"] if m == "GET" => Ok(self.permissions(&auth, params)),
            ["cluster", "nextid"] if m == "GET" => {
                schema::check(&api_schema::next_id(), params)?;
                cluster::next_id(sim, params.get("vmid"))
            }
            ["nodes", node, rest @ ..] => self.node_route(req, node, rest, params, &undef, &auth),
            ["pools", rest @ ..] => self.pool_route(m, rest, params, &req.path),
            ["cluster", "ha", "resources"] if m == "GET" => {
                schema::check(&spec::ha_index(), params)?;
                ha::index(sim, params)
            }
            ["cluster", "ha", "resources"] if m == "POST" => {
                schema::check(&spec::ha_create(), params)?;
                ha::create(sim, params)
            }
            ["cluster", "ha", "resources", sid] => {
                params.insert("sid".into(), sid.to_string());
                match m {
                    "GET" => {
                        schema::check(&spec::ha_sid(false), params)?;
                        ha::read(sim, sid)
                    }
                    "PUT" => {
                        schema::check(&spec::ha_update(), params)?;
                        ha::update(sim, sid, params)
                    }
                    "DELETE" => {
                        schema::check(&spec::ha_sid(true), params)?;
                        ha::delete(sim, sid)
                    }
                    _ => Err(not_implemented(m, &rel_uri(&req.path))),
                }
            }
            ["cluster", "ha", "status", "current"] if m == "GET" => {
                schema::check(&[], params)?;
                Ok(ha::status_current(sim))
            }
            ["access", "users"] if m == "GET" => {
                schema::check(&spec::user_index(), params)?;
                Ok(access_api::users(sim, params))
            }
            ["access", "users", id] if m == "GET" => {
                params.insert("userid".into(), id.to_string());
                schema::check(&spec::one_id("userid"), params)?;
                access_api::user(sim, id)
            }
            ["access", "groups"] if m == "GET" => {
                schema::check(&[], params)?;
                Ok(access_api::groups())
            }
            ["access", "groups", id] if m == "GET" => {
                params.insert("groupid".into(), id.to_string());
                schema::check(&spec::one_id("groupid"), params)?;
                access_api::group(id)
            }
            ["access", "domains"] if m == "GET" => {
                schema::check(&[], params)?;
                Ok(access_api::domains())
            }
            ["access", "domains", id] if m == "GET" => {
                params.insert("realm".into(), id.to_string());
                schema::check(&spec::one_id("realm"), params)?;
                access_api::domain(id)
            }
            ["storage"] if m == "GET" => {
                schema::check(&spec::storage_index(), params)?;
                Ok(storage_cfg::index(params))
            }
            ["storage"] if m == "POST" => {
                schema::check(&spec::storage_create(), params)?;
                storage_cfg::create(params)
            }
            ["storage", sid] if m == "GET" => {
                params.insert("storage".into(), sid.to_string());
                schema::check(&spec::storage_read(false), params)?;
                storage_cfg::read(sid)
            }
            _ => Err(not_implemented(m, &rel_uri(&req.path))),
        }
    }

    fn node_route(
        &self,
        req: &Request,
        node: &str,
        rest: &[&str],
        params: &mut Params,
        undef: &Undefined,
        auth: &Auth,
    ) -> ApiResult {
        let sim = &self.sim;
        let m = req.method.as_str();
        // Path parameters join the others; a conflicting body value is refused as PVE does.
        let set = |params: &mut Params, k: &str, v: &str| -> Result<(), ApiErr> {
            if params.get(k).is_some_and(|old| old != v) {
                return Err(ApiErr::param(
                    k,
                    "duplicate parameter (already defined in URI) with conflicting values!",
                ));
            }
            params.insert(k.to_string(), v.to_string());
            Ok(())
        };
        set(params, "node", node)?;
        let not_impl = || not_implemented(m, &rel_uri(&req.path));
        let check_node = || -> Result<(), ApiErr> {
            if sim.opts.nodes.iter().any(|n| n == node) {
                Ok(())
            } else {
                Err(ApiErr::die(format!(
                    "hostname lookup '{node}' failed - failed to get address info for: {node}: Name or service not known"
                )))
            }
        };
        match (m, rest) {
            ("GET", ["tasks"]) => {
                schema::check(&api_schema::task_list(), params)?;
                check_node()?;
                Ok(task_api::task_list(sim, node, params, auth))
            }
            (_, ["tasks", upid, tail @ ..]) => {
                set(params, "upid", upid)?;
                match (m, tail) {
                    ("GET", ["status"]) => {
                        schema::check(&api_schema::task_upid(), params)?;
                        check_node()?;
                        task_api::task_status(sim, node, upid, auth)
                    }
                    ("GET", ["log"]) => {
                        schema::check(&api_schema::task_log(), params)?;
                        check_node()?;
                        task_api::task_log(sim, node, upid, params, auth)
                    }
                    ("DELETE", []) => {
                        schema::check(&api_schema::task_upid(), params)?;
                        check_node()?;
                        task_api::task_stop(sim, node, upid)
                    }
                    _ => Err(not_impl()),
                }
            }
            ("GET", ["version"]) => {
                schema::check(&spec::node_version(), params)?;
                check_node()?;
                Ok(node_api::version(sim))
            }
            ("GET", ["network"]) => {
                schema::check(&spec::node_network(), params)?;
                check_node()?;
                Ok(node_api::network(sim, node, params))
            }
            ("GET", ["storage", sid]) => {
                set(params, "storage", sid)?;
                schema::check(&spec::storage_read(true), params)?;
                check_node()?;
                Ok(storage_cfg::diridx())
            }
            ("GET", ["storage"]) => {
                schema::check(&api_schema::storage_list(), params)?;
                check_node()?;
                Ok(storage_api::storage_list(sim, node, params))
            }
            (_, ["storage", sid, tail @ ..]) => {
                set(params, "storage", sid)?;
                match (m, tail) {
                    ("GET", ["content"]) => {
                        schema::check(&api_schema::storage_content(), params)?;
                        check_node()?;
                        storage::storage(sid).ok_or_else(|| {
                            ApiErr::die(format!("storage '{sid}' does not exist"))
                        })?;
                        let vmid = params.get("vmid").and_then(|v| v.parse().ok());
                        Ok(json!(storage::list_content(
                            &sim.opts.data_dir,
                            node,
                            sid,
                            params.get("content").map(String::as_str),
                            vmid
                        )))
                    }
                    ("DELETE", ["content", volume]) => {
                        set(params, "volume", volume)?;
                        schema::check(&api_schema::storage_volume_delete(), params)?;
                        check_node()?;
                        storage_api::volume_delete(sim, node, sid, volume, auth)
                    }
                    ("POST", ["upload"]) => {
                        schema::check(&api_schema::upload(), params)?;
                        check_node()?;
                        crate::upload::upload(sim, node, sid, params, auth)
                    }
                    ("POST", ["download-url"]) => {
                        schema::check(&api_schema::download_url(), params)?;
                        check_node()?;
                        crate::download::download_url(sim, node, sid, params, auth)
                    }
                    _ => Err(not_impl()),
                }
            }
            ("GET", ["qemu"]) => {
                check_node()?;
                Ok(vms::vm_list(sim, node))
            }
            ("POST", ["qemu"]) => {
                schema::check(&api_schema::create_vm(), params)?;
                check_node()?;
                vms::create(sim, node, params, undef, auth)
            }
            (_, ["qemu", vmid, tail @ ..]) => {
                set(params, "vmid", vmid)?;
                let check = |spec: Vec<schema::Param>, params: &Params| -> Result<u32, ApiErr> {
                    schema::check(&spec, params)?;
                    check_node()?;
                    Ok(vmid.parse().unwrap_or(0))
                };
                match (m, tail) {
                    ("GET", ["config"]) => {
                        let id = check(api_schema::vm_config_get(), params)?;
                        let current = params.get("current").is_some_and(|v| v == "1");
                        config_api::get_config(sim, node, id, current)
                    }
                    ("GET", ["agent", "network-get-interfaces"]) => {
                        let id = check(api_schema::vm_path(vec![]), params)?;
                        vms::agent_network(sim, node, id)
                    }
                    ("POST", ["template"]) => {
                        let id = check(api_schema::template(), params)?;
                        templates::template(sim, node, id, auth)
                    }
                    ("POST", ["clone"]) => {
                        let id = check(api_schema::clone_vm(), params)?;
                        templates::clone(sim, node, id, params, auth)
                    }
                    ("GET", ["migrate"]) => {
                        let id = check(migrate::precondition_spec(), params)?;
                        migrate::precondition(sim, node, id, auth)
                    }
                    ("POST", ["migrate"]) => {
                        let id = check(migrate::migrate_spec(), params)?;
                        migrate::migrate(sim, node, id, params, auth)
                    }
                    ("GET", ["pending"]) => {
                        let id = check(api_schema::vm_path(vec![]), params)?;
                        config_api::get_pending(sim, node, id)
                    }
                    ("GET", ["cloudinit"]) => {
                        let id = check(api_schema::vm_path(vec![]), params)?;
                        vms::get_cloudinit(sim, node, id)
                    }
                    ("PUT", ["cloudinit"]) => {
                        let id = check(api_schema::vm_path(vec![]), params)?;
                        vms::put_cloudinit(sim, node, id)
                    }
                    ("PUT", ["config"]) => {
                        let id = check(api_schema::update_vm(false), params)?;
                        config_api::update(sim, node, id, params, undef, auth, false)
                    }
                    ("POST", ["config"]) => {
                        let id = check(api_schema::update_vm(true), params)?;
                        config_api::update(sim, node, id, params, undef, auth, true)
                    }
                    ("POST", ["move_disk"]) => {
                        let id = check(spec::move_disk(), params)?;
                        disk_api::move_disk(sim, node, id, params, auth)
                    }
                    ("PUT", ["unlink"]) => {
                        let id = check(spec::unlink(), params)?;
                        disk_api::unlink(sim, node, id, params, undef, auth)
                    }
                    ("PUT", ["resize"]) => {
                        let id = check(api_schema::resize(), params)?;
                        vms::resize(sim, node, id, params, auth)
                    }
                    ("DELETE", []) => {
                        let id = check(api_schema::delete_vm(), params)?;
                        vms::destroy(sim, node, id, params, auth)
                    }
                    ("GET", ["status", "current"]) => {
                        let id = check(api_schema::vm_path(vec![]), params)?;
                        // vm_status: `ha` is PVE::HA::Config::get_service_status.
                        let mut v = vms::status_current(sim, node, id)?;
                        v["ha"] = ha::service_status(sim, id);
                        Ok(v)
                    }
                    ("POST", ["status", action]) => {
                        let spec = match *action {
                            "start" => api_schema::vm_start(),
                            "stop" => api_schema::vm_stop(),
                            "shutdown" => api_schema::vm_shutdown(),
                            "reboot" => api_schema::vm_reboot(),
                            _ => return Err(not_impl()),
                        };
                        let id = check(spec, params)?;
                        // vm_start/vm_stop/vm_shutdown: an HA-managed VM is handed to the HA
                        // stack (`hastart`/`hastop`) instead.
                        if let Some(upid) = ha::power_request(sim, node, id, action, params, auth)?
                        {
                            return Ok(json!(upid));
                        }
                        vms::power(sim, node, id, action, params, auth)
                    }
                    _ => Err(not_impl()),
                }
            }
            _ => Err(not_impl()),
        }
    }

    fn version(&self) -> Value {
        node_api::version(&self.sim)
    }

    /// `/pools` (pve-manager API2/Pool.pm): the current forms with `poolid` as a parameter,
    /// and the deprecated ones with it in the path.
    fn pool_route(&self, m: &str, rest: &[&str], params: &mut Params, uri: &str) -> ApiResult {
        let sim = &self.sim;
        if let [id] = rest {
            if params.get("poolid").is_some_and(|p| p != id) {
                return Err(ApiErr::param(
                    "poolid",
                    "duplicate parameter (already defined in URI) with conflicting values!",
                ));
            }
            params.insert("poolid".into(), id.to_string());
        }
        match (m, rest.len()) {
            ("GET", 0) => {
                schema::check(&spec::pool_index(), params)?;
                pools::index(sim, params)
            }
            ("GET", 1) => {
                schema::check(&spec::pool_read(), params)?;
                pools::read(sim, rest[0], params)
            }
            ("POST", 0) => {
                schema::check(&spec::pool_create(), params)?;
                pools::create(sim, params)
            }
            ("PUT", 0 | 1) => {
                schema::check(&spec::pool_update(), params)?;
                pools::update(sim, params)
            }
            ("DELETE", 0 | 1) => {
                schema::check(&spec::pool_delete(), params)?;
                pools::delete(sim, params)
            }
            _ => Err(not_implemented(m, &rel_uri(uri))),
        }
    }

    fn nodes(&self) -> Value {
        let up = self.sim.boot.elapsed().as_secs();
        json!(self.sim.opts.nodes.iter().map(|n| json!({
            "node": n, "status": "online", "type": "node", "id": format!("node/{n}"), "level": "",
            "maxcpu": 16, "cpu": 0.01, "maxmem": 68719476736u64, "mem": 4294967296u64,
            "maxdisk": 107374182400u64, "disk": 10737418240u64, "uptime": up, "ssl_fingerprint": self.sim.fingerprint,
        })).collect::<Vec<_>>())
    }

    fn cluster_status(&self) -> Value {
        let nodes = &self.sim.opts.nodes;
        let mut out = vec![
            json!({"type": "cluster", "id": "cluster", "name": "pve-sim", "nodes": nodes.len(), "quorate": 1, "version": nodes.len()}),
        ];
        for (i, n) in nodes.iter().enumerate() {
            out.push(json!({"type": "node", "id": format!("node/{n}"), "name": n, "nodeid": i + 1, "ip": "127.0.0.1",
                            "online": 1, "local": if i == 0 { 1 } else { 0 }, "level": ""}));
        }
        json!(out)
    }

    /// `GET /access/permissions` (pve-access-control API2/AccessControl.pm, permissions): the
    /// caller's privileges, on `path` when given. pve-sim knows three kinds of users: read-only
    /// (`:audit`), without `Sys.Audit` on the nodes (`:nosysaudit`), and administrators.
    fn permissions(&self, auth: &Auth, params: &Params) -> Value {
        let mut privs = serde_json::Map::new();
        let mut grant = |p: &str| {
            privs.insert(p.to_string(), json!(1));
        };
        if auth.readonly {
            for p in ["VM.Audit", "Datastore.Audit", "Sys.Audit"] {
                grant(p);
            }
        } else {
            for p in [
                "VM.Allocate",
                "VM.Audit",
                "VM.Config.Disk",
                "VM.Config.CPU",
                "VM.Config.Memory",
                "VM.Config.Network",
                "VM.Config.Cloudinit",
                "VM.Config.Options",
                "VM.PowerMgmt",
                "VM.Migrate",
                "Datastore.AllocateSpace",
                "Datastore.Audit",
            ] {
                grant(p);
            }
            if self.sim.sys_audit(&auth.id) {
                grant("Sys.Audit");
                grant("Sys.Modify");
            }
        }
        let path = params.get("path").cloned().unwrap_or_else(|| "/".into());
        json!({ path: privs })
    }

    fn login(&self, params: &Params, user_out: &mut String) -> ApiResult {
        schema::check(&api_schema::ticket(), params)?;
        let mut username = params["username"].clone();
        if let Some(realm) = params.get("realm")
            && !username.contains('@')
        {
            username = format!("{username}@{realm}");
        }
        *user_out = username.clone();
        let password = &params["password"];
        let known = self
            .sim
            .opts
            .users
            .iter()
            .any(|(u, p, _)| *u == username && p == password);
        // A valid ticket in place of the password renews it.
        let renew = self
            .sim
            .lock()
            .tickets
            .get(password)
            .is_some_and(|(u, _, _)| *u == username);
        if !(known || renew) {
            std::thread::sleep(self.sim.opts.auth_failure_delay);
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
                s.push_str(&format!("{:016x}", self.sim.random()));
            }
            s.truncate(n);
            s
        };
        let ticket = format!("PVE:{username}:{now:08X}::{}", sig(86));
        let csrf = format!("{now:08X}:{}", sig(43));
        self.sim.lock().tickets.insert(
            ticket.clone(),
            (username.clone(), csrf.clone(), Instant::now()),
        );
        Ok(
            json!({"username": username, "ticket": ticket, "CSRFPreventionToken": csrf, "clustername": "pve-sim",
                  "cap": {"vms": {"VM.Allocate": 1}, "storage": {"Datastore.AllocateSpace": 1}}}),
        )
    }

    fn authenticate(&self, req: &Request) -> Result<Auth, ApiErr> {
        let fail = |msg: &str| {
            std::thread::sleep(self.sim.opts.auth_failure_delay);
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
            let ok = self
                .sim
                .opts
                .tokens
                .iter()
                .any(|(t, s)| t == id && s == secret);
            if !ok {
                return Err(fail("Authentication failed!"));
            }
            let owner = id.split('!').next().unwrap_or("");
            let readonly = self
                .sim
                .opts
                .users
                .iter()
                .any(|(u, _, ro)| u == owner && *ro);
            return Ok(Auth {
                id: id.to_string(),
                root_ticket: false,
                readonly,
            });
        }
        let from_cookie = req
            .header("cookie")
            .and_then(|c| {
                c.split(';')
                    .map(str::trim)
                    .find_map(|kv| kv.strip_prefix("PVEAuthCookie="))
            })
            .map(|t| crate::http::percent_decode(t, false));
        let from_header = authz.strip_prefix("PVEAuthCookie=").map(str::to_string);
        let Some(ticket) = from_cookie.or(from_header) else {
            return Err(fail("No ticket"));
        };
        let (user, csrf, issued) = {
            let st = self.sim.lock();
            match st.tickets.get(&ticket) {
                Some(t) => t.clone(),
                None => return Err(fail("Authentication failed!")),
            }
        };
        if issued.elapsed() > self.sim.opts.ticket_lifetime {
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
        let readonly = self
            .sim
            .opts
            .users
            .iter()
            .any(|(u, _, ro)| *u == user && *ro);
        Ok(Auth {
            root_ticket: user == "root@pam",
            id: user,
            readonly,
        })
    }
}
