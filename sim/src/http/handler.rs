//! What every endpoint handler shares, as PVE's RESTHandler gives it: the error a handler
//! raises (`die`, `raise_param_exc`), the caller's identity, the merged parameters, and the
//! wait on the simulator's state. Handlers import this, never the router (`http/router.rs`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::schema::{self, Errors};
use crate::state::Sim;

/// An error as a PVE handler raises it.
pub struct ApiErr {
    pub status: u16,
    pub msg: String,
    pub errors: Option<Errors>,
}

impl ApiErr {
    /// A plain `die`: HTTP 500 with the message in the status line.
    pub fn die(msg: impl Into<String>) -> Self {
        ApiErr {
            status: 500,
            msg: msg.into(),
            errors: None,
        }
    }

    /// `raise_param_exc`: HTTP 400 `Parameter verification failed.` with per-parameter errors.
    pub fn param(key: &str, msg: impl Into<String>) -> Self {
        let mut e = Errors::new();
        e.insert(key.to_string(), msg.into());
        Self::params(e)
    }

    /// pve-manager HTTPServer.pm rest_handler, for a path no handler serves: 501 `Method 'M
    /// $rel_uri' not implemented`, the path without `/api2/json` ([`crate::http::server::rel_uri`]).
    pub fn not_implemented(method: &str, rel_uri: &str) -> Self {
        ApiErr {
            status: 501,
            msg: format!("Method '{method} {rel_uri}' not implemented"),
            errors: None,
        }
    }

    pub fn params(errors: Errors) -> Self {
        ApiErr {
            status: 400,
            msg: "Parameter verification failed.".into(),
            errors: Some(errors),
        }
    }
}

/// A message from a step that fails as `die` does (a lock not taken, a check refused).
impl From<String> for ApiErr {
    fn from(msg: String) -> Self {
        ApiErr::die(msg)
    }
}

impl From<schema::Errors> for ApiErr {
    fn from(e: schema::Errors) -> Self {
        ApiErr::params(e)
    }
}

pub type ApiResult = Result<Value, ApiErr>;

/// Who is calling.
#[derive(Clone)]
pub struct Auth {
    /// The id as it appears in UPIDs: `root@pam`, or `root@pam!ci` for a token.
    pub id: String,
    /// A `root@pam` ticket (not a token): may use `skiplock` and absolute import paths.
    pub root_ticket: bool,
}

/// Request parameters merged from the path, the query and the body.
pub type Params = BTreeMap<String, String>;

/// Parameters given without a value (`key=` in a form, `null` in JSON): PVE's undef
/// (pve-http-server decode_urlencoded). They pass the schema check as absent ones do, and the
/// handlers that PVE lets see them (create_vm, update_vm_api) get them beside [`Params`].
pub type Undefined = std::collections::BTreeSet<String>;

/// Waits on the condition variable until `done` holds or `timeout` passes.
pub fn wait_until(
    sim: &Sim,
    timeout: Duration,
    mut done: impl FnMut(&crate::state::State) -> bool,
) -> bool {
    let deadline = Instant::now() + timeout;
    let mut st = sim.lock();
    loop {
        if done(&st) {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        st = sim
            .cv
            .wait_timeout(st, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}
