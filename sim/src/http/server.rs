//! A small HTTP/1.1 server (plain or TLS) with keep-alive, shaped like pveproxy: a thread per
//! connection, each connection owned by one pveproxy worker (`http/daemons.rs`), with
//! AnyEvent.pm's limits on what a connection carries. Request heads are parsed by `httparse`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::{ServerConfig, ServerConnection, StreamOwned};
use serde_json::Value;

use crate::http::daemons::{Accepted, ProxyWorker, Pveproxy};
use crate::http::handler::{ApiErr, Params, Undefined};
use crate::schema;

/// A parsed request. Header names are lower-case.
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// A streamed `multipart/form-data` upload (the body is then empty).
    pub upload: Option<Upload>,
}

/// An upload as pveproxy's `file_upload_multipart` leaves it: the form fields before the file
/// (`content`, `checksum-algorithm`, `checksum`), the file's name, and the file's bytes in a
/// temporary file (`/var/tmp/pveupload-…` on PVE).
pub struct Upload {
    pub fields: Vec<(String, String)>,
    pub file: PathBuf,
}

/// What to do with a request's body, decided from its head before any of it is read (as
/// pveproxy decides after authenticating the request).
pub enum BodyPlan {
    /// Read it whole.
    Buffer,
    /// Stream a `multipart/form-data` upload with this boundary into a new file in `dir`.
    Upload { dir: PathBuf, boundary: String },
    /// Answer at once and close the connection, the body unread.
    Refuse(Response),
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
    /// `Content-Type`; `None` for pveproxy's plain error answers, which set none.
    pub content_type: Option<&'static str>,
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
            content_type: Some("application/json;charset=UTF-8"),
            drop_after: None,
            drip: None,
        }
    }

    /// pve-http-server AnyEvent.pm `error`: the message as the reason phrase and as the
    /// body, with no content type.
    pub fn error(status: u16, msg: &str) -> Self {
        let mut resp = Response::new(status, msg, msg.as_bytes().to_vec());
        resp.content_type = None;
        resp
    }
}

/// pveproxy's limit on a request body that is not an upload (AnyEvent.pm `$limit_max_post`).
pub const MAX_BODY: usize = 512 * 1024;

/// Anything that answers requests.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, req: &Request) -> Response;

    /// Answers `req` on a connection of pveproxy's `worker`. By default the worker's event
    /// loop is held throughout: pveproxy's cost, then [`Handler::handle`].
    fn handle_in(&self, req: &Request, worker: &ProxyWorker, proxy: &Pveproxy) -> Response {
        let _event_loop = worker.busy();
        if !proxy.cost.is_zero() {
            std::thread::sleep(proxy.cost);
        }
        self.handle(req)
    }

    /// What to do with a body of `len` bytes, from the request's head alone. By default a body
    /// over [`MAX_BODY`] is refused as pveproxy refuses it: `501 for data too large`.
    fn plan_body(&self, _head: &Request, len: usize) -> BodyPlan {
        if len > MAX_BODY {
            BodyPlan::Refuse(Response::error(501, "for data too large"))
        } else {
            BodyPlan::Buffer
        }
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

/// Accepts connections forever, one thread each, each owned by one of `proxy`'s workers.
/// A connection idle for the limits' `idle_timeout` is closed (AnyEvent.pm
/// `accept_connections`: the handle's `timeout`).
pub fn serve(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    handler: Arc<dyn Handler>,
    proxy: Arc<Pveproxy>,
) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let tls = tls.clone();
        let handler = handler.clone();
        let proxy = proxy.clone();
        std::thread::spawn(move || {
            let accepted = proxy.accept();
            let _ = stream.set_nodelay(true);
            let _ = stream.set_read_timeout(Some(proxy.limits.idle_timeout));
            let conn = match tls {
                Some(cfg) => match ServerConnection::new(cfg) {
                    Ok(c) => Conn::Tls(Box::new(StreamOwned::new(c, stream))),
                    Err(_) => return,
                },
                None => Conn::Plain(stream),
            };
            connection(conn, &*handler, &proxy, &accepted);
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
/// The most bytes of multipart headers and form fields before an upload's file.
const MAX_UPLOAD_HEAD: usize = 64 * 1024;

impl Reader {
    /// Reads more bytes into the buffer; false at the end of the stream.
    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 64 * 1024];
        match self.conn.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// The next request's head (its body empty) and its `Content-Length`: `Ok(None)` when the
    /// peer closed (or went quiet) between requests, `Err(status)` for a head pve-sim refuses.
    fn read_head(&mut self) -> Result<Option<(Request, usize)>, u16> {
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
        let head = Request {
            method,
            path,
            query,
            headers,
            body: Vec::new(),
            upload: None,
        };
        Ok(Some((head, len)))
    }

    /// The body, `len` bytes; `None` if the peer closed before it was all sent.
    fn read_body(&mut self, len: usize) -> Option<Vec<u8>> {
        while self.buf.len() < len {
            if !self.fill() {
                return None;
            }
        }
        Some(self.buf.drain(..len).collect())
    }

    /// At most `want` more body bytes (of `remaining`) appended to `window`; false when none
    /// are left or the peer closed.
    fn more(&mut self, window: &mut Vec<u8>, remaining: &mut usize) -> bool {
        if *remaining == 0 || (self.buf.is_empty() && !self.fill()) {
            return false;
        }
        let take = self.buf.len().min(*remaining);
        window.extend(self.buf.drain(..take));
        *remaining -= take;
        true
    }

    /// Streams a `multipart/form-data` body of `len` bytes as pve-http-server AnyEvent.pm
    /// `file_upload_multipart` does: the form fields before the file, then the file's part
    /// (its field must be `filename`) written to `dir` up to the closing delimiter, never held
    /// whole in memory. A body that ends before the closing delimiter is "upload failed".
    fn stream_upload(&mut self, len: usize, boundary: &str, dir: &Path) -> Result<Upload, String> {
        let delim = format!("--{boundary}");
        let close = format!("\r\n--{boundary}--");
        let mut remaining = len;
        let mut window: Vec<u8> = Vec::new();
        let mut fields = Vec::new();
        let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
        // The part headers and small fields before the file.
        let file_name = loop {
            let headers_end = loop {
                if let Some(start) = find(&window, delim.as_bytes())
                    && let Some(end) = find(&window[start..], b"\r\n\r\n")
                {
                    break (start, start + end + 4);
                }
                if window.len() > MAX_UPLOAD_HEAD || !self.more(&mut window, &mut remaining) {
                    return Err("upload failed".into());
                }
            };
            let headers =
                String::from_utf8_lossy(&window[headers_end.0..headers_end.1]).to_string();
            let disposition = headers
                .lines()
                .find_map(|l| l.strip_prefix("Content-Disposition: "))
                .ok_or("upload failed")?
                .to_string();
            let attr = |name: &str| {
                disposition.split(';').find_map(|p| {
                    p.trim()
                        .strip_prefix(&format!("{name}=\""))
                        .and_then(|v| v.strip_suffix('"'))
                        .map(str::to_string)
                })
            };
            let name = attr("name").unwrap_or_default();
            window.drain(..headers_end.1);
            if let Some(file_name) = attr("filename") {
                if name != "filename" {
                    return Err(format!(
                        "wrong field name '{name}' for file upload, expected 'filename'"
                    ));
                }
                break file_name;
            }
            let value_end = loop {
                if let Some(end) = find(&window, format!("\r\n{delim}").as_bytes()) {
                    break end;
                }
                if window.len() > MAX_UPLOAD_HEAD || !self.more(&mut window, &mut remaining) {
                    return Err("upload failed".into());
                }
            };
            let value = String::from_utf8_lossy(&window[..value_end])
                .trim()
                .to_string();
            fields.push((name, value));
            window.drain(..value_end + 2);
        };
        fields.push(("filename".into(), file_name.trim().to_string()));
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let digest = ring::digest::digest(
            &ring::digest::SHA256,
            format!(
                "{seq}-{}-{:?}",
                std::process::id(),
                std::time::SystemTime::now()
            )
            .as_bytes(),
        );
        let hex: String = digest.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let path = dir.join(format!("pveupload-{hex}"));
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut out = std::fs::File::create(&path).map_err(|e| {
            format!(
                "unable to create temporary upload file '{}': {e}",
                path.display()
            )
        })?;
        let keep = close.len();
        let written = loop {
            if let Some(end) = find(&window, close.as_bytes()) {
                out.write_all(&window[..end])
                    .map_err(|e| format!("write to temporary file failed - {e}"))?;
                break true;
            }
            if window.len() > keep {
                let flush = window.len() - keep;
                out.write_all(&window[..flush])
                    .map_err(|e| format!("write to temporary file failed - {e}"))?;
                window.drain(..flush);
            }
            if !self.more(&mut window, &mut remaining) {
                break false;
            }
        };
        // Whatever follows the closing delimiter is read and dropped.
        while remaining > 0 && self.more(&mut Vec::new(), &mut remaining) {}
        if !written {
            drop(out);
            let _ = std::fs::remove_file(&path);
            return Err("upload failed".into());
        }
        Ok(Upload { fields, file: path })
    }
}

/// One connection's requests, as AnyEvent.pm serves them: `keep_alive` counts the requests
/// left (one less per request header, `push_request_header`), and the answer that leaves
/// none, answers an error (`keep_alive = 0 if $code >= 400`), answers a request asking for
/// `Connection: close` (`process_header`) or comes from an ending worker (`end_loop`) says
/// `Connection: close` and closes it (`response`, `finish_response`).
fn connection(conn: Conn, handler: &dyn Handler, proxy: &Pveproxy, accepted: &Accepted) {
    let mut reader = Reader {
        conn,
        buf: Vec::new(),
    };
    let worker = &accepted.worker;
    let mut keep_alive = accepted.keep_alive;
    loop {
        let (mut req, len) = match reader.read_head() {
            Ok(Some(head)) => head,
            Ok(None) => return,
            Err(status) => {
                let resp = Response::new(status, "bad request", Vec::new());
                let _ = write_response(&mut reader.conn, &resp, false, false);
                return;
            }
        };
        keep_alive = keep_alive.saturating_sub(1);
        proxy.count_request(worker);
        // pveproxy keeps no connection alive after an upload.
        let mut close = req
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let refused = match handler.plan_body(&req, len) {
            BodyPlan::Buffer => match reader.read_body(len) {
                Some(body) => {
                    req.body = body;
                    None
                }
                None => return,
            },
            BodyPlan::Upload { dir, boundary } => {
                close = true;
                match reader.stream_upload(len, &boundary, &dir) {
                    Ok(upload) => {
                        req.upload = Some(upload);
                        None
                    }
                    // file_upload_multipart: `$self->error($reqstate, 500, $err)`.
                    Err(e) => Some(Response::error(500, &e)),
                }
            }
            BodyPlan::Refuse(resp) => Some(resp),
        };
        if let Some(resp) = refused {
            let conn = &mut reader.conn;
            let _ = write_response(conn, &resp, false, false);
            let _ = conn.flush();
            // The body is not read; what the peer still sends is let go for a moment, so that
            // it reads the answer rather than a reset.
            let _ = conn.tcp().shutdown(Shutdown::Write);
            let _ = conn.tcp().set_read_timeout(Some(Duration::from_secs(2)));
            let mut sink = [0u8; 64 * 1024];
            let mut left = len;
            while left > 0 {
                match conn.read(&mut sink) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => left = left.saturating_sub(n),
                }
            }
            let _ = conn.tcp().shutdown(Shutdown::Both);
            return;
        }
        let resp = handler.handle_in(&req, worker, proxy);
        if let Some(upload) = &req.upload {
            // The handler moved what it keeps; the temporary file goes either way.
            let _ = std::fs::remove_file(&upload.file);
        }
        let conn = &mut reader.conn;
        let keep = keep_alive > 0
            && !close
            && resp.status < 400
            && resp.drop_after.is_none()
            && !worker.ending();
        if write_response(conn, &resp, req.method == "HEAD", keep).is_err() || !keep {
            let _ = conn.flush();
            let _ = conn.tcp().shutdown(Shutdown::Both);
            return;
        }
    }
}

/// Writes `resp`; `keep` says whether the connection stays open (`Connection: Keep-Alive`)
/// or closes after it (`Connection: close`).
fn write_response(w: &mut Conn, resp: &Response, head: bool, keep: bool) -> std::io::Result<()> {
    let content_type = resp
        .content_type
        .map(|ct| format!("Content-Type: {ct}\r\n"))
        .unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nServer: pve-api-daemon/3.0\r\nCache-Control: max-age=0\r\nPragma: no-cache\r\nConnection: {}\r\nDate: {}\r\n{content_type}Content-Length: {}\r\n\r\n",
        resp.status,
        resp.reason,
        if keep { "Keep-Alive" } else { "close" },
        // pve-http-server AnyEvent.pm `response`: every answer carries the node's time.
        crate::tools::http_date(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|since| since.as_secs())
                .unwrap_or_default()
        ),
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

/// The path below `/api2/json`, URI-unescaped: pveproxy's `$rel_uri` (AnyEvent.pm
/// `$split_abs_uri`).
pub fn rel_uri(path: &str) -> String {
    let rel = path.strip_prefix("/api2/json").unwrap_or(path);
    let rel = percent_decode(rel, false);
    if rel.is_empty() { "/".into() } else { rel }
}

/// Decodes a form body or a query string as pve-http-server AnyEvent.pm `decode_urlencoded`
/// does: pairs split at `&` and `;`, each split at `=` keeping the first two fields, `+` and
/// `%XX` decoded. `description=` is `Some("")`, PVE's `''`; only a key without `=`
/// (`description`) is `None`: PVE's undef, which passes the schema check as an absent
/// parameter does and reaches the handler as a key without a value.
pub fn decode_urlencoded(text: &str) -> Vec<(String, Option<String>)> {
    text.split(['&', ';'])
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            // `my ($k, $v) = split(/=/, $kv)`: a list assignment splits into at most three
            // fields and keeps trailing empty ones, so `key=` is `''`; only `key` is undef.
            let fields: Vec<&str> = pair.splitn(3, '=').collect();
            let key = percent_decode(fields[0], true);
            let value = fields.get(1).map(|v| percent_decode(v, true));
            (key, value)
        })
        .collect()
}

/// One key of a decoded form, as `decode_urlencoded` leaves it in its hash.
pub enum FormValue {
    /// Given without a value: undef.
    Undef,
    One(String),
    /// Given more than once: an array of the values.
    Many(Vec<String>),
}

/// [`decode_urlencoded`] merged by key as its hash does: a key given again with a value
/// turns into an array (`[$old, $v]`, pushed to after), a key given again without one is
/// undef. Keys keep the order they first came in.
pub fn decode_form(text: &str) -> Vec<(String, FormValue)> {
    let mut out: Vec<(String, FormValue)> = Vec::new();
    for (key, value) in decode_urlencoded(text) {
        let slot = match out.iter().position(|(k, _)| *k == key) {
            Some(i) => &mut out[i].1,
            None => {
                out.push((key, FormValue::Undef));
                &mut out.last_mut().expect("just pushed").1
            }
        };
        *slot = match (std::mem::replace(slot, FormValue::Undef), value) {
            (_, None) => FormValue::Undef,
            (FormValue::Undef, Some(v)) => FormValue::One(v),
            (FormValue::One(old), Some(v)) => FormValue::Many(vec![old, v]),
            (FormValue::Many(mut all), Some(v)) => {
                all.push(v);
                FormValue::Many(all)
            }
        };
    }
    out
}

/// pve-http-server AnyEvent.pm `extract_params`: the parameters of a request from its body
/// (JSON or a form) with its query on top, into `params`; returns the keys given without a
/// value. A repeated key is joined for a `-list` format or refused (400) as RESTHandler.pm
/// and JSONSchema.pm do ([`crate::schema::join_repeated`]).
pub fn extract_params(req: &Request, params: &mut Params) -> Result<Undefined, ApiErr> {
    // pve-http-server AnyEvent.pm extract_params: the body (JSON or a form), then the
    // query on top; an empty form value or a JSON null is undef (a key without a value),
    // a repeated key an array (RESTHandler.pm joins it for a `-list` format).
    let mut given: BTreeMap<String, FormValue> = BTreeMap::new();
    let ctype = req.header("content-type").unwrap_or("");
    if !req.body.is_empty() {
        if ctype.starts_with("application/json") {
            let v: Value = serde_json::from_slice(&req.body)
                .map_err(|e| ApiErr::die(format!("unable to parse JSON body: {e}")))?;
            let text = |v: &Value| match v {
                Value::String(s) => s.clone(),
                Value::Bool(b) => (if *b { "1" } else { "0" }).to_string(),
                other => other.to_string(),
            };
            for (k, v) in v.as_object().into_iter().flatten() {
                let value = match v {
                    Value::Null => FormValue::Undef,
                    Value::Array(items) => FormValue::Many(items.iter().map(text).collect()),
                    other => FormValue::One(text(other)),
                };
                given.insert(k.clone(), value);
            }
        } else {
            given.extend(decode_form(&String::from_utf8_lossy(&req.body)));
        }
    }
    given.extend(decode_form(&req.query));
    let mut undef = Undefined::new();
    let mut arrays = schema::Errors::new();
    for (k, v) in given {
        match v {
            FormValue::Undef => {
                undef.insert(k);
            }
            FormValue::One(v) => {
                params.insert(k, v);
            }
            FormValue::Many(values) => match schema::join_repeated(&k, &values) {
                Ok(joined) => {
                    params.insert(k, joined);
                }
                Err(e) => {
                    arrays.insert(k, e);
                }
            },
        }
    }
    if !arrays.is_empty() {
        return Err(ApiErr::params(arrays));
    }
    // An upload's parameters: the query and the form fields before the file, and the
    // temporary file's name (`$upload_state->{params}`, `tmpfilename`).
    if let Some(upload) = &req.upload {
        for (k, v) in &upload.fields {
            undef.remove(k);
            params.insert(k.clone(), v.clone());
        }
        let file = upload.file.to_string_lossy().into_owned();
        params.insert("tmpfilename".into(), file);
    }
    Ok(undef)
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
