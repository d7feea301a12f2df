//! A small HTTP/1.1 server (plain or TLS) with keep-alive, shaped like pveproxy: a thread per
//! connection, and a bounded number of requests handled at once (`--workers`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rustls::{ServerConfig, ServerConnection, StreamOwned};

/// A parsed request. Header names are lower-case.
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The first header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A response; `drop_after` cuts the connection after that many body bytes.
pub struct Response {
    pub status: u16,
    pub reason: String,
    pub body: Vec<u8>,
    pub drop_after: Option<usize>,
    /// Send the bytes this far apart (a dripping server).
    pub drip: Option<std::time::Duration>,
}

impl Response {
    pub fn new(status: u16, reason: impl Into<String>, body: Vec<u8>) -> Self {
        // PVE strips newlines from the reason phrase (AnyEvent.pm).
        let reason = reason.into().lines().next().unwrap_or("").to_string();
        Response {
            status,
            reason,
            body,
            drop_after: None,
            drip: None,
        }
    }
}

/// Anything that answers requests.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, req: &Request) -> Response;
}

/// A counting semaphore bounding how many requests are handled at once.
pub struct Workers {
    free: Mutex<usize>,
    cv: Condvar,
}

impl Workers {
    pub fn new(n: usize) -> Arc<Self> {
        Arc::new(Workers {
            free: Mutex::new(n.max(1)),
            cv: Condvar::new(),
        })
    }

    fn acquire(&self) {
        let mut f = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *f == 0 {
            f = self.cv.wait(f).unwrap_or_else(|e| e.into_inner());
        }
        *f -= 1;
    }

    fn release(&self) {
        *self.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.cv.notify_one();
    }
}

enum Conn {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => &s.sock,
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// Accepts connections forever, one thread each.
pub fn serve(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    handler: Arc<dyn Handler>,
    workers: Arc<Workers>,
) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let tls = tls.clone();
        let handler = handler.clone();
        let workers = workers.clone();
        std::thread::spawn(move || {
            let _ = stream.set_nodelay(true);
            let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
            let conn = match tls {
                Some(cfg) => match ServerConnection::new(cfg) {
                    Ok(c) => Conn::Tls(Box::new(StreamOwned::new(c, stream))),
                    Err(_) => return,
                },
                None => Conn::Plain(stream),
            };
            connection(conn, &*handler, &workers);
        });
    }
}

fn connection(conn: Conn, handler: &dyn Handler, workers: &Workers) {
    let mut reader = BufReader::new(conn);
    loop {
        let req = match read_request(&mut reader) {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(status) => {
                let resp = Response::new(status, "bad request", Vec::new());
                let _ = write_response(reader.get_mut(), &resp, false);
                return;
            }
        };
        let close = req
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        workers.acquire();
        let resp = handler.handle(&req);
        workers.release();
        let conn = reader.get_mut();
        // pve-http-server AnyEvent.pm, response: `keep_alive = 0 if $code >= 400`.
        if write_response(conn, &resp, req.method == "HEAD").is_err()
            || resp.drop_after.is_some()
            || close
            || resp.status >= 400
        {
            let _ = conn.flush();
            let _ = conn.tcp().shutdown(Shutdown::Both);
            return;
        }
    }
}

fn read_request(r: &mut BufReader<Conn>) -> Result<Option<Request>, u16> {
    let mut line = String::new();
    match r.read_line(&mut line) {
        Ok(0) | Err(_) => return Ok(None),
        Ok(_) => {}
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(400);
    };
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target.to_string(), String::new()),
    };
    let method = method.to_string();
    let mut headers = Vec::new();
    let mut total = 0usize;
    loop {
        let mut h = String::new();
        match r.read_line(&mut h) {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => total += n,
        }
        if total > 64 * 1024 {
            return Err(431);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map(|(_, v)| v.parse().map_err(|_| 400u16))
        .transpose()?
        .unwrap_or(0);
    // pveproxy's limit on a request body is 512 KiB.
    if len > 512 * 1024 {
        return Err(413);
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).map_err(|_| 400u16)?;
    Ok(Some(Request {
        method,
        path,
        query,
        headers,
        body,
    }))
}

fn write_response(w: &mut Conn, resp: &Response, head: bool) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nServer: pve-api-daemon/3.0\r\nCache-Control: max-age=0\r\nPragma: no-cache\r\nConnection: {}\r\nContent-Type: application/json;charset=UTF-8\r\nContent-Length: {}\r\n\r\n",
        resp.status,
        resp.reason,
        if resp.status >= 400 { "close" } else { "Keep-Alive" },
        resp.body.len()
    )
    .into_bytes();
    if !head {
        match resp.drop_after {
            Some(n) => out.extend_from_slice(&resp.body[..n.min(resp.body.len())]),
            None => out.extend_from_slice(&resp.body),
        }
    }
    if let Some(gap) = resp.drip {
        for b in out {
            w.write_all(&[b])?;
            w.flush()?;
            std::thread::sleep(gap);
        }
        return Ok(());
    }
    w.write_all(&out)?;
    w.flush()
}

/// Decodes `application/x-www-form-urlencoded` text (also used for query strings).
pub fn parse_form(s: &str) -> Vec<(String, String)> {
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect()
}

/// Percent-decodes `s`; with `plus`, `+` stands for a space (form encoding).
pub fn percent_decode(s: &str, plus: bool) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' if plus => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16)
                {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
