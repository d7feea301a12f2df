//! The PVE API client: one place where a request is built, authenticated and sent, and where
//! an answer becomes data or an [`ApiError`]. Every write goes through [`Client::write`], which
//! refuses to send anything in check mode.

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use ureq::Agent;
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{ConnectProxyConnector, Connector, TcpConnector};

mod answer;
mod auth;
mod gate;
mod hints;
mod relief;
mod request;
mod roster;

pub use auth::Credentials;
use auth::{RunCache, Ticket};
use gate::Gate;
pub use gate::{Concurrency, MOST_SLOTS, Root};
pub use hints::Hints;
use relief::Relief;
use request::Request;
pub use request::{Method, Params};
pub use roster::{Ended, Entered, Made, Roster};

use super::budget::Budget;
use super::error::ApiError;
use super::tls::{PveTls, StatusLine, Trust, client_config};

/// How long an idle connection is kept for the next request: under PVE's 5 s, after which
/// pveproxy closes an idle connection (pve-http-server AnyEvent.pm, `timeout` 5), so that a
/// request is never sent on a connection PVE has closed meanwhile (ureq's default is 15 s).
/// A connection PVE closes otherwise (its 100 requests, a worker's restart) says
/// `Connection: close` in its last answer, and the next request opens a new one.
const IDLE_REUSE: Duration = Duration::from_secs(4);
/// How to reach and authenticate to the API.
#[derive(Clone)]
pub struct Connection {
    pub host: String,
    pub port: u16,
    pub trust: Trust,
    /// The longest one request may take.
    pub timeout: Duration,
    /// The run's time (`timeout`): no request outlasts it.
    pub budget: Budget,
    /// The HTTP proxy to tunnel through, if any.
    pub proxy: Option<super::proxy::ProxyChoice>,
    pub credentials: Credentials,
    /// The caller's advice for connection errors.
    pub hints: Hints,
    /// How many requests this controller's runs send to this endpoint at once ([`gate`]).
    pub concurrency: Concurrency,
    /// Called with every secret the client learns or sends (a login ticket, a CSRF token, a
    /// proxy password), so the caller can keep them out of its output.
    pub secret_sink: fn(&str),
    /// Asked before each request: the signal received, if any (then nothing new is sent but
    /// a task's status, log or stop). The module layer gives [`crate::interrupt::received`].
    pub interrupted: fn() -> Option<&'static str>,
}

/// How long past the run's deadline the requests of a cleanup (stopping a task on timeout,
/// reading its last log lines) may take: PVE answers a stop after up to 5 s.
pub const CLEANUP_GRACE: Duration = Duration::from_secs(10);

/// An authenticated API client.
pub struct Client {
    agent: Agent,
    base: String,
    credentials: Credentials,
    ticket: RefCell<Option<Ticket>>,
    /// What the run reads once (`/version`), kept with the ticket.
    kept: RunCache,
    status: Arc<Mutex<StatusLine>>,
    read_only: bool,
    requests: Cell<u64>,
    timeout: Duration,
    /// The run's time, as the run gave it: no request outlasts it.
    budget: Budget,
    proxy: Option<super::proxy::ProxyChoice>,
    hints: Hints,
    secret_sink: fn(&str),
    interrupted: fn() -> Option<&'static str>,
    /// Whether the server has answered at all in this run.
    answered: Cell<bool>,
    /// The quickest 200 answer of this run, from sending to the body read: the round trip
    /// plus the least the server spends on a request (the wait's load relief compares with it).
    quickest: Cell<Option<Duration>>,
    /// The API node's clock as its last answer's `Date` header told it, and when that
    /// answer came ([`Client::server_now`]).
    server_clock: Cell<Option<(u64, Instant)>>,
    /// The run's pace while the server queues its requests ([`relief`]), shared by the
    /// threads of the run.
    relief: Arc<Mutex<Relief>>,
    /// The slots this controller's runs share for this endpoint ([`gate`]), shared by the
    /// threads of the run; none with `slots` 0 or where no directory could hold them.
    gate: Option<Arc<Gate>>,
    /// The guest agent's calls' own slots ([`Gate::for_agent`]).
    agent_gate: Option<Arc<Gate>>,
    /// Why there is no gate although slots were asked for.
    gate_note: Option<String>,
    /// The VMs this controller's runs make on this endpoint ([`roster`]); none where no
    /// directory of the user's own could hold it.
    roster: Option<Arc<Roster>>,
}

/// How long until a clock that an answer stamped `stamped` (whole seconds, as a `Date`
/// header counts them) `since` ago has surely reached `moment` (since the epoch): the stamp
/// was made at `stamped` or later, so the clock now reads at least `stamped + since`.
pub fn until_clock_reaches(moment: Duration, stamped: u64, since: Duration) -> Duration {
    moment.saturating_sub(Duration::from_secs(stamped).saturating_add(since))
}

impl Client {
    /// Builds a client; logs in when using a password. `read_only` (check mode) refuses writes.
    pub fn connect(conn: &Connection, read_only: bool) -> Result<Client, ApiError> {
        let status = Arc::new(Mutex::new(StatusLine::default()));
        let config = client_config(&conn.trust).map_err(|e| ApiError::Transport {
            source: None,
            detail: e,
            sent: false,
        })?;
        let proxy = match &conn.proxy {
            Some(p) => {
                if let Some(pw) = &p.password {
                    (conn.secret_sink)(pw);
                }
                Some(ureq::Proxy::new(&p.url).map_err(|e| ApiError::Unreachable {
                    detail: format!("{} {}: {e}", p.source, p.shown),
                    source: Some(Arc::new(e)),
                })?)
            }
            None => None,
        };
        let connector =
            ().chain(ConnectProxyConnector::default())
                .chain(TcpConnector::default())
                .chain(PveTls {
                    config,
                    status: status.clone(),
                });
        // PVE's API never redirects: a redirect is not followed (it could lead a pinned
        // connection to another, unchecked host) but reported.
        let agent_config = Agent::config_builder()
            .max_idle_age(IDLE_REUSE)
            .http_status_as_error(false)
            .max_redirects(0)
            .proxy(proxy)
            .timeout_global(Some(conn.timeout))
            .user_agent(concat!("sankofa.proxmox/", env!("CARGO_PKG_VERSION")))
            .build();
        let agent = Agent::with_parts(agent_config, connector, DefaultResolver::default());
        let host = if conn.host.contains(':') && !conn.host.starts_with('[') {
            format!("[{}]", conn.host)
        } else {
            conn.host.clone()
        };
        let (gate, gate_note) =
            match Gate::open(&conn.concurrency, &conn.host, conn.port, conn.budget.seed()) {
                Ok(gate) => (gate.map(Arc::new), None),
                Err(why) => (None, Some(why)),
            };
        let agent_gate = gate.as_ref().map(|gate| Arc::new(gate.for_agent()));
        let roster = Roster::open(&conn.concurrency.roots, &conn.host, conn.port)
            .ok()
            .map(Arc::new);
        let client = Client {
            agent,
            base: format!("https://{host}:{}/api2/json", conn.port),
            credentials: conn.credentials.clone(),
            ticket: RefCell::new(None),
            kept: RunCache::default(),
            status,
            read_only,
            requests: Cell::new(0),
            timeout: conn.timeout,
            budget: conn.budget.clone(),
            proxy: conn.proxy.clone(),
            hints: conn.hints.clone(),
            secret_sink: conn.secret_sink,
            interrupted: conn.interrupted,
            answered: Cell::new(false),
            quickest: Cell::new(None),
            server_clock: Cell::new(None),
            relief: Arc::new(Mutex::new(Relief::new(conn.budget.seed()))),
            gate,
            agent_gate,
            gate_note,
            roster,
        };
        if let Credentials::Password { .. } = client.credentials {
            client.login()?;
        }
        Ok(client)
    }

    /// Allows the requests of a cleanup up to [`CLEANUP_GRACE`] past the run's deadline.
    pub fn allow_cleanup(&mut self) {
        self.budget = self.budget.extended(CLEANUP_GRACE);
    }

    /// The run's time it was given: no request, retry or wait outlasts it.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// How many HTTP requests this client has sent.
    pub fn requests(&self) -> u64 {
        self.requests.get()
    }

    /// A client for another thread of the same run: the same connection, credentials, ticket
    /// and deadline (ureq's agent shares its connection pool); its requests are counted on
    /// their own ([`Client::requests`] of each).
    pub fn worker(&self) -> Client {
        let ticket = self.ticket.borrow().clone();
        Client {
            agent: self.agent.clone(),
            base: self.base.clone(),
            credentials: self.credentials.clone(),
            ticket: RefCell::new(ticket),
            kept: self.kept.clone(),
            status: self.status.clone(),
            read_only: self.read_only,
            requests: Cell::new(0),
            timeout: self.timeout,
            budget: self.budget.clone(),
            proxy: self.proxy.clone(),
            hints: self.hints.clone(),
            secret_sink: self.secret_sink,
            interrupted: self.interrupted,
            answered: Cell::new(self.answered.get()),
            quickest: Cell::new(self.quickest.get()),
            server_clock: Cell::new(self.server_clock.get()),
            relief: self.relief.clone(),
            gate: self.gate.clone(),
            agent_gate: self.agent_gate.clone(),
            gate_note: self.gate_note.clone(),
            roster: self.roster.clone(),
        }
    }

    /// Who this client acts as, as PVE writes it in a UPID: `user@realm`, or
    /// `user@realm!token` for an API token.
    pub fn user(&self) -> &str {
        match &self.credentials {
            Credentials::Password { user, .. } => user,
            Credentials::Token { id, .. } => id,
        }
    }

    /// The API node's time now, in epoch seconds, from the `Date` header of its last answer
    /// (pve-http-server sends one with every answer); `None` before an answer had one. PVE
    /// writes times (a volume's `ctime`, a task's start) by its own clock, which this host's
    /// may differ from.
    pub fn server_now(&self) -> Option<u64> {
        self.server_clock
            .get()
            .map(|(seconds, at)| seconds + at.elapsed().as_secs())
    }

    /// How long until the API node's clock has surely reached `moment` (since the epoch),
    /// from its last answer's `Date` ([`until_clock_reaches`]); `None` before an answer had one.
    pub fn until_server_reaches(&self, moment: Duration) -> Option<Duration> {
        self.server_clock
            .get()
            .map(|(seconds, at)| until_clock_reaches(moment, seconds, at.elapsed()))
    }

    /// The quickest successful answer of this run (see [`crate::wait::WaitState::note_baseline`]).
    pub fn quickest_answer(&self) -> Option<Duration> {
        self.quickest.get()
    }

    /// Why this run's requests pass no gate although `concurrency` asked for one: no
    /// directory of the user's own could hold its slots ([`gate`]).
    pub fn gate_note(&self) -> Option<&str> {
        self.gate_note.as_deref()
    }

    /// The roster of the VMs this controller's runs make on this endpoint ([`roster`]).
    pub fn roster(&self) -> Option<&Roster> {
        self.roster.as_deref()
    }

    /// True in check mode.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    fn login(&self) -> Result<(), ApiError> {
        let Credentials::Password { user, password } = &self.credentials else {
            return Ok(());
        };
        let form = auth::login_form(user, password);
        let answer = self
            .send(Method::Post, "/access/ticket", &form, false)
            .map_err(|e| auth::login_refused(e, user, &self.hints))?;
        let ticket = auth::ticket(&answer, &self.base)?;
        (self.secret_sink)(&ticket.cookie);
        (self.secret_sink)(&ticket.csrf);
        *self.ticket.borrow_mut() = Some(ticket);
        Ok(())
    }

    /// A read (`GET`, no parameters) made once per run: later calls, on any of the run's
    /// threads, get the first answer's `data` (a failed read is not kept).
    pub fn get_once(&self, path: &str) -> Result<Value, ApiError> {
        self.kept.get_or(path, || self.get(path, &Vec::new()))
    }

    /// A read (`GET`); returns the whole envelope (`data`, and `total` where PVE sends it).
    pub fn get_envelope(&self, path: &str, params: &Params) -> Result<Value, ApiError> {
        self.authed(Method::Get, path, params)
    }

    /// A read (`GET`); returns `data`.
    pub fn get(&self, path: &str, params: &Params) -> Result<Value, ApiError> {
        self.get_envelope(path, params)
            .map(|mut v| v["data"].take())
    }

    /// A write (`POST`/`PUT`/`DELETE`); refused in check mode. Returns `data`.
    pub fn write(&self, method: Method, path: &str, params: &Params) -> Result<Value, ApiError> {
        if self.read_only {
            return Err(ApiError::CheckMode {
                what: format!("{} {path}", method.as_str()),
            });
        }

        self.authed(method, path, params)
            .map(|mut v| v["data"].take())
    }

    /// `POST` of a file as `multipart/form-data` (the storage upload): the `fields`, then
    /// the file under the name `file_name`; refused in check mode. Returns `data`.
    pub fn upload(
        &self,
        path: &str,
        fields: &Params,
        file_name: &str,
        contents: &[u8],
    ) -> Result<Value, ApiError> {
        if self.read_only {
            return Err(ApiError::CheckMode {
                what: format!("POST {path}"),
            });
        }
        let build = || Request::upload(&self.base, path, fields, file_name, contents);
        self.authed_with(Method::Post, path, &build)
            .map(|mut v| v["data"].take())
    }

    /// Sends with authentication; logs in again once if the ticket expired or was revoked.
    fn authed(&self, method: Method, path: &str, params: &Params) -> Result<Value, ApiError> {
        let build = || Request::new(&self.base, method, path, params);
        self.authed_with(method, path, &build)
    }

    /// [`Client::authed`] for the request `build` makes.
    fn authed_with(
        &self,
        method: Method,
        path: &str,
        build: &dyn Fn() -> Request,
    ) -> Result<Value, ApiError> {
        match self.send_built(method, path, build(), true) {
            Err(e)
                if e.is_auth()
                    && matches!(self.credentials, Credentials::Password { .. })
                    && self.ticket.borrow().is_some() =>
            {
                self.login()?;
                self.send_built(method, path, build(), true)
            }
            Err(e) if e.is_auth() => Err(auth::refused(&self.credentials, &self.hints)),
            other => other,
        }
    }

    /// Sends one request and reads its answer: the checks before anything is sent (a
    /// signal, the run's pace while the server queues ([`relief`]), the run's budget), the
    /// request ([`request`]), its authentication ([`auth`], unless `auth` is false: the login
    /// itself), and the answer ([`answer`]).
    fn send(
        &self,
        method: Method,
        path: &str,
        params: &Params,
        auth: bool,
    ) -> Result<Value, ApiError> {
        let request = Request::new(&self.base, method, path, params);
        self.send_built(method, path, request, auth)
    }

    /// [`Client::send`] of a request already built.
    fn send_built(
        &self,
        method: Method,
        path: &str,
        request: Request,
        auth: bool,
    ) -> Result<Value, ApiError> {
        // After SIGINT/SIGTERM/SIGHUP/SIGQUIT nothing new is sent, above all no write; only
        // requests about a task (its status, its log, stopping it) may still report or clean up.
        if let Some(sig) = (self.interrupted)()
            && !path.contains("/tasks/")
        {
            return Err(ApiError::Interrupted {
                signal: sig,
                what: format!("{} {path} was not sent", method.as_str()),
            });
        }
        // While the server queues this run's requests, the run waits its turn (never once a
        // signal came: the cleanup's requests about a task are sent at once).
        let turn = if (self.interrupted)().is_none() {
            self.relief().turn(self.budget.now())
        } else {
            Duration::ZERO
        };
        if !turn.is_zero() {
            self.budget
                .pause(turn)
                .map_err(|super::budget::Interrupted(signal)| ApiError::Interrupted {
                    signal,
                    what: format!("{} {path} was not sent", method.as_str()),
                })?;
        }
        // At most the gate's number of this controller's requests are in flight to the
        // endpoint at once: the slot is held from here until the answer is read, and given
        // back (dropped) on every path, before any retry, re-login or pause.
        let gate = if path.contains("/agent/") {
            &self.agent_gate
        } else {
            &self.gate
        };
        let pass = match gate {
            Some(gate) => Some(gate.enter(&|| self.gate_waited_out(method, path, gate))?),
            None => None,
        };
        // Each request is bounded by api_timeout and by what is left of the run.
        let left = self.budget.left();
        if left.is_zero() {
            return Err(ApiError::DeadlineReached {
                what: format!("{} {path} could be sent", method.as_str()),
            });
        }
        let limit = self.timeout.min(left);
        self.requests.set(self.requests.get() + 1);
        let started = self.budget.now();
        let result = self.exchange(method, path, request, auth, limit);
        drop(pass);
        let ended = self.budget.now();
        let outcome = relief::outcome(&result, ended.saturating_duration_since(started));
        self.relief()
            .observe(relief::class(method, path), outcome, ended);
        result
    }

    /// What ends a wait for the gate: a signal (unless the request is about a task: a
    /// cleanup's requests still go), or the run's deadline.
    fn gate_waited_out(&self, method: Method, path: &str, gate: &Gate) -> Option<ApiError> {
        if let Some(signal) = (self.interrupted)()
            && !path.contains("/tasks/")
        {
            return Some(ApiError::Interrupted {
                signal,
                what: format!("{} {path} was not sent", method.as_str()),
            });
        }
        if !self.budget.spent() {
            return None;
        }
        let what = format!(
            "{} {path} could be sent: this controller's other runs held all {} of its requests \
             to this API at once",
            method.as_str(),
            gate.slots(),
        );
        Some(ApiError::DeadlineReached {
            what: hints::hinted(what, " (", &self.hints.concurrency, ")"),
        })
    }

    /// The run's pace (a thread that panicked holding it left it as it was).
    fn relief(&self) -> std::sync::MutexGuard<'_, Relief> {
        self.relief.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The request itself and its answer, within `limit`.
    fn exchange(
        &self,
        method: Method,
        path: &str,
        request: Request,
        auth: bool,
        limit: Duration,
    ) -> Result<Value, ApiError> {
        let asked = Instant::now();
        let headers = if auth {
            auth::headers(&self.credentials, self.ticket.borrow().as_ref(), method)
        } else {
            Vec::new()
        };
        let result = request.send(&self.agent, &headers, limit);
        let resp = result.map_err(|e| {
            match answer::transport_error(e, &self.base, self.proxy.as_ref(), &self.hints) {
                // Nothing has ever answered: a wrong host, port or certificate setting, not a
                // restart to wait out.
                ApiError::Transport {
                    detail,
                    sent: false,
                    source,
                } if !self.answered.get() => ApiError::Unreachable { detail, source },
                other => other,
            }
        })?;
        self.answered.set(true);
        let noted = || {
            let took = asked.elapsed();
            if self.quickest.get().is_none_or(|q| took < q) {
                self.quickest.set(Some(took));
            }
        };
        if let Some(seconds) = resp
            .headers()
            .get("date")
            .and_then(|date| date.to_str().ok())
            .and_then(crate::values::http_date::parse)
        {
            self.server_clock.set(Some((seconds, Instant::now())));
        }
        let proxy = self.proxy.as_ref();
        answer::read(
            resp,
            &self.base,
            path,
            &self.status,
            &self.hints,
            proxy,
            noted,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::until_clock_reaches;
    use std::time::Duration;

    #[test]
    fn a_clock_is_waited_for_until_its_stamp_and_the_time_since_pass_the_moment() {
        let at = |ms: u64| Duration::from_millis(ms);
        // Stamped 100 (100.0 to 100.99 then): 101 is sure once a whole second has passed.
        assert_eq!(until_clock_reaches(at(101_000), 100, at(0)), at(1_000));
        assert_eq!(until_clock_reaches(at(101_000), 100, at(300)), at(700));
        assert_eq!(until_clock_reaches(at(101_250), 100, at(300)), at(950));
        assert_eq!(until_clock_reaches(at(101_000), 100, at(2_000)), at(0));
        // A stamp in or past the moment: no wait.
        assert_eq!(until_clock_reaches(at(101_000), 101, at(0)), at(0));
        assert_eq!(until_clock_reaches(at(101_250), 105, at(0)), at(0));
    }
}
