//! The PVE API client: one place where a request is built, authenticated and sent, and where
//! an answer becomes data or an [`ApiError`]. Every write goes through [`Client::write`], which
//! refuses to send anything in check mode.

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use ureq::Agent;
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{ConnectProxyConnector, Connector, TcpConnector};

use super::budget::Budget;
use super::encode::{form, url_encode};
use super::error::ApiError;
use super::tls::{HandshakeCut, PveTls, StatusLine, Trust, client_config};

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
    /// Called with every secret the client learns or sends (a login ticket, a CSRF token, a
    /// proxy password), so the caller can keep them out of its output.
    pub secret_sink: fn(&str),
    /// Asked before each request: the signal received, if any (then nothing new is sent but
    /// a task's status, log or stop). The module layer gives [`crate::interrupt::received`].
    pub interrupted: fn() -> Option<&'static str>,
}

/// Advice the caller adds to the client's error messages, in its own words: the client knows
/// what failed, the caller knows what its user can set (the module layer names its options).
/// An empty hint adds nothing.
#[derive(Clone, Debug, Default)]
pub struct Hints {
    /// After a TLS failure (an untrusted or unexpected certificate).
    pub tls: String,
    /// After a failed connection (refused, unresolvable, unreachable).
    pub connect: String,
    /// The name of the per-request timeout, for "no answer within …".
    pub timeout: String,
    /// After a refused password login.
    pub login: String,
    /// After a refused API token.
    pub token: String,
    /// After a proxy that cannot be reached or refused the tunnel.
    pub proxy: String,
    /// After an answer that is not PVE's (a redirect, a non-JSON body).
    pub not_pve: String,
}

/// `text` followed by `sep` and the hint, or `text` alone when there is no hint.
fn hinted(text: String, sep: &str, hint: &str, end: &str) -> String {
    if hint.is_empty() {
        text
    } else {
        format!("{text}{sep}{hint}{end}")
    }
}

/// The largest answer read (the biggest legitimate ones, a cluster listing or a page of a
/// task log, are well under a MiB); a larger one is refused, not buffered.
const MAX_BODY: u64 = 8 * 1024 * 1024;

/// How long past the run's deadline the requests of a cleanup (stopping a task on timeout,
/// reading its last log lines) may take: PVE answers a stop after up to 5 s.
pub const CLEANUP_GRACE: Duration = Duration::from_secs(10);

/// A ticket login or an API token.
#[derive(Clone)]
pub enum Credentials {
    Password { user: String, password: String },
    Token { id: String, secret: String },
}

struct Ticket {
    cookie: String,
    csrf: String,
}

/// An authenticated API client.
pub struct Client {
    agent: Agent,
    base: String,
    credentials: Credentials,
    ticket: RefCell<Option<Ticket>>,
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
}

/// HTTP methods the API uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    /// `GET`, `POST`, `PUT`, `DELETE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }
}

/// Request parameters, in order.
pub type Params = Vec<(String, String)>;

/// An error's text without the link to rustls's manual that rustls appends to some of its
/// messages ("peer closed connection without sending TLS close_notify: https://docs.rs/…"):
/// the user needs what happened, not a library's how-to page.
fn without_manual_link(text: &str) -> String {
    match text.find(": https://docs.rs/rustls") {
        Some(at) => text[..at].to_string(),
        None => text.to_string(),
    }
}

fn transport_error(
    err: ureq::Error,
    base: &str,
    proxy: Option<&super::proxy::ProxyChoice>,
    hints: &Hints,
) -> ApiError {
    use std::io::ErrorKind as K;
    use ureq::Error as E;
    let text = without_manual_link(&err.to_string());
    // Through a proxy, a failed connection is a failed connection to the proxy, and a
    // refused CONNECT is the proxy's answer: neither heals by trying again.
    if let Some(p) = proxy {
        let refused_tunnel = matches!(err, E::ConnectProxyFailed(_));
        let unreachable = matches!(&err, E::Io(io) if matches!(io.kind(), K::ConnectionRefused | K::AddrNotAvailable | K::HostUnreachable | K::NetworkUnreachable))
            || matches!(
                err,
                E::ConnectionFailed
                    | E::HostNotFound
                    | E::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve)
            );
        if refused_tunnel || unreachable {
            let what = if refused_tunnel {
                "refused to open a tunnel (CONNECT) to"
            } else {
                "cannot be reached to connect to"
            };
            return ApiError::Unreachable {
                source: Some(Arc::new(err)),
                detail: hinted(
                    format!(
                        "the proxy {} (from {}) {what} {base}: {text}",
                        p.shown, p.source
                    ),
                    "; ",
                    &hints.proxy,
                    "",
                ),
            };
        }
    }
    let refused = matches!(&err, E::Io(io) if matches!(io.kind(), K::ConnectionRefused | K::AddrNotAvailable | K::HostUnreachable | K::NetworkUnreachable));
    let connect = refused
        || matches!(
            err,
            E::ConnectionFailed
                | E::HostNotFound
                | E::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve)
        );
    // Nothing was sent on a connection whose handshake was cut or went unanswered.
    if let E::Io(io) = &err
        && let Some(cut) = io.get_ref().and_then(|i| i.downcast_ref::<HandshakeCut>())
    {
        let detail = format!("connection to {base} failed: {cut}");
        return ApiError::Transport {
            source: Some(Arc::new(err)),
            detail,
            sent: false,
        };
    }
    let tls = matches!(err, E::Rustls(_) | E::Tls(_))
        || matches!(&err, E::Io(io) if io.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()))
        || text.contains("certificate");
    let detail = if tls {
        hinted(
            format!("TLS connection to {base} failed: {text}"),
            ". ",
            &hints.tls,
            "",
        )
    } else if connect {
        hinted(
            format!("unable to connect to {base}: {text}"),
            " (",
            &hints.connect,
            ")",
        )
    } else if let E::Timeout(t) = &err {
        let name = if hints.timeout.is_empty() {
            "the request timeout"
        } else {
            &hints.timeout
        };
        format!("no answer from {base} within {name} ({t})")
    } else {
        format!("request to {base} failed: {text}")
    };
    // Nothing was sent when the connection or the TLS handshake failed.
    ApiError::Transport {
        source: Some(Arc::new(err)),
        detail,
        sent: !(connect || tls),
    }
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
        let client = Client {
            agent,
            base: format!("https://{host}:{}/api2/json", conn.port),
            credentials: conn.credentials.clone(),
            ticket: RefCell::new(None),
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
        let ticket = self.ticket.borrow().as_ref().map(|t| Ticket {
            cookie: t.cookie.clone(),
            csrf: t.csrf.clone(),
        });
        Client {
            agent: self.agent.clone(),
            base: self.base.clone(),
            credentials: self.credentials.clone(),
            ticket: RefCell::new(ticket),
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

    /// The quickest successful answer of this run (see [`crate::wait::WaitState::note_baseline`]).
    pub fn quickest_answer(&self) -> Option<Duration> {
        self.quickest.get()
    }

    /// True in check mode.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    fn login(&self) -> Result<(), ApiError> {
        let Credentials::Password { user, password } = &self.credentials else {
            return Ok(());
        };
        let params = vec![
            ("username".to_string(), user.clone()),
            ("password".to_string(), password.clone()),
        ];
        let data = self
            .send(Method::Post, "/access/ticket", &params, false)
            .map_err(|e| match e {
                ApiError::Http { status: 401, .. } => ApiError::Http {
                    status: 401,
                    message: hinted(
                        format!("authentication failure: PVE refused the login of '{user}'"),
                        " (",
                        &self.hints.login,
                        ")",
                    ),
                    errors: Map::new(),
                },
                other => other,
            })?;
        let cookie = data["data"]["ticket"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let csrf = data["data"]["CSRFPreventionToken"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if cookie.is_empty() {
            return Err(ApiError::NotPve {
                source: None,
                detail: format!(
                    "{} did not answer like a PVE API: no ticket in the login answer",
                    self.base
                ),
            });
        }
        (self.secret_sink)(&cookie);
        (self.secret_sink)(&csrf);
        *self.ticket.borrow_mut() = Some(Ticket { cookie, csrf });
        Ok(())
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

    /// Sends with authentication; logs in again once if the ticket expired or was revoked.
    fn authed(&self, method: Method, path: &str, params: &Params) -> Result<Value, ApiError> {
        match self.send(method, path, params, true) {
            Err(e)
                if e.is_auth()
                    && matches!(self.credentials, Credentials::Password { .. })
                    && self.ticket.borrow().is_some() =>
            {
                self.login()?;
                self.send(method, path, params, true)
            }
            Err(e) if e.is_auth() => Err(ApiError::Http {
                status: 401,
                message: match &self.credentials {
                    Credentials::Token { id, .. } => hinted(
                        format!("authentication failure: PVE refused the API token '{id}'"),
                        " (",
                        &self.hints.token,
                        ")",
                    ),
                    Credentials::Password { user, .. } => {
                        format!("authentication failure for '{user}'")
                    }
                },
                errors: Map::new(),
            }),
            other => other,
        }
    }

    fn send(
        &self,
        method: Method,
        path: &str,
        params: &Params,
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
        // Each request is bounded by api_timeout and by what is left of the run.
        let left = self.budget.left();
        if left.is_zero() {
            return Err(ApiError::DeadlineReached {
                what: format!("{} {path} could be sent", method.as_str()),
            });
        }
        let limit = self.timeout.min(left);
        self.requests.set(self.requests.get() + 1);
        let asked = Instant::now();
        let mut url = format!("{}{path}", self.base);
        let body = form(params);
        if matches!(method, Method::Get | Method::Delete) && !params.is_empty() {
            url.push('?');
            url.push_str(&body);
        }
        let mut headers: Vec<(&str, String)> = Vec::new();
        if auth {
            match &self.credentials {
                Credentials::Token { id, secret } => {
                    headers.push(("Authorization", format!("PVEAPIToken={id}={secret}")))
                }
                Credentials::Password { .. } => {
                    if let Some(t) = self.ticket.borrow().as_ref() {
                        headers
                            .push(("Cookie", format!("PVEAuthCookie={}", url_encode(&t.cookie))));
                        if method != Method::Get {
                            headers.push(("CSRFPreventionToken", t.csrf.clone()));
                        }
                    }
                }
            }
        }
        let result = match method {
            Method::Get | Method::Delete => {
                let mut req = if method == Method::Get {
                    self.agent.get(&url)
                } else {
                    self.agent.delete(&url)
                };
                for (k, v) in &headers {
                    req = req.header(*k, v);
                }
                req.config().timeout_global(Some(limit)).build().call()
            }
            Method::Post | Method::Put => {
                let mut req = if method == Method::Post {
                    self.agent.post(&url)
                } else {
                    self.agent.put(&url)
                };
                for (k, v) in &headers {
                    req = req.header(*k, v);
                }
                req.content_type("application/x-www-form-urlencoded")
                    .config()
                    .timeout_global(Some(limit))
                    .build()
                    .send(body.as_bytes())
            }
        };
        let mut resp = result.map_err(|e| {
            match transport_error(e, &self.base, self.proxy.as_ref(), &self.hints) {
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
        let status = resp.status().as_u16();
        if (300..400).contains(&status) {
            let to = resp
                .headers()
                .get("location")
                .and_then(|l| l.to_str().ok())
                .map(crate::encode::quote)
                .unwrap_or_else(|| "elsewhere".into());
            return Err(ApiError::NotPve {
                source: None,
                detail: hinted(
                    format!(
                        "{} answered {status} (a redirect to {to}), which PVE's API never does; it was not followed",
                        self.base
                    ),
                    ": ",
                    &self.hints.not_pve,
                    "",
                ),
            });
        }
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_string()
            .map_err(|e| match e {
                e @ ureq::Error::BodyExceedsLimit(_) => ApiError::NotPve {
                    source: Some(Arc::new(e)),
                    detail: format!(
                        "{} sent an answer larger than {} MiB to {path}; a PVE API answer is far smaller",
                        self.base,
                        MAX_BODY >> 20
                    ),
                },
                other => transport_error(other, &self.base, self.proxy.as_ref(), &self.hints),
            })?;
        let reason = self
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_reason
            .take();
        if status == 200 {
            let took = asked.elapsed();
            if self.quickest.get().is_none_or(|q| took < q) {
                self.quickest.set(Some(took));
            }
            return serde_json::from_str(&text).map_err(|e| ApiError::NotPve {
                source: Some(Arc::new(e)),
                detail: hinted(
                    format!(
                        "{} did not answer like a PVE API (a {} byte non-JSON body)",
                        self.base,
                        text.len()
                    ),
                    "; ",
                    &self.hints.not_pve,
                    "",
                ),
            });
        }
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let message = body["message"]
            .as_str()
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty())
            .or(reason)
            .unwrap_or_else(|| {
                resp.status()
                    .canonical_reason()
                    .unwrap_or("error")
                    .to_string()
            });
        let errors = body["errors"].as_object().cloned().unwrap_or_default();
        Err(ApiError::Http {
            status,
            message,
            errors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rustls's "closed without close_notify" error, as ureq hands it over, reaches the user
    /// as what happened, without the link to rustls's manual.
    #[test]
    fn a_cut_tls_answer_is_reported_without_rustls_manual_link() {
        let cut = std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "peer closed connection without sending TLS close_notify: \
             https://docs.rs/rustls/latest/rustls/manual/_03_howto/index.html#unexpected-eof",
        );
        let error = transport_error(
            ureq::Error::Io(cut),
            "https://pve1:8006",
            None,
            &Hints::default(),
        );
        let shown = error.to_string();
        assert!(
            shown.contains("without sending TLS close_notify"),
            "{shown}"
        );
        assert!(!shown.contains("https://docs.rs"), "{shown}");
    }
}
