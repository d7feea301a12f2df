//! A small HTTP/1.1 server (plain or TLS) with keep-alive, shaped like pveproxy: a thread per
//! connection, and a bounded number of requests handled at once (`--workers`). Request heads
//! are parsed by `httparse`.

use std::io::{Read, Write};
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

/// A connection's bytes read but not yet taken: a request's head is parsed from here by
/// `httparse`, and what follows it (a body, or the next request) stays for the next read.
struct Reader {
    conn: Conn,
    buf: Vec<u8>,
}

/// The most header bytes pve-sim reads before refusing a request (431).
const MAX_HEAD: usize = 64 * 1024;
/// The most header lines one request may have.
const MAX_HEADERS: usize = 256;
/// pveproxy's limit on a request body is 512 KiB.
const MAX_BODY: usize = 512 * 1024;

impl Reader {
    /// Reads more bytes into the buffer; false at the end of the stream.
    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        match self.conn.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// The next request: `Ok(None)` when the peer closed (or went quiet) between requests,
    /// `Err(status)` for a request pve-sim refuses to read.
    fn read_request(&mut self) -> Result<Option<Request>, u16> {
        let (method, target, headers, head_len) = loop {
            let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut parsed = httparse::Request::new(&mut slots);
            match parsed.parse(&self.buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let headers: Vec<(String, String)> = parsed
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_ascii_lowercase(),
                                String::from_utf8_lossy(h.value).trim().to_string(),
                            )
                        })
                        .collect();
                    break (
                        parsed.method.unwrap_or_default().to_string(),
                        parsed.path.unwrap_or_default().to_string(),
                        headers,
                        len,
                    );
                }
                Ok(httparse::Status::Partial) if self.buf.len() > MAX_HEAD => return Err(431),
                Ok(httparse::Status::Partial) => {
                    if !self.fill() {
                        return Ok(None);
                    }
                }
                Err(httparse::Error::TooManyHeaders) => return Err(431),
                Err(_) => return Err(400),
            }
        };
        self.buf.drain(..head_len);
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p.to_string(), q.to_string()),
            None => (target, String::new()),
        };
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map(|(_, v)| v.parse().map_err(|_| 400u16))
            .transpose()?
            .unwrap_or(0);
        if len > MAX_BODY {
            return Err(413);
        }
        while self.buf.len() < len {
            if !self.fill() {
                return Err(400);
            }
        }
        let body: Vec<u8> = self.buf.drain(..len).collect();
        Ok(Some(Request {
            method,
            path,
            query,
            headers,
            body,
        }))
    }
}

fn connection(conn: Conn, handler: &dyn Handler, workers: &Workers) {
    let mut reader = Reader {
        conn,
        buf: Vec::new(),
    };
    loop {
        let req = match reader.read_request() {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(status) => {
                let resp = Response::new(status, "bad request", Vec::new());
                let _ = write_response(&mut reader.conn, &resp, false);
                return;
            }
        };
        let close = req
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        workers.acquire();
        let resp = handler.handle(&req);
        workers.release();
        let conn = &mut reader.conn;
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

/// Decodes a form body or a query string as pve-http-server AnyEvent.pm `decode_urlencoded`
/// does: pairs split at `&` and `;`, each split at `=` keeping the first two fields (Perl's
/// `split` drops trailing empty ones), `+` and `%XX` decoded. A value that is empty or missing
/// (`description=`, `description`) is `None`: PVE's undef, which passes the schema check as an
/// absent parameter does and reaches the handler as a key without a value.
pub fn decode_urlencoded(text: &str) -> Vec<(String, Option<String>)> {
    text.split(['&', ';'])
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let mut fields: Vec<&str> = pair.split('=').collect();
            while fields.len() > 1 && fields.last().is_some_and(|f| f.is_empty()) {
                fields.pop();
            }
            let key = percent_decode(fields[0], true);
            let value = fields.get(1).map(|v| percent_decode(v, true));
            (key, value)
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
