//! A forwarder of our own that plays pveproxy in front of a `pve-sim` started with
//! `--plain-http`: the module speaks TLS to it (its own certificate, pinned by fingerprint),
//! it speaks plain HTTP to the simulator, and in between it does what a real pveproxy and a
//! real network do to requests, beyond what pve-sim's own fault switches can:
//!
//! * refuse connections: [`Forwarder::down_for`] closes the listening socket and every open
//!   connection (a pveproxy restart), and listens again on the same port later;
//! * reset connections right after they are accepted ([`Forwarder::reset_connections`]);
//! * hang TLS handshakes: accept and never answer ([`Forwarder::hang_handshakes`]);
//! * per request ([`Rule`]): lose the answer after PVE acted (forward, drop the response),
//!   close without forwarding, reset, answer a status as pveproxy does when it cannot reach a
//!   node (`595 No route to host`, empty body: pve-http-server AnyEvent.pm, proxy_request,
//!   passes AnyEvent::HTTP's pseudo-status and reason on), run a hook before forwarding (another
//!   user's request slipped in between), and go down for a while after any of these;
//! * shift a node's clock ([`Forwarder::clock_offset`]): the start times in its UPIDs, the
//!   `starttime`/`endtime` of its task list and status, and `ctime` in its VM configs read as
//!   the node's own clock would write them, and UPIDs in request paths are shifted back;
//! * rewrite answers ([`Forwarder::rewrite`]), for values PVE may write that the simulator
//!   does not.
//!
//! Everything received is logged ([`Forwarder::seen`]) with what was done to it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use serde_json::{Value, json};

use crate::support::{PASSWORD, Sim};

/// What a [`Rule`] does to a matching request.
pub enum Action {
    /// Forward it as usual (for a rule that only sets what happens after: [`Rule::then_hang`]).
    Forward,
    /// Forward it, read PVE's answer, then close the connection without answering: the
    /// request was carried out and its answer is lost.
    LoseAnswer,
    /// Close the connection after receiving the request, without forwarding it.
    CloseUnsent,
    /// Reset the connection (RST) after receiving the request, without forwarding it.
    Reset,
    /// Answer this status with this reason and an empty body, without forwarding, as
    /// pveproxy does when it cannot reach the node (`595`, `No route to host`).
    Status(u16, String),
    /// Call this, then forward the request as usual.
    Before(Box<dyn FnMut() + Send>),
}

/// What the forwarder does to later connections once a [`Rule`] has applied.
#[derive(Clone, Copy)]
pub enum After {
    /// Refuse connections for this long (the listener is closed, as is every connection).
    Down(Duration),
    /// Close this connection, and hang the TLS handshakes of new ones for this long.
    Hang(Duration),
    /// Close this connection, and reset the next this many new ones as they are accepted.
    Reset(u32),
}

/// A request fault: requests whose method matches (any, when `None`) and whose path (below
/// `/api2/json`, with its query) contains `path`, up to `times` of them (unlimited when
/// `None`) and only until `until`.
pub struct Rule {
    method: Option<String>,
    path: String,
    times: Option<u32>,
    until: Option<Instant>,
    action: Action,
    then: Option<After>,
}

impl Rule {
    pub fn new(method: Option<&str>, path: &str, action: Action) -> Rule {
        Rule {
            method: method.map(str::to_string),
            path: path.to_string(),
            times: None,
            until: None,
            action,
            then: None,
        }
    }

    /// Applies to the first `n` matching requests only.
    pub fn times(mut self, n: u32) -> Rule {
        self.times = Some(n);
        self
    }

    /// Applies for this long from now.
    pub fn lasting(mut self, d: Duration) -> Rule {
        self.until = Some(Instant::now() + d);
        self
    }

    /// After applying, the forwarder is down (refuses connections) for `d`.
    pub fn then_down(mut self, d: Duration) -> Rule {
        self.then = Some(After::Down(d));
        self
    }

    /// After applying, the connection is closed and new handshakes hang for `d`.
    pub fn then_hang(mut self, d: Duration) -> Rule {
        self.then = Some(After::Hang(d));
        self
    }

    /// After applying, the connection is closed and the next `n` new ones are reset.
    pub fn then_reset(mut self, n: u32) -> Rule {
        self.then = Some(After::Reset(n));
        self
    }

    fn matches(&self, method: &str, target: &str) -> bool {
        self.method.as_deref().is_none_or(|m| m == method)
            && target.contains(&self.path)
            && self.times != Some(0)
            && self.until.is_none_or(|u| Instant::now() < u)
    }
}

/// One request the forwarder received, and what it did with it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    /// The path below `/api2/json`, with its query, as the client sent it.
    pub path: String,
    /// `forwarded`, `answer lost`, `closed unsent`, `reset`, or the status answered (`595`).
    pub outcome: String,
    pub at: Instant,
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    down_until: Option<Instant>,
    hang_until: Option<Instant>,
    resets: u32,
    /// (node, seconds its clock is ahead of this machine's; negative: behind).
    clocks: Vec<(String, i64)>,
    /// (path substring, from, to) applied to answers' bodies.
    rewrites: Vec<(String, String, String)>,
    seen: Vec<Seen>,
    open: Vec<(u64, TcpStream)>,
}

struct Shared {
    upstream: SocketAddr,
    tls: Arc<ServerConfig>,
    state: Mutex<State>,
    stop: AtomicBool,
    next_id: AtomicU64,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The forwarder; it stops when dropped.
pub struct Forwarder {
    pub port: u16,
    /// SHA-256 of its certificate, colon-separated hex.
    pub fingerprint: String,
    shared: Arc<Shared>,
}

impl Forwarder {
    /// Starts a forwarder in front of `sim`, which must run with `--plain-http`.
    pub fn start(sim: &Sim) -> Forwarder {
        assert!(
            sim.info["ca"].is_null(),
            "the forwarder speaks plain HTTP to pve-sim: start it with --plain-http"
        );
        let upstream: SocketAddr = format!("127.0.0.1:{}", sim.port()).parse().unwrap();
        let certified =
            rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
                .unwrap();
        let der = certified.cert.der().clone();
        let fingerprint = ring::digest::digest(&ring::digest::SHA256, &der)
            .as_ref()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":");
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            certified.signing_key.serialize_der(),
        ));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![CertificateDer::from(der.to_vec())], key)
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            upstream,
            tls: Arc::new(tls),
            state: Mutex::new(State::default()),
            stop: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
        });
        let s = shared.clone();
        std::thread::spawn(move || accept_loop(s, listener, port));
        Forwarder {
            port,
            fingerprint,
            shared,
        }
    }

    /// Connection options for the module through the forwarder (password login, pinned).
    pub fn conn(&self) -> Value {
        json!({"api_host": "127.0.0.1", "api_port": self.port, "api_password": PASSWORD,
               "api_fingerprint": self.fingerprint})
    }

    /// Adds a request fault.
    pub fn rule(&self, r: Rule) {
        self.shared.state().rules.push(r);
    }

    /// Removes every fault, the node clocks and the rewrites; the forwarder is up again.
    pub fn clear(&self) {
        let mut st = self.shared.state();
        st.rules.clear();
        st.down_until = None;
        st.hang_until = None;
        st.resets = 0;
        st.clocks.clear();
        st.rewrites.clear();
    }

    /// Refuses connections for `d` from now: the listening socket is closed and every open
    /// connection with it, as when pveproxy restarts.
    pub fn down_for(&self, d: Duration) {
        self.shared.state().down_until = Some(Instant::now() + d);
    }

    /// New connections in the next `d` are accepted and never answered: their TLS handshake
    /// hangs until the client gives up (then they are closed).
    pub fn hang_handshakes(&self, d: Duration) {
        self.shared.state().hang_until = Some(Instant::now() + d);
    }

    /// The next `n` connections are reset as soon as they are accepted.
    pub fn reset_connections(&self, n: u32) {
        self.shared.state().resets = n;
    }

    /// `node`'s clock reads `seconds` ahead of this machine's (behind, when negative).
    pub fn clock_offset(&self, node: &str, seconds: i64) {
        self.shared.state().clocks.push((node.to_string(), seconds));
    }

    /// Replaces `from` with `to` in the bodies of answers to paths containing `path`.
    pub fn rewrite(&self, path: &str, from: &str, to: &str) {
        self.shared
            .state()
            .rewrites
            .push((path.to_string(), from.to_string(), to.to_string()));
    }

    /// Every request received so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.state().seen.clone()
    }

    /// The requests received with this method whose path (query left out) is `path`.
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.method == method && s.path.split('?').next() == Some(path))
            .count()
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for (_, s) in self.shared.state().open.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(shared: Arc<Shared>, listener: TcpListener, port: u16) {
    listener.set_nonblocking(true).unwrap();
    let mut listener = Some(listener);
    while !shared.stop.load(Ordering::SeqCst) {
        let down = shared
            .state()
            .down_until
            .is_some_and(|u| Instant::now() < u);
        if down {
            if listener.take().is_some() {
                for (_, s) in shared.state().open.drain(..) {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let Some(l) = listener.as_ref() else {
            // Back up on the same port (std sets SO_REUSEADDR).
            if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
                l.set_nonblocking(true).unwrap();
                listener = Some(l);
            } else {
                std::thread::sleep(Duration::from_millis(5));
            }
            continue;
        };
        match l.accept() {
            Ok((stream, _)) => {
                let s = shared.clone();
                std::thread::spawn(move || connection(s, stream));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Closes the socket with an RST instead of a FIN.
fn reset(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket this process owns, with a correctly sized value.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(stream),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

fn connection(shared: Arc<Shared>, stream: TcpStream) {
    stream.set_nonblocking(false).unwrap();
    let _ = stream.set_nodelay(true);
    let (hang_until, do_reset) = {
        let mut st = shared.state();
        let hang = st.hang_until.filter(|u| Instant::now() < *u);
        let r = st.resets > 0;
        if r {
            st.resets -= 1;
        }
        (hang, r)
    };
    if do_reset {
        reset(&stream);
        return;
    }
    if let Some(until) = hang_until {
        // Read nothing, answer nothing; the client's timeout ends it, or the period does.
        let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
        let mut peek = [0u8; 1];
        while Instant::now() < until && !shared.stop.load(Ordering::SeqCst) {
            if let Ok(0) = stream.peek(&mut peek) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        return;
    }
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    if let Ok(clone) = stream.try_clone() {
        shared.state().open.push((id, clone));
    }
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    if let Ok(conn) = ServerConnection::new(shared.tls.clone()) {
        serve(&shared, BufReader::new(StreamOwned::new(conn, stream)));
    }
    shared.state().open.retain(|(i, _)| *i != id);
}

/// A request as received: method, target (path and query), headers, body.
struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

type Tls = StreamOwned<ServerConnection, TcpStream>;

fn read_request(r: &mut BufReader<Tls>) -> Option<Request> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        target,
        headers,
        body,
    })
}

fn serve(shared: &Shared, mut reader: BufReader<Tls>) {
    while let Some(req) = read_request(&mut reader) {
        let api = req
            .target
            .strip_prefix("/api2/json")
            .unwrap_or(&req.target)
            .to_string();
        let close = req
            .headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close"));
        // The first rule that matches, its count taken; a hook is taken out to run unlocked.
        let (verdict, then) = {
            let mut st = shared.state();
            match st.rules.iter_mut().find(|r| r.matches(&req.method, &api)) {
                Some(r) => {
                    if let Some(n) = r.times.as_mut() {
                        *n -= 1;
                    }
                    let v = match &mut r.action {
                        Action::Forward => Verdict::Forward,
                        Action::LoseAnswer => Verdict::LoseAnswer,
                        Action::CloseUnsent => Verdict::CloseUnsent,
                        Action::Reset => Verdict::Reset,
                        Action::Status(s, m) => Verdict::Status(*s, m.clone()),
                        Action::Before(hook) => {
                            let hook = std::mem::replace(hook, Box::new(|| {}));
                            Verdict::Before(hook)
                        }
                    };
                    (v, r.then)
                }
                None => (Verdict::Forward, None),
            }
        };
        let outcome = match &verdict {
            Verdict::Forward | Verdict::Before(_) => "forwarded".to_string(),
            Verdict::LoseAnswer => "answer lost".to_string(),
            Verdict::CloseUnsent => "closed unsent".to_string(),
            Verdict::Reset => "reset".to_string(),
            Verdict::Status(s, _) => s.to_string(),
        };
        shared.state().seen.push(Seen {
            method: req.method.clone(),
            path: api.clone(),
            outcome,
            at: Instant::now(),
        });
        let went_down = |shared: &Shared| {
            let mut st = shared.state();
            match then {
                Some(After::Down(d)) => st.down_until = Some(Instant::now() + d),
                Some(After::Hang(d)) => st.hang_until = Some(Instant::now() + d),
                Some(After::Reset(n)) => st.resets = n,
                None => {}
            }
        };
        let answer = match verdict {
            Verdict::Reset => {
                reset(&reader.get_ref().sock);
                went_down(shared);
                return;
            }
            Verdict::CloseUnsent => {
                let _ = reader.get_ref().sock.shutdown(Shutdown::Both);
                went_down(shared);
                return;
            }
            Verdict::LoseAnswer => {
                let _ = forward(shared, &req, &api);
                let _ = reader.get_ref().sock.shutdown(Shutdown::Both);
                went_down(shared);
                return;
            }
            Verdict::Status(status, reason) => Some((status, reason, Vec::new(), Vec::new())),
            Verdict::Before(mut hook) => {
                hook();
                forward(shared, &req, &api)
            }
            Verdict::Forward => forward(shared, &req, &api),
        };
        let Some((status, reason, headers, body)) = answer else {
            // The simulator did not answer: as pveproxy, say so.
            let _ = write_answer(reader.get_mut(), 502, "Bad Gateway", &[], b"", true);
            return;
        };
        // pve-http-server AnyEvent.pm, response: no keep-alive after an error status.
        let closing = close || status >= 400 || then.is_some();
        let sent = write_answer(reader.get_mut(), status, &reason, &headers, &body, closing);
        went_down(shared);
        if sent.is_err() || closing {
            let _ = reader.get_ref().sock.shutdown(Shutdown::Both);
            return;
        }
    }
}

enum Verdict {
    Forward,
    LoseAnswer,
    CloseUnsent,
    Reset,
    Status(u16, String),
    Before(Box<dyn FnMut() + Send>),
}

fn write_answer(
    w: &mut Tls,
    status: u16,
    reason: &str,
    headers: &[(String, String)],
    body: &[u8],
    close: bool,
) -> std::io::Result<()> {
    let mut out = format!("HTTP/1.1 {status} {reason}\r\n");
    for (k, v) in headers {
        if !["content-length", "connection", "transfer-encoding"]
            .contains(&k.to_ascii_lowercase().as_str())
        {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    out.push_str(&format!(
        "Connection: {}\r\nContent-Length: {}\r\n\r\n",
        if close { "close" } else { "Keep-Alive" },
        body.len()
    ));
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    w.write_all(&bytes)?;
    w.flush()
}

/// An answer: status, reason, headers, body.
type Answer = (u16, String, Vec<(String, String)>, Vec<u8>);

/// Sends the request to the simulator on a connection of its own and reads the answer, the
/// node clocks and rewrites applied both ways.
fn forward(shared: &Shared, req: &Request, api: &str) -> Option<Answer> {
    let (clocks, rewrites) = {
        let st = shared.state();
        (st.clocks.clone(), st.rewrites.clone())
    };
    let target = format!("/api2/json{}", shift_upids_in_path(api, &clocks, -1));
    let mut up = TcpStream::connect(shared.upstream).ok()?;
    let _ = up.set_read_timeout(Some(Duration::from_secs(120)));
    let mut out = format!("{} {target} HTTP/1.1\r\n", req.method);
    for (k, v) in &req.headers {
        if !["connection", "keep-alive", "content-length"]
            .contains(&k.to_ascii_lowercase().as_str())
        {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    out.push_str(&format!(
        "Connection: close\r\nContent-Length: {}\r\n\r\n",
        req.body.len()
    ));
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&req.body);
    up.write_all(&bytes).ok()?;
    let mut raw = Vec::new();
    up.read_to_end(&mut raw).ok()?;
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let mut body = raw[end + 4..].to_vec();
    let mut lines = head.lines();
    let status_line = lines.next()?;
    let mut parts = status_line.splitn(3, ' ');
    parts.next();
    let status: u16 = parts.next()?.parse().ok()?;
    let reason = parts.next().unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    if let Some(len) = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        body.truncate(len);
    }
    let mut text = String::from_utf8_lossy(&body).to_string();
    for (node, offset) in &clocks {
        text = shift_node_clock(&text, api, node, *offset);
    }
    for (path, from, to) in &rewrites {
        if api.contains(path.as_str()) {
            text = text.replace(from.as_str(), to);
        }
    }
    Some((status, reason, headers, text.into_bytes()))
}

/// `UPID:node:PID:PSTART:STARTTIME:…` with STARTTIME moved by the node's clock offset
/// (`sign` 1: to the node's clock; -1: back to the simulator's), when the node has one.
pub fn shift_upid(upid: &str, clocks: &[(String, i64)], sign: i64) -> String {
    let parts: Vec<&str> = upid.split(':').collect();
    if parts.len() < 5 || parts[0] != "UPID" {
        return upid.to_string();
    }
    let Some((_, offset)) = clocks.iter().find(|(n, _)| n == parts[1]) else {
        return upid.to_string();
    };
    let Ok(start) = i64::from_str_radix(parts[4], 16) else {
        return upid.to_string();
    };
    let mut out: Vec<String> = parts.iter().map(|p| p.to_string()).collect();
    out[4] = format!("{:08X}", start + sign * offset);
    out.join(":")
}

/// Shifts every UPID in a body (they end at the closing quote of their JSON string).
fn shift_upids_in_text(text: &str, clocks: &[(String, i64)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("UPID:") {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        let end = tail.find('"').unwrap_or(tail.len());
        out.push_str(&shift_upid(&tail[..end], clocks, 1));
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Shifts the UPID in a request path (`…/tasks/UPID%3A…`) back to the simulator's clock.
pub fn shift_upids_in_path(api: &str, clocks: &[(String, i64)], sign: i64) -> String {
    if clocks.is_empty() {
        return api.to_string();
    }
    let (path, query) = match api.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (api, None),
    };
    let segments: Vec<String> = path
        .split('/')
        .map(|seg| {
            let decoded = percent_decode(seg);
            if decoded.starts_with("UPID:") {
                percent_encode(&shift_upid(&decoded, clocks, sign))
            } else {
                seg.to_string()
            }
        })
        .collect();
    let mut out = segments.join("/");
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// The node's clock in an answer about it: UPIDs, task times, `ctime` in a VM's `meta`.
fn shift_node_clock(text: &str, api: &str, node: &str, offset: i64) -> String {
    let clocks = vec![(node.to_string(), offset)];
    let text = shift_upids_in_text(text, &clocks);
    if !api.starts_with(&format!("/nodes/{node}/")) {
        return text;
    }
    let Ok(mut v) = serde_json::from_str::<Value>(&text) else {
        return text;
    };
    fn walk(v: &mut Value, offset: i64) {
        match v {
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    match (k.as_str(), x.as_i64()) {
                        ("starttime" | "endtime" | "time" | "localtime", Some(t)) => {
                            *x = json!(t + offset)
                        }
                        ("meta", _) => {
                            if let Some(s) = x.as_str() {
                                let shifted: Vec<String> = s
                                    .split(',')
                                    .map(|kv| match kv.strip_prefix("ctime=") {
                                        Some(t) => match t.parse::<i64>() {
                                            Ok(t) => format!("ctime={}", t + offset),
                                            Err(_) => kv.to_string(),
                                        },
                                        None => kv.to_string(),
                                    })
                                    .collect();
                                *x = json!(shifted.join(","));
                            }
                        }
                        _ => walk(x, offset),
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, offset)),
            _ => {}
        }
    }
    walk(&mut v, offset);
    v.to_string()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A request to the simulator (plain HTTP on `sim_port`) as another user, bypassing the
/// forwarder (a second client that acts between the module's requests): logs in as `user`,
/// sends `method path` with the form `params`, and returns PVE's `data` (or the error status
/// and message).
pub fn act_as(
    sim_port: u16,
    user: &str,
    password: &str,
    method: &str,
    path: &str,
    params: &[(&str, &str)],
) -> Result<Value, String> {
    let base = format!("http://127.0.0.1:{sim_port}/api2/json");
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut login = agent
        .post(&format!("{base}/access/ticket"))
        .send_form([("username", user), ("password", password)])
        .map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_str(&login.body_mut().read_to_string().unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let ticket = v["data"]["ticket"].as_str().ok_or("no ticket")?.to_string();
    let csrf = v["data"]["CSRFPreventionToken"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let url = format!("{base}{path}");
    let cookie = format!("PVEAuthCookie={}", percent_encode(&ticket));
    let mut resp = match method {
        "GET" => agent.get(&url).header("Cookie", &cookie).call(),
        "DELETE" => agent
            .delete(&url)
            .header("Cookie", &cookie)
            .header("CSRFPreventionToken", &csrf)
            .call(),
        "PUT" => agent
            .put(&url)
            .header("Cookie", &cookie)
            .header("CSRFPreventionToken", &csrf)
            .send_form(params.iter().copied()),
        _ => agent
            .post(&url)
            .header("Cookie", &cookie)
            .header("CSRFPreventionToken", &csrf)
            .send_form(params.iter().copied()),
    }
    .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if status == 200 {
        Ok(v["data"].clone())
    } else {
        Err(format!("{status} {}", v["message"].as_str().unwrap_or("")))
    }
}
