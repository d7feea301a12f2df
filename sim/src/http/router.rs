//! The router of `/api2/json`: request decoding, authentication, faults, routing and PVE's
//! response envelopes. The endpoints live by PVE's grouping: `qemu/vms.rs` (qemu-server's
//! API2/Qemu.pm), `cluster/tasks.rs` (pve-manager's API2/Tasks.pm), `storage/status.rs` and
//! `storage/download.rs` (pve-storage), `cluster/resources.rs` (API2/Cluster.pm); what they share is in
//! `http/handler.rs`, so no handler imports the router.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::access::api_perms;
use crate::access::check::Checker;
use crate::access::identity;
use crate::access::lists;
use crate::access::pools;
use crate::access::visibility;
use crate::cluster::nodes;
use crate::cluster::resources;
use crate::cluster::tasks;
use crate::faults::Action;
use crate::ha::manager;
use crate::http::daemons::{ProxyWorker, Pvedaemon, Pveproxy};
use crate::http::handler::{ApiErr, ApiResult, Auth, Params, Undefined};
use crate::http::server::{
    self, BodyPlan, Handler, MAX_BODY, Request, Response, decode_urlencoded,
};
use crate::qemu::config;
use crate::qemu::disks;
use crate::qemu::migrate;
use crate::qemu::templates;
use crate::qemu::vms;
use crate::schema;
use crate::state::{Sim, epoch};
use crate::storage;
use crate::storage::status;
use crate::storage::volumes;
use crate::versions;

pub struct Api {
    pub sim: Arc<Sim>,
    /// Where pveproxy sends the protected calls.
    pub pvedaemon: Arc<Pvedaemon>,
}

/// Which daemon answered a request, for the request log.
#[derive(Clone, Copy)]
enum Daemon {
    Pveproxy,
    Pvedaemon,
}

impl Daemon {
    fn name(self) -> &'static str {
        match self {
            Daemon::Pveproxy => "pveproxy",
            Daemon::Pvedaemon => "pvedaemon",
        }
    }
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
                "ts": epoch(), "method": head.method, "path": server::rel_uri(&head.path), "params": {},
                "status": resp.status, "ms": 0.0, "user": "", "dropped": false,
                "error": resp.reason,
            }));
            BodyPlan::Refuse(resp)
        };
        let login = head.method == "POST" && server::rel_uri(&head.path) == "/access/ticket";
        if head.path.starts_with("/api2/json/")
            && !login
            && let Err(e) = identity::authenticate(&self.sim, head)
        {
            return refuse(error_response(&e));
        }
        if !matches!(head.method.as_str(), "PUT" | "POST") {
            let msg = format!("Unexpected content for method '{}'", head.method);
            return refuse(Response::error(501, &msg));
        }
        if identity::is_upload(head) {
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
        self.respond(req, Daemon::Pveproxy, None, Duration::ZERO, Duration::ZERO)
    }

    /// pve-manager `PVE/HTTPServer.pm` `rest_handler`: a call whose handler is not
    /// `protected` runs in the pveproxy worker that read it, holding its event loop for
    /// pveproxy's cost and the handler's work. A protected one (`{ proxy => 'localhost' }`)
    /// holds the event loop only for pveproxy's cost, then goes to pvedaemon as
    /// pve-http-server `PVE/APIServer/AnyEvent.pm` `proxy_request` sends it: over one of the
    /// worker's connections to `localhost:85` (AnyEvent::HTTP's four per host), answered
    /// within `timeout => 30` or not at all ([`proxy_timed_out`]). pvedaemon's cost and the
    /// handler then hold one pvedaemon worker.
    ///
    /// pve-sim decides the hop by the path alone ([`schema::is_protected`]): a protected call
    /// it cannot authenticate is answered by pvedaemon, where PVE's pveproxy answers it.
    fn handle_in(&self, req: &Request, worker: &ProxyWorker, proxy: &Pveproxy) -> Response {
        let arrived = Instant::now();
        let protected = req.path.starts_with("/api2/json/")
            && schema::is_protected(&req.method, &server::rel_uri(&req.path));
        let event_loop = worker.busy();
        if !protected {
            let queued = arrived.elapsed();
            return self.respond(req, Daemon::Pveproxy, Some(worker), proxy.cost, queued);
        }
        if !proxy.cost.is_zero() {
            std::thread::sleep(proxy.cost);
        }
        drop(event_loop);
        let slot = worker.proxy_slot();
        let connected = Instant::now();
        let timeout = self.pvedaemon.proxy_timeout;
        let Some(daemon_worker) = self.pvedaemon.worker(connected + timeout) else {
            return self.proxy_timed_out(req, worker, arrived);
        };
        let queued = arrived.elapsed().saturating_sub(proxy.cost);
        let cost = self.pvedaemon.cost;
        let resp = self.respond(req, Daemon::Pvedaemon, Some(worker), cost, queued);
        drop(daemon_worker);
        drop(slot);
        if connected.elapsed() > timeout {
            // pvedaemon did the work; pveproxy gave up on the answer before it came.
            return self.proxy_timed_out(req, worker, arrived);
        }
        // pveproxy's event loop writes the answer out.
        let _event_loop = worker.busy();
        resp
    }
}

impl Api {
    /// What a client sees when pvedaemon does not answer pveproxy within `timeout => 30`
    /// (pve-http-server AnyEvent.pm `proxy_request`): AnyEvent::HTTP ends the request with
    /// status 596 ("errors during TLS negotiation, request sending and header processing")
    /// and the handle's error, `Connection timed out`, as the reason; `proxy_request` passes
    /// both on as `HTTP::Response->new($code, $msg, $header, $body)`, with no body, and
    /// `response` closes the connection (`$code >= 400`). Whether pvedaemon acted is not
    /// known to the client. PVE's 599 does not arise on this hop: `proxy_request` sets
    /// `persistent = 0` for localhost, so there is no reused connection to retry
    /// (`recurse`); pve-sim gives 596 alone.
    fn proxy_timed_out(&self, req: &Request, worker: &ProxyWorker, arrived: Instant) -> Response {
        let mut resp = Response::error(596, "Connection timed out");
        resp.body.clear();
        self.sim.log_request(json!({
            "ts": epoch(), "method": req.method, "path": server::rel_uri(&req.path), "params": {},
            "status": resp.status, "ms": arrived.elapsed().as_secs_f64() * 1000.0, "user": "",
            "dropped": false, "error": resp.reason, "daemon": Daemon::Pveproxy.name(),
            "worker": worker.serial,
        }));
        resp
    }

    /// Answers `req` in `daemon`, after its `cost`. The request log names the daemon, the
    /// pveproxy worker whose connection carried it, how long it `queued` for workers, and
    /// when its handler `began` (epoch seconds, as `ts` says when it ended).
    fn respond(
        &self,
        req: &Request,
        daemon: Daemon,
        worker: Option<&ProxyWorker>,
        cost: Duration,
        queued: Duration,
    ) -> Response {
        let (started, began) = (Instant::now(), epoch());
        if !cost.is_zero() {
            std::thread::sleep(cost);
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
            "daemon": daemon.name(), "queued_ms": queued.as_secs_f64() * 1000.0,
            "worker": worker.map(|w| w.serial), "began": began,
        }));
        resp
    }

    fn dispatch(
        &self,
        req: &Request,
        path: &str,
        params: &mut Params,
        user: &mut String,
    ) -> ApiResult {
        if !req.path.starts_with("/api2/json/") {
            return Err(ApiErr::not_implemented(&req.method, &req.path));
        }
        let undef = server::extract_params(req, params)?;
        let segs: Vec<String> = path
            .trim_matches('/')
            .split('/')
            .map(|s| crate::http::server::percent_decode(s, false))
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
            return identity::login(&self.sim, params, user);
        }
        let auth = identity::authenticate(&self.sim, req)?;
        *user = auth.id.clone();
        // HTTPServer.pm rest_handler: the endpoint's schema `permissions`, before its handler.
        let checker = Checker::new(&self.sim, &auth);
        api_perms::check_request(&checker, &req.method, &segs, params, &self.sim.opts.version)?;
        let m = req.method.as_str();
        let sim = &self.sim;
        match segs.as_slice() {
            ["version"] if m == "GET" => Ok(nodes::version(&self.sim)),
            ["nodes"] if m == "GET" => Ok(resources::nodes(&self.sim)),
            ["cluster", "status"] if m == "GET" => Ok(resources::cluster_status(&self.sim)),
            ["cluster", "resources"] if m == "GET" => {
                schema::check(&schema::cluster_resources(), params)?;
                let list =
                    resources::cluster_resources(sim, params.get("type").map(String::as_str));
                Ok(visibility::cluster_resources(&checker, list))
            }
            ["cluster", "tasks"] if m == "GET" => {
                schema::check(&[], params)?;
                Ok(tasks::cluster_tasks(sim, &auth))
            }
            ["access", "permissions"] if m == "GET" => identity::permissions(&checker, params),
            ["cluster", "options"] if m == "GET" => {
                schema::check(&[], params)?;
                Ok(crate::cluster::datacenter::options_seen(
                    crate::cluster::datacenter::options(
                        &sim.opts.next_id,
                        &sim.opts.registered_tags,
                    ),
                    checker.has("/", &["Sys.Audit"]),
                ))
            }
            ["cluster", "nextid"] if m == "GET" => {
                schema::check(&schema::next_id(), params)?;
                resources::next_id(sim, params.get("vmid"))
            }
            ["nodes", node, rest @ ..] => self.node_route(req, node, rest, params, &undef, &auth),
            ["pools", rest @ ..] => self.pool_route(m, rest, params, &req.path, &checker),
            ["cluster", "ha", "resources"] if m == "GET" => {
                schema::check(&schema::ha_index(), params)?;
                manager::index(sim, params)
            }
            ["cluster", "ha", "resources"] if m == "POST" => {
                schema::check(&schema::ha_create(), params)?;
                manager::create(sim, params)
            }
            ["cluster", "ha", "resources", sid] => {
                params.insert("sid".into(), sid.to_string());
                match m {
                    "GET" => {
                        schema::check(&schema::ha_sid(false), params)?;
                        manager::read(sim, sid)
                    }
                    "PUT" => {
                        schema::check(&schema::ha_update(), params)?;
                        manager::update(sim, sid, params)
                    }
                    "DELETE" => {
                        schema::check(&schema::ha_sid(true), params)?;
                        manager::delete(sim, sid, params.get("purge").is_some_and(|p| p == "1"))
                    }
                    _ => Err(ApiErr::not_implemented(m, &server::rel_uri(&req.path))),
                }
            }
            ["cluster", "ha", kind @ ("rules" | "groups"), rest @ ..] => {
                let uri = server::rel_uri(&req.path);
                crate::ha::routes::route(sim, m, kind, rest, params, &uri)
            }
            ["cluster", "ha", "status", "current"] if m == "GET" => {
                schema::check(&[], params)?;
                Ok(manager::status_current(sim))
            }
            ["access", "users"] if m == "GET" => {
                schema::check(&schema::user_index(), params)?;
                Ok(lists::users(sim, params))
            }
            ["access", "users", id] if m == "GET" => {
                params.insert("userid".into(), id.to_string());
                schema::check(&schema::one_id("userid"), params)?;
                lists::user(sim, id)
            }
            ["access", "groups"] if m == "GET" => {
                schema::check(&[], params)?;
                Ok(lists::groups())
            }
            ["access", "groups", id] if m == "GET" => {
                params.insert("groupid".into(), id.to_string());
                schema::check(&schema::one_id("groupid"), params)?;
                lists::group(id)
            }
            ["access", "domains"] if m == "GET" => {
                schema::check(&[], params)?;
                Ok(lists::domains())
            }
            ["access", "domains", id] if m == "GET" => {
                params.insert("realm".into(), id.to_string());
                schema::check(&schema::one_id("realm"), params)?;
                lists::domain(id)
            }
            ["storage"] if m == "GET" => {
                schema::check(&schema::storage_index(), params)?;
                Ok(visibility::storages(
                    &checker,
                    storage::config::index(params),
                ))
            }
            ["storage"] if m == "POST" => {
                schema::check(&schema::storage_create(), params)?;
                storage::config::create(params)
            }
            ["storage", sid] if m == "GET" => {
                params.insert("storage".into(), sid.to_string());
                schema::check(&schema::storage_read(false), params)?;
                storage::config::read(sid)
            }
            _ => Err(ApiErr::not_implemented(m, &server::rel_uri(&req.path))),
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
        let not_impl = || ApiErr::not_implemented(m, &server::rel_uri(&req.path));
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
                schema::check(&schema::task_list(), params)?;
                check_node()?;
                Ok(tasks::task_list(sim, node, params, auth))
            }
            (_, ["tasks", upid, tail @ ..]) => {
                set(params, "upid", upid)?;
                match (m, tail) {
                    ("GET", ["status"]) => {
                        schema::check(&schema::task_upid(), params)?;
                        check_node()?;
                        tasks::task_status(sim, node, upid, auth)
                    }
                    ("GET", ["log"]) => {
                        schema::check(&schema::task_log(), params)?;
                        check_node()?;
                        tasks::task_log(sim, node, upid, params, auth)
                    }
                    ("DELETE", []) => {
                        schema::check(&schema::task_upid(), params)?;
                        check_node()?;
                        tasks::task_stop(sim, node, upid)
                    }
                    _ => Err(not_impl()),
                }
            }
            ("GET", ["version"]) => {
                schema::check(&schema::node_version(), params)?;
                check_node()?;
                Ok(nodes::version(sim))
            }
            ("GET", ["network"]) => {
                schema::check(&schema::node_network(), params)?;
                check_node()?;
                Ok(nodes::network(sim, node, params))
            }
            ("GET", ["storage", sid]) => {
                set(params, "storage", sid)?;
                schema::check(&schema::storage_read(true), params)?;
                check_node()?;
                Ok(storage::config::diridx())
            }
            ("GET", ["storage"]) => {
                schema::check(&schema::storage_list(), params)?;
                check_node()?;
                let list = status::storage_list(sim, node, params);
                Ok(visibility::storages(&Checker::new(sim, auth), list))
            }
            (_, ["storage", sid, tail @ ..]) => {
                set(params, "storage", sid)?;
                match (m, tail) {
                    ("GET", ["content"]) => {
                        schema::check(&schema::storage_content(), params)?;
                        check_node()?;
                        volumes::storage(sid).ok_or_else(|| {
                            ApiErr::die(format!("storage '{sid}' does not exist"))
                        })?;
                        let vmid = params.get("vmid").and_then(|v| v.parse().ok());
                        Ok(json!(volumes::list_content(
                            &sim.opts.data_dir,
                            node,
                            sid,
                            params.get("content").map(String::as_str),
                            vmid
                        )))
                    }
                    ("DELETE", ["content", volume]) => {
                        set(params, "volume", volume)?;
                        schema::check(&schema::storage_volume_delete(), params)?;
                        check_node()?;
                        status::volume_delete(sim, node, sid, volume, auth)
                    }
                    ("POST", ["upload"]) => {
                        schema::check(&versions::upload_schema(&sim.opts.version), params)?;
                        check_node()?;
                        crate::storage::upload::upload(sim, node, sid, params, auth)
                    }
                    ("POST", ["download-url"]) => {
                        schema::check(&versions::download_url_schema(&sim.opts.version), params)?;
                        check_node()?;
                        crate::storage::download::download_url(sim, node, sid, params, auth)
                    }
                    _ => Err(not_impl()),
                }
            }
            ("GET", ["qemu"]) => {
                check_node()?;
                Ok(visibility::vm_list(
                    &Checker::new(sim, auth),
                    vms::vm_list(sim, node),
                ))
            }
            // pve-container API2/LXC.pm vmlist: the node's containers (PVE::LXC::vmstatus);
            // pve-sim runs none, so the list is empty (community.proxmox's inventory reads it).
            ("GET", ["lxc"]) => {
                check_node()?;
                Ok(json!([]))
            }
            ("POST", ["qemu"]) => {
                let create = versions::create_vm_schema(&sim.opts.version);
                schema::check_with_undefined(&create, params, undef)?;
                check_node()?;
                vms::create(sim, node, params, undef, auth)
            }
            (_, ["qemu", vmid, tail @ ..]) => {
                set(params, "vmid", vmid)?;
                let check = |spec: Vec<schema::Param>, params: &Params| -> Result<u32, ApiErr> {
                    schema::check_with_undefined(&spec, params, undef)?;
                    check_node()?;
                    Ok(vmid.parse().unwrap_or(0))
                };
                if let Some(answer) =
                    crate::qemu::snapshot_routes::route(sim, m, tail, params, auth, check_node)
                {
                    return answer;
                }
                match (m, tail) {
                    ("GET", ["config"]) => {
                        let id = check(schema::vm_config_get(), params)?;
                        let current = params.get("current").is_some_and(|v| v == "1");
                        config::get_config(sim, node, id, current)
                    }
                    ("GET", ["agent", "network-get-interfaces"]) => {
                        let id = check(schema::vm_path(vec![]), params)?;
                        vms::agent_network(sim, node, id)
                    }
                    ("POST", ["template"]) => {
                        let id = check(schema::template(), params)?;
                        templates::template(sim, node, id, auth)
                    }
                    ("POST", ["clone"]) => {
                        let id = check(schema::clone_vm(), params)?;
                        templates::clone(sim, node, id, params, auth)
                    }
                    ("GET", ["migrate"]) => {
                        let id = check(migrate::precondition_spec(), params)?;
                        migrate::precondition(sim, node, id)
                    }
                    ("POST", ["migrate"]) => {
                        let id = check(migrate::migrate_spec(), params)?;
                        migrate::migrate(sim, node, id, params, auth)
                    }
                    ("GET", ["pending"]) => {
                        let id = check(schema::vm_path(vec![]), params)?;
                        config::get_pending(sim, node, id)
                    }
                    ("GET", ["cloudinit"]) => {
                        let id = check(schema::vm_path(vec![]), params)?;
                        vms::get_cloudinit(sim, node, id)
                    }
                    ("PUT", ["cloudinit"]) => {
                        let id = check(schema::vm_path(vec![]), params)?;
                        vms::put_cloudinit(sim, node, id)
                    }
                    ("PUT", ["config"]) => {
                        let id = check(schema::update_vm(false), params)?;
                        config::update(sim, node, id, params, undef, auth, false)
                    }
                    ("POST", ["config"]) => {
                        let id = check(schema::update_vm(true), params)?;
                        config::update(sim, node, id, params, undef, auth, true)
                    }
                    ("POST", ["move_disk"]) => {
                        let id = check(schema::move_disk(), params)?;
                        disks::move_disk(sim, node, id, params, auth)
                    }
                    ("PUT", ["unlink"]) => {
                        let id = check(schema::unlink(), params)?;
                        disks::unlink(sim, node, id, params, undef, auth)
                    }
                    ("PUT", ["resize"]) => {
                        let id = check(schema::resize(), params)?;
                        vms::resize(sim, node, id, params, auth)
                    }
                    ("DELETE", []) => {
                        let id = check(schema::delete_vm(), params)?;
                        vms::destroy(sim, node, id, params, auth)
                    }
                    ("GET", ["status", "current"]) => {
                        let id = check(schema::vm_path(vec![]), params)?;
                        // vm_status: `ha` is PVE::HA::Config::get_service_status.
                        let mut v = vms::status_current(sim, node, id)?;
                        v["ha"] = manager::service_status(sim, id);
                        Ok(v)
                    }
                    ("POST", ["status", action]) => {
                        let spec = match *action {
                            "start" => schema::vm_start(),
                            "stop" => schema::vm_stop(),
                            "shutdown" => schema::vm_shutdown(),
                            "reboot" => schema::vm_reboot(),
                            _ => return Err(not_impl()),
                        };
                        let id = check(spec, params)?;
                        // vm_start/vm_stop/vm_shutdown: an HA-managed VM is handed to the HA
                        // stack (`hastart`/`hastop`) instead.
                        if let Some(upid) =
                            manager::power_request(sim, node, id, action, params, auth)?
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

    /// `/pools` (pve-manager API2/Pool.pm): the current forms with `poolid` as a parameter,
    /// and the deprecated ones with it in the path.
    fn pool_route(
        &self,
        m: &str,
        rest: &[&str],
        params: &mut Params,
        uri: &str,
        checker: &Checker,
    ) -> ApiResult {
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
                schema::check(&schema::pool_index(), params)?;
                pools::index(sim, checker, params)
            }
            ("GET", 1) => {
                schema::check(&schema::pool_read(), params)?;
                pools::read(sim, rest[0], params)
            }
            ("POST", 0) => {
                schema::check(&schema::pool_create(), params)?;
                pools::create(sim, params)
            }
            ("PUT", 0 | 1) => {
                schema::check(&schema::pool_update(), params)?;
                pools::update(sim, checker, params)
            }
            ("DELETE", 0 | 1) => {
                schema::check(&schema::pool_delete(), params)?;
                pools::delete(sim, params)
            }
            _ => Err(ApiErr::not_implemented(m, &server::rel_uri(uri))),
        }
    }
}
